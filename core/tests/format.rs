//! Slice format v1 and the seed-compatible index: round trips and typed,
//! field-naming parse errors.

use shoal_core::format::{
    Index, IndexParseError, SliceParseError, parse_index, parse_slice, render_index, render_slice,
};
use shoal_core::{JobSet, Slice};

fn slice(jobs: &[&str]) -> Slice {
    Slice::new(
        "demo",
        "swarm-worker-0",
        3,
        JobSet::parse(jobs.iter().copied()).unwrap(),
    )
}

const EMPTY_HASH: &str = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

#[test]
fn a_slice_renders_as_readable_block_yaml_in_the_documented_field_order() {
    let rendered = render_slice(&slice(&["stream:foo:new", "stream:cctv0:updated"]));
    let hash = slice(&["stream:foo:new", "stream:cctv0:updated"]).hash;
    assert_eq!(
        rendered,
        format!(
            "format: shoal.dev/slice/v1\nswarm: demo\nmember: swarm-worker-0\nrevision: 3\nhash: {hash}\n\
             jobs:\n- stream:cctv0:updated\n- stream:foo:new\n"
        )
    );
}

#[test]
fn slices_with_awkward_keys_survive_a_round_trip() {
    let awkward = slice(&[
        "- a", "a: b", "#x", "'q'", "\"dq\"", "null", "123", "true", "*a", "  sp", "é", "~",
    ]);
    let parsed = parse_slice(&render_slice(&awkward)).expect("round trip");
    assert_eq!(parsed, awkward);
}

#[test]
fn a_slice_past_the_yaml_parsers_default_node_budget_round_trips() {
    // The parser refuses more than 250,000 nodes by default; a member of a
    // 1,000,000-job Swarm on 4 members holds 250,000 jobs plus the header.
    let keys: Vec<String> = (0..260_000).map(|i| format!("j{i:07}")).collect();
    let large = Slice::new("demo", "worker-0", 1, JobSet::parse(keys).unwrap());
    let parsed = parse_slice(&render_slice(&large)).expect("a large slice parses");
    assert_eq!(parsed.jobs.len(), 260_000);
    assert_eq!(parsed, large);
}

#[test]
fn an_index_past_the_yaml_parsers_default_node_budget_round_trips() {
    let mut workloads = std::collections::BTreeMap::new();
    for member in 0..2 {
        let keys: Vec<shoal_core::JobKey> = (0..130_000)
            .map(|i| shoal_core::JobKey::new(format!("m{member}-j{i:07}")).unwrap())
            .collect();
        workloads.insert(
            format!("worker-{member}"),
            shoal_core::format::Workload {
                jobs: keys,
                version: 1,
            },
        );
    }
    let index = Index {
        workloads,
        version: 1,
    };
    let parsed = parse_index(&render_index(&index)).expect("a large index parses");
    assert_eq!(parsed, index);
}

#[test]
fn an_empty_slice_round_trips() {
    let empty = slice(&[]);
    assert_eq!(empty.hash, EMPTY_HASH);
    assert_eq!(parse_slice(&render_slice(&empty)), Ok(empty));
}

fn document(replace: &str, with: &str) -> String {
    let base = render_slice(&slice(&["a", "b"]));
    assert!(base.contains(replace), "{replace:?} not in {base}");
    base.replacen(replace, with, 1)
}

#[test]
fn each_missing_field_is_named() {
    for field in ["format", "swarm", "member", "revision", "hash", "jobs"] {
        let base = render_slice(&slice(&[]));
        let without: String = base
            .lines()
            .filter(|line| !line.starts_with(&format!("{field}:")))
            .map(|line| format!("{line}\n"))
            .collect();
        assert_eq!(
            parse_slice(&without).unwrap_err().to_string(),
            format!("slice field `{field}` is missing")
        );
    }
}

#[test]
fn a_wrong_format_marker_is_rejected() {
    let error = parse_slice(&document("shoal.dev/slice/v1", "shoal.dev/slice/v9")).unwrap_err();
    assert_eq!(
        error.to_string(),
        "slice field `format` must be \"shoal.dev/slice/v1\", got \"shoal.dev/slice/v9\""
    );
}

