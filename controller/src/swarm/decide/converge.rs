//! Convergence of the slice ConfigMaps in the cluster towards the target
//! revision: revoke, wait until every revoke is settled, grant, delete the
//! slices of members that left, restart (`reload: Restart`), and write the
//! index once everything is in place.
//!
//! # Decision instances in the slices
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
use crate::api::swarm::ReloadPolicy;

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

/// Parses a slice ConfigMap's text into jobs, or says what is wrong with it: what observe
/// keeps in [`super::Parsed::slices`].
pub fn parsed_slice(swarm: &str, member: &str, object: &SliceObject) -> Result<Slice, String> {
    if let Some(error) = &object.decode_error {
        return Err(format!("slice of {member}: {error}"));
    }
    let Some(text) = &object.text else {
        return Err(format!("slice ConfigMap of {member} has no slice.yaml"));
    };
    let slice = parse_slice(text).map_err(|error| format!("slice of {member}: {error}"))?;
    // `parse_slice` has checked the hash against the jobs and instances (a hand edit that
    // leaves them apart is its `HashMismatch`); hashing them again here would only double
    // the cost of every pass.
    if slice.swarm != swarm || slice.member != member {
        return Err(format!(
            "slice of {member} names swarm {} member {}",
            slice.swarm, slice.member
        ));
    }
    Ok(slice)
}

/// Every slice ConfigMap in the cluster, parsed, by member pod name.
pub(super) fn observed_slices(obs: &Observation) -> BTreeMap<String, Result<Slice, String>> {
    obs.slices
        .iter()
        .map(|(member, object)| {
            let slice = match obs.parsed.slices.get(member) {
                Some(parsed) => Result::clone(parsed),
                None => parsed_slice(&obs.swarm, member, object),
            };
            (member.clone(), slice)
        })
        .collect()
}

/// The writes this reconcile makes for the slices, as decided member by member.
#[derive(Default, Debug)]
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

/// Converges the slices towards `target`: each member's step decides its writes
/// ([`member_step`]), then the writes are ordered (revokes, then grants once every revoke
/// settled, then refreshes and deletions), restarts decided and the index written last.
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
    let mut writes = member_writes(
        obs,
        roster,
        observed,
        assignment,
        instances,
        (revision, current_revision),
    );
    let slice_problems = std::mem::take(&mut writes.slice_problems);
    let (written_for, refreshing) = convergence.schedule(obs, writes);
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

/// Every member's step, for the members of the target and every member holding a slice.
fn member_writes(
    obs: &Observation,
    roster: &Roster,
    observed: &BTreeMap<String, Result<Slice, String>>,
    assignment: &Assignment,
    instances: &BTreeMap<String, Vec<SliceInstance>>,
    (revision, current_revision): (u64, u64),
) -> SliceWrites {
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
    writes
}

impl Convergence {
    fn poll_soon(&mut self) {
        self.requeue_after = Some(
            self.requeue_after
                .map_or(ROLLOUT_POLL, |after| after.min(ROLLOUT_POLL)),
        );
    }

    /// Puts the members' writes in order: revokes; grants only once no revoke is
    /// unsettled (and not while a Restart rollout is paused), else only the refreshes of
    /// their instances; refreshes; deletions. Returns the pod each slice answers for, and
    /// whether any write changes instances only.
    fn schedule(
        &mut self,
        obs: &Observation,
        writes: SliceWrites,
    ) -> (BTreeMap<String, String>, bool) {
        let SliceWrites {
            revokes,
            grants,
            refreshes,
            deletes,
            unsettled,
            waiting_ready,
            mut written_for,
            slice_problems: _,
        } = writes;
        if !waiting_ready.is_empty() {
            self.rollout_done = false;
            self.poll_soon();
        }
        let slices_changing = !revokes.is_empty() || !grants.is_empty();
        self.operations.extend(revokes);
        // A paused Restart rollout grants nothing: a grant is a restart to come.
        let paused = obs.spec.paused && obs.spec.reload == ReloadPolicy::Restart;
        if unsettled.is_empty() && !paused {
            for (name, uid, grant, _) in grants {
                written_for.insert(name, uid);
                self.operations.push(grant);
            }
        } else if !grants.is_empty() {
            self.poll_soon();
            // The jobs wait; the instances need not.
            self.operations
                .extend(grants.into_iter().filter_map(|(_, _, _, refresh)| refresh));
        }
        let refreshing = !refreshes.is_empty()
            || self.operations.iter().any(|operation| {
                matches!(
                    operation,
                    Operation::WriteSlice {
                        instances_only: true,
                        ..
                    }
                )
            });
        self.operations.extend(refreshes);
        if slices_changing || !unsettled.is_empty() {
            self.rollout_done = false;
        }
        for name in deletes {
            let parts = obs
                .slices
                .get(&name)
                .map_or(1, |object| object.parts.max(1));
            self.operations.push(Operation::DeleteSlice {
                member: name,
                parts,
            });
        }
        (written_for, refreshing)
    }
}

