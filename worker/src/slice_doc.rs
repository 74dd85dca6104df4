//! Slice format v1 as the sidecar reads it from its ConfigMap and writes it
//! to the slice file (see ARCHITECTURE.md, "Slice format v1").

use k8s_openapi::api::core::v1::ConfigMap;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::names;
use crate::view::SliceView;

/// The `format` value of slice format v1.
pub const FORMAT_V1: &str = "shoal.dev/slice/v1";

/// Why a slice ConfigMap cannot be used. The last good slice stays in force.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SliceProblem {
    /// The ConfigMap has no slice document.
    #[error("data key {key:?} is missing")]
    MissingKey {
        /// The expected data key.
        key: &'static str,
    },
    /// The document is not slice format v1.
    #[error("{key} is not a valid slice document: {reason}")]
    Parse {
        /// The data key.
        key: &'static str,
        /// What the parser said, naming the field.
        reason: String,
    },
    /// The document is for another member.
    #[error("slice is for member {found:?}, not {expected:?}")]
    WrongMember {
        /// This member.
        expected: String,
        /// The document's member.
        found: String,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    format: String,
    swarm: String,
    member: String,
    revision: u64,
    hash: String,
    #[serde(default)]
    jobs: Vec<String>,
}

/// `sha256:` + hex SHA-256 of every key followed by `\n`, in sorted order.
pub fn jobs_hash(jobs: &[String]) -> String {
    let mut hasher = Sha256::new();
    for job in jobs {
        hasher.update(job.as_bytes());
        hasher.update(b"\n");
    }
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

/// Parses a slice format v1 document and checks it: known format, sorted
/// unique non-empty jobs, and a hash that matches them.
pub fn parse(text: &str) -> Result<SliceView, String> {
    let document: Document = serde_saphyr::from_str(text).map_err(|error| error.to_string())?;
    if document.format != FORMAT_V1 {
        return Err(format!(
            "field `format` is {:?}, expected {FORMAT_V1:?}",
            document.format
        ));
    }
    if let Some(empty) = document.jobs.iter().position(|job| job.is_empty()) {
        return Err(format!("field `jobs` has an empty key at position {empty}"));
    }
    if let Some(pair) = document.jobs.windows(2).find(|pair| pair[0] >= pair[1]) {
        let problem = if pair[0] == pair[1] {
            "duplicated"
        } else {
            "out of byte order"
        };
        return Err(format!(
            "field `jobs` is not sorted and unique: {:?} is {problem}",
            pair[1]
        ));
    }
    let expected = jobs_hash(&document.jobs);
    if document.hash != expected {
        return Err(format!(
            "field `hash` is {:?} but the jobs hash to {expected:?}",
            document.hash
        ));
    }
    Ok(SliceView {
        swarm: document.swarm,
        member: document.member,
        revision: document.revision,
        hash: document.hash,
        jobs: document.jobs,
    })
}

/// Renders a slice as slice format v1.
pub fn render(slice: &SliceView) -> String {
    let mut text = format!(
        "format: {FORMAT_V1}\nswarm: {}\nmember: {}\nrevision: {}\nhash: {}\n",
        yaml_scalar(&slice.swarm),
        yaml_scalar(&slice.member),
        slice.revision,
        slice.hash
    );
    if slice.jobs.is_empty() {
        text.push_str("jobs: []\n");
    } else {
        text.push_str("jobs:\n");
        for job in &slice.jobs {
            text.push_str("- ");
            text.push_str(&yaml_scalar(job));
            text.push('\n');
        }
    }
    text
}

/// A YAML scalar for a key: plain when unambiguous, else double-quoted JSON
/// (which YAML reads back verbatim).
fn yaml_scalar(value: &str) -> String {
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '-' | '_' | '.' | '/'))
        && value
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
        && !value.ends_with(':')
        && !value.contains(": ");
    if plain {
        value.to_string()
    } else {
        serde_json::Value::from(value).to_string()
    }
}

