//! The one reader of `metadata.managedFields`: which field manager owns which fields.
//!
//! Server-side field ownership records every writer of each field, so a hand edit
//! (`kubectl edit`, `patch`, `apply`) of something only the controller writes shows as
//! another manager owning it. Both controllers ask this module, never the JSON.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use shoal_core::names::CONTROLLER_FIELD_MANAGER;

/// How a field manager without a name is named in messages.
const UNNAMED_MANAGER: &str = "an unnamed field manager";

/// The status fields of a DeploymentPlan that make up the placement record the Swarm
/// delivers from.
pub const PLAN_RECORD_FIELDS: [&str; 2] = ["instances", "deployments"];

/// The names (without `f:`) of the fields `entry` owns directly under `f:<parent>`.
fn owned_under<'a>(entry: &'a ManagedFieldsEntry, parent: &str) -> Vec<&'a str> {
    entry
        .fields_v1
        .as_ref()
        .and_then(|fields| fields.0.get(format!("f:{parent}")))
        .and_then(|owned| owned.as_object())
        .map(|owned| {
            owned
                .keys()
                .map(|field| field.strip_prefix("f:").unwrap_or(field))
                .collect()
        })
        .unwrap_or_default()
}

/// `entry` owns, under one of `parents`, a field `wanted` accepts.
fn owns(entry: &ManagedFieldsEntry, parents: &[&str], wanted: &dyn Fn(&str) -> bool) -> bool {
    parents
        .iter()
        .any(|parent| owned_under(entry, parent).into_iter().any(wanted))
}

fn is_controller(entry: &ManagedFieldsEntry) -> bool {
    entry.manager.as_deref() == Some(CONTROLLER_FIELD_MANAGER)
}

/// The controller (field manager `shoal-controller`) owns, under one of `parents`, a
/// field `wanted` accepts.
pub fn controller_owns(
    entries: &[ManagedFieldsEntry],
    parents: &[&str],
    wanted: &dyn Fn(&str) -> bool,
) -> bool {
    entries
        .iter()
        .any(|entry| is_controller(entry) && owns(entry, parents, wanted))
}

/// The first field manager other than the controller that owns, under one of
/// `parents`, a field `wanted` accepts.
pub fn other_owner(
    entries: &[ManagedFieldsEntry],
    parents: &[&str],
    wanted: &dyn Fn(&str) -> bool,
) -> Option<String> {
    entries
        .iter()
        .find(|entry| !is_controller(entry) && owns(entry, parents, wanted))
        .map(|entry| {
            entry
                .manager
                .clone()
                .unwrap_or_else(|| UNNAMED_MANAGER.to_owned())
        })
}

/// The fields of a DeploymentPlan's placement record ([`PLAN_RECORD_FIELDS`]) that a
/// field manager other than the controller owns while the controller does not, with that
/// manager. (A field the controller co-owns holds the value it last applied: any other
/// writer's change would have taken its ownership away.)
pub fn plan_record_editors(entries: &[ManagedFieldsEntry]) -> BTreeMap<String, String> {
    let mut editors = BTreeMap::new();
    for field in PLAN_RECORD_FIELDS {
        let this_field = |owned: &str| owned == field;
        if controller_owns(entries, &["status"], &this_field) {
            continue;
        }
        if let Some(manager) = other_owner(entries, &["status"], &this_field) {
            editors.insert(field.to_owned(), manager);
        }
    }
    editors
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1;
    use serde_json::json;

    use super::*;

    fn entry(manager: Option<&str>, fields: serde_json::Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: manager.map(str::to_owned),
            fields_v1: Some(FieldsV1(fields)),
            ..ManagedFieldsEntry::default()
        }
    }

    #[test]
    fn a_data_key_another_manager_wrote_names_that_manager() {
        let entries = [
            entry(
                Some("shoal-controller"),
                json!({"f:data": {"f:slice.yaml": {}}}),
            ),
            entry(
                Some("kubectl-edit"),
                json!({"f:binaryData": {"f:slice.yaml.gz": {}}}),
            ),
        ];
        let ours = |field: &str| field.starts_with("slice.yaml");
        assert_eq!(
            other_owner(&entries, &["data", "binaryData"], &ours).as_deref(),
            Some("kubectl-edit")
        );
        assert!(controller_owns(&entries, &["data"], &ours));
        assert!(!controller_owns(&entries, &["binaryData"], &ours));
    }

    #[test]
    fn a_key_a_user_added_beside_ours_is_nobody_elses_edit() {
        let entries = [entry(Some("kubectl"), json!({"f:data": {"f:notes": {}}}))];
        let ours = |field: &str| field.starts_with("slice.yaml");
        assert_eq!(other_owner(&entries, &["data"], &ours), None);
    }

    #[test]
    fn a_manager_without_a_name_is_named_as_unnamed() {
        let entries = [entry(None, json!({"f:status": {"f:instances": {}}}))];
        assert_eq!(
            plan_record_editors(&entries),
            BTreeMap::from([("instances".to_owned(), UNNAMED_MANAGER.to_owned())])
        );
    }

    #[test]
    fn a_record_field_the_controller_co_owns_is_not_edited() {
        let entries = [
            entry(
                Some("shoal-controller"),
                json!({"f:status": {"f:instances": {}}}),
            ),
            entry(
                Some("someone"),
                json!({"f:status": {"f:instances": {}, "f:deployments": {}}}),
            ),
        ];
        assert_eq!(
            plan_record_editors(&entries),
            BTreeMap::from([("deployments".to_owned(), "someone".to_owned())])
        );
    }
}
