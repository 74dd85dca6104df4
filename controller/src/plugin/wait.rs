//! `kubectl shoal wait` and `kubectl shoal status --watch`: follow a Swarm until its
//! revision is in force (like `kubectl rollout status`), or redraw its status on each
//! change (like `kubectl get -w`).
//!
//! "In force" is judged against what the controller has seen: its `observedGeneration`
//! must be the Swarm's generation, and its `status.observedInputs` (pool sizes, the
//! `jobsFrom` documents) what `wait` reads now, since `kubectl scale` or an edit of a job
//! ConfigMap does not change the Swarm's generation. Then the revision computed from
//! those inputs is in force (exit 0), or waits for approval (exit
//! [`EXIT_AWAITING_APPROVAL`]), or the Swarm is Degraded (exit 1); a timeout exits 1.
//!
//! `status --watch` prints when the report's data changes, not its text: the table's
//! ages grow every second by themselves.
//!
//! Both poll the cluster once a second: the status report draws on the Swarm, its pods,
//! slices, Leases and Events, and one read of each per second is cheaper for the API
//! server than a watch on each for a short-lived command.

use std::time::Duration;

use clap::ValueEnum;
use serde::Serialize;

use super::{Error, OutputFormat, Target, get_swarm, render, status};
use crate::api::swarm::{ObservedInputs, Swarm};
use shoal_core::names::ANNOTATION_APPROVE;

/// The exit code of `kubectl shoal wait` when the controller has seen the current inputs
/// and the revision computed from them waits for approval (1 is an error, a timeout or a
/// Degraded Swarm; 2 is clap's for a bad command line).
pub const EXIT_AWAITING_APPROVAL: u8 = 3;

/// How often the cluster is read.
pub const POLL: Duration = Duration::from_secs(1);

/// What `wait` waits for.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WaitFor {
    /// The controller saw the latest spec, no revision waits for approval or is still being
    /// applied: the revision computed from it is in force.
    InForce,
    /// In force, and every member is ready (the Ready condition is True).
    Ready,
}

/// Where a Swarm stands with respect to what `wait` waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Reached; the sentence says what is in force.
    Done(String),
    /// Not yet; the sentence says what it waits for.
    Waiting(String),
    /// It will not get there without a change (Degraded); the sentence says why.
    Failed(String),
    /// It will not get there without an approval: the revision computed from the inputs
    /// the controller has seen waits for one; the sentence says how to give it.
    AwaitingApproval(String),
}

fn condition_is_true(swarm: &Swarm, type_: &str) -> Option<String> {
    swarm
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|condition| condition.type_ == type_ && condition.status == "True")
        .map(|condition| format!("{}: {}", condition.reason, condition.message))
}

/// What differs between the inputs the controller recorded and those read now, in words;
/// `None` when they agree.
fn unseen_inputs(recorded: &ObservedInputs, now: &ObservedInputs) -> Option<String> {
    let mut changes = Vec::new();
    for (pool, replicas) in &now.pools {
        match recorded.pools.get(pool) {
            None => changes.push(format!("pool {pool} ({replicas} replicas) is new")),
            Some(seen) if seen != replicas => changes.push(format!(
                "pool {pool} has {replicas} replicas (the controller last saw {seen})"
            )),
            Some(_) => {}
        }
    }
    for pool in recorded.pools.keys() {
        if !now.pools.contains_key(pool) {
            changes.push(format!("pool {pool} is no longer a pool"));
        }
    }
    if recorded.job_sources != now.job_sources {
        changes.push("the jobsFrom ConfigMaps changed".to_owned());
    }
    (!changes.is_empty()).then(|| changes.join(", "))
}

