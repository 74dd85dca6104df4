//! The controller on the emulated cluster: Swarms applied and scaled with the real kubectl.

use crate::common;

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
    // Slice ConfigMaps: named after the pod, labelled, owned by the Swarm.
    for (member, cm) in env.slice_maps("demo").await {
        assert_eq!(
            cm.metadata.name.as_deref(),
            Some(format!("{member}-slice").as_str())
        );
        let labels = cm.metadata.labels.clone().unwrap_or_default();
        for (key, value) in [
            ("shoal.dev/swarm", "demo"),
            ("shoal.dev/pool", "worker"),
            ("shoal.dev/member", member.as_str()),
            ("shoal.dev/revision", "1"),
        ] {
            assert_eq!(
                labels.get(key).map(String::as_str),
                Some(value),
                "{member}: {key}"
            );
        }
        let owners = cm.metadata.owner_references.clone().unwrap_or_default();
        assert!(
            owners.iter().any(|owner| owner.kind == "Swarm"
                && owner.name == "demo"
                && Some(&owner.uid) == swarm.metadata.uid.as_ref()),
            "{member}: {owners:?}"
        );
    }
    assert_eq!(
        swarm
            .status
            .as_ref()
            .and_then(|status| status.observed_generation),
        swarm.metadata.generation
    );
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
    // Getting exactly its own jobs back is a property of the stateless strategies.
    let bounded = "  strategy:\n    type: bounded\n";
    env.apply(&swarm_yaml("demo", &job_keys(30), bounded)).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labelling_a_statefulset_adds_a_pool_and_unlabelling_it_removes_the_pool() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.statefulset("extra", None, 2, false).await;
    env.apply(&swarm_yaml("demo", &job_keys(20), "")).await;
    env.in_force("demo", 1, WAIT).await;
    let first = env.slices("demo").await;
    assert_eq!(
        first.keys().collect::<Vec<_>>(),
        ["worker-0", "worker-1"],
        "an unlabelled StatefulSet is no pool"
    );

    env.kubectl(&["label", "statefulset", "extra", "shoal.dev/swarm=demo"])
        .await;
    let pooled = eventually("revision 2 on both pools", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        let slices = env.slices("demo").await;
        (status.current_revision == 2
            && status.phase.as_deref() == Some("Ready")
            && slices.len() == 4
            && all_jobs(&slices) == job_keys(20))
        .then_some(slices)
    })
    .await;
    for member in ["extra-0", "extra-1", "worker-0", "worker-1"] {
        assert_eq!(pooled[member].len(), 5, "{member}: {pooled:?}");
    }
    let status = env.swarm("demo").await.status.unwrap();
    let pools: std::collections::BTreeSet<&str> =
        status.members.iter().map(|m| m.pool.as_str()).collect();
    assert_eq!(pools, ["extra", "worker"].into());

    env.kubectl(&["label", "statefulset", "extra", "shoal.dev/swarm-"])
        .await;
    eventually(
        "revision 3 on the first pool only, the other's slices deleted",
        WAIT,
        || async {
            let status = env.swarm("demo").await.status?;
            let slices = env.slices("demo").await;
            (status.current_revision == 3
                && status.phase.as_deref() == Some("Ready")
                && slices.keys().eq(["worker-0", "worker-1"].iter())
                && all_jobs(&slices) == job_keys(20))
            .then_some(())
        },
    )
    .await;
    // The unlabelled StatefulSet's pods are left alone.
    assert!(env.pod_uids().await.contains_key("extra-0"));
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_unready_past_failover_after_loses_its_jobs_and_gets_them_back() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.statefulset("worker", Some("demo"), 3, true).await;
    for pod in ["worker-0", "worker-1", "worker-2"] {
        env.set_ready_once_running(pod).await;
    }
    env.ready_pool("worker", 3).await;
    // Getting exactly its own jobs back is a property of the stateless strategies.
    let failover = "  failover:\n    after: 3s\n  strategy:\n    type: bounded\n";
    env.apply(&swarm_yaml("demo", &job_keys(30), failover))
        .await;
    env.in_force("demo", 1, WAIT).await;
    let before = env.slices("demo").await;

    env.set_ready("worker-1", false).await;
    // Within failover.after nothing moves.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        env.slices("demo").await,
        before,
        "jobs moved before failover.after"
    );
    let during = eventually("worker-1 failed over", WAIT, || async {
        let slices = env.slices("demo").await;
        let status = env.swarm("demo").await.status?;
        let failed_over = status
            .members
            .iter()
            .any(|member| member.name == "worker-1" && member.failed_over);
        (failed_over
            && slices.get("worker-1").is_some_and(Vec::is_empty)
            && all_jobs(&slices) == job_keys(30))
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
    assert!(env.events().await.contains("MemberFailedOver"));

    env.set_ready("worker-1", true).await;
    eventually("worker-1's jobs back", WAIT, || async {
        (env.slices("demo").await == before).then_some(())
    })
    .await;
    eventually("a MemberReturned Event", WAIT, || async {
        env.events().await.contains("MemberReturned").then_some(())
    })
    .await;
    controller.stop().await;
    env.finish().await;
}

/// (reason, count) of every Event in the namespace.
async fn event_counts(env: &Env) -> BTreeMap<String, u64> {
    let text = env.kubectl(&["get", "events", "-o", "json"]).await;
    let list: serde_json::Value = serde_json::from_str(&text).expect("events JSON");
    let mut counts = BTreeMap::new();
    for event in list["items"].as_array().into_iter().flatten() {
        let reason = event["reason"].as_str().unwrap_or_default().to_owned();
        let count = event["count"]
            .as_u64()
            .or_else(|| event["series"]["count"].as_u64())
            .unwrap_or(1);
        *counts.entry(reason).or_insert(0) += count;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_published_on_transitions_only() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(6), "")).await;
    env.in_force("demo", 1, WAIT).await;
    let applied = eventually("the RevisionApplied Event", WAIT, || async {
        let counts = event_counts(&env).await;
        counts.contains_key("RevisionApplied").then_some(counts)
    })
    .await;
    assert_eq!(applied.get("RevisionApproved"), Some(&1), "{applied:?}");
    assert_eq!(applied.get("RevisionApplied"), Some(&1), "{applied:?}");

    // Reconciles that change nothing say nothing.
    for touch in 1..=3 {
        env.kubectl(&[
            "annotate",
            "swarm",
            "demo",
            &format!("example.com/touch={touch}"),
            "--overwrite",
        ])
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(event_counts(&env).await, applied);

    // A bad input is reported once, however often it is reconciled. The CRD
    // refuses a key repeated in `spec.jobs`; one repeated by the `jobsFrom`
    // ConfigMap only the controller sees.
    env.apply(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: more-jobs\ndata:\n  jobs.yaml: \"jobs: ['stream:001']\"\n",
    )
    .await;
    let from = "  jobsFrom:\n    configMapKeyRef:\n      name: more-jobs\n      key: jobs.yaml\n";
    env.apply(&swarm_yaml("demo", &job_keys(6), from)).await;
    eventually("the InvalidJobs Event", WAIT, || async {
        event_counts(&env)
            .await
            .contains_key("InvalidJobs")
            .then_some(())
    })
    .await;
    for touch in 4..=6 {
        env.kubectl(&[
            "annotate",
            "swarm",
            "demo",
            &format!("example.com/touch={touch}"),
            "--overwrite",
        ])
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let counts = event_counts(&env).await;
    assert_eq!(counts.get("InvalidJobs"), Some(&1), "{counts:?}");
    let mut expected = applied.clone();
    expected.insert("InvalidJobs".to_owned(), 1);
    assert_eq!(counts, expected);
    controller.stop().await;
    env.finish().await;
}