/// Decodes the member's slice ConfigMap and checks it is for `member`.
pub fn decode(config_map: &ConfigMap, member: &str) -> Result<SliceView, SliceProblem> {
    let text = config_map
        .data
        .as_ref()
        .and_then(|data| data.get(names::SLICE_KEY))
        .ok_or(SliceProblem::MissingKey {
            key: names::SLICE_KEY,
        })?;
    let slice = parse(text).map_err(|reason| SliceProblem::Parse {
        key: names::SLICE_KEY,
        reason,
    })?;
    if slice.member != member {
        return Err(SliceProblem::WrongMember {
            expected: member.to_string(),
            found: slice.member,
        });
    }
    Ok(slice)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn slice(jobs: &[&str]) -> SliceView {
        let mut jobs: Vec<String> = jobs.iter().map(|job| job.to_string()).collect();
        jobs.sort();
        SliceView {
            swarm: "demo".into(),
            member: "pool-0".into(),
            revision: 3,
            hash: jobs_hash(&jobs),
            jobs,
        }
    }

    fn config_map(text: &str) -> ConfigMap {
        ConfigMap {
            data: Some(BTreeMap::from([(
                names::SLICE_KEY.to_string(),
                text.to_string(),
            )])),
            ..ConfigMap::default()
        }
    }

    #[test]
    fn a_rendered_slice_parses_back_to_itself() {
        for jobs in [
            &[][..],
            &["stream:cctv0:updated", "stream:foo:new"][..],
            &["a b", "it's", "x: y", "-1", "yes"][..],
        ] {
            let slice = slice(jobs);
            assert_eq!(parse(&render(&slice)), Ok(slice));
        }
    }

    #[test]
    fn the_architecture_example_renders_as_documented() {
        let slice = slice(&["stream:cctv0:updated", "stream:foo:new"]);
        let expected = format!(
            "format: shoal.dev/slice/v1\nswarm: demo\nmember: pool-0\nrevision: 3\nhash: {}\njobs:\n- stream:cctv0:updated\n- stream:foo:new\n",
            slice.hash
        );
        assert_eq!(render(&slice), expected);
    }

    #[test]
    fn the_empty_jobs_hash_is_the_sha256_of_nothing() {
        assert_eq!(jobs_hash(&[]), crate::view::EMPTY_JOBS_HASH);
    }

    #[test]
    fn a_hash_that_does_not_match_the_jobs_is_rejected_naming_the_field() {
        let mut text = render(&slice(&["a", "b"]));
        text = text.replace("- b\n", "- c\n");
        let error = parse(&text).unwrap_err();
        assert!(error.contains("field `hash`"), "{error}");
    }

    #[test]
    fn unsorted_or_duplicated_jobs_are_rejected() {
        let mut tampered = slice(&["a", "b"]);
        tampered.jobs = vec!["b".into(), "a".into()];
        tampered.hash = jobs_hash(&tampered.jobs);
        assert!(
            parse(&render(&tampered))
                .unwrap_err()
                .contains("out of byte order")
        );
        tampered.jobs = vec!["a".into(), "a".into()];
        tampered.hash = jobs_hash(&tampered.jobs);
        assert!(
            parse(&render(&tampered))
                .unwrap_err()
                .contains("duplicated")
        );
    }

    #[test]
    fn an_unknown_format_is_rejected() {
        let text = render(&slice(&["a"])).replace("shoal.dev/slice/v1", "shoal.dev/slice/v9");
        assert!(parse(&text).unwrap_err().contains("field `format`"));
    }

    #[test]
    fn a_config_map_without_the_slice_key_is_a_clear_problem() {
        let problem = decode(&ConfigMap::default(), "pool-0").unwrap_err();
        assert_eq!(problem, SliceProblem::MissingKey { key: "slice.yaml" });
        assert_eq!(problem.to_string(), "data key \"slice.yaml\" is missing");
    }

    #[test]
    fn a_slice_for_another_member_is_refused() {
        let problem = decode(&config_map(&render(&slice(&["a"]))), "pool-1").unwrap_err();
        assert!(
            matches!(problem, SliceProblem::WrongMember { .. }),
            "{problem}"
        );
    }

    #[test]
    fn garbage_is_a_parse_problem_not_a_panic() {
        let problem = decode(&config_map("{{{ not yaml"), "pool-0").unwrap_err();
        assert!(matches!(problem, SliceProblem::Parse { .. }), "{problem}");
    }
}
