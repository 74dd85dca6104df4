//! Carrying out a plan, in the order that keeps the decision's promises:
//!
//! 1. **History, then the index**, one after another, before the status: a revision's
//!    record (its parts first, its own ConfigMap last) exists before the status names
//!    the revision, and the index, planned only in a pass that writes no slice, before a
//!    status that reports the Swarm Ready.
//! 2. **The status**: the commit point of the pass. When it fails nothing after it is
//!    written, and the next pass plans again from what the cluster holds.
//! 3. **The slices, as one wave**: every slice write and deletion of the pass at once, at
//!    most `--max-concurrent-writes` in flight ([`crate::Settings::max_concurrent_writes`]).
//!    A member's own steps stay in order inside its write: its parts (the first last, so
//!    a reader following `shoal.dev/parts` finds the others), its stale parts deleted,
//!    then [`answer_for_write`] reads its pod again. Every write of the wave runs to its
//!    end, none is cancelled half-way; the pass returns the first error and logs the
//!    others. A 429 is retried inside the client after its `Retry-After`; a 500 fails the
//!    pass, which the controller tries again.
//! 4. **Evictions** (`reload: Restart`), only once the wave succeeded: a pod is restarted
//!    only after its own slice was written, so that its replacement reads the new slice.
//! 5. **Pruning** of old history records, last.
//!
//! No two slice writes of one pass depend on each other. Revoke before grant is kept
//! across passes, not inside one: `decide::converge` plans a grant only when no revoke
//! is unsettled, every revoke it plans is unsettled in its own pass (so is the deletion
//! of a departed member's slice still holding jobs), and only what the cluster shows
//! afterwards settles a revoke (the member's acknowledgement, its pod replaced). A pass
//! therefore holds revokes or grants, never both; what may come beside them (a refresh
//! of a slice's instances alone, the deletion of a slice holding nothing) moves no job.
//! The decide tests check this of every pass they plan (`Cluster::step` in
//! `decide/tests.rs`). Were a pass ever to hold a revoke and a grant that depends on it,
//! the grants would have to go out as a second wave once every revoke of the first was
//! written.
//!
//! Only ConfigMaps this Swarm owns are written over (server-side apply, one
//! field manager) or deleted (with the uid seen as precondition). A name the
//! Swarm does not own yet is created, never applied over: if someone else
//! took it in the meantime, the create fails and nothing of theirs changes.

use shoal_core::names::{
    ANNOTATION_CHECKSUM, ANNOTATION_PHASE, ANNOTATION_WRITTEN_FOR_UID, CONTROLLER_FIELD_MANAGER,
    REVISION_DATA_KEY,
};
use std::collections::BTreeMap;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{
    DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams, Preconditions,
};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use shoal_core::{MemberId, Slice, format, names};
use tracing::{info, warn};

use crate::api::limits::budget::json_bytes;
use crate::api::swarm::Swarm;
use crate::cluster::Context;
use crate::swarm::decide::{self, Decision, Observation, Operation, RevisionRecord};
use crate::swarm::reconcile::{Error, publish};
use shoal_core::format::MAX_PLAIN_BYTES;

/// Writes and deletes the ConfigMaps of one Swarm, only those it owns.
struct ConfigMaps<'a> {
    api: Api<ConfigMap>,
    swarm: &'a Swarm,
    owned: &'a BTreeMap<String, String>,
    ctx: &'a Context,
}

/// How a ConfigMap write failed.
enum WriteFailure {
    /// The API refused or failed.
    Api(kube::Error),
    /// The name was taken by someone else between looking and writing.
    Taken,
}

