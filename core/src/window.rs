//! Maintenance windows: when an approved change may start applying. The one
//! rule both kinds use (`spec.approval.windows` of a Swarm and of a
//! DeploymentPlan). Pure: the time is an input, and time zones come from the
//! database compiled into the binary (jiff's bundled tzdb), so the answer is
//! the same on every host whatever its `/usr/share/zoneinfo`.
//!
//! A window is a *start*, a 5-field cron expression (`minute hour
//! day-of-month month day-of-week`, or one of `@hourly`, `@daily`,
//! `@weekly`, `@monthly`, `@yearly`), a *duration* in the one duration syntax
//! ([`crate::duration`]) and a *time zone* (an IANA name, `UTC` when unset).
//! It is open from each start for its duration; windows may overlap, and a
//! duration longer than the time between starts keeps the window open.
//!
//! Cron's rules, as Vixie cron has them: fields take `*`, numbers, ranges
//! `a-b`, steps `*/n`, `a-b/n` and `a/n` (from `a` to the field's end) and
//! comma lists; months and weekdays also take names (`JAN`, `MON`, any
//! case); weekday `0` and `7` are Sunday. When both day fields are
//! restricted (neither starts with `*`), a day matches when *either* does.
//!
//! Clock changes: a start that falls in a skipped hour (spring forward)
//! opens when the clocks read it an hour later (jiff's "compatible" rule);
//! a start in a repeated hour (fall back) opens once, at its first
//! occurrence.
//!
//! Hand-written rather than a crate: the cron crates (`croner`, `cron`)
//! compute occurrences with `chrono`, and the project's one time library is
//! `jiff`; the rule is ~200 lines, tested below.

use std::fmt;
use std::sync::OnceLock;
use std::time::Duration;

use jiff::civil::{Date, Time};
use jiff::tz::{TimeZone, TimeZoneDatabase};
use jiff::{SignedDuration, Timestamp, ToSpan};

/// The most windows one object may list.
pub const MAX_WINDOWS: usize = 16;

/// The longest window: 31 days.
pub const MAX_DURATION: Duration = Duration::from_secs(31 * 24 * 3600);

/// The shortest window: one minute (starts are whole minutes).
pub const MIN_DURATION: Duration = Duration::from_secs(60);

/// How far ahead a next start is looked for: every schedule accepted has a
/// start within 8 years (29 February), so this is never reached for one.
const SEARCH_YEARS: i16 = 9;

/// One window as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowText<'a> {
    /// The cron expression.
    pub start: &'a str,
    /// The duration.
    pub duration: &'a str,
    /// The IANA time zone; `None` is UTC.
    pub time_zone: Option<&'a str>,
}

/// Why a window was refused, naming the window (1-based, as a user counts)
/// and the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// The cron expression is not one.
    #[error(
        "window {window}: start {text:?} is not a 5-field cron expression (minute hour day-of-month month day-of-week, e.g. \"0 2 * * SAT\"): {reason}"
    )]
    Start {
        /// Which window, from 1.
        window: usize,
        /// The expression.
        text: String,
        /// What is wrong.
        reason: String,
    },
    /// The cron expression names no day that exists (e.g. 30 February).
    #[error("window {window}: start {text:?} never opens: no month it names has the days it names")]
    NeverOpens {
        /// Which window, from 1.
        window: usize,
        /// The expression.
        text: String,
    },
    /// The duration is not one, or is out of bounds.
    #[error("window {window}: duration {text:?}: {reason}")]
    Duration {
        /// Which window, from 1.
        window: usize,
        /// The duration as written.
        text: String,
        /// What is wrong.
        reason: String,
    },
    /// The time zone is not an IANA name the bundled database knows.
    #[error(
        "window {window}: time zone {name:?} is not an IANA time zone name (e.g. Europe/Berlin, America/New_York, UTC)"
    )]
    TimeZone {
        /// Which window, from 1.
        window: usize,
        /// The name as written.
        name: String,
    },
    /// More windows than [`MAX_WINDOWS`].
    #[error("{count} windows listed, at most {MAX_WINDOWS}")]
    TooMany {
        /// How many were listed.
        count: usize,
    },
}

