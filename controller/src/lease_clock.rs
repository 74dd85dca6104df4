//! The controller's own measure of member Lease liveness.
//!
//! A member Lease says when it was renewed and for how long, but anyone who
//! can write it can say anything: a `renewTime` moved back would make a live
//! member look expired, and its jobs would be granted elsewhere while it still
//! runs them. So the controller believes only what it sees: a Lease is
//! renewed when it *changes* (a new `resourceVersion`), and it is expired
//! when it has not changed for its duration by the controller's clock. Any
//! write, honest or not, can only make a member look more alive, which delays
//! a handoff but never makes two owners. The duration used is the longest the
//! controller saw for that pod, so shortening it by hand does not help either.
//!
//! The measure lives in memory: a controller that restarts (or a new leader)
//! starts every Lease's measure afresh, which only ever waits longer.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use jiff::{SignedDuration, Timestamp};

use crate::observed::LeaseState;

/// How long an entry of a Lease no longer observed is kept.
const FORGET_AFTER: SignedDuration = SignedDuration::from_hours(1);

#[derive(Debug, Clone)]
struct Seen {
    version: String,
    since: Timestamp,
    renew_time: Option<Timestamp>,
    pod_uid: Option<String>,
    longest: Option<i64>,
    touched: Timestamp,
}

/// Per member Lease: the version last seen, since when, and the longest duration seen.
#[derive(Debug, Default)]
pub struct LeaseClock {
    seen: Mutex<HashMap<String, Seen>>,
}

impl LeaseClock {
    /// An empty clock: every Lease is measured from its first observation.
    pub fn new() -> LeaseClock {
        LeaseClock::default()
    }

    /// Fills `unchanged_since` and the longest `duration_seconds` of the member Leases of
    /// one namespace (by pod name), observed at `now`. Returns a Warning note for each
    /// Lease newly seen saying something that cannot be true (a renewal earlier than one
    /// already seen, a holder that is not the pod).
    pub fn stamp(
        &self,
        namespace: &str,
        leases: &mut BTreeMap<String, LeaseState>,
        now: Timestamp,
    ) -> Vec<String> {
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        seen.retain(|_, entry| entry.touched + FORGET_AFTER > now);
        let mut suspicious = Vec::new();
        for (pod, lease) in leases.iter_mut() {
            let key = format!("{namespace}/{pod}");
            let previous = seen.get(&key).cloned();
            let same_pod = previous
                .as_ref()
                .is_some_and(|previous| previous.pod_uid == lease.pod_uid);
            let changed = previous
                .as_ref()
                .is_none_or(|previous| previous.version != lease.version);
            if changed
                && let Some(note) =
                    suspicious_change(pod, previous.as_ref().filter(|_| same_pod), lease)
            {
                suspicious.push(note);
            }
            let since = match &previous {
                Some(previous) if !changed => previous.since,
                _ => now,
            };
            let longest = match (&previous, lease.duration_seconds) {
                (Some(previous), current) if same_pod => previous.longest.max(current),
                (_, current) => current,
            };
            seen.insert(
                key,
                Seen {
                    version: lease.version.clone(),
                    since,
                    // A renewal moved back is not remembered as the latest one.
                    renew_time: previous
                        .as_ref()
                        .filter(|_| same_pod)
                        .and_then(|previous| previous.renew_time)
                        .max(lease.renew_time),
                    pod_uid: lease.pod_uid.clone(),
                    longest,
                    touched: now,
                },
            );
            lease.unchanged_since = Some(since);
            lease.duration_seconds = longest;
        }
        suspicious
    }
}

/// What is wrong with a new version of a Lease, if anything.
fn suspicious_change(pod: &str, previous: Option<&Seen>, lease: &LeaseState) -> Option<String> {
    let lease_name = shoal_core::names::member_lease(pod);
    if lease.holder.as_deref() != Some(pod) {
        return Some(format!(
            "Lease {lease_name} is held by {:?}, not by pod {pod}: its acknowledgements are ignored (was it written by hand?)",
            lease.holder.as_deref().unwrap_or("nobody")
        ));
    }
    let earlier = previous?.renew_time?;
    let renewed = lease.renew_time?;
    (renewed < earlier).then(|| {
        format!(
            "Lease {lease_name} says it was renewed at {renewed}, before the renewal at {earlier} already seen: renewTime is not trusted, liveness is measured on the controller's clock"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn lease(version: &str, renewed: i64, duration: i64) -> LeaseState {
        LeaseState {
            holder: Some("worker-0".to_owned()),
            pod_uid: Some("uid-a".to_owned()),
            renew_time: Some(t(renewed)),
            duration_seconds: Some(duration),
            version: version.to_owned(),
            ..LeaseState::default()
        }
    }

    fn stamp(clock: &LeaseClock, lease: LeaseState, now: i64) -> (LeaseState, Vec<String>) {
        let mut leases = BTreeMap::from([("worker-0".to_owned(), lease)]);
        let notes = clock.stamp("ns", &mut leases, t(now));
        (leases.remove("worker-0").unwrap(), notes)
    }

    #[test]
    fn a_lease_is_expired_only_after_not_changing_for_its_duration_by_the_controllers_clock() {
        let clock = LeaseClock::new();
        let (seen, _) = stamp(&clock, lease("1", 0, 10), 100);
        assert_eq!(
            seen.unchanged_since,
            Some(t(100)),
            "first seen now, whatever renewTime says"
        );
        let (same, _) = stamp(&clock, lease("1", 0, 10), 109);
        assert!(!same.expired(t(109)));
        let (same, _) = stamp(&clock, lease("1", 0, 10), 111);
        assert!(same.expired(t(111)));
        let (renewed, _) = stamp(&clock, lease("2", 5, 10), 112);
        assert!(!renewed.expired(t(112)));
    }

    #[test]
    fn a_renew_time_moved_back_is_reported_and_does_not_make_a_live_member_expired() {
        let clock = LeaseClock::new();
        stamp(&clock, lease("1", 100, 10), 100);
        let (forged, notes) = stamp(&clock, lease("2", -3600, 10), 101);
        assert!(
            !forged.expired(t(105)),
            "a write is a sign of life, not of death"
        );
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("before the renewal"), "{}", notes[0]);
        // Reported once per version.
        let (_, again) = stamp(&clock, lease("2", -3600, 10), 102);
        assert!(again.is_empty());
    }

    #[test]
    fn a_duration_shortened_by_hand_does_not_expire_a_member_sooner() {
        let clock = LeaseClock::new();
        stamp(&clock, lease("1", 0, 30), 0);
        let (shortened, _) = stamp(&clock, lease("2", 1, 1), 1);
        assert_eq!(shortened.duration_seconds, Some(30));
        assert!(!shortened.expired(t(10)));
    }

    #[test]
    fn a_lease_held_by_another_identity_is_reported() {
        let clock = LeaseClock::new();
        let mut forged = lease("1", 0, 10);
        forged.holder = Some("intruder".to_owned());
        let (_, notes) = stamp(&clock, forged, 0);
        assert!(notes[0].contains("held by \"intruder\""), "{notes:?}");
    }
}
