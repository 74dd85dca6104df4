//! Under `reload: Restart`, what `kubectl shoal diff` says will restart is what
//! restarts: for a new Swarm, scale ups (previewed with `--replicas` before the
//! scale), job additions, replacements and removals, and a scale down, each pod's
//! restarts (new uids seen) equal the preview's count, the pending summary's
//! `restartsNeeded` is their sum, and so are the increase of
//! `shoal_members_restarted_total` and the MemberRestarted Events.

use crate::common;
use crate::plugin_common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use shoal_controller::Settings;
use shoal_controller::plugin::preview::DiffReport;

use common::{Env, eventually, job_keys, swarm_yaml};
use plugin_common::shoal_json;

const WAIT: Duration = Duration::from_secs(60);
const SPEC: &str =
    "  reload: Restart\n  rollout:\n    maxUnavailable: 2\n  approval:\n    policy: Manual\n";

/// `shoal_members_restarted_total` as the controller's `/metrics` reports it now.
async fn restarted_metric(address: SocketAddr) -> u64 {
    let response = shoal_emulator::http_client::get(address, "/metrics")
        .await
        .expect("the metrics server answers")
        .body;
    response
        .lines()
        .find_map(|line| line.strip_prefix("shoal_members_restarted_total "))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .map(|value| value as u64)
        .unwrap_or_else(|| panic!("no shoal_members_restarted_total in {response}"))
}

/// How many MemberRestarted Events the namespace holds (a series counts its repeats).
async fn restarted_events(env: &Env) -> u64 {
    let counts = env
        .kubectl(&[
            "get",
            "events",
            "-o",
            r#"jsonpath={range .items[?(@.reason=="MemberRestarted")]}{.count}{"\n"}{end}"#,
        ])
        .await;
    counts
        .lines()
        .map(|count| count.trim().parse::<u64>().unwrap_or(1))
        .sum()
}

