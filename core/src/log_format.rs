//! How Shoal's binaries write their logs: `--log-format text|json`.
//!
//! Only the choice lives here (parsing, and whether text gets colour); each binary
//! installs its own subscriber from it.

use std::fmt;
use std::str::FromStr;

/// The log line format of `shoal-controller` and `shoal-worker`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines; coloured only on a terminal.
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `target`, `fields.message`, and
    /// the event's other fields), for log collectors.
    Json,
}

/// A `--log-format` value that is neither `text` nor `json`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("log format {0:?} is not one of: text, json")]
pub struct UnknownLogFormat(pub String);

impl FromStr for LogFormat {
    type Err = UnknownLogFormat;

    fn from_str(text: &str) -> Result<LogFormat, UnknownLogFormat> {
        match text.trim().to_ascii_lowercase().as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(UnknownLogFormat(text.to_owned())),
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

impl LogFormat {
    /// Whether lines carry ANSI colour codes: only text written to a terminal. Logs
    /// collected from a pod (not a terminal) stay plain, so `kubectl logs` and log
    /// pipelines show no escape sequences.
    pub fn colours(self, output_is_terminal: bool) -> bool {
        self == LogFormat::Text && output_is_terminal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_formats_parse_in_any_case_and_print_back() {
        for (text, format) in [
            ("text", LogFormat::Text),
            ("JSON", LogFormat::Json),
            (" json ", LogFormat::Json),
        ] {
            assert_eq!(text.parse::<LogFormat>(), Ok(format));
            assert_eq!(format.to_string(), text.trim().to_ascii_lowercase());
        }
    }

    #[test]
    fn an_unknown_format_is_refused_with_the_choices() {
        let error = "logfmt".parse::<LogFormat>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "log format \"logfmt\" is not one of: text, json"
        );
    }

    #[test]
    fn only_text_on_a_terminal_is_coloured() {
        assert!(LogFormat::Text.colours(true));
        assert!(!LogFormat::Text.colours(false));
        assert!(!LogFormat::Json.colours(true));
        assert!(!LogFormat::Json.colours(false));
    }
}
