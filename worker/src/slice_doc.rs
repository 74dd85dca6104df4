//! Slice format v1 as the sidecar reads it from its ConfigMap and writes it
//! to the slice file. The format itself lives in `shoal_core::format`; this
//! module adds what is specific to a member: reading the ConfigMap (plain or
//! gzip-compressed) and checking the slice is this member's.

use k8s_openapi::api::core::v1::ConfigMap;
use shoal_core::format::{
    DecodeError, EncodedSlice, SliceParseError, decode_slice, parse_slice, part_data_key,
    render_slice,
};
use shoal_core::job::{InvalidJobs, JobSet};
use shoal_core::managed_fields::{self, Ownership};
use shoal_core::names;
use shoal_core::slice::{InstanceProblem, Slice, SliceInstance};

use crate::view::SliceView;

/// Why a slice cannot be built from its parts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSlice {
    /// The jobs are invalid.
    #[error(transparent)]
    Jobs(#[from] InvalidJobs),
    /// The instances are invalid.
    #[error(transparent)]
    Instances(#[from] InstanceProblem),
}

/// Most parts a split slice may have (a guard against a hand-edited count).
pub const MAX_PARTS: usize = 1024;

/// Why a slice ConfigMap cannot be used. The last good slice stays in force.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SliceProblem {
    /// The ConfigMap has no slice document.
    #[error(
        "none of data key {plain:?}, binaryData key {gzip:?} or a split-slice annotation is present"
    )]
    MissingKey {
        /// The plain data key.
        plain: &'static str,
        /// The gzip binaryData key.
        gzip: &'static str,
    },
    /// The parts annotation is not a usable count.
    #[error("annotation {annotation} is {found:?}, not a part count from 1 to {MAX_PARTS}")]
    BadPartCount {
        /// The annotation.
        annotation: &'static str,
        /// Its value.
        found: String,
    },
    /// A part of a split slice is missing.
    #[error("part {part} of {parts} (ConfigMap {config_map}, binaryData key {key:?}) is missing")]
    MissingPart {
        /// The part number (0 is the first ConfigMap).
        part: usize,
        /// The part count.
        parts: usize,
        /// The ConfigMap that should hold it.
        config_map: String,
        /// The binaryData key.
        key: String,
    },
    /// A part could not be read from the API.
    #[error("cannot read part ConfigMap {config_map}: {reason}")]
    ReadPart {
        /// The ConfigMap.
        config_map: String,
        /// The API error.
        reason: String,
    },
    /// The stored data does not decode to a valid slice (gzip, UTF-8 or the
    /// document itself, naming the field).
    #[error("{key} does not hold a valid slice: {source}")]
    Decode {
        /// Where the slice was read from.
        key: String,
        /// The decoder's error.
        source: DecodeError,
    },
    /// The ConfigMap is not one Shoal wrote for this member: not labelled for it, not
    /// owned by a Swarm, or its slice data last written by someone else (a hand edit).
    #[error("ConfigMap {config_map} is not a slice Shoal wrote for this member: {why}")]
    NotShoals {
        /// The ConfigMap.
        config_map: String,
        /// What gives it away.
        why: String,
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

/// How the slice is stored in the member's first ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    /// Everything is in this ConfigMap.
    Complete(EncodedSlice),
    /// Split: part 0 is here, parts `1..parts` are in `<pod>-slice-<i>`.
    Split {
        /// The part count (at least 2).
        parts: usize,
        /// Part 0.
        first: Vec<u8>,
    },
}

fn binary(config_map: &ConfigMap, key: &str) -> Option<Vec<u8>> {
    config_map
        .binary_data
        .as_ref()?
        .get(key)
        .map(|bytes| bytes.0.clone())
}

