//! Bad input is named in a condition and an Event; the last good revision stays in force.

use crate::common;

use std::time::Duration;

use common::{Env, all_jobs, eventually, job_keys, swarm_yaml};

const WAIT: Duration = Duration::from_secs(30);

async fn degraded(env: &Env, reason: &str) -> String {
    eventually(&format!("Degraded condition {reason}"), WAIT, || async {
        let status = env.swarm("demo").await.status?;
        let condition = status.conditions.iter().find(|c| c.type_ == "Degraded")?;
        (condition.status == "True" && condition.reason == reason)
            .then(|| condition.message.clone())
    })
    .await
}

async fn event_with_reason(env: &Env, reason: &str) -> String {
    eventually(&format!("an Event {reason}"), WAIT, || async {
        let (ok, text) = env.kubectl_status(&["get", "events", "-o", "yaml"]).await;
        (ok && text.contains(reason)).then_some(text)
    })
    .await
}

/// The CRD refuses an empty or repeated key in `spec.jobs` itself (see
/// `crd_validation.rs`); what it cannot see is a key repeated between the inline list and
/// a `jobsFrom` ConfigMap, or a bad key in that ConfigMap. The controller checks those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_and_an_empty_key_are_reported_and_the_last_good_slices_stay() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(6), "")).await;
    eventually("revision 1 applied", WAIT, || async {
        (all_jobs(&env.slices("demo").await) == job_keys(6)).then_some(())
    })
    .await;
    env.apply(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: more-jobs\ndata:\n  jobs.yaml: \"jobs: ['stream:002', '']\"\n",
    )
    .await;
    let from = "  jobsFrom:\n    configMapKeyRef:\n      name: more-jobs\n      key: jobs.yaml\n";
    env.apply(&swarm_yaml("demo", &job_keys(6), from)).await;
    let message = degraded(&env, "InvalidJobs").await;
    assert!(
        message.contains(
            "ConfigMap more-jobs key jobs.yaml jobs[0] \"stream:002\" repeats spec.jobs[2]"
        ),
        "{message}"
    );
    assert!(
        message.contains("ConfigMap more-jobs key jobs.yaml jobs[1] \"\": empty key"),
        "{message}"
    );
    event_with_reason(&env, "InvalidJobs").await;
    assert_eq!(all_jobs(&env.slices("demo").await), job_keys(6));
    assert_eq!(env.swarm("demo").await.status.unwrap().current_revision, 1);
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_job_configmap_is_named_and_picked_up_once_created() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    let from = "  jobsFrom:\n    configMapKeyRef:\n      name: later\n      key: config.yml\n";
    env.apply(&swarm_yaml("demo", &[], from)).await;
    let message = degraded(&env, "JobConfigMapMissing").await;
    assert!(message.contains("later"), "{message}");
    env.apply("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: later\ndata:\n  config.yml: \"jobs: [a, b, c]\"\n")
        .await;
    eventually("jobs from the new ConfigMap", WAIT, || async {
        (all_jobs(&env.slices("demo").await) == ["a", "b", "c"]).then_some(())
    })
    .await;
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_edited_slice_is_put_back() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(6), "")).await;
    let good = eventually("revision 1 applied", WAIT, || async {
        let slices = env.slices("demo").await;
        (all_jobs(&slices) == job_keys(6)).then_some(slices)
    })
    .await;
    env.kubectl(&[
        "patch",
        "configmap",
        "worker-0-slice",
        "--type=merge",
        "-p",
        r#"{"data":{"slice.yaml":"format: shoal.dev/slice/v1\nswarm: demo\nmember: worker-0\nrevision: 1\nhash: sha256:0000000000000000000000000000000000000000000000000000000000000000\njobs:\n- hijacked\n"}}"#,
    ])
    .await;
    eventually("the slice put back", WAIT, || async {
        (env.slices("demo").await == good).then_some(())
    })
    .await;
    event_with_reason(&env, "SliceRestored").await;
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statefulset_labelled_for_a_missing_swarm_gets_a_warning_event() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("orphan", "nobody", 1).await;
    let events = event_with_reason(&env, "SwarmNotFound").await;
    assert!(events.contains("nobody"), "{events}");
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_slice_configmap_is_written_again() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(6), "")).await;
    let good = eventually("revision 1 in force", WAIT, || async {
        let slices = env.slices("demo").await;
        let status = env.swarm("demo").await.status?;
        (all_jobs(&slices) == job_keys(6) && status.phase.as_deref() == Some("Ready"))
            .then_some(slices)
    })
    .await;
    env.kubectl(&["delete", "configmap", "worker-1-slice"])
        .await;
    eventually("the slice written again", WAIT, || async {
        (env.slices("demo").await == good).then_some(())
    })
    .await;
    let events = event_with_reason(&env, "SliceRestored").await;
    assert!(events.contains("worker-1-slice"), "{events}");
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unparsable_job_configmap_is_named_and_the_last_good_revision_stays() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.apply("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: jobs\ndata:\n  config.yml: \"jobs: [a, b]\"\n")
        .await;
    let from = "  jobsFrom:\n    configMapKeyRef:\n      name: jobs\n      key: config.yml\n";
    env.apply(&swarm_yaml("demo", &[], from)).await;
    eventually("revision 1 applied", WAIT, || async {
        (all_jobs(&env.slices("demo").await) == ["a", "b"]).then_some(())
    })
    .await;
    env.apply("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: jobs\ndata:\n  config.yml: \"jobs: {broken\"\n")
        .await;
    let message = degraded(&env, "JobConfigMapInvalid").await;
    assert!(message.contains("ConfigMap jobs"), "{message}");
    event_with_reason(&env, "JobConfigMapInvalid").await;
    assert_eq!(all_jobs(&env.slices("demo").await), ["a", "b"]);
    controller.stop().await;
    env.finish().await;
}