/// What is wrong with a member's slice ConfigMap, in words: unreadable, changed by
/// another field manager (`editor`), or deleted after Shoal wrote it.
fn slice_problems(
    obs: &Observation,
    inputs: &MemberInputs<'_>,
    editor: Option<&str>,
) -> Vec<String> {
    let name = inputs.name;
    let mut problems = Vec::new();
    if let Err(problem) = &inputs.held {
        problems.push(problem.clone());
    }
    if let Some(editor) = editor {
        problems.push(format!(
            "slice ConfigMap {} of member {name} was changed by {editor}",
            shoal_core::names::slice_configmap(name)
        ));
    }
    if inputs.object.is_none() && inputs.target_jobs.is_some() && written_before(obs, name) {
        problems.push(format!(
            "slice ConfigMap {} of member {name} was deleted",
            shoal_core::names::slice_configmap(name)
        ));
    }
    problems
}

/// The field manager other than Shoal that changed any ConfigMap of the member's slice.
fn slice_editor<'a>(
    obs: &'a Observation,
    name: &str,
    object: Option<&SliceObject>,
) -> Option<&'a str> {
    (0..object.map_or(1, |object| object.parts.max(1))).find_map(|part| {
        obs.edited_config_maps
            .get(&shoal_core::names::slice_configmap_part(name, part))
            .map(String::as_str)
    })
}

/// For a member that left the pools: whether its step ends here (its pod is gone, or it
/// holds nothing), deleting its slice when the pod is gone. A slice of a pod gone without
/// a revoke keeps what it held from everyone else until the deletion is observed.
fn departed_step(inputs: &MemberInputs<'_>, held_jobs: &JobSet, writes: &mut SliceWrites) -> bool {
    let pod_gone = inputs.view.is_none_or(|view| view.pod.is_none());
    let holds_nothing = held_jobs.is_empty() && inputs.held.is_ok();
    if !pod_gone && !holds_nothing {
        return false;
    }
    if pod_gone {
        let name = inputs.name.to_owned();
        writes.deletes.push(name.clone());
        // A pod of this name (a scale back up) reads this slice the moment it starts, and
        // the member left without revoking (its pod was gone before the controller saw it
        // go): until the slice is gone, nothing it holds is granted to anyone else.
        if inputs.object.is_some() && !holds_nothing {
            writes.unsettled.push(name);
        }
    }
    true
}

/// The jobs of `held` that `want` keeps; `None` when it keeps them all (no revoke).
fn kept_jobs(held: &JobSet, want: &JobSet) -> Option<JobSet> {
    // Most members keep all they hold: that is answered without building a list, by one
    // walk over both sorted sets.
    if held.is_subset(want) {
        return None;
    }
    let keep: Vec<String> = held
        .iter()
        .filter(|key| want.contains(key.as_str()))
        .map(|key| key.as_str().to_owned())
        .collect();
    (keep.len() != held.len()).then(|| JobSet::parse(keep).unwrap_or_default())
}

/// The write that brings only the instances of a readable, unedited held slice up to
/// date, keeping its jobs, revision, phase and the pod it answers for (see the module
/// docs); `None` when its instances are already the target's.
fn instances_refresh(
    obs: &Observation,
    inputs: &MemberInputs<'_>,
    member_id: &MemberId,
    held: &Slice,
) -> Option<Operation> {
    let object = inputs.object;
    (held.instances != inputs.target_instances).then(|| Operation::WriteSlice {
        member: member_id.clone(),
        slice: slice_of(
            obs,
            inputs.name,
            held.revision,
            held.jobs.clone(),
            inputs.target_instances,
        ),
        written_for_uid: object
            .and_then(|object| object.written_for_uid.clone())
            .unwrap_or_default(),
        phase: match object.and_then(|object| object.phase.as_deref()) {
            Some("revoke") => "revoke",
            _ => "grant",
        },
        previous_parts: object.map_or(0, |object| object.parts),
        instances_only: true,
    })
}

