//! When is the demo converged? A pure judgement over one observation of a
//! Swarm, its members' slice ConfigMaps, their Leases and their slice files.

use std::collections::{BTreeMap, BTreeSet};

use shoal_worker::SliceView;

/// What a member's Lease says it applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    /// `shoal.dev/acked-revision`.
    pub revision: u64,
    /// `shoal.dev/acked-hash`.
    pub hash: String,
}

/// One look at a Swarm and everything its members hold.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    /// The Swarm's name.
    pub swarm: String,
    /// `status.phase`.
    pub phase: Option<String>,
    /// `status.currentRevision`.
    pub current_revision: u64,
    /// `status.pendingRevision.revision`.
    pub pending_revision: Option<u64>,
    /// `status.jobs`: how many jobs the revision in force has.
    pub jobs: u64,
    /// Pods of the Swarm's pools that are not terminating.
    pub pods: BTreeSet<String>,
    /// Slices from the `<pod>-slice` ConfigMaps, by pod (unparsable ones as their error).
    pub slices: BTreeMap<String, Result<SliceView, String>>,
    /// Acknowledgements from the `<pod>-member` Leases, by pod.
    pub acks: BTreeMap<String, Ack>,
    /// `status.members[].ackedRevision` by pod: the acknowledgements as the
    /// controller last reported them.
    pub reported_acks: BTreeMap<String, Option<u64>>,
    /// Slices read from the members' slice files, by pod (missing or unreadable ones as their error).
    pub files: BTreeMap<String, Result<SliceView, String>>,
}

/// The state of a converged Swarm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converged {
    /// The Swarm.
    pub swarm: String,
    /// The revision in force.
    pub revision: u64,
    /// Every member's slice as its file holds it (equal to its ConfigMap and acknowledged).
    pub slices: BTreeMap<String, SliceView>,
}

impl Converged {
    /// How many jobs all slices hold together.
    pub fn job_count(&self) -> usize {
        self.slices.values().map(|slice| slice.jobs.len()).sum()
    }
}

/// Converged, or not yet and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every member holds, in its file, the acknowledged slice of the revision in force.
    Converged(Converged),
    /// Not yet: what is still missing, in words.
    Pending(String),
}

