//! Revoke-then-grant across several sidecars in exec mode, with the test
//! playing the controller's part of the acknowledgement protocol
//! (ARCHITECTURE.md): write the reduced slices of members that lose jobs,
//! wait for their acknowledgement on the Lease, then write the slices of
//! members that gain jobs. A seeded schedule also kills and restarts
//! sidecars, drops every watch and injects API errors between moves. Each
//! job's process logs `start`/`stop` with a timestamp; an oracle checks that
//! no job ever ran twice at once and that every job runs at the end, and
//! reports the handoff gap. (The full ownership oracle with the real
//! controller belongs to the sandbox's end-to-end tests.) Against
//! `SHOAL_TEST_KUBECONFIG` the same schedule runs with sidecar kills only:
//! dropped watches and API errors need the emulator's fault injection.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use common::*;
use shoal_worker::{Settings, SliceView, Worker};

const LIMIT: Duration = Duration::from_secs(20);
const MEMBERS: [&str; 3] = ["pool-0", "pool-1", "pool-2"];

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

/// One process event: when (ns since the epoch), start or stop, job, member, pid.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Event {
    at: u128,
    start: bool,
    job: String,
    member: String,
    pid: u32,
}

fn read_log(log: &Path) -> Vec<Event> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(fields.len(), 5, "log line {line:?}");
            Event {
                at: fields[0].parse().expect("timestamp"),
                start: fields[1] == "start",
                job: fields[2].into(),
                member: fields[3].into(),
                pid: fields[4].parse().expect("pid"),
            }
        })
        .collect()
}

/// Processes started and not stopped, given extra (synthetic) events.
fn open_processes(log: &Path, extra: &[Event]) -> BTreeMap<u32, Event> {
    let mut events = read_log(log);
    events.extend(extra.iter().cloned());
    events.sort();
    let mut open = BTreeMap::new();
    for event in events {
        if event.start {
            open.insert(event.pid, event);
        } else {
            open.remove(&event.pid);
        }
    }
    open
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos()
}

fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

async fn start_worker(cluster: &Cluster, member: &str, template: &str) -> Worker {
    let mut settings = Settings::for_member(member, cluster.namespace());
    settings.exec = Some(template.to_string());
    settings.stop_grace = Duration::from_secs(5);
    settings.lease_duration = Duration::from_secs(6);
    settings.fence_margin = Duration::from_secs(1);
    Worker::start(cluster.client(), settings).await.unwrap()
}