/// Approves the pending revision, waits until it is in force, and checks that every pod
/// restarted exactly as `previewed` said (a preview of the change taken before it was
/// made, or `None`: the preview of the pending revision), and that the metric and the
/// MemberRestarted Events count the same restarts. Returns the restarts done.
async fn approve_and_compare(
    env: &Env,
    metrics: SocketAddr,
    step: &str,
    created: &[&str],
    taken_before: Option<DiffReport>,
) -> BTreeMap<String, u32> {
    let pending = eventually(&format!("{step}: a pending revision"), WAIT, || async {
        env.swarm("demo").await.status?.pending_revision
    })
    .await;
    let preview: DiffReport = shoal_json(env, &["diff", "demo"]).await;
    assert_eq!(preview.revision, Some(pending.revision), "{step}");
    let restarts = |report: &DiffReport| -> BTreeMap<String, u32> {
        report
            .restarts
            .iter()
            .map(|restart| (restart.pod.clone(), restart.times))
            .collect()
    };
    let previewed = restarts(&preview);
    if let Some(before) = &taken_before {
        assert_eq!(
            restarts(before),
            previewed,
            "{step}: the preview taken before the change (left) and the pending one (right) disagree"
        );
    }
    assert_eq!(
        u64::from(previewed.values().sum::<u32>()),
        pending.summary.restarts_needed,
        "{step}: the pending summary and the preview disagree"
    );
    let uids_before = env.pod_uids().await;
    let seen = common::record_pod_uids(env);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let metric_before = restarted_metric(metrics).await;
    let events_before = restarted_events(env).await;
    env.approve_pending("demo").await;
    env.in_force("demo", pending.revision, WAIT).await;
    // Nothing more happens after convergence.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let seen = seen.lock().unwrap().clone();
    let mut done = BTreeMap::new();
    for (pod, uids) in &seen {
        let restarts = match uids_before.get(pod) {
            Some(before) => uids.iter().filter(|uid| *uid != before).count(),
            // A pod the scale up created: its first uid is its creation.
            None if created.contains(&pod.as_str()) => uids.len().saturating_sub(1),
            None => uids.len(),
        };
        if restarts > 0 {
            done.insert(pod.clone(), restarts as u32);
        }
    }
    if done != previewed {
        eprintln!("PREVIEW {:#?}", preview.members);
        eprintln!("EVENTS {}", env.event_messages().await);
    }
    assert_eq!(
        done, previewed,
        "{step}: restarts done (left) vs previewed (right)"
    );
    let total = u64::from(done.values().sum::<u32>());
    assert_eq!(
        restarted_metric(metrics).await - metric_before,
        total,
        "{step}: shoal_members_restarted_total vs pod uid changes"
    );
    let events = eventually(
        &format!("{step}: the MemberRestarted Events"),
        WAIT,
        || async {
            let events = restarted_events(env).await - events_before;
            (events >= total).then_some(events)
        },
    )
    .await;
    assert_eq!(
        events, total,
        "{step}: MemberRestarted Events vs pod uid changes"
    );
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_preview_the_summary_the_metric_and_the_events_count_exactly_the_restarts_done() {
    let env = Env::start().await;
    let metrics = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
        probe.local_addr().expect("address")
    };
    let controller = env.start_controller_with(Settings {
        namespace: Some(env.namespace.clone()),
        metrics_address: Some(metrics),
        resync: Duration::from_secs(5),
        ..Settings::default()
    });
    eventually("the metrics server answers", WAIT, || async {
        tokio::net::TcpStream::connect(metrics).await.ok()
    })
    .await;
    env.pool("worker", "demo", 3).await;
    env.ready_pool("worker", 3).await;
    let mut twice = Vec::new();
    let mut record = |step: &str, done: BTreeMap<String, u32>| {
        twice.extend(
            done.into_iter()
                .filter(|(_, times)| *times == 2)
                .map(|(pod, _)| format!("{step}: {pod}")),
        );
    };

    env.apply(&swarm_yaml("demo", &job_keys(27), SPEC)).await;
    let done = approve_and_compare(&env, metrics, "a new Swarm", &[], None).await;
    record("a new Swarm", done);

    let before: DiffReport = shoal_json(&env, &["diff", "demo", "--replicas", "4"]).await;
    env.kubectl(&["scale", "statefulset", "worker", "--replicas=4"])
        .await;
    env.ready_pool("worker", 4).await;
    let step = "scale 3 -> 4";
    let done = approve_and_compare(&env, metrics, step, &["worker-3"], Some(before)).await;
    record(step, done);

    env.apply(&swarm_yaml("demo", &job_keys(30), SPEC)).await;
    let done = approve_and_compare(&env, metrics, "3 jobs added", &[], None).await;
    record("3 jobs added", done);

    // The issue's case: the preview of 4 -> 5 taken before the scale.
    let before: DiffReport = shoal_json(&env, &["diff", "demo", "--replicas", "5"]).await;
    env.kubectl(&["scale", "statefulset", "worker", "--replicas=5"])
        .await;
    env.ready_pool("worker", 5).await;
    let step = "scale 4 -> 5";
    let done = approve_and_compare(&env, metrics, step, &["worker-4"], Some(before)).await;
    record(step, done);

    // Members lose removed jobs and gain new ones.
    let replaced: Vec<String> = job_keys(36)[6..].to_vec();
    env.apply(&swarm_yaml("demo", &replaced, SPEC)).await;
    let step = "6 jobs replaced";
    let done = approve_and_compare(&env, metrics, step, &[], None).await;
    record(step, done);

    let removed: Vec<String> = replaced[4..].to_vec();
    env.apply(&swarm_yaml("demo", &removed, SPEC)).await;
    let done = approve_and_compare(&env, metrics, "4 jobs removed", &[], None).await;
    record("4 jobs removed", done);

    env.kubectl(&["scale", "statefulset", "worker", "--replicas=3"])
        .await;
    let done = approve_and_compare(&env, metrics, "scale 5 -> 3", &[], None).await;
    record("scale 5 -> 3", done);

    assert!(
        !twice.is_empty(),
        "no member both lost and gained jobs (restarted twice) in any step"
    );
    controller.stop().await;
    env.finish().await;
}