/// A set of values of one cron field, as a bit mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Field(u64);

impl Field {
    fn has(self, value: u8) -> bool {
        value < 64 && self.0 & (1 << value) != 0
    }
}

/// A parsed cron expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    minutes: Field,
    hours: Field,
    days: Field,
    months: Field,
    weekdays: Field,
    /// Whether the day-of-month field starts with `*` (then days match on both fields).
    days_star: bool,
    /// Whether the day-of-week field starts with `*`.
    weekdays_star: bool,
}

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// Reads one field: `min..=max`, with `names` for `min, min+1, …`.
fn field(text: &str, what: &str, min: u8, max: u8, names: &[&str]) -> Result<Field, String> {
    let value = |part: &str| -> Result<u8, String> {
        if let Some(index) = names
            .iter()
            .position(|name| name.eq_ignore_ascii_case(part))
        {
            return Ok(min + index as u8);
        }
        let number: u8 = part
            .parse()
            .map_err(|_| format!("{what} {part:?} is not a number"))?;
        if number < min || number > max {
            return Err(format!("{what} {number} is outside {min}-{max}"));
        }
        Ok(number)
    };
    let mut mask = 0u64;
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => {
                let step: u8 = step
                    .parse()
                    .ok()
                    .filter(|step| *step > 0)
                    .ok_or_else(|| format!("{what} step {step:?} is not a number above 0"))?;
                (range, Some(step))
            }
            None => (item, None),
        };
        let (from, to) = if range == "*" {
            (min, max)
        } else if let Some((from, to)) = range.split_once('-') {
            (value(from)?, value(to)?)
        } else {
            let from = value(range)?;
            // `a/n` runs from `a` to the field's end.
            (from, if step.is_some() { max } else { from })
        };
        if from > to {
            return Err(format!("{what} range {range:?} runs backwards"));
        }
        let mut at = from;
        loop {
            mask |= 1 << at;
            match at.checked_add(step.unwrap_or(1)) {
                Some(next) if next <= to => at = next,
                _ => break,
            }
        }
    }
    Ok(Field(mask))
}

impl Schedule {
    /// Parses a cron expression (see the module docs); the error says what is wrong.
    pub fn parse(text: &str) -> Result<Schedule, String> {
        let expanded = match text.trim() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = fields[..] else {
            return Err(format!("it has {} fields, not 5", fields.len()));
        };
        let mut weekdays = field(weekday, "day-of-week", 0, 7, &WEEKDAYS)?;
        if weekdays.has(7) {
            // 7 is Sunday, as 0 is.
            weekdays = Field((weekdays.0 & !(1 << 7)) | 1);
        }
        Ok(Schedule {
            minutes: field(minute, "minute", 0, 59, &[])?,
            hours: field(hour, "hour", 0, 23, &[])?,
            days: field(day, "day-of-month", 1, 31, &[])?,
            months: field(month, "month", 1, 12, &MONTHS)?,
            weekdays,
            days_star: day.starts_with('*'),
            weekdays_star: weekday.starts_with('*'),
        })
    }

