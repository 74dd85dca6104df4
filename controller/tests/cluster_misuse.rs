//! Issue 10's mistakes and misuse, done as a user does them: with kubectl against the
//! cluster (the emulator, or `SHOAL_TEST_KUBECONFIG`), the controller running. Each test
//! names the reason, Event or state that proves the promise held.

use crate::common;

use std::time::Duration;

use shoal_controller::api::swarm::{Condition, PendingRevision, SwarmStatus};

use common::{Env, acknowledge, all_jobs, eventually, job_keys, slice_hash, swarm_yaml};

const WAIT: Duration = Duration::from_secs(30);
const MANUAL: &str = "  approval:\n    policy: Manual\n";

async fn status(env: &Env) -> Option<SwarmStatus> {
    env.swarm("demo").await.status
}

fn find_condition<'a>(status: &'a SwarmStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// Waits for a revision to wait for approval while `in_force` stays in force, and
/// returns it; fails at once if another revision is put in force instead.
async fn wait_pending(env: &Env, in_force: u64) -> PendingRevision {
    eventually("a pending revision", WAIT, || async {
        let status = status(env).await?;
        assert_eq!(
            status.current_revision, in_force,
            "revision {} was put in force without approval: {status:?}",
            status.current_revision
        );
        status.pending_revision
    })
    .await
}

/// Waits for a Warning Event with `reason` whose message contains `needle`; returns
/// every Event of the namespace, one `<type> <reason>: <message>` per line.
async fn warning(env: &Env, reason: &str, needle: &str) -> String {
    eventually(
        &format!("a {reason} Warning containing {needle:?}"),
        WAIT,
        || async {
            let events = env
                .kubectl(&[
                    "get",
                    "events",
                    "-o",
                    r#"jsonpath={range .items[*]}{.type} {.reason}: {.message}{"\n"}{end}"#,
                ])
                .await;
            events
                .lines()
                .any(|line| {
                    line.starts_with(&format!("Warning {reason}: ")) && line.contains(needle)
                })
                .then_some(events)
        },
    )
    .await
}

