//! DeploymentPlans end to end, as a kubectl user drives them: placement on
//! capable members over two update domains, per-operation approval, refusals,
//! members reporting their instances on their own Lease, scale-down, and
//! instances that fit nowhere.

use crate::common;
use crate::plugin_common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Env, eventually, job_keys, report_instance_states, swarm_yaml};
use kube::{Api, ResourceExt};
use plugin_common::{shoal, shoal_json, shoal_ok};
use shoal_controller::api::deployment_plan::{
    DeploymentPlan, DeploymentPlanStatus, OperationStatus,
};
use shoal_core::names::ANNOTATION_APPROVE;

pub(crate) const WAIT: Duration = Duration::from_secs(30);

/// A pool of `replicas` members of `swarm`, described as a user would with
/// `kubectl annotate statefulset`; returns its pods' uids.
pub(crate) async fn described_pool(
    env: &Env,
    name: &str,
    replicas: u32,
    domain: &str,
    capabilities: Option<&str>,
) -> BTreeMap<String, String> {
    env.pool(name, "demo", replicas).await;
    let domain = format!("shoal.dev/update-domain={domain}");
    let mut args = vec![
        "annotate",
        "statefulset",
        name,
        "shoal.dev/capacity=cores=4",
        domain.as_str(),
    ];
    let capabilities = capabilities.map(|c| format!("shoal.dev/capabilities={c}"));
    if let Some(capabilities) = &capabilities {
        args.push(capabilities);
    }
    env.kubectl(&args).await;
    env.ready_pool(name, replicas).await
}

pub(crate) fn plan_yaml(
    name: &str,
    instances: u32,
    image: &str,
    gpu: &str,
    policy: &str,
) -> String {
    format!(
        r#"apiVersion: shoal.dev/v1alpha1
kind: DeploymentPlan
metadata:
  name: {name}
spec:
  swarm: demo
  applications:
  - name: nginx
    resources: {{cores: 1}}
    ports: [{{port: 80}}]
  - name: exporter
    resources: {{cores: 1}}
  requirements:
  - {{type: GPU, comparator: In, names: [{gpu}]}}
  approval: {{policy: {policy}}}
  deployment:
    instances: {instances}
    payloads:
    - application: nginx
      coordinates: {{image: "{image}"}}
"#
    )
}

pub(crate) async fn status(env: &Env, plan: &str) -> DeploymentPlanStatus {
    let api: Api<DeploymentPlan> = Api::namespaced(env.client.clone(), &env.namespace);
    api.get(plan)
        .await
        .expect("the plan exists")
        .status
        .unwrap_or_default()
}

fn ops(status: &DeploymentPlanStatus, state: &str) -> Vec<OperationStatus> {
    status
        .operations
        .iter()
        .filter(|op| op.state == state)
        .cloned()
        .collect()
}

async fn annotate_approval(env: &Env, value: &str) {
    env.kubectl(&[
        "annotate",
        "dplan",
        "web",
        &format!("shoal.dev/approve={value}"),
        "--overwrite",
    ])
    .await;
}

