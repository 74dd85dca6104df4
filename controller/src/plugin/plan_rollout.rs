//! Ordered rollouts of a DeploymentPlan from kubectl: `pause`, `resume`,
//! `rollout-status`, `plan-history`, `plan-undo`.
//!
//! Each command reads or writes only the plan: pause and resume set
//! `spec.paused`; undo rewrites `spec.deployment.payloads` and `.rollout`
//! from a recorded revision (`status.deployments`), as `kubectl rollout undo`
//! rewrites a Deployment's template, with `kubernetes.io/change-cause`. The
//! result is a new deployment revision that goes through the plan's approval
//! policy like any other. The pure pieces (`undo_patch`, `judge_rollout`,
//! `history_rows`) are tested here; the commands are thin reads and patches.

use serde::Serialize;

use super::plans::{PlansError, api_error, get_plan, plans_api};
use super::table::Table;
use super::wait::{Progress, poll_until};
use super::write::merge_patch;
use super::{Error, Report, Target};
use crate::api::deployment_plan::{DeploymentPlan, DeploymentPlanStatus, DeploymentRecord};
use crate::approvers::ApprovalRecord;

/// The annotation `kubectl rollout` reads as the reason of a change.
const CHANGE_CAUSE: &str = "kubernetes.io/change-cause";

/// `pause | resume`, of a DeploymentPlan or a Swarm: what was set.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PauseReport {
    /// `DeploymentPlan` or `Swarm`.
    pub kind: &'static str,
    /// The object's name.
    pub name: String,
    /// How the object is named on the command line: `<name>` or `swarm/<name>`.
    #[serde(skip)]
    pub argument: String,
    /// `spec.paused` as written.
    pub paused: bool,
    /// What a pause holds back, in words.
    #[serde(skip)]
    pub holds: &'static str,
}

impl Report for PauseReport {
    fn table(&self) -> String {
        let PauseReport {
            kind,
            name,
            argument,
            holds,
            ..
        } = self;
        if self.paused {
            format!("{kind} {name} paused: {holds} (`kubectl shoal resume {argument}` to go on)\n")
        } else {
            format!(
                "{kind} {name} resumed; follow it with `kubectl shoal rollout-status {argument}`\n"
            )
        }
    }
}

/// `kubectl shoal pause|resume <plan>`: sets `spec.paused` (a merge patch:
/// nothing else changes).
pub async fn set_paused(
    target: &Target,
    name: &str,
    paused: bool,
) -> Result<PauseReport, PlansError> {
    get_plan(target, name).await?;
    let patch = serde_json::json!({"spec": {"paused": paused}});
    merge_patch(&target.writes, &plans_api(target), name, patch)
        .await
        .map_err(api_error(
            target,
            format!("setting spec.paused of DeploymentPlan {name}"),
        ))?;
    Ok(PauseReport {
        kind: "DeploymentPlan",
        name: name.to_owned(),
        argument: name.to_owned(),
        paused,
        holds: "no further update is released",
    })
}

/// One recorded deployment revision.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HistoryRow {
    /// The revision.
    pub revision: u64,
    /// `latest`, `in force`, or empty.
    pub state: String,
    /// When it was taken (RFC 3339).
    pub created: String,
    /// `kubernetes.io/change-cause` when it was taken.
    pub change_cause: String,
    /// Its payloads, `application key=value ...`.
    pub payloads: String,
    /// Who approved its operations (`status.deployments[].approvals`), each once,
    /// `(unverified)` after a name the controller could not vouch for.
    pub approved_by: String,
}

/// `plan-history`: the recorded revisions, oldest first.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HistoryReport {
    /// The plan.
    pub plan: String,
    /// The revisions.
    pub revisions: Vec<HistoryRow>,
}

impl Report for HistoryReport {
    fn table(&self) -> String {
        self.render(false)
    }

    fn wide(&self) -> String {
        self.render(true)
    }
}

impl HistoryReport {
    /// The revisions; CREATED as an age (`5m`), with `wide` as the time itself.
    fn render(&self, wide: bool) -> String {
        let now = jiff::Timestamp::now();
        let mut table = Table::new([
            "REVISION",
            "STATE",
            "CREATED",
            "CHANGE-CAUSE",
            "APPROVED-BY",
            "PAYLOADS",
        ])
        .wide_only(&[], wide);
        for row in &self.revisions {
            let created = if wide || row.created.is_empty() {
                row.created.clone()
            } else {
                super::status::age(Some(&row.created), now)
            };
            table.row([
                row.revision.to_string(),
                row.state.clone(),
                created,
                row.change_cause.clone(),
                row.approved_by.clone(),
                row.payloads.clone(),
            ]);
        }
        table.render(&format!(
            "DeploymentPlan {} has no recorded deployment yet",
            self.plan
        ))
    }
}