#[test]
fn a_non_numeric_revision_is_rejected() {
    let error = parse_slice(&document("revision: 3", "revision: three")).unwrap_err();
    assert_eq!(
        error,
        SliceParseError::WrongType {
            field: "revision",
            expected: "a non-negative integer"
        }
    );
    assert_eq!(
        error.to_string(),
        "slice field `revision` must be a non-negative integer"
    );
    let negative = parse_slice(&document("revision: 3", "revision: -1")).unwrap_err();
    assert_eq!(
        negative.to_string(),
        "slice field `revision` must be a non-negative integer"
    );
}

#[test]
fn a_malformed_hash_is_rejected() {
    let error = parse_slice(&document("sha256:", "md5:")).unwrap_err();
    assert!(
        error.to_string().starts_with(
            "slice field `hash` must be \"sha256:\" followed by 64 lowercase hex digits, got \"md5:"
        ),
        "{error}"
    );
}

#[test]
fn a_hand_edited_job_list_fails_the_hash_check() {
    let edited = document("- b\n", "- b\n- c\n");
    let error = parse_slice(&edited).unwrap_err();
    let expected_hash = slice(&["a", "b"]).hash;
    let computed = slice(&["a", "b", "c"]).hash;
    assert_eq!(
        error.to_string(),
        format!("slice field `hash` is {expected_hash} but the jobs hash to {computed}")
    );
}

#[test]
fn unsorted_duplicate_or_invalid_jobs_are_rejected_naming_the_field() {
    let unsorted = document("- a\n- b\n", "- b\n- a\n");
    assert_eq!(
        parse_slice(&unsorted).unwrap_err().to_string(),
        "slice field `jobs` is not sorted: jobs[1] \"a\" comes before its predecessor"
    );
    let duplicate = document("- a\n- b\n", "- a\n- a\n");
    assert_eq!(
        parse_slice(&duplicate).unwrap_err().to_string(),
        "slice field `jobs`: invalid job list (1 problem): jobs[1] \"a\": duplicate of jobs[0]"
    );
    let empty_key = document("- a\n", "- ''\n- a\n");
    assert_eq!(
        parse_slice(&empty_key).unwrap_err().to_string(),
        "slice field `jobs`: invalid job list (1 problem): jobs[0] \"\": empty key"
    );
    let not_a_list = document("jobs:\n- a\n- b\n", "jobs: a\n");
    assert_eq!(
        parse_slice(&not_a_list).unwrap_err().to_string(),
        "slice field `jobs` must be a list of strings"
    );
}

#[test]
fn text_that_is_not_a_yaml_mapping_is_rejected() {
    for text in ["- just\n- a list\n", "{ unclosed", "plain scalar"] {
        let error = parse_slice(text).unwrap_err();
        assert!(
            matches!(error, SliceParseError::Yaml { .. }),
            "{text:?}: {error:?}"
        );
        assert!(
            error
                .to_string()
                .starts_with("slice document is not a YAML mapping: ")
        );
    }
}

#[test]
fn unknown_fields_are_ignored_for_forward_compatibility() {
    let extended = document("jobs:", "note: added later\njobs:");
    assert_eq!(parse_slice(&extended), Ok(slice(&["a", "b"])));
}

#[test]
fn the_seed_operators_index_document_parses() {
    // As k8s-swarm wrote it (indented list items, unsorted jobs).
    let seed = "workloads:\n  swarm-worker-0:\n    jobs:\n      - stream:xxrtve1\n      - stream:cars:new\n    version: 0\n  swarm-worker-1:\n    jobs:\n      - stream:cars:updated\n    version: 0\nversion: 0\n";
    let index = parse_index(seed).expect("seed index parses");
    assert_eq!(index.version, 0);
    let jobs: Vec<String> = index.workloads["swarm-worker-0"]
        .jobs
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(jobs, vec!["stream:cars:new", "stream:xxrtve1"]);
    assert_eq!(parse_index(&render_index(&index)), Ok(index));
}