/// `kubectl patch` of the plan's instance count.
async fn scale_plan(env: &Env, plan: &str, instances: u32) {
    let patch = format!(r#"{{"spec":{{"deployment":{{"instances":{instances}}}}}}}"#);
    env.kubectl(&["patch", "dplan", plan, "--type", "merge", "-p", &patch])
        .await;
}

fn installed(deployment: u64) -> serde_json::Value {
    serde_json::json!({"state": "installed", "deployment": deployment})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_is_placed_approved_operation_by_operation_and_follows_its_members_reports() {
    let env = Env::start().await;
    env.install_plan_crd().await;
    let controller = env.start_controller();
    env.apply(&swarm_yaml("demo", &job_keys(4), "")).await;
    let mut uids = described_pool(&env, "east", 2, "east", Some("GPU=v100:3")).await;
    uids.extend(described_pool(&env, "west", 2, "west", Some("GPU=v100:3")).await);
    uids.extend(described_pool(&env, "plain", 2, "west", None).await);
    env.apply(&plan_yaml("web", 3, "nginx:1.25", "v100", "Manual"))
        .await;

    // Manual approval: three CREATEs wait, on capable members only, over both domains.
    let pending = eventually("3 CREATE operations wait for approval", WAIT, || async {
        let pending = ops(&status(&env, "web").await, "PENDING_APPROVAL");
        (pending.len() == 3).then_some(pending)
    })
    .await;
    let targets: Vec<String> = pending
        .iter()
        .map(|op| op.to_member.clone().expect("a target member"))
        .collect();
    assert!(pending.iter().all(|op| op.type_ == "CREATE"), "{pending:?}");
    assert!(
        targets.iter().all(|m| !m.starts_with("plain-")),
        "{targets:?}"
    );
    assert!(
        targets.iter().any(|m| m.starts_with("east-")),
        "{targets:?}"
    );
    assert!(
        targets.iter().any(|m| m.starts_with("west-")),
        "{targets:?}"
    );
    assert!(status(&env, "web").await.instances.is_empty());
    // `kubectl get dplan` shows the printer columns.
    let table = env.kubectl(&["get", "dplan", "web"]).await;
    for column in ["SWARM", "INSTANCES", "DEPLOYMENT", "PENDING", "PHASE"] {
        assert!(table.contains(column), "{table}");
    }
    assert!(
        table.contains("0/3") && table.contains("AwaitingApproval"),
        "{table}"
    );

    // Approving one operation approves exactly that one.
    annotate_approval(&env, &pending[0].approve_with).await;
    let after = eventually("exactly one operation approved", WAIT, || async {
        let status = status(&env, "web").await;
        (ops(&status, "APPROVED").len() == 1).then_some(status)
    })
    .await;
    assert_eq!(ops(&after, "APPROVED")[0].id, pending[0].id);
    assert_eq!(ops(&after, "PENDING_APPROVAL").len(), 2);
    assert_eq!(after.instances.len(), 1);

    // A forged approval (the right id, another hash) is refused with a Warning.
    let forged = format!("{}/sha256:{}", pending[1].id, "0".repeat(64));
    annotate_approval(&env, &forged).await;
    eventually("an ApprovalRefused Warning", WAIT, || async {
        let events = env.event_messages().await;
        events
            .lines()
            .any(|line| line.starts_with("ApprovalRefused") && line.contains(&pending[1].id))
            .then_some(())
    })
    .await;
    let refused = status(&env, "web").await;
    assert_eq!(
        refused.refused_annotations.get("shoal.dev/approve"),
        Some(&forged)
    );
    assert_eq!(ops(&refused, "APPROVED").len(), 1);

    // The other two, in one annotation.
    let both = format!("{},{}", pending[1].approve_with, pending[2].approve_with);
    annotate_approval(&env, &both).await;
    let approved = eventually("all three approved", WAIT, || async {
        let status = status(&env, "web").await;
        (ops(&status, "APPROVED").len() == 3).then_some(status)
    })
    .await;
    assert!(approved.refused_annotations.is_empty());
    let member_of = |instance: &str| {
        approved
            .instances
            .iter()
            .find(|entry| entry.name == instance)
            .map(|entry| entry.member.clone())
            .expect("the instance is in force")
    };
    let (m0, m1, m2) = (member_of("web-0"), member_of("web-1"), member_of("web-2"));

    // Another writer claiming to be web-0's member proves nothing.
    report_instance_states(
        &env,
        &m0,
        &uids[&m0],
        "someone-else",
        serde_json::json!({"web-0": installed(1)}),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(ops(&status(&env, "web").await, "SUCCEEDED").is_empty());
    // The member's own sidecar reports web-0 and web-2 installed, web-1 failed.
    report_instance_states(
        &env,
        &m0,
        &uids[&m0],
        &m0,
        serde_json::json!({"web-0": installed(1)}),
    )
    .await;
    report_instance_states(
        &env,
        &m2,
        &uids[&m2],
        &m2,
        serde_json::json!({"web-2": installed(1)}),
    )
    .await;
    report_instance_states(
        &env,
        &m1,
        &uids[&m1],
        &m1,
        serde_json::json!({"web-1": {"state": "failed", "deployment": 1, "code": "ExitCode1", "message": "nginx exited with status 1"}}),
    )
    .await;
    let reported = eventually("two SUCCEEDED, one FAILED", WAIT, || async {
        let status = status(&env, "web").await;
        (ops(&status, "SUCCEEDED").len() == 2 && ops(&status, "FAILED").len() == 1)
            .then_some(status)
    })
    .await;
    let failed = &ops(&reported, "FAILED")[0];
    assert_eq!(failed.instance, "web-1");
    assert!(failed.message.contains("ExitCode1"), "{}", failed.message);
    let web1 = reported
        .instances
        .iter()
        .find(|e| e.name == "web-1")
        .expect("web-1");
    assert_eq!(
        web1.error.as_ref().map(|e| e.code.as_str()),
        Some("ExitCode1")
    );
    assert_eq!(reported.ready.as_deref(), Some("2/3"));

    // A later deployment still proceeds: the failed instance is updated.
    env.apply(&plan_yaml("web", 3, "nginx:1.26", "v100", "Manual"))
        .await;
    let update = eventually("an UPDATE of web-1 for deployment 2", WAIT, || async {
        let status = status(&env, "web").await;
        ops(&status, "PENDING_APPROVAL")
            .into_iter()
            .find(|op| op.instance == "web-1" && op.type_ == "UPDATE" && op.deployment == 2)
    })
    .await;
    // `kubectl shoal approve-op` writes the same annotation; a settled operation is refused.
    let refused = shoal(&env, &["approve-op", "web", &pending[0].id]).await;
    assert!(!refused.success, "{refused:?}");
    assert!(
        refused.stderr.contains("not PENDING_APPROVAL"),
        "{refused:?}"
    );
    shoal_ok(&env, &["approve-op", "web", &update.id]).await;
    eventually("web-1's UPDATE approved", WAIT, || async {
        let status = status(&env, "web").await;
        ops(&status, "APPROVED")
            .iter()
            .any(|op| op.id == update.id)
            .then_some(())
    })
    .await;
    report_instance_states(
        &env,
        &m1,
        &uids[&m1],
        &m1,
        serde_json::json!({"web-1": installed(2)}),
    )
    .await;
    eventually("web-1 installed at deployment 2", WAIT, || async {
        let status = status(&env, "web").await;
        status
            .instances
            .iter()
            .any(|e| {
                e.name == "web-1"
                    && e.deployment == 2
                    && e.state == "installed"
                    && e.error.is_none()
            })
            .then_some(())
    })
    .await;

    // Scale 3 -> 2: one DELETE, from the domain holding two instances.
    scale_plan(&env, "web", 2).await;
    let delete = eventually("a DELETE operation", WAIT, || async {
        let status = status(&env, "web").await;
        ops(&status, "PENDING_APPROVAL")
            .into_iter()
            .find(|op| op.type_ == "DELETE")
    })
    .await;
    let victim = delete.from_member.clone().expect("a member");
    let domain = |member: &str| member.split('-').next().unwrap_or_default().to_owned();
    let same_domain = [&m0, &m1, &m2]
        .iter()
        .filter(|m| domain(m) == domain(&victim))
        .count();
    assert_eq!(same_domain, 2, "victim {victim} among {m0}, {m1}, {m2}");
    annotate_approval(&env, &delete.approve_with).await;
    let victim_instance = delete.instance.clone();
    eventually("the victim is removing", WAIT, || async {
        let status = status(&env, "web").await;
        status
            .instances
            .iter()
            .any(|e| e.name == victim_instance && e.state == "removing")
            .then_some(())
    })
    .await;
    report_instance_states(
        &env,
        &victim,
        &uids[&victim],
        &victim,
        serde_json::json!({}),
    )
    .await;
    let scaled = eventually("two instances, one per domain", WAIT, || async {
        let status = status(&env, "web").await;
        (status.instances.len() == 2).then_some(status)
    })
    .await;
    let domains: Vec<String> = scaled.instances.iter().map(|e| domain(&e.member)).collect();
    assert!(
        domains.contains(&"east".to_owned()) && domains.contains(&"west".to_owned()),
        "{domains:?}"
    );

    // An instance that fits nowhere is listed with its reason.
    env.apply(&plan_yaml("solo", 1, "redis:7", "a100", "Automatic"))
        .await;
    let unplaced = eventually("solo-0 unplaced", WAIT, || async {
        let status = status(&env, "solo").await;
        status.unplaced.first().cloned()
    })
    .await;
    assert_eq!(unplaced.name, "solo-0");
    assert!(
        unplaced.reason.contains("GPU In [a100]"),
        "{}",
        unplaced.reason
    );
    let table = env.kubectl(&["get", "dplan"]).await;
    assert!(table.contains("solo") && table.contains("0/1"), "{table}");

    // The plugin's views.
    let listed = shoal_ok(&env, &["plans"]).await;
    assert!(
        listed.contains("web") && listed.contains("solo"),
        "{listed}"
    );
    let detail = shoal_ok(&env, &["plan", "web"]).await;
    assert!(
        detail.contains("image=nginx:1.26") && detail.contains("SUCCEEDED"),
        "{detail}"
    );
    let instances = shoal_ok(&env, &["instances", "solo"]).await;
    assert!(instances.contains("GPU In [a100]"), "{instances}");
    let operations = shoal_ok(&env, &["operations", "web"]).await;
    assert!(operations.contains(&delete.id), "{operations}");

    controller.stop().await;
    env.finish().await;
}

/// The instances `member`'s slice ConfigMap delivers, read as a user would with kubectl.
async fn delivered(env: &Env, member: &str) -> (u64, Vec<shoal_core::slice::SliceInstance>) {
    let text = env
        .kubectl(&[
            "get",
            "configmap",
            &format!("{member}-slice"),
            "-o",
            "jsonpath={.data.slice\\.yaml}",
        ])
        .await;
    let slice = shoal_core::format::parse_slice(&text).expect("a valid slice");
    (slice.revision, slice.instances)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_create_reaches_its_members_slice_with_its_coordinates_and_a_delete_takes_it_out()
 {
    let env = Env::start().await;
    env.install_plan_crd().await;
    let controller = env.start_controller();
    env.apply(&swarm_yaml("demo", &job_keys(4), "")).await;
    let uids = described_pool(&env, "east", 2, "east", Some("GPU=v100:3")).await;
    env.in_force("demo", 1, WAIT).await;
    env.apply(&plan_yaml("web", 1, "nginx:1.25", "v100", "Manual"))
        .await;
    let create = eventually("a CREATE waits for approval", WAIT, || async {
        ops(&status(&env, "web").await, "PENDING_APPROVAL")
            .into_iter()
            .next()
    })
    .await;
    let member = create.to_member.clone().expect("a target member");
    // Nothing reaches a member before approval.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(delivered(&env, &member).await.1.is_empty());

    shoal_ok(&env, &["approve-op", "web", &create.id]).await;
    let (revision, instances) = eventually("web-0 in the member's slice", WAIT, || async {
        let (revision, instances) = delivered(&env, &member).await;
        (!instances.is_empty()).then_some((revision, instances))
    })
    .await;
    assert_eq!(revision, 1, "an instance is not a Swarm revision");
    assert_eq!(
        env.swarm("demo")
            .await
            .status
            .unwrap_or_default()
            .latest_revision,
        1
    );
    assert_eq!(instances.len(), 1);
    let web0 = &instances[0];
    assert_eq!(
        (web0.name.as_str(), web0.plan.as_str(), web0.deployment),
        ("web-0", "web", 1)
    );
    assert_eq!(web0.applications.len(), 1);
    assert_eq!(web0.applications[0].name, "nginx");
    assert_eq!(web0.applications[0].coordinates["image"], "nginx:1.25");
    let other = if member == "east-0" {
        "east-1"
    } else {
        "east-0"
    };
    assert!(delivered(&env, other).await.1.is_empty());

    // The member's sidecar (a stand-in here) reports it installed: SUCCEEDED.
    report_instance_states(
        &env,
        &member,
        &uids[&member],
        &member,
        serde_json::json!({"web-0": installed(1)}),
    )
    .await;
    eventually("the CREATE succeeded", WAIT, || async {
        ops(&status(&env, "web").await, "SUCCEEDED")
            .iter()
            .any(|op| op.id == create.id)
            .then_some(())
    })
    .await;
    assert_eq!(
        delivered(&env, &member).await.1.len(),
        1,
        "an installed instance stays"
    );

    // Scale to 0: the DELETE, once approved, takes the instance out of the slice.
    scale_plan(&env, "web", 0).await;
    let delete = eventually("a DELETE waits for approval", WAIT, || async {
        ops(&status(&env, "web").await, "PENDING_APPROVAL")
            .into_iter()
            .find(|op| op.type_ == "DELETE")
    })
    .await;
    assert_eq!(
        delivered(&env, &member).await.1.len(),
        1,
        "not before approval"
    );
    shoal_ok(&env, &["approve-op", "web", &delete.id]).await;
    eventually("web-0 out of the member's slice", WAIT, || async {
        delivered(&env, &member).await.1.is_empty().then_some(())
    })
    .await;
    report_instance_states(
        &env,
        &member,
        &uids[&member],
        &member,
        serde_json::json!({}),
    )
    .await;
    eventually(
        "the DELETE succeeded and the instance is gone",
        WAIT,
        || async {
            let status = status(&env, "web").await;
            (status.instances.is_empty()
                && ops(&status, "SUCCEEDED")
                    .iter()
                    .any(|op| op.id == delete.id))
            .then_some(())
        },
    )
    .await;
    // The jobs never moved.
    assert_eq!(common::all_jobs(&env.slices("demo").await), job_keys(4));
    assert_eq!(
        env.swarm("demo")
            .await
            .status
            .unwrap_or_default()
            .latest_revision,
        1
    );

    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_replica_leaves_plans_alone_while_another_holds_the_leader_lease() {
    let env = Env::start().await;
    env.install_plan_crd().await;
    // Another replica holds the leader Lease, freshly renewed, for a long time.
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    env.apply(&format!(
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: shoal-controller\nspec:\n  holderIdentity: the-leader\n  leaseDurationSeconds: 600\n  acquireTime: \"{now}\"\n  renewTime: \"{now}\"\n"
    ))
    .await;
    let standby = env.start_controller_with(shoal_controller::Settings {
        namespace: Some(env.namespace.clone()),
        identity: "standby".to_owned(),
        leader_election: Some(shoal_controller::LeaderElection {
            lease_name: "shoal-controller".to_owned(),
            lease_namespace: env.namespace.clone(),
            duration_seconds: 600,
        }),
        resync: Duration::from_secs(1),
        metrics_address: None,
        ..shoal_controller::Settings::default()
    });
    env.apply(&swarm_yaml("demo", &job_keys(2), "")).await;
    described_pool(&env, "east", 1, "east", Some("GPU=v100:3")).await;
    env.apply(&plan_yaml("web", 1, "nginx:1.25", "v100", "Automatic"))
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        status(&env, "web").await,
        DeploymentPlanStatus::default(),
        "a standby wrote a plan's status"
    );
    standby.kill().await;
    // The same plan, with a controller that leads, gets its status.
    let leader = env.start_controller();
    eventually("the plan reconciled by a leader", WAIT, || async {
        (status(&env, "web").await.latest_deployment == 1).then_some(())
    })
    .await;
    leader.stop().await;
    env.finish().await;
}

/// `kubectl patch dplan web --type=merge -p <patch>`: (success, output).
pub(crate) async fn try_patch_plan(env: &Env, patch: &str) -> (bool, String) {
    env.kubectl_status(&["patch", "dplan", "web", "--type=merge", "-p", patch])
        .await
}

/// `kubectl patch dplan web --type=merge -p <patch>`, which must succeed.
pub(crate) async fn patch_plan(env: &Env, patch: &str) {
    let (ok, output) = try_patch_plan(env, patch).await;
    assert!(ok, "kubectl patch dplan web -p {patch}: {output}");
}

/// One `web` instance per capable member over domains east and west, settled
/// (installed, reported by each member's own Lease) under `policy`; returns the
/// pods' uids and the instances' members.
pub(crate) async fn settled_plan(
    env: &Env,
    instances: u32,
    policy: &str,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    env.apply(&swarm_yaml("demo", &job_keys(4), "")).await;
    let mut uids = described_pool(env, "east", 2, "east", Some("GPU=v100:3")).await;
    uids.extend(described_pool(env, "west", 2, "west", Some("GPU=v100:3")).await);
    env.apply(&plan_yaml("web", instances, "nginx:1.25", "v100", policy))
        .await;
    let placed = eventually("every instance placed", WAIT, || async {
        let status = status(env, "web").await;
        (status.instances.len() == instances as usize).then_some(status)
    })
    .await;
    let members: BTreeMap<String, String> = placed
        .instances
        .iter()
        .map(|entry| (entry.name.clone(), entry.member.clone()))
        .collect();
    report_installed(env, &uids, &placed).await;
    eventually("the plan is Ready", WAIT, || async {
        (status(env, "web").await.phase.as_deref() == Some("Ready")).then_some(())
    })
    .await;
    (uids, members)
}

/// Every member reports its entries of `status` installed at their deployment.
pub(crate) async fn report_installed(
    env: &Env,
    uids: &BTreeMap<String, String>,
    status: &DeploymentPlanStatus,
) {
    let mut by_member: BTreeMap<&str, serde_json::Map<String, serde_json::Value>> = BTreeMap::new();
    for entry in &status.instances {
        by_member
            .entry(entry.member.as_str())
            .or_default()
            .insert(entry.name.clone(), installed(entry.deployment));
    }
    for (member, states) in by_member {
        report_instance_states(
            env,
            member,
            &uids[member],
            member,
            serde_json::Value::Object(states),
        )
        .await;
    }
}

/// Waits until `web` has one entry, on `member`, in `state`.
async fn single_entry(env: &Env, member: &str, state: &str) {
    let what = format!("web-0 is {state} on {member}");
    eventually(&what, WAIT, || async {
        let status = status(env, "web").await;
        (status.instances.len() == 1
            && status.instances[0].state == state
            && status.instances[0].member == member)
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_stops_and_starts_an_instance_with_the_plugin_through_the_manual_gate() {
    let env = Env::start().await;
    env.install_plan_crd().await;
    let controller = env.start_controller();
    let (uids, members) = settled_plan(&env, 1, "Automatic").await;
    let member = members["web-0"].clone();
    patch_plan(&env, r#"{"spec":{"approval":{"policy":"Manual"}}}"#).await;

    // A request that cannot be done is refused with a Warning naming it.
    shoal_ok(&env, &["start", "web", "web-0"]).await;
    warning_with(&env, "OperationRequestRefused", "start web-0").await;

    let printed = shoal_ok(&env, &["stop", "web", "web-0"]).await;
    assert!(printed.contains("shoal.dev/operate"), "{printed}");
    let stop = eventually("the STOP waits for approval", WAIT, || async {
        ops(&status(&env, "web").await, "PENDING_APPROVAL")
            .into_iter()
            .find(|op| op.type_ == "STOP")
    })
    .await;
    assert_eq!(stop.from_member.as_deref(), Some(member.as_str()));
    assert!(
        stop.request
            .as_deref()
            .is_some_and(|r| r.starts_with("stop web-0 #"))
    );
    shoal_ok(&env, &["approve-op", "web", &stop.id]).await;
    single_entry(&env, &member, "stopped").await;
    // The member no longer runs it: the STOP succeeds, the placement stays.
    report_instance_states(
        &env,
        &member,
        &uids[&member],
        &member,
        serde_json::json!({}),
    )
    .await;
    eventually("the STOP succeeds", WAIT, || async {
        ops(&status(&env, "web").await, "SUCCEEDED")
            .into_iter()
            .find(|op| op.id == stop.id)
    })
    .await;

    // The operations table shows why a failed operation failed (here: none did).
    let table = shoal_ok(&env, &["operations", "web"]).await;
    assert!(table.contains("Reason"), "{table}");

    shoal_ok(&env, &["start", "web", "web-0"]).await;
    let start = eventually("the start (a RESTART) waits for approval", WAIT, || async {
        ops(&status(&env, "web").await, "PENDING_APPROVAL")
            .into_iter()
            .find(|op| op.type_ == "RESTART")
    })
    .await;
    shoal_ok(&env, &["approve-op", "web", &start.id]).await;
    single_entry(&env, &member, "pending").await;
    report_instance_states(
        &env,
        &member,
        &uids[&member],
        &member,
        serde_json::json!({"web-0": installed(1)}),
    )
    .await;
    eventually(
        "the RESTART succeeds and the plan is Ready",
        WAIT,
        || async {
            let status = status(&env, "web").await;
            (status.phase.as_deref() == Some("Ready")
                && ops(&status, "SUCCEEDED").iter().any(|op| op.id == start.id))
            .then_some(())
        },
    )
    .await;
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_deployment_reaches_one_instance_first_and_the_rest_after_approval() {
    let env = Env::start().await;
    env.install_plan_crd().await;
    let controller = env.start_controller();
    let (uids, _) = settled_plan(&env, 2, "Automatic").await;
    patch_plan(&env, r#"{"spec":{"deployment":{"payloads":[{"application":"nginx","coordinates":{"image":"nginx:1.27"}}],"rollout":{"type":"Canary","canaryInstances":1}}}}"#).await;
    let canary = eventually("one canary UPDATE under way", WAIT, || async {
        let status = status(&env, "web").await;
        let rollout = status.rollout.clone()?;
        let updates: Vec<OperationStatus> = ops(&status, "APPROVED")
            .into_iter()
            .filter(|op| op.type_ == "UPDATE")
            .collect();
        (rollout.phase == "Canary" && updates.len() == 1).then_some((rollout, status))
    })
    .await;
    let (rollout, after) = canary;
    assert_eq!(rollout.canaries.len(), 1);
    assert_eq!(ops(&after, "APPROVED")[0].instance, rollout.canaries[0]);
    // A schema-invalid rollout is refused by the API server, naming the field.
    let (ok, refused) = try_patch_plan(
        &env,
        r#"{"spec":{"deployment":{"rollout":{"type":"Canary","canaryInstances":0}}}}"#,
    )
    .await;
    assert!(!ok, "canaryInstances 0 was accepted");
    assert!(refused.contains("canaryInstances"), "{refused}");
    let (ok, refused) = try_patch_plan(
        &env,
        r#"{"spec":{"deployment":{"rollout":{"type":"Rolling","pauseSeconds":5}}}}"#,
    )
    .await;
    assert!(!ok, "pauseSeconds on a Rolling rollout was accepted");
    assert!(
        refused.contains("apply to rollout type Canary only"),
        "{refused}"
    );
    // A domain order on a Canary rollout would be silently ignored: refused instead.
    let (ok, refused) = try_patch_plan(
        &env,
        r#"{"spec":{"deployment":{"rollout":{"domainOrder":["b","a"]}}}}"#,
    )
    .await;
    assert!(!ok, "domainOrder on a Canary rollout was accepted");
    assert!(
        refused.contains("domainOrder applies to rollout type Rolling only"),
        "{refused}"
    );

    let detail = shoal_ok(&env, &["plan", "web"]).await;
    assert!(
        detail.contains(&format!("Canary (canaries {})", rollout.canaries[0])),
        "{detail}"
    );
    report_installed(&env, &uids, &after).await;
    let promoted = eventually("the other instance waits for approval", WAIT, || async {
        let status = status(&env, "web").await;
        let waiting = ops(&status, "PENDING_APPROVAL");
        (status.rollout.as_ref()?.phase == "Promoted" && waiting.len() == 1).then_some(status)
    })
    .await;
    let whole = promoted
        .approve_deployment_with
        .clone()
        .expect("the whole deployment's approval");
    // `approve-op --all` first shows what it approves (a client dry run writes nothing),
    // then writes exactly status.approveDeploymentWith.
    let waiting: Vec<String> = ops(&promoted, "PENDING_APPROVAL")
        .into_iter()
        .map(|op| op.id)
        .collect();
    let preview: serde_json::Value =
        shoal_json(&env, &["approve-op", "web", "--all", "--dry-run=client"]).await;
    assert_eq!(preview["report"]["annotation"], whole.as_str(), "{preview}");
    assert_eq!(preview["report"]["approval"]["revision"], 2, "{preview}");
    assert_eq!(
        preview["report"]["approval"]["operations"],
        serde_json::json!(waiting),
        "{preview}"
    );
    let plans: Api<DeploymentPlan> = Api::namespaced(env.client.clone(), &env.namespace);
    let unapproved = plans.get("web").await.expect("the plan");
    assert_eq!(unapproved.annotations().get(ANNOTATION_APPROVE), None);
    let written = shoal_ok(&env, &["approve-op", "web", "--all"]).await;
    assert!(
        written.contains(&whole) && written.contains(&waiting[0]),
        "{written}"
    );
    let updated = eventually("both instances run deployment 2", WAIT, || async {
        let status = status(&env, "web").await;
        status
            .instances
            .iter()
            .all(|entry| entry.deployment == 2)
            .then_some(status)
    })
    .await;
    report_installed(&env, &uids, &updated).await;
    eventually("the plan is Ready at deployment 2", WAIT, || async {
        let status = status(&env, "web").await;
        (status.phase.as_deref() == Some("Ready") && status.current_deployment == 2).then_some(())
    })
    .await;
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blue_green_deployment_comes_up_beside_the_old_set_and_the_switch_is_approved() {
    let env = Env::start().await;
    env.install_plan_crd().await;
    let controller = env.start_controller();
    let (uids, blue) = settled_plan(&env, 2, "Automatic").await;
    patch_plan(&env, r#"{"spec":{"approval":{"policy":"Manual"}}}"#).await;
    patch_plan(&env, r#"{"spec":{"deployment":{"payloads":[{"application":"nginx","coordinates":{"image":"nginx:1.27"}}],"rollout":{"type":"BlueGreen"}}}}"#).await;
    let deploying = eventually("two green copies wait for approval", WAIT, || async {
        let status = status(&env, "web").await;
        let waiting = ops(&status, "PENDING_APPROVAL");
        (waiting.len() == 2 && waiting.iter().all(|op| op.type_ == "RELOCATE")).then_some(status)
    })
    .await;
    for op in &deploying.operations {
        if op.state == "PENDING_APPROVAL" {
            let to = op.to_member.clone().expect("a green member");
            assert!(
                !blue.values().any(|member| *member == to),
                "{to} runs a blue copy"
            );
        }
    }
    annotate_approval(
        &env,
        &deploying.approve_deployment_with.clone().expect("a value"),
    )
    .await;
    let both = eventually("both sets are in status", WAIT, || async {
        let status = status(&env, "web").await;
        (status.instances.len() == 4).then_some(status)
    })
    .await;
    report_installed(&env, &uids, &both).await;
    let switching = eventually(
        "the blue set's removal waits for approval",
        WAIT,
        || async {
            let status = status(&env, "web").await;
            let waiting = ops(&status, "PENDING_APPROVAL");
            (status.rollout.as_ref()?.phase == "Switching"
                && waiting.len() == 2
                && waiting.iter().all(|op| op.type_ == "DELETE"))
            .then_some(status)
        },
    )
    .await;
    assert_eq!(switching.instances.len(), 4, "the blue set still runs");
    annotate_approval(
        &env,
        &switching.approve_deployment_with.clone().expect("a value"),
    )
    .await;
    eventually("the blue entries are removing", WAIT, || async {
        let status = status(&env, "web").await;
        (status
            .instances
            .iter()
            .filter(|e| e.state == "removing")
            .count()
            == 2)
            .then_some(())
    })
    .await;
    for member in blue.values() {
        report_instance_states(&env, member, &uids[member], member, serde_json::json!({})).await;
    }
    eventually("only the green set is left, Ready", WAIT, || async {
        let status = status(&env, "web").await;
        (status.instances.len() == 2
            && status.instances.iter().all(|e| e.deployment == 2)
            && status.phase.as_deref() == Some("Ready"))
        .then_some(())
    })
    .await;
    controller.stop().await;
    env.finish().await;
}

/// Waits for a Warning `reason` whose note contains `text`; returns the events.
async fn warning_with(env: &Env, reason: &str, text: &str) -> String {
    let what = format!("a {reason} Warning saying {text:?}");
    eventually(&what, WAIT, || async {
        let events = env.event_messages().await;
        events
            .lines()
            .any(|line| line.starts_with(reason) && line.contains(text))
            .then_some(events)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_of_a_deployment_written_before_it_exists_is_refused_and_the_next_payload_waits_for_review()
 {
    let env = Env::start().await;
    env.install_plan_crd().await;
    let controller = env.start_controller();
    settled_plan(&env, 2, "Automatic").await;
    patch_plan(&env, r#"{"spec":{"approval":{"policy":"Manual"}}}"#).await;
    // Revision 2 does not exist: an approval of it, computed in advance.
    let in_advance = format!("deployment-2/sha256:{}", "0".repeat(64));
    annotate_approval(&env, &in_advance).await;
    warning_with(&env, "ApprovalRefused", "which does not exist yet").await;
    let refused = eventually("the refusal in the status", WAIT, || async {
        let status = status(&env, "web").await;
        status.refused_annotations.get("shoal.dev/approve").cloned()
    })
    .await;
    assert_eq!(refused, in_advance);
    // An editor changes the payload: a new revision, which waits for review.
    patch_plan(
        &env,
        r#"{"spec":{"deployment":{"payloads":[{"application":"nginx","coordinates":{"image":"evil:latest"}}]}}}"#,
    )
    .await;
    // (A Rolling rollout releases one update domain at a time.)
    let waiting = eventually("an UPDATE waits for approval", WAIT, || async {
        let status = status(&env, "web").await;
        let updates = ops(&status, "PENDING_APPROVAL")
            .into_iter()
            .filter(|op| op.type_ == "UPDATE")
            .count();
        (updates >= 1).then_some(status)
    })
    .await;
    assert_eq!(
        waiting.latest_deployment, 3,
        "number 2 was named in advance and is never given"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let now = status(&env, "web").await;
    assert!(ops(&now, "APPROVED").is_empty(), "{:?}", now.operations);
    assert!(
        now.instances.iter().all(|entry| entry.deployment == 1),
        "{:?}",
        now.instances
    );
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_report_that_no_operation_allows_changes_nothing_and_is_reported_once() {
    let env = Env::start().await;
    env.install_plan_crd().await;
    let controller = env.start_controller();
    let (uids, members) = settled_plan(&env, 1, "Automatic").await;
    let member = members["web-0"].clone();
    for (value, count) in [("removed", 1), ("stopped", 2)] {
        report_instance_states(
            &env,
            &member,
            &uids[&member],
            &member,
            serde_json::json!({"web-0": {"state": value, "deployment": 1}}),
        )
        .await;
        let status = eventually("the report is listed as ignored", WAIT, || async {
            let status = status(&env, "web").await;
            (status.ignored_reports.count == count).then_some(status)
        })
        .await;
        assert_eq!(status.instances.len(), 1, "{:?}", status.instances);
        assert_eq!(status.instances[0].state, "installed");
        assert!(status.operations.iter().all(|op| op.type_ == "CREATE"));
        let (_, instances) = delivered(&env, &member).await;
        assert!(
            instances.iter().any(|instance| instance.name == "web-0"),
            "web-0 is still delivered to {member}: {instances:?}"
        );
        let events = eventually("a ReportIgnored Warning", WAIT, || async {
            let events = env.event_messages().await;
            let line = format!("\"{value}\"");
            events
                .lines()
                .any(|l| l.starts_with("ReportIgnored") && l.contains(&member) && l.contains(&line))
                .then_some(events)
        })
        .await;
        assert_eq!(
            events
                .lines()
                .filter(|l| l.starts_with("ReportIgnored") && l.contains(&format!("\"{value}\"")))
                .count(),
            1,
            "{events}"
        );
    }
    let detail = shoal_ok(&env, &["plan", "web"]).await;
    assert!(detail.contains("ReportsIgnored"), "{detail}");
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_approve_ops_are_both_handled_and_impossible_requests_exit_non_zero() {
    let env = Env::start().await;
    env.install_plan_crd().await;
    let controller = env.start_controller();
    settled_plan(&env, 1, "Automatic").await;
    patch_plan(&env, r#"{"spec":{"approval":{"policy":"Manual"}}}"#).await;
    scale_plan(&env, "web", 3).await;
    let creates = eventually("two CREATEs wait for approval", WAIT, || async {
        let waiting = ops(&status(&env, "web").await, "PENDING_APPROVAL");
        (waiting.len() == 2).then_some(waiting)
    })
    .await;
    // Two users at once, each by the real plugin.
    let first_args = ["approve-op", "web", creates[0].id.as_str()];
    let second_args = ["approve-op", "web", creates[1].id.as_str()];
    let (first, second) = tokio::join!(shoal(&env, &first_args), shoal(&env, &second_args));
    for run in [&first, &second] {
        assert!(run.success, "{run:?}");
    }
    eventually("both CREATEs approved", WAIT, || async {
        let status = status(&env, "web").await;
        creates
            .iter()
            .all(|create| {
                status
                    .operations
                    .iter()
                    .any(|op| op.id == create.id && op.state != "PENDING_APPROVAL")
            })
            .then_some(())
    })
    .await;

    // Impossible requests: refused before anything is written, exit non-zero.
    let before = env
        .kubectl(&[
            "get",
            "dplan",
            "web",
            "-o",
            "jsonpath={.metadata.annotations}",
        ])
        .await;
    let no_instance = shoal(&env, &["stop", "web", "web-9"]).await;
    assert!(!no_instance.success, "{no_instance:?}");
    assert!(
        no_instance.stderr.contains("has no instance \"web-9\""),
        "{}",
        no_instance.stderr
    );
    let no_member = shoal(&env, &["relocate", "web", "web-0", "--to", "nowhere-0"]).await;
    assert!(!no_member.success, "{no_member:?}");
    assert!(
        no_member
            .stderr
            .contains("\"nowhere-0\" is not a member of Swarm demo"),
        "{}",
        no_member.stderr
    );
    let no_operation = shoal(&env, &["approve-op", "web", "create-web-9-r1-99"]).await;
    assert!(!no_operation.success, "{no_operation:?}");
    let after = env
        .kubectl(&[
            "get",
            "dplan",
            "web",
            "-o",
            "jsonpath={.metadata.annotations}",
        ])
        .await;
    assert_eq!(before, after, "an impossible request wrote something");
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_shoal_pause_holds_a_canary_rollout_and_the_status_says_it_is_the_users_pause() {
    let env = Env::start().await;
    env.install_plan_crd().await;
    let controller = env.start_controller();
    let (_, members) = settled_plan(&env, 2, "Automatic").await;
    shoal_ok(&env, &["pause", "web"]).await;
    patch_plan(&env, r#"{"spec":{"deployment":{"payloads":[{"application":"nginx","coordinates":{"image":"nginx:1.27"}}],"rollout":{"type":"Canary","canaryInstances":1,"pauseSeconds":1}}}}"#).await;
    let paused = eventually("the rollout reads Paused", WAIT, || async {
        let status = status(&env, "web").await;
        (status.latest_deployment == 2 && status.rollout.as_ref()?.phase == "Paused")
            .then_some(status)
    })
    .await;
    assert!(
        paused
            .rollout
            .as_ref()
            .is_some_and(|r| r.message.contains("paused by the user")),
        "{:?}",
        paused.rollout
    );
    // Several passes later still no UPDATE, and every instance runs deployment 1.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let still = status(&env, "web").await;
    assert!(
        still.operations.iter().all(|op| op.type_ != "UPDATE"),
        "{:?}",
        still.operations
    );
    assert!(still.instances.iter().all(|entry| entry.deployment == 1));
    for member in members.values() {
        let (_, instances) = delivered(&env, member).await;
        assert!(instances.iter().all(|instance| instance.deployment == 1));
    }
    let listed = env.kubectl(&["get", "dplan", "web"]).await;
    assert!(
        listed.contains("ROLLOUT") && listed.contains("Paused"),
        "{listed}"
    );
    shoal_ok(&env, &["resume", "web"]).await;
    eventually("the canary's UPDATE once resumed", WAIT, || async {
        let status = status(&env, "web").await;
        (status.rollout.as_ref()?.phase == "Canary"
            && status
                .operations
                .iter()
                .filter(|op| op.type_ == "UPDATE")
                .count()
                == 1)
            .then_some(())
    })
    .await;
    controller.stop().await;
    env.finish().await;
}

/// `annotate_guarded` calls its `compute` after each read and before the write
/// that read guards; the first call lets another user annotate the plan through
/// kubectl right there, so the other write provably lands between this command's
/// read and its write (no timing involved). The write of the first attempt
/// carries a stale `resourceVersion` and is refused 409; the command reads
/// again, sees the other writer's request and keeps it beside its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_write_that_loses_a_race_reads_again_and_keeps_the_other_writers_request() {
    use kube::ResourceExt;
    use shoal_controller::plugin::annotate::annotate_guarded;
    use shoal_controller::plugin::plans::operate_annotation;
    use shoal_controller::plugin::write::{DryRun, Writes};
    use shoal_core::names::ANNOTATION_OPERATE;

    let env = Env::start().await;
    env.install_plan_crd().await;
    env.apply(&plan_yaml("web", 1, "nginx:1.25", "v100", "Manual"))
        .await;
    let api: Api<DeploymentPlan> = Api::namespaced(env.client.clone(), &env.namespace);
    let runtime = tokio::runtime::Handle::current();
    // What each read saw: resourceVersion and the operate annotation.
    let mut reads: Vec<(Option<String>, Option<String>)> = Vec::new();
    let writes = Writes::new(DryRun::None, &env.namespace);
    annotate_guarded(&writes, &api, "web", |plan: &DeploymentPlan| {
        let current = plan.annotations().get(ANNOTATION_OPERATE).cloned();
        reads.push((plan.resource_version(), current.clone()));
        if reads.len() == 1 {
            // Another user writes between this command's read and its write.
            tokio::task::block_in_place(|| {
                runtime.block_on(env.kubectl(&[
                    "annotate",
                    "dplan",
                    "web",
                    "shoal.dev/operate=stop web-0 #theirs",
                    "--overwrite",
                ]))
            });
        }
        let status = plan.status.clone().unwrap_or_default();
        let value = operate_annotation(&status, current.as_deref(), "restart web-0 #mine");
        Ok::<_, String>((BTreeMap::from([(ANNOTATION_OPERATE.to_owned(), value)]), ()))
    })
    .await
    .expect("written on the second attempt");
    assert_eq!(
        reads.len(),
        2,
        "the stale write was refused and the command read again: {reads:?}"
    );
    assert_eq!(
        reads[0].1, None,
        "the first read came before the other write"
    );
    assert_eq!(
        reads[1].1.as_deref(),
        Some("stop web-0 #theirs"),
        "the second read saw the other write"
    );
    assert_ne!(reads[0].0, reads[1].0, "{reads:?}");
    let written = api.get("web").await.expect("the plan");
    assert_eq!(
        written
            .annotations()
            .get(ANNOTATION_OPERATE)
            .map(String::as_str),
        Some("stop web-0 #theirs, restart web-0 #mine")
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_a_member_relocates_its_plan_instance_through_the_gate_and_no_other() {
    let env = Env::start().await;
    env.install_plan_crd().await;
    let controller = env.start_controller();
    let (_uids, members) = settled_plan(&env, 2, "Automatic").await;
    patch_plan(&env, r#"{"spec":{"approval":{"policy":"Manual"}}}"#).await;
    let drained = members["web-0"].clone();

    shoal_ok(&env, &["drain", &drained]).await;
    let relocate = eventually("a RELOCATE of web-0 waits for approval", WAIT, || async {
        ops(&status(&env, "web").await, "PENDING_APPROVAL")
            .into_iter()
            .find(|op| op.type_ == "RELOCATE")
    })
    .await;
    assert_eq!(relocate.instance, "web-0");
    assert_eq!(relocate.from_member.as_deref(), Some(drained.as_str()));
    let to = relocate.to_member.clone().expect("a member to go to");
    assert_ne!(to, drained);
    let pending = ops(&status(&env, "web").await, "PENDING_APPROVAL");
    assert_eq!(
        pending.len(),
        1,
        "only the drained member's instance: {pending:?}"
    );

    shoal_ok(&env, &["approve-op", "web", &relocate.id]).await;
    eventually("web-0 comes up on its new member", WAIT, || async {
        let status = status(&env, "web").await;
        status
            .instances
            .iter()
            .any(|entry| entry.name == "web-0" && entry.member == to)
            .then_some(())
    })
    .await;
    let web_1 = status(&env, "web").await;
    assert!(
        web_1
            .instances
            .iter()
            .any(|entry| entry.name == "web-1" && entry.member == members["web-1"]),
        "web-1 stays: {:?}",
        web_1.instances
    );
    controller.stop().await;
    env.finish().await;
}