impl ConfigMaps<'_> {
    fn body(
        &self,
        name: &str,
        labels: BTreeMap<String, String>,
        annotations: BTreeMap<String, String>,
        (data, binary_data): (serde_json::Value, serde_json::Value),
    ) -> serde_json::Value {
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": self.swarm.namespace(),
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": self.swarm.controller_owner_ref(&()).into_iter().collect::<Vec<_>>(),
            },
            "data": data,
            "binaryData": binary_data,
        })
    }

    /// Server-side applies an owned ConfigMap; creates one not owned yet. Returns the
    /// ConfigMap as the API server stored it.
    async fn write(&self, name: &str, body: serde_json::Value) -> Result<ConfigMap, WriteFailure> {
        if self.owned.contains_key(name) {
            self.ctx.metrics.wrote_bytes("configmap", json_bytes(&body));
            let params = PatchParams::apply(CONTROLLER_FIELD_MANAGER).force();
            return self
                .api
                .patch(name, &params, &Patch::Apply(body))
                .await
                .map_err(WriteFailure::Api);
        }
        let object: ConfigMap = serde_json::from_value(body)
            .map_err(|error| WriteFailure::Api(kube::Error::SerdeError(error)))?;
        let params = PostParams {
            field_manager: Some(CONTROLLER_FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        self.ctx
            .metrics
            .wrote_bytes("configmap", json_bytes(&object));
        match self.api.create(&params, &object).await {
            Ok(created) => Ok(created),
            Err(kube::Error::Api(status)) if status.code == 409 => Err(WriteFailure::Taken),
            Err(error) => Err(WriteFailure::Api(error)),
        }
    }

    /// Deletes an owned ConfigMap, only if it is still the one seen (same uid).
    async fn delete(&self, name: &str) -> Result<(), kube::Error> {
        let Some(uid) = self.owned.get(name) else {
            return Ok(());
        };
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        self.ctx
            .metrics
            .wrote_bytes("configmap", json_bytes(&params));
        match self.api.delete(name, &params).await {
            Ok(_) => Ok(()),
            // Gone already, or replaced by another object since: not ours to delete.
            Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Keeps what the next pass would decode from the ConfigMaps just `written`, so that
    /// it does not read them back ([`super::observe::remember_written`]).
    fn remember(&self, written: Vec<ConfigMap>) {
        super::observe::remember_written(&self.ctx.decoded, self.swarm, written);
    }

    fn swarm_labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(names::LABEL_SWARM.to_owned(), self.swarm.name_any())])
    }
}

impl WriteFailure {
    fn into_error(self, name: &str, swarm: &str, wrap: impl FnOnce(kube::Error) -> Error) -> Error {
        match self {
            WriteFailure::Api(source) => wrap(source),
            WriteFailure::Taken => Error::NotOwned {
                name: name.to_owned(),
                swarm: swarm.to_owned(),
            },
        }
    }
}

/// Puts `text` under `key` in `data`, or gzip-compressed under `<key>.gz` in `binaryData` when large.
pub(crate) fn text_payload(key: &str, text: &str) -> (serde_json::Value, serde_json::Value) {
    use k8s_openapi::ByteString;
    if text.len() <= MAX_PLAIN_BYTES {
        (json!({ key: text }), json!({}))
    } else {
        let compressed = ByteString(format::gzip(text));
        (json!({}), json!({ format!("{key}.gz"): compressed }))
    }
}

/// Carries out one plan (see the module docs for the order).
pub async fn apply(
    swarm: &Swarm,
    observation: &Observation,
    decision: &Decision,
    ctx: &Context,
) -> Result<(), Error> {
    let name = swarm.name_any();
    let namespace = swarm
        .namespace()
        .ok_or_else(|| Error::MissingNamespace(name.clone()))?;
    let config_maps = ConfigMaps {
        api: Api::namespaced(ctx.client.clone(), &namespace),
        swarm,
        owned: &observation.owned_config_maps,
        ctx,
    };
    for operation in &decision.operations {
        match operation {
            Operation::WriteRevision(record) => write_revision(&config_maps, record).await?,
            Operation::WriteIndex { text } => write_index(&config_maps, text).await?,
            _ => {}
        }
    }
    write_status(swarm, decision, ctx).await?;
    let member_pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    write_slices(&config_maps, &member_pods, &decision.operations).await?;
    let mut blocked = BTreeMap::new();
    for operation in &decision.operations {
        if let Operation::Evict { pod, uid } = operation
            && let Some(refusal) = evict(swarm, &namespace, pod, uid, ctx).await?
        {
            blocked.insert(pod.clone(), refusal);
        }
    }
    for operation in &decision.operations {
        if let Operation::PruneRevision { revision } = operation {
            prune_revision(&config_maps, *revision).await?;
        }
    }
    ctx.blocked_evictions
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(format!("{namespace}/{name}"), blocked);
    Ok(())
}

