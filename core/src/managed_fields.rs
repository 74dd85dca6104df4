//! The one reader of `metadata.managedFields`: which field manager owns which fields.
//!
//! Server-side field ownership records every writer of each field, so a hand edit
//! (`kubectl edit`, `patch`, `apply`) of something only the controller writes shows as
//! another manager owning it. The controller (Swarm slices and indexes, a plan's
//! placement record) and the sidecar (the slice it is handed) ask this module, never
//! the JSON. Pure: an entry is its manager's name and its `fieldsV1` document, as the
//! API types hold them.

use serde_json::Value;

use crate::names::CONTROLLER_FIELD_MANAGER;

/// How a field manager without a name is named in messages.
pub const UNNAMED_MANAGER: &str = "an unnamed field manager";

/// One `metadata.managedFields` entry as this reader needs it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ownership<'a> {
    /// The field manager's name (`shoal-controller`, `kubectl-edit`, ...).
    pub manager: Option<&'a str>,
    /// Its `fieldsV1` document (`{"f:data": {"f:slice.yaml": {}}}`).
    pub fields: Option<&'a Value>,
}

impl Ownership<'_> {
    /// The names (without `f:`) of the fields this entry owns directly under
    /// `f:<parent>`.
    fn owned_under(&self, parent: &str) -> impl Iterator<Item = &str> {
        self.fields
            .and_then(|fields| fields.get(format!("f:{parent}")))
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|owned| owned.keys())
            .map(|field| field.strip_prefix("f:").unwrap_or(field))
    }

    /// This entry owns, under one of `parents`, a field `wanted` accepts.
    fn owns(&self, parents: &[&str], wanted: &dyn Fn(&str) -> bool) -> bool {
        parents
            .iter()
            .any(|parent| self.owned_under(parent).any(wanted))
    }

    fn is_controller(&self) -> bool {
        self.manager == Some(CONTROLLER_FIELD_MANAGER)
    }
}

/// The controller (field manager `shoal-controller`) owns, under one of `parents`, a
/// field `wanted` accepts.
pub fn controller_owns<'a>(
    entries: impl IntoIterator<Item = Ownership<'a>>,
    parents: &[&str],
    wanted: &dyn Fn(&str) -> bool,
) -> bool {
    entries
        .into_iter()
        .any(|entry| entry.is_controller() && entry.owns(parents, wanted))
}

/// The first field manager other than the controller that owns, under one of
/// `parents`, a field `wanted` accepts ([`UNNAMED_MANAGER`] for one without a name).
pub fn other_owner<'a>(
    entries: impl IntoIterator<Item = Ownership<'a>>,
    parents: &[&str],
    wanted: &dyn Fn(&str) -> bool,
) -> Option<String> {
    entries
        .into_iter()
        .find(|entry| !entry.is_controller() && entry.owns(parents, wanted))
        .map(|entry| entry.manager.unwrap_or(UNNAMED_MANAGER).to_owned())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn entry<'a>(manager: Option<&'a str>, fields: &'a Value) -> Ownership<'a> {
        Ownership {
            manager,
            fields: Some(fields),
        }
    }

    #[test]
    fn a_data_key_another_manager_wrote_names_that_manager() {
        let ours_written = json!({"f:data": {"f:slice.yaml": {}}});
        let edited = json!({"f:binaryData": {"f:slice.yaml.gz": {}}});
        let entries = [
            entry(Some("shoal-controller"), &ours_written),
            entry(Some("kubectl-edit"), &edited),
        ];
        let ours = |field: &str| field.starts_with("slice.yaml");
        assert_eq!(
            other_owner(entries, &["data", "binaryData"], &ours).as_deref(),
            Some("kubectl-edit")
        );
        assert!(controller_owns(entries, &["data"], &ours));
        assert!(!controller_owns(entries, &["binaryData"], &ours));
    }

    #[test]
    fn a_key_a_user_added_beside_ours_is_nobody_elses_edit() {
        let notes = json!({"f:data": {"f:notes": {}}});
        let ours = |field: &str| field.starts_with("slice.yaml");
        assert_eq!(
            other_owner([entry(Some("kubectl"), &notes)], &["data"], &ours),
            None
        );
    }

    #[test]
    fn a_manager_without_a_name_is_named_as_unnamed() {
        let fields = json!({"f:status": {"f:instances": {}}});
        assert_eq!(
            other_owner([entry(None, &fields)], &["status"], &|_| true).as_deref(),
            Some(UNNAMED_MANAGER)
        );
    }

    #[test]
    fn an_entry_without_fields_owns_nothing() {
        let entries = [Ownership {
            manager: Some("kubectl"),
            fields: None,
        }];
        assert_eq!(other_owner(entries, &["data"], &|_| true), None);
    }
}
