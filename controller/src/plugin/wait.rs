//! `kubectl shoal wait` and `kubectl shoal status --watch`: follow a Swarm until its
//! revision is in force (like `kubectl rollout status`), or redraw its status on each
//! change (like `kubectl get -w`).
//!
//! Both poll the cluster once a second: the status report draws on the Swarm, its pods,
//! slices, Leases and Events, and one read of each per second is cheaper for the API
//! server than a watch on each for a short-lived command.

use std::time::Duration;

use clap::ValueEnum;
use serde::Serialize;

use super::{Error, OutputFormat, Target, get_swarm, render, status};
use crate::crd::Swarm;

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

/// Judges one observation of a Swarm (pure: the loop around it does the reading).
pub fn judge(swarm: &Swarm, waiting_for: WaitFor) -> Progress {
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
    if let Some(pending) = &status.pending_revision {
        return Progress::Waiting(format!(
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
        Ok(judge(&get_swarm(target, swarm).await?, waiting_for))
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
    let mut last = String::new();
    loop {
        let report = status::status(target, swarm).await?;
        let text = render(&report, format)?;
        if text != last {
            print(&match format {
                OutputFormat::Table => text.clone(),
                // One document per change, as `kubectl get -w -o yaml|json` prints them.
                OutputFormat::Yaml => format!("---\n{text}"),
                OutputFormat::Json => text.clone(),
            });
            last = text;
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{Condition, PendingRevision, RevisionSummary, SwarmSpec, SwarmStatus};

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

    #[test]
    fn a_settled_swarm_is_in_force_and_ready() {
        for waiting_for in [WaitFor::InForce, WaitFor::Ready] {
            let progress = judge(&swarm(2, settled()), waiting_for);
            assert_eq!(
                progress,
                Progress::Done(
                    "Swarm demo: revision 3 is in force (6 jobs, 2/2 members ready)".to_owned()
                )
            );
        }
    }

    #[test]
    fn an_unseen_generation_a_pending_revision_or_progress_keeps_waiting() {
        assert!(matches!(
            judge(&swarm(3, settled()), WaitFor::InForce),
            Progress::Waiting(text) if text.contains("generation 3")
        ));
        let mut pending = settled();
        pending.pending_revision = Some(PendingRevision {
            revision: 4,
            hash: "sha256:x".to_owned(),
            approve_with: "4/sha256:x".to_owned(),
            summary: RevisionSummary::default(),
        });
        assert!(matches!(
            judge(&swarm(2, pending), WaitFor::InForce),
            Progress::Waiting(text) if text.contains("revision 4 waits for approval")
        ));
        let mut progressing = settled();
        progressing.conditions[1] = condition("Progressing", "True", "Applying");
        assert!(matches!(
            judge(&swarm(2, progressing), WaitFor::InForce),
            Progress::Waiting(text) if text.contains("being applied")
        ));
    }

    #[test]
    fn ready_waits_for_the_ready_condition_and_in_force_does_not() {
        let mut unready = settled();
        unready.conditions[0] = condition("Ready", "False", "MembersNotReady");
        assert!(matches!(
            judge(&swarm(2, unready.clone()), WaitFor::InForce),
            Progress::Done(_)
        ));
        assert!(matches!(
            judge(&swarm(2, unready), WaitFor::Ready),
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
            judge(&swarm(2, degraded), WaitFor::InForce),
            Progress::Failed("Swarm demo is Degraded: InvalidJobs: why".to_owned())
        );
    }
}
