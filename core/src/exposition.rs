//! Which text format a `/metrics` scrape gets, and the Prometheus text format made from
//! the OpenMetrics text the binaries' registries encode.
//!
//! `prometheus-client` encodes OpenMetrics only. Prometheus itself asks for OpenMetrics,
//! but `promtool check metrics`, `curl` and most other scrapers read the Prometheus text
//! format (0.0.4), where a counter family is declared under its `_total` name: read as
//! that format, OpenMetrics counters are samples without HELP or TYPE. Both binaries
//! keep one registry and one encoder, and convert here, so a metric is defined once.

/// A text exposition format of `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format 0.0.4: what a scraper gets unless it asks otherwise.
    Prometheus,
    /// OpenMetrics 1.0.0, for a scraper whose `Accept` header asks for it.
    OpenMetrics,
}

impl Format {
    /// The `Content-Type` of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// The format an `Accept` header asks for: OpenMetrics when it names
/// `application/openmetrics-text` with a quality above 0 and at least that of any
/// `text/plain` it names; the Prometheus text format otherwise (no header, `*/*`, or
/// anything else), since that is what every scraper reads.
pub fn negotiate(accept: Option<&str>) -> Format {
    let Some(accept) = accept else {
        return Format::Prometheus;
    };
    let mut openmetrics: Option<f32> = None;
    let mut text: Option<f32> = None;
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let quality = parts
            .filter_map(|parameter| parameter.split_once('='))
            .find(|(key, _)| key.trim().eq_ignore_ascii_case("q"))
            .map_or(1.0, |(_, value)| value.trim().parse::<f32>().unwrap_or(0.0));
        let slot = match media.as_str() {
            "application/openmetrics-text" => &mut openmetrics,
            "text/plain" => &mut text,
            _ => continue,
        };
        *slot = Some(slot.map_or(quality, |best| best.max(quality)));
    }
    match openmetrics {
        Some(quality) if quality > 0.0 && quality >= text.unwrap_or(0.0) => Format::OpenMetrics,
        _ => Format::Prometheus,
    }
}

/// `openmetrics` (as a registry encodes it) in `format`: unchanged for OpenMetrics,
/// converted for the Prometheus text format.
pub fn render(openmetrics: &str, format: Format) -> String {
    match format {
        Format::OpenMetrics => openmetrics.to_owned(),
        Format::Prometheus => to_prometheus(openmetrics),
    }
}

/// What is wrong with `text` as an exposition in `format`, one line per problem: a
/// sample whose family is not declared by a `# TYPE` line (under the name `format` wants
/// it: `_total` in the Prometheus format, the bare name in OpenMetrics), or a declared
/// family without `# HELP`. Empty when every family has both, as a scraper wants; for
/// the checks of `/metrics`.
pub fn undeclared(text: &str, format: Format) -> Vec<String> {
    let suffixes: &[&str] = match format {
        Format::Prometheus => &["_bucket", "_sum", "_count"],
        Format::OpenMetrics => &[
            "_total", "_created", "_bucket", "_sum", "_count", "_info", "_gcount", "_gsum",
        ],
    };
    let mut helped = std::collections::BTreeSet::new();
    let mut declared = std::collections::BTreeSet::new();
    let mut problems = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            helped.insert(rest.split(' ').next().unwrap_or(rest).to_owned());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split(' ').next().unwrap_or(rest).to_owned();
            if !helped.contains(&name) {
                problems.push(format!("{name} has TYPE but no HELP before it"));
            }
            declared.insert(name);
        } else if !line.starts_with('#') && !line.trim().is_empty() {
            let name = &line[..line.find(['{', ' ']).unwrap_or(line.len())];
            let family_declared = declared.contains(name)
                || suffixes.iter().any(|suffix| {
                    name.strip_suffix(suffix)
                        .is_some_and(|base| declared.contains(base))
                });
            if !family_declared {
                problems.push(format!("sample {name} has no TYPE for its family"));
            }
        }
    }
    problems.dedup();
    problems
}

/// One family being converted: its OpenMetrics name and type.
struct Family {
    name: String,
    kind: String,
}

/// The Prometheus text format of an OpenMetrics exposition. A family is declared under
/// the name its samples carry (`_total` for a counter, `_info` for an info), with the
/// type Prometheus knows (info and stateset become gauge, unknown untyped); `# UNIT`,
/// `# EOF`, `_created` samples, timestamps and exemplars, which the older format lacks,
/// are left out, and HELP loses the `\"` escape it does not have.
pub fn to_prometheus(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // HELP comes before TYPE, and the name it is printed under depends on the type.
    let mut help: Option<(String, String)> = None;
    let mut family: Option<Family> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help = Some((name.to_owned(), text.replace("\\\"", "\"")));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (sample_name, prometheus_kind) = match kind.trim() {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "stateset" => (name.to_owned(), "gauge"),
                "gauge" => (name.to_owned(), "gauge"),
                "histogram" => (name.to_owned(), "histogram"),
                "summary" => (name.to_owned(), "summary"),
                _ => (name.to_owned(), "untyped"),
            };
            if let Some((_, text)) = help.take().filter(|(helped, _)| helped == name) {
                out.push_str(&format!("# HELP {sample_name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {sample_name} {prometheus_kind}\n"));
            family = Some(Family {
                name: name.to_owned(),
                kind: kind.trim().to_owned(),
            });
        } else if line.starts_with('#') || line.trim().is_empty() {
            // `# UNIT`, `# EOF` and other comments: the 0.0.4 format has none of them.
        } else {
            let sample = sample_without_timestamp(line);
            let name = &sample[..sample.find(['{', ' ']).unwrap_or(sample.len())];
            let created = family.as_ref().is_some_and(|family| {
                matches!(family.kind.as_str(), "counter" | "histogram" | "summary")
                    && name == format!("{}_created", family.name)
            });
            if !created {
                out.push_str(sample);
                out.push('\n');
            }
        }
    }
    out
}

