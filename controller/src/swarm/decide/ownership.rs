//! The controller writes and deletes only ConfigMaps its Swarm owns. A name it
//! would use that belongs to someone else (a user's ConfigMap, another
//! Swarm's) is left alone and reported: Degraded, naming both objects.

use std::collections::BTreeSet;

use shoal_core::names;

use super::{InputProblem, Observation, Operation};

/// Every ConfigMap an operation writes (all parts of a split slice).
fn written_names(obs: &Observation, operation: &Operation) -> Vec<String> {
    match operation {
        Operation::WriteRevision(record) => {
            vec![names::revision_configmap(&obs.swarm, record.revision)]
        }
        Operation::WriteIndex { .. } => vec![names::index_configmap(&obs.swarm)],
        Operation::WriteSlice { member, slice, .. } => {
            let pod = member.pod_name();
            let parts = match shoal_core::format::encode_slice(slice) {
                shoal_core::format::EncodedSlice::Split(chunks) => chunks.len(),
                _ => 1,
            };
            (0..parts)
                .map(|part| names::slice_configmap_part(&pod, part))
                .collect()
        }
        Operation::DeleteSlice { .. }
        | Operation::Evict { .. }
        | Operation::PruneRevision { .. } => Vec::new(),
    }
}

/// Names the plan writes that are neither known to be this Swarm's nor known to be
/// someone else's: the I/O layer looks them up (and plans again if one is taken) before
/// writing anything.
pub fn unchecked_targets(obs: &Observation, operations: &[Operation]) -> BTreeSet<String> {
    operations
        .iter()
        .flat_map(|operation| written_names(obs, operation))
        .filter(|name| {
            !obs.owned_config_maps.contains_key(name) && !obs.foreign_config_maps.contains_key(name)
        })
        .collect()
}

/// Drops every write to a ConfigMap someone else owns (each one a problem naming both
/// objects) and every deletion of a ConfigMap this Swarm does not own.
pub(super) fn guard(
    obs: &Observation,
    operations: &mut Vec<Operation>,
    problems: &mut Vec<InputProblem>,
) {
    let mut conflicts = BTreeSet::new();
    operations.retain(|operation| {
        if let Operation::DeleteSlice { member, .. } = operation {
            return obs
                .owned_config_maps
                .contains_key(&names::slice_configmap(member));
        }
        let taken: Vec<String> = written_names(obs, operation)
            .into_iter()
            .filter(|name| obs.foreign_config_maps.contains_key(name))
            .collect();
        conflicts.extend(taken.iter().cloned());
        taken.is_empty()
    });
    for name in conflicts {
        problems.push(InputProblem {
            reason: "OwnershipConflict",
            message: format!(
                "ConfigMap {name} exists and is not owned by Swarm {} ({}); Shoal neither writes nor deletes it. Rename or delete that ConfigMap, or rename the Swarm",
                obs.swarm, obs.foreign_config_maps[&name]
            ),
        });
    }
}

/// Whether a revision number's history ConfigMap name is free for this Swarm to use.
pub(super) fn revision_name_free(obs: &Observation, revision: u64) -> bool {
    !obs.foreign_config_maps
        .contains_key(&names::revision_configmap(&obs.swarm, revision))
}

/// Owned history records and index that someone else changed: reported (Degraded,
/// `ConfigMapEdited`, naming the ConfigMap and who changed it). The index is written back
/// once the rollout is done (observe did not read the edited text), the record of the
/// revision in force when the inputs still give it, and a record of an older revision,
/// whose content cannot be trusted nor recovered, is deleted. Edited slices are put back by
/// the convergence step.
pub(super) fn edits(
    obs: &Observation,
    operations: &mut Vec<Operation>,
    problems: &mut Vec<InputProblem>,
) {
    let history_prefix = format!("{}-rev-", obs.swarm);
    for (name, editor) in &obs.edited_config_maps {
        let revision = name
            .strip_prefix(&history_prefix)
            .and_then(|revision| revision.parse::<u64>().ok());
        let what = match revision {
            Some(revision) if revision != obs.status.current_revision => {
                operations.push(Operation::PruneRevision { revision });
                format!("the history record of revision {revision}; it is deleted")
            }
            Some(revision) => format!(
                "the history record of revision {revision}, in force; it is written back from the Swarm's inputs when they still give that revision"
            ),
            None if *name == names::index_configmap(&obs.swarm) => {
                "the index; it is written back".to_owned()
            }
            None => continue,
        };
        problems.push(InputProblem {
            reason: "ConfigMapEdited",
            message: format!(
                "ConfigMap {name} ({what}) was changed by {editor}, not by Shoal; Shoal does not read it"
            ),
        });
    }
}
