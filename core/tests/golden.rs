//! Golden slices: the seed's 27 streams on 2 and 3 members with the default
//! strategy (and on 3 members with `jump` and `ring`) give exactly the
//! committed, reviewed files in `tests/fixtures/golden/`. A change to the hash, the strategy or the format
//! shows up here as a byte difference.
//!
//! After an intended change, regenerate with `SHOAL_BLESS=1 cargo test -p
//! shoal-core --test golden` and review the diff before committing.

use std::path::PathBuf;

use shoal_core::format::{Index, parse_index, parse_slice, render_index, render_slice};
use shoal_core::member::pool_members;
use shoal_core::seed::{SEED_POOL, SEED_STREAMS};
use shoal_core::{JobSet, Strategy, assign};

const SWARM: &str = "swarm";
const REVISION: u64 = 1;

fn golden_dir(members: u32, strategy: &Strategy) -> PathBuf {
    let suffix = match strategy {
        Strategy::Bounded { .. } => String::new(),
        other => format!("-{}", other.name()),
    };
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/golden")
        .join(format!("seed-{members}-members{suffix}"))
}

/// The documents for the seed on `members` members: (file name, bytes).
fn documents(members: u32, strategy: &Strategy) -> Vec<(String, String)> {
    let jobs = JobSet::parse(SEED_STREAMS).expect("the seed streams are valid");
    let assignment =
        assign(&jobs, &pool_members(SEED_POOL, members), strategy).expect("members are available");
    let slices = assignment.slices(SWARM, REVISION);
    let mut documents: Vec<(String, String)> = slices
        .values()
        .map(|slice| (format!("{}.slice.yaml", slice.member), render_slice(slice)))
        .collect();
    documents.push((
        "config.yml".to_owned(),
        render_index(&Index::from_slices(&slices, REVISION)),
    ));
    documents
}

fn check(members: u32, strategy: &Strategy) {
    let dir = golden_dir(members, strategy);
    let bless = std::env::var_os("SHOAL_BLESS").is_some();
    if bless {
        std::fs::create_dir_all(&dir).expect("create golden dir");
    }
    for (name, rendered) in documents(members, strategy) {
        let path = dir.join(&name);
        if bless {
            std::fs::write(&path, &rendered).expect("write golden file");
            continue;
        }
        let committed = std::fs::read_to_string(&path)
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        assert_eq!(
            rendered,
            committed,
            "{} differs from the committed file",
            path.display()
        );
        // The committed documents also parse back to what was rendered.
        if name == "config.yml" {
            let index = parse_index(&committed).expect("golden index parses");
            assert_eq!(render_index(&index), committed);
        } else {
            let slice = parse_slice(&committed).expect("golden slice parses");
            assert_eq!(render_slice(&slice), committed);
        }
    }
}

#[test]
fn the_seed_streams_on_two_members_match_the_golden_slices() {
    check(2, &Strategy::default());
}

#[test]
fn the_seed_streams_on_three_members_match_the_golden_slices() {
    check(3, &Strategy::default());
}

#[test]
fn jump_and_ring_on_three_members_match_their_golden_slices() {
    check(3, &Strategy::Jump);
    check(3, &Strategy::Ring { vnodes: 128 });
}

#[test]
fn the_golden_slices_cover_every_seed_stream_exactly_once() {
    for members in [2, 3] {
        let mut seen: Vec<String> = Vec::new();
        for (name, rendered) in documents(members, &Strategy::default()) {
            if name.ends_with(".slice.yaml") {
                let slice = parse_slice(&rendered).expect("rendered slice parses");
                seen.extend(slice.jobs.iter().map(ToString::to_string));
            }
        }
        seen.sort();
        let mut expected: Vec<String> = SEED_STREAMS.iter().map(|s| s.to_string()).collect();
        expected.sort();
        assert_eq!(seen, expected, "{members} members");
    }
}
