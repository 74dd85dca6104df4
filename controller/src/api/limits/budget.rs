//! The byte budget of every status Shoal writes, for Swarms and DeploymentPlans
//! alike: the second half of [`super::fit`], after the schema's bounds.
//!
//! A custom resource is stored whole in etcd, which refuses an object over
//! [`MAX_OBJECT_BYTES`] (the API server passes the refusal on as a 500
//! `etcdserver: request is too large`); a request body over 3 MiB is refused
//! before that (413). A status that grows past either is never stored, and a
//! controller that only retries freezes silently. So:
//!
//! 1. **Budget.** A status may take what the rest of its object (metadata and
//!    spec, as observed) leaves of [`MAX_OBJECT_BYTES`], less
//!    [`OVERHEAD_BYTES`] for what the server adds (managedFields,
//!    resourceVersion, timestamps): [`status_budget`].
//! 2. **History goes first.** Before a status is written, [`prune`] drops the
//!    entries its kind says may go ([`PrunableStatus::drop_first_to_go`]:
//!    finished operations and deployment records no longer in use, oldest
//!    first, by size as well as by the count limits) until it is within the
//!    budget. What must stand (the placement in force, open operations,
//!    conditions) is never dropped.
//! 3. **Refused anyway.** When the server still refuses the write for its size
//!    ([`refused_for_size`]), the object is written `Degraded` with reason
//!    [`STATUS_TOO_LARGE`], naming the largest field and the sizes
//!    ([`too_large_patch`], a merge patch of the conditions, phase and last
//!    error only: small, so it is stored where the whole status was not), and
//!    one Warning Event says so on the transition. The last good status stays
//!    as it was.
//!
//! Sizes are of compact JSON, which is what etcd holds of a custom resource.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Value, json};

use super::MAX_OBJECT_BYTES;
use crate::api::swarm::Condition;

/// Room kept in every object for what the API server adds beside what the
/// controller computes (managedFields entries, resourceVersion, timestamps)
/// and for other writers' small edits between a read and a write.
pub const OVERHEAD_BYTES: usize = 32 * 1024;

/// The `Degraded` reason of an object whose status the API server refused for
/// its size.
pub const STATUS_TOO_LARGE: &str = "StatusTooLarge";

/// Bytes of `value` as compact JSON.
pub fn json_bytes<T: Serialize + ?Sized>(value: &T) -> usize {
    // Counted as written, never held: it sizes every write the controller makes (a
    // revision record is megabytes), and a buffer only to take its length doubled that.
    let mut counted = ByteCount(0);
    match serde_json::to_writer(&mut counted, value) {
        Ok(()) => counted.0,
        Err(_) => 0,
    }
}

/// An `io::Write` that keeps only how many bytes went through it.
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Bytes of `object` without its status: what its status must leave room for.
pub fn rest_of_object<K: Serialize>(object: &K) -> usize {
    let Ok(mut value) = serde_json::to_value(object) else {
        return 0;
    };
    if let Some(fields) = value.as_object_mut() {
        fields.remove("status");
    }
    json_bytes(&value)
}

/// The most a status may take beside `rest` bytes of metadata and spec.
pub fn status_budget(rest: usize) -> usize {
    MAX_OBJECT_BYTES.saturating_sub(rest.saturating_add(OVERHEAD_BYTES))
}

/// A status that can lose some entries when it is over its budget.
pub trait PrunableStatus: Serialize {
    /// Drops the entry that goes first when the status is too large (the
    /// oldest entry of a history); its field and its size in bytes (with the
    /// comma that separated it). `None` when only what must stand is left.
    fn drop_first_to_go(&mut self) -> Option<(&'static str, usize)>;
}

/// What [`prune`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Size of the status after fitting.
    pub bytes: usize,
    /// The budget it was fitted to.
    pub budget: usize,
    /// Entries dropped, by field.
    pub dropped: BTreeMap<&'static str, usize>,
}

impl Pruned {
    /// Whether the status is still over its budget (nothing more may go).
    pub fn over(&self) -> bool {
        self.bytes > self.budget
    }
}

/// Drops entries of `status` that may go, first to go first, until it is
/// within `budget` bytes or nothing more may go.
pub fn prune<S: PrunableStatus>(status: &mut S, budget: usize) -> Pruned {
    let mut bytes = json_bytes(status);
    let mut dropped = BTreeMap::new();
    while bytes > budget {
        let Some((field, size)) = status.drop_first_to_go() else {
            break;
        };
        bytes = bytes.saturating_sub(size);
        *dropped.entry(field).or_insert(0) += 1;
    }
    if !dropped.is_empty() {
        // The running count is an estimate (separators); measure once at the end.
        bytes = json_bytes(status);
    }
    Pruned {
        bytes,
        budget,
        dropped,
    }
}

