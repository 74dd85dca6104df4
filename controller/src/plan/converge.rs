//! Convergence of the slice ConfigMaps in the cluster towards the target
//! revision: revoke, wait until every revoke is settled, grant, delete the
//! slices of members that left, restart (`reload: Restart`), and write the
//! index once everything is in place.
//!
//! # Plan instances in the slices
//!
//! Every slice this module writes carries the member's plan instances (see
//! `instances`), so a revoke or a grant also brings the instances up to date.
//! A change of instances alone is not a Swarm revision (the plan's own gate
//! approved it; the Swarm's gate is about jobs): the member's slice is
//! *refreshed*, written with its jobs and its `revision` as they are, the new
//! instances and so a new hash, and its `shoal.dev/phase` and
//! `shoal.dev/written-for-uid` annotations as they are (`instances_only`: no
//! pod is made to answer for the write, and nothing is restarted). A refresh
//! neither waits for revokes to settle nor for the pod to be Ready, and does
//! not count as a rollout step. The acknowledgement protocol is unchanged: a
//! sidecar acknowledges the (revision, hash) it applied, so an
//! acknowledgement still means exactly what was written (a revoked slice
//! refreshed before its acknowledgement settles only once the new hash is
//! acknowledged). A slice that is unreadable, edited by hand or missing is
//! not refreshed: it is written whole when granting is safe, as before.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use shoal_core::format::parse_slice;
use shoal_core::slice::{SliceInstance, slice_hash};
use shoal_core::{Assignment, JobSet, MemberId, Slice};

use super::members::{MemberView, Roster, member_of_pod, members_leaving};
use super::pool_rollout::{self, PoolDecision, PoolInputs};
use super::{Observation, Operation, SliceObject, index_text, previous_condition};
use crate::crd::ReloadPolicy;

/// How soon to look again while a rollout waits for something in the cluster.
const ROLLOUT_POLL: Duration = Duration::from_secs(2);

/// What converging towards the target needs.
pub(super) struct Convergence {
    /// Slice writes and deletions, evictions, the index.
    pub operations: Vec<Operation>,
    /// Every slice is the target's, every revoke settled, every restart done.
    pub rollout_done: bool,
    /// When to look again.
    pub requeue_after: Option<Duration>,
    /// Slices found damaged or deleted (and being put back).
    pub slice_problems: Vec<String>,
    /// The target's slices (unchanged slices keep their revision).
    pub target_slices: BTreeMap<MemberId, Slice>,
    /// Jobs in the target revision.
    pub jobs: u64,
    /// Restart policy: which pool may be restarted, and `status.rollout`.
    pub pools: Option<PoolDecision>,
}

/// Parses a slice ConfigMap's text into jobs, or says what is wrong with it.
pub(super) fn parse_observed(
    swarm: &str,
    member: &str,
    object: &SliceObject,
) -> Result<Slice, String> {
    if let Some(error) = &object.decode_error {
        return Err(format!("slice of {member}: {error}"));
    }
    let Some(text) = &object.text else {
        return Err(format!("slice ConfigMap of {member} has no slice.yaml"));
    };
    let slice = parse_slice(text).map_err(|error| format!("slice of {member}: {error}"))?;
    if slice.swarm != swarm || slice.member != member {
        return Err(format!(
            "slice of {member} names swarm {} member {}",
            slice.swarm, slice.member
        ));
    }
    if slice_hash(&slice.jobs, &slice.instances) != slice.hash {
        return Err(format!(
            "slice of {member}: hash does not match its jobs and instances (edited by hand?)"
        ));
    }
    Ok(slice)
}

/// Every slice ConfigMap in the cluster, parsed, by member pod name.
pub(super) fn observed_slices(obs: &Observation) -> BTreeMap<String, Result<Slice, String>> {
    obs.slices
        .iter()
        .map(|(member, object)| (member.clone(), parse_observed(&obs.swarm, member, object)))
        .collect()
}