    /// Whether some month it names has a day it names (else it never matches).
    fn ever_matches(&self) -> bool {
        if !self.days_star && !self.weekdays_star {
            return true; // either day field may match, and every weekday comes round
        }
        const LONGEST: [u8; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
        (1..=12u8).any(|month| {
            self.months.has(month)
                && (1..=LONGEST[usize::from(month - 1)]).any(|day| self.days.has(day))
        })
    }

    fn day_matches(&self, date: Date) -> bool {
        let by_day = self.days.has(date.day() as u8);
        let by_weekday = self
            .weekdays
            .has(date.weekday().to_sunday_zero_offset() as u8);
        if self.days_star || self.weekdays_star {
            by_day && by_weekday
        } else {
            by_day || by_weekday
        }
    }

    /// The first start at or after `after`, as the clocks of `zone` read it;
    /// `None` past the search horizon (not for a schedule [`Schedule::parse`]
    /// accepted and [`Windows::parse`] checked).
    pub fn next_start(&self, after: Timestamp, zone: &TimeZone) -> Option<Timestamp> {
        let local = zone.to_datetime(after);
        // Starts are whole minutes: begin at the first whole minute not before `after`.
        let floor = local.with().second(0).subsec_nanosecond(0).build().ok()?;
        let mut at = if floor < local {
            floor.checked_add(1.minute()).ok()?
        } else {
            floor
        };
        let horizon = at.date().checked_add(SEARCH_YEARS.years()).ok()?;
        let midnight = |date: Date| date.to_datetime(Time::midnight());
        while at.date() <= horizon {
            let date = at.date();
            if !self.months.has(date.month() as u8) {
                at = midnight(date.last_of_month().tomorrow().ok()?);
            } else if !self.day_matches(date) {
                at = midnight(date.tomorrow().ok()?);
            } else if !self.hours.has(at.hour() as u8) {
                at = at
                    .with()
                    .minute(0)
                    .build()
                    .ok()?
                    .checked_add(1.hour())
                    .ok()?;
            } else if !self.minutes.has(at.minute() as u8) {
                at = at.checked_add(1.minute()).ok()?;
            } else {
                let start = zone.to_ambiguous_timestamp(at).compatible().ok()?;
                if start >= after {
                    return Some(start);
                }
                // The first occurrence of a repeated hour, already past.
                at = at.checked_add(1.minute()).ok()?;
            }
        }
        None
    }
}

/// One maintenance window, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// Its place in the list, from 1.
    pub number: usize,
    /// The cron expression as written.
    pub start_text: String,
    /// The duration as written.
    pub duration_text: String,
    /// The time zone's name (`UTC` when unset).
    pub zone_name: String,
    schedule: Schedule,
    duration: SignedDuration,
    zone: TimeZone,
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "window {} ({:?} for {} in {})",
            self.number, self.start_text, self.duration_text, self.zone_name
        )
    }
}

/// The bundled time zone database (see the module docs).
fn zones() -> &'static TimeZoneDatabase {
    static ZONES: OnceLock<TimeZoneDatabase> = OnceLock::new();
    ZONES.get_or_init(TimeZoneDatabase::bundled)
}

impl Window {
    /// Checks one window; `number` is its place in the list, from 1.
    pub fn parse(number: usize, text: WindowText<'_>) -> Result<Window, WindowError> {
        let schedule = Schedule::parse(text.start).map_err(|reason| WindowError::Start {
            window: number,
            text: text.start.to_owned(),
            reason,
        })?;
        if !schedule.ever_matches() {
            return Err(WindowError::NeverOpens {
                window: number,
                text: text.start.to_owned(),
            });
        }
        let duration_error = |reason: String| WindowError::Duration {
            window: number,
            text: text.duration.to_owned(),
            reason,
        };
        let duration = crate::duration::parse(text.duration)
            .map_err(|error| duration_error(error.to_string()))?;
        if !(MIN_DURATION..=MAX_DURATION).contains(&duration) {
            return Err(duration_error(
                "a window lasts from 1m to 744h (31 days)".to_owned(),
            ));
        }
        let zone_name = text.time_zone.unwrap_or("UTC");
        let zone = zones().get(zone_name).map_err(|_| WindowError::TimeZone {
            window: number,
            name: zone_name.to_owned(),
        })?;
        Ok(Window {
            number,
            start_text: text.start.to_owned(),
            duration_text: text.duration.to_owned(),
            zone_name: zone_name.to_owned(),
            schedule,
            duration: SignedDuration::try_from(duration)
                .map_err(|error| duration_error(error.to_string()))?,
            zone,
        })
    }

    /// The start of the opening `now` is in, if it is open.
    pub fn open_since(&self, now: Timestamp) -> Option<Timestamp> {
        // An opening holding `now` started after `now - duration`.
        let earliest = now
            .checked_sub(self.duration)
            .ok()?
            .checked_add(SignedDuration::from_nanos(1))
            .ok()?;
        self.schedule
            .next_start(earliest, &self.zone)
            .filter(|start| *start <= now)
    }