/// Reads how the slice is stored in the member's first ConfigMap `<pod>-slice`.
pub fn stored_slice(config_map: &ConfigMap) -> Result<Stored, SliceProblem> {
    let parts = config_map
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(names::ANNOTATION_PARTS));
    if let Some(found) = parts {
        let parts = found
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|parts| (1..=MAX_PARTS).contains(parts))
            .ok_or_else(|| SliceProblem::BadPartCount {
                annotation: names::ANNOTATION_PARTS,
                found: found.clone(),
            })?;
        if parts > 1 {
            let key = part_data_key(0);
            let first = binary(config_map, &key).ok_or_else(|| SliceProblem::MissingPart {
                part: 0,
                parts,
                config_map: config_map.metadata.name.clone().unwrap_or_default(),
                key,
            })?;
            return Ok(Stored::Split { parts, first });
        }
    }
    if let Some(text) = config_map
        .data
        .as_ref()
        .and_then(|data| data.get(names::SLICE_DATA_KEY))
    {
        return Ok(Stored::Complete(EncodedSlice::Plain(text.clone())));
    }
    if let Some(bytes) = binary(config_map, names::SLICE_GZIP_DATA_KEY) {
        return Ok(Stored::Complete(EncodedSlice::Gzip(bytes)));
    }
    Err(SliceProblem::MissingKey {
        plain: names::SLICE_DATA_KEY,
        gzip: names::SLICE_GZIP_DATA_KEY,
    })
}

/// Checks that a slice ConfigMap is one the controller wrote for `member`: labelled for
/// it, owned by a Swarm, and no field manager but the controller's owning its slice data.
/// A hand edit (even one with a correct hash) could hand this member a job another member
/// runs; it is refused, and the controller puts the slice back.
pub fn provenance(config_map: &ConfigMap, member: &str) -> Result<(), SliceProblem> {
    let name = config_map.metadata.name.clone().unwrap_or_default();
    let refuse = |why: String| SliceProblem::NotShoals {
        config_map: name.clone(),
        why,
    };
    let labelled = config_map
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(names::LABEL_MEMBER));
    if labelled.map(String::as_str) != Some(member) {
        return Err(refuse(format!(
            "label {} is {labelled:?}, not {member:?}",
            names::LABEL_MEMBER
        )));
    }
    let owned = config_map
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|owner| owner.kind == "Swarm" && owner.controller == Some(true));
    if !owned {
        return Err(refuse("no Swarm is its controller owner".to_owned()));
    }
    let ownership = config_map
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|entry| Ownership {
            manager: entry.manager.as_deref(),
            fields: entry.fields_v1.as_ref().map(|fields| &fields.0),
        });
    let slice_key = |key: &str| key.starts_with(names::SLICE_DATA_KEY);
    if let Some(editor) =
        managed_fields::other_owner(ownership, &["data", "binaryData"], &slice_key)
    {
        return Err(refuse(format!(
            "its slice data was written by {editor:?}, not by {}",
            names::CONTROLLER_FIELD_MANAGER
        )));
    }
    Ok(())
}

/// Part `part` (1 or more) of a split slice, from its ConfigMap `<pod>-slice-<part>`.
pub fn part_of(
    config_map: Option<&ConfigMap>,
    pod: &str,
    part: usize,
    parts: usize,
) -> Result<Vec<u8>, SliceProblem> {
    let key = part_data_key(part);
    config_map
        .and_then(|config_map| binary(config_map, &key))
        .ok_or_else(|| SliceProblem::MissingPart {
            part,
            parts,
            config_map: names::slice_configmap_part(pod, part),
            key,
        })
}

