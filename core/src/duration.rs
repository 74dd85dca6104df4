//! The one duration syntax of every Shoal flag and field: what `jiff` parses
//! (`90s`, `5m`, `1h30m`, `250ms`, `1h 30m`, ISO 8601 `PT5M`), plus a bare
//! whole number of seconds (`10`), which the sidecar's flags have always taken.
//! Negative durations and values that do not fit are refused.

use std::time::Duration;

/// Why a duration was refused, naming the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not a duration at all.
    #[error(
        "duration {text:?} is not a duration such as 500ms, 10s, 5m or 1h30m (a bare number is seconds): {reason}"
    )]
    Unreadable {
        /// The input.
        text: String,
        /// What the parser said.
        reason: String,
    },
    /// Below zero.
    #[error("duration {text:?} is negative")]
    Negative {
        /// The input.
        text: String,
    },
}

/// Parses `text` (see the module docs).
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let trimmed = text.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|byte| byte.is_ascii_digit()) {
        return trimmed
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|error| DurationError::Unreadable {
                text: text.to_owned(),
                reason: error.to_string(),
            });
    }
    let signed: jiff::SignedDuration =
        trimmed
            .parse()
            .map_err(|error: jiff::Error| DurationError::Unreadable {
                text: text.to_owned(),
                reason: user_facing(&error.to_string()),
            })?;
    Duration::try_from(signed).map_err(|_| DurationError::Negative {
        text: text.to_owned(),
    })
}

/// The parser's reason without what only a Rust programmer could act on (the
/// format's name, advice to parse into another Rust type).
fn user_facing(reason: &str) -> String {
    let reason = reason
        .strip_prefix("failed to parse input in the \"friendly\" duration format: ")
        .unwrap_or(reason);
    reason
        .split(" (perhaps")
        .next()
        .unwrap_or(reason)
        .to_owned()
}

/// [`parse`] with the error as text, for clap's `value_parser`.
pub fn parse_flag(text: &str) -> Result<Duration, String> {
    parse(text).map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_compounds_and_bare_seconds_are_read() {
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("PT5M"), Ok(Duration::from_secs(300)));
        assert_eq!(parse(" 7 "), Ok(Duration::from_secs(7)));
    }

    #[test]
    fn nonsense_negative_and_overflowing_values_are_refused_naming_the_input() {
        for text in ["", "5x", "ten seconds", "m5", "99999999999999999999999h"] {
            let error = parse(text).unwrap_err();
            assert!(
                matches!(error, DurationError::Unreadable { .. }),
                "{text:?}: {error:?}"
            );
            assert!(error.to_string().contains(&format!("{text:?}")), "{error}");
        }
        assert_eq!(
            parse("-5m"),
            Err(DurationError::Negative {
                text: "-5m".to_owned()
            })
        );
        assert!(parse("99999999999999999999").is_err(), "seconds past u64");
        let days = parse("3d").unwrap_err().to_string();
        assert!(days.contains("days") && !days.contains("jiff"), "{days}");
    }
}