    /// The first opening after `now` (strictly).
    pub fn next_open(&self, now: Timestamp) -> Option<Timestamp> {
        let after = now.checked_add(SignedDuration::from_nanos(1)).ok()?;
        self.schedule.next_start(after, &self.zone)
    }

    /// When the opening that started at `start` closes.
    pub fn closes(&self, start: Timestamp) -> Option<Timestamp> {
        start.checked_add(self.duration).ok()
    }
}

/// Where an object's windows stand at one moment.
#[derive(Debug, Clone, PartialEq)]
pub enum Standing<'a> {
    /// No windows: changes apply whenever approved.
    Unrestricted,
    /// A window is open.
    Open {
        /// The window.
        window: &'a Window,
        /// When its opening closes.
        closes: Timestamp,
    },
    /// Every window is closed.
    Closed {
        /// The window that opens first, and when (`None`: past the search horizon).
        next: Option<(&'a Window, Timestamp)>,
    },
}

impl Standing<'_> {
    /// Whether an approved change may start now.
    pub fn allows_start(&self) -> bool {
        !matches!(self, Standing::Closed { .. })
    }

    /// When to look again, from `now`: the next opening while closed.
    pub fn wake_after(&self, now: Timestamp) -> Option<Duration> {
        let Standing::Closed {
            next: Some((_, opens)),
        } = self
        else {
            return None;
        };
        Duration::try_from(now.duration_until(*opens)).ok()
    }

    /// Why a change waits, in words, naming the window and the opening
    /// (RFC 3339, UTC); `None` when nothing waits for a window.
    pub fn waiting_because(&self) -> Option<String> {
        match self {
            Standing::Closed {
                next: Some((window, opens)),
            } => Some(format!(
                "no maintenance window is open; the next opens at {opens} ({window})"
            )),
            Standing::Closed { next: None } => {
                Some("no maintenance window is open, and none opens in the next 9 years".to_owned())
            }
            _ => None,
        }
    }

    /// The next opening, RFC 3339, while closed.
    pub fn next_opening(&self) -> Option<String> {
        match self {
            Standing::Closed {
                next: Some((_, opens)),
            } => Some(opens.to_string()),
            _ => None,
        }
    }
}

/// An object's windows, checked.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Windows(Vec<Window>);

