//! Request statistics: how many resource requests each user made, by verb and
//! resource, how many request body bytes they sent and how many response body bytes
//! they were answered. Benchmarks read them to
//! tell what a client (the controller, the sidecars) costs the API server per
//! event; see [`RequestStats`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// What a tally counts: one user's requests with one verb on one resource.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestKey {
    /// The user as authenticated (after impersonation), e.g. `shoal-controller`.
    pub user: String,
    /// The Kubernetes verb: get, list, watch, create, update, patch, delete,
    /// deletecollection.
    pub verb: String,
    /// Plural resource, with its subresource: `configmaps`, `swarms/status`.
    pub resource: String,
}

/// Requests and the bytes of their bodies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestTally {
    /// How many requests.
    pub requests: u64,
    /// Their request bodies' bytes, as sent (a get, list or watch has none).
    pub body_bytes: u64,
    /// The bytes of the JSON bodies the server answered them with (a watch's events are
    /// not counted; an error's Status is).
    pub response_bytes: u64,
}

impl RequestTally {
    fn add(&mut self, other: RequestTally) {
        self.requests += other.requests;
        self.body_bytes += other.body_bytes;
        self.response_bytes += other.response_bytes;
    }
}

/// A snapshot of the tallies, or the difference of two snapshots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestCounts {
    tallies: BTreeMap<RequestKey, RequestTally>,
}

impl RequestCounts {
    /// Every tally, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&RequestKey, &RequestTally)> {
        self.tallies.iter()
    }

    /// What was counted after `earlier` (a snapshot of the same server taken
    /// before this one); keys with no new request are left out.
    pub fn since(&self, earlier: &RequestCounts) -> RequestCounts {
        let tallies = self
            .tallies
            .iter()
            .filter_map(|(key, now)| {
                let before = earlier.tallies.get(key).copied().unwrap_or_default();
                let requests = now.requests.saturating_sub(before.requests);
                let body_bytes = now.body_bytes.saturating_sub(before.body_bytes);
                let response_bytes = now.response_bytes.saturating_sub(before.response_bytes);
                (requests > 0).then(|| {
                    (
                        key.clone(),
                        RequestTally {
                            requests,
                            body_bytes,
                            response_bytes,
                        },
                    )
                })
            })
            .collect();
        RequestCounts { tallies }
    }

    /// The sum of the tallies whose key `wanted` accepts.
    pub fn total(&self, wanted: impl Fn(&RequestKey) -> bool) -> RequestTally {
        let mut sum = RequestTally::default();
        for (key, tally) in &self.tallies {
            if wanted(key) {
                sum.add(*tally);
            }
        }
        sum
    }
}

/// Request statistics handle (cheap to clone; all clones read one server).
///
/// Every resource request is counted once it is authenticated and its
/// resource resolved, whatever the outcome (refused, failed by an injected
/// fault, or served); discovery, `/version` and OpenAPI are not counted. A
/// watch counts once, when it is opened. The number of keys is bounded by the
/// users, verbs and resources in use, not by the number of requests.
#[derive(Debug, Clone, Default)]
pub struct RequestStats {
    tallies: Arc<Mutex<BTreeMap<RequestKey, RequestTally>>>,
}

impl RequestStats {
    /// The counts so far.
    pub fn snapshot(&self) -> RequestCounts {
        RequestCounts {
            tallies: self
                .tallies
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        }
    }

    /// Counts one request.
    pub(crate) fn record(&self, user: &str, verb: &str, resource: &str, body_bytes: usize) {
        self.add(
            user,
            verb,
            resource,
            RequestTally {
                requests: 1,
                body_bytes: body_bytes as u64,
                response_bytes: 0,
            },
        );
    }

    /// Counts the response body of a request counted by [`RequestStats::record`].
    pub(crate) fn record_response(&self, user: &str, verb: &str, resource: &str, bytes: usize) {
        self.add(
            user,
            verb,
            resource,
            RequestTally {
                response_bytes: bytes as u64,
                ..RequestTally::default()
            },
        );
    }

    fn add(&self, user: &str, verb: &str, resource: &str, tally: RequestTally) {
        let key = RequestKey {
            user: user.to_owned(),
            verb: verb.to_owned(),
            resource: resource.to_owned(),
        };
        self.tallies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(key)
            .or_default()
            .add(tally);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_since_a_snapshot_keep_only_what_came_after_it() {
        let stats = RequestStats::default();
        stats.record("alice", "patch", "configmaps", 100);
        stats.record("bob", "get", "pods", 0);
        let earlier = stats.snapshot();
        stats.record("alice", "patch", "configmaps", 40);
        stats.record_response("alice", "patch", "configmaps", 300);
        stats.record("alice", "patch", "configmaps", 2);
        stats.record("alice", "list", "leases", 0);

        let since = stats.snapshot().since(&earlier);

        let rows: Vec<(String, String, String, RequestTally)> = since
            .iter()
            .map(|(key, tally)| {
                (
                    key.user.clone(),
                    key.verb.clone(),
                    key.resource.clone(),
                    *tally,
                )
            })
            .collect();
        let tally = |requests, body_bytes, response_bytes| RequestTally {
            requests,
            body_bytes,
            response_bytes,
        };
        assert_eq!(
            rows,
            vec![
                (
                    "alice".into(),
                    "list".into(),
                    "leases".into(),
                    tally(1, 0, 0)
                ),
                (
                    "alice".into(),
                    "patch".into(),
                    "configmaps".into(),
                    tally(2, 42, 300)
                ),
            ]
        );
        assert_eq!(
            since.total(|key| key.user == "alice" && key.verb == "patch"),
            tally(2, 42, 300)
        );
        assert_eq!(since.total(|key| key.user == "bob"), tally(0, 0, 0));
    }
}
