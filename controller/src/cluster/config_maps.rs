//! The ConfigMaps a Swarm owns, as both controllers read them: who owns one, who edited
//! its data, and its text (a slice, a history record, the index) through the one codec
//! of `shoal_core::format`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use shoal_core::format;
use shoal_core::names::{self, ANNOTATION_PHASE, ANNOTATION_WRITTEN_FOR_UID, REVISION_DATA_KEY};

use crate::observed::SliceObject;

/// Whether this Swarm (by uid) is the ConfigMap's controller owner.
pub fn owned_by(cm: &ConfigMap, swarm_uid: &str) -> bool {
    cm.owner_references().iter().any(|owner| {
        owner.controller == Some(true) && owner.uid == swarm_uid && owner.kind == "Swarm"
    })
}

/// The field manager, other than this controller, that last changed the ConfigMap's data,
/// if any: server-side field ownership records every writer of each field, so a hand edit
/// (`kubectl edit`, `patch`, `apply`) shows as its manager owning data fields.
pub fn edited_by(cm: &ConfigMap) -> Option<String> {
    crate::managed_fields::other_owner(
        cm.metadata.managed_fields.as_deref().unwrap_or_default(),
        &["data", "binaryData"],
        &is_shoal_data_key,
    )
}

/// A data key Shoal writes: other keys a user adds are theirs.
fn is_shoal_data_key(key: &str) -> bool {
    [
        names::SLICE_DATA_KEY,
        names::INDEX_DATA_KEY,
        REVISION_DATA_KEY,
    ]
    .iter()
    .any(|ours| key.starts_with(ours))
}

/// Who owns a ConfigMap, in words, for the OwnershipConflict message.
pub fn owner_description(cm: &ConfigMap) -> String {
    match cm
        .owner_references()
        .iter()
        .find(|owner| owner.controller == Some(true))
    {
        Some(owner) => format!("it is owned by {} {}", owner.kind, owner.name),
        None => "it has no controller owner".to_owned(),
    }
}

/// How many ConfigMaps the slice or record whose first ConfigMap is `cm` occupies (its
/// `shoal.dev/parts` annotation; 1 when absent or not a number).
pub fn parts_of(cm: &ConfigMap) -> usize {
    cm.annotations()
        .get(names::ANNOTATION_PARTS)
        .and_then(|parts| parts.parse().ok())
        .unwrap_or(1)
        .max(1)
}

/// Reads a member's slice ConfigMap (and its parts, if split).
pub fn slice_object(
    member: &str,
    cm: &ConfigMap,
    all: &BTreeMap<String, ConfigMap>,
) -> SliceObject {
    let annotations = cm.annotations();
    let parts = parts_of(cm);
    let binary = |cm: &ConfigMap, key: &str| -> Option<Vec<u8>> {
        cm.binary_data
            .as_ref()?
            .get(key)
            .map(|bytes| bytes.0.clone())
    };
    let encoded = if parts > 1 {
        let mut chunks = Vec::new();
        for part in 0..parts {
            let chunk = all
                .get(&names::slice_configmap_part(member, part))
                .and_then(|cm| binary(cm, &format::part_data_key(part)));
            match chunk {
                Some(chunk) => chunks.push(chunk),
                None => {
                    return SliceObject {
                        text: None,
                        written_for_uid: annotations.get(ANNOTATION_WRITTEN_FOR_UID).cloned(),
                        phase: annotations.get(ANNOTATION_PHASE).cloned(),
                        parts,
                        decode_error: Some(format!(
                            "part {part} of {parts} ({}) is missing",
                            names::slice_configmap_part(member, part)
                        )),
                    };
                }
            }
        }
        Some(format::EncodedSlice::Split(chunks))
    } else if let Some(text) = cm
        .data
        .as_ref()
        .and_then(|data| data.get(names::SLICE_DATA_KEY))
    {
        Some(format::EncodedSlice::Plain(text.clone()))
    } else {
        binary(cm, names::SLICE_GZIP_DATA_KEY).map(format::EncodedSlice::Gzip)
    };
    let (text, decode_error) = match encoded.as_ref().map(format::decode_slice) {
        None => (None, None),
        Some(Ok(slice)) => (Some(format::render_slice(&slice)), None),
        // Plain text that fails to parse is handed over as is; plan names the problem.
        Some(Err(_)) if matches!(encoded, Some(format::EncodedSlice::Plain(_))) => (
            cm.data
                .as_ref()
                .and_then(|data| data.get(names::SLICE_DATA_KEY))
                .cloned(),
            None,
        ),
        Some(Err(error)) => (None, Some(error.to_string())),
    };
    SliceObject {
        text,
        written_for_uid: annotations.get(ANNOTATION_WRITTEN_FOR_UID).cloned(),
        phase: annotations.get(ANNOTATION_PHASE).cloned(),
        parts,
        decode_error,
    }
}

/// Reads `key` from `data`, or `<key>.gz` from `binaryData`.
pub fn read_text(cm: &ConfigMap, key: &str) -> Option<String> {
    if let Some(text) = cm.data.as_ref().and_then(|data| data.get(key)) {
        return Some(text.clone());
    }
    let compressed = cm.binary_data.as_ref()?.get(&format!("{key}.gz"))?;
    format::decode_text(&format::EncodedText::Gzip(compressed.0.clone())).ok()
}
