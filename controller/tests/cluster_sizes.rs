//! Plans whose status would outgrow what the API server stores (etcd's 1.5 MiB
//! per object, 3 MiB per request; the emulator refuses both as a real server
//! does): large deployment records over many revisions, a junk approval
//! annotation, and 10,000 instances. Each keeps working within the status
//! budget, or says why it cannot, while approvals still apply.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Env, Running, eventually, job_keys, report_instance_states, swarm_yaml};
use kube::Api;
use serde_json::json;
use shoal_controller::api::deployment_plan::{DeploymentPlan, DeploymentPlanStatus};
use shoal_controller::api::limits::MAX_OBJECT_BYTES;
use shoal_controller::api::swarm::Condition;

const WAIT: Duration = Duration::from_secs(60);

async fn plan(env: &Env, name: &str) -> DeploymentPlan {
    let api: Api<DeploymentPlan> = Api::namespaced(env.client.clone(), &env.namespace);
    api.get(name).await.expect("the plan exists")
}

async fn status(env: &Env, name: &str) -> DeploymentPlanStatus {
    plan(env, name).await.status.unwrap_or_default()
}

/// Bytes of the plan as the API server stores it (compact JSON).
async fn stored_bytes(env: &Env, name: &str) -> usize {
    serde_json::to_vec(&plan(env, name).await)
        .expect("the plan serializes")
        .len()
}

/// `kubectl patch dplan <name> --type merge --patch-file`: for patches longer
/// than one command-line argument may be.
async fn patch_from_file(env: &Env, name: &str, patch: &serde_json::Value) {
    let path = std::env::temp_dir().join(format!("{}-{name}-patch.json", env.namespace));
    std::fs::write(&path, patch.to_string()).expect("the patch file is written");
    let path = path.to_string_lossy().into_owned();
    env.kubectl(&[
        "patch",
        "dplan",
        name,
        "--type",
        "merge",
        "--patch-file",
        &path,
    ])
    .await;
    let _ = std::fs::remove_file(&path);
}

/// A cluster with the plan CRD and the controller running, Swarm `demo` and
/// its pool `east` of `members` members offering `GPU=<gpu>`; the pods' uids.
async fn started(members: u32, gpu: &str) -> (Env, Running, BTreeMap<String, String>) {
    let env = Env::start().await;
    env.install_plan_crd().await;
    let controller = env.start_controller();
    let uids = gpu_pool(&env, members, gpu).await;
    (env, controller, uids)
}

/// The condition `type_` of `status`.
fn condition<'a>(status: &'a DeploymentPlanStatus, type_: &str) -> &'a Condition {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("a {type_} condition: {:?}", status.conditions))
}

/// Swarm `demo` with pool `east` of `members` members offering `GPU=<gpu>`;
/// the pods' uids.
async fn gpu_pool(env: &Env, members: u32, gpu: &str) -> BTreeMap<String, String> {
    env.apply(&swarm_yaml("demo", &job_keys(2), "")).await;
    env.pool("east", "demo", members).await;
    env.kubectl(&[
        "annotate",
        "statefulset",
        "east",
        &format!("shoal.dev/capabilities=GPU={gpu}:3"),
    ])
    .await;
    env.ready_pool("east", members).await
}

/// `applications` applications `app-<i>`, each with `coordinates` coordinates of
/// `value_bytes` bytes that differ by `revision`: many ordinary coordinates
/// rather than one long one, so that the schema's bounds on one value allow them.
fn payloads(
    applications: usize,
    coordinates: usize,
    value_bytes: usize,
    revision: u64,
) -> serde_json::Value {
    let payloads: Vec<serde_json::Value> = (0..applications)
        .map(|app| {
            let coordinates: serde_json::Map<String, serde_json::Value> = (0..coordinates)
                .map(|c| {
                    let value = format!("r{revision}-{app}-{c}-");
                    let padded = format!("{value}{}", "v".repeat(value_bytes - value.len()));
                    (format!("key{c:02}"), json!(padded))
                })
                .collect();
            json!({"application": format!("app-{app}"), "coordinates": coordinates})
        })
        .collect();
    json!(payloads)
}