/// The wave of slice writes and deletions (see the module docs): all at once, at most
/// `max_concurrent_writes` in flight; each runs to its end, the first error is returned
/// and the others logged.
async fn write_slices(
    config_maps: &ConfigMaps<'_>,
    member_pods: &Api<Pod>,
    operations: &[Operation],
) -> Result<(), Error> {
    let in_flight = usize::from(config_maps.ctx.settings.max_concurrent_writes.max(1));
    // Collected first: a closure held across the awaits below would keep the reconcile
    // future from being `Send` (rustc cannot see it general over lifetimes).
    let wave: Vec<_> = operations
        .iter()
        .filter(|operation| {
            matches!(
                operation,
                Operation::WriteSlice { .. } | Operation::DeleteSlice { .. }
            )
        })
        .map(|operation| slice_operation(config_maps, member_pods, operation))
        .collect();
    let results: Vec<Result<(), Error>> = futures::stream::iter(wave)
        .buffer_unordered(in_flight)
        .collect()
        .await;
    let mut errors = results.into_iter().filter_map(Result::err);
    let Some(first) = errors.next() else {
        return Ok(());
    };
    for error in errors {
        warn!(%error, "another slice write of this pass failed too");
    }
    Err(first)
}

/// One member's slice write (then [`answer_for_write`]) or deletion (its other parts
/// before its first).
async fn slice_operation(
    config_maps: &ConfigMaps<'_>,
    member_pods: &Api<Pod>,
    operation: &Operation,
) -> Result<(), Error> {
    match operation {
        Operation::WriteSlice {
            member,
            slice,
            written_for_uid,
            phase,
            previous_parts,
            instances_only,
        } => {
            let annotations = BTreeMap::from([
                (
                    ANNOTATION_WRITTEN_FOR_UID.to_owned(),
                    written_for_uid.clone(),
                ),
                (ANNOTATION_PHASE.to_owned(), (*phase).to_owned()),
            ]);
            write_slice(config_maps, member, slice, annotations, *previous_parts).await?;
            if !instances_only {
                answer_for_write(config_maps, member_pods, member, written_for_uid).await?;
            }
            Ok(())
        }
        Operation::DeleteSlice { member, parts } => {
            delete_slice_parts(config_maps, member, (0..(*parts).max(1)).rev()).await
        }
        _ => Ok(()),
    }
}

/// Deletes an old revision's record: its own ConfigMap first (a reader then sees no
/// record, never a record missing parts), then every part this Swarm owns.
async fn prune_revision(config_maps: &ConfigMaps<'_>, revision: u64) -> Result<(), Error> {
    let head = names::revision_configmap(&config_maps.swarm.name_any(), revision);
    let part_prefix = format!("{head}-part-");
    let parts = config_maps
        .owned
        .keys()
        .filter(|cm_name| cm_name.starts_with(&part_prefix));
    for cm_name in std::iter::once(&head).chain(parts) {
        config_maps
            .delete(cm_name)
            .await
            .map_err(|source| Error::PruneRevision {
                name: cm_name.clone(),
                source,
            })?;
    }
    Ok(())
}

