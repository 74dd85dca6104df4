//! An ordered rollout of a DeploymentPlan driven by a kubectl user through the
//! plugin: update domain by update domain in the order set, pause holds it,
//! resume finishes it, `rollout-status` blocks until it is done, and undo
//! returns to an earlier revision's payloads; a direct edit of the placement
//! record (`status.instances`) is put back from the member slices. Members report their instances
//! on their own Lease, as their sidecar would. Runs on the emulator or a real
//! control plane (`SHOAL_TEST_KUBECONFIG`).

use crate::common;
use crate::plugin_common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Env, eventually, job_keys, report_instance_states, swarm_yaml};
use kube::Api;
use plugin_common::{shoal, shoal_ok};
use shoal_controller::api::deployment_plan::{DeploymentPlan, DeploymentPlanStatus};
use shoal_core::format::parse_slice;

const WAIT: Duration = Duration::from_secs(30);

const PLAN: &str = r#"apiVersion: shoal.dev/v1alpha1
kind: DeploymentPlan
metadata:
  name: web
spec:
  swarm: demo
  applications:
  - name: nginx
    resources: {cores: 1}
  approval: {policy: Automatic}
  deployment:
    instances: 2
    payloads:
    - application: nginx
      coordinates: {image: "nginx:1"}
"#;

async fn plan_status(env: &Env) -> DeploymentPlanStatus {
    let api: Api<DeploymentPlan> = Api::namespaced(env.client.clone(), &env.namespace);
    api.get("web")
        .await
        .expect("the plan exists")
        .status
        .unwrap_or_default()
}

/// A one-member pool of `demo` in update domain `domain`; returns its pod's uid.
async fn pool_in_domain(env: &Env, name: &str, domain: &str) -> BTreeMap<String, String> {
    env.pool(name, "demo", 1).await;
    let domain = format!("shoal.dev/update-domain={domain}");
    env.kubectl(&[
        "annotate",
        "statefulset",
        name,
        "shoal.dev/capacity=cores=4",
        &domain,
    ])
    .await;
    env.ready_pool(name, 1).await
}

/// The controller, Swarm `demo` with one-member pools `east` and `west` (each its own
/// update domain), and the plan `web` applied; returns the pods' uids too.
async fn plan_over_two_domains() -> (Env, common::Running, BTreeMap<String, String>) {
    let env = Env::start().await;
    env.install_plan_crd().await;
    let controller = env.start_controller();
    env.apply(&swarm_yaml("demo", &job_keys(2), "")).await;
    let mut uids = pool_in_domain(&env, "east", "east").await;
    uids.extend(pool_in_domain(&env, "west", "west").await);
    env.apply(PLAN).await;
    (env, controller, uids)
}

/// Every member reports its entries installed at their deployment, on its own
/// Lease (server-side apply as the sidecar).
async fn members_report_installed(env: &Env, uids: &BTreeMap<String, String>) {
    let status = plan_status(env).await;
    let mut by_member: BTreeMap<String, serde_json::Map<String, serde_json::Value>> =
        BTreeMap::new();
    for entry in &status.instances {
        by_member.entry(entry.member.clone()).or_default().insert(
            entry.name.clone(),
            serde_json::json!({"state": "installed", "deployment": entry.deployment}),
        );
    }
    for (member, states) in by_member {
        let uid = &uids[&member];
        report_instance_states(
            env,
            &member,
            uid,
            &member,
            serde_json::Value::Object(states),
        )
        .await;
    }
}

/// The deployment each update domain's instances run.
fn revisions_by_domain(status: &DeploymentPlanStatus) -> BTreeMap<String, Vec<u64>> {
    let mut by_domain: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for entry in status.instances.iter().filter(|e| e.delivered()) {
        by_domain
            .entry(entry.update_domain.clone())
            .or_default()
            .push(entry.deployment);
    }
    by_domain
}

fn runs(status: &DeploymentPlanStatus, domain: &str, revision: u64) -> bool {
    revisions_by_domain(status)
        .get(domain)
        .is_some_and(|revisions| revisions.iter().all(|r| *r == revision))
}