/// A sample line up to its value: name, label set (quoted values may hold spaces and
/// `#`) and value, without the timestamp or exemplar that may follow.
fn sample_without_timestamp(line: &str) -> &str {
    let mut labels_end = 0;
    if let Some(open) = line.find('{')
        && line[..open].find(' ').is_none()
    {
        let mut quoted = false;
        let mut escaped = false;
        for (at, c) in line[open..].char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' if quoted => escaped = true,
                '"' => quoted = !quoted,
                '}' if !quoted => {
                    labels_end = open + at + 1;
                    break;
                }
                _ => {}
            }
        }
    }
    // Without labels the name is the first word; the value is the next word either way.
    let mut at = labels_end;
    let words_to_pass = if labels_end == 0 { 2 } else { 1 };
    for _ in 0..words_to_pass {
        let rest = &line[at..];
        let word_start = at + (rest.len() - rest.trim_start().len());
        let word_len = line[word_start..]
            .find(char::is_whitespace)
            .unwrap_or(line.len() - word_start);
        at = word_start + word_len;
    }
    let value_end = at;
    &line[..value_end]
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPENMETRICS: &str = "\
# HELP shoal_jobs_moved Jobs moved by \\\"applied\\\" revisions.
# TYPE shoal_jobs_moved counter
shoal_jobs_moved_total 3
shoal_jobs_moved_created 1700000000.0
# HELP shoal_api_writes Write requests.
# TYPE shoal_api_writes counter
shoal_api_writes_total{kind=\"a } # b\"} 2 1700000000.5 # {trace=\"x\"} 1.0
# HELP shoal_leader 1 while leading.
# TYPE shoal_leader gauge
shoal_leader 1
# HELP shoal_reconcile_duration_seconds Reconcile duration.
# TYPE shoal_reconcile_duration_seconds histogram
# UNIT shoal_reconcile_duration_seconds seconds
shoal_reconcile_duration_seconds_sum 0.5
shoal_reconcile_duration_seconds_count 1
shoal_reconcile_duration_seconds_bucket{le=\"+Inf\"} 1
# HELP shoal_build Build.
# TYPE shoal_build info
shoal_build_info{version=\"1\"} 1
# EOF
";

    #[test]
    fn counters_are_declared_under_their_total_name_with_help_and_type() {
        let text = to_prometheus(OPENMETRICS);
        assert!(
            text.starts_with(
                "# HELP shoal_jobs_moved_total Jobs moved by \"applied\" revisions.\n\
                 # TYPE shoal_jobs_moved_total counter\n\
                 shoal_jobs_moved_total 3\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("# TYPE shoal_api_writes_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("# HELP shoal_build_info Build.\n# TYPE shoal_build_info gauge\n"),
            "{text}"
        );
    }

    #[test]
    fn what_the_older_format_lacks_is_left_out() {
        let text = to_prometheus(OPENMETRICS);
        for absent in ["# EOF", "# UNIT", "_created", "1700000000.5", "trace"] {
            assert!(!text.contains(absent), "{absent} is still in:\n{text}");
        }
        // A label value holding `}` and `#` is not taken for the end of the labels.
        assert!(
            text.contains("shoal_api_writes_total{kind=\"a } # b\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("shoal_reconcile_duration_seconds_bucket{le=\"+Inf\"} 1\n"));
    }

    #[test]
    fn every_converted_family_has_help_then_type_before_its_samples() {
        // Read as the Prometheus format, OpenMetrics counters are undeclared samples.
        let problems = undeclared(OPENMETRICS, Format::Prometheus);
        assert!(
            problems
                .contains(&"sample shoal_jobs_moved_total has no TYPE for its family".to_owned()),
            "{problems:?}"
        );
        assert_eq!(
            undeclared(OPENMETRICS, Format::OpenMetrics),
            Vec::<String>::new()
        );
        let text = to_prometheus(OPENMETRICS);
        assert_eq!(undeclared(&text, Format::Prometheus), Vec::<String>::new());
        assert_eq!(text.matches("# TYPE ").count(), 5);
        assert!(
            !undeclared("# TYPE a gauge\na 1\n", Format::Prometheus).is_empty(),
            "a family without HELP passes"
        );
    }

    #[test]
    fn openmetrics_is_served_only_to_a_scraper_that_asks_for_it() {
        // Prometheus's own scrape header.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        for (accept, format) in [
            (Some(prometheus), Format::OpenMetrics),
            (None, Format::Prometheus),
            (Some("*/*"), Format::Prometheus),
            (Some("text/plain;version=0.0.4"), Format::Prometheus),
            (
                Some("text/plain, application/openmetrics-text;q=0.5"),
                Format::Prometheus,
            ),
            (
                Some("Application/OpenMetrics-Text; q=0"),
                Format::Prometheus,
            ),
            (
                Some("application/openmetrics-text; q=not-a-number"),
                Format::Prometheus,
            ),
        ] {
            assert_eq!(negotiate(accept), format, "Accept: {accept:?}");
        }
    }

    #[test]
    fn openmetrics_passes_through_unchanged() {
        assert_eq!(render(OPENMETRICS, Format::OpenMetrics), OPENMETRICS);
        assert_ne!(render(OPENMETRICS, Format::Prometheus), OPENMETRICS);
    }
}