async fn write_revision(
    config_maps: &ConfigMaps<'_>,
    record: &RevisionRecord,
) -> Result<(), Error> {
    let swarm = config_maps.swarm.name_any();
    let cm_name = names::revision_configmap(&swarm, record.revision);
    tracing::debug!(
        revision = record.revision,
        hash = %record.hash,
        members = record.members.len(),
        unavailable = record.unavailable.len(),
        "writing revision history"
    );
    let serialize = |record: &RevisionRecord| {
        serde_json::to_string(record).map_err(|source| Error::SerializeRevision {
            revision: record.revision,
            source,
        })
    };
    let text = serialize(record)?;
    let mut labels = config_maps.swarm_labels();
    labels.insert(names::LABEL_REVISION_HISTORY.to_owned(), "true".to_owned());
    labels.insert(
        names::LABEL_REVISION.to_owned(),
        record.revision.to_string(),
    );
    // (ConfigMap name, annotations, data, binaryData), the record's own ConfigMap last so
    // that a reader following its part count finds every part already written.
    let mut writes = Vec::new();
    match decide::store_record(&text, MAX_PLAIN_BYTES, format::MAX_BINARY_BYTES) {
        // The encoding `store_record` chose, as it made it: the record is the largest
        // thing a pass writes, and compressing it a second time cost as much again.
        decide::StoredRecord::Plain(text) => {
            let data = json!({ REVISION_DATA_KEY: text });
            writes.push((cm_name, BTreeMap::new(), data, json!({})));
        }
        decide::StoredRecord::Gzip(compressed) => {
            let key = format!("{REVISION_DATA_KEY}.gz");
            let binary_data = json!({ key: k8s_openapi::ByteString(compressed) });
            writes.push((cm_name, BTreeMap::new(), json!({}), binary_data));
        }
        decide::StoredRecord::Split { chunks, checksum } => {
            let annotations = BTreeMap::from([
                (names::ANNOTATION_PARTS.to_owned(), chunks.len().to_string()),
                (ANNOTATION_CHECKSUM.to_owned(), checksum),
            ]);
            for (part, chunk) in chunks.into_iter().enumerate().rev() {
                writes.push((
                    decide::record_part_configmap(&swarm, record.revision, part),
                    if part == 0 {
                        annotations.clone()
                    } else {
                        BTreeMap::new()
                    },
                    json!({}),
                    json!({ decide::record_part_key(part): k8s_openapi::ByteString(chunk) }),
                ));
            }
        }
    }
    let mut written = Vec::new();
    for (cm_name, annotations, data, binary_data) in writes {
        let body = config_maps.body(&cm_name, labels.clone(), annotations, (data, binary_data));
        let stored = config_maps.write(&cm_name, body).await.map_err(|failure| {
            failure.into_error(&cm_name, &swarm, |source| Error::WriteRevision {
                name: cm_name.clone(),
                source,
            })
        })?;
        written.push(stored);
    }
    config_maps.remember(written);
    Ok(())
}

async fn write_index(config_maps: &ConfigMaps<'_>, text: &str) -> Result<(), Error> {
    let swarm = config_maps.swarm.name_any();
    let cm_name = names::index_configmap(&swarm);
    let body = config_maps.body(
        &cm_name,
        config_maps.swarm_labels(),
        BTreeMap::new(),
        text_payload(names::INDEX_DATA_KEY, text),
    );
    let stored = config_maps.write(&cm_name, body).await.map_err(|failure| {
        failure.into_error(&cm_name, &swarm, |source| Error::WriteIndex {
            name: cm_name.clone(),
            source,
        })
    })?;
    config_maps.remember(vec![stored]);
    Ok(())
}