/// Decides what one member's slice needs: a revoke, a grant, a refresh of its instances,
/// a deletion, or nothing; and whether an earlier revoke of it is still unsettled.
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
    let editor = slice_editor(obs, name, *object);
    writes
        .slice_problems
        .extend(slice_problems(obs, inputs, editor));
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
    if target_jobs.is_none() && departed_step(inputs, &held_jobs, writes) {
        return;
    }
    let previous_parts = object.map_or(0, |object| object.parts);
    if let Some(reduced) = kept_jobs(&held_jobs, want) {
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
    grant_step(obs, inputs, revision, (member_id, pod_uid), editor, writes);
}

/// The grant (or the refresh of its instances alone) a member whose held jobs the target
/// all keeps may need: nothing when its slice is already the target's; a refresh when only
/// its instances differ; a grant when its pod may take it, else a wait for its pod with
/// the refresh meanwhile. An edited slice is written back even when its jobs are the
/// target's, so that what the member reads is again what Shoal wrote.
fn grant_step(
    obs: &Observation,
    inputs: &MemberInputs<'_>,
    revision: u64,
    (member_id, pod_uid): (MemberId, String),
    editor: Option<&str>,
    writes: &mut SliceWrites,
) {
    let (name, target_instances) = (inputs.name, inputs.target_instances);
    let Some(want) = inputs.target_jobs else {
        return;
    };
    let held_slice = inputs.held.as_ref().ok().and_then(|slice| slice.as_ref());
    let trusted = held_slice.filter(|_| editor.is_none());
    // Already the target's slice. The held hash was checked against the held jobs and
    // instances when parsed, so the same jobs and instances are the same hash, found
    // without hashing every job of every member on every pass; only instances that differ
    // as written (not necessarily canonically) need the hash to tell.
    let in_place = trusted.is_some_and(|held| {
        held.jobs == *want
            && (held.instances == target_instances
                || held.hash == slice_hash(want, target_instances))
    });
    if in_place {
        return;
    }
    let refresh = trusted.and_then(|held| instances_refresh(obs, inputs, &member_id, held));
    if trusted.is_some_and(|held| held.jobs == *want) {
        // Only the instances changed: no grant, nothing to wait for.
        writes.refreshes.extend(refresh);
        return;
    }
    if !grantable(obs, inputs.view) {
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
            previous_parts: inputs.object.map_or(0, |object| object.parts),
            instances_only: false,
        },
        refresh,
    ));
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
    let previous_slices: BTreeMap<MemberId, &Slice> = observed
        .iter()
        .filter_map(|(name, slice)| {
            let slice = slice.as_ref().ok()?;
            Some((member_of_pod(&obs.pools, name), slice))
        })
        .collect();
    // A member whose jobs are unchanged keeps the revision of its slice; each slice is
    // built (and hashed) once.
    convergence.target_slices = assignment
        .member_jobs()
        .into_iter()
        .map(|(member, jobs)| {
            let pod = member.pod_name();
            let revision = previous_slices
                .get(&member)
                .filter(|previous| previous.jobs == jobs)
                .map_or(revision, |previous| previous.revision);
            let member_instances = instances.get(&pod).map_or(&[][..], Vec::as_slice);
            let slice = slice_of(obs, &pod, revision, jobs, member_instances);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observed::PodState;
    use crate::swarm::fixtures;
    use shoal_core::format::{Index, render_index};

    fn jobs(keys: &[&str]) -> JobSet {
        JobSet::parse(keys.iter().copied()).expect("valid keys")
    }

    fn slice_object(text: Option<String>) -> SliceObject {
        SliceObject {
            text,
            written_for_uid: Some("worker-1-uid".to_owned()),
            phase: Some("revoke".to_owned()),
            parts: 1,
            decode_error: None,
        }
    }

    fn departed<'a>(
        object: Option<&'a SliceObject>,
        view: Option<&'a MemberView>,
        held: Option<Slice>,
    ) -> MemberInputs<'a> {
        MemberInputs {
            name: "worker-1",
            view,
            target_jobs: None,
            target_instances: &[],
            object,
            held: Ok(held),
        }
    }

    #[test]
    fn a_target_that_keeps_every_held_job_revokes_nothing() {
        assert_eq!(kept_jobs(&jobs(&["a", "b"]), &jobs(&["a", "b", "c"])), None);
        assert_eq!(kept_jobs(&JobSet::default(), &jobs(&["a"])), None);
    }

    #[test]
    fn a_revoke_keeps_only_the_held_jobs_the_target_still_gives() {
        assert_eq!(
            kept_jobs(&jobs(&["a", "b", "c"]), &jobs(&["b", "d"])),
            Some(jobs(&["b"]))
        );
    }

    #[test]
    fn a_departed_member_whose_pod_is_gone_is_deleted_and_holds_its_jobs_until_then() {
        let object = slice_object(None);
        let held = Slice::new("demo", "worker-1", 3, jobs(&["a"]));
        let inputs = departed(Some(&object), None, Some(held.clone()));
        let mut writes = SliceWrites::default();
        assert!(departed_step(&inputs, &held.jobs, &mut writes));
        assert_eq!(writes.deletes, ["worker-1"]);
        assert_eq!(writes.unsettled, ["worker-1"]);
    }

    #[test]
    fn a_departed_member_holding_nothing_is_deleted_without_holding_anyone_back() {
        let object = slice_object(None);
        let inputs = departed(Some(&object), None, None);
        let mut writes = SliceWrites::default();
        assert!(departed_step(&inputs, &JobSet::default(), &mut writes));
        assert_eq!(writes.deletes, ["worker-1"]);
        assert!(writes.unsettled.is_empty());
    }

    #[test]
    fn a_departed_member_whose_pod_still_runs_its_jobs_goes_on_to_a_revoke() {
        let view = MemberView {
            id: MemberId::new("worker", 1),
            pod: Some(PodState {
                uid: "worker-1-uid".to_owned(),
                ready: true,
                deleting: true,
                ip: None,
                node: None,
            }),
            lease: None,
            unavailable_since: None,
            failed_over: false,
        };
        let held = Slice::new("demo", "worker-1", 3, jobs(&["a"]));
        let inputs = departed(None, Some(&view), Some(held.clone()));
        let mut writes = SliceWrites::default();
        assert!(!departed_step(&inputs, &held.jobs, &mut writes));
        assert!(writes.deletes.is_empty() && writes.unsettled.is_empty());
    }

    #[test]
    fn an_edited_or_unreadable_slice_is_named_as_a_problem() {
        let mut obs = fixtures::observation(
            "demo",
            fixtures::spec_with_jobs(vec!["a".to_owned()]),
            vec![fixtures::pool("worker", 2)],
        );
        obs.edited_config_maps
            .insert("worker-1-slice".to_owned(), "kubectl-edit".to_owned());
        let object = slice_object(Some("not a slice".to_owned()));
        let target = jobs(&["a"]);
        let inputs = MemberInputs {
            target_jobs: Some(&target),
            held: Err("slice of worker-1: no format".to_owned()),
            ..departed(Some(&object), None, None)
        };
        let editor = slice_editor(&obs, "worker-1", Some(&object));
        assert_eq!(editor, Some("kubectl-edit"));
        assert_eq!(
            slice_problems(&obs, &inputs, editor),
            [
                "slice of worker-1: no format",
                "slice ConfigMap worker-1-slice of member worker-1 was changed by kubectl-edit",
            ]
        );
    }

    #[test]
    fn a_refresh_keeps_the_held_jobs_revision_phase_and_pod() {
        let obs = fixtures::observation(
            "demo",
            fixtures::spec_with_jobs(vec!["a".to_owned()]),
            vec![fixtures::pool("worker", 2)],
        );
        let object = slice_object(None);
        let held = Slice::new("demo", "worker-1", 3, jobs(&["a"]));
        let inputs = departed(Some(&object), None, Some(held.clone()));
        // The held slice already has the target's (no) instances: nothing to refresh.
        let member = MemberId::new("worker", 1);
        assert_eq!(instances_refresh(&obs, &inputs, &member, &held), None);
        let with_instance = Slice {
            instances: vec![SliceInstance {
                name: "web-0".to_owned(),
                plan: "web".to_owned(),
                deployment: 1,
                applications: Vec::new(),
            }],
            ..held.clone()
        };
        let Some(Operation::WriteSlice {
            slice,
            written_for_uid,
            phase,
            instances_only,
            ..
        }) = instances_refresh(&obs, &inputs, &member, &with_instance)
        else {
            panic!("a slice holding an instance the target drops is refreshed");
        };
        assert_eq!((slice.revision, &slice.jobs), (3, &held.jobs));
        assert!(slice.instances.is_empty());
        assert_eq!(
            (written_for_uid.as_str(), phase, instances_only),
            ("worker-1-uid", "revoke", true)
        );
    }

    /// The target slices as `index` built them before it built each slice once: through
    /// `Assignment::slices_since`, then again with the instances.
    fn target_slices_as_before(
        obs: &Observation,
        observed: &BTreeMap<String, Result<Slice, String>>,
        assignment: &Assignment,
        revision: u64,
    ) -> BTreeMap<MemberId, Slice> {
        let previous: BTreeMap<MemberId, Slice> = observed
            .iter()
            .filter_map(|(name, slice)| {
                Some((
                    member_of_pod(&obs.pools, name),
                    slice.as_ref().ok()?.clone(),
                ))
            })
            .collect();
        assignment
            .slices_since(&previous, &obs.swarm, revision)
            .into_iter()
            .map(|(member, slice)| {
                let revision = previous
                    .get(&member)
                    .filter(|held| held.jobs == slice.jobs)
                    .map_or(slice.revision, |held| held.revision);
                let slice = slice_of(obs, &member.pod_name(), revision, slice.jobs, &[]);
                (member, slice)
            })
            .collect()
    }

    #[test]
    fn the_target_slices_keep_the_revision_of_unchanged_slices_exactly_as_before() {
        let obs = fixtures::observation(
            "demo",
            fixtures::spec_with_jobs(Vec::new()),
            vec![fixtures::pool("worker", 4)],
        );
        let member = |ordinal| MemberId::new("worker", ordinal);
        let assignment = Assignment::from_slices([
            (member(0), jobs(&["a", "b"])),
            (member(1), jobs(&["c"])),
            (member(2), jobs(&["d", "e"])),
            (member(3), JobSet::default()),
        ])
        .expect("disjoint slices");
        // worker-0 unchanged since revision 2, worker-1 changed, worker-2 new, worker-3
        // empty as before, worker-9 gone, plus an unreadable slice.
        let observed = BTreeMap::from([
            (
                "worker-0".to_owned(),
                Ok(Slice::new("demo", "worker-0", 2, jobs(&["a", "b"]))),
            ),
            (
                "worker-1".to_owned(),
                Ok(Slice::new("demo", "worker-1", 2, jobs(&["c", "x"]))),
            ),
            (
                "worker-3".to_owned(),
                Ok(Slice::new("demo", "worker-3", 1, JobSet::default())),
            ),
            (
                "worker-9".to_owned(),
                Ok(Slice::new("demo", "worker-9", 2, jobs(&["z"]))),
            ),
            (
                "worker-5".to_owned(),
                Err("slice of worker-5: no format".to_owned()),
            ),
        ]);
        let mut convergence = Convergence {
            operations: Vec::new(),
            rollout_done: false,
            requeue_after: None,
            slice_problems: Vec::new(),
            target_slices: BTreeMap::new(),
            jobs: 0,
            pools: None,
        };
        index(
            &obs,
            &observed,
            &assignment,
            5,
            &BTreeMap::new(),
            &mut convergence,
        );
        let before = target_slices_as_before(&obs, &observed, &assignment, 5);
        assert_eq!(convergence.target_slices, before);
        let revisions: Vec<u64> = before.values().map(|slice| slice.revision).collect();
        assert_eq!(revisions, [2, 5, 5, 1]);
    }

    #[test]
    fn an_index_is_full_while_it_fits_and_a_summary_past_the_limit_exactly_as_before() {
        let as_before = |slices: &BTreeMap<MemberId, Slice>| {
            let full = render_index(&Index::from_slices(slices, 3));
            (full.len() <= super::super::MAX_INDEX_BYTES).then_some(full)
        };
        for count in [10usize, 20_000, 60_000, 200_000] {
            let keys: Vec<String> = (0..count).map(|i| format!("stream:{i:08}")).collect();
            let halves = keys.split_at(count / 2);
            let slices = BTreeMap::from([
                (
                    MemberId::new("worker", 0),
                    Slice::new(
                        "demo",
                        "worker-0",
                        3,
                        jobs(&halves.0.iter().map(String::as_str).collect::<Vec<_>>()),
                    ),
                ),
                (
                    MemberId::new("worker", 1),
                    Slice::new(
                        "demo",
                        "worker-1",
                        3,
                        jobs(&halves.1.iter().map(String::as_str).collect::<Vec<_>>()),
                    ),
                ),
            ]);
            let text = index_text(&slices, 3);
            match as_before(&slices) {
                Some(full) => assert_eq!(text, full, "{count} jobs"),
                None => assert!(text.contains("summary: true"), "{count} jobs"),
            }
        }
    }
}
