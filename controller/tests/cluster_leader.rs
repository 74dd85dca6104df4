//! Leader election: of two controller replicas only the Lease holder reconciles, and the
//! standby takes over when the leader dies, or at once when the leader is stopped with
//! SIGTERM (a rolling update of the controller Deployment).

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};
use shoal_controller::{LeaderElection, Settings};

use common::{Env, all_jobs, eventually, job_keys, swarm_yaml};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_of_two_replicas_reconciles() {
    let env = Env::start().await;
    let settings = |identity: &str| Settings {
        namespace: Some(env.namespace.clone()),
        identity: identity.to_owned(),
        leader_election: Some(LeaderElection {
            lease_name: "shoal-controller".to_owned(),
            lease_namespace: env.namespace.clone(),
            duration_seconds: 3,
        }),
        resync: Duration::from_secs(5),
        metrics_address: None,
        ..Settings::default()
    };
    let first = env.start_controller_with(settings("first"));
    let holder = eventually("a leader", WAIT, || async {
        lease_holder(&env).await.filter(|holder| !holder.is_empty())
    })
    .await;
    assert_eq!(holder, "first");
    let second = env.start_controller_with(settings("second"));
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(4), "")).await;
    eventually("revision 1 applied by the leader", WAIT, || async {
        (all_jobs(&env.slices("demo").await) == job_keys(4)).then_some(())
    })
    .await;
    // The leader dies; the standby takes over and keeps reconciling.
    first.kill().await;
    env.apply(&swarm_yaml("demo", &job_keys(5), "")).await;
    eventually("revision 2 applied by the new leader", WAIT, || async {
        (all_jobs(&env.slices("demo").await) == job_keys(5)).then_some(())
    })
    .await;
    assert_eq!(lease_holder(&env).await.as_deref(), Some("second"));
    second.stop().await;
    env.finish().await;
}

/// The leader Lease's holder, `None` while the Lease does not exist.
async fn lease_holder(env: &Env) -> Option<String> {
    let (ok, text) = env
        .kubectl_status(&[
            "get",
            "lease",
            "shoal-controller",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ])
        .await;
    ok.then_some(text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stopped_with_sigterm_exits_cleanly_and_its_standby_takes_over_before_the_lease_expires()
 {
    const LEASE_SECONDS: u64 = 30;
    let env = Env::start().await;
    let mut binary = tokio::process::Command::new(env!("CARGO_BIN_EXE_shoal-controller"))
        .env("KUBECONFIG", env.kubeconfig_path())
        .env("SHOAL_NAMESPACE", &env.namespace)
        .env("SHOAL_LEADER_LEASE_NAMESPACE", &env.namespace)
        .env("SHOAL_LEADER_LEASE_SECONDS", LEASE_SECONDS.to_string())
        .env("SHOAL_IDENTITY", "first")
        .env("SHOAL_METRICS_ADDRESS", "127.0.0.1:0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start the controller binary");
    eventually("the binary holding the Lease", WAIT, || async {
        (lease_holder(&env).await.as_deref() == Some("first")).then_some(())
    })
    .await;
    let second = env.start_controller_with(Settings {
        namespace: Some(env.namespace.clone()),
        identity: "second".to_owned(),
        leader_election: Some(LeaderElection {
            lease_name: "shoal-controller".to_owned(),
            lease_namespace: env.namespace.clone(),
            duration_seconds: LEASE_SECONDS,
        }),
        resync: Duration::from_secs(5),
        metrics_address: None,
        ..Settings::default()
    });

    let pid = Pid::from_raw(binary.id().expect("a running binary") as i32).expect("a pid");
    let terminated = Instant::now();
    rustix::process::kill_process(pid, Signal::TERM).expect("send SIGTERM");
    let status = tokio::time::timeout(Duration::from_secs(20), binary.wait())
        .await
        .expect("the controller exits within 20 s of SIGTERM")
        .expect("wait for the controller");
    assert!(status.success(), "the controller exited with {status}");
    eventually("the standby holding the Lease", WAIT, || async {
        (lease_holder(&env).await.as_deref() == Some("second")).then_some(())
    })
    .await;
    let handover = terminated.elapsed();
    // A third of the Lease: well clear of waiting it out, with room for a loaded machine.
    assert!(
        handover < Duration::from_secs(LEASE_SECONDS / 3),
        "the standby took over after {handover:?}, as if it had waited for the Lease to expire rather than seen it released"
    );
    println!("SIGTERM → standby holds the Lease: {handover:?}");
    // The new leader reconciles.
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(4), "")).await;
    eventually("revision 1 applied by the new leader", WAIT, || async {
        (all_jobs(&env.slices("demo").await) == job_keys(4)).then_some(())
    })
    .await;
    second.stop().await;
    env.finish().await;
}