/// The status, as a merge patch with explicit nulls: fields that became absent (a
/// pending revision that was applied, a refusal no longer standing) are removed outright.
async fn write_status(swarm: &Swarm, decision: &Decision, ctx: &Context) -> Result<(), Error> {
    // Fitted first (the schema's bounds, then the byte budget), so that the comparison
    // sees what would be stored and the server never refuses the write whole.
    let fitted = crate::api::limits::fit(
        &decision.status,
        crate::api::limits::budget::rest_of_object(swarm),
    );
    fitted.log(&format!(
        "Swarm {}/{}",
        swarm.namespace().unwrap_or_default(),
        swarm.name_any()
    ));
    let budget = fitted.pruned.budget;
    let fitted = fitted.status;
    if swarm.status.as_ref() == Some(&fitted) {
        return Ok(());
    }
    let name = swarm.name_any();
    let mut status = serde_json::to_value(&fitted).unwrap_or_else(|_| json!({}));
    if let Some(fields) = status.as_object_mut() {
        for optional in [
            "observedGeneration",
            "currentHash",
            "pendingRevision",
            "changedAt",
            "ready",
            "phase",
            "lastError",
            "refusedAnnotations",
            "cordoned",
            "nextWindow",
        ] {
            fields.entry(optional).or_insert(serde_json::Value::Null);
        }
        // A merge patch merges maps key by key: a refusal that no longer stands needs its null.
        let previous = swarm
            .status
            .as_ref()
            .map(|status| status.refused_annotations.clone())
            .unwrap_or_default();
        if let Some(refused) = fields.get_mut("refusedAnnotations")
            && let Some(refused) = refused.as_object_mut()
        {
            let gone: Vec<String> = previous
                .into_keys()
                .filter(|key| !refused.contains_key(key))
                .collect();
            for key in gone {
                refused.insert(key, serde_json::Value::Null);
            }
        }
    }
    let patch = json!({ "status": status });
    ctx.metrics.wrote_bytes("status", json_bytes(&patch));
    let swarms: Api<Swarm> =
        Api::namespaced(ctx.client.clone(), &swarm.namespace().unwrap_or_default());
    let written = swarms
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await;
    match written {
        Ok(_) => Ok(()),
        Err(source) if crate::api::limits::budget::refused_for_size(&source) => {
            // The status is the commit point of this pass: nothing after it is
            // applied, but the Swarm says why (once), instead of only retrying.
            let stored = swarm
                .status
                .as_ref()
                .map(|status| status.conditions.as_slice())
                .unwrap_or_default();
            if let Err(error) = crate::cluster::too_large::record_too_large(
                ctx, swarm, "Swarm", stored, &fitted, budget, &source,
            )
            .await
            {
                warn!(%error, swarm = %name, "could not record that the status is too large");
            }
            Err(Error::WriteStatus {
                swarm: name,
                source,
            })
        }
        Err(source) => Err(Error::WriteStatus {
            swarm: name,
            source,
        }),
    }
}

/// Writes a member's slice (plain, gzip, or split into parts, the first part last so that
/// a reader following its parts annotation finds every part already written), then
/// deletes parts the slice no longer needs.
async fn write_slice(
    config_maps: &ConfigMaps<'_>,
    member: &MemberId,
    slice: &Slice,
    mut annotations: BTreeMap<String, String>,
    previous_parts: usize,
) -> Result<(), Error> {
    let swarm = config_maps.swarm.name_any();
    let pod = member.pod_name();
    let mut labels = config_maps.swarm_labels();
    labels.insert(names::LABEL_POOL.to_owned(), member.pool.clone());
    labels.insert(names::LABEL_MEMBER.to_owned(), pod.clone());
    labels.insert(names::LABEL_REVISION.to_owned(), slice.revision.to_string());
    // (ConfigMap name, data, binaryData).
    let mut writes: Vec<(String, serde_json::Value, serde_json::Value)> = Vec::new();
    let parts = match format::encode_slice(slice) {
        format::EncodedSlice::Plain(text) => {
            writes.push((
                names::slice_configmap(&pod),
                json!({ names::SLICE_DATA_KEY: text }),
                json!({}),
            ));
            1
        }
        format::EncodedSlice::Gzip(bytes) => {
            writes.push((
                names::slice_configmap(&pod),
                json!({}),
                json!({ names::SLICE_GZIP_DATA_KEY: k8s_openapi::ByteString(bytes) }),
            ));
            1
        }
        format::EncodedSlice::Split(chunks) => {
            let count = chunks.len();
            annotations.insert(names::ANNOTATION_PARTS.to_owned(), count.to_string());
            for (part, chunk) in chunks.into_iter().enumerate().rev() {
                writes.push((
                    names::slice_configmap_part(&pod, part),
                    json!({}),
                    json!({ format::part_data_key(part): k8s_openapi::ByteString(chunk) }),
                ));
            }
            count
        }
    };
    tracing::debug!(
        member = %pod,
        revision = slice.revision,
        hash = %slice.hash,
        jobs = slice.jobs.len(),
        "writing slice"
    );
    let mut written = Vec::new();
    for (cm_name, data, binary_data) in writes {
        let first = cm_name == names::slice_configmap(&pod);
        let body = config_maps.body(
            &cm_name,
            labels.clone(),
            if first {
                annotations.clone()
            } else {
                BTreeMap::new()
            },
            (data, binary_data),
        );
        let stored = config_maps.write(&cm_name, body).await.map_err(|failure| {
            failure.into_error(&cm_name, &swarm, |source| Error::WriteSlice {
                name: cm_name.clone(),
                source,
            })
        })?;
        written.push(stored);
    }
    delete_slice_parts(config_maps, &pod, parts..previous_parts).await?;
    config_maps.ctx.metrics.slices_written.inc();
    config_maps.remember(written);
    Ok(())
}