/// The writes this reconcile makes for the slices, as decided member by member.
#[derive(Default)]
struct SliceWrites {
    revokes: Vec<Operation>,
    /// Grants: member, pod uid, the write, and the refresh of its instances to make
    /// instead while the grant waits for revokes to settle.
    grants: Vec<(String, String, Operation, Option<Operation>)>,
    /// Writes that change only the instances of a slice (see the module docs).
    refreshes: Vec<Operation>,
    deletes: Vec<String>,
    /// Members whose revoke is not settled yet (including revokes written now).
    unsettled: Vec<String>,
    /// Members whose grant waits for their pod to be Ready.
    waiting_ready: Vec<String>,
    /// Uid of the pod each slice was (or is now being) written for.
    written_for: BTreeMap<String, String>,
    slice_problems: Vec<String>,
}

/// Everything one member's step looks at.
struct MemberInputs<'a> {
    name: &'a str,
    view: Option<&'a MemberView>,
    target_jobs: Option<&'a JobSet>,
    /// The member's plan instances (none for a member that left the pools).
    target_instances: &'a [SliceInstance],
    object: Option<&'a SliceObject>,
    held: Result<Option<Slice>, String>,
}

/// Converges the slices towards `target`.
pub(super) fn converge(
    obs: &Observation,
    roster: &Roster,
    observed: &BTreeMap<String, Result<Slice, String>>,
    target: Option<&(u64, Assignment)>,
    current_revision: u64,
    instances: &BTreeMap<String, Vec<SliceInstance>>,
    progress_deadline: Option<Duration>,
) -> Convergence {
    let mut convergence = Convergence {
        operations: Vec::new(),
        rollout_done: true,
        requeue_after: roster.next_deadline,
        slice_problems: Vec::new(),
        target_slices: BTreeMap::new(),
        jobs: 0,
        pools: None,
    };
    let Some((revision, assignment)) = target else {
        return convergence;
    };
    let revision = *revision;
    let by_name = roster.by_name();
    let member_jobs = assignment.member_jobs();
    let target_jobs: BTreeMap<String, &JobSet> = member_jobs
        .iter()
        .map(|(member, jobs)| (member.pod_name(), jobs))
        .collect();
    let names: BTreeSet<String> = target_jobs
        .keys()
        .cloned()
        .chain(observed.keys().cloned())
        .collect();
    // Members that left the pools (scaled down) but whose pod still exists, terminating or
    // not: until the pod is gone it may still run its jobs, so they are revoked and must
    // settle like any other revoke before anyone else is granted them.
    let leaving: BTreeMap<String, MemberView> = members_leaving(obs, &by_name);
    let mut writes = SliceWrites::default();
    for name in &names {
        let inputs = MemberInputs {
            name,
            view: by_name.get(name).copied().or_else(|| leaving.get(name)),
            target_jobs: target_jobs.get(name).copied(),
            target_instances: match target_jobs.get(name) {
                Some(_) => instances.get(name).map_or(&[], Vec::as_slice),
                None => &[],
            },
            object: obs.slices.get(name),
            held: match observed.get(name) {
                None => Ok(None),
                Some(Ok(slice)) => Ok(Some(slice.clone())),
                Some(Err(problem)) => Err(problem.clone()),
            },
        };
        member_step(obs, &inputs, revision, current_revision, &mut writes);
    }
    let SliceWrites {
        revokes,
        grants,
        refreshes,
        deletes,
        unsettled,
        waiting_ready,
        mut written_for,
        slice_problems,
    } = writes;
    if !waiting_ready.is_empty() {
        convergence.rollout_done = false;
        convergence.poll_soon();
    }
    let slices_changing = !revokes.is_empty() || !grants.is_empty();
    convergence.operations.extend(revokes);
    // A paused Restart rollout grants nothing: a grant is a restart to come.
    let paused = obs.spec.paused && obs.spec.reload == ReloadPolicy::Restart;
    if unsettled.is_empty() && !paused {
        for (name, uid, grant, _) in grants {
            written_for.insert(name, uid);
            convergence.operations.push(grant);
        }
    } else if !grants.is_empty() {
        convergence.poll_soon();
        // The jobs wait; the instances need not.
        convergence
            .operations
            .extend(grants.into_iter().filter_map(|(_, _, _, refresh)| refresh));
    }
    let refreshing = !refreshes.is_empty()
        || convergence.operations.iter().any(|operation| {
            matches!(
                operation,
                Operation::WriteSlice {
                    instances_only: true,
                    ..
                }
            )
        });
    convergence.operations.extend(refreshes);
    if slices_changing || !unsettled.is_empty() {
        convergence.rollout_done = false;
    }
    for name in deletes {
        let parts = obs
            .slices
            .get(&name)
            .map_or(1, |object| object.parts.max(1));
        convergence.operations.push(Operation::DeleteSlice {
            member: name,
            parts,
        });
    }
    if obs.spec.reload == ReloadPolicy::Restart {
        let pools = restarts(
            obs,
            roster,
            &written_for,
            (revision, observed, progress_deadline),
            &mut convergence,
        );
        convergence.pools = Some(pools);
    }
    index(
        obs,
        observed,
        assignment,
        revision,
        instances,
        &mut convergence,
    );
    if refreshing {
        // The index goes after the slices it describes (in the next pass; the slice
        // writes wake the Swarm), never in the same pass as a slice write.
        convergence
            .operations
            .retain(|operation| !matches!(operation, Operation::WriteIndex { .. }));
    }
    convergence.slice_problems = slice_problems;
    convergence.jobs = assignment.jobs().len() as u64;
    convergence
}