/// Judges one observation of a Swarm (pure: the loop around it does the reading).
/// `inputs` are the Swarm's inputs outside its spec as read now
/// ([`crate::swarm::observe::observe_inputs`]); `None` skips that check.
pub fn judge(swarm: &Swarm, inputs: Option<&ObservedInputs>, waiting_for: WaitFor) -> Progress {
    let name = swarm.metadata.name.as_deref().unwrap_or_default();
    let Some(status) = &swarm.status else {
        return Progress::Waiting(format!(
            "Swarm {name}: no status yet (is the controller running?)"
        ));
    };
    if let Some(why) = condition_is_true(swarm, "Degraded") {
        return Progress::Failed(format!("Swarm {name} is Degraded: {why}"));
    }
    let generation = swarm.metadata.generation.unwrap_or_default();
    if status.observed_generation.unwrap_or_default() < generation {
        return Progress::Waiting(format!(
            "Swarm {name}: the controller has not yet seen generation {generation}"
        ));
    }
    // A status from a controller that records no inputs (an earlier release) is judged
    // on its generation alone.
    if let (Some(recorded), Some(now)) = (&status.observed_inputs, inputs)
        && let Some(changes) = unseen_inputs(recorded, now)
    {
        return Progress::Waiting(format!(
            "Swarm {name}: the controller has not yet seen the current inputs: {changes}"
        ));
    }
    if let Some(pending) = &status.pending_revision {
        // Approved, waiting for a maintenance window: it applies at the opening, no
        // approval is missing.
        if let Some(why) = condition_is_true(swarm, "WaitingForWindow") {
            return Progress::Waiting(format!(
                "Swarm {name}: revision {} waits for a maintenance window ({why})",
                pending.revision
            ));
        }
        // Approved already (`kubectl shoal approve` just ran): the controller has not yet
        // applied the approval, an input like any other.
        if swarm
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_APPROVE))
            == Some(&pending.approve_with)
        {
            return Progress::Waiting(format!(
                "Swarm {name}: revision {} is approved; waiting for the controller to apply it",
                pending.revision
            ));
        }
        return Progress::AwaitingApproval(format!(
            "Swarm {name}: revision {} waits for approval (kubectl shoal approve {name} --revision {})",
            pending.revision, pending.revision
        ));
    }
    if let Some(why) = condition_is_true(swarm, "Progressing") {
        return Progress::Waiting(format!(
            "Swarm {name}: revision {} is being applied ({why})",
            status.latest_revision.max(status.current_revision)
        ));
    }
    if status.current_revision == 0 {
        return Progress::Waiting(format!("Swarm {name}: no revision applied yet"));
    }
    if waiting_for == WaitFor::Ready && condition_is_true(swarm, "Ready").is_none() {
        return Progress::Waiting(format!(
            "Swarm {name}: revision {} is in force; waiting for members to be ready ({})",
            status.current_revision,
            status.ready.as_deref().unwrap_or("?")
        ));
    }
    Progress::Done(format!(
        "Swarm {name}: revision {} is in force ({} jobs, {} members ready)",
        status.current_revision,
        status.jobs,
        status.ready.as_deref().unwrap_or("?")
    ))
}

/// `kubectl shoal wait`: prints each new state as a line (through `print_line`) and
/// returns the final one; a timeout or Degraded is an error naming the Swarm.
pub async fn wait(
    target: &Target,
    swarm: &str,
    waiting_for: WaitFor,
    timeout: Duration,
    print_line: impl FnMut(&str),
) -> Result<String, Error> {
    poll_until(timeout, print_line, || async {
        let object = get_swarm(target, swarm).await?;
        let inputs = crate::swarm::observe::observe_inputs(&object, &target.client)
            .await
            .map_err(super::observe_failed(target, swarm))?;
        Ok(judge(&object, Some(&inputs), waiting_for))
    })
    .await
}