/// Judges one observation: converged when the Swarm is `Ready` at a revision
/// with nothing pending, every pod has a slice, has acknowledged exactly that
/// slice on its Lease (and the Swarm's status says so) and holds it in its
/// file, and no job is in two slices.
pub fn judge(observation: &Observation) -> Verdict {
    let swarm = &observation.swarm;
    if observation.phase.as_deref() != Some("Ready") || observation.current_revision == 0 {
        return Verdict::Pending(format!(
            "Swarm {swarm} is {} at revision {}",
            observation.phase.as_deref().unwrap_or("without a phase"),
            observation.current_revision
        ));
    }
    if let Some(pending) = observation.pending_revision {
        return Verdict::Pending(format!(
            "Swarm {swarm} has revision {pending} waiting for approval"
        ));
    }
    if observation.pods.is_empty() {
        return Verdict::Pending(format!("Swarm {swarm} has no member pods yet"));
    }
    let reported: BTreeSet<&String> = observation.reported_acks.keys().collect();
    if reported != observation.pods.iter().collect() {
        return Verdict::Pending(format!(
            "Swarm {swarm}'s status lists members {reported:?}, the pools have pods {:?}",
            observation.pods
        ));
    }
    let mut slices = BTreeMap::new();
    let mut owners: BTreeMap<&str, &str> = BTreeMap::new();
    for pod in &observation.pods {
        let slice = match observation.slices.get(pod) {
            None => return Verdict::Pending(format!("member {pod} has no slice ConfigMap yet")),
            Some(Err(problem)) => {
                return Verdict::Pending(format!("member {pod}'s slice ConfigMap: {problem}"));
            }
            Some(Ok(slice)) => slice,
        };
        match observation.acks.get(pod) {
            Some(ack) if ack.hash == slice.hash => {}
            Some(ack) => {
                return Verdict::Pending(format!(
                    "member {pod} acknowledged revision {} ({}), its slice is revision {} ({})",
                    ack.revision, ack.hash, slice.revision, slice.hash
                ));
            }
            None => return Verdict::Pending(format!("member {pod} has not acknowledged yet")),
        }
        match observation.reported_acks.get(pod) {
            Some(Some(revision)) if *revision == slice.revision => {}
            reported => {
                return Verdict::Pending(format!(
                    "Swarm {swarm}'s status reports {pod}'s acknowledged revision as {:?}, its slice is revision {}",
                    reported.copied().flatten(),
                    slice.revision
                ));
            }
        }
        match observation.files.get(pod) {
            Some(Ok(file)) if file.hash == slice.hash && file.jobs == slice.jobs => {}
            Some(Ok(file)) => {
                return Verdict::Pending(format!(
                    "member {pod}'s slice file holds {} jobs ({}), its ConfigMap {} ({})",
                    file.jobs.len(),
                    file.hash,
                    slice.jobs.len(),
                    slice.hash
                ));
            }
            Some(Err(problem)) => {
                return Verdict::Pending(format!("member {pod}'s slice file: {problem}"));
            }
            None => return Verdict::Pending(format!("member {pod} has no slice file yet")),
        }
        for key in &slice.jobs {
            if let Some(other) = owners.insert(key.as_str(), pod.as_str()) {
                return Verdict::Pending(format!(
                    "job {key} is in the slices of both {other} and {pod}"
                ));
            }
        }
        slices.insert(pod.clone(), slice.clone());
    }
    let held: usize = slices
        .values()
        .map(|slice: &SliceView| slice.jobs.len())
        .sum();
    if held as u64 != observation.jobs {
        return Verdict::Pending(format!(
            "the members' slices hold {held} jobs, revision {} of Swarm {swarm} has {}",
            observation.current_revision, observation.jobs
        ));
    }
    Verdict::Converged(Converged {
        swarm: swarm.clone(),
        revision: observation.current_revision,
        slices,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(pod: &str, revision: u64, jobs: &[&str]) -> SliceView {
        SliceView::new("demo", pod, revision, jobs.iter().copied()).expect("valid keys")
    }

    fn converged_observation() -> Observation {
        let first = slice("worker-0", 1, &["a", "b"]);
        let second = slice("worker-1", 1, &["c"]);
        let mut observation = Observation {
            swarm: "demo".to_owned(),
            phase: Some("Ready".to_owned()),
            current_revision: 1,
            jobs: 3,
            pods: ["worker-0".to_owned(), "worker-1".to_owned()].into(),
            ..Observation::default()
        };
        for slice in [first, second] {
            let pod = slice.member.clone();
            observation.acks.insert(
                pod.clone(),
                Ack {
                    revision: slice.revision,
                    hash: slice.hash.clone(),
                },
            );
            observation.files.insert(pod.clone(), Ok(slice.clone()));
            observation
                .reported_acks
                .insert(pod.clone(), Some(slice.revision));
            observation.slices.insert(pod, Ok(slice));
        }
        observation
    }

    fn pending_reason(observation: &Observation) -> String {
        match judge(observation) {
            Verdict::Pending(reason) => reason,
            Verdict::Converged(converged) => panic!("unexpectedly converged: {converged:?}"),
        }
    }

    #[test]
    fn a_ready_swarm_whose_members_acknowledged_and_hold_their_slices_is_converged() {
        let Verdict::Converged(converged) = judge(&converged_observation()) else {
            panic!("expected convergence");
        };
        assert_eq!(converged.revision, 1);
        assert_eq!(converged.job_count(), 3);
        assert_eq!(
            converged.slices.keys().collect::<Vec<_>>(),
            ["worker-0", "worker-1"]
        );
    }

    #[test]
    fn a_member_that_acknowledged_another_slice_keeps_it_pending() {
        let mut observation = converged_observation();
        observation.acks.insert(
            "worker-1".to_owned(),
            Ack {
                revision: 1,
                hash: "sha256:other".to_owned(),
            },
        );
        assert!(pending_reason(&observation).contains("member worker-1 acknowledged"));
    }

    #[test]
    fn an_acknowledgement_the_status_does_not_report_yet_keeps_it_pending() {
        let mut observation = converged_observation();
        observation
            .reported_acks
            .insert("worker-0".to_owned(), None);
        assert!(
            pending_reason(&observation)
                .contains("reports worker-0's acknowledged revision as None")
        );
        observation.reported_acks.remove("worker-0");
        assert!(pending_reason(&observation).contains("worker-0"));
    }

    #[test]
    fn slices_missing_jobs_of_the_revision_are_not_converged() {
        // After a scale down, before the controller moved the departed member's jobs.
        let mut observation = converged_observation();
        observation.jobs = 5;
        assert!(
            pending_reason(&observation)
                .contains("slices hold 3 jobs, revision 1 of Swarm demo has 5")
        );
    }

    #[test]
    fn a_status_listing_other_members_than_the_pods_is_not_converged() {
        let mut observation = converged_observation();
        observation.pods.remove("worker-1");
        assert!(pending_reason(&observation).contains("status lists members"));
    }

    #[test]
    fn a_slice_file_that_differs_from_the_configmap_keeps_it_pending() {
        let mut observation = converged_observation();
        observation
            .files
            .insert("worker-0".to_owned(), Ok(slice("worker-0", 1, &["a"])));
        assert!(pending_reason(&observation).contains("worker-0's slice file holds 1 jobs"));
    }

    #[test]
    fn a_missing_slice_file_keeps_it_pending() {
        let mut observation = converged_observation();
        observation.files.remove("worker-1");
        assert!(pending_reason(&observation).contains("worker-1 has no slice file"));
    }

    #[test]
    fn a_new_pod_without_a_slice_keeps_it_pending() {
        let mut observation = converged_observation();
        observation.pods.insert("worker-2".to_owned());
        observation
            .reported_acks
            .insert("worker-2".to_owned(), None);
        assert!(pending_reason(&observation).contains("worker-2 has no slice ConfigMap"));
    }

    #[test]
    fn a_job_in_two_slices_is_never_converged() {
        let mut observation = converged_observation();
        let twice = slice("worker-1", 1, &["a", "c"]);
        observation.acks.insert(
            "worker-1".to_owned(),
            Ack {
                revision: 1,
                hash: twice.hash.clone(),
            },
        );
        observation
            .files
            .insert("worker-1".to_owned(), Ok(twice.clone()));
        observation.slices.insert("worker-1".to_owned(), Ok(twice));
        assert!(pending_reason(&observation).contains("job a is in the slices of both"));
    }

    #[test]
    fn a_pending_approval_or_a_swarm_not_ready_is_not_converged() {
        let mut awaiting = converged_observation();
        awaiting.pending_revision = Some(2);
        assert!(pending_reason(&awaiting).contains("revision 2 waiting for approval"));
        let mut progressing = converged_observation();
        progressing.phase = Some("Progressing".to_owned());
        assert!(pending_reason(&progressing).contains("is Progressing"));
    }
}