/// The history rows of a plan's status. Pure. Who approved is what the
/// controller recorded when it applied each approval (see `crate::approvers`).
pub fn history_rows(status: &DeploymentPlanStatus) -> Vec<HistoryRow> {
    status
        .deployments
        .iter()
        .map(|record| HistoryRow {
            revision: record.revision,
            state: if record.revision == status.latest_deployment {
                "latest".to_owned()
            } else if record.revision == status.current_deployment {
                "in force".to_owned()
            } else {
                String::new()
            },
            created: record.created.clone(),
            change_cause: record.change_cause.clone().unwrap_or_default(),
            payloads: payloads_in_words(record),
            approved_by: record
                .approvals
                .iter()
                .map(ApprovalRecord::display)
                .collect::<Vec<_>>()
                .join(", "),
        })
        .collect()
}

fn payloads_in_words(record: &DeploymentRecord) -> String {
    record
        .payloads
        .iter()
        .map(|payload| {
            let coordinates: Vec<String> = payload
                .coordinates
                .iter()
                .map(|(key, value)| format!("{key}={value}"))
                .collect();
            format!("{} {}", payload.application, coordinates.join(" "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `kubectl shoal plan-history <plan>`.
pub async fn history(target: &Target, name: &str) -> Result<HistoryReport, PlansError> {
    let plan = get_plan(target, name).await?;
    Ok(HistoryReport {
        plan: name.to_owned(),
        revisions: history_rows(&plan.status.unwrap_or_default()),
    })
}

/// Why an undo cannot be done.
fn undo_refused(plan: &str, message: String) -> Error {
    Error::Wait(format!("DeploymentPlan {plan}: {message}"))
}

/// The merge patch that rewrites the plan's deployment to the record of
/// `to_revision` (default: the newest recorded revision before the latest).
/// Every rollout field is written, unset ones as null, so that nothing of
/// the current rollout survives the undo. Pure.
pub fn undo_patch(
    plan: &str,
    status: &DeploymentPlanStatus,
    to_revision: Option<u64>,
) -> Result<(u64, serde_json::Value), Error> {
    let record = match to_revision {
        Some(revision) => status.deployment(revision).ok_or_else(|| {
            undo_refused(
                plan,
                format!(
                    "revision {revision} is not recorded; see `kubectl shoal plan-history {plan}`"
                ),
            )
        })?,
        None => status
            .deployments
            .iter()
            .rev()
            .find(|record| record.revision < status.latest_deployment)
            .ok_or_else(|| {
                undo_refused(
                    plan,
                    "no earlier revision is recorded to go back to".to_owned(),
                )
            })?,
    };
    let mut rollout = serde_json::json!({
        "type": null, "canaryInstances": null, "pauseSeconds": null, "domainOrder": null
    });
    if let (Some(fields), Ok(serde_json::Value::Object(recorded))) = (
        rollout.as_object_mut(),
        serde_json::to_value(&record.rollout),
    ) {
        fields.extend(recorded);
    }
    let patch = serde_json::json!({
        "metadata": {"annotations": {
            CHANGE_CAUSE: format!("kubectl shoal plan-undo {plan} --to-revision {}", record.revision)
        }},
        "spec": {"deployment": {"payloads": record.payloads, "rollout": rollout}},
    });
    Ok((record.revision, patch))
}

/// `plan-undo`: what was written.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UndoReport {
    /// The plan.
    pub plan: String,
    /// The revision whose payloads and rollout were written back.
    pub to_revision: u64,
}

impl Report for UndoReport {
    fn table(&self) -> String {
        format!(
            "DeploymentPlan {} rolled back to the payloads of revision {}: a new deployment revision through the approval policy; follow it with `kubectl shoal rollout-status {}`\n",
            self.plan, self.to_revision, self.plan
        )
    }
}

/// `kubectl shoal plan-undo <plan> [--to-revision N]`.
pub async fn undo(
    target: &Target,
    name: &str,
    to_revision: Option<u64>,
) -> Result<UndoReport, Error> {
    let plan = get_plan(target, name).await?;
    let (revision, patch) = undo_patch(name, &plan.status.unwrap_or_default(), to_revision)?;
    merge_patch(&target.writes, &plans_api(target), name, patch)
        .await
        .map_err(api_error(
            target,
            format!("rewriting spec.deployment of DeploymentPlan {name}"),
        ))?;
    Ok(UndoReport {
        plan: name.to_owned(),
        to_revision: revision,
    })
}

/// Judges the plan's rollout from its status. Pure. Done needs the status
/// to describe the current generation, every wanted instance placed, and
/// every one installed at the latest revision.
pub fn judge_rollout(plan: &DeploymentPlan) -> Progress {
    let name = plan.metadata.name.clone().unwrap_or_default();
    let Some(status) = plan.status.as_ref() else {
        return Progress::Waiting(format!("DeploymentPlan {name}: no status yet"));
    };
    if status.phase.as_deref() == Some("Degraded") {
        return Progress::Failed(format!(
            "DeploymentPlan {name} is Degraded: {}",
            status.last_error.clone().unwrap_or_default()
        ));
    }
    let latest = status.latest_deployment;
    let domains = status.rollout.as_ref().map_or_else(String::new, |rollout| {
        rollout
            .domains
            .iter()
            .map(|domain| format!("{} {} {}", domain.name, domain.state, domain.installed))
            .collect::<Vec<_>>()
            .join(", ")
    });
    if let Some(rollout) = status.rollout.as_ref().filter(|r| r.phase == "Halted") {
        return Progress::Failed(format!(
            "DeploymentPlan {name}: {} [{domains}]",
            rollout.message
        ));
    }
    let current = status.observed_generation.is_some()
        && status.observed_generation == plan.metadata.generation;
    let wanted = plan.spec.deployment.instances as usize;
    let installed = status
        .instances
        .iter()
        .filter(|entry| entry.deployment == latest && entry.state == "installed")
        .count();
    let delivered = status
        .instances
        .iter()
        .filter(|entry| entry.delivered())
        .count();
    let summary = format!(
        "DeploymentPlan {name}: deployment {latest}: {installed}/{wanted} instances installed{}",
        if domains.is_empty() {
            String::new()
        } else {
            format!(" [{domains}]")
        }
    );
    if current && installed == wanted && delivered == wanted {
        Progress::Done(format!("{summary}: rolled out"))
    } else if status.rollout.as_ref().is_some_and(|r| r.phase == "Paused") {
        Progress::Waiting(format!("{summary} (paused)"))
    } else {
        Progress::Waiting(summary)
    }
}

/// `kubectl shoal rollout-status <plan> [--timeout]`: prints each change of
/// progress; Ok when the latest deployment is installed everywhere, an
/// error (exit 1) when it halts or the time is up.
pub async fn rollout_status(
    target: &Target,
    name: &str,
    timeout: std::time::Duration,
    print_line: impl FnMut(&str),
) -> Result<String, Error> {
    poll_until(timeout, print_line, || async {
        Ok(judge_rollout(&get_plan(target, name).await?))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status() -> DeploymentPlanStatus {
        serde_json::from_value(serde_json::json!({
            "latestDeployment": 3,
            "currentDeployment": 2,
            "deployments": [
                {"revision": 1, "hash": "h1", "created": "2026-01-01T00:00:00Z",
                 "payloads": [{"application": "nginx", "coordinates": {"image": "nginx:1"}}],
                 "instances": 2},
                {"revision": 2, "hash": "h2", "created": "2026-01-02T00:00:00Z",
                 "changeCause": "image 2",
                 "payloads": [{"application": "nginx", "coordinates": {"image": "nginx:2"}}],
                 "rollout": {"type": "Rolling", "domainOrder": ["b", "a"]},
                 "instances": 2},
                {"revision": 3, "hash": "h3", "created": "2026-01-03T00:00:00Z",
                 "payloads": [{"application": "nginx", "coordinates": {"image": "nginx:3"}}],
                 "rollout": {"type": "Canary", "canaryInstances": 1},
                 "instances": 2},
            ],
        }))
        .expect("a status")
    }

    #[test]
    fn undo_without_a_revision_writes_back_the_one_before_the_latest_with_a_change_cause() {
        let (revision, patch) = undo_patch("web", &status(), None).expect("an undo");
        assert_eq!(revision, 2);
        assert_eq!(
            patch["spec"]["deployment"]["payloads"][0]["coordinates"]["image"],
            "nginx:2"
        );
        assert_eq!(
            patch["spec"]["deployment"]["rollout"],
            serde_json::json!({"type": "Rolling", "domainOrder": ["b", "a"],
                               "canaryInstances": null, "pauseSeconds": null})
        );
        assert_eq!(
            patch["metadata"]["annotations"][CHANGE_CAUSE],
            "kubectl shoal plan-undo web --to-revision 2"
        );
    }

    #[test]
    fn undo_to_a_named_revision_clears_every_rollout_field_it_did_not_have() {
        let (revision, patch) = undo_patch("web", &status(), Some(1)).expect("an undo");
        assert_eq!(revision, 1);
        let rollout = &patch["spec"]["deployment"]["rollout"];
        assert_eq!(rollout["domainOrder"], serde_json::Value::Null);
        assert_eq!(rollout["canaryInstances"], serde_json::Value::Null);
        assert_eq!(rollout["type"], "Rolling");
    }

    #[test]
    fn undo_to_a_revision_not_recorded_is_refused_naming_the_plan_and_the_revision() {
        let error = undo_patch("web", &status(), Some(7)).expect_err("refused");
        let message = error.to_string();
        assert!(
            message.contains("web") && message.contains("revision 7"),
            "{message}"
        );
    }

    #[test]
    fn history_lists_every_revision_with_its_change_cause_and_which_is_latest() {
        let rows = history_rows(&status());
        let summary: Vec<(u64, &str, &str)> = rows
            .iter()
            .map(|row| (row.revision, row.state.as_str(), row.change_cause.as_str()))
            .collect();
        assert_eq!(
            summary,
            vec![(1, "", ""), (2, "in force", "image 2"), (3, "latest", "")]
        );
        assert_eq!(rows[0].payloads, "nginx image=nginx:1");
        assert_eq!(rows[2].created, "2026-01-03T00:00:00Z");
    }

    fn plan(status: serde_json::Value) -> DeploymentPlan {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "shoal.dev/v1alpha1",
            "kind": "DeploymentPlan",
            "metadata": {"name": "web", "generation": 2},
            "spec": {
                "swarm": "demo",
                "applications": [{"name": "nginx", "resources": {"cores": 1}}],
                "deployment": {"instances": 2},
            },
            "status": status,
        }))
        .expect("a plan")
    }

    #[test]
    fn rollout_status_is_done_only_when_every_instance_runs_the_latest_deployment_installed() {
        let entry = |name: &str, deployment: u64, state: &str| {
            serde_json::json!({"name": name, "member": "m-0", "updateDomain": "a",
                               "deployment": deployment, "state": state})
        };
        let halfway = plan(serde_json::json!({
            "observedGeneration": 2, "latestDeployment": 2,
            "instances": [entry("web-0", 2, "installed"), entry("web-1", 1, "installed")],
            "rollout": {"deployment": 2, "phase": "Paused", "message": "paused",
                        "domains": [{"name": "a", "state": "Done", "installed": "1/1"},
                                    {"name": "b", "state": "Paused", "installed": "0/1"}]},
        }));
        match judge_rollout(&halfway) {
            Progress::Waiting(sentence) => {
                assert!(sentence.contains("1/2"), "{sentence}");
                assert!(sentence.contains("b Paused 0/1"), "{sentence}");
                assert!(sentence.contains("(paused)"), "{sentence}");
            }
            other => panic!("expected waiting, got {other:?}"),
        }
        let done = plan(serde_json::json!({
            "observedGeneration": 2, "latestDeployment": 2,
            "instances": [entry("web-0", 2, "installed"), entry("web-1", 2, "installed")],
        }));
        assert!(matches!(judge_rollout(&done), Progress::Done(_)));
        let stale = plan(serde_json::json!({
            "observedGeneration": 1, "latestDeployment": 2,
            "instances": [entry("web-0", 2, "installed"), entry("web-1", 2, "installed")],
        }));
        assert!(matches!(judge_rollout(&stale), Progress::Waiting(_)));
        let halted = plan(serde_json::json!({
            "observedGeneration": 2, "latestDeployment": 2,
            "rollout": {"deployment": 2, "phase": "Halted",
                        "message": "deployment 2: halted in update domain \"a\": boom"},
        }));
        match judge_rollout(&halted) {
            Progress::Failed(sentence) => assert!(sentence.contains("boom"), "{sentence}"),
            other => panic!("expected failed, got {other:?}"),
        }
    }
}