/// Reads with `observe` every `POLL` until it is `Done` (Ok with its sentence)
/// or `Failed` (an error with its sentence), printing each new `Waiting`
/// sentence; an error naming the last sentence once `timeout` has passed.
pub(super) async fn poll_until<F, Fut>(
    timeout: Duration,
    mut print_line: impl FnMut(&str),
    mut observe: F,
) -> Result<String, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Progress, Error>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last = String::new();
    loop {
        let sentence = match observe().await? {
            Progress::Done(sentence) => return Ok(sentence + "\n"),
            Progress::Failed(sentence) => return Err(Error::Wait(sentence)),
            Progress::AwaitingApproval(sentence) => {
                return Err(Error::AwaitingApproval(sentence));
            }
            Progress::Waiting(sentence) => sentence,
        };
        if sentence != last {
            print_line(&sentence);
            last = sentence;
        }
        if tokio::time::Instant::now() + POLL > deadline {
            return Err(Error::Wait(format!(
                "timed out after {} waiting: {last}",
                humanize(timeout)
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

fn humanize(duration: Duration) -> String {
    let seconds = duration.as_secs();
    if seconds >= 60 && seconds.is_multiple_of(60) {
        format!("{}m", seconds / 60)
    } else {
        format!("{seconds}s")
    }
}

/// `kubectl shoal status --watch`: prints the report, then again each time it changes,
/// until interrupted (or a read fails).
pub async fn watch_status(
    target: &Target,
    swarm: &str,
    format: OutputFormat,
    mut print: impl FnMut(&str),
) -> Result<String, Error> {
    let mut last: Option<status::StatusReport> = None;
    loop {
        let report = status::status(target, swarm).await?;
        // The report, not its text, decides: the table's ages ("5s") grow by themselves.
        if last.as_ref() != Some(&report) {
            let text = render(&report, format)?;
            print(&match format {
                // One document per change, as `kubectl get -w -o yaml|json` prints them.
                OutputFormat::Yaml => format!("---\n{text}"),
                _ => text,
            });
            last = Some(report);
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::swarm::{Condition, PendingRevision, RevisionSummary, SwarmSpec, SwarmStatus};

    fn swarm(generation: i64, status: SwarmStatus) -> Swarm {
        let spec: SwarmSpec = serde_json::from_value(serde_json::json!({})).expect("spec");
        let mut swarm = Swarm::new("demo", spec);
        swarm.metadata.generation = Some(generation);
        swarm.status = Some(status);
        swarm
    }

    fn condition(type_: &str, status: &str, reason: &str) -> Condition {
        Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: "why".to_owned(),
            last_transition_time: None,
            observed_generation: None,
        }
    }

    fn settled() -> SwarmStatus {
        SwarmStatus {
            observed_generation: Some(2),
            current_revision: 3,
            latest_revision: 3,
            jobs: 6,
            ready: Some("2/2".to_owned()),
            conditions: vec![
                condition("Ready", "True", "AllMembersReady"),
                condition("Progressing", "False", "InForce"),
            ],
            ..SwarmStatus::default()
        }
    }

    /// Revision 4 approved and waiting for a maintenance window.
    fn pending_for_window() -> SwarmStatus {
        let mut status = settled();
        status.pending_revision = Some(PendingRevision {
            revision: 4,
            hash: "sha256:x".to_owned(),
            approve_with: "4/sha256:x".to_owned(),
            summary: RevisionSummary::default(),
        });
        status
            .conditions
            .push(condition("WaitingForWindow", "True", "WindowClosed"));
        status
    }

    #[test]
    fn a_settled_swarm_is_in_force_and_ready() {
        for waiting_for in [WaitFor::InForce, WaitFor::Ready] {
            let progress = judge(&swarm(2, settled()), None, waiting_for);
            assert_eq!(
                progress,
                Progress::Done(
                    "Swarm demo: revision 3 is in force (6 jobs, 2/2 members ready)".to_owned()
                )
            );
        }
    }

    #[test]
    fn an_unseen_generation_or_progress_keeps_waiting_and_a_pending_revision_ends_the_wait() {
        assert!(matches!(
            judge(&swarm(3, settled()), None, WaitFor::InForce),
            Progress::Waiting(text) if text.contains("generation 3")
        ));
        let mut pending = settled();
        pending.pending_revision = Some(PendingRevision {
            revision: 4,
            hash: "sha256:x".to_owned(),
            approve_with: "4/sha256:x".to_owned(),
            summary: RevisionSummary::default(),
        });
        let mut approved = swarm(2, pending.clone());
        assert!(matches!(
            judge(&swarm(2, pending), None, WaitFor::InForce),
            Progress::AwaitingApproval(text) if text.contains("revision 4 waits for approval")
        ));
        approved.metadata.annotations =
            Some([(ANNOTATION_APPROVE.to_owned(), "4/sha256:x".to_owned())].into());
        assert!(matches!(
            judge(&approved, None, WaitFor::InForce),
            Progress::Waiting(text) if text.contains("revision 4 is approved")
        ));
        let mut for_window = swarm(2, pending_for_window());
        assert!(matches!(
            judge(&for_window, None, WaitFor::InForce),
            Progress::Waiting(text) if text.contains("revision 4 waits for a maintenance window")
        ));
        for_window.status.as_mut().unwrap().conditions.pop();
        assert!(matches!(
            judge(&for_window, None, WaitFor::InForce),
            Progress::AwaitingApproval(_)
        ));
        let mut progressing = settled();
        progressing.conditions[1] = condition("Progressing", "True", "Applying");
        assert!(matches!(
            judge(&swarm(2, progressing), None, WaitFor::InForce),
            Progress::Waiting(text) if text.contains("being applied")
        ));
    }

    #[test]
    fn ready_waits_for_the_ready_condition_and_in_force_does_not() {
        let mut unready = settled();
        unready.conditions[0] = condition("Ready", "False", "MembersNotReady");
        assert!(matches!(
            judge(&swarm(2, unready.clone()), None, WaitFor::InForce),
            Progress::Done(_)
        ));
        assert!(matches!(
            judge(&swarm(2, unready), None, WaitFor::Ready),
            Progress::Waiting(text) if text.contains("waiting for members to be ready")
        ));
    }

    #[test]
    fn a_degraded_swarm_fails_the_wait_with_its_reason() {
        let mut degraded = settled();
        degraded
            .conditions
            .push(condition("Degraded", "True", "InvalidJobs"));
        assert_eq!(
            judge(&swarm(2, degraded), None, WaitFor::InForce),
            Progress::Failed("Swarm demo is Degraded: InvalidJobs: why".to_owned())
        );
    }

    fn inputs(replicas: u32, jobs: Option<&str>) -> ObservedInputs {
        ObservedInputs {
            pools: [("worker".to_owned(), replicas)].into(),
            job_sources: jobs.map(str::to_owned),
        }
    }

    #[test]
    fn a_scale_the_controller_has_not_seen_keeps_waiting_though_the_generation_is_seen() {
        let mut seen = settled();
        seen.observed_inputs = Some(inputs(7, None));
        let now = inputs(5, None);
        assert!(matches!(
            judge(&swarm(2, seen.clone()), Some(&now), WaitFor::InForce),
            Progress::Waiting(text) if text.contains("pool worker has 5 replicas (the controller last saw 7)")
        ));
        let changed_jobs = ObservedInputs {
            job_sources: Some("0123".to_owned()),
            ..inputs(7, None)
        };
        assert!(matches!(
            judge(&swarm(2, seen.clone()), Some(&changed_jobs), WaitFor::InForce),
            Progress::Waiting(text) if text.contains("jobsFrom")
        ));
        assert!(matches!(
            judge(&swarm(2, seen), Some(&inputs(7, None)), WaitFor::InForce),
            Progress::Done(_)
        ));
    }
}
