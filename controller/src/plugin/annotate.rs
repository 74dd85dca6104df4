//! How every changing command writes: annotations computed from the object
//! as read, written with that object's `resourceVersion` as a precondition.
//! When someone else wrote in between, the server answers 409 Conflict and
//! the command reads again and computes again, so the other writer's items
//! are merged rather than lost, and its checks (is the revision still
//! pending, does the operation still wait) are made on what it overwrites.
//! After [`ATTEMPTS`] conflicts in a row it gives up loudly: two concurrent
//! commands are both handled, or one fails.

use std::collections::BTreeMap;
use std::fmt::Debug;

use kube::api::Api;

use super::write::{Writes, merge_patch};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

/// Attempts at a write when the object keeps changing under it.
pub const ATTEMPTS: usize = 5;

/// Why a guarded write did not happen.
#[derive(Debug)]
pub enum AnnotateError<E> {
    /// The object does not exist.
    NotFound,
    /// The command's own check refused the request (it is impossible as the object stands).
    Refused(E),
    /// Reading or writing failed (not a conflict).
    Api(kube::Error),
    /// Another writer won [`ATTEMPTS`] times in a row.
    KeptChanging,
}

/// Whether the server refused a write for a stale `resourceVersion`.
pub fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// Reads `name`, lets `compute` check the request and say which annotations
/// to set (and what to report), and writes them by merge patch with the read
/// `resourceVersion` as a precondition; on a conflict, again from a fresh read. Under a
/// dry run ([`Writes`]) the patch is held back or only checked by the server.
pub async fn annotate_guarded<K, T, E>(
    writes: &Writes,
    api: &Api<K>,
    name: &str,
    mut compute: impl FnMut(&K) -> Result<(BTreeMap<String, String>, T), E>,
) -> Result<T, AnnotateError<E>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + serde::Serialize + Debug,
{
    for _ in 0..ATTEMPTS {
        let object = api
            .get_opt(name)
            .await
            .map_err(AnnotateError::Api)?
            .ok_or(AnnotateError::NotFound)?;
        let (annotations, report) = compute(&object).map_err(AnnotateError::Refused)?;
        let patch = serde_json::json!({
            "metadata": {
                "resourceVersion": object.resource_version(),
                "annotations": annotations,
            }
        });
        match merge_patch(writes, api, name, patch).await {
            Ok(_) => return Ok(report),
            Err(error) if is_conflict(&error) => continue,
            Err(error) => return Err(AnnotateError::Api(error)),
        }
    }
    Err(AnnotateError::KeptChanging)
}
