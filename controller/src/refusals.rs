//! Refused annotations, recorded the same way for Swarms and DeploymentPlans:
//! the refused value goes into `status.refusedAnnotations`, and a Warning is
//! emitted only when that value was not already recorded there, so a standing
//! refused annotation is announced once per value, not on every pass.
//!
//! What is recorded is bounded whatever the user wrote (an annotation may hold
//! 256 KiB): a value over [`MAX_KEPT_VALUE`] bytes is kept as its beginning, its
//! length and a hash of the whole ([`kept_value`]), so a different value is still
//! announced, and the words of many refusals are cut by [`summarize`].

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
    let kept = kept_value(value);
    if previous.get(annotation) != Some(&kept) {
        events.push(PlannedEvent {
            warning: true,
            reason: reason.to_owned(),
            note,
        });
    }
    refused.insert(annotation.to_owned(), kept);
}

/// The longest refused value recorded as it is, in bytes.
pub const MAX_KEPT_VALUE: usize = 512;

/// The most the words of one pass's refusals of one annotation take, in bytes.
pub const MAX_SUMMARY: usize = 4096;

/// Cuts `text` to at most `max` bytes on a character boundary.
fn head(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A refused value as the status records it: itself up to [`MAX_KEPT_VALUE`]
/// bytes; beyond, its beginning, its length and an xxh3 of the whole (so two
/// long values that differ are recorded differently, and each is announced).
pub fn kept_value(value: &str) -> String {
    if value.len() <= MAX_KEPT_VALUE {
        return value.to_owned();
    }
    format!(
        "{}… ({} bytes, xxh3 {:016x})",
        head(value, 256),
        value.len(),
        shoal_core::hash::key_hash(value.as_bytes())
    )
}

/// The refusals of one annotation in words, `; `-separated, at most
/// [`MAX_SUMMARY`] bytes: those that fit, then how many more there were.
pub fn summarize(refusals: &[String]) -> String {
    let mut text = String::new();
    for (index, refusal) in refusals.iter().enumerate() {
        let separator = if index == 0 { "" } else { "; " };
        if text.len() + separator.len() + refusal.len() > MAX_SUMMARY {
            let rest = refusals.len() - index;
            if index == 0 {
                text.push_str(head(refusal, MAX_SUMMARY));
                text.push('…');
                if rest > 1 {
                    text.push_str(&format!("; and {} more", rest - 1));
                }
            } else {
                text.push_str(&format!("; and {rest} more"));
            }
            return text;
        }
        text.push_str(separator);
        text.push_str(refusal);
    }
    text
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

    #[test]
    fn a_long_refused_value_is_kept_short_and_still_told_apart() {
        let junk = "x,".repeat(115_000);
        let kept = kept_value(&junk);
        assert!(kept.len() <= MAX_KEPT_VALUE, "{}", kept.len());
        assert!(kept.contains("230000 bytes"), "{kept}");
        let other = format!("{junk}y");
        assert_ne!(kept_value(&other), kept);
        assert_eq!(kept_value("short/value"), "short/value");

        let mut events = Vec::new();
        let mut refused = BTreeMap::new();
        let reason = || ("ApprovalRefused", "junk".to_owned());
        record_refusal(
            &BTreeMap::new(),
            "a",
            &junk,
            reason(),
            &mut refused,
            &mut events,
        );
        let previous = std::mem::take(&mut refused);
        record_refusal(&previous, "a", &junk, reason(), &mut refused, &mut events);
        assert_eq!(events.len(), 1, "a long standing value is announced once");
    }

    #[test]
    fn many_refusals_are_summarized_within_the_bound() {
        let many: Vec<String> = (0..100_000)
            .map(|i| format!("item {i} is malformed"))
            .collect();
        let text = summarize(&many);
        assert!(text.len() <= MAX_SUMMARY + 64, "{}", text.len());
        assert!(text.starts_with("item 0 is malformed; item 1"), "{text}");
        assert!(text.ends_with("more"), "{text}");
        let one = vec!["é".repeat(5000)];
        assert!(summarize(&one).len() <= MAX_SUMMARY + 4);
        assert_eq!(summarize(&["a".into(), "b".into()]), "a; b");
    }
}
