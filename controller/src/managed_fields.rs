//! `metadata.managedFields` of the API types, read through the one reader,
//! `shoal_core::managed_fields` (the sidecar reads its slice's through it too).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use shoal_core::managed_fields::{self, Ownership};

/// The status fields of a DeploymentPlan that make up the placement record the Swarm
/// delivers from.
pub const PLAN_RECORD_FIELDS: [&str; 2] = ["instances", "deployments"];

fn ownership(entries: &[ManagedFieldsEntry]) -> impl Iterator<Item = Ownership<'_>> {
    entries.iter().map(|entry| Ownership {
        manager: entry.manager.as_deref(),
        fields: entry.fields_v1.as_ref().map(|fields| &fields.0),
    })
}

/// The controller (field manager `shoal-controller`) owns, under one of `parents`, a
/// field `wanted` accepts.
pub fn controller_owns(
    entries: &[ManagedFieldsEntry],
    parents: &[&str],
    wanted: &dyn Fn(&str) -> bool,
) -> bool {
    managed_fields::controller_owns(ownership(entries), parents, wanted)
}

/// The first field manager other than the controller that owns, under one of
/// `parents`, a field `wanted` accepts.
pub fn other_owner(
    entries: &[ManagedFieldsEntry],
    parents: &[&str],
    wanted: &dyn Fn(&str) -> bool,
) -> Option<String> {
    managed_fields::other_owner(ownership(entries), parents, wanted)
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
    fn a_manager_without_a_name_is_named_as_unnamed() {
        let entries = [entry(None, json!({"f:status": {"f:instances": {}}}))];
        assert_eq!(
            plan_record_editors(&entries),
            BTreeMap::from([(
                "instances".to_owned(),
                shoal_core::managed_fields::UNNAMED_MANAGER.to_owned()
            )])
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