/// Size of one entry of a list as it counts in the list: the entry and a comma.
pub fn entry_bytes<T: Serialize>(entry: &T) -> usize {
    json_bytes(entry) + 1
}

/// The largest top-level field of `status` and its size in bytes.
pub fn largest_field<S: Serialize>(status: &S) -> Option<(String, usize)> {
    let value = serde_json::to_value(status).ok()?;
    value
        .as_object()?
        .iter()
        .map(|(field, value)| (field.clone(), json_bytes(value)))
        .max_by_key(|(_, bytes)| *bytes)
}

/// Whether the API server refused a write for its size: 413 (request body),
/// etcd's `request is too large` (a 500 with no reason), or a 422 saying a
/// value is too long.
pub fn refused_for_size(error: &kube::Error) -> bool {
    let kube::Error::Api(status) = error else {
        return false;
    };
    status.code == 413
        || status.message.contains("request is too large")
        || (status.code == 422 && status.message.contains("Too long"))
}

/// The words of a refusal for size: what was refused, how large it was, its
/// largest field, the budget, and the server's answer.
pub fn too_large_message<S: Serialize>(
    object: &str,
    status: &S,
    budget: usize,
    error: &kube::Error,
) -> String {
    let bytes = json_bytes(status);
    let largest = largest_field(status)
        .map(|(field, size)| format!("; its largest field, status.{field}, is {size} bytes"))
        .unwrap_or_default();
    let answer = match error {
        kube::Error::Api(status) => format!("{} {}", status.code, status.message),
        other => other.to_string(),
    };
    format!(
        "{object}: the API server refused its status of {bytes} bytes ({answer}){largest}; the status budget is {budget} bytes. The last status written stays; reduce what makes it large"
    )
}

/// The merge patch that records a status refused for its size: the stored
/// conditions with `Degraded` True (reason [`STATUS_TOO_LARGE`], `message`),
/// phase `Degraded` and `lastError`. Only on the transition (the stored
/// `Degraded` is not already for the size), when a Warning is due too: `None`
/// after, so that a status refused pass after pass is not rewritten (each
/// write would wake the controller to be refused again).
pub fn too_large_patch(
    stored: &[Condition],
    message: &str,
    generation: Option<i64>,
    now: &str,
) -> Option<Value> {
    let previous = stored.iter().find(|c| c.type_ == "Degraded");
    if previous.is_some_and(|c| c.status == "True" && c.reason == STATUS_TOO_LARGE) {
        return None;
    }
    let mut conditions: Vec<Condition> = stored
        .iter()
        .filter(|c| c.type_ != "Degraded")
        .cloned()
        .collect();
    conditions.push(Condition {
        type_: "Degraded".to_owned(),
        status: "True".to_owned(),
        reason: STATUS_TOO_LARGE.to_owned(),
        message: message.to_owned(),
        last_transition_time: match previous {
            Some(c) if c.status == "True" => c.last_transition_time.clone(),
            _ => Some(now.to_owned()),
        },
        observed_generation: generation,
    });
    let patch = json!({"status": {
        "conditions": conditions,
        "phase": "Degraded",
        "lastError": message,
    }});
    Some(patch)
}

/// A Swarm's status keeps no history (its revisions are ConfigMaps, pruned by
/// count and split by size): nothing in it may go.
impl PrunableStatus for crate::api::swarm::SwarmStatus {
    fn drop_first_to_go(&mut self) -> Option<(&'static str, usize)> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_bytes_counts_exactly_the_bytes_serde_json_writes() {
        let value = serde_json::json!({"data": {"slice.yaml": "é".repeat(5000)}, "n": [1, 2, 3]});
        assert_eq!(
            json_bytes(&value),
            serde_json::to_vec(&value).unwrap().len()
        );
    }

    #[derive(Serialize)]
    struct History {
        kept: Vec<String>,
        old: Vec<String>,
    }

    impl PrunableStatus for History {
        fn drop_first_to_go(&mut self) -> Option<(&'static str, usize)> {
            if self.old.is_empty() {
                return None;
            }
            let gone = self.old.remove(0);
            Some(("old", entry_bytes(&gone)))
        }
    }