impl Windows {
    /// Checks every window; the first bad one is refused, naming it.
    pub fn parse<'a>(
        texts: impl ExactSizeIterator<Item = WindowText<'a>>,
    ) -> Result<Windows, WindowError> {
        if texts.len() > MAX_WINDOWS {
            return Err(WindowError::TooMany { count: texts.len() });
        }
        texts
            .enumerate()
            .map(|(index, text)| Window::parse(index + 1, text))
            .collect::<Result<Vec<_>, _>>()
            .map(Windows)
    }

    /// Whether no window is listed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Where the windows stand at `now`.
    pub fn standing(&self, now: Timestamp) -> Standing<'_> {
        if self.0.is_empty() {
            return Standing::Unrestricted;
        }
        let open = self.0.iter().find_map(|window| {
            let since = window.open_since(now)?;
            Some(Standing::Open {
                window,
                closes: window.closes(since)?,
            })
        });
        open.unwrap_or_else(|| Standing::Closed {
            next: self
                .0
                .iter()
                .filter_map(|window| Some((window, window.next_open(now)?)))
                .min_by_key(|(window, opens)| (*opens, window.number)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn window(start: &str, duration: &str, zone: Option<&str>) -> Window {
        Window::parse(
            1,
            WindowText {
                start,
                duration,
                time_zone: zone,
            },
        )
        .unwrap()
    }

    fn next(start: &str, zone: &str, after: &str) -> String {
        let zone = zones().get(zone).unwrap();
        Schedule::parse(start)
            .unwrap()
            .next_start(at(after), &zone)
            .unwrap()
            .to_string()
    }

    #[test]
    fn fields_take_lists_ranges_steps_and_names() {
        assert_eq!(
            next("*/15 * * * *", "UTC", "2026-03-02T10:01:00Z"),
            "2026-03-02T10:15:00Z"
        );
        assert_eq!(
            next("5,50 9-17 * * *", "UTC", "2026-03-02T17:51:00Z"),
            "2026-03-03T09:05:00Z"
        );
        assert_eq!(
            next("0 2 * * sat", "UTC", "2026-03-02T00:00:00Z"),
            "2026-03-07T02:00:00Z"
        );
        assert_eq!(
            next("0 2 * * 7", "UTC", "2026-03-02T00:00:00Z"),
            "2026-03-08T02:00:00Z"
        );
        assert_eq!(
            next("0 0 1 Jan-Mar/2 *", "UTC", "2026-01-02T00:00:00Z"),
            "2026-03-01T00:00:00Z"
        );
        assert_eq!(
            next("30 22/1 * * *", "UTC", "2026-03-02T23:31:00Z"),
            "2026-03-03T22:30:00Z"
        );
        assert_eq!(
            next("@weekly", "UTC", "2026-03-02T00:00:00Z"),
            "2026-03-08T00:00:00Z"
        );
    }

    #[test]
    fn a_start_exactly_now_is_a_start_and_seconds_round_up() {
        assert_eq!(
            next("0 2 * * *", "UTC", "2026-03-02T02:00:00Z"),
            "2026-03-02T02:00:00Z"
        );
        assert_eq!(
            next("0 2 * * *", "UTC", "2026-03-02T02:00:00.5Z"),
            "2026-03-03T02:00:00Z"
        );
    }

    #[test]
    fn both_day_fields_restricted_match_either_as_vixie_cron_does() {
        // The 13th, or any Friday.
        assert_eq!(
            next("0 0 13 * FRI", "UTC", "2026-03-01T00:00:00Z"),
            "2026-03-06T00:00:00Z"
        );
        assert_eq!(
            next("0 0 13 * FRI", "UTC", "2026-03-07T00:00:00Z"),
            "2026-03-13T00:00:00Z"
        );
        // Numbers in both are restricted too: the Friday after the 14th.
        assert_eq!(
            next("0 0 13 * 5", "UTC", "2026-03-14T00:00:00Z"),
            "2026-03-20T00:00:00Z"
        );
        // A day field starting with `*` is not a restriction: both must match
        // (an odd day that is a Friday; either alone would be the 7th).
        assert_eq!(
            next("0 0 */2 * 5", "UTC", "2026-03-07T00:00:00Z"),
            "2026-03-13T00:00:00Z"
        );
    }

    #[test]
    fn the_29th_of_february_is_found_years_ahead() {
        assert_eq!(
            next("0 0 29 2 *", "UTC", "2026-03-01T00:00:00Z"),
            "2028-02-29T00:00:00Z"
        );
    }

    #[test]
    fn bad_expressions_are_refused_saying_what_is_wrong() {
        for (text, says) in [
            ("0 2 * *", "4 fields"),
            ("0 2 * * * *", "6 fields"),
            ("60 * * * *", "minute 60 is outside 0-59"),
            ("* 24 * * *", "hour 24"),
            ("* * 0 * *", "day-of-month 0"),
            ("* * * 13 *", "month 13"),
            ("* * * * 8", "day-of-week 8"),
            ("*/0 * * * *", "step"),
            ("5-1 * * * *", "backwards"),
            ("x * * * *", "\"x\" is not a number"),
            ("* * * FOO *", "\"FOO\""),
            ("", "0 fields"),
        ] {
            let error = Schedule::parse(text).unwrap_err();
            assert!(error.contains(says), "{text:?}: {error}");
        }
    }

    #[test]
    fn windows_are_refused_naming_the_window_and_the_input() {
        let texts = [
            WindowText {
                start: "0 2 * * *",
                duration: "4h",
                time_zone: Some("Europe/Berlin"),
            },
            WindowText {
                start: "0 2 30 2 *",
                duration: "4h",
                time_zone: None,
            },
        ];
        let error = Windows::parse(texts.into_iter()).unwrap_err();
        assert!(
            matches!(error, WindowError::NeverOpens { window: 2, .. }),
            "{error}"
        );
        assert!(error.to_string().contains("window 2") && error.to_string().contains("0 2 30 2 *"));
        for (text, says) in [
            (
                WindowText {
                    start: "0 2 * * *",
                    duration: "4x",
                    time_zone: None,
                },
                "\"4x\"",
            ),
            (
                WindowText {
                    start: "0 2 * * *",
                    duration: "30s",
                    time_zone: None,
                },
                "from 1m to 744h",
            ),
            (
                WindowText {
                    start: "0 2 * * *",
                    duration: "745h",
                    time_zone: None,
                },
                "from 1m to 744h",
            ),
            (
                WindowText {
                    start: "0 2 * * *",
                    duration: "1h",
                    time_zone: Some("Mars/Olympus"),
                },
                "\"Mars/Olympus\"",
            ),
            (
                WindowText {
                    start: "0 2 * *",
                    duration: "1h",
                    time_zone: None,
                },
                "\"0 2 * *\"",
            ),
        ] {
            let error = Window::parse(1, text).unwrap_err().to_string();
            assert!(
                error.contains("window 1") && error.contains(says),
                "{error}"
            );
        }
        let many = vec![
            WindowText {
                start: "@daily",
                duration: "1h",
                time_zone: None
            };
            17
        ];
        assert_eq!(
            Windows::parse(many.into_iter()),
            Err(WindowError::TooMany { count: 17 })
        );
    }

    #[test]
    fn a_window_spanning_midnight_is_open_on_both_sides_of_it() {
        let window = window("0 22 * * *", "4h", Some("UTC"));
        assert_eq!(
            window.open_since(at("2026-03-02T23:59:00Z")),
            Some(at("2026-03-02T22:00:00Z"))
        );
        assert_eq!(
            window.open_since(at("2026-03-03T01:59:59Z")),
            Some(at("2026-03-02T22:00:00Z"))
        );
        assert_eq!(
            window.open_since(at("2026-03-03T02:00:00Z")),
            None,
            "closes at the end"
        );
        assert_eq!(window.open_since(at("2026-03-02T21:59:59Z")), None);
        assert_eq!(
            window.next_open(at("2026-03-03T02:00:00Z")),
            Some(at("2026-03-03T22:00:00Z"))
        );
    }

    #[test]
    fn a_duration_longer_than_the_period_keeps_the_window_open() {
        let window = window("0 * * * *", "90m", None);
        for minute in 0..180 {
            let now = at("2026-03-02T10:00:00Z") + SignedDuration::from_mins(minute);
            assert!(window.open_since(now).is_some(), "{now}");
        }
    }

    #[test]
    fn next_open_from_inside_is_the_following_opening_and_standing_says_open() {
        let windows = Windows::parse(
            [WindowText {
                start: "0 2 * * SAT",
                duration: "4h",
                time_zone: Some("Europe/Berlin"),
            }]
            .into_iter(),
        )
        .unwrap();
        // Saturday 7 March 2026, 03:00 in Berlin (CET, UTC+1) is 02:00Z: open since 01:00Z.
        let inside = at("2026-03-07T02:00:00Z");
        assert_eq!(
            windows.standing(inside),
            Standing::Open {
                window: &windows.0[0],
                closes: at("2026-03-07T05:00:00Z")
            }
        );
        assert_eq!(
            windows.0[0].next_open(inside),
            Some(at("2026-03-14T01:00:00Z"))
        );
        let outside = at("2026-03-07T05:00:00Z");
        let standing = windows.standing(outside);
        assert!(!standing.allows_start());
        assert_eq!(
            standing.next_opening().as_deref(),
            Some("2026-03-14T01:00:00Z")
        );
        assert_eq!(
            standing.wake_after(outside),
            Some(Duration::from_secs(7 * 24 * 3600 - 4 * 3600))
        );
        let why = standing.waiting_because().unwrap();
        assert!(
            why.contains("2026-03-14T01:00:00Z")
                && why.contains("window 1")
                && why.contains("Europe/Berlin"),
            "{why}"
        );
    }

    #[test]
    fn the_earliest_of_several_windows_is_the_next_and_any_open_one_opens_the_gate() {
        let windows = Windows::parse(
            [
                WindowText {
                    start: "0 6 * * *",
                    duration: "1h",
                    time_zone: None,
                },
                WindowText {
                    start: "0 3 * * *",
                    duration: "1h",
                    time_zone: None,
                },
            ]
            .into_iter(),
        )
        .unwrap();
        let Standing::Closed {
            next: Some((window, opens)),
        } = windows.standing(at("2026-03-02T01:00:00Z"))
        else {
            panic!("closed")
        };
        assert_eq!((window.number, opens), (2, at("2026-03-02T03:00:00Z")));
        assert!(windows.standing(at("2026-03-02T06:30:00Z")).allows_start());
        assert_eq!(
            Windows::default().standing(at("2026-03-02T01:00:00Z")),
            Standing::Unrestricted
        );
    }

    #[test]
    fn a_start_in_the_skipped_hour_opens_an_hour_later_by_the_clock() {
        // Berlin springs forward on 29 March 2026: 02:00 CET becomes 03:00 CEST (01:00Z).
        assert_eq!(
            next("30 2 * * *", "Europe/Berlin", "2026-03-29T00:00:00Z"),
            "2026-03-29T01:30:00Z"
        );
        assert_eq!(
            next("30 2 * * *", "Europe/Berlin", "2026-03-29T01:31:00Z"),
            "2026-03-30T00:30:00Z"
        );
        // The day before and after keep their offsets: 02:30 CET, 02:30 CEST.
        assert_eq!(
            next("30 2 * * *", "Europe/Berlin", "2026-03-28T00:00:00Z"),
            "2026-03-28T01:30:00Z"
        );
    }

    #[test]
    fn a_start_in_the_repeated_hour_opens_once() {
        // Berlin falls back on 25 October 2026: 02:00-03:00 happens twice (00:00Z-02:00Z).
        assert_eq!(
            next("30 2 * * *", "Europe/Berlin", "2026-10-25T00:00:00Z"),
            "2026-10-25T00:30:00Z"
        );
        // Past the first 02:30 (CEST), the second (CET, 01:30Z) is not another start.
        assert_eq!(
            next("30 2 * * *", "Europe/Berlin", "2026-10-25T00:31:00Z"),
            "2026-10-26T01:30:00Z"
        );
    }

    #[test]
    fn a_window_across_a_clock_change_lasts_its_duration_in_real_time() {
        // 01:00 CET on 29 March 2026 is 00:00Z; 4h later is 04:00Z (06:00 CEST by the clock).
        let window = window("0 1 * * *", "4h", Some("Europe/Berlin"));
        assert!(window.open_since(at("2026-03-29T03:59:00Z")).is_some());
        assert!(window.open_since(at("2026-03-29T04:00:00Z")).is_none());
    }

    proptest! {
        /// Whatever the schedule and time, the next start is a start (open then), on
        /// the weekday asked for, not before `now`, within a week and a day, and the
        /// minute before it is not one.
        #[test]
        fn next_start_is_the_first_start_not_before_now(
            minute in 0u8..60, hour in 0u8..24, weekday in 0u8..7,
            offset in 0i64..(4 * 365 * 24 * 60),
            zone in prop::sample::select(vec!["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]),
        ) {
            let start = format!("{minute} {hour} * * {weekday}");
            let window = window(&start, "1m", Some(zone));
            let now = at("2026-01-01T00:00:00Z") + SignedDuration::from_mins(offset);
            let next = window.schedule.next_start(now, &window.zone).unwrap();
            prop_assert!(next >= now);
            prop_assert!(next.duration_since(now) <= SignedDuration::from_hours(8 * 24));
            prop_assert_eq!(window.open_since(next), Some(next));
            let local = window.zone.to_datetime(next);
            prop_assert_eq!(local.weekday().to_sunday_zero_offset() as u8, weekday);
            // The minute before it (if not before `now`) is closed: a 1m window
            // opening there would have been the next start.
            let before = next - SignedDuration::from_mins(1);
            if before >= now {
                prop_assert!(window.open_since(before).is_none());
            }
        }

        #[test]
        fn parsing_any_text_never_panics(text in ".{0,40}") {
            let _ = Schedule::parse(&text);
        }
    }
}
