//! The approval gate end to end, with kubectl alone.

use crate::common;

use std::time::Duration;

use common::{Env, all_jobs, eventually, job_keys, swarm_yaml};

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_approval_applies_exactly_the_approved_revision_and_ignores_a_stale_one() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    let manual = "  approval:\n    policy: Manual\n";
    env.apply(&swarm_yaml("demo", &job_keys(10), manual)).await;

    let pending = eventually("revision 1 pending", WAIT, || async {
        env.swarm("demo").await.status?.pending_revision
    })
    .await;
    assert_eq!(pending.revision, 1);
    // Nothing is written before approval.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(env.slices("demo").await.is_empty());
    let table = env.kubectl(&["get", "sw", "demo"]).await;
    assert!(table.contains("AwaitingApproval"), "{table}");

    env.approve_pending("demo").await;
    eventually("revision 1 applied", WAIT, || async {
        let slices = env.slices("demo").await;
        (all_jobs(&slices) == job_keys(10)).then_some(())
    })
    .await;

    // A change becomes revision 2; before anyone approves it, another change supersedes it.
    env.apply(&swarm_yaml("demo", &job_keys(11), manual)).await;
    let second = eventually("revision 2 pending", WAIT, || async {
        let pending = env.swarm("demo").await.status?.pending_revision?;
        (pending.revision == 2).then_some(pending)
    })
    .await;
    env.apply(&swarm_yaml("demo", &job_keys(12), manual)).await;
    let pending = eventually("revision 3 supersedes 2", WAIT, || async {
        let pending = env.swarm("demo").await.status?.pending_revision?;
        (pending.revision == 3).then_some(pending)
    })
    .await;
    assert_eq!(pending.summary.supersedes, Some(2));
    // The pending revisions and the superseding are Events too.
    let events = eventually(
        "RevisionPending and RevisionSuperseded Events",
        WAIT,
        || async {
            let events = env.events().await;
            (events.contains("RevisionPending") && events.contains("RevisionSuperseded"))
                .then_some(events)
        },
    )
    .await;
    assert!(
        events.contains("revision 3 supersedes pending revision 2"),
        "{events}"
    );
    // Each pending revision is its own Event with its own summary, not a repeat of the
    // first one's (kube's Recorder alone would fold them into one series, first note kept).
    eventually(
        "a RevisionPending Event for each revision",
        WAIT,
        || async {
            let events = env.events().await;
            (1..=3)
                .all(|revision| events.contains(&format!("revision {revision} waits for approval")))
                .then_some(())
        },
    )
    .await;

    // Approving the superseded revision 2 (as it was reviewed) changes nothing and is refused.
    env.annotate_approval("demo", &second.approve_with).await;
    let message = eventually("the refused approval reported", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        let awaiting = status
            .conditions
            .iter()
            .find(|c| c.type_ == "AwaitingApproval")?;
        awaiting
            .message
            .contains("refused")
            .then(|| awaiting.message.clone())
    })
    .await;
    assert!(
        message.contains("revision 2, which is not pending"),
        "{message}"
    );
    let events = eventually("an ApprovalRefused Event", WAIT, || async {
        let events = env.event_messages().await;
        events.contains("ApprovalRefused").then_some(events)
    })
    .await;
    assert!(events.contains("the pending revision is 3"), "{events}");
    assert_eq!(all_jobs(&env.slices("demo").await), job_keys(10));
    assert_eq!(env.swarm("demo").await.status.unwrap().current_revision, 1);

    env.approve_pending("demo").await;
    eventually("revision 3 applied", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        let slices = env.slices("demo").await;
        (status.current_revision == 3 && all_jobs(&slices) == job_keys(12)).then_some(())
    })
    .await;
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_applies_small_changes_alone_and_holds_large_ones() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    let budget = "  approval:\n    policy: Budget\n    maxMovedJobs: 3\n";
    env.apply(&swarm_yaml("demo", &job_keys(40), budget)).await;
    eventually("revision 1 applied (moves nothing)", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        (status.current_revision == 1).then_some(())
    })
    .await;
    // One more job moves no job: within budget.
    env.apply(&swarm_yaml("demo", &job_keys(41), budget)).await;
    eventually("revision 2 applied alone", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        (status.current_revision == 2 && status.pending_revision.is_none()).then_some(())
    })
    .await;
    // Scaling 2 -> 4 moves about half the jobs: over budget.
    env.kubectl(&["scale", "statefulset", "worker", "--replicas=4"])
        .await;
    let pending = eventually("revision 3 held for approval", WAIT, || async {
        env.swarm("demo").await.status?.pending_revision
    })
    .await;
    assert!(pending.summary.jobs_moved > 3, "{pending:?}");
    let status = env.swarm("demo").await.status.unwrap();
    assert_eq!(status.current_revision, 2);
    let awaiting = status
        .conditions
        .iter()
        .find(|c| c.type_ == "AwaitingApproval")
        .unwrap();
    assert_eq!(awaiting.reason, "OverBudget");
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_rollback_annotation_changes_nothing_and_says_to_use_undo() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(6), "")).await;
    env.in_force("demo", 1, WAIT).await;
    env.apply(&swarm_yaml("demo", &job_keys(9), "")).await;
    env.in_force("demo", 2, WAIT).await;
    env.kubectl(&["annotate", "swarm", "demo", "shoal.dev/rollback-to=1"])
        .await;
    let events = eventually("a RollbackAnnotationRefused Event", WAIT, || async {
        let events = env.event_messages().await;
        events
            .contains("RollbackAnnotationRefused")
            .then_some(events)
    })
    .await;
    assert!(events.contains("kubectl shoal undo demo"), "{events}");
    let status = env.swarm("demo").await.status.unwrap();
    assert_eq!(status.current_revision, 2);
    assert!(status.pending_revision.is_none());
    assert_eq!(all_jobs(&env.slices("demo").await), job_keys(9));
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shoals_events_carry_the_timestamps_kubectl_sorts_by() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    let manual = "  approval:\n    policy: Manual\n";
    env.apply(&swarm_yaml("demo", &job_keys(6), manual)).await;
    eventually("revision 1 pending", WAIT, || async {
        env.swarm("demo").await.status?.pending_revision
    })
    .await;
    env.approve_pending("demo").await;
    env.in_force("demo", 1, WAIT).await;
    let listed = env
        .kubectl(&[
            "get",
            "events",
            "--sort-by=.lastTimestamp",
            "-o",
            r#"jsonpath={range .items[?(@.source.component=="shoal-controller")]}{.reason} {.firstTimestamp} {.lastTimestamp} {.count}{"\n"}{end}"#,
        ])
        .await;
    // The pool is labelled before its Swarm exists: a real API server may show the
    // controller the StatefulSet first, which it rightly answers with SwarmNotFound.
    let rows: Vec<Vec<&str>> = listed
        .lines()
        .map(|line| line.split(' ').collect::<Vec<&str>>())
        .filter(|row| row[0] != "SwarmNotFound")
        .collect();
    let reasons: Vec<&str> = rows.iter().map(|row| row[0]).collect();
    assert_eq!(
        reasons,
        ["RevisionPending", "RevisionApproved", "RevisionApplied"],
        "{listed}"
    );
    for row in &rows {
        assert_eq!(row.len(), 4, "{listed}");
        assert!(
            row[1].parse::<jiff::Timestamp>().is_ok() && row[2].parse::<jiff::Timestamp>().is_ok(),
            "{listed}"
        );
        assert_eq!(row[3], "1", "{listed}");
    }
    let sorted: Vec<&str> = rows.iter().map(|row| row[2]).collect();
    let mut in_order = sorted.clone();
    in_order.sort();
    assert_eq!(sorted, in_order);
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_message_is_one_event_whose_count_and_last_timestamp_grow() {
    use k8s_openapi::api::core::v1::{Event as CoreEvent, ObjectReference};
    use kube::runtime::events::{Event, EventType, Reporter};
    let env = Env::start().await;
    let recorders = shoal_controller::events::EventRecorders::new(
        env.client.clone(),
        Reporter {
            controller: "shoal-controller".to_owned(),
            instance: Some("test".to_owned()),
        },
    );
    let reference = ObjectReference {
        kind: Some("Swarm".to_owned()),
        api_version: Some("shoal.dev/v1alpha1".to_owned()),
        name: Some("demo".to_owned()),
        namespace: Some(env.namespace.clone()),
        ..ObjectReference::default()
    };
    let event = |note: &str| Event {
        type_: EventType::Warning,
        reason: "WriteSliceFailed".to_owned(),
        note: Some(note.to_owned()),
        action: "Reconcile".to_owned(),
        secondary: None,
    };
    recorders
        .publish(&event("the same"), &reference)
        .await
        .unwrap();
    // Event timestamps have a precision of one second.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    recorders
        .publish(&event("the same"), &reference)
        .await
        .unwrap();
    recorders
        .publish(&event("another"), &reference)
        .await
        .unwrap();
    let events = kube::Api::<CoreEvent>::namespaced(env.client.clone(), &env.namespace)
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    let by_message: std::collections::BTreeMap<String, (Option<i32>, bool)> = events
        .iter()
        .map(|event| {
            (
                event.message.clone().unwrap_or_default(),
                (
                    event.count,
                    event.last_timestamp.as_ref().map(|time| time.0)
                        > event.first_timestamp.as_ref().map(|time| time.0),
                ),
            )
        })
        .collect();
    assert_eq!(by_message.len(), 2, "{events:?}");
    assert_eq!(by_message["the same"], (Some(2), true));
    assert_eq!(by_message["another"], (Some(1), false));
    env.finish().await;
}
