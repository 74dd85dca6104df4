//! A plan's status within its size budget (`deployment/size.rs`,
//! `crate::api::limits::budget`).

use super::*;
use crate::api::limits::budget::{self, PrunableStatus, json_bytes};

/// One pass whose status is fitted to `budget` and written back, as `apply` does.
fn written(obs: &mut PlanObservation, budget: usize) -> usize {
    let mut status = decide(obs).status;
    let fitted = budget::prune(&mut status, budget);
    assert!(!fitted.over(), "{fitted:?}");
    obs.status = status;
    fitted.bytes
}

/// `instances` instances without resource demands, up to 10,000 per member,
/// on ten capable members.
fn large(instances: u32, policy: &str) -> PlanObservation {
    let mut spec = spec(instances, policy, "nginx:1.27");
    spec.max_instances_per_member = 10_000;
    for application in &mut spec.applications {
        application.resources.clear();
    }
    let mut obs = observation(spec);
    obs.pools = pools(5, 0);
    obs
}

#[test]
fn ten_thousand_instances_open_only_the_operations_the_status_has_room_for() {
    let mut obs = large(10_000, "Automatic");
    let budget = super::super::size::budget_of(&obs);
    written(&mut obs, budget);
    let opened = obs.status.operations.len();
    assert!(opened > 0 && opened < 10_000, "{opened} operations opened");
    let progressing = obs
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing")
        .expect("a Progressing condition");
    assert_eq!(progressing.reason, "WaitingForStatusRoom");
    assert!(
        progressing
            .message
            .contains(&format!("{} operation(s) wait", 10_000 - opened)),
        "{}",
        progressing.message
    );
    // As members report, the rest is opened in turn, each status within the budget.
    for _ in 0..60 {
        if obs.status.phase.as_deref() == Some("Ready") {
            break;
        }
        report_entries(&mut obs, "installed", &[]);
        let bytes = written(&mut obs, budget);
        assert!(bytes <= budget, "{bytes} bytes of a {budget} budget");
    }
    assert!(json_bytes(&obs.status) <= budget);
    assert_eq!(obs.status.phase.as_deref(), Some("Ready"));
    assert_eq!(obs.status.instances.len(), 10_000);
}

fn record(revision: u64) -> serde_json::Value {
    serde_json::json!({"revision": revision, "hash": "h", "created": "t",
        "payloads": [{"application": "nginx", "coordinates": {"image": "x".repeat(1000)}}]})
}

fn operation(id: &str, state: &str, deployment: u64) -> serde_json::Value {
    serde_json::json!({"id": id, "type": "UPDATE", "instance": "web-0", "deployment": deployment,
        "state": state, "hash": "h", "approveWith": "a", "message": ""})
}

#[test]
fn finished_operations_go_first_then_unused_records_then_the_unplaced_listing() {
    let mut status: DeploymentPlanStatus = serde_json::from_value(serde_json::json!({
        "latestDeployment": 4,
        "currentDeployment": 4,
        "instances": [{"name": "web-0", "member": "gpu-0", "updateDomain": "a", "deployment": 2, "state": "installed"}],
        "deployments": [record(1), record(2), record(3), record(4)],
        "deploymentStatus": [
            {"deploymentId": "one", "adoptedManifestVersion": "1", "status": {"state": "installed"}, "components": []},
            {"deploymentId": "two", "adoptedManifestVersion": "2", "status": {"state": "installed"}, "components": []},
        ],
        "operations": [
            operation("UPDATE-web-0-r2", "SUCCEEDED", 2),
            operation("UPDATE-web-0-r3", "PENDING_APPROVAL", 3),
            operation("UPDATE-web-0-r1", "FAILED", 1),
        ],
        "unplaced": [{"name": "web-1", "reason": "no room"}, {"name": "web-2", "reason": "no room"}],
    }))
    .expect("a status");
    let mut gone = Vec::new();
    while let Some((field, bytes)) = status.drop_first_to_go() {
        assert!(bytes > 0);
        gone.push(field);
    }
    assert_eq!(
        gone,
        [
            "operations",
            "operations",
            "deployments",
            "unplaced",
            "unplaced"
        ]
    );
    let ids: Vec<&str> = status.operations.iter().map(|op| op.id.as_str()).collect();
    assert_eq!(ids, ["UPDATE-web-0-r3"], "the open operation stays");
    let records: Vec<u64> = status.deployments.iter().map(|r| r.revision).collect();
    assert_eq!(
        records,
        [2, 3, 4],
        "in use by the instance, the open operation, latest"
    );
    let documents: Vec<&str> = status
        .deployment_status
        .iter()
        .map(|d| d.deployment_id.as_str())
        .collect();
    assert_eq!(
        documents,
        ["two"],
        "revision 1's document went with its record"
    );
    assert_eq!(status.instances.len(), 1);
}
