//! The pool-by-pool restarts of a Swarm (`reload: Restart`) from kubectl:
//! `pause swarm/<name>`, `resume swarm/<name>`, `rollout-status swarm/<name>`.
//!
//! The same commands take a DeploymentPlan, by bare name as before or as
//! `dplan/<name>`, the way `kubectl rollout pause deployment/<name>` names its
//! object; a bare name a Swarm also has is refused ([`resolve`]). Pause and resume set the Swarm's `spec.paused` (a merge patch:
//! nothing else changes); `rollout-status` reads the Swarm until its revision
//! is in force with every pool restarted (exit 0), halted or Degraded (exit 1)
//! or the time is up (exit 1). `judge_swarm_rollout` is the pure part.

use kube::Api;

use super::kind::{self, Kind};
use super::plan_rollout::PauseReport;
use super::wait::{Progress, WaitFor, judge, poll_until};
use super::write::merge_patch;
use super::{Error, Target, get_swarm};
use crate::api::deployment_plan::DeploymentPlan;
use crate::api::swarm::Swarm;

/// The object a rollout command acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RolloutObject {
    /// A DeploymentPlan: `dplan/<name>` (or another of its kind's names, see [`kind`]).
    Plan(String),
    /// A Swarm: `swarm/<name>` (or `swarms/`, `sw/`).
    Swarm(String),
    /// A bare name: the DeploymentPlan, as in earlier releases, unless a Swarm has it too
    /// ([`resolve`]).
    Bare(String),
}

impl RolloutObject {
    /// Parses `<kind>/<name>` or a bare name (the command-line argument).
    pub fn parse(text: &str) -> Result<RolloutObject, String> {
        Ok(match kind::split(text)? {
            (Some(Kind::Swarm), name) => RolloutObject::Swarm(name),
            (Some(Kind::Plan), name) => RolloutObject::Plan(name),
            (None, name) => RolloutObject::Bare(name),
        })
    }
}

/// What a bare name means to `pause`, `resume` and `rollout-status`: the DeploymentPlan
/// as before; refused when a Swarm has the name too (naming both and the explicit forms),
/// and when only a Swarm has it (saying to write `swarm/<name>`). A kind that cannot be
/// read (no right, no CRD) counts as absent, so plan users keep working as before.
pub async fn resolve(
    target: &Target,
    object: &RolloutObject,
    command: &'static str,
) -> Result<RolloutObject, Error> {
    let RolloutObject::Bare(name) = object else {
        return Ok(object.clone());
    };
    let plans: Api<DeploymentPlan> = Api::namespaced(target.client.clone(), &target.namespace);
    let swarms: Api<Swarm> = Api::namespaced(target.client.clone(), &target.namespace);
    let plan = plans.get_opt(name).await.ok().flatten().is_some();
    let swarm = swarms.get_opt(name).await.ok().flatten().is_some();
    if swarm {
        return Err(Error::BareRolloutName {
            name: name.clone(),
            namespace: target.namespace.clone(),
            command,
            plan_too: plan,
        });
    }
    Ok(RolloutObject::Plan(name.clone()))
}

/// `kubectl shoal pause|resume swarm/<name>`: sets `spec.paused`.
pub async fn set_paused(target: &Target, name: &str, paused: bool) -> Result<PauseReport, Error> {
    get_swarm(target, name).await?;
    let patch = serde_json::json!({"spec": {"paused": paused}});
    let api = Api::<Swarm>::namespaced(target.client.clone(), &target.namespace);
    merge_patch(&target.writes, &api, name, patch)
        .await
        .map_err(|source| Error::PauseSwarm {
            swarm: name.to_owned(),
            namespace: target.namespace.clone(),
            source,
        })?;
    Ok(PauseReport {
        kind: "Swarm",
        name: name.to_owned(),
        argument: format!("swarm/{name}"),
        paused,
        holds: "no further pod is restarted and no job granted",
    })
}

/// Judges a Swarm's rollout from its status. Pure. Done needs the revision in
/// force (as `kubectl shoal wait` judges it) and, under `Restart`,
/// `status.rollout` complete: every pool restarted for it and back (the slices
/// can be in force while a restarted pod is not back yet); a halted rollout
/// fails.
pub fn judge_swarm_rollout(swarm: &Swarm) -> Progress {
    let name = swarm.metadata.name.clone().unwrap_or_default();
    let rollout = swarm
        .status
        .as_ref()
        .and_then(|status| status.rollout.as_ref());
    let pools = rollout.map_or_else(String::new, |rollout| {
        let rows: Vec<String> = rollout
            .pools
            .iter()
            .map(|pool| format!("{} {} {}", pool.name, pool.state, pool.ready))
            .collect();
        format!(" [pools: {}]", rows.join(", "))
    });
    if let Some(rollout) = rollout.filter(|rollout| rollout.phase == "Halted") {
        return Progress::Failed(format!("Swarm {name}: {}{pools}", rollout.message));
    }
    match judge(swarm, None, WaitFor::InForce) {
        Progress::Failed(sentence) => Progress::Failed(sentence),
        // A rollout waits through an approval, as it always has; `wait` says so and ends.
        Progress::AwaitingApproval(sentence) | Progress::Waiting(sentence) => match rollout
            .filter(|rollout| rollout.phase == "Paused")
        {
            Some(paused) => Progress::Waiting(format!("Swarm {name}: {}{pools}", paused.message)),
            None => Progress::Waiting(format!("{sentence}{pools}")),
        },
        // The slices are in force, but pods restarted for them may not be back.
        Progress::Done(sentence) => match rollout.filter(|rollout| rollout.phase != "Complete") {
            Some(rollout) => Progress::Waiting(format!("Swarm {name}: {}{pools}", rollout.message)),
            None => Progress::Done(format!("{sentence}{pools}")),
        },
    }
}

