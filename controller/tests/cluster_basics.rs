//! The controller on the emulated cluster: Swarms applied and scaled with the real kubectl.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Env, all_jobs, eventually, job_keys, swarm_yaml};

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swarm_applied_with_kubectl_gets_one_slice_per_member_and_an_index() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(10), "")).await;

    let slices = eventually("two slices with every job", WAIT, || async {
        let slices = env.slices("demo").await;
        (slices.len() == 2 && all_jobs(&slices) == job_keys(10)).then_some(slices)
    })
    .await;
    assert_eq!(slices["worker-0"].len(), 5);
    assert_eq!(slices["worker-1"].len(), 5);

    let index = eventually("the index ConfigMap", WAIT, || async {
        let (ok, text) = env
            .kubectl_status(&[
                "get",
                "configmap",
                "demo",
                "-o",
                "jsonpath={.data.config\\.yml}",
            ])
            .await;
        (ok && text.contains("workloads:")).then_some(text)
    })
    .await;
    assert!(index.contains("worker-0:"), "{index}");

    // Both members' pods come from the StatefulSet controller and become Ready.
    let table = eventually("2/2 Ready in kubectl get sw", WAIT, || async {
        let table = env.kubectl(&["get", "sw", "demo"]).await;
        (table.contains("Ready") && table.contains("2/2")).then_some(table)
    })
    .await;
    assert_eq!(env.ready_pods().await, 2, "{table}");
    assert!(table.contains("REVISION"), "{table}");
    let swarm = env.swarm("demo").await;
    let status = swarm.status.expect("status written");
    assert_eq!(status.current_revision, 1);
    assert_eq!(status.jobs, 10);
    assert!(
        status
            .members
            .iter()
            .all(|member| member.ready && member.slice_size == 5),
        "{:?}",
        status.members
    );
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_scale_creates_a_revision_that_rewrites_only_the_affected_slices() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 3).await;
    env.apply(&swarm_yaml("demo", &job_keys(30), "")).await;
    eventually("revision 1 in force", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        (status.current_revision == 1 && status.phase.as_deref() == Some("Ready")).then_some(())
    })
    .await;
    let before = env.slices("demo").await;
    let versions: BTreeMap<String, String> = env
        .slice_maps("demo")
        .await
        .into_iter()
        .map(|(member, cm)| (member, cm.metadata.resource_version.unwrap_or_default()))
        .collect();

    env.kubectl(&["scale", "statefulset", "worker", "--replicas=4"])
        .await;
    let after = eventually("revision 2 in force on four members", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        let slices = env.slices("demo").await;
        (status.current_revision == 2
            && status.phase.as_deref() == Some("Ready")
            && slices.len() == 4
            && all_jobs(&slices) == job_keys(30))
        .then_some(slices)
    })
    .await;
    let versions_after: BTreeMap<String, String> = env
        .slice_maps("demo")
        .await
        .into_iter()
        .map(|(member, cm)| (member, cm.metadata.resource_version.unwrap_or_default()))
        .collect();
    for (member, old) in &before {
        let unchanged = &after[member] == old;
        assert_eq!(
            versions_after[member] == versions[member],
            unchanged,
            "{member}: slice unchanged={unchanged} but resourceVersion {} -> {}",
            versions[member],
            versions_after[member]
        );
        // On scale up a member only gives jobs away.
        assert!(
            after[member].iter().all(|key| old.contains(key)),
            "{member} gained jobs"
        );
    }

    env.kubectl(&["scale", "statefulset", "worker", "--replicas=2"])
        .await;
    eventually(
        "revision 3 on two members, the others' slices deleted",
        WAIT,
        || async {
            let status = env.swarm("demo").await.status?;
            let slices = env.slices("demo").await;
            (status.current_revision == 3
                && status.phase.as_deref() == Some("Ready")
                && slices.len() == 2
                && all_jobs(&slices) == job_keys(30))
            .then_some(())
        },
    )
    .await;
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editing_the_inline_job_list_and_the_job_configmap_creates_new_revisions() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.apply(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: swarm-controller-config\ndata:\n  config.yml: |\n    jobs:\n      - stream:cctv0:updated\n      - stream:foo:new\n",
    )
    .await;
    let from = "  jobsFrom:\n    configMapKeyRef:\n      name: swarm-controller-config\n      key: config.yml\n";
    env.apply(&swarm_yaml("demo", &["inline:a".to_owned()], from))
        .await;
    eventually("inline and ConfigMap jobs assigned", WAIT, || async {
        let slices = env.slices("demo").await;
        (all_jobs(&slices) == ["inline:a", "stream:cctv0:updated", "stream:foo:new"]).then_some(())
    })
    .await;

    env.apply(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: swarm-controller-config\ndata:\n  config.yml: |\n    jobs:\n      - stream:cctv0:updated\n      - stream:history:new\n",
    )
    .await;
    eventually("the ConfigMap edit applied", WAIT, || async {
        let slices = env.slices("demo").await;
        (all_jobs(&slices) == ["inline:a", "stream:cctv0:updated", "stream:history:new"])
            .then_some(())
    })
    .await;

    env.apply(&swarm_yaml(
        "demo",
        &["inline:a".to_owned(), "inline:b".to_owned()],
        from,
    ))
    .await;
    let status = eventually("the inline edit applied", WAIT, || async {
        let slices = env.slices("demo").await;
        let status = env.swarm("demo").await.status?;
        (all_jobs(&slices).len() == 4 && status.phase.as_deref() == Some("Ready")).then_some(status)
    })
    .await;
    assert_eq!(status.current_revision, 3);
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_failover_moves_only_that_members_jobs_and_they_return_afterwards() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 3).await;
    env.apply(&swarm_yaml("demo", &job_keys(30), "")).await;
    let before = eventually("revision 1 in force", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        let slices = env.slices("demo").await;
        (status.phase.as_deref() == Some("Ready") && all_jobs(&slices) == job_keys(30))
            .then_some(slices)
    })
    .await;
    env.kubectl(&[
        "annotate",
        "swarm",
        "demo",
        "shoal.dev/failover-now=worker-1",
    ])
    .await;
    let during = eventually("worker-1 emptied", WAIT, || async {
        let slices = env.slices("demo").await;
        (slices.get("worker-1").is_some_and(Vec::is_empty) && all_jobs(&slices) == job_keys(30))
            .then_some(slices)
    })
    .await;
    for member in ["worker-0", "worker-2"] {
        assert!(
            before[member]
                .iter()
                .all(|key| during[member].contains(key)),
            "{member} lost a job during failover"
        );
    }
    env.kubectl(&["annotate", "swarm", "demo", "shoal.dev/failover-now-"])
        .await;
    eventually("worker-1's jobs back", WAIT, || async {
        (env.slices("demo").await == before).then_some(())
    })
    .await;
    controller.stop().await;
    env.finish().await;
}
