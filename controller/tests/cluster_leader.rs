//! Leader election: of two controller replicas only the Lease holder reconciles, and the
//! standby takes over when the leader dies.

mod common;

use std::time::Duration;

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
        let (ok, text) = env
            .kubectl_status(&[
                "get",
                "lease",
                "shoal-controller",
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ])
            .await;
        (ok && !text.is_empty()).then_some(text)
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
    let holder = env
        .kubectl(&[
            "get",
            "lease",
            "shoal-controller",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ])
        .await;
    assert_eq!(holder, "second");
    second.stop().await;
    env.finish().await;
}
