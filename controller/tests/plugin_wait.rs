//! `kubectl shoal wait` and `kubectl shoal status --watch` through the real plugin
//! binary against a cluster with the controller running.

use crate::common;
use crate::plugin_common;

use std::process::Stdio;
use std::time::Duration;

use common::{Env, job_keys, swarm_yaml};
use plugin_common::{shoal, shoal_ok};
use tokio::io::AsyncReadExt;

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_returns_once_the_revision_is_in_force_and_exits_3_at_once_while_one_waits_for_approval()
 {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(6), "")).await;
    let done = shoal(&env, &["wait", "demo", "--timeout=30s"]).await;
    assert!(done.success, "{}{}", done.stdout, done.stderr);
    assert!(
        done.stdout
            .contains("Swarm demo: revision 1 is in force (6 jobs"),
        "{}",
        done.stdout
    );

    // A revision that waits for approval ends the wait with its own exit code, once the
    // controller has seen the change.
    env.apply(&swarm_yaml(
        "demo",
        &job_keys(9),
        "  approval:\n    policy: Manual\n",
    ))
    .await;
    let started = std::time::Instant::now();
    let awaiting = shoal(&env, &["wait", "demo", "--timeout=30s"]).await;
    assert_eq!(
        awaiting.code,
        Some(3),
        "{}{}",
        awaiting.stdout,
        awaiting.stderr
    );
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        awaiting.stderr.contains("revision 2 waits for approval"),
        "{}",
        awaiting.stderr
    );

    shoal_ok(&env, &["approve", "demo"]).await;
    let approved = shoal(&env, &["wait", "demo", "--for=ready", "--timeout=30s"]).await;
    assert!(approved.success, "{}{}", approved.stdout, approved.stderr);
    assert!(
        approved
            .stdout
            .contains("Swarm demo: revision 2 is in force (9 jobs"),
        "{}",
        approved.stdout
    );
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_after_a_scale_waits_until_the_controller_has_seen_it_and_its_revision_is_in_force() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(6), "")).await;
    let first = shoal(&env, &["wait", "demo", "--timeout=30s"]).await;
    assert!(first.success, "{}{}", first.stdout, first.stderr);
    // The controller is down, so it cannot have seen the scale: the status still reads
    // "revision 1 in force" at the Swarm's (unchanged) generation.
    controller.stop().await;
    env.kubectl(&["scale", "statefulset", "worker", "--replicas=3"])
        .await;
    let unseen = shoal(&env, &["wait", "demo", "--timeout=3s"]).await;
    assert!(
        !unseen.success,
        "wait returned before the controller saw the scale: {}",
        unseen.stdout
    );
    assert_eq!(unseen.code, Some(1));
    assert!(
        unseen
            .stderr
            .contains("pool worker has 3 replicas (the controller last saw 2)"),
        "{}",
        unseen.stderr
    );
    let controller = env.start_controller();
    let seen = shoal(&env, &["wait", "demo", "--timeout=60s"]).await;
    assert!(seen.success, "{}{}", seen.stdout, seen.stderr);
    assert!(
        seen.stdout
            .contains("Swarm demo: revision 2 is in force (6 jobs"),
        "{}",
        seen.stdout
    );
    let slices = env.slices("demo").await;
    assert_eq!(slices.len(), 3, "{slices:?}");
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_fails_at_once_with_the_reason_when_the_swarm_is_degraded() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    let from =
        "  jobsFrom:\n    configMapKeyRef:\n      name: missing-jobs\n      key: jobs.yaml\n";
    env.apply(&swarm_yaml("demo", &job_keys(2), from)).await;
    let started = std::time::Instant::now();
    let failed = shoal(&env, &["wait", "demo", "--timeout=60s"]).await;
    assert!(!failed.success, "{}", failed.stdout);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        failed.stderr.contains("Swarm demo is Degraded") && failed.stderr.contains("missing-jobs"),
        "{}",
        failed.stderr
    );
    controller.stop().await;
    env.finish().await;
}

/// Reads a watcher's output into `seen` until a line shows `revision` in force.
async fn read_until(
    stdout: &mut tokio::process::ChildStdout,
    seen: &mut String,
    revision: u64,
) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut buffer = [0u8; 4096];
    let shows = |text: &str| {
        text.lines().any(|line| {
            line.starts_with("Revision in force") && line.ends_with(&format!(" {revision}"))
        })
    };
    while !shows(seen) {
        let read = tokio::time::timeout_at(deadline, stdout.read(&mut buffer))
            .await
            .unwrap_or_else(|_| panic!("no revision {revision} within {WAIT:?}:\n{seen}"))
            .expect("reading the watcher");
        assert!(read > 0, "the watcher ended:\n{seen}");
        seen.push_str(&String::from_utf8_lossy(&buffer[..read]));
    }
    seen.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_watch_prints_the_status_once_and_again_only_when_it_changes() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(6), "")).await;
    env.in_force("demo", 1, WAIT).await;

    let mut watcher = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-shoal"))
        .arg("--kubeconfig")
        .arg(env.kubeconfig_path())
        .args(["-n", &env.namespace, "status", "demo", "--watch"])
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl-shoal starts");
    let mut stdout = watcher.stdout.take().expect("piped stdout");
    let mut seen = String::new();
    let first = read_until(&mut stdout, &mut seen, 1).await;
    assert_eq!(first.matches("Revision in force").count(), 1, "{first}");
    // Nothing changes: three seconds (three polls) print nothing, though the ages in the
    // table grow.
    let mut quiet = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), stdout.read_to_end(&mut quiet)).await;
    assert!(
        quiet.is_empty(),
        "printed again without a change:\n{}",
        String::from_utf8_lossy(&quiet)
    );
    env.apply(&swarm_yaml("demo", &job_keys(8), "")).await;
    let later = read_until(&mut stdout, &mut seen, 2).await;
    assert!(
        later.matches("Revision in force").count() >= 2,
        "the status was not printed again:\n{later}"
    );
    assert!(
        watcher.try_wait().expect("process state").is_none(),
        "--watch exited by itself"
    );
    watcher.kill().await.expect("stop the watcher");
    controller.stop().await;
    env.finish().await;
}
