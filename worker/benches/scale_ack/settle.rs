//! Waiting for a scale event (or the first rollout) to settle: the controller
//! reports a new revision in force on exactly the new number of Ready members,
//! and every member's Lease acknowledges the slice the status says it holds.

use std::collections::BTreeMap;
use std::time::Duration;

use shoal_controller::api::swarm::SwarmStatus;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::watches::{Acks, lock};

/// How long an event may take before the bench gives up.
const SETTLE_LIMIT: Duration = Duration::from_secs(900);

/// The revision in force and each member's slice hash (`None`: no slice).
#[derive(Clone, Default)]
pub struct Settled {
    pub revision: u64,
    pub slices: BTreeMap<String, Option<String>>,
}

impl Settled {
    /// Members whose slice differs from `earlier`'s: changed, added or removed.
    pub fn slices_changed_since(&self, earlier: &Settled) -> usize {
        let changed_or_added = self
            .slices
            .iter()
            .filter(|(member, hash)| earlier.slices.get(*member) != Some(*hash))
            .count();
        let removed = earlier
            .slices
            .keys()
            .filter(|member| !self.slices.contains_key(*member))
            .count();
        changed_or_added + removed
    }
}

/// Whether `status` reports a revision newer than `after` in force on exactly
/// `members` Ready members; otherwise what it says.
fn settled(status: Option<&SwarmStatus>, members: usize, after: u64) -> Result<Settled, String> {
    let Some(status) = status else {
        return Err("no status yet".to_owned());
    };
    let ready = format!("{members}/{members}");
    if status.phase.as_deref() != Some("Ready")
        || status.current_revision <= after
        || status.ready.as_deref() != Some(ready.as_str())
        || status.members.len() != members
    {
        return Err(format!(
            "phase {:?}, revision {}, ready {:?}, {} members",
            status.phase,
            status.current_revision,
            status.ready,
            status.members.len()
        ));
    }
    let slices = status
        .members
        .iter()
        .map(|member| (member.name.clone(), member.slice_hash.clone()))
        .collect();
    Ok(Settled {
        revision: status.current_revision,
        slices,
    })
}

/// Times of one settled event, from its start.
pub struct Measured {
    /// The revision in force, as the Swarm watch delivered it.
    pub in_force: Duration,
    /// The last member's acknowledgement, as the Lease watch delivered it.
    pub all_acked: Duration,
    pub settled: Settled,
    /// When the bench saw it done.
    pub done: Instant,
}

/// The latest acknowledgement of the slices `settled` names, if every member's
/// Lease acknowledges its slice; otherwise how many do not.
fn last_ack(acks: &Acks, settled: &Settled, started: Instant) -> Result<Instant, usize> {
    let log = lock(&acks.log);
    let mut last = started;
    let mut waiting = 0;
    for (member, hash) in &settled.slices {
        match hash {
            None => {}
            Some(hash) => match log.acked_at(member, hash, started) {
                Some(at) => last = last.max(at),
                None => waiting += 1,
            },
        }
    }
    if waiting == 0 { Ok(last) } else { Err(waiting) }
}

/// Waits until the Swarm settles at `members` after revision `after` and every
/// member acknowledges the slice it holds.
pub async fn until_acked(
    swarm: &mut watch::Receiver<Option<SwarmStatus>>,
    acks: &Acks,
    members: usize,
    after: u64,
    started: Instant,
) -> Measured {
    let mut in_force = None;
    loop {
        let acks_changed = acks.changed.notified();
        let last_seen = match settled(swarm.borrow_and_update().as_ref(), members, after) {
            Err(seen) => seen,
            Ok(settled) => {
                let in_force = *in_force.get_or_insert_with(|| started.elapsed());
                match last_ack(acks, &settled, started) {
                    Ok(last) => {
                        return Measured {
                            in_force,
                            all_acked: last.duration_since(started),
                            settled,
                            done: Instant::now(),
                        };
                    }
                    Err(waiting) => format!(
                        "revision {} in force, {waiting} members not acknowledged",
                        settled.revision
                    ),
                }
            }
        };
        assert!(
            started.elapsed() < SETTLE_LIMIT,
            "{members} members not settled and acknowledged after {SETTLE_LIMIT:?}; last saw: {last_seen}"
        );
        tokio::select! {
            _ = swarm.changed() => {}
            _ = acks_changed => {}
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}