    fn history(kept: usize, old: usize, size: usize) -> History {
        History {
            kept: (0..kept).map(|i| format!("{i:0size$}")).collect(),
            old: (0..old).map(|i| format!("{i:0size$}")).collect(),
        }
    }

    #[test]
    fn a_status_within_its_budget_is_left_as_it_is() {
        let mut status = history(2, 3, 10);
        let bytes = json_bytes(&status);
        let fitted = prune(&mut status, bytes);
        assert_eq!(fitted.bytes, bytes);
        assert!(fitted.dropped.is_empty() && !fitted.over());
        assert_eq!(status.old.len(), 3);
    }

    #[test]
    fn history_goes_oldest_first_until_the_status_fits_and_no_further() {
        let mut status = history(2, 10, 100);
        let budget = json_bytes(&history(2, 4, 100));
        let fitted = prune(&mut status, budget);
        assert!(!fitted.over(), "{fitted:?}");
        assert_eq!(status.old.len(), 4, "exactly what was needed went");
        assert_eq!(status.old[0], format!("{:0100}", 6), "the oldest went");
        assert_eq!(fitted.dropped.get("old"), Some(&6));
        assert_eq!(fitted.bytes, json_bytes(&status));
    }

    #[test]
    fn what_must_stand_is_kept_and_the_status_says_it_is_over() {
        let mut status = history(20, 3, 100);
        let fitted = prune(&mut status, 500);
        assert!(fitted.over());
        assert!(status.old.is_empty());
        assert_eq!(status.kept.len(), 20);
        assert_eq!(
            largest_field(&status).map(|(field, _)| field),
            Some("kept".to_owned())
        );
    }

    #[test]
    fn the_budget_is_what_the_rest_of_the_object_leaves() {
        assert_eq!(status_budget(0), MAX_OBJECT_BYTES - OVERHEAD_BYTES);
        assert_eq!(
            status_budget(200 * 1024),
            MAX_OBJECT_BYTES - OVERHEAD_BYTES - 200 * 1024
        );
        assert_eq!(status_budget(MAX_OBJECT_BYTES), 0);
        let object = json!({"metadata": {"name": "web"}, "spec": {"a": 1}, "status": {"big": "x".repeat(1000)}});
        assert_eq!(
            rest_of_object(&object),
            json_bytes(&json!({"metadata": {"name": "web"}, "spec": {"a": 1}}))
        );
    }

    fn api_error(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(
            serde_json::from_value(json!({
                "status": "Failure", "message": message, "reason": "", "code": code
            }))
            .expect("a status"),
        )
    }

    #[test]
    fn only_refusals_for_size_count_as_such() {
        assert!(refused_for_size(&api_error(
            413,
            "Request entity too large: limit is 3145728"
        )));
        assert!(refused_for_size(&api_error(
            500,
            "etcdserver: request is too large"
        )));
        assert!(refused_for_size(&api_error(
            422,
            "metadata.annotations: Too long: may not be more than 262144 bytes"
        )));
        assert!(!refused_for_size(&api_error(409, "conflict")));
        assert!(!refused_for_size(&api_error(500, "internal error")));
    }

    #[test]
    fn a_refusal_is_recorded_once_naming_the_largest_field() {
        let status = history(20, 0, 100);
        let error = api_error(500, "etcdserver: request is too large");
        let message = too_large_message("DeploymentPlan ns/web", &status, 1000, &error);
        assert!(message.contains("status.kept, is"), "{message}");
        assert!(
            message.contains("etcdserver: request is too large"),
            "{message}"
        );
        assert!(message.contains("DeploymentPlan ns/web"), "{message}");
        let ready = crate::planned::condition("Ready", false, "Waiting", String::new());
        let patch = too_large_patch(&[ready], &message, Some(3), "now").expect("a patch");
        let conditions: Vec<Condition> =
            serde_json::from_value(patch["status"]["conditions"].clone()).expect("conditions");
        assert_eq!(conditions.len(), 2, "Ready is kept beside Degraded");
        let degraded = &conditions[1];
        assert_eq!(
            (degraded.status.as_str(), degraded.reason.as_str()),
            ("True", STATUS_TOO_LARGE)
        );
        assert_eq!(patch["status"]["phase"], "Degraded");
        assert_eq!(patch["status"]["lastError"], message.as_str());
        assert!(
            too_large_patch(&conditions, "other sizes", Some(3), "later").is_none(),
            "said once, on the transition"
        );
    }
}