/// Deletes the ConfigMaps of these parts of a member's slice, in this order.
async fn delete_slice_parts(
    config_maps: &ConfigMaps<'_>,
    pod: &str,
    parts: impl Iterator<Item = usize>,
) -> Result<(), Error> {
    for part in parts {
        let cm_name = names::slice_configmap_part(pod, part);
        config_maps
            .delete(&cm_name)
            .await
            .map_err(|source| Error::DeleteSlice {
                name: cm_name,
                source,
            })?;
    }
    Ok(())
}

/// Right after a member's slice was written: a pod found in the member's place other
/// than the one the slice was written for may have started between the controller's read
/// and the write, and read the slice before it. The slice is re-pointed at that pod
/// (`shoal.dev/written-for-uid`), so that it is restarted (`Restart`) or must acknowledge
/// (`HotReload`) before what the write took away is granted to anyone else.
async fn answer_for_write(
    config_maps: &ConfigMaps<'_>,
    pods: &Api<Pod>,
    member: &MemberId,
    written_for_uid: &str,
) -> Result<(), Error> {
    let pod = member.pod_name();
    // A list by name, not a get: the controller's role lists pods and gets none.
    let by_name = ListParams::default().fields(&format!("metadata.name={pod}"));
    let found = pods.list(&by_name).await.map_err(|source| Error::ReadPod {
        pod: pod.clone(),
        source,
    })?;
    let found = found.items.first().map(crate::cluster::pools::pod_state);
    let Some(uid) = decide::pod_answering_for_write(written_for_uid, found.as_ref()) else {
        return Ok(());
    };
    info!(
        pod,
        uid, written_for_uid, "pod replaced around its slice write; the slice now answers for it"
    );
    let cm_name = names::slice_configmap(&pod);
    let params = PatchParams {
        field_manager: Some(CONTROLLER_FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    let patch = json!({ "metadata": { "annotations": { ANNOTATION_WRITTEN_FOR_UID: uid } } });
    config_maps
        .ctx
        .metrics
        .wrote_bytes("configmap", json_bytes(&patch));
    config_maps
        .api
        .patch(&cm_name, &params, &Patch::Merge(patch))
        .await
        .map(|_| ())
        .map_err(|source| Error::WriteSlice {
            name: cm_name,
            source,
        })
}

/// The longest one eviction call may take: an eviction is sent once (`eviction`), so a
/// refusal comes back at once; this only bounds a call the API server is slow to answer,
/// which is then reported like a refusal and tried again next pass.
const EVICTION_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// How the API server answered an eviction that did not happen.
#[derive(Debug, PartialEq, Eq)]
enum EvictionRefusal {
    /// A PodDisruptionBudget refused it (429 with a `DisruptionBudget` cause): what it said.
    DisruptionBudget(String),
    /// Another 429: the API server is throttling (API priority and fairness, say).
    Throttled(String),
}

/// Classifies a 429 answer to an eviction: a PodDisruptionBudget refusal only when the
/// Status says so (a cause with reason `DisruptionBudget`), else throttling.
fn classify_429(status: &kube::core::Status) -> EvictionRefusal {
    let causes: Vec<&kube::core::response::StatusCause> = status
        .details
        .iter()
        .flat_map(|details| &details.causes)
        .collect();
    let mut said = status.message.clone();
    let messages: Vec<&str> = causes
        .iter()
        .map(|cause| cause.message.as_str())
        .filter(|message| !message.is_empty())
        .collect();
    if !messages.is_empty() {
        said.push_str(&format!(" ({})", messages.join("; ")));
    }
    if causes
        .iter()
        .any(|cause| cause.reason == "DisruptionBudget")
    {
        EvictionRefusal::DisruptionBudget(said)
    } else {
        EvictionRefusal::Throttled(said)
    }
}

/// Restarts a pod through the eviction API, only if it still has this uid. Returns what
/// refused it when a PodDisruptionBudget did (429): the next pass tries again, and the
/// status and a Warning say which pod waits and why.
async fn evict(
    swarm: &Swarm,
    namespace: &str,
    pod: &str,
    uid: &str,
    ctx: &Context,
) -> Result<Option<String>, Error> {
    let params = EvictParams {
        delete_options: Some(DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        }),
        post_options: PostParams::default(),
    };
    ctx.metrics.wrote("eviction");
    let eviction = crate::eviction::evict_once(&ctx.evictions, namespace, pod, &params);
    let answer = match tokio::time::timeout(EVICTION_WAIT, eviction).await {
        Ok(answer) => answer,
        Err(_) => {
            let refusal = format!(
                "the API server did not accept the eviction within {}s (it keeps answering 429: a PodDisruptionBudget, or throttling)",
                EVICTION_WAIT.as_secs()
            );
            warn!(pod, "eviction not done now: {refusal}");
            return Ok(Some(refusal));
        }
    };
    match answer {
        Ok(_) => {
            ctx.metrics.members_restarted.inc();
            publish(
                ctx,
                swarm,
                false,
                "MemberRestarted",
                &format!("evicted pod {pod} (uid {uid}) so that it starts with its new slice"),
            )
            .await;
            Ok(None)
        }
        Err(kube::Error::Api(status)) if status.code == 429 => match classify_429(&status) {
            EvictionRefusal::DisruptionBudget(refusal) => {
                info!(
                    pod,
                    "eviction not done now: refused by a PodDisruptionBudget (429): {refusal}"
                );
                publish(
                    ctx,
                    swarm,
                    true,
                    "EvictionBlocked",
                    &format!("pod {pod} waits to restart with its new slice: {refusal}"),
                )
                .await;
                Ok(Some(refusal))
            }
            EvictionRefusal::Throttled(said) => {
                // Not a budget: nothing to show the user; the next pass tries again.
                warn!(
                    pod,
                    "eviction not done now: the API server is throttling (429): {said}"
                );
                Ok(None)
            }
        },
        // The pod is already gone or replaced: the next reconcile looks again.
        Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => {
            info!(
                pod,
                code = status.code,
                "eviction not needed any more: {}",
                status.message
            );
            Ok(None)
        }
        Err(source) => Err(Error::Evict {
            pod: pod.to_owned(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::config_maps::read_text;

    #[test]
    fn a_large_slice_is_stored_gzip_compressed_in_binary_data_and_read_back() {
        let text: String = (0..100_000).map(|i| format!("- stream:{i:08}\n")).collect();
        assert!(text.len() > MAX_PLAIN_BYTES);
        let (data, binary) = text_payload("slice.yaml", &text);
        assert_eq!(data, json!({}));
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "x"},
            "binaryData": binary,
        }))
        .unwrap();
        assert!(cm.binary_data.as_ref().unwrap()["slice.yaml.gz"].0.len() < MAX_PLAIN_BYTES);
        assert_eq!(read_text(&cm, "slice.yaml").as_deref(), Some(text.as_str()));
    }

    fn too_many_requests(causes: serde_json::Value) -> kube::core::Status {
        serde_json::from_value(json!({
            "status": "Failure",
            "code": 429,
            "reason": "TooManyRequests",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "details": {"causes": causes},
        }))
        .unwrap()
    }

    #[test]
    fn a_429_is_a_disruption_budget_refusal_only_when_its_cause_says_so() {
        let budget = too_many_requests(json!([{
            "reason": "DisruptionBudget",
            "message": "The disruption budget worker needs 2 healthy pods and has 2 currently",
        }]));
        let EvictionRefusal::DisruptionBudget(said) = classify_429(&budget) else {
            panic!("a DisruptionBudget cause is a budget refusal");
        };
        assert!(said.contains("disruption budget worker needs 2"), "{said}");
        let throttled = too_many_requests(json!([]));
        assert!(matches!(
            classify_429(&throttled),
            EvictionRefusal::Throttled(_)
        ));
    }

    #[test]
    fn a_small_slice_is_stored_as_plain_text() {
        let (data, binary) = text_payload("slice.yaml", "jobs: []\n");
        assert_eq!(data, json!({"slice.yaml": "jobs: []\n"}));
        assert_eq!(binary, json!({}));
    }
}
