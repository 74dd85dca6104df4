//! Self-fencing: a sidecar cut off from the API server stops every job before
//! its Lease can be seen as expired, reports not ready, acknowledges nothing,
//! and resumes only after renewing and re-reading its slice.
//!
//! Both tests run on the emulator only and skip (saying why) against
//! `SHOAL_TEST_KUBECONFIG`: they inject the failure. The partition is a TCP
//! forwarder between this sidecar's client and the emulated API server (see
//! `common::Partition`): it cuts only this member, while the test keeps its
//! own direct client to inspect and write objects, which needs the plain-HTTP
//! emulator behind it; failing renewals are the emulator's `fail_next` fault.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use k8s_openapi::jiff::Timestamp;
use shoal_worker::{Settings, Worker};

const LIMIT: Duration = Duration::from_secs(20);

fn log_lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn count(lines: &[String], line: &str) -> usize {
    lines
        .iter()
        .filter(|candidate| candidate.as_str() == line)
        .count()
}

/// Emulator only: the partition forwards plain TCP to the emulator's HTTP port.
#[tokio::test]
async fn a_member_cut_off_from_the_api_fences_itself_before_its_lease_expires_and_recovers() {
    let cluster = Cluster::start().await;
    if cluster.skip_unless_emulated(
        "a_member_cut_off_from_the_api_fences_itself_before_its_lease_expires_and_recovers",
        "the partition needs the emulator's plain-HTTP address",
    ) {
        return;
    }
    let api_address = cluster
        .api_address()
        .expect("the emulator's kubeconfig names http://HOST:PORT");
    let partition = Partition::start(api_address).await;
    let member_client = cluster.client_via(partition.address()).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("jobs.log");
    let file = dir.path().join("slice.yaml");

    let mut settings = Settings::for_member("pool-0", cluster.namespace());
    settings.lease_duration = Duration::from_secs(3);
    settings.fence_grace = Duration::from_millis(500);
    settings.fence_margin = Duration::from_secs(1);
    settings.stop_grace = Duration::from_secs(2);
    settings.slice_file = Some(file.clone());
    settings.exec = Some(format!(
        "echo start $SHOAL_JOB >> {log}; trap 'echo stop $SHOAL_JOB >> {log}; exit 0' TERM; sleep 1000 & wait",
        log = log.display()
    ));
    let worker = Worker::start(member_client, settings).await.unwrap();
    let address = worker.http_addr();

    let owned = slice("pool-0", 1, &["a", "b"]);
    write_slice(&cluster.client(), cluster.namespace(), &owned).await;
    eventually("rev 1 acked", LIMIT, || async {
        lease_ack(&cluster.client(), cluster.namespace(), "pool-0")
            .await
            .filter(|(revision, _)| *revision == 1)
    })
    .await;
    eventually("both jobs running", LIMIT, || async {
        (log_lines(&log).len() == 2).then_some(())
    })
    .await;
    assert_eq!(get(address, "/readyz").await.status, 200);

    partition.cut();
    let cut_at = Timestamp::now();
    let last_renewal = common::lease(&cluster.client(), cluster.namespace(), "pool-0")
        .await
        .and_then(|lease| lease.spec?.renew_time)
        .expect("renewTime")
        .0;

    eventually("fencing", LIMIT, || async {
        let readiness = get(address, "/readyz").await;
        (readiness.status == 503 && readiness.json()["fenced"] == true).then_some(())
    })
    .await;
    // Observed after the fact, so this is an upper bound of when the last job stopped.
    let all_stopped = eventually("both jobs stopped", LIMIT, || async {
        let lines = log_lines(&log);
        (count(&lines, "stop a") == 1 && count(&lines, "stop b") == 1).then_some(Timestamp::now())
    })
    .await;
    // Every job stopped before anyone could see the Lease as expired.
    let expiry = last_renewal + Duration::from_secs(3);
    assert!(
        all_stopped < expiry,
        "all jobs stopped by {all_stopped}, Lease expires at {expiry} (cut at {cut_at})"
    );

    // The application is told to run nothing.
    let served = get(address, "/v1/slice").await.json();
    assert_eq!(served["fenced"], true);
    assert_eq!(served["jobs"], serde_json::json!([]));
    let on_disk = shoal_worker::slice_doc::parse(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(on_disk.jobs.is_empty());
    let metrics = get(address, "/metrics").await.body;
    assert!(metrics.contains("shoal_worker_fenced 1"), "{metrics}");
    assert!(
        metrics.contains("shoal_worker_exec_processes 0"),
        "{metrics}"
    );

    // Meanwhile the controller revoked b (the Lease expired) and the member
    // cannot see it; after healing it must follow the new slice, not restart b.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let reduced = slice("pool-0", 2, &["a"]);
    write_slice(&cluster.client(), cluster.namespace(), &reduced).await;
    assert_eq!(
        lease_ack(&cluster.client(), cluster.namespace(), "pool-0")
            .await
            .map(|(revision, _)| revision),
        Some(1)
    );

    partition.heal();
    let acked = eventually("rev 2 acked after healing", LIMIT, || async {
        lease_ack(&cluster.client(), cluster.namespace(), "pool-0")
            .await
            .filter(|(revision, _)| *revision == 2)
    })
    .await;
    assert_eq!(acked.1, reduced.hash);
    eventually("ready again", LIMIT, || async {
        (get(address, "/readyz").await.status == 200).then_some(())
    })
    .await;
    // Acknowledged once spawned; the process writes its line a moment later.
    let lines = eventually("a restarted after healing", LIMIT, || async {
        let lines = log_lines(&log);
        (count(&lines, "start a") == 2).then_some(lines)
    })
    .await;
    assert_eq!(
        count(&lines, "start b"),
        1,
        "b was revoked while cut off and never restarted: {lines:?}"
    );
    let metrics = get(address, "/metrics").await.body;
    assert!(
        metrics.contains("shoal_worker_fencings_total 1"),
        "{metrics}"
    );
    worker.stop().await.unwrap();
}

/// Emulator only: failing renewals are the emulator's injected 500s.
#[tokio::test]
async fn failing_lease_renewals_fence_the_member_until_a_renewal_succeeds() {
    let cluster = Cluster::start().await;
    if cluster.skip_unless_emulated(
        "failing_lease_renewals_fence_the_member_until_a_renewal_succeeds",
        "needs the emulator's fail_next fault on Lease patches",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("jobs.log");
    let mut settings = Settings::for_member("pool-0", cluster.namespace());
    settings.lease_duration = Duration::from_secs(3);
    settings.fence_grace = Duration::from_millis(500);
    settings.fence_margin = Duration::from_secs(1);
    settings.exec = Some(format!(
        "echo start $SHOAL_JOB >> {log}; trap 'echo stop $SHOAL_JOB >> {log}; exit 0' TERM; sleep 1000 & wait",
        log = log.display()
    ));
    let worker = Worker::start(cluster.client(), settings).await.unwrap();
    let mut slices = worker.slices();
    write_slice(
        &cluster.client(),
        cluster.namespace(),
        &slice("pool-0", 1, &["a"]),
    )
    .await;
    eventually("a running", LIMIT, || async {
        (log_lines(&log) == ["start a"]).then_some(())
    })
    .await;

    // Every renewal fails with 500 for a while (the slice watch is untouched);
    // retries back off from 100 ms to 1 s, so 8 failures outlast the 2 s
    // fencing deadline.
    cluster
        .emulator_faults()
        .fail_next(8, Some("patch"), Some("leases"), 500);
    let fenced = tokio::time::timeout(LIMIT, slices.wait_for(|delivered| delivered.fenced))
        .await
        .expect("fenced in time")
        .unwrap();
    assert!(fenced.jobs().is_empty());
    eventually("a stopped", LIMIT, || async {
        log_lines(&log)
            .contains(&"stop a".to_string())
            .then_some(())
    })
    .await;
    assert!(!worker.readiness().ready);
    assert!(
        worker
            .readiness()
            .lease_error
            .is_some_and(|error| error.contains("pool-0-member"))
    );

    let recovered = tokio::time::timeout(LIMIT, slices.wait_for(|delivered| !delivered.fenced))
        .await
        .expect("unfenced once renewals succeed")
        .unwrap();
    assert_eq!(recovered.jobs(), ["a".to_string()]);
    eventually("a restarted", LIMIT, || async {
        (count(&log_lines(&log), "start a") == 2).then_some(())
    })
    .await;
    assert!(worker.readiness().ready);
    worker.stop().await.unwrap();
}
