//! `kubectl shoal approve|history|undo` (and `diff` of a pending revision): the
//! real plugin binary against the emulated cluster with the controller in-process.

use crate::common;
use crate::plugin_common;

use std::time::Duration;

use common::{Env, all_jobs, eventually, job_keys, swarm_yaml};
use plugin_common::{moved, owners, shoal, shoal_json, shoal_ok};
use shoal_controller::plugin::gate::{ApprovalReport, UndoReport};
use shoal_controller::plugin::history::HistoryReport;
use shoal_controller::plugin::preview::DiffReport;

const WAIT: Duration = Duration::from_secs(30);
const MANUAL: &str = "  approval:\n    policy: Manual\n";

async fn pending(env: &Env, revision: u64) {
    eventually(&format!("revision {revision} pending"), WAIT, || async {
        let pending = env.swarm("demo").await.status?.pending_revision?;
        (pending.revision == revision).then_some(())
    })
    .await;
}

async fn approve_annotation(env: &Env) -> Option<String> {
    env.swarm("demo")
        .await
        .metadata
        .annotations
        .and_then(|annotations| annotations.get("shoal.dev/approve").cloned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_applies_the_pending_manual_revision_and_refuses_a_stale_one() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(10), MANUAL)).await;
    pending(&env, 1).await;

    // A revision that was never computed is refused, naming the pending one.
    let run = shoal(&env, &["approve", "demo", "--revision", "2"]).await;
    assert!(!run.success, "{}", run.stdout);
    assert!(
        run.stderr
            .contains("revision 2 is not the pending revision (no such revision has been computed); the pending revision is 1"),
        "{}",
        run.stderr
    );
    assert_eq!(approve_annotation(&env).await, None);

    let approve_with = env
        .swarm("demo")
        .await
        .status
        .and_then(|status| status.pending_revision)
        .map(|pending| pending.approve_with)
        .expect("the pending revision says how to approve it");
    assert!(approve_with.starts_with("1/sha256:"), "{approve_with}");
    let approval: ApprovalReport = shoal_json(&env, &["approve", "demo"]).await;
    assert_eq!(approval.revision, 1);
    assert_eq!(
        approval.annotation,
        format!("shoal.dev/approve={approve_with}")
    );
    assert_eq!(approve_annotation(&env).await, Some(approve_with.clone()));
    env.in_force("demo", 1, WAIT).await;
    assert_eq!(all_jobs(&env.slices("demo").await), job_keys(10));

    let run = shoal(&env, &["approve", "demo"]).await;
    assert!(!run.success);
    assert!(
        run.stderr
            .contains("has no pending revision (revision 1 is in force, approval policy Manual)"),
        "{}",
        run.stderr
    );

    // Revision 2 is superseded by revision 3 before anyone approves it.
    env.apply(&swarm_yaml("demo", &job_keys(11), MANUAL)).await;
    pending(&env, 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(14), MANUAL)).await;
    pending(&env, 3).await;
    let run = shoal(&env, &["approve", "demo", "--revision", "2"]).await;
    assert!(!run.success);
    assert!(
        run.stderr
            .contains("revision 2 is not the pending revision (it was superseded by revision 3)"),
        "{}",
        run.stderr
    );
    assert_eq!(approve_annotation(&env).await, Some(approve_with));

    // The diff of the pending revision names what approving it does.
    let before = owners(&env.slices("demo").await);
    let preview: DiffReport = shoal_json(&env, &["diff", "demo"]).await;
    assert_eq!(preview.revision, Some(3));
    assert!(preview.needs_approval, "{}", preview.decision);
    assert!(
        preview.decision.contains("approve demo"),
        "{}",
        preview.decision
    );
    assert_eq!(preview.created.len(), 4);
    let status = env.swarm("demo").await.status.expect("status");
    assert_eq!(
        preview.summary.as_ref(),
        status
            .pending_revision
            .as_ref()
            .map(|pending| &pending.summary)
    );

    let table = shoal_ok(&env, &["approve", "demo", "--revision", "3"]).await;
    assert!(table.contains("Approved revision 3 of Swarm"), "{table}");
    env.in_force("demo", 3, WAIT).await;
    let slices = env.slices("demo").await;
    assert_eq!(all_jobs(&slices), job_keys(14));
    let predicted: Vec<(String, String, String)> = preview
        .moves
        .iter()
        .map(|moved| (moved.job.clone(), moved.from.clone(), moved.to.clone()))
        .collect();
    assert_eq!(predicted, moved(&before, &owners(&slices)));
    let after = owners(&slices);
    for created in &preview.created {
        assert_eq!(after.get(&created.job), Some(&created.member));
    }
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_lists_the_recorded_revisions_and_undo_rewrites_the_swarm_through_the_gate() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(6), MANUAL)).await;
    pending(&env, 1).await;
    shoal_ok(&env, &["approve", "demo"]).await;
    env.in_force("demo", 1, WAIT).await;
    env.apply(&swarm_yaml("demo", &job_keys(9), MANUAL)).await;
    pending(&env, 2).await;
    shoal_ok(&env, &["approve", "demo", "--revision", "2"]).await;
    env.in_force("demo", 2, WAIT).await;

    let history: HistoryReport = shoal_json(&env, &["history", "demo"]).await;
    assert_eq!(history.current_revision, 2);
    let rows: Vec<(u64, &str, Option<usize>, usize)> = history
        .revisions
        .iter()
        .map(|row| (row.revision, row.state.as_str(), row.jobs, row.members))
        .collect();
    assert_eq!(rows, [(1, "", Some(6), 2), (2, "in force", Some(9), 2)]);
    let recorded = env
        .kubectl(&[
            "get",
            "configmaps",
            "-l",
            "shoal.dev/revision-history=true",
            "-o",
            "name",
        ])
        .await;
    assert_eq!(
        recorded.lines().collect::<Vec<_>>(),
        ["configmap/demo-rev-1", "configmap/demo-rev-2"]
    );
    let table = shoal_ok(&env, &["history", "demo"]).await;
    assert!(table.contains("in force"), "{table}");
    assert!(table.contains("Total: 2"), "{table}");
    // Revision 2 in detail is exactly what its slices hold.
    let detailed: HistoryReport = shoal_json(&env, &["history", "demo", "--revision", "2"]).await;
    let detail = detailed.detail.expect("revision 2 in detail");
    let recomputed: std::collections::BTreeMap<String, String> = detail
        .jobs
        .iter()
        .map(|owner| (owner.job.clone(), owner.member.clone()))
        .collect();
    assert_eq!(recomputed, owners(&env.slices("demo").await));
    let run = shoal(&env, &["history", "demo", "--revision", "7"]).await;
    assert!(!run.success);
    assert!(
        run.stderr
            .contains("revision 7 is not in the history (recorded: 1, 2)"),
        "{}",
        run.stderr
    );

    let run = shoal(&env, &["undo", "demo", "--to-revision", "9"]).await;
    assert!(!run.success);
    assert!(
        run.stderr
            .contains("revision 9 is not in the history (recorded: 1, 2)"),
        "{}",
        run.stderr
    );

    let before = owners(&env.slices("demo").await);
    let undo: UndoReport = shoal_json(&env, &["undo", "demo"]).await;
    assert_eq!(undo.to_revision, 1);
    assert_eq!(undo.preview.revision, Some(3));
    assert!(undo.preview.needs_approval);
    assert_eq!(undo.preview.deleted.len(), 3);
    // The Swarm itself says what is wanted now: revision 1's job list, and why it changed.
    let swarm = env.swarm("demo").await;
    assert_eq!(swarm.spec.jobs, job_keys(6));
    let annotations = swarm.metadata.annotations.unwrap_or_default();
    assert!(!annotations.contains_key("shoal.dev/rollback-to"));
    assert_eq!(
        annotations
            .get("kubernetes.io/change-cause")
            .map(String::as_str),
        Some("kubectl shoal undo demo --to-revision 1")
    );
    // Through the gate: nothing changes before the approval.
    pending(&env, 3).await;
    assert_eq!(all_jobs(&env.slices("demo").await), job_keys(9));
    let history: HistoryReport = shoal_json(&env, &["history", "demo"]).await;
    assert_eq!(
        history
            .revisions
            .last()
            .map(|row| (row.revision, row.state.as_str())),
        Some((3, "pending approval"))
    );

    shoal_ok(&env, &["approve", "demo", "--revision", "3"]).await;
    env.in_force("demo", 3, WAIT).await;
    let slices = env.slices("demo").await;
    assert_eq!(all_jobs(&slices), job_keys(6));
    let predicted: Vec<(String, String, String)> = undo
        .preview
        .moves
        .iter()
        .map(|moved| (moved.job.clone(), moved.from.clone(), moved.to.clone()))
        .collect();
    assert_eq!(predicted, moved(&before, &owners(&slices)));
    let history: HistoryReport = shoal_json(&env, &["history", "demo"]).await;
    assert_eq!(
        history
            .revisions
            .iter()
            .map(|row| (row.revision, row.jobs))
            .collect::<Vec<_>>(),
        [(1, Some(6)), (2, Some(9)), (3, Some(6))]
    );
    controller.stop().await;
    env.finish().await;
}

