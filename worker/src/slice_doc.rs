//! Slice format v1 as the sidecar reads it from its ConfigMap and writes it
//! to the slice file. The format itself lives in `shoal_core::format`; this
//! module adds what is specific to a member: reading the ConfigMap (plain or
//! gzip-compressed) and checking the slice is this member's.

use std::io::Read;

use k8s_openapi::api::core::v1::ConfigMap;
use shoal_core::format::{SliceParseError, parse_slice, render_slice};
use shoal_core::job::{InvalidJobs, JobSet};
use shoal_core::names;
use shoal_core::slice::Slice;

use crate::view::SliceView;

/// Why a slice ConfigMap cannot be used. The last good slice stays in force.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SliceProblem {
    /// The ConfigMap has no slice document.
    #[error("neither data key {plain:?} nor binaryData key {gzip:?} is present")]
    MissingKey {
        /// The plain data key.
        plain: &'static str,
        /// The gzip binaryData key.
        gzip: &'static str,
    },
    /// The gzip-compressed slice cannot be decompressed as UTF-8 text.
    #[error("binaryData key {key:?} is not gzip-compressed UTF-8: {reason}")]
    Gzip {
        /// The data key.
        key: &'static str,
        /// What failed.
        reason: String,
    },
    /// The slice is split over several ConfigMaps; not read yet.
    #[error(
        "the slice is split into {parts} ConfigMaps (annotation {annotation}); \
         reassembling split slices is not implemented in this sidecar yet"
    )]
    SplitUnsupported {
        /// The annotation.
        annotation: &'static str,
        /// Its value.
        parts: String,
    },
    /// The document is not slice format v1.
    #[error("{key} is not a valid slice document: {source}")]
    Parse {
        /// The data key.
        key: &'static str,
        /// The parser's error, naming the field.
        source: SliceParseError,
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

impl SliceView {
    /// A slice over `jobs` (any order) with its canonical hash.
    pub fn new<S: Into<String>>(
        swarm: impl Into<String>,
        member: impl Into<String>,
        revision: u64,
        jobs: impl IntoIterator<Item = S>,
    ) -> Result<SliceView, InvalidJobs> {
        let jobs = JobSet::parse(jobs)?;
        Ok(SliceView::from(&Slice::new(swarm, member, revision, jobs)))
    }
}

impl From<&Slice> for SliceView {
    fn from(slice: &Slice) -> SliceView {
        SliceView {
            swarm: slice.swarm.clone(),
            member: slice.member.clone(),
            revision: slice.revision,
            hash: slice.hash.clone(),
            jobs: slice
                .jobs
                .iter()
                .map(|key| key.as_str().to_string())
                .collect(),
        }
    }
}

/// The canonical hash of a job list (see `shoal_core::slice::canonical_hash`).
pub fn jobs_hash<S: Into<String>>(
    jobs: impl IntoIterator<Item = S>,
) -> Result<String, InvalidJobs> {
    Ok(shoal_core::slice::canonical_hash(&JobSet::parse(jobs)?))
}

/// Parses a slice format v1 document (every field checked, hash verified).
pub fn parse(text: &str) -> Result<SliceView, SliceParseError> {
    parse_slice(text).map(|slice| SliceView::from(&slice))
}

/// Renders a slice as slice format v1, byte for byte as the controller does.
pub fn render(slice: &SliceView) -> Result<String, InvalidJobs> {
    let jobs = JobSet::parse(slice.jobs.iter().map(String::as_str))?;
    Ok(render_slice(&Slice {
        swarm: slice.swarm.clone(),
        member: slice.member.clone(),
        revision: slice.revision,
        hash: slice.hash.clone(),
        jobs,
    }))
}

/// Decodes the member's slice ConfigMap and checks it is for `member`.
pub fn decode(config_map: &ConfigMap, member: &str) -> Result<SliceView, SliceProblem> {
    let parts = config_map
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(names::ANNOTATION_PARTS));
    if let Some(parts) = parts.filter(|parts| parts.trim() != "1") {
        return Err(SliceProblem::SplitUnsupported {
            annotation: names::ANNOTATION_PARTS,
            parts: parts.clone(),
        });
    }
    let plain = config_map
        .data
        .as_ref()
        .and_then(|data| data.get(names::SLICE_DATA_KEY));
    let (key, text) = match plain {
        Some(text) => (names::SLICE_DATA_KEY, text.clone()),
        None => {
            let compressed = config_map
                .binary_data
                .as_ref()
                .and_then(|data| data.get(names::SLICE_GZIP_DATA_KEY))
                .ok_or(SliceProblem::MissingKey {
                    plain: names::SLICE_DATA_KEY,
                    gzip: names::SLICE_GZIP_DATA_KEY,
                })?;
            (names::SLICE_GZIP_DATA_KEY, gunzip(&compressed.0)?)
        }
    };
    let slice = parse(&text).map_err(|source| SliceProblem::Parse { key, source })?;
    if slice.member != member {
        return Err(SliceProblem::WrongMember {
            expected: member.to_string(),
            found: slice.member,
        });
    }
    Ok(slice)
}