impl Convergence {
    fn poll_soon(&mut self) {
        self.requeue_after = Some(
            self.requeue_after
                .map_or(ROLLOUT_POLL, |after| after.min(ROLLOUT_POLL)),
        );
    }
}

/// Decides what one member's slice needs: a revoke, a grant, a deletion, or nothing;
/// and whether an earlier revoke of it is still unsettled.
fn member_step(
    obs: &Observation,
    inputs: &MemberInputs<'_>,
    revision: u64,
    current_revision: u64,
    writes: &mut SliceWrites,
) {
    let MemberInputs {
        name,
        view,
        target_jobs,
        target_instances,
        object,
        held,
    } = inputs;
    let name = *name;
    if let Err(problem) = held {
        writes.slice_problems.push(problem.clone());
    }
    let edited_by = (0..object.map_or(1, |object| object.parts.max(1))).find_map(|part| {
        obs.edited_config_maps
            .get(&shoal_core::names::slice_configmap_part(name, part))
    });
    if let Some(editor) = edited_by {
        writes.slice_problems.push(format!(
            "slice ConfigMap {} of member {name} was changed by {editor}",
            shoal_core::names::slice_configmap(name)
        ));
    }
    if object.is_none() && target_jobs.is_some() && written_before(obs, name) {
        writes.slice_problems.push(format!(
            "slice ConfigMap {} of member {name} was deleted",
            shoal_core::names::slice_configmap(name)
        ));
    }
    let pod_uid = view
        .and_then(|view| view.pod.as_ref())
        .map(|pod| pod.uid.clone())
        .unwrap_or_default();
    let empty = JobSet::default();
    let want = target_jobs.unwrap_or(&empty);
    let held_slice = held.as_ref().ok().and_then(|slice| slice.as_ref());
    // An unreadable slice is treated as empty; it is rewritten when granting is safe.
    let held_jobs = held_slice.map_or_else(JobSet::default, |slice| slice.jobs.clone());
    if let Some(object) = object {
        writes.written_for.insert(
            name.to_owned(),
            object.written_for_uid.clone().unwrap_or_default(),
        );
    }
    let member_id = view.map_or_else(|| member_of_pod(&obs.pools, name), |view| view.id.clone());
    if revoke_outstanding(obs, *view, *object, held_slice, revision, current_revision) {
        writes.unsettled.push(name.to_owned());
    }
    if target_jobs.is_none() {
        // The member left the pools.
        let pod_gone = view.is_none_or(|view| view.pod.is_none());
        if pod_gone || held_jobs.is_empty() && held.is_ok() {
            if pod_gone {
                writes.deletes.push(name.to_owned());
                // A pod of this name (a scale back up) reads this slice the moment it
                // starts, and the member left without revoking (its pod was gone before
                // the controller saw it go): until the slice is gone, nothing it holds is
                // granted to anyone else.
                if object.is_some() && !(held_jobs.is_empty() && held.is_ok()) {
                    writes.unsettled.push(name.to_owned());
                }
            }
            return;
        }
    }
    let previous_parts = object.map_or(0, |object| object.parts);
    let keep: Vec<String> = held_jobs
        .iter()
        .filter(|key| want.contains(key.as_str()))
        .map(|key| key.as_str().to_owned())
        .collect();
    if keep.len() != held_jobs.len() {
        let reduced = JobSet::parse(keep).unwrap_or_default();
        let slice = slice_of(obs, name, revision, reduced, target_instances);
        writes.written_for.insert(name.to_owned(), pod_uid.clone());
        writes.revokes.push(Operation::WriteSlice {
            member: member_id,
            slice,
            written_for_uid: pod_uid,
            phase: "revoke",
            previous_parts,
            instances_only: false,
        });
        writes.unsettled.push(name.to_owned());
        return;
    }
    // An edited slice is written back even when its jobs are the target's, so that what
    // the member reads is again what Shoal wrote.
    let held_hash = held_slice
        .map(|slice| slice.hash.as_str())
        .filter(|_| edited_by.is_none());
    if target_jobs.is_some() && held_hash != Some(slice_hash(want, target_instances).as_str()) {
        // Set only when the held slice is readable, unedited and its instances differ.
        let refresh = held_slice
            .filter(|held| held_hash.is_some() && held.instances != *target_instances)
            .map(|held| Operation::WriteSlice {
                member: member_id.clone(),
                slice: slice_of(
                    obs,
                    name,
                    held.revision,
                    held.jobs.clone(),
                    target_instances,
                ),
                written_for_uid: object
                    .and_then(|object| object.written_for_uid.clone())
                    .unwrap_or_default(),
                phase: match object.and_then(|object| object.phase.as_deref()) {
                    Some("revoke") => "revoke",
                    _ => "grant",
                },
                previous_parts,
                instances_only: true,
            });
        if held_hash.is_some() && held_jobs == *want {
            // Only the instances changed: no grant, nothing to wait for.
            writes.refreshes.extend(refresh);
            return;
        }
        if !grantable(obs, *view) {
            writes.waiting_ready.push(name.to_owned());
            writes.refreshes.extend(refresh);
            return;
        }
        let slice = slice_of(obs, name, revision, want.clone(), target_instances);
        writes.grants.push((
            name.to_owned(),
            pod_uid.clone(),
            Operation::WriteSlice {
                member: member_id,
                slice,
                written_for_uid: pod_uid,
                phase: "grant",
                previous_parts,
                instances_only: false,
            },
            refresh,
        ));
    }
}

