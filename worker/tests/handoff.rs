//! Revoke-then-grant across several sidecars in exec mode, with the test
//! playing the controller's part of the acknowledgement protocol
//! (ARCHITECTURE.md): write the reduced slices of members that lose jobs,
//! wait for their acknowledgement on the Lease, then write the slices of
//! members that gain jobs. Each job's process logs `start`/`stop` with a
//! timestamp; an oracle checks that no job ever ran twice at once and that
//! every job runs at the end. (The full ownership oracle with the real
//! controller lives in the sandbox's end-to-end tests.)

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use common::*;
use shoal_worker::{Settings, SliceView, Worker};

const LIMIT: Duration = Duration::from_secs(20);

/// A small deterministic generator (xorshift64*), so a failing schedule can be replayed.
struct Schedule(u64);

impl Schedule {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }
}

type Owners = BTreeMap<String, BTreeSet<String>>;

fn member_slice(member: &str, revision: u64, jobs: &BTreeSet<String>) -> SliceView {
    let keys: Vec<&str> = jobs.iter().map(String::as_str).collect();
    slice(member, revision, &keys)
}

async fn wait_acked(cluster: &Cluster, member: &str, expected: &SliceView) {
    eventually(
        &format!("{member} acks revision {}", expected.revision),
        LIMIT,
        || async {
            lease_ack(&cluster.client(), cluster.namespace(), member)
                .await
                .filter(|(revision, hash)| *revision == expected.revision && *hash == expected.hash)
        },
    )
    .await;
}

/// One log line: (timestamp ns, "start"/"stop", job, member).
fn read_log(log: &Path) -> Vec<(u128, String, String, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(fields.len(), 4, "log line {line:?}");
            (
                fields[0].parse().expect("timestamp"),
                fields[1].into(),
                fields[2].into(),
                fields[3].into(),
            )
        })
        .collect()
}

#[tokio::test]
async fn moved_jobs_never_run_on_two_members_at_once() {
    let cluster = Cluster::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("jobs.log");
    let members = ["pool-0", "pool-1", "pool-2"];
    let template = format!(
        "echo $(date +%s%N) start $SHOAL_JOB $SHOAL_MEMBER >> {log}; \
         trap 'echo $(date +%s%N) stop $SHOAL_JOB $SHOAL_MEMBER >> {log}; exit 0' TERM; \
         sleep 1000 & wait",
        log = log.display()
    );
    let mut workers = Vec::new();
    for member in members {
        let mut settings = Settings::for_member(member, cluster.namespace());
        settings.exec = Some(template.clone());
        settings.stop_grace = Duration::from_secs(5);
        workers.push(Worker::start(cluster.client(), settings).await.unwrap());
    }

    // Revision 1: 24 jobs dealt round-robin.
    let jobs: Vec<String> = (0..24).map(|index| format!("stream:{index:02}")).collect();
    let mut owners: Owners = members
        .iter()
        .map(|member| (member.to_string(), BTreeSet::new()))
        .collect();
    for (index, job) in jobs.iter().enumerate() {
        owners
            .get_mut(members[index % members.len()])
            .unwrap()
            .insert(job.clone());
    }
    let mut revision = 1;
    for (member, owned) in &owners {
        write_slice(
            &cluster.client(),
            cluster.namespace(),
            &member_slice(member, revision, owned),
        )
        .await;
    }
    for (member, owned) in &owners {
        wait_acked(&cluster, member, &member_slice(member, revision, owned)).await;
    }

    let mut schedule = Schedule(0x5eed_0005);
    for _ in 0..6 {
        revision += 1;
        // Move a few random jobs to random other members.
        let mut next = owners.clone();
        for _ in 0..4 {
            let job = &jobs[schedule.below(jobs.len())];
            let from = next
                .iter()
                .find(|(_, owned)| owned.contains(job))
                .map(|(member, _)| member.clone())
                .unwrap();
            let to = members[schedule.below(members.len())].to_string();
            next.get_mut(&from).unwrap().remove(job);
            next.get_mut(&to).unwrap().insert(job.clone());
        }
        let losers: Vec<&String> = owners
            .keys()
            .filter(|member| !owners[*member].is_subset(&next[*member]))
            .collect();
        // Revoke: a loser's interim slice keeps only what it keeps.
        for member in &losers {
            let kept: BTreeSet<String> = owners[*member]
                .intersection(&next[*member])
                .cloned()
                .collect();
            let reduced = member_slice(member, revision, &kept);
            write_slice(&cluster.client(), cluster.namespace(), &reduced).await;
        }
        for member in &losers {
            let kept: BTreeSet<String> = owners[*member]
                .intersection(&next[*member])
                .cloned()
                .collect();
            wait_acked(&cluster, member, &member_slice(member, revision, &kept)).await;
        }
        // Grant.
        revision += 1;
        for (member, owned) in &next {
            if owned != &owners[member] {
                write_slice(
                    &cluster.client(),
                    cluster.namespace(),
                    &member_slice(member, revision, owned),
                )
                .await;
            }
        }
        for (member, owned) in &next {
            if owned != &owners[member] {
                wait_acked(&cluster, member, &member_slice(member, revision, owned)).await;
            }
        }
        owners = next;
    }

    // Every job runs at the end, on its owner.
    let expected_running: BTreeSet<(String, String)> = owners
        .iter()
        .flat_map(|(member, owned)| owned.iter().map(move |job| (job.clone(), member.clone())))
        .collect();
    let running = eventually("every owned job running", LIMIT, || async {
        let mut running = BTreeSet::new();
        for (_, event, job, member) in read_log(&log) {
            if event == "start" {
                running.insert((job, member));
            } else {
                running.remove(&(job, member));
            }
        }
        (running == expected_running).then_some(running)
    })
    .await;
    assert_eq!(running.len(), jobs.len());

    for worker in workers {
        worker.stop().await.unwrap();
    }

    // The oracle: per job, intervals never overlap; gaps are reported.
    let mut by_job: BTreeMap<String, Vec<(u128, String, String)>> = BTreeMap::new();
    for (at, event, job, member) in read_log(&log) {
        by_job.entry(job).or_default().push((at, event, member));
    }
    let mut gaps = Vec::new();
    for (job, mut events) in by_job {
        events.sort();
        let mut holder: Option<String> = None;
        let mut released_at: Option<u128> = None;
        for (at, event, member) in events {
            if event == "start" {
                assert!(
                    holder.is_none(),
                    "{job} started on {member} while {holder:?} still ran it"
                );
                if let Some(released) = released_at {
                    gaps.push(at - released);
                }
                holder = Some(member);
            } else {
                assert_eq!(
                    holder.as_deref(),
                    Some(member.as_str()),
                    "{job} stopped on {member} which did not run it"
                );
                holder = None;
                released_at = Some(at);
            }
        }
    }
    gaps.sort();
    assert!(!gaps.is_empty(), "the schedule moved jobs");
    let ms = |ns: u128| ns as f64 / 1e6;
    println!(
        "handoff gap over {} moves: p50 {:.1} ms, p99 {:.1} ms",
        gaps.len(),
        ms(gaps[gaps.len() / 2]),
        ms(gaps[(gaps.len() * 99 / 100).min(gaps.len() - 1)])
    );
}