/// Waits until `domain` runs `revision` (and every other domain what it ran).
async fn domain_reaches(env: &Env, domain: &str, revision: u64) -> DeploymentPlanStatus {
    let what = format!("update domain {domain} runs deployment {revision}");
    eventually(&what, WAIT, || async {
        let status = plan_status(env).await;
        runs(&status, domain, revision).then_some(status)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_update_rolls_domain_by_domain_pauses_resumes_and_undoes_through_the_plugin() {
    let (env, controller, uids) = plan_over_two_domains().await;
    eventually("one instance in each domain", WAIT, || async {
        let status = plan_status(&env).await;
        (revisions_by_domain(&status).len() == 2).then_some(())
    })
    .await;
    members_report_installed(&env, &uids).await;
    shoal_ok(&env, &["rollout-status", "web", "--timeout", "30s"]).await;

    // A new payload, west first: only west is updated.
    env.kubectl(&[
        "annotate",
        "dplan",
        "web",
        "kubernetes.io/change-cause=nginx 2, west first",
    ])
    .await;
    env.kubectl(&[
        "patch", "dplan", "web", "--type=merge", "-p",
        r#"{"spec":{"deployment":{"payloads":[{"application":"nginx","coordinates":{"image":"nginx:2"}}],"rollout":{"domainOrder":["west","east"]}}}}"#,
    ])
    .await;
    let first = domain_reaches(&env, "west", 2).await;
    assert!(runs(&first, "east", 1), "east waits: {:?}", first.instances);
    let domains: Vec<(String, String)> = first
        .rollout
        .clone()
        .expect("a rollout status")
        .domains
        .into_iter()
        .map(|d| (d.name, d.state))
        .collect();
    assert_eq!(
        domains,
        vec![
            ("west".to_owned(), "Updating".to_owned()),
            ("east".to_owned(), "Waiting".to_owned())
        ]
    );

    // Pause half-way: west finishes, east is held.
    shoal_ok(&env, &["pause", "web"]).await;
    members_report_installed(&env, &uids).await;
    eventually("the rollout is paused at east", WAIT, || async {
        let rollout = plan_status(&env).await.rollout?;
        (rollout.phase == "Paused").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held = plan_status(&env).await;
    assert!(
        runs(&held, "east", 1),
        "pause holds east: {:?}",
        held.instances
    );
    let blocked = shoal(&env, &["rollout-status", "web", "--timeout", "2s"]).await;
    assert!(!blocked.success, "rollout-status returned 0 while paused");
    assert!(blocked.stderr.contains("east Paused"), "{}", blocked.stderr);

    // Resume: east follows; rollout-status returns once it is installed.
    shoal_ok(&env, &["resume", "web"]).await;
    domain_reaches(&env, "east", 2).await;
    members_report_installed(&env, &uids).await;
    let done = shoal_ok(&env, &["rollout-status", "web", "--timeout", "30s"]).await;
    assert!(done.contains("rolled out"), "{done}");

    let history = shoal_ok(&env, &["plan-history", "web"]).await;
    assert!(history.contains("nginx 2, west first"), "{history}");
    assert!(history.contains("image=nginx:1"), "{history}");

    // Undo to revision 1: a new revision 3 with nginx:1, rolled out in byte order.
    shoal_ok(&env, &["plan-undo", "web", "--to-revision", "1"]).await;
    let undone = domain_reaches(&env, "east", 3).await;
    assert!(
        runs(&undone, "west", 2),
        "west waits: {:?}",
        undone.instances
    );
    let record = undone.deployment(3).expect("revision 3 recorded");
    assert_eq!(record.payloads[0].coordinates["image"], "nginx:1");
    assert!(record.rollout.domain_order.is_empty());
    members_report_installed(&env, &uids).await;
    domain_reaches(&env, "west", 3).await;
    members_report_installed(&env, &uids).await;
    shoal_ok(&env, &["rollout-status", "web", "--timeout", "30s"]).await;
    controller.stop().await;
    env.finish().await;
}

/// The plan's instances as the member slices hold them: (member, instance, deployment).
async fn held_instances(env: &Env) -> Vec<(String, String, u64)> {
    let mut held = Vec::new();
    for (member, cm) in env.slice_maps("demo").await {
        let Some(text) = cm.data.as_ref().and_then(|data| data.get("slice.yaml")) else {
            continue;
        };
        let slice = parse_slice(text).expect("a slice the controller wrote parses");
        for instance in slice.instances.iter().filter(|i| i.plan == "web") {
            held.push((member.clone(), instance.name.clone(), instance.deployment));
        }
    }
    held.sort();
    held
}

/// The placement record as (member, instance, deployment, state), sorted.
fn record(status: &DeploymentPlanStatus) -> Vec<(String, String, u64, String)> {
    let mut entries: Vec<_> = status
        .instances
        .iter()
        .map(|e| {
            (
                e.member.clone(),
                e.name.clone(),
                e.deployment,
                e.state.clone(),
            )
        })
        .collect();
    entries.sort();
    entries
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_edit_of_the_placement_record_is_put_back_from_the_slices_reported_and_moves_nothing()
 {
    let (env, controller, uids) = plan_over_two_domains().await;
    let held = eventually("both instances in the member slices", WAIT, || async {
        let held = held_instances(&env).await;
        (held.len() == 2).then_some(held)
    })
    .await;
    members_report_installed(&env, &uids).await;
    let placed = eventually("both instances installed", WAIT, || async {
        let status = plan_status(&env).await;
        (status.instances.len() == 2 && status.instances.iter().all(|e| e.state == "installed"))
            .then_some(status)
    })
    .await;
    let (moved, kept) = (&placed.instances[0], &placed.instances[1]);

    // Someone with access to the status subresource moves one instance onto the other
    // member at a revision that does not exist, and drops the other.
    let edit = serde_json::json!({"status": {"instances": [{
        "name": moved.name, "member": kept.member, "updateDomain": kept.update_domain,
        "deployment": 7, "state": "installed",
    }]}})
    .to_string();
    edit_record_as_intruder(&env, &edit).await;

    // Put back, and nothing moved meanwhile: the slices hold what they held.
    let slices_seen = std::sync::Mutex::new(Vec::new());
    eventually("the placement record is put back", WAIT, || async {
        let seen = held_instances(&env).await;
        slices_seen.lock().expect("not poisoned").push(seen);
        (record(&plan_status(&env).await) == record(&placed)).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut slices_seen = slices_seen.into_inner().expect("not poisoned");
    slices_seen.push(held_instances(&env).await);
    assert!(
        slices_seen.iter().all(|seen| *seen == held),
        "the slices changed because of the edit: {slices_seen:?}, held {held:?}"
    );
    assert_eq!(record(&plan_status(&env).await), record(&placed));

    // Reported once, naming the instance, the field and the editor.
    let events = env.event_messages().await;
    let restored: Vec<&str> = events
        .lines()
        .filter(|line| line.starts_with("PlacementRestored:"))
        .collect();
    assert_eq!(restored.len(), 1, "{events}");
    for word in [moved.name.as_str(), "status.instances", "intruder"] {
        assert!(restored[0].contains(word), "{word} not in {}", restored[0]);
    }
    // The record is the controller's again: the Swarm delivers the plan.
    let managers = env
        .kubectl(&[
            "get",
            "dplan",
            "web",
            "--show-managed-fields",
            "-o",
            r#"jsonpath={range .metadata.managedFields[*]}{.manager}={.fieldsV1}{"\n"}{end}"#,
        ])
        .await;
    assert!(
        !managers
            .lines()
            .any(|line| line.starts_with("intruder=") && line.contains("f:instances")),
        "{managers}"
    );
    // Meanwhile the Swarm said the edited record is not delivered; then it delivers again.
    eventually("the Swarm delivers the plan again", WAIT, || async {
        let conditions = env.swarm("demo").await.status?.conditions;
        (!conditions
            .iter()
            .any(|c| c.status == "True" && c.message.contains("not delivered")))
        .then_some(())
    })
    .await;
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_of_the_deployments_record_is_not_delivered_nor_made_the_controllers_own() {
    let (env, controller, uids) = plan_over_two_domains().await;
    eventually("both instances in the member slices", WAIT, || async {
        (held_instances(&env).await.len() == 2).then_some(())
    })
    .await;
    members_report_installed(&env, &uids).await;
    let held = held_instances(&env).await;
    // Someone rewrites revision 1's payload in the record.
    let mut deployments =
        serde_json::to_value(&plan_status(&env).await.deployments).expect("the record serializes");
    deployments[0]["payloads"][0]["coordinates"]["image"] = "evil:1".into();
    let edit = serde_json::json!({"status": {"deployments": deployments}}).to_string();
    edit_record_as_intruder(&env, &edit).await;
    let condition = eventually("PlacementRestored False", WAIT, || async {
        let status = plan_status(&env).await;
        status
            .conditions
            .into_iter()
            .find(|c| c.type_ == "PlacementRestored" && c.status == "False")
    })
    .await;
    assert!(
        condition.message.contains("status.deployments") && condition.message.contains("intruder"),
        "{}",
        condition.message
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The members keep what they ran; the edited payload reaches no slice.
    assert_eq!(held_instances(&env).await, held);
    for (member, cm) in env.slice_maps("demo").await {
        let text = cm.data.as_ref().and_then(|data| data.get("slice.yaml"));
        assert!(
            !text.is_some_and(|text| text.contains("evil:1")),
            "{member}: {text:?}"
        );
    }
    // The edited field stays the editor's: the controller did not apply it as its own.
    let managers = env
        .kubectl(&[
            "get",
            "dplan",
            "web",
            "--show-managed-fields",
            "-o",
            r#"jsonpath={range .metadata.managedFields[*]}{.manager}={.fieldsV1}{"\n"}{end}"#,
        ])
        .await;
    assert!(
        managers
            .lines()
            .any(|line| line.starts_with("intruder=") && line.contains("f:deployments")),
        "{managers}"
    );
    assert!(
        !managers
            .lines()
            .any(|line| line.starts_with("shoal-controller=") && line.contains("f:deployments")),
        "{managers}"
    );
    controller.stop().await;
    env.finish().await;
}

/// Edits plan `web`'s status with kubectl under another field manager, as a careless or
/// hostile user with `update` on the status subresource can.
async fn edit_record_as_intruder(env: &Env, merge_patch: &str) {
    env.kubectl(&[
        "patch",
        "dplan",
        "web",
        "--subresource=status",
        "--type=merge",
        "--field-manager=intruder",
        "-p",
        merge_patch,
    ])
    .await;
}