/// The controller binary run outside a pod with no identity given (no `--identity`,
/// `SHOAL_IDENTITY` or `POD_NAME`; no `HOSTNAME` either, which a script may not export),
/// competing for the Lease `shoal-controller` in the test's namespace, logging JSON lines
/// on a piped stderr.
fn spawn_json_logging_binary(env: &Env) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_shoal-controller"))
        .env("KUBECONFIG", env.kubeconfig_path())
        .env("SHOAL_NAMESPACE", &env.namespace)
        .env("SHOAL_LEADER_LEASE_NAMESPACE", &env.namespace)
        .env_remove("SHOAL_IDENTITY")
        .env_remove("POD_NAME")
        .env_remove("HOSTNAME")
        .env("SHOAL_METRICS_ADDRESS", "127.0.0.1:0")
        .env_remove("RUST_LOG")
        .args(["--log-format", "json"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the controller binary")
}

/// One log line as JSON: an object, without terminal colour codes.
fn parse_log_line(line: &str) -> serde_json::Value {
    assert!(!line.contains('\u{1b}'), "colour codes in {line:?}");
    let parsed: serde_json::Value = serde_json::from_str(line)
        .unwrap_or_else(|error| panic!("a log line is not JSON ({error}): {line:?}"));
    assert!(parsed.is_object(), "{line}");
    parsed
}

/// Reads JSON log lines from `stderr` until one satisfies `wanted`; every line read must
/// parse as a JSON object.
async fn read_json_lines_until(
    stderr: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStderr>>,
    read: &mut Vec<serde_json::Value>,
    wanted: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    loop {
        let line = tokio::time::timeout(WAIT, stderr.next_line())
            .await
            .unwrap_or_else(|_| panic!("no wanted log line within {WAIT:?}: {read:#?}"))
            .expect("read stderr")
            .unwrap_or_else(|| panic!("stderr closed before the wanted line: {read:#?}"));
        let parsed = parse_log_line(&line);
        read.push(parsed.clone());
        if wanted(&parsed) {
            return parsed;
        }
    }
}

/// The identity a binary started by [`spawn_json_logging_binary`] takes: the host name the
/// OS reports and its process id.
fn identity_outside_a_pod(child: &tokio::process::Child) -> String {
    let host = rustix::system::uname()
        .nodename()
        .to_str()
        .expect("a UTF-8 host name")
        .to_owned();
    format!("{host}-{}", child.id().expect("a running binary"))
}

/// `--log-format json` writes one JSON object per line, and a standby says at info level
/// that it stands by and who leads, instead of staying silent. Two binaries started on
/// one machine outside a pod, with no identity given, take `<host>-<pid>` each: one
/// leads, the other stands by (with one identity between them both would lead).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_binaries_outside_a_pod_log_json_lines_and_the_standby_names_the_leader() {
    use tokio::io::AsyncBufReadExt as _;
    let env = Env::start().await;
    let mut first = spawn_json_logging_binary(&env);
    let first_identity = identity_outside_a_pod(&first);
    let mut first_log = tokio::io::BufReader::new(first.stderr.take().expect("stderr")).lines();
    let mut first_lines = Vec::new();
    let leading = read_json_lines_until(&mut first_log, &mut first_lines, |line| {
        line["fields"]["message"]
            .as_str()
            .is_some_and(|message| message.starts_with("became leader"))
    })
    .await;
    assert_eq!(leading["level"], "INFO");
    assert_eq!(leading["fields"]["identity"], first_identity.as_str());

    let mut second = spawn_json_logging_binary(&env);
    let second_identity = identity_outside_a_pod(&second);
    assert_ne!(first_identity, second_identity);
    let mut second_log = tokio::io::BufReader::new(second.stderr.take().expect("stderr")).lines();
    let mut second_lines = Vec::new();
    let standing_by = read_json_lines_until(&mut second_log, &mut second_lines, |line| {
        line["fields"]["message"]
            .as_str()
            .is_some_and(|message| message.starts_with("standing by"))
    })
    .await;
    assert_eq!(standing_by["level"], "INFO");
    assert_eq!(
        standing_by["fields"]["leader"],
        first_identity.as_str(),
        "{standing_by}"
    );
    assert_eq!(
        standing_by["fields"]["identity"],
        second_identity.as_str(),
        "{standing_by}"
    );
    assert_eq!(
        lease_holder(&env).await.as_deref(),
        Some(first_identity.as_str())
    );

    for child in [&mut first, &mut second] {
        let pid = Pid::from_raw(child.id().expect("running") as i32).expect("a pid");
        rustix::process::kill_process(pid, Signal::TERM).expect("send SIGTERM");
    }
    // The rest of each log up to exit parses too.
    for (log, lines) in [
        (&mut first_log, &mut first_lines),
        (&mut second_log, &mut second_lines),
    ] {
        while let Ok(Ok(Some(line))) = tokio::time::timeout(WAIT, log.next_line()).await {
            lines.push(parse_log_line(&line));
        }
    }
    for child in [&mut first, &mut second] {
        let status = tokio::time::timeout(WAIT, child.wait())
            .await
            .expect("exits after SIGTERM")
            .expect("wait");
        assert!(status.success(), "{status}");
    }
    env.finish().await;
}