/// Creates plan `name` (one instance, Automatic) whose applications and
/// payloads are `payloads(applications, coordinates, value_bytes, 1)`, from a
/// file (`kubectl create -f`) as a user would a large manifest.
async fn create_with_payloads(
    env: &Env,
    name: &str,
    (applications, coordinates, value_bytes): (usize, usize, usize),
) {
    let apps: Vec<serde_json::Value> = (0..applications)
        .map(|app| json!({"name": format!("app-{app}")}))
        .collect();
    let manifest = json!({
        "apiVersion": "shoal.dev/v1alpha1",
        "kind": "DeploymentPlan",
        "metadata": {"name": name},
        "spec": {
            "swarm": "demo",
            "applications": apps,
            "approval": {"policy": "Automatic"},
            "deployment": {"instances": 1, "payloads": payloads(applications, coordinates, value_bytes, 1)},
        },
    });
    let path = std::env::temp_dir().join(format!("{}-{name}.json", env.namespace));
    std::fs::write(&path, manifest.to_string()).expect("the manifest is written");
    env.kubectl(&["create", "-f", &path.to_string_lossy()])
        .await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_with_200_kb_of_coordinates_keeps_working_through_ten_revisions() {
    let (env, controller, uids) = started(1, "v100").await;
    // 7 applications × 32 coordinates × 900 bytes: about 200 KB per revision.
    let (applications, coordinates, value_bytes) = (7, 32, 900);
    create_with_payloads(&env, "big", (applications, coordinates, value_bytes)).await;

    for revision in 1..=10u64 {
        if revision > 1 {
            let patch = json!({"spec": {"deployment": {
                "payloads": payloads(applications, coordinates, value_bytes, revision)
            }}});
            patch_from_file(&env, "big", &patch).await;
        }
        eventually(
            &format!("deployment {revision} is the plan's latest"),
            WAIT,
            || async { (status(&env, "big").await.latest_deployment == revision).then_some(()) },
        )
        .await;
        report_instance_states(
            &env,
            "east-0",
            &uids["east-0"],
            "east-0",
            json!({"big-0": {"state": "installed", "deployment": revision}}),
        )
        .await;
        eventually(
            &format!("big-0 runs deployment {revision} and the plan is Ready"),
            WAIT,
            || async {
                let status = status(&env, "big").await;
                let runs = status
                    .instances
                    .iter()
                    .any(|entry| entry.deployment == revision && entry.state == "installed");
                (runs
                    && status.current_deployment == revision
                    && status.phase.as_deref() == Some("Ready"))
                .then_some(())
            },
        )
        .await;
    }
    let stored = stored_bytes(&env, "big").await;
    assert!(stored < MAX_OBJECT_BYTES, "{stored} bytes stored");
    let kept = status(&env, "big").await;
    let records: Vec<u64> = kept.deployments.iter().map(|r| r.revision).collect();
    assert!(
        records.len() < 10 && records.last() == Some(&10),
        "older records went by size, the latest stayed: {records:?}"
    );
    assert_eq!(condition(&kept, "Degraded").status, "False");
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_225_kb_junk_approval_is_refused_once_and_the_valid_item_beside_it_still_applies() {
    let (env, controller, _) = started(2, "v100").await;
    env.apply(
        r#"apiVersion: shoal.dev/v1alpha1
kind: DeploymentPlan
metadata: {name: web}
spec:
  swarm: demo
  applications: [{name: nginx}]
  approval: {policy: Manual}
  deployment:
    instances: 2
    payloads: [{application: nginx, coordinates: {image: "nginx:1.27"}}]
"#,
    )
    .await;
    let pending = eventually("two CREATEs wait for approval", WAIT, || async {
        let status = status(&env, "web").await;
        let waiting: Vec<String> = status
            .operations
            .iter()
            .filter(|op| op.state == "PENDING_APPROVAL")
            .map(|op| op.approve_with.clone())
            .collect();
        (waiting.len() == 2).then_some(waiting)
    })
    .await;
    // One valid item, then 225 KB of junk items.
    let junk = "junk,".repeat(45_000);
    let value = format!("{},{junk}", pending[0]);
    patch_from_file(
        &env,
        "web",
        &json!({"metadata": {"annotations": {"shoal.dev/approve": value}}}),
    )
    .await;
    let approved = eventually("the valid item is applied", WAIT, || async {
        let status = status(&env, "web").await;
        let approved = status
            .operations
            .iter()
            .filter(|op| op.state == "APPROVED")
            .count();
        (approved == 1 && !status.refused_annotations.is_empty()).then_some(status)
    })
    .await;
    let recorded = &approved.refused_annotations["shoal.dev/approve"];
    assert!(recorded.len() < 1024, "{} bytes recorded", recorded.len());
    assert_eq!(approved.instances.len(), 1);
    let warnings = eventually("one ApprovalRefused Warning", WAIT, || async {
        let events = env.event_messages().await;
        let refused = events
            .lines()
            .filter(|line| line.starts_with("ApprovalRefused"))
            .count();
        (refused > 0).then_some(refused)
    })
    .await;
    assert_eq!(warnings, 1);
    // Later passes do not announce the standing value again.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let events = env.event_messages().await;
    let refused = events
        .lines()
        .filter(|line| line.starts_with("ApprovalRefused"))
        .count();
    assert_eq!(refused, 1, "{events}");
    assert!(stored_bytes(&env, "web").await < MAX_OBJECT_BYTES);
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_instances_no_member_can_run_are_reported_within_the_budget() {
    let (env, controller, _) = started(2, "t4").await;
    let four_names =
        "[nvidia-a100-sxm4-80gb, nvidia-h100-sxm5-80gb, nvidia-v100-sxm2-32gb, nvidia-l40s-48gb]";
    let yaml = |instances: u32| {
        format!(
            r#"apiVersion: shoal.dev/v1alpha1
kind: DeploymentPlan
metadata: {{name: gpus}}
spec:
  swarm: demo
  applications: [{{name: trainer}}]
  requirements: [{{type: GPU, comparator: In, names: {four_names}}}]
  approval: {{policy: Manual}}
  deployment:
    instances: {instances}
    payloads: [{{application: trainer, coordinates: {{image: "trainer:1"}}}}]
"#
        )
    };
    env.apply(&yaml(10_000)).await;
    let written = eventually("the plan's status is written", WAIT, || async {
        let plan = plan(&env, "gpus").await;
        let status = plan.status.clone().unwrap_or_default();
        (status.observed_generation == plan.metadata.generation
            && status.observed_generation.is_some())
        .then_some(status)
    })
    .await;
    let ready = condition(&written, "Ready");
    assert_eq!(ready.status, "False");
    assert!(
        ready.message.contains("10000 instance(s) cannot be placed"),
        "{}",
        ready.message
    );
    assert!(!written.unplaced.is_empty());
    assert!(stored_bytes(&env, "gpus").await < MAX_OBJECT_BYTES);

    // A member that offers one of the four names: the plan goes on, through the gate.
    env.kubectl(&[
        "annotate",
        "statefulset",
        "east",
        "--overwrite",
        "shoal.dev/capabilities=GPU=nvidia-l40s-48gb:3",
    ])
    .await;
    env.apply(&yaml(2)).await;
    let waiting = eventually("two CREATEs wait for approval", WAIT, || async {
        let status = status(&env, "gpus").await;
        (status.pending_operations == 2 && status.unplaced.is_empty()).then_some(status)
    })
    .await;
    let approve = waiting
        .approve_deployment_with
        .clone()
        .expect("the deployment's approval");
    env.kubectl(&[
        "annotate",
        "dplan",
        "gpus",
        &format!("shoal.dev/approve={approve}"),
    ])
    .await;
    eventually("the two are approved and placed", WAIT, || async {
        (status(&env, "gpus").await.instances.len() == 2).then_some(())
    })
    .await;
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_capable_instances_open_in_waves_that_fit_and_approvals_apply() {
    let (env, controller, _) = started(10, "nvidia-l40s-48gb").await;
    env.apply(
        r#"apiVersion: shoal.dev/v1alpha1
kind: DeploymentPlan
metadata: {name: gpus}
spec:
  swarm: demo
  applications: [{name: trainer}]
  requirements: [{type: GPU, comparator: In, names: [nvidia-a100-sxm4-80gb, nvidia-h100-sxm5-80gb, nvidia-v100-sxm2-32gb, nvidia-l40s-48gb]}]
  approval: {policy: Manual}
  maxInstancesPerMember: 1000
  deployment:
    instances: 10000
    payloads: [{application: trainer, coordinates: {image: "trainer:1"}}]
"#,
    )
    .await;
    let first = eventually("a first wave waits for approval", WAIT, || async {
        let status = status(&env, "gpus").await;
        (status.pending_operations > 0).then_some(status)
    })
    .await;
    let wave = first.pending_operations as usize;
    assert!(wave < 10_000, "{wave} operations opened at once");
    let progressing = condition(&first, "Progressing");
    assert_eq!(
        progressing.reason, "WaitingForStatusRoom",
        "{progressing:?}"
    );
    assert!(
        progressing
            .message
            .contains(&format!("{} operation(s) wait", 10_000 - wave)),
        "{}",
        progressing.message
    );
    assert!(stored_bytes(&env, "gpus").await < MAX_OBJECT_BYTES);

    let approve = first
        .approve_deployment_with
        .clone()
        .expect("the deployment's approval");
    env.kubectl(&[
        "annotate",
        "dplan",
        "gpus",
        &format!("shoal.dev/approve={approve}"),
    ])
    .await;
    eventually("the first wave is approved and placed", WAIT, || async {
        let status = status(&env, "gpus").await;
        (status.instances.len() == wave).then_some(())
    })
    .await;
    assert!(stored_bytes(&env, "gpus").await < MAX_OBJECT_BYTES);
    controller.stop().await;
    env.finish().await;
}

/// 32 applications × 32 coordinates × 900 bytes: a deployment record of about
/// 900 KB beside a spec as large, which no status can hold. The plan says so
/// once, naming the field, keeps its last status, and recovers when the
/// payloads shrink.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_whose_latest_record_cannot_fit_is_degraded_once_naming_the_field() {
    let (env, controller, _) = started(1, "v100").await;
    create_with_payloads(&env, "huge", (32, 32, 900)).await;
    let degraded = eventually("the plan is Degraded for its size", WAIT, || async {
        let status = status(&env, "huge").await;
        status
            .conditions
            .iter()
            .find(|c| c.type_ == "Degraded" && c.status == "True")
            .cloned()
    })
    .await;
    assert_eq!(degraded.reason, "StatusTooLarge");
    assert!(
        degraded.message.contains("DeploymentPlan")
            && degraded.message.contains("huge")
            && degraded.message.contains("status.deployments")
            && degraded.message.contains("bytes"),
        "{}",
        degraded.message
    );
    // Passes go on (a resync every 5 s), and the Warning is not repeated.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let events = env.event_messages().await;
    let said = events
        .lines()
        .filter(|line| line.starts_with("StatusTooLarge"))
        .count();
    assert_eq!(said, 1, "{events}");

    // Payloads that fit: the status is written again and the plan recovers.
    patch_from_file(
        &env,
        "huge",
        &json!({"spec": {"deployment": {"payloads": payloads(32, 1, 20, 2)}}}),
    )
    .await;
    eventually("the plan is no longer Degraded", WAIT, || async {
        let status = status(&env, "huge").await;
        (status.latest_deployment >= 1 && condition(&status, "Degraded").status == "False")
            .then_some(())
    })
    .await;
    controller.stop().await;
    env.finish().await;
}