#[tokio::test]
async fn moved_jobs_never_run_on_two_members_at_once_through_kills_dropped_watches_and_api_errors()
{
    let cluster = Cluster::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("jobs.log");
    let template = format!(
        "echo $(date +%s%N) start $SHOAL_JOB $SHOAL_MEMBER $$ >> {log}; \
         trap 'echo $(date +%s%N) stop $SHOAL_JOB $SHOAL_MEMBER $$ >> {log}; exit 0' TERM; \
         sleep 1000 & wait",
        log = log.display()
    );
    let mut workers: BTreeMap<String, Worker> = BTreeMap::new();
    for member in MEMBERS {
        workers.insert(
            member.to_string(),
            start_worker(&cluster, member, &template).await,
        );
    }
    // Processes SIGKILLed with their sidecar leave no `stop` line: the test
    // records when they were seen dead.
    let mut killed: Vec<Event> = Vec::new();

    // Revision 1: 24 jobs dealt round-robin.
    let jobs: Vec<String> = (0..24).map(|index| format!("stream:{index:02}")).collect();
    let mut owners: Owners = MEMBERS
        .iter()
        .map(|member| (member.to_string(), BTreeSet::new()))
        .collect();
    for (index, job) in jobs.iter().enumerate() {
        owners
            .get_mut(MEMBERS[index % MEMBERS.len()])
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
    let mut current: BTreeMap<String, SliceView> = owners
        .iter()
        .map(|(member, owned)| (member.clone(), member_slice(member, revision, owned)))
        .collect();

    // A short schedule by default; SHOAL_HANDOFF_ROUNDS / SHOAL_HANDOFF_SEED
    // run a long one (e.g. 300 rounds) or replay another seed.
    let rounds: usize = std::env::var("SHOAL_HANDOFF_ROUNDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(8);
    let seed: u64 = std::env::var("SHOAL_HANDOFF_SEED")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(0x5eed_0005);
    let mut schedule = Schedule(seed.max(1));
    let (mut kills, mut drops, mut errors) = (0, 0, 0);
    for _ in 0..rounds {
        // Chaos between moves.
        if schedule.below(3) == 0 {
            kills += 1;
            let member = MEMBERS[schedule.below(MEMBERS.len())].to_string();
            drop(workers.remove(&member));
            // Read the log only once the member's processes are all dead: one
            // may have written its start line just before the kill.
            let victims: Vec<Event> =
                eventually("the killed sidecar's processes dead", LIMIT, || async {
                    let open: Vec<Event> = open_processes(&log, &killed)
                        .into_values()
                        .filter(|event| event.member == member)
                        .collect();
                    open.iter().all(|event| is_dead(event.pid)).then_some(open)
                })
                .await;
            let at = now_ns();
            killed.extend(victims.into_iter().map(|event| Event {
                at,
                start: false,
                ..event
            }));
            workers.insert(
                member.clone(),
                start_worker(&cluster, &member, &template).await,
            );
        }
        // Dropped watches and API errors are the emulator's fault injection;
        // on a real cluster the draws still happen so a seed means the same
        // moves, but only sidecar kills are applied.
        if schedule.below(3) == 0
            && let Some(faults) = cluster.faults()
        {
            drops += 1;
            faults.drop_all_watches();
        }
        if schedule.below(3) == 0
            && let Some(faults) = cluster.faults()
        {
            errors += 1;
            faults.fail_next(3, None, None, 500);
        }

        // Move a few random jobs to random other members.
        revision += 1;
        let mut next = owners.clone();
        for _ in 0..4 {
            let job = &jobs[schedule.below(jobs.len())];
            let from = next
                .iter()
                .find(|(_, owned)| owned.contains(job))
                .map(|(member, _)| member.clone())
                .unwrap();
            let to = MEMBERS[schedule.below(MEMBERS.len())].to_string();
            next.get_mut(&from).unwrap().remove(job);
            next.get_mut(&to).unwrap().insert(job.clone());
        }
        // Revoke: a member that loses jobs first gets only what it keeps.
        let mut revoked = Vec::new();
        for member in MEMBERS {
            let kept: BTreeSet<String> = owners[member]
                .intersection(&next[member])
                .cloned()
                .collect();
            if kept != owners[member] {
                let reduced = member_slice(member, revision, &kept);
                write_slice(&cluster.client(), cluster.namespace(), &reduced).await;
                current.insert(member.to_string(), reduced.clone());
                revoked.push(reduced);
            }
        }
        for reduced in &revoked {
            wait_acked(&cluster, &reduced.member, reduced).await;
        }
        // Grant.
        revision += 1;
        for member in MEMBERS {
            if next[member]
                != current[member]
                    .jobs
                    .iter()
                    .cloned()
                    .collect::<BTreeSet<_>>()
            {
                let granted = member_slice(member, revision, &next[member]);
                write_slice(&cluster.client(), cluster.namespace(), &granted).await;
                current.insert(member.to_string(), granted);
            }
        }
        for slice in current.values() {
            wait_acked(&cluster, &slice.member, slice).await;
        }
        owners = next;
    }
    if cluster.is_emulated() {
        assert!(
            kills > 0 && drops > 0 && errors > 0,
            "the schedule exercised every fault"
        );
    } else {
        assert!(kills > 0, "the schedule killed sidecars");
    }

    // Every job runs at the end, exactly once, on its owner.
    let expected: BTreeSet<(String, String)> = owners
        .iter()
        .flat_map(|(member, owned)| owned.iter().map(move |job| (job.clone(), member.clone())))
        .collect();
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let running: Vec<(String, String)> = open_processes(&log, &killed)
            .into_values()
            .map(|event| (event.job, event.member))
            .collect();
        let running_set: BTreeSet<(String, String)> = running.iter().cloned().collect();
        if running.len() == jobs.len() && running_set == expected {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            let missing: Vec<_> = expected.difference(&running_set).collect();
            let extra: Vec<_> = open_processes(&log, &killed)
                .into_values()
                .map(|event| {
                    let state = if is_dead(event.pid) { "dead" } else { "alive" };
                    (event.job, event.member, event.pid, state)
                })
                .collect();
            panic!(
                "every owned job should run once: {} running, missing {missing:?}, open processes {extra:?}",
                running.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    for (_, worker) in workers {
        worker.stop().await.unwrap();
    }

    // The oracle: per job, process lifetimes never overlap.
    let mut events = read_log(&log);
    events.extend(killed);
    events.sort();
    let mut running: BTreeMap<String, Event> = BTreeMap::new();
    let mut released: BTreeMap<String, (u128, String)> = BTreeMap::new();
    let mut gaps = Vec::new();
    for event in events {
        if event.start {
            if let Some(holder) = running.get(&event.job) {
                panic!(
                    "{} started on {} (pid {}) while {} (pid {}) still ran it",
                    event.job, event.member, event.pid, holder.member, holder.pid
                );
            }
            if let Some((at, from)) = released.get(&event.job)
                && *from != event.member
            {
                gaps.push(event.at - at);
            }
            running.insert(event.job.clone(), event);
        } else {
            let holder = running.remove(&event.job);
            assert_eq!(
                holder.map(|holder| holder.pid),
                Some(event.pid),
                "{} stopped by a process that did not run it",
                event.job
            );
            released.insert(event.job.clone(), (event.at, event.member));
        }
    }
    gaps.sort();
    assert!(!gaps.is_empty(), "the schedule moved jobs");
    let ms = |ns: u128| ns as f64 / 1e6;
    println!(
        "seed {seed}, {rounds} rounds: handoff gap over {} moves ({kills} sidecar kills, {drops} watch drops, {errors} API error bursts): p50 {:.1} ms, p99 {:.1} ms",
        gaps.len(),
        ms(gaps[gaps.len() / 2]),
        ms(gaps[(gaps.len() * 99 / 100).min(gaps.len() - 1)])
    );
}
