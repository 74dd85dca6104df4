//! Leader election: of two controller replicas only the Lease holder reconciles, and the
//! standby takes over when the leader dies, or at once when the leader is stopped with
//! SIGTERM (a rolling update of the controller Deployment).

mod common;

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