/// The slice of `member` at `revision` with `jobs` and `instances`. The instances come
/// checked from `instances::deliveries` (each valid, one per name), so they always fit;
/// were they ever refused, the slice goes without them rather than not at all.
fn slice_of(
    obs: &Observation,
    member: &str,
    revision: u64,
    jobs: JobSet,
    instances: &[SliceInstance],
) -> Slice {
    let slice = Slice::new(obs.swarm.clone(), member.to_owned(), revision, jobs);
    if instances.is_empty() {
        return slice;
    }
    slice
        .clone()
        .with_instances(instances.to_vec())
        .unwrap_or(slice)
}

/// Whether a member may be granted jobs now: its pod exists and is Ready (and its Lease,
/// if any, live), so that work is not handed to a pod that cannot run it; a member that
/// stays unready is failed over after `failover.after`. (Under `Restart` this also makes
/// the restarts exactly those `restarts::planned_restarts` counts: a grant is always
/// written for a running pod, which is then restarted once to pick it up.)
fn grantable(obs: &Observation, view: Option<&MemberView>) -> bool {
    view.is_some_and(|view| view.pod.is_some() && view.available(obs.now))
}

/// A slice written before (the last status lists its hash, and the Swarm was Ready).
fn written_before(obs: &Observation, name: &str) -> bool {
    let previous = &obs.status;
    previous_condition(previous, "Ready").is_some_and(|ready| ready.status == "True")
        && previous
            .members
            .iter()
            .any(|member| member.name == name && member.slice_hash.is_some())
}

