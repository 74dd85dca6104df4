//! The example workers (`examples/python/worker.py`, `examples/node/worker.js`) beside
//! real sidecars against the emulated API server (or `SHOAL_TEST_KUBECONFIG`): in HTTP
//! mode each follows its member's slice on the local JSON API and acknowledges it; in exec
//! mode the sidecar runs one example process per job. A job moved from one member to the
//! other is stopped on the first and started on the second, and both acknowledge the
//! revision. Skipped, saying so, when the interpreter is not installed.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::*;
use shoal_worker::{Settings, Worker};

const LIMIT: Duration = Duration::from_secs(20);

/// An example worker: the interpreter and the script.
struct Example {
    interpreter: &'static str,
    script: PathBuf,
}

impl Example {
    /// The example in `relative` run by `interpreter`, or `None` (with a message) when the
    /// interpreter is not installed.
    fn find(interpreter: &'static str, relative: &str) -> Option<Example> {
        let installed = std::process::Command::new(interpreter)
            .arg("--version")
            .output()
            .is_ok_and(|output| output.status.success());
        if !installed {
            println!("skipped: {interpreter} is not installed, so {relative} cannot run");
            return None;
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(relative);
        assert!(script.exists(), "{} is missing", script.display());
        Some(Example {
            interpreter,
            script,
        })
    }

    /// The shell command that runs the example with its output appended to `log`.
    fn command_line(&self, log: &Path) -> String {
        format!(
            "exec {} {} >>{} 2>&1",
            self.interpreter,
            self.script.display(),
            log.display()
        )
    }
}

/// Waits until `log` has a line equal to `line`.
async fn wait_for_line(log: &Path, line: &str) {
    eventually(&format!("{line:?} in {}", log.display()), LIMIT, || async {
        log_lines(log).iter().any(|seen| seen == line).then_some(())
    })
    .await;
}

/// Beside a sidecar that acknowledges by itself (`--ack-on-apply`, as the
/// sandbox runs them), the example asks once per slice, is told it need not
/// (409), and does not ask again.
async fn a_sidecar_that_acknowledges_by_itself_is_asked_once_per_slice(example: &Example) {
    let cluster = Cluster::start().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let log = dir.path().join("pool-0.log");
    let mut settings: Settings = short_lease_settings(&cluster, "pool-0");
    settings.ack_on_apply = true;
    let worker = Worker::start(cluster.client(), settings)
        .await
        .expect("the sidecar starts");
    let mut application = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(example.command_line(&log))
        .env("SHOAL_API", format!("http://{}", worker.http_addr()))
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the example starts");
    let first = slice("pool-0", 1, &["stream:a"]);
    write_slice(&cluster.client(), cluster.namespace(), &first).await;
    wait_for_ack(&cluster, &first, LIMIT).await;
    wait_for_line(&log, "pool-0 start stream:a").await;
    let second = first
        .with_instances(vec![web_instance()])
        .expect("a valid instance");
    write_slice(&cluster.client(), cluster.namespace(), &second).await;
    wait_for_ack(&cluster, &second, LIMIT).await;
    // Time for a retry loop (two a second, as before) to show.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let lines = log_lines(&log);
    let asked = lines
        .iter()
        .filter(|line| line.starts_with("ack of revision 1 not needed: 409"))
        .count();
    assert!((1..=2).contains(&asked), "asked {asked} times: {lines:?}");
    let refused = lines.iter().filter(|line| line.contains("refused")).count();
    assert_eq!(refused, 0, "{lines:?}");
    assert!(
        !lines.iter().any(|line| line.starts_with("pool-0 ack")),
        "the sidecar acknowledged, not the example: {lines:?}"
    );
    worker.stop().await.expect("the sidecar stops");
    let _ = application.kill().await;
}

/// Two members; revision 1 gives `b` to pool-0, revision 2 moves it to pool-1. Checks
/// that both acknowledge each revision and that `b` stops on pool-0 and starts on pool-1.
async fn a_job_moves_between_two_members(example: &Example, exec_mode: bool) {
    let cluster = Cluster::start().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut workers = Vec::new();
    let mut applications = Vec::new();
    let log = |member: &str| dir.path().join(format!("{member}.log"));
    for member in ["pool-0", "pool-1"] {
        let mut settings: Settings = short_lease_settings(&cluster, member);
        if exec_mode {
            settings.exec = Some(example.command_line(&log(member)));
        }
        let worker = Worker::start(cluster.client(), settings)
            .await
            .expect("the sidecar starts");
        if !exec_mode {
            let application = tokio::process::Command::new("sh")
                .arg("-c")
                .arg(example.command_line(&log(member)))
                .env("SHOAL_API", format!("http://{}", worker.http_addr()))
                .stdin(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .expect("the example starts");
            applications.push(application);
        }
        workers.push(worker);
    }

    let first = [
        slice("pool-0", 1, &["stream:a", "stream:b"]),
        slice("pool-1", 1, &["stream:c"]),
    ];
    for member_slice in &first {
        write_slice(&cluster.client(), cluster.namespace(), member_slice).await;
    }
    for member_slice in &first {
        wait_for_ack(&cluster, member_slice, LIMIT).await;
    }
    wait_for_line(&log("pool-0"), "pool-0 start stream:b").await;
    wait_for_line(&log("pool-1"), "pool-1 start stream:c").await;

    // Revoke first (pool-0 gives b up and acknowledges), then grant (pool-1 takes it).
    let revoke = slice("pool-0", 2, &["stream:a"]);
    write_slice(&cluster.client(), cluster.namespace(), &revoke).await;
    wait_for_ack(&cluster, &revoke, LIMIT).await;
    wait_for_line(&log("pool-0"), "pool-0 stop stream:b").await;
    let grant = slice("pool-1", 2, &["stream:b", "stream:c"]);
    write_slice(&cluster.client(), cluster.namespace(), &grant).await;
    wait_for_ack(&cluster, &grant, LIMIT).await;
    wait_for_line(&log("pool-1"), "pool-1 start stream:b").await;

    if !exec_mode {
        // The application, not the sidecar, acknowledged: its own log says so.
        wait_for_line(&log("pool-0"), "pool-0 ack 2 stream:a").await;
        wait_for_line(&log("pool-1"), "pool-1 ack 2 stream:b stream:c").await;
        // An instance change keeps revision 2 with a new hash: the application
        // acknowledges that too (the sidecar does not in this mode).
        let instance_change = grant
            .with_instances(vec![web_instance()])
            .expect("a valid instance");
        write_slice(&cluster.client(), cluster.namespace(), &instance_change).await;
        wait_for_ack(&cluster, &instance_change, LIMIT).await;
        // The application logs its ack after the sidecar answers, so the Lease
        // can show the ack a moment before the line is written.
        let pool_1 = log("pool-1");
        eventually(
            &format!("a second ack of revision 2 in {}", pool_1.display()),
            LIMIT,
            || async {
                let acks = log_lines(&pool_1)
                    .iter()
                    .filter(|line| *line == "pool-1 ack 2 stream:b stream:c")
                    .count();
                (acks >= 2).then_some(())
            },
        )
        .await;
        let acks = log_lines(&pool_1)
            .iter()
            .filter(|line| *line == "pool-1 ack 2 stream:b stream:c")
            .count();
        assert_eq!(acks, 2, "one ack per slice: {:?}", log_lines(&pool_1));
    }
    let pool_0 = log_lines(&log("pool-0"));
    assert!(
        !pool_0.iter().any(|line| line == "pool-0 start stream:c"),
        "pool-0 ran pool-1's job: {pool_0:?}"
    );
    for worker in workers {
        worker.stop().await.expect("the sidecar stops");
    }
    for mut application in applications {
        let _ = application.kill().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_example_follows_its_slice_over_http_and_acknowledges_it() {
    if let Some(example) = Example::find("python3", "examples/python/worker.py") {
        a_job_moves_between_two_members(&example, false).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_example_follows_its_slice_over_http_and_acknowledges_it() {
    if let Some(example) = Example::find("node", "examples/node/worker.js") {
        a_job_moves_between_two_members(&example, false).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_example_runs_one_process_per_job_in_exec_mode() {
    if let Some(example) = Example::find("python3", "examples/python/worker.py") {
        a_job_moves_between_two_members(&example, true).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_example_runs_one_process_per_job_in_exec_mode() {
    if let Some(example) = Example::find("node", "examples/node/worker.js") {
        a_job_moves_between_two_members(&example, true).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_example_asks_a_self_acknowledging_sidecar_once_per_slice() {
    if let Some(example) = Example::find("python3", "examples/python/worker.py") {
        a_sidecar_that_acknowledges_by_itself_is_asked_once_per_slice(&example).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_example_asks_a_self_acknowledging_sidecar_once_per_slice() {
    if let Some(example) = Example::find("node", "examples/node/worker.js") {
        a_sidecar_that_acknowledges_by_itself_is_asked_once_per_slice(&example).await;
    }
}