#[test]
fn index_errors_name_the_field_path() {
    assert_eq!(
        parse_index("workloads: {}\n").unwrap_err().to_string(),
        "index field `version` is missing"
    );
    assert_eq!(
        parse_index("version: 1\n").unwrap_err().to_string(),
        "index field `workloads` is missing"
    );
    assert_eq!(
        parse_index("workloads:\n  w-0:\n    version: 1\nversion: 1\n")
            .unwrap_err()
            .to_string(),
        "index field `workloads.w-0.jobs` is missing"
    );
    assert_eq!(
        parse_index("workloads:\n  w-0:\n    jobs: [a]\n    version: x\nversion: 1\n")
            .unwrap_err()
            .to_string(),
        "index field `workloads.w-0.version` must be a non-negative integer"
    );
    let duplicate = parse_index("workloads:\n  w-0:\n    jobs: [a, a]\nversion: 1\n").unwrap_err();
    assert!(matches!(duplicate, IndexParseError::InvalidJobs { .. }));
    assert_eq!(
        duplicate.to_string(),
        "index field `workloads.w-0.jobs`: invalid job list (1 problem): jobs[1] \"a\": duplicate of jobs[0]"
    );
}

#[test]
fn an_index_renders_in_the_seed_layout() {
    let mut slices = std::collections::BTreeMap::new();
    slices.insert(
        shoal_core::MemberId::new("w", 0),
        Slice::new("demo", "w-0", 2, JobSet::parse(["b", "a"]).unwrap()),
    );
    let index = Index::from_slices(&slices, 5);
    assert_eq!(
        render_index(&index),
        "workloads:\n  w-0:\n    jobs:\n    - a\n    - b\n    version: 2\nversion: 5\n"
    );
}

mod large_slices {
    use shoal_core::format::{
        DecodeError, EncodedSlice, MAX_BINARY_BYTES, decode_slice, encode_slice,
        encode_slice_with_limits, part_data_key,
    };
    use shoal_core::{JobSet, Slice};

    fn big_slice(count: usize) -> Slice {
        let jobs =
            JobSet::parse((0..count).map(|i| format!("stream:camera-{i:08}:updated"))).unwrap();
        Slice::new("demo", "swarm-worker-0", 9, jobs)
    }

    #[test]
    fn a_small_slice_is_stored_as_plain_yaml() {
        let slice = big_slice(10);
        assert!(matches!(encode_slice(&slice), EncodedSlice::Plain(_)));
        assert_eq!(decode_slice(&encode_slice(&slice)), Ok(slice));
    }

    #[test]
    fn a_slice_over_the_configmap_limit_is_gzipped_and_decodes_back() {
        // ~40 bytes per line × 40 000 ≈ 1.6 MB of YAML.
        let slice = big_slice(40_000);
        let encoded = encode_slice(&slice);
        let EncodedSlice::Gzip(bytes) = &encoded else {
            panic!("expected gzip, got {encoded:?}");
        };
        assert!(bytes.len() <= MAX_BINARY_BYTES);
        assert_eq!(decode_slice(&encoded), Ok(slice));
    }

    #[test]
    fn a_slice_too_big_even_gzipped_is_split_into_parts_that_reassemble() {
        let slice = big_slice(5_000);
        let encoded = encode_slice_with_limits(&slice, 1024, 4096);
        let EncodedSlice::Split(parts) = &encoded else {
            panic!("expected parts, got {encoded:?}");
        };
        assert!(parts.len() > 1);
        assert!(parts.iter().all(|part| part.len() <= 4096));
        assert_eq!(decode_slice(&encoded), Ok(slice));
        assert_eq!(part_data_key(2), "slice.yaml.part2");
    }

    #[test]
    fn corrupt_or_missing_parts_are_reported() {
        let slice = big_slice(5_000);
        let EncodedSlice::Split(mut parts) = encode_slice_with_limits(&slice, 1024, 4096) else {
            panic!("expected parts");
        };
        assert_eq!(
            decode_slice(&EncodedSlice::Split(Vec::new())),
            Err(DecodeError::NoParts)
        );
        parts.remove(1);
        let error = decode_slice(&EncodedSlice::Split(parts)).unwrap_err();
        assert!(matches!(error, DecodeError::Gzip { .. }), "{error:?}");
        assert!(
            error
                .to_string()
                .starts_with("slice gzip data is corrupt: ")
        );
        assert!(matches!(
            decode_slice(&EncodedSlice::Gzip(b"not gzip".to_vec())),
            Err(DecodeError::Gzip { .. })
        ));
    }
}