/// A Manual Swarm over `replicas` members with revision 1 approved and in force.
async fn manual_swarm_in_force(env: &Env, replicas: u32, jobs: usize) {
    env.pool("worker", "demo", replicas).await;
    env.ready_pool("worker", replicas).await;
    env.apply(&swarm_yaml("demo", &job_keys(jobs), MANUAL))
        .await;
    wait_pending(env, 0).await;
    env.approve_pending("demo").await;
    env.in_force("demo", 1, WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approval_of_a_withdrawn_revision_does_not_put_a_later_plan_in_force() {
    let env = Env::start().await;
    let controller = env.start_controller();
    manual_swarm_in_force(&env, 3, 12).await;
    let before = env.slices("demo").await;

    // Scale 3 -> 4: revision N waits. Back to 3: N is withdrawn.
    env.kubectl(&["scale", "statefulset", "worker", "--replicas=4"])
        .await;
    let withdrawn = wait_pending(&env, 1).await;
    env.kubectl(&["scale", "statefulset", "worker", "--replicas=3"])
        .await;
    eventually("the pending revision withdrawn", WAIT, || async {
        status(&env).await?.pending_revision.is_none().then_some(())
    })
    .await;
    let number = withdrawn.revision;

    // The issue's repro: approve N by its number. Refused, with a Warning naming the value.
    env.annotate_approval("demo", &number.to_string()).await;
    warning(
        &env,
        "ApprovalRefused",
        &format!("shoal.dev/approve=\"{number}\" is not `<revision>/<hash>`"),
    )
    .await;
    // Worse: the withdrawn plan's exact approval value, copied while it was pending.
    env.annotate_approval("demo", &withdrawn.approve_with).await;
    warning(
        &env,
        "ApprovalRefused",
        &format!("names revision {number}, which is not pending"),
    )
    .await;

    // A different plan that needs approval. (Scaling down to 1 applies at once under
    // Manual: it only re-homes the jobs of members that are gone.)
    env.kubectl(&["scale", "statefulset", "worker", "--replicas=5"])
        .await;
    let next = wait_pending(&env, 1).await;
    assert!(
        next.revision > number,
        "the new plan got number {} although {number} was given before",
        next.revision
    );
    // However long we wait, the stale approval does not put it in force.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let now = status(&env).await.expect("a status");
    assert_eq!(now.current_revision, 1, "{now:?}");
    assert_eq!(
        now.pending_revision.as_ref().map(|p| p.revision),
        Some(next.revision)
    );
    assert_eq!(now.phase.as_deref(), Some("AwaitingApproval"));
    let awaiting = find_condition(&now, "AwaitingApproval").expect("AwaitingApproval");
    assert!(
        awaiting.message.contains(&format!(
            "refused: shoal.dev/approve names revision {number}, which is not pending (the pending revision is {}",
            next.revision
        )),
        "{}",
        awaiting.message
    );
    assert_eq!(env.slices("demo").await, before);
    let events = env.event_messages().await;
    assert!(
        events.contains(&format!(
            "RevisionPending: revision {} waits for approval",
            next.revision
        )),
        "{events}"
    );
    // The honest approval of what is pending still works.
    env.approve_pending("demo").await;
    env.in_force("demo", next.revision, WAIT).await;
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_that_is_not_a_revision_and_hash_is_a_warning_and_approves_nothing() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(6), MANUAL)).await;
    let pending = wait_pending(&env, 0).await;
    env.annotate_approval("demo", "abc").await;
    let events = warning(
        &env,
        "ApprovalRefused",
        "shoal.dev/approve=\"abc\" is not `<revision>/<hash>`",
    )
    .await;
    assert!(
        events.contains("status.pendingRevision.approveWith"),
        "{events}"
    );
    let now = status(&env).await.expect("a status");
    assert_eq!(now.current_revision, 0);
    assert_eq!(
        now.pending_revision.map(|p| p.revision),
        Some(pending.revision)
    );
    assert!(env.slices("demo").await.is_empty());
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_of_the_next_number_written_in_advance_does_not_approve_the_next_plan() {
    let env = Env::start().await;
    let controller = env.start_controller();
    manual_swarm_in_force(&env, 2, 10).await;
    let before = env.slices("demo").await;
    // current + 1, with a well-formed hash nobody computed.
    let zeros = "0".repeat(64);
    env.annotate_approval("demo", &format!("2/sha256:{zeros}"))
        .await;
    warning(
        &env,
        "ApprovalRefused",
        "names revision 2, which does not exist yet",
    )
    .await;
    env.kubectl(&["scale", "statefulset", "worker", "--replicas=3"])
        .await;
    let next = wait_pending(&env, 1).await;
    assert_ne!(
        next.revision, 2,
        "the plan got the number approved in advance"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let now = status(&env).await.expect("a status");
    assert_eq!(now.current_revision, 1, "{now:?}");
    assert_eq!(now.phase.as_deref(), Some("AwaitingApproval"));
    assert_eq!(env.slices("demo").await, before);
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_now_naming_no_member_is_a_warning_naming_it_and_moves_nothing() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(8), "")).await;
    env.in_force("demo", 1, WAIT).await;
    let before = env.slices("demo").await;
    env.kubectl(&[
        "annotate",
        "swarm",
        "demo",
        "shoal.dev/failover-now=nope",
        "--overwrite",
    ])
    .await;
    warning(
        &env,
        "FailoverTargetUnknown",
        "shoal.dev/failover-now names nope, which is no member of the Swarm's pools (members: worker-0, worker-1)",
    )
    .await;
    let now = status(&env).await.expect("a status");
    assert_eq!(now.current_revision, 1);
    assert_eq!(env.slices("demo").await, before);
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emptying_the_job_list_under_a_job_budget_waits_for_approval() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    let budget = "  approval:\n    policy: Budget\n    maxMovedJobs: 3\n";
    env.apply(&swarm_yaml("demo", &job_keys(10), budget)).await;
    env.in_force("demo", 1, WAIT).await;
    env.apply(&format!(
        "apiVersion: shoal.dev/v1alpha1\nkind: Swarm\nmetadata:\n  name: demo\nspec:\n  jobs: []\n{budget}"
    ))
    .await;
    let pending = wait_pending(&env, 1).await;
    assert_eq!(pending.summary.jobs_stopped, 10, "{pending:?}");
    let now = status(&env).await.expect("a status");
    let awaiting = find_condition(&now, "AwaitingApproval").expect("AwaitingApproval");
    assert_eq!(awaiting.reason, "OverBudget", "{}", awaiting.message);
    assert!(
        awaiting
            .message
            .contains("moves or stops 10 jobs (budget 3)"),
        "{}",
        awaiting.message
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(all_jobs(&env.slices("demo").await), job_keys(10));
    assert_eq!(status(&env).await.expect("a status").current_revision, 1);
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_key_in_the_job_configmap_names_the_configmap_and_the_key() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    let job_list = |jobs: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: job-list\ndata:\n  jobs.yml: \"jobs: [{jobs}]\"\n"
        )
    };
    env.apply(&job_list("a, b, c")).await;
    let from = "  jobsFrom:\n    configMapKeyRef:\n      name: job-list\n      key: jobs.yml\n";
    env.apply(&swarm_yaml("demo", &["inline".to_owned()], from))
        .await;
    env.in_force("demo", 1, WAIT).await;
    env.apply(&job_list("a, b, c, b")).await;
    let message = eventually("Degraded InvalidJobs", WAIT, || async {
        let now = status(&env).await?;
        let degraded = find_condition(&now, "Degraded")?;
        (degraded.status == "True" && degraded.reason == "InvalidJobs")
            .then(|| degraded.message.clone())
    })
    .await;
    assert!(
        message.contains(
            "ConfigMap job-list key jobs.yml jobs[3] \"b\" repeats ConfigMap job-list key jobs.yml jobs[1]"
        ),
        "{message}"
    );
    warning(&env, "InvalidJobs", "ConfigMap job-list key jobs.yml").await;
    // The last good job list stays in force.
    assert_eq!(
        all_jobs(&env.slices("demo").await),
        ["a", "b", "c", "inline"]
    );
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_unavailable_zero_is_refused_by_the_api_server() {
    let env = Env::start().await;
    let yaml = swarm_yaml("demo", &job_keys(2), "  rollout:\n    maxUnavailable: 0\n");
    let output = env
        .cluster
        .kubectl_with_stdin(&["apply", "-f", "-"], Some(&yaml))
        .await
        .expect("kubectl runs");
    assert!(
        !output.success(),
        "kubectl accepted maxUnavailable: 0: {}",
        output.stdout
    );
    assert!(
        output.stderr.contains("spec.rollout.maxUnavailable"),
        "{}",
        output.stderr
    );
    let (exists, text) = env.kubectl_status(&["get", "swarm", "demo"]).await;
    assert!(!exists, "the refused Swarm exists: {text}");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swarm_whose_pools_have_no_member_is_not_ready() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(6), "")).await;
    env.in_force("demo", 1, WAIT).await;
    env.kubectl(&["scale", "statefulset", "worker", "--replicas=0"])
        .await;
    let ready = eventually("Ready=False NoMembers", WAIT, || async {
        let now = status(&env).await?;
        let ready = find_condition(&now, "Ready")?.clone();
        (ready.status == "False" && ready.reason == "NoMembers").then_some(ready)
    })
    .await;
    assert!(
        ready.message.contains("no member runs the 6 jobs"),
        "{}",
        ready.message
    );
    let phase = env
        .kubectl(&["get", "swarm", "demo", "-o", "jsonpath={.status.phase}"])
        .await;
    assert_ne!(phase, "Ready");
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledgement_annotated_by_hand_on_a_member_lease_grants_nothing() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 3).await;
    env.ready_pool("worker", 3).await;
    env.apply(&swarm_yaml("demo", &job_keys(30), "")).await;
    env.in_force("demo", 1, WAIT).await;
    let owners = ["worker-0", "worker-1", "worker-2"];
    for pod in owners {
        let (revision, hash) = slice_hash(&env, pod).await;
        acknowledge(&env, pod, revision, &hash).await;
    }
    let before = env.slices("demo").await;
    env.kubectl(&["scale", "statefulset", "worker", "--replicas=4"])
        .await;
    let revokes = eventually("every old owner's revoke written", WAIT, || async {
        let slices = env.slices("demo").await;
        let mut revokes = Vec::new();
        for pod in owners {
            if slices.get(pod) == before.get(pod) {
                return None;
            }
            revokes.push(slice_hash(&env, pod).await);
        }
        Some(revokes)
    })
    .await;
    // An admin (no admission policy stops one) annotates every old owner's Lease:
    // the issue's made-up values, and revoke hashes written for another member.
    let forgeries = [
        ("999".to_owned(), "sha256:x".to_owned()),
        (revokes[1].0.to_string(), revokes[2].1.clone()),
        (revokes[2].0.to_string(), revokes[0].1.clone()),
    ];
    for (pod, (revision, hash)) in owners.iter().zip(&forgeries) {
        env.kubectl(&[
            "annotate",
            "lease",
            &format!("{pod}-member"),
            "--overwrite",
            &format!("shoal.dev/acked-revision={revision}"),
            &format!("shoal.dev/acked-hash={hash}"),
        ])
        .await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let slices = env.slices("demo").await;
    assert!(
        slices.get("worker-3").is_none_or(Vec::is_empty),
        "worker-3 was granted jobs on forged acknowledgements: {slices:?}"
    );
    assert!(
        all_jobs(&slices).len() < 30,
        "the revoked jobs stay unowned"
    );
    let now = status(&env).await.expect("a status");
    assert_eq!(now.phase.as_deref(), Some("Progressing"));
    // The real owners acknowledge: the grant follows.
    for (pod, (revision, hash)) in owners.iter().zip(&revokes) {
        acknowledge(&env, pod, *revision, hash).await;
    }
    eventually(
        "worker-3 granted once the owners acknowledged",
        WAIT,
        || async {
            let slices = env.slices("demo").await;
            (all_jobs(&slices) == job_keys(30)
                && slices.get("worker-3").is_some_and(|j| !j.is_empty()))
            .then_some(())
        },
    )
    .await;
    controller.stop().await;
    env.finish().await;
}