/// Whether a revoke of this member's slice must still settle before anything is granted.
///
/// Slices revoked by this rollout (or by the one it superseded) must be settled before
/// anything is granted. With a sidecar (a Lease), and under `Restart` with or without
/// one, so must any older revoke: once a newer revision is approved, `current_revision`
/// moves past revokes that may still be in flight (under `Restart`, an eviction held back
/// by the budget or a PodDisruptionBudget), and a settled revoke stays settled (an
/// acknowledgement stays, a replaced pod stays replaced), so checking it costs nothing.
fn revoke_outstanding(
    obs: &Observation,
    view: Option<&MemberView>,
    object: Option<&SliceObject>,
    held: Option<&Slice>,
    revision: u64,
    current_revision: u64,
) -> bool {
    let has_lease = view.is_some_and(|view| view.lease.is_some());
    let restart = obs.spec.reload == ReloadPolicy::Restart;
    let revoked_here = object.is_some_and(|object| object.phase.as_deref() == Some("revoke"))
        && held.is_some_and(|slice| {
            slice.revision >= current_revision.min(revision) || has_lease || restart
        });
    let Some(view) = view else { return false };
    revoked_here
        && !settled(
            view,
            held.map(|slice| (slice.revision, slice.hash.as_str())),
            object.and_then(|object| object.written_for_uid.as_deref()),
            obs.spec.reload,
            obs.now,
        )
}

/// Whether a member has let go of what its revoked slice (revision, hash) took away:
///
/// * its pod is gone, or is not the pod that was running when the revoke was written
///   (a replacement starts with the reduced slice; `apply` re-points the slice at a pod
///   found in place right after the write, so a pod that may have read the slice before
///   the revoke is never taken for a replacement);
/// * with `Restart`, nothing else: the application read its share when the pod started
///   and keeps it until the pod is replaced. Neither its sidecar's acknowledgement, nor an
///   expired Lease (a fenced sidecar stops only what it runs itself, not an application
///   that read the share at start-up), nor a failover (a NotReady pod may still run its
///   application) is enough;
/// * with `HotReload`, its Lease has not changed for its whole duration (the sidecar
///   fenced itself and stopped everything before that), or its own sidecar acknowledged
///   exactly this slice; without a sidecar (no Lease), pod readiness stands in for an
///   acknowledgement, and a member failed over is taken to run nothing.
fn settled(
    view: &MemberView,
    revoked: Option<(u64, &str)>,
    written_for_uid: Option<&str>,
    reload: ReloadPolicy,
    now: Timestamp,
) -> bool {
    let Some(pod) = &view.pod else { return true };
    if written_for_uid.is_some_and(|uid| uid != pod.uid) {
        return true;
    }
    if reload == ReloadPolicy::Restart {
        return false;
    }
    let Some(lease) = &view.lease else {
        return view.failed_over || pod.ready && !pod.deleting;
    };
    if lease.expired(now) {
        return true;
    }
    revoked
        .is_some_and(|(revision, hash)| lease.acknowledges(&view.name(), &pod.uid, revision, hash))
}