/// `kubectl shoal rollout-status swarm/<name> [--timeout]`.
pub async fn rollout_status(
    target: &Target,
    name: &str,
    timeout: std::time::Duration,
    print_line: impl FnMut(&str),
) -> Result<String, Error> {
    poll_until(timeout, print_line, || async {
        Ok(judge_swarm_rollout(&get_swarm(target, name).await?))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_name_is_unqualified_and_kind_slash_name_picks_the_kind() {
        assert_eq!(
            RolloutObject::parse("web"),
            Ok(RolloutObject::Bare("web".to_owned()))
        );
        for text in ["plan/web", "dplan/web", "deploymentplans/web"] {
            assert_eq!(
                RolloutObject::parse(text),
                Ok(RolloutObject::Plan("web".to_owned()))
            );
        }
        for text in ["swarm/demo", "Swarms/demo", "sw/demo"] {
            assert_eq!(
                RolloutObject::parse(text),
                Ok(RolloutObject::Swarm("demo".to_owned()))
            );
        }
        let refused = RolloutObject::parse("deployment/web").expect_err("no rollout of its own");
        assert!(refused.contains("swarm/<name>"), "{refused}");
        assert!(RolloutObject::parse("swarm/").is_err());
    }

    fn swarm(status: serde_json::Value) -> Swarm {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "shoal.dev/v1alpha1",
            "kind": "Swarm",
            "metadata": {"name": "demo", "generation": 2},
            "spec": {"jobs": ["a"], "reload": "Restart"},
            "status": status,
        }))
        .expect("a Swarm")
    }

    fn conditions(progressing: bool) -> serde_json::Value {
        serde_json::json!([
            {"type": "Ready", "status": "True", "reason": "Converged"},
            {"type": "Progressing", "status": if progressing { "True" } else { "False" },
             "reason": "RollingOut"},
            {"type": "Degraded", "status": "False", "reason": "AsExpected"},
        ])
    }

    #[test]
    fn rollout_status_waits_while_paused_fails_when_halted_and_is_done_when_every_pool_is() {
        let pools = |a: &str, b: &str| {
            serde_json::json!([{"name": "a", "state": a, "ready": "2/2"},
                               {"name": "b", "state": b, "ready": "0/2"}])
        };
        let paused = swarm(serde_json::json!({
            "observedGeneration": 2, "currentRevision": 3, "conditions": conditions(true),
            "rollout": {"revision": 3, "phase": "Paused", "message": "revision 3: paused before pool b",
                        "pools": pools("Done", "Paused")},
        }));
        match judge_swarm_rollout(&paused) {
            Progress::Waiting(sentence) => {
                assert!(sentence.contains("paused before pool b"), "{sentence}");
                assert!(sentence.contains("b Paused 0/2"), "{sentence}");
            }
            other => panic!("expected waiting, got {other:?}"),
        }
        let halted = swarm(serde_json::json!({
            "observedGeneration": 2, "currentRevision": 3, "conditions": conditions(true),
            "rollout": {"revision": 3, "phase": "Halted",
                        "message": "revision 3: halted in pool b: pod b-0 is not Ready",
                        "pools": pools("Done", "Failed")},
        }));
        match judge_swarm_rollout(&halted) {
            Progress::Failed(sentence) => assert!(sentence.contains("pod b-0"), "{sentence}"),
            other => panic!("expected failed, got {other:?}"),
        }
        let progressing = swarm(serde_json::json!({
            "observedGeneration": 2, "currentRevision": 3, "conditions": conditions(true),
            "rollout": {"revision": 3, "phase": "Progressing", "message": "restarting pool b",
                        "pools": pools("Done", "Updating")},
        }));
        assert!(matches!(
            judge_swarm_rollout(&progressing),
            Progress::Waiting(_)
        ));
        // The slices are in force (Progressing False) but a restarted pod is
        // not back yet: the rollout is not done.
        let pods_coming_back = swarm(serde_json::json!({
            "observedGeneration": 2, "currentRevision": 3, "conditions": conditions(false),
            "rollout": {"revision": 3, "phase": "Progressing", "message": "restarting pool b",
                        "pools": pools("Done", "Updating")},
        }));
        assert!(
            matches!(judge_swarm_rollout(&pods_coming_back), Progress::Waiting(_)),
            "{:?}",
            judge_swarm_rollout(&pods_coming_back)
        );
        let done = swarm(serde_json::json!({
            "observedGeneration": 2, "currentRevision": 3, "conditions": conditions(false),
            "rollout": {"revision": 3, "phase": "Complete", "message": "every pool is restarted",
                        "pools": pools("Done", "Done")},
        }));
        match judge_swarm_rollout(&done) {
            Progress::Done(sentence) => assert!(sentence.contains("b Done"), "{sentence}"),
            other => panic!("expected done, got {other:?}"),
        }
    }
}