/// A Swarm reading its job list from ConfigMap `jobs` (keys `job:0`… `job:<n-1>`).
async fn swarm_from_config_map(env: &Env, jobs: usize, strategy: &str) {
    let keys: String = (0..jobs).map(|i| format!("      - job:{i}\n")).collect();
    env.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: jobs\ndata:\n  config.yml: |\n    jobs:\n{keys}"
    ))
    .await;
    env.apply(&format!(
        "apiVersion: shoal.dev/v1alpha1\nkind: Swarm\nmetadata:\n  name: demo\nspec:\n  jobsFrom:\n    configMapKeyRef:\n      name: jobs\n      key: config.yml\n  strategy:\n    type: {strategy}\n"
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_keeps_jobs_from_and_refuses_a_job_list_it_does_not_own_unless_asked_to_inline_it() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    swarm_from_config_map(&env, 6, "bounded").await;
    env.in_force("demo", 1, WAIT).await;
    swarm_from_config_map(&env, 9, "bounded").await;
    env.in_force("demo", 2, WAIT).await;

    // Revision 1's jobs are not in the ConfigMap: undo is refused and writes nothing.
    let before = env.swarm("demo").await.metadata.resource_version;
    let run = shoal(&env, &["undo", "demo"]).await;
    assert!(!run.success, "{}", run.stdout);
    let namespace = &env.namespace;
    for part in [
        format!("Swarm {namespace}/demo takes its job list from ConfigMap jobs (spec.jobsFrom)"),
        "revision 1's job list (6 jobs) differs from the one there now (9 jobs)".to_owned(),
        "revert the change in Git, or edit ConfigMap jobs".to_owned(),
        format!("kubectl shoal undo demo -n {namespace} --to-revision 1 --inline-jobs"),
    ] {
        assert!(
            run.stderr.contains(&part),
            "{part:?} not in: {}",
            run.stderr
        );
    }
    assert_eq!(env.swarm("demo").await.metadata.resource_version, before);

    // Only the strategy changed since revision 2: undo rolls back the strategy alone.
    swarm_from_config_map(&env, 9, "ring").await;
    env.in_force("demo", 3, WAIT).await;
    let undo: UndoReport = shoal_json(&env, &["undo", "demo"]).await;
    assert_eq!(undo.to_revision, 2);
    assert_eq!(undo.kept_jobs_from.as_deref(), Some("ConfigMap jobs"));
    assert_eq!(undo.replaced_jobs_from, None);
    let swarm = env.swarm("demo").await;
    assert!(swarm.spec.jobs.is_empty(), "{:?}", swarm.spec.jobs);
    assert!(swarm.spec.jobs_from.is_some(), "jobsFrom was dropped");
    assert_eq!(
        format!("{:?}", swarm.spec.strategy.type_),
        "Bounded",
        "the strategy is revision 2's"
    );
    env.in_force("demo", 4, WAIT).await;

    // Asked for explicitly, the old list goes inline and jobsFrom goes.
    let undo: UndoReport = shoal_json(
        &env,
        &["undo", "demo", "--to-revision", "1", "--inline-jobs"],
    )
    .await;
    assert_eq!(undo.replaced_jobs_from.as_deref(), Some("ConfigMap jobs"));
    let swarm = env.swarm("demo").await;
    assert_eq!(swarm.spec.jobs.len(), 6);
    assert_eq!(swarm.spec.jobs_from, None);
    controller.stop().await;
    env.finish().await;
}

/// What a dry run must leave alone: the Swarm's generation (its spec) and annotations.
async fn spec_and_annotations(env: &Env) -> (Option<i64>, String) {
    let swarm = env.swarm("demo").await;
    let annotations = serde_json::to_string(&swarm.metadata.annotations).expect("json");
    (swarm.metadata.generation, annotations)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_runs_print_the_patch_or_the_servers_answer_and_change_nothing() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(6), MANUAL)).await;
    pending(&env, 1).await;
    let approve_with = env
        .swarm("demo")
        .await
        .status
        .and_then(|s| s.pending_revision);
    let approve_with = approve_with.expect("pending").approve_with;
    let before = spec_and_annotations(&env).await;

    let client = shoal_ok(&env, &["approve", "demo", "--dry-run=client"]).await;
    assert!(
        client.contains("Dry run (client): nothing was sent."),
        "{client}"
    );
    assert!(
        client.contains(&format!("\"shoal.dev/approve\": \"{approve_with}\"")),
        "{client}"
    );
    let server: serde_json::Value =
        shoal_json(&env, &["approve", "demo", "--dry-run=server"]).await;
    assert_eq!(server["dryRun"], "server");
    assert_eq!(
        server["writes"][0]["result"]["metadata"]["annotations"]["shoal.dev/approve"],
        approve_with.as_str(),
        "the server's answer holds the approval: {server}"
    );
    assert_eq!(server["report"]["revision"], 1);

    let paused = shoal_ok(&env, &["pause", "swarm/demo", "--dry-run=server"]).await;
    assert!(
        paused.contains("with dryRun=All and stored nothing"),
        "{paused}"
    );
    assert!(paused.contains("\"paused\": true"), "{paused}");
    let undo = shoal(&env, &["undo", "demo", "--dry-run"]).await;
    assert!(!undo.success, "nothing to undo yet: {}", undo.stdout);
    assert_eq!(
        spec_and_annotations(&env).await,
        before,
        "a dry run changed the Swarm"
    );
    assert!(!env.swarm("demo").await.spec.paused);

    // Then for real: the approval lands.
    shoal_ok(&env, &["approve", "demo"]).await;
    env.in_force("demo", 1, WAIT).await;
    controller.stop().await;
    env.finish().await;
}
