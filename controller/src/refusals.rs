//! Refused annotations, recorded the same way for Swarms and DeploymentPlans:
//! the refused value goes into `status.refusedAnnotations`, and a Warning is
//! emitted only when that value was not already recorded there, so a standing
//! refused annotation is announced once per value, not on every pass.

use std::collections::BTreeMap;

use crate::planned::PlannedEvent;

/// Records that `annotation` with `value` was refused (`reason`, `note`):
/// into `refused` always, and a Warning into `events` unless `previous` (the
/// refusals recorded by the last pass) already holds this very value.
pub fn record_refusal(
    previous: &BTreeMap<String, String>,
    annotation: &str,
    value: &str,
    (reason, note): (&str, String),
    refused: &mut BTreeMap<String, String>,
    events: &mut Vec<PlannedEvent>,
) {
    // Recorded as the status keeps it (cut to the schema's bound), so that a standing
    // long value compares equal to the one recorded and is not announced again.
    let value = crate::limits::clip(value, crate::limits::MAX_ENTRY_MESSAGE);
    if previous.get(annotation) != Some(&value) {
        events.push(PlannedEvent {
            warning: true,
            reason: reason.to_owned(),
            note,
        });
    }
    refused.insert(annotation.to_owned(), value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_value_is_announced_once_and_a_new_value_again() {
        let mut previous = BTreeMap::new();
        let mut events = Vec::new();
        let mut refused = BTreeMap::new();
        let refuse = |previous: &BTreeMap<String, String>,
                      value: &str,
                      refused: &mut BTreeMap<String, String>,
                      events: &mut Vec<PlannedEvent>| {
            record_refusal(
                previous,
                "shoal.dev/approve",
                value,
                ("ApprovalRefused", format!("{value} is wrong")),
                refused,
                events,
            );
        };
        refuse(&previous, "a", &mut refused, &mut events);
        assert_eq!(events.len(), 1);
        assert!(events[0].warning && events[0].reason == "ApprovalRefused");
        previous = std::mem::take(&mut refused);
        refuse(&previous, "a", &mut refused, &mut events);
        assert_eq!(
            events.len(),
            1,
            "the same standing value is not announced again"
        );
        assert_eq!(
            refused.get("shoal.dev/approve").map(String::as_str),
            Some("a")
        );
        previous = std::mem::take(&mut refused);
        refuse(&previous, "b", &mut refused, &mut events);
        assert_eq!(events.len(), 2, "a new value is");
    }
}