/// Decodes stored slice data and checks it is for `member`.
pub fn decode_encoded(encoded: &EncodedSlice, member: &str) -> Result<SliceView, SliceProblem> {
    let key = match encoded {
        EncodedSlice::Plain(_) => names::SLICE_DATA_KEY.to_string(),
        EncodedSlice::Gzip(_) => names::SLICE_GZIP_DATA_KEY.to_string(),
        EncodedSlice::Split(parts) => format!(
            "{} parts of {}",
            parts.len(),
            part_data_key(0).replace("part0", "part<i>")
        ),
    };
    let slice = decode_slice(encoded).map_err(|source| SliceProblem::Decode { key, source })?;
    if slice.member != member {
        return Err(SliceProblem::WrongMember {
            expected: member.to_string(),
            found: slice.member,
        });
    }
    Ok(SliceView::from(&slice))
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

    /// The same slice carrying `instances` (sorted and checked as the
    /// controller does), with the hash over jobs and instances.
    pub fn with_instances(&self, instances: Vec<SliceInstance>) -> Result<SliceView, InvalidSlice> {
        let jobs = JobSet::parse(self.jobs.iter().map(String::as_str))?;
        let slice =
            Slice::new(&self.swarm, &self.member, self.revision, jobs).with_instances(instances)?;
        Ok(SliceView::from(&slice))
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
            instances: slice.instances.clone(),
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
        instances: slice.instances.clone(),
    }))
}

/// Decodes a slice ConfigMap that holds the whole slice (plain or gzip) and
/// checks it is for `member`. A split slice needs its other parts: see
/// [`stored_slice`] and [`part_of`].
pub fn decode(config_map: &ConfigMap, member: &str) -> Result<SliceView, SliceProblem> {
    match stored_slice(config_map)? {
        Stored::Complete(encoded) => decode_encoded(&encoded, member),
        Stored::Split { parts, .. } => Err(SliceProblem::MissingPart {
            part: 1,
            parts,
            config_map: names::slice_configmap_part(member, 1),
            key: part_data_key(1),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_core::format::encode_slice_with_limits;
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
            Err(SliceProblem::Decode { .. })
        ));
    }

    #[test]
    fn a_split_slice_is_reassembled_from_its_parts() {
        let jobs: Vec<String> = (0..400)
            .map(|index| format!("stream:{index:04}:x"))
            .collect();
        let original = SliceView::new("demo", "pool-0", 9, jobs).unwrap();
        let core_slice = parse_slice(&render(&original).unwrap()).unwrap();
        let EncodedSlice::Split(chunks) = encode_slice_with_limits(&core_slice, 64, 256) else {
            panic!("small limits split the slice");
        };
        let part_map = |part: usize, chunk: &[u8]| ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(names::slice_configmap_part("pool-0", part)),
                annotations: (part == 0).then(|| {
                    BTreeMap::from([(
                        names::ANNOTATION_PARTS.to_string(),
                        chunks.len().to_string(),
                    )])
                }),
                ..Default::default()
            },
            binary_data: Some(BTreeMap::from([(
                part_data_key(part),
                k8s_openapi::ByteString(chunk.to_vec()),
            )])),
            ..ConfigMap::default()
        };
        let first = part_map(0, &chunks[0]);
        let Ok(Stored::Split {
            parts,
            first: part0,
        }) = stored_slice(&first)
        else {
            panic!("the first ConfigMap announces the parts");
        };
        assert_eq!(parts, chunks.len());
        let mut all = vec![part0];
        for (part, chunk) in chunks.iter().enumerate().skip(1) {
            all.push(part_of(Some(&part_map(part, chunk)), "pool-0", part, parts).unwrap());
        }
        assert_eq!(
            decode_encoded(&EncodedSlice::Split(all), "pool-0"),
            Ok(original)
        );

        let missing = part_of(None, "pool-0", 2, parts).unwrap_err();
        assert!(missing.to_string().contains("pool-0-slice-2"), "{missing}");
    }

    #[test]
    fn a_bad_part_count_is_a_clear_problem() {
        let mut config_map = config_map(&render(&slice(&["a"])).unwrap());
        config_map.metadata.annotations = Some(BTreeMap::from([(
            names::ANNOTATION_PARTS.to_string(),
            "many".to_string(),
        )]));
        let problem = decode(&config_map, "pool-0").unwrap_err();
        assert!(problem.to_string().contains("shoal.dev/parts"), "{problem}");
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
        assert!(matches!(problem, SliceProblem::Decode { .. }), "{problem}");
    }
}
