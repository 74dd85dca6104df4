//! The sidecar against the emulated API server (or the real cluster in
//! `SHOAL_TEST_KUBECONFIG`), through real HTTP with the real `kube` client:
//! the slice ConfigMaps are written as the controller writes them
//! (ARCHITECTURE.md, "Acknowledgement protocol").

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use shoal_worker::{Settings, Worker, slice_doc};

const LIMIT: Duration = Duration::from_secs(15);

fn settings(cluster: &Cluster, member: &str) -> Settings {
    short_lease_settings(cluster, member)
}

async fn wait_for_revision(worker: &Worker, revision: u64) -> shoal_worker::Delivered {
    let mut slices = worker.slices();
    tokio::time::timeout(
        LIMIT,
        slices.wait_for(|delivered| {
            delivered
                .slice
                .as_ref()
                .is_some_and(|slice| slice.revision == revision)
                && !delivered.fenced
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("revision {revision} was not delivered within {LIMIT:?}"))
    .expect("worker running")
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

#[tokio::test]
async fn a_written_slice_replaces_the_file_with_the_same_document() {
    let cluster = Cluster::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("slice.yaml");
    let mut settings = settings(&cluster, "pool-0");
    settings.slice_file = Some(file.clone());
    settings.ack_on_apply = true;
    let worker = Worker::start(cluster.client(), settings).await.unwrap();

    let first = slice("pool-0", 1, &["stream:a", "stream:b"]);
    write_slice(&cluster.client(), cluster.namespace(), &first).await;
    let expected = slice_doc::render(&first).unwrap();
    eventually("the first slice file", LIMIT, || async {
        (read(&file).as_deref() == Some(expected.as_str())).then_some(())
    })
    .await;

    let second = slice("pool-0", 2, &["stream:b", "stream:c", "stream:d"]);
    write_slice(&cluster.client(), cluster.namespace(), &second).await;
    let expected = slice_doc::render(&second).unwrap();
    eventually("the replaced slice file", LIMIT, || async {
        (read(&file).as_deref() == Some(expected.as_str())).then_some(())
    })
    .await;
    assert_eq!(slice_doc::parse(&read(&file).unwrap()), Ok(second));
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(
        names,
        vec!["slice.yaml"],
        "no temporary file is left beside the slice"
    );
    worker.stop().await.unwrap();
}

#[tokio::test]
async fn get_v1_slice_serves_json_and_a_long_poll_wakes_on_the_next_revision() {
    let cluster = Cluster::start().await;
    let worker = Worker::start(cluster.client(), settings(&cluster, "pool-0"))
        .await
        .unwrap();
    let address = worker.http_addr();
    assert_eq!(
        get(address, "/v1/slice").await.status,
        404,
        "no slice before the first one arrives"
    );

    let first = slice("pool-0", 1, &["stream:a"]);
    write_slice(&cluster.client(), cluster.namespace(), &first).await;
    wait_for_revision(&worker, 1).await;
    let response = get(address, "/v1/slice").await;
    assert_eq!(response.status, 200);
    assert_eq!(
        response.json(),
        serde_json::json!({
            "swarm": "demo", "member": "pool-0", "revision": 1,
            "hash": first.hash, "jobs": ["stream:a"], "instances": [], "fenced": false,
        })
    );

    // A long poll for a revision we already have answers at once.
    let immediate = get(address, "/v1/slice?waitForRevisionAfter=0").await;
    assert_eq!(immediate.json()["revision"], 1);

    let poll = tokio::spawn(async move {
        get(
            address,
            "/v1/slice?waitForRevisionAfter=1&timeoutSeconds=20",
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !poll.is_finished(),
        "the long poll waits for a newer revision"
    );
    write_slice(
        &cluster.client(),
        cluster.namespace(),
        &slice("pool-0", 2, &["stream:a", "stream:z"]),
    )
    .await;
    let woken = tokio::time::timeout(LIMIT, poll).await.unwrap().unwrap();
    assert_eq!(woken.status, 200);
    assert_eq!(woken.json()["revision"], 2);
    assert_eq!(
        woken.json()["jobs"],
        serde_json::json!(["stream:a", "stream:z"])
    );

    let timed_out = get(address, "/v1/slice?waitForRevisionAfter=2&timeoutSeconds=1").await;
    assert_eq!(
        timed_out.json()["revision"],
        2,
        "a long poll that times out answers with the current slice"
    );

    // An instance change keeps the revision and changes the hash: a long poll
    // from the hash held wakes for it, where one by revision would not.
    let held = timed_out.json()["hash"].as_str().unwrap().to_owned();
    let from_hash = format!("/v1/slice?waitForChangeFrom={held}&timeoutSeconds=20");
    let poll = tokio::spawn(async move { get(address, &from_hash).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!poll.is_finished(), "the long poll waits for another hash");
    let same_revision = slice("pool-0", 2, &["stream:a", "stream:z"])
        .with_instances(vec![web_instance()])
        .expect("a valid instance");
    write_slice(&cluster.client(), cluster.namespace(), &same_revision).await;
    let woken = tokio::time::timeout(LIMIT, poll).await.unwrap().unwrap();
    assert_eq!(woken.json()["revision"], 2);
    assert_eq!(woken.json()["hash"], same_revision.hash.as_str());
    assert_ne!(same_revision.hash, held);
    worker.stop().await.unwrap();
}

#[tokio::test]
async fn the_watch_stream_sends_the_current_slice_then_one_line_per_change() {
    let cluster = Cluster::start().await;
    let worker = Worker::start(cluster.client(), settings(&cluster, "pool-0"))
        .await
        .unwrap();
    write_slice(
        &cluster.client(),
        cluster.namespace(),
        &slice("pool-0", 1, &["a"]),
    )
    .await;
    wait_for_revision(&worker, 1).await;

    let mut stream = WatchStream::open(worker.http_addr()).await;
    let first = tokio::time::timeout(LIMIT, stream.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first["revision"], 1);
    write_slice(
        &cluster.client(),
        cluster.namespace(),
        &slice("pool-0", 2, &["a", "b"]),
    )
    .await;
    let second = tokio::time::timeout(LIMIT, stream.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second["revision"], 2);
    assert_eq!(second["jobs"], serde_json::json!(["a", "b"]));

    worker.stop().await.unwrap();
    let ended = tokio::time::timeout(LIMIT, stream.next()).await.unwrap();
    assert!(ended.is_none(), "the stream ends when the sidecar stops");
}

#[tokio::test]
async fn a_malformed_slice_keeps_the_last_good_one_and_is_reported() {
    let cluster = Cluster::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("slice.yaml");
    let mut settings = settings(&cluster, "pool-0");
    settings.slice_file = Some(file.clone());
    let worker = Worker::start(cluster.client(), settings).await.unwrap();
    let address = worker.http_addr();
    let good = slice("pool-0", 1, &["stream:a", "stream:b"]);
    write_slice(&cluster.client(), cluster.namespace(), &good).await;
    wait_for_revision(&worker, 1).await;

    // A hand edit that drops a job without fixing the hash.
    let edited = slice_doc::render(&slice("pool-0", 2, &["stream:a", "stream:b"]))
        .unwrap()
        .replace("- stream:b\n", "");
    write_slice_document(&cluster.client(), cluster.namespace(), "pool-0", 2, edited).await;
    let readiness = eventually("the rejection in /readyz", LIMIT, || async {
        let readiness = get(address, "/readyz").await.json();
        readiness["rejected"].is_string().then_some(readiness)
    })
    .await;
    let rejected = readiness["rejected"].as_str().unwrap();
    assert!(
        rejected.contains("pool-0-slice") && rejected.contains("field `hash`"),
        "{rejected}"
    );
    assert_eq!(readiness["revision"], 1);
    assert_eq!(get(address, "/v1/slice").await.json()["revision"], 1);
    assert_eq!(
        read(&file).unwrap(),
        slice_doc::render(&good).unwrap(),
        "the file keeps the last good slice"
    );
    let metrics = get(address, "/metrics").await.body;
    assert!(
        metrics.contains("shoal_worker_slice_rejected_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("shoal_worker_slice_rejected_current 1"),
        "{metrics}"
    );

    // Garbage is no worse than a bad hash.
    write_slice_document(
        &cluster.client(),
        cluster.namespace(),
        "pool-0",
        2,
        "{{ not yaml".into(),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(get(address, "/v1/slice").await.json()["revision"], 1);

    // The next good slice clears the report.
    write_slice(
        &cluster.client(),
        cluster.namespace(),
        &slice("pool-0", 3, &["stream:c"]),
    )
    .await;
    wait_for_revision(&worker, 3).await;
    let readiness = get(address, "/readyz").await.json();
    assert!(readiness["rejected"].is_null(), "{readiness}");
    worker.stop().await.unwrap();
}

#[tokio::test]
async fn the_lease_carries_the_member_and_the_acknowledged_revision_and_hash() {
    let cluster = Cluster::start().await;
    let mut settings = settings(&cluster, "pool-0");
    settings.ack_on_apply = true;
    let worker = Worker::start(cluster.client(), settings).await.unwrap();
    let delivered = slice("pool-0", 4, &["x", "y"]);
    write_slice(&cluster.client(), cluster.namespace(), &delivered).await;

    let acked = eventually("the ack on the Lease", LIMIT, || async {
        lease_ack(&cluster.client(), cluster.namespace(), "pool-0")
            .await
            .filter(|(revision, _)| *revision == 4)
    })
    .await;
    assert_eq!(acked, (4, delivered.hash.clone()));

    // Read it back with the real kubectl too.
    let output = cluster
        .kubectl(&["get", "lease", "pool-0-member", "-o", "json"])
        .await;
    let lease: serde_json::Value = serde_json::from_str(&output).unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "pool-0");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 6);
    assert!(lease["spec"]["renewTime"].is_string());
    assert_eq!(
        lease["metadata"]["annotations"]["shoal.dev/acked-revision"],
        "4"
    );
    assert_eq!(
        lease["metadata"]["annotations"]["shoal.dev/acked-hash"],
        delivered.hash.as_str()
    );

    // Renewals move renewTime on (every duration / 3 = 2 s).
    let first_renewal = lease["spec"]["renewTime"].as_str().unwrap().to_string();
    eventually("a later renewTime", LIMIT, || async {
        let lease = common::lease(&cluster.client(), cluster.namespace(), "pool-0").await?;
        let renewed = serde_json::to_value(lease.spec?.renew_time?).ok()?;
        (renewed.as_str()? != first_renewal).then_some(())
    })
    .await;
    worker.stop().await.unwrap();
}

#[tokio::test]
async fn without_ack_on_apply_only_the_applications_confirmation_is_acknowledged() {
    let cluster = Cluster::start().await;
    let worker = Worker::start(cluster.client(), settings(&cluster, "pool-0"))
        .await
        .unwrap();
    let address = worker.http_addr();
    let delivered = slice("pool-0", 1, &["a"]);
    write_slice(&cluster.client(), cluster.namespace(), &delivered).await;
    wait_for_revision(&worker, 1).await;
    eventually("the Lease", LIMIT, || async {
        lease(&cluster.client(), cluster.namespace(), "pool-0").await
    })
    .await;
    // Renewals happen, but nothing is acknowledged until the app says so.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        lease_ack(&cluster.client(), cluster.namespace(), "pool-0").await,
        None
    );

    let stale = request(
        address,
        "POST",
        "/v1/ack",
        Some(r#"{"revision": 1, "hash": "sha256:00"}"#),
    )
    .await;
    assert_eq!(stale.status, 409, "{}", stale.body);
    assert!(stale.body.contains("does not match"), "{}", stale.body);
    let malformed = request(address, "POST", "/v1/ack", Some(r#"{"rev": 1}"#)).await;
    assert_eq!(malformed.status, 400, "{}", malformed.body);

    let body = serde_json::json!({ "revision": 1, "hash": delivered.hash }).to_string();
    let accepted = request(address, "POST", "/v1/ack", Some(&body)).await;
    assert_eq!(accepted.status, 202, "{}", accepted.body);
    let acked = eventually("the application's ack on the Lease", LIMIT, || async {
        lease_ack(&cluster.client(), cluster.namespace(), "pool-0").await
    })
    .await;
    assert_eq!(acked, (1, delivered.hash.clone()));
    worker.stop().await.unwrap();
}

fn exec_log_template(log: &Path) -> String {
    let log = log.display();
    format!(
        "echo start $SHOAL_JOB $SHOAL_MEMBER $SHOAL_REVISION >> {log}; \
         trap 'echo stop $SHOAL_JOB >> {log}; exit 0' TERM; sleep 1000 & wait"
    )
}

fn log_lines(log: &Path) -> Vec<String> {
    read(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn exec_mode_runs_a_process_per_job_and_acknowledges_a_revoke_only_after_it_exited() {
    let cluster = Cluster::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("jobs.log");
    let mut settings = settings(&cluster, "pool-0");
    settings.exec = Some(exec_log_template(&log));
    let worker = Worker::start(cluster.client(), settings).await.unwrap();

    let first = slice("pool-0", 1, &["a", "b", "c"]);
    write_slice(&cluster.client(), cluster.namespace(), &first).await;
    eventually("rev 1 acked", LIMIT, || async {
        lease_ack(&cluster.client(), cluster.namespace(), "pool-0")
            .await
            .filter(|(revision, _)| *revision == 1)
    })
    .await;
    eventually("three processes", LIMIT, || async {
        (log_lines(&log).len() == 3).then_some(())
    })
    .await;
    let mut started = log_lines(&log);
    started.sort();
    assert_eq!(
        started,
        ["start a pool-0 1", "start b pool-0 1", "start c pool-0 1"]
    );

    let reduced = slice("pool-0", 2, &["b"]);
    write_slice(&cluster.client(), cluster.namespace(), &reduced).await;
    let acked = eventually("rev 2 acked", LIMIT, || async {
        lease_ack(&cluster.client(), cluster.namespace(), "pool-0")
            .await
            .filter(|(revision, _)| *revision == 2)
    })
    .await;
    assert_eq!(acked.1, reduced.hash);
    // By the time the revoke is acknowledged, both revoked processes got
    // SIGTERM (their trap ran) and exited; b was left alone.
    let lines = log_lines(&log);
    assert!(
        lines.contains(&"stop a".into()) && lines.contains(&"stop c".into()),
        "{lines:?}"
    );
    assert!(!lines.contains(&"stop b".into()), "{lines:?}");
    let metrics = get(worker.http_addr(), "/metrics").await.body;
    assert!(
        metrics.contains("shoal_worker_exec_processes 1"),
        "{metrics}"
    );

    worker.stop().await.unwrap();
    assert!(
        log_lines(&log).contains(&"stop b".into()),
        "stopping the sidecar stops every job"
    );
}

/// Emulator only: dropping every open watch at once is the emulator's fault
/// injection; a real API server offers no such switch.
#[tokio::test]
async fn the_watch_resumes_after_every_watch_is_dropped() {
    let cluster = Cluster::start().await;
    if cluster.skip_unless_emulated(
        "the_watch_resumes_after_every_watch_is_dropped",
        "needs the emulator's drop_all_watches fault",
    ) {
        return;
    }
    let worker = Worker::start(cluster.client(), settings(&cluster, "pool-0"))
        .await
        .unwrap();
    write_slice(
        &cluster.client(),
        cluster.namespace(),
        &slice("pool-0", 1, &["a"]),
    )
    .await;
    wait_for_revision(&worker, 1).await;

    cluster.emulator_faults().drop_all_watches();
    write_slice(
        &cluster.client(),
        cluster.namespace(),
        &slice("pool-0", 2, &["a", "b"]),
    )
    .await;
    wait_for_revision(&worker, 2).await;
    cluster.emulator_faults().drop_all_watches();
    cluster.emulator_faults().drop_all_watches();
    write_slice(
        &cluster.client(),
        cluster.namespace(),
        &slice("pool-0", 3, &["c"]),
    )
    .await;
    let delivered = wait_for_revision(&worker, 3).await;
    assert_eq!(delivered.jobs(), ["c".to_string()]);
    worker.stop().await.unwrap();
}

#[tokio::test]
async fn a_deleted_slice_config_map_keeps_the_last_good_slice() {
    let cluster = Cluster::start().await;
    let worker = Worker::start(cluster.client(), settings(&cluster, "pool-0"))
        .await
        .unwrap();
    write_slice(
        &cluster.client(),
        cluster.namespace(),
        &slice("pool-0", 1, &["a"]),
    )
    .await;
    wait_for_revision(&worker, 1).await;
    cluster
        .kubectl(&["delete", "configmap", "pool-0-slice"])
        .await;
    let readiness = eventually("the deletion in /readyz", LIMIT, || async {
        let readiness = get(worker.http_addr(), "/readyz").await.json();
        (readiness["configMapMissing"] == true).then_some(readiness)
    })
    .await;
    assert_eq!(readiness["revision"], 1);
    assert_eq!(worker.slices().current().jobs(), ["a".to_string()]);
    worker.stop().await.unwrap();
}

#[tokio::test]
async fn a_slice_for_another_member_is_rejected() {
    let cluster = Cluster::start().await;
    let worker = Worker::start(cluster.client(), settings(&cluster, "pool-0"))
        .await
        .unwrap();
    let foreign = slice_doc::render(&slice("pool-7", 1, &["a"])).unwrap();
    write_slice_document(&cluster.client(), cluster.namespace(), "pool-0", 1, foreign).await;
    let readiness = eventually("the rejection", LIMIT, || async {
        let readiness = get(worker.http_addr(), "/readyz").await.json();
        readiness["rejected"].is_string().then_some(readiness)
    })
    .await;
    assert!(
        readiness["rejected"].as_str().unwrap().contains("pool-7"),
        "{readiness}"
    );
    assert!(worker.slices().current().slice.is_none());
    worker.stop().await.unwrap();
}

#[tokio::test]
async fn the_application_named_in_a_pid_file_is_signalled_after_each_change() {
    let cluster = Cluster::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("slice.yaml");
    let seen = dir.path().join("seen");
    let ready = dir.path().join("trap-set");
    // The "application": on SIGUSR1 it records the revision in the slice file. USR1,
    // not the default HUP: a shell cannot trap a signal ignored when it started, and
    // HUP is ignored under nohup. It says when its trap is in place.
    let script = format!(
        "trap 'grep ^revision: {file} >> {seen}' USR1; touch {ready}; while true; do sleep 0.05; done",
        file = file.display(),
        seen = seen.display(),
        ready = ready.display()
    );
    let mut app = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid_file = dir.path().join("app.pid");
    std::fs::write(&pid_file, app.id().unwrap().to_string()).unwrap();
    eventually("the app's trap in place", LIMIT, || async {
        ready.exists().then_some(())
    })
    .await;

    let mut settings = settings(&cluster, "pool-0");
    settings.slice_file = Some(file.clone());
    settings.signal_pid_file = Some(pid_file);
    settings.signal = "USR1".to_owned();
    let worker = Worker::start(cluster.client(), settings).await.unwrap();
    for revision in 1..=2 {
        write_slice(
            &cluster.client(),
            cluster.namespace(),
            &slice("pool-0", revision, &["a"]),
        )
        .await;
        wait_for_revision(&worker, revision).await;
        let expected = format!("revision: {revision}");
        eventually("the app saw the new file on SIGUSR1", LIMIT, || async {
            read(&seen)
                .unwrap_or_default()
                .lines()
                .any(|line| line == expected)
                .then_some(())
        })
        .await;
    }
    let metrics = get(worker.http_addr(), "/metrics").await.body;
    assert!(
        !metrics.contains("shoal_worker_signals_sent_total 0"),
        "{metrics}"
    );
    worker.stop().await.unwrap();
    app.kill().await.unwrap();
}

/// Whether `pid` is gone or a zombie (dead, not yet reaped).
fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

#[tokio::test]
async fn dropping_a_worker_kills_its_exec_processes_at_once_like_a_dead_container() {
    let cluster = Cluster::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut settings = settings(&cluster, "pool-0");
    settings.exec = Some(format!(
        "trap 'echo stop >> {dir}/$SHOAL_JOB.log' TERM; echo $$ > {dir}/$SHOAL_JOB.pid; sleep 1000 & wait",
        dir = dir.path().display()
    ));
    let worker = Worker::start(cluster.client(), settings).await.unwrap();
    write_slice(
        &cluster.client(),
        cluster.namespace(),
        &slice("pool-0", 1, &["a", "b"]),
    )
    .await;
    let pids: Vec<u32> = eventually("both processes", LIMIT, || async {
        let pids: Vec<u32> = ["a", "b"]
            .iter()
            .filter_map(|job| {
                read(&dir.path().join(format!("{job}.pid")))?
                    .trim()
                    .parse()
                    .ok()
            })
            .collect();
        (pids.len() == 2).then_some(pids)
    })
    .await;

    drop(worker);

    // SIGKILL is immediate: no grace period, no SIGTERM trap.
    eventually("the processes dead", Duration::from_secs(2), || async {
        pids.iter().all(|&pid| is_dead(pid)).then_some(())
    })
    .await;
    assert!(read(&dir.path().join("a.log")).is_none() && read(&dir.path().join("b.log")).is_none());
}

#[tokio::test]
async fn the_lease_of_a_pod_is_owned_by_it_and_goes_when_the_pod_goes() {
    let cluster = Cluster::start().await;
    let pod_name = "pool-9";
    cluster
        .kubectl(&[
            "run",
            pod_name,
            "--image=registry.k8s.io/pause:3.10",
            "--restart=Never",
        ])
        .await;
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(cluster.client(), cluster.namespace());
    let uid = pods.get(pod_name).await.unwrap().metadata.uid.unwrap();
    let mut settings = settings(&cluster, pod_name);
    settings.pod_uid = Some(uid.clone());
    let worker = Worker::start(cluster.client(), settings).await.unwrap();
    let owners = eventually("the Lease, owned by its pod", LIMIT, || async {
        let lease = common::lease(&cluster.client(), cluster.namespace(), pod_name).await?;
        lease.metadata.owner_references
    })
    .await;
    assert_eq!(owners.len(), 1);
    assert_eq!(
        (owners[0].kind.as_str(), owners[0].uid.as_str()),
        ("Pod", uid.as_str())
    );
    assert_eq!(owners[0].name, pod_name);
    // The sidecar stops with its pod; the garbage collector removes the Lease.
    worker.stop().await.unwrap();
    cluster
        .kubectl(&["delete", "pod", pod_name, "--grace-period=0", "--force"])
        .await;
    eventually(
        "the Lease collected with its pod",
        Duration::from_secs(60),
        || async {
            common::lease(&cluster.client(), cluster.namespace(), pod_name)
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_slice_edited_by_hand_with_a_correct_hash_is_refused_and_the_last_good_one_stays() {
    let cluster = Cluster::start().await;
    let settings = settings(&cluster, "pool-0");
    let worker = Worker::start(cluster.client(), settings).await.unwrap();
    let address = worker.http_addr();
    write_slice(
        &cluster.client(),
        cluster.namespace(),
        &slice("pool-0", 1, &["stream:a"]),
    )
    .await;
    wait_for_revision(&worker, 1).await;

    // A careful hand: another member's job added, the hash recomputed. Taking it would
    // run stream:z on two members.
    let edited = slice_doc::render(&slice("pool-0", 2, &["stream:a", "stream:z"])).unwrap();
    let patch = serde_json::json!({"data": {"slice.yaml": edited}}).to_string();
    cluster
        .kubectl(&[
            "patch",
            "configmap",
            "pool-0-slice",
            "--type",
            "merge",
            "-p",
            &patch,
        ])
        .await;
    let readiness = eventually("the refusal in /readyz", LIMIT, || async {
        let readiness = get(address, "/readyz").await.json();
        readiness["rejected"].is_string().then_some(readiness)
    })
    .await;
    let rejected = readiness["rejected"].as_str().unwrap();
    assert!(
        rejected.contains("written by \"kubectl-patch\""),
        "{rejected}"
    );
    assert_eq!(get(address, "/v1/slice").await.json()["revision"], 1);

    // What the controller writes back is taken again.
    write_slice(
        &cluster.client(),
        cluster.namespace(),
        &slice("pool-0", 3, &["stream:a"]),
    )
    .await;
    wait_for_revision(&worker, 3).await;
    worker.stop().await.unwrap();
}

#[tokio::test]
async fn a_configmap_no_swarm_owns_is_never_taken_for_the_slice() {
    let cluster = Cluster::start().await;
    let settings = settings(&cluster, "pool-0");
    let worker = Worker::start(cluster.client(), settings).await.unwrap();
    let address = worker.http_addr();
    let document = slice_doc::render(&slice("pool-0", 1, &["stream:a"])).unwrap();
    cluster
        .kubectl(&[
            "create",
            "configmap",
            "pool-0-slice",
            &format!("--from-literal=slice.yaml={document}"),
        ])
        .await;
    let readiness = eventually("the refusal in /readyz", LIMIT, || async {
        let readiness = get(address, "/readyz").await.json();
        readiness["rejected"].is_string().then_some(readiness)
    })
    .await;
    assert!(
        readiness["rejected"]
            .as_str()
            .unwrap()
            .contains("is not a slice Shoal wrote for this member"),
        "{readiness}"
    );
    assert!(get(address, "/v1/slice").await.json()["revision"].is_null());
    worker.stop().await.unwrap();
}

/// (method, path) of every operation in `worker/openapi.yaml`: paths are the keys
/// indented by two spaces under `paths:`, methods the keys indented by four below them.
fn documented_routes(document: &str) -> std::collections::BTreeSet<(String, String)> {
    let paths = document
        .split("\npaths:\n")
        .nth(1)
        .and_then(|rest| rest.split("\ncomponents:\n").next())
        .expect("the document has paths and components");
    let mut routes = std::collections::BTreeSet::new();
    let mut path = String::new();
    for line in paths.lines() {
        if let Some(key) = line
            .strip_prefix("  /")
            .and_then(|key| key.strip_suffix(':'))
        {
            path = format!("/{key}");
        } else if let Some(method) = line
            .strip_prefix("    ")
            .and_then(|key| key.strip_suffix(':'))
            && ["get", "post", "put", "patch", "delete"].contains(&method)
        {
            routes.insert((method.to_owned(), path.clone()));
        }
    }
    routes
}

#[tokio::test]
async fn the_served_openapi_document_lists_exactly_the_routes_the_sidecar_answers() {
    let cluster = Cluster::start().await;
    let settings = settings(&cluster, "pool-0");
    let worker = Worker::start(cluster.client(), settings).await.unwrap();
    let address = worker.http_addr();
    write_slice(
        &cluster.client(),
        cluster.namespace(),
        &slice("pool-0", 1, &["stream:a"]),
    )
    .await;
    wait_for_revision(&worker, 1).await;

    let served = get(address, "/openapi.yaml").await;
    assert_eq!(served.status, 200);
    let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml"))
        .expect("worker/openapi.yaml is readable");
    assert_eq!(
        served.body, committed,
        "the served document is the committed one"
    );

    let documented = documented_routes(&committed);
    let routed: std::collections::BTreeSet<(String, String)> = shoal_worker::http::ROUTES
        .iter()
        .map(|(method, path)| ((*method).to_owned(), (*path).to_owned()))
        .collect();
    assert_eq!(documented, routed, "document and router disagree");

    // Each documented route is answered by its handler, not by the fallback.
    for (method, path) in &documented {
        if path == "/v1/watch" {
            continue; // a stream that does not end; the NDJSON tests cover it
        }
        let response = match method.as_str() {
            "post" => {
                request(
                    address,
                    "POST",
                    path,
                    Some(r#"{"revision": 1, "hash": "x"}"#),
                )
                .await
            }
            _ => get(address, path).await,
        };
        assert!(
            !response.body.contains("no route"),
            "{method} {path} fell through to the fallback: {} {}",
            response.status,
            response.body
        );
    }
    // And a route the document does not list is not answered.
    let unknown = get(address, "/v1/jobs").await;
    assert_eq!(unknown.status, 404);
    assert!(
        unknown.body.contains("no route GET /v1/jobs"),
        "{}",
        unknown.body
    );
    let wrong_method = request(address, "DELETE", "/v1/slice", None).await;
    assert_ne!(wrong_method.status, 200, "{}", wrong_method.body);
    worker.stop().await.unwrap();
}