/// Restarts (`reload: Restart`): the pod that was running when its slice was written is
/// evicted, one pool at a time (`pool_rollout`), at most `rollout.maxUnavailable` members
/// unavailable at a time.
fn restarts(
    obs: &Observation,
    roster: &Roster,
    written_for: &BTreeMap<String, String>,
    (revision, observed, deadline): (
        u64,
        &BTreeMap<String, Result<Slice, String>>,
        Option<Duration>,
    ),
    convergence: &mut Convergence,
) -> PoolDecision {
    let needs_restart: BTreeSet<String> = roster
        .views
        .iter()
        .filter(|view| {
            view.pod.as_ref().is_some_and(|pod| {
                !pod.deleting
                    && written_for
                        .get(&view.name())
                        .is_some_and(|uid| !uid.is_empty() && uid == &pod.uid)
            })
        })
        .map(MemberView::name)
        .collect();
    let pools = pool_rollout::decide(
        obs,
        roster,
        &PoolInputs {
            revision,
            needs_restart: &needs_restart,
            observed,
            deadline,
        },
    );
    let unavailable_now = roster
        .views
        .iter()
        .filter(|view| !view.failed_over && !view.available(obs.now))
        .count();
    let mut budget =
        (obs.spec.rollout.max_unavailable.max(1) as usize).saturating_sub(unavailable_now);
    for view in &roster.views {
        let Some(pod) = &view.pod else { continue };
        if !needs_restart.contains(&view.name()) {
            continue;
        }
        convergence.rollout_done = false;
        if pools.holds_everything() {
            continue;
        }
        // A failed-over member is down already: restarting it to drop what it may still
        // run costs no availability, so it waits neither for the budget nor for its
        // pool's turn (its revoke must settle before any grant).
        if view.failed_over {
            convergence.operations.push(Operation::Evict {
                pod: view.name(),
                uid: pod.uid.clone(),
            });
        } else if budget > 0 && pod.ready && pools.may_restart(&view.id.pool) {
            budget -= 1;
            convergence.operations.push(Operation::Evict {
                pod: view.name(),
                uid: pod.uid.clone(),
            });
        }
    }
    if !convergence.rollout_done {
        convergence.poll_soon();
    }
    pools
}

/// The target's slices (with their instances; a slice whose jobs are unchanged keeps its
/// revision), and the index once every slice is in place.
fn index(
    obs: &Observation,
    observed: &BTreeMap<String, Result<Slice, String>>,
    assignment: &Assignment,
    revision: u64,
    instances: &BTreeMap<String, Vec<SliceInstance>>,
    convergence: &mut Convergence,
) {
    let previous_slices: BTreeMap<MemberId, Slice> = observed
        .iter()
        .filter_map(|(name, slice)| {
            let slice = slice.as_ref().ok()?;
            Some((member_of_pod(&obs.pools, name), slice.clone()))
        })
        .collect();
    convergence.target_slices = assignment
        .slices_since(&previous_slices, &obs.swarm, revision)
        .into_iter()
        .map(|(member, slice)| {
            let pod = member.pod_name();
            let revision = previous_slices
                .get(&member)
                .filter(|previous| previous.jobs == slice.jobs)
                .map_or(slice.revision, |previous| previous.revision);
            let member_instances = instances.get(&pod).map_or(&[][..], Vec::as_slice);
            let slice = slice_of(obs, &pod, revision, slice.jobs, member_instances);
            (member, slice)
        })
        .collect();
    if convergence.rollout_done {
        let text = index_text(&convergence.target_slices, revision);
        if obs.index.as_deref() != Some(text.as_str()) {
            convergence.operations.push(Operation::WriteIndex { text });
        }
    }
}