fn gunzip(compressed: &[u8]) -> Result<String, SliceProblem> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(compressed)
        .read_to_string(&mut text)
        .map_err(|error| SliceProblem::Gzip {
            key: names::SLICE_GZIP_DATA_KEY,
            reason: error.to_string(),
        })?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::io::Write;

    fn slice(jobs: &[&str]) -> SliceView {
        SliceView::new("demo", "pool-0", 3, jobs.iter().copied()).unwrap()
    }

    fn config_map(text: &str) -> ConfigMap {
        ConfigMap {
            data: Some(BTreeMap::from([(
                names::SLICE_DATA_KEY.to_string(),
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
            &["a b", "it's", "x: y", "-1", "yes", "#c"][..],
        ] {
            let slice = slice(jobs);
            assert_eq!(parse(&render(&slice).unwrap()), Ok(slice));
        }
    }

    #[test]
    fn the_empty_jobs_hash_is_the_sha256_of_nothing() {
        assert_eq!(
            jobs_hash(Vec::<String>::new()).unwrap(),
            crate::view::EMPTY_JOBS_HASH
        );
        assert_eq!(
            slice(&["a"]).without_jobs().hash,
            crate::view::EMPTY_JOBS_HASH
        );
    }

    #[test]
    fn a_hash_that_does_not_match_the_jobs_is_rejected_naming_the_field() {
        let text = render(&slice(&["a", "b"]))
            .unwrap()
            .replace("- b\n", "- c\n");
        let problem = decode(&config_map(&text), "pool-0").unwrap_err();
        assert!(problem.to_string().contains("field `hash`"), "{problem}");
    }

    #[test]
    fn a_config_map_without_the_slice_is_a_clear_problem() {
        let problem = decode(&ConfigMap::default(), "pool-0").unwrap_err();
        assert!(matches!(problem, SliceProblem::MissingKey { .. }));
        assert!(problem.to_string().contains("slice.yaml"), "{problem}");
    }

    #[test]
    fn a_gzip_compressed_slice_is_read() {
        let original = slice(&["a", "b"]);
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder
            .write_all(render(&original).unwrap().as_bytes())
            .unwrap();
        let compressed = encoder.finish().unwrap();
        let config_map = ConfigMap {
            binary_data: Some(BTreeMap::from([(
                names::SLICE_GZIP_DATA_KEY.to_string(),
                k8s_openapi::ByteString(compressed),
            )])),
            ..ConfigMap::default()
        };
        assert_eq!(decode(&config_map, "pool-0"), Ok(original));
    }

    #[test]
    fn corrupt_gzip_is_a_problem_not_a_panic() {
        let config_map = ConfigMap {
            binary_data: Some(BTreeMap::from([(
                names::SLICE_GZIP_DATA_KEY.to_string(),
                k8s_openapi::ByteString(b"not gzip".to_vec()),
            )])),
            ..ConfigMap::default()
        };
        assert!(matches!(
            decode(&config_map, "pool-0"),
            Err(SliceProblem::Gzip { .. })
        ));
    }

    #[test]
    fn a_split_slice_is_reported_as_not_supported_yet() {
        let mut config_map = config_map(&render(&slice(&["a"])).unwrap());
        config_map.metadata.annotations = Some(BTreeMap::from([(
            names::ANNOTATION_PARTS.to_string(),
            "3".to_string(),
        )]));
        let problem = decode(&config_map, "pool-0").unwrap_err();
        assert!(problem.to_string().contains("not implemented"), "{problem}");
    }

    #[test]
    fn a_slice_for_another_member_is_refused() {
        let problem = decode(&config_map(&render(&slice(&["a"])).unwrap()), "pool-1").unwrap_err();
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
