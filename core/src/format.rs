//! Slice format v1, the seed-compatible index document, and large-slice
//! encoding.
//!
//! A slice document (ConfigMap data key [`SLICE_DATA_KEY`](crate::names::SLICE_DATA_KEY)):
//!
//! ```yaml
//! format: shoal.dev/slice/v1
//! swarm: demo
//! member: swarm-worker-0
//! revision: 3
//! hash: sha256:<64 hex>
//! jobs:
//! - stream:cctv0:updated
//! - stream:foo:new
//! instances:            # optional; absent when the member runs no plan instance
//! - name: web-0
//!   plan: web
//!   deployment: 4
//!   applications:
//!   - name: nginx
//!     coordinates:
//!       image: nginx:1.27
//!     ports:            # optional; absent when the application has none
//!     - protocol: TCP
//!       port: 80
//! ```
//!
//! Rendering is canonical: the same slice always renders to the same bytes.
//! Parsing checks every field and names the field in its error; unknown
//! fields are ignored so that later minor additions stay readable by older
//! sidecars.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::deploy::port::{Port, Protocol};
use crate::job::{InvalidJobs, JobKey, JobSet};
use crate::member::MemberId;
use crate::slice::{
    HASH_PREFIX, InstanceApplication, InstanceProblem, Slice, SliceInstance, check_instances,
    slice_hash,
};

/// The `format` value of slice format v1.
pub const SLICE_FORMAT_V1: &str = "shoal.dev/slice/v1";

/// Why a slice document was rejected. Every variant names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SliceParseError {
    /// The text is not YAML, or not a mapping at the top.
    #[error("slice document is not a YAML mapping: {message}")]
    Yaml {
        /// The YAML parser's message.
        message: String,
    },
    /// A required field is absent.
    #[error("slice field `{field}` is missing")]
    MissingField {
        /// The field.
        field: &'static str,
    },
    /// A field has the wrong type.
    #[error("slice field `{field}` must be {expected}")]
    WrongType {
        /// The field.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// `format` is not [`SLICE_FORMAT_V1`].
    #[error("slice field `format` must be {SLICE_FORMAT_V1:?}, got {found:?}")]
    UnsupportedFormat {
        /// The value found.
        found: String,
    },
    /// `hash` is not `sha256:` followed by 64 lowercase hex digits.
    #[error(
        "slice field `hash` must be \"sha256:\" followed by 64 lowercase hex digits, got {found:?}"
    )]
    MalformedHash {
        /// The value found.
        found: String,
    },
    /// `jobs` holds invalid keys or duplicates.
    #[error("slice field `jobs`: {0}")]
    InvalidJobs(InvalidJobs),
    /// `jobs` is not in byte order.
    #[error(
        "slice field `jobs` is not sorted: jobs[{position}] {key:?} comes before its predecessor"
    )]
    UnsortedJobs {
        /// Position of the first out-of-order entry.
        position: usize,
        /// Its key.
        key: String,
    },
    /// An entry of `instances` lacks a field or has one of the wrong type.
    #[error("slice field `{entry}.{field}` must be {expected}")]
    InstanceField {
        /// The entry, e.g. `instances[2]` or `instances[2].applications[0]`.
        entry: String,
        /// The field within it.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// `instances` is not sorted by name.
    #[error(
        "slice field `instances` is not sorted by name: instances[{position}] {name:?} comes before its predecessor"
    )]
    UnsortedInstances {
        /// Position of the first out-of-order entry.
        position: usize,
        /// Its name.
        name: String,
    },
    /// An application's ports are not sorted (protocol, then number).
    #[error(
        "slice field `instances[{position}].applications[{application}].ports` of {name:?} is not sorted (TCP before UDP, then by number)"
    )]
    UnsortedPorts {
        /// Position of the instance.
        position: usize,
        /// The instance's name.
        name: String,
        /// Position of the application.
        application: usize,
    },
    /// An instance's applications are not sorted by name.
    #[error("slice field `instances[{position}].applications` of {name:?} is not sorted by name")]
    UnsortedApplications {
        /// Position of the instance.
        position: usize,
        /// The instance's name.
        name: String,
    },
    /// `instances` holds an invalid entry or a duplicate.
    #[error("slice field `instances`: {0}")]
    InvalidInstances(InstanceProblem),
    /// `hash` does not match the jobs (and instances).
    #[error("slice field `hash` is {declared} but the jobs hash to {computed}")]
    HashMismatch {
        /// The declared hash.
        declared: String,
        /// The hash of the listed jobs.
        computed: String,
    },
}

/// A YAML value as far as Shoal's documents care.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Value {
    Number(u64),
    Text(String),
    List(Vec<Value>),
    Map(BTreeMap<String, Value>),
    Other(serde::de::IgnoredAny),
}

#[derive(Serialize)]
struct SliceDocument<'a> {
    format: &'a str,
    swarm: &'a str,
    member: &'a str,
    revision: u64,
    hash: &'a str,
    jobs: &'a JobSet,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    instances: &'a [SliceInstance],
}

/// Renders a slice as format v1 YAML (block style, one job per line).
pub fn render_slice(slice: &Slice) -> String {
    let document = SliceDocument {
        format: SLICE_FORMAT_V1,
        swarm: &slice.swarm,
        member: &slice.member,
        revision: slice.revision,
        hash: &slice.hash,
        jobs: &slice.jobs,
        instances: &slice.instances,
    };
    to_yaml(&document)
}

fn to_yaml<T: Serialize>(document: &T) -> String {
    // Serialising plain structs of strings, integers and lists cannot fail;
    // the fallback keeps this total without a panic path.
    serde_saphyr::to_string(document).unwrap_or_default()
}

fn text(fields: &BTreeMap<String, Value>, field: &'static str) -> Result<String, SliceParseError> {
    match fields.get(field) {
        None => Err(SliceParseError::MissingField { field }),
        Some(Value::Text(value)) => Ok(value.clone()),
        Some(Value::Number(value)) => Ok(value.to_string()),
        Some(_) => Err(SliceParseError::WrongType {
            field,
            expected: "a string",
        }),
    }
}

/// YAML parser limits for a document of `bytes` bytes. The parser's default
/// node and event budgets (250,000 and 1,000,000) would refuse a slice or job
/// list of a few hundred thousand keys; every key takes at least two bytes of
/// text, so budgets sized from the text admit every list that fits in it and
/// still bound the work (aliases stay limited).
pub fn yaml_options_for(bytes: usize) -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_nodes = budget.max_nodes.max(bytes.saturating_add(16));
    budget.max_events = budget
        .max_events
        .max(bytes.saturating_mul(2).saturating_add(16));
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options
}

/// Parses a format v1 slice document, checking the format marker, the hash
/// syntax, the jobs (valid, unique, sorted) and that the hash matches them.
pub fn parse_slice(text_yaml: &str) -> Result<Slice, SliceParseError> {
    let fields: BTreeMap<String, Value> =
        serde_saphyr::from_str_with_options(text_yaml, yaml_options_for(text_yaml.len())).map_err(
            |error| SliceParseError::Yaml {
                message: error.to_string(),
            },
        )?;
    let format = text(&fields, "format")?;
    if format != SLICE_FORMAT_V1 {
        return Err(SliceParseError::UnsupportedFormat { found: format });
    }
    let swarm = text(&fields, "swarm")?;
    let member = text(&fields, "member")?;
    let revision = match fields.get("revision") {
        None => return Err(SliceParseError::MissingField { field: "revision" }),
        Some(Value::Number(revision)) => *revision,
        Some(_) => {
            return Err(SliceParseError::WrongType {
                field: "revision",
                expected: "a non-negative integer",
            });
        }
    };
    let hash = text(&fields, "hash")?;
    let well_formed = hash.strip_prefix(HASH_PREFIX).is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    if !well_formed {
        return Err(SliceParseError::MalformedHash { found: hash });
    }
    let keys = job_list(fields.get("jobs"), "jobs", |field, expected| {
        SliceParseError::WrongType { field, expected }
    })?
    .ok_or(SliceParseError::MissingField { field: "jobs" })?;
    if let Some(position) = keys.windows(2).position(|pair| pair[0] > pair[1]) {
        return Err(SliceParseError::UnsortedJobs {
            position: position + 1,
            key: keys[position + 1].clone(),
        });
    }
    let jobs = JobSet::parse(keys).map_err(SliceParseError::InvalidJobs)?;
    let instances = instance_list(fields.get("instances"))?;
    let computed = slice_hash(&jobs, &instances);
    if computed != hash {
        return Err(SliceParseError::HashMismatch {
            declared: hash,
            computed,
        });
    }
    Ok(Slice {
        swarm,
        member,
        revision,
        hash,
        jobs,
        instances,
    })
}

/// Reads `instances` (absent or `null`: none): every field typed, entries and
/// applications sorted by name, names valid and unique.
fn instance_list(value: Option<&Value>) -> Result<Vec<SliceInstance>, SliceParseError> {
    let items = match value {
        None | Some(Value::Other(_)) => return Ok(Vec::new()),
        Some(Value::List(items)) => items,
        Some(_) => {
            return Err(SliceParseError::WrongType {
                field: "instances",
                expected: "a list of instances",
            });
        }
    };
    let instances = items
        .iter()
        .enumerate()
        .map(|(position, item)| instance_entry(position, item))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(position) = instances
        .windows(2)
        .position(|pair| pair[0].name.as_bytes() > pair[1].name.as_bytes())
    {
        return Err(SliceParseError::UnsortedInstances {
            position: position + 1,
            name: instances[position + 1].name.clone(),
        });
    }
    for (position, instance) in instances.iter().enumerate() {
        let sorted = instance
            .applications
            .windows(2)
            .all(|pair| pair[0].name.as_bytes() <= pair[1].name.as_bytes());
        if !sorted {
            return Err(SliceParseError::UnsortedApplications {
                position,
                name: instance.name.clone(),
            });
        }
        if let Some(application) = instance
            .applications
            .iter()
            .position(|application| !application.ports.is_sorted())
        {
            return Err(SliceParseError::UnsortedPorts {
                position,
                name: instance.name.clone(),
                application,
            });
        }
    }
    check_instances(&instances).map_err(SliceParseError::InvalidInstances)?;
    Ok(instances)
}

fn instance_entry(position: usize, item: &Value) -> Result<SliceInstance, SliceParseError> {
    let entry = format!("instances[{position}]");
    let wrong = |entry: &str, field, expected| SliceParseError::InstanceField {
        entry: entry.to_owned(),
        field,
        expected,
    };
    let Value::Map(fields) = item else {
        return Err(wrong(
            &entry,
            "name",
            "a mapping with name, plan, deployment, applications",
        ));
    };
    let entry_text = |entry: &str, fields: &BTreeMap<String, Value>, field| match fields.get(field)
    {
        Some(Value::Text(value)) => Ok(value.clone()),
        Some(Value::Number(value)) => Ok(value.to_string()),
        _ => Err(wrong(entry, field, "a string")),
    };
    let name = entry_text(&entry, fields, "name")?;
    // Errors below name the instance too, once it is known.
    let entry = format!("instances[{position}] ({name})");
    let plan = entry_text(&entry, fields, "plan")?;
    let deployment = match fields.get("deployment") {
        Some(Value::Number(deployment)) => *deployment,
        _ => return Err(wrong(&entry, "deployment", "a non-negative integer")),
    };
    let applications = match fields.get("applications") {
        None | Some(Value::Other(_)) => Vec::new(),
        Some(Value::List(items)) => items
            .iter()
            .enumerate()
            .map(|(index, item)| {
                let entry = format!("{entry}.applications[{index}]");
                let Value::Map(fields) = item else {
                    return Err(wrong(&entry, "name", "a mapping with name and coordinates"));
                };
                let name = entry_text(&entry, fields, "name")?;
                let coordinates = match fields.get("coordinates") {
                    None | Some(Value::Other(_)) => BTreeMap::new(),
                    Some(Value::Map(pairs)) => pairs
                        .iter()
                        .map(|(key, value)| match value {
                            Value::Text(value) => Ok((key.clone(), value.clone())),
                            Value::Number(value) => Ok((key.clone(), value.to_string())),
                            _ => Err(wrong(
                                &entry,
                                "coordinates",
                                "a mapping of strings to strings",
                            )),
                        })
                        .collect::<Result<_, _>>()?,
                    Some(_) => {
                        return Err(wrong(
                            &entry,
                            "coordinates",
                            "a mapping of strings to strings",
                        ));
                    }
                };
                let ports = port_list(&entry, fields.get("ports"))?;
                Ok(InstanceApplication {
                    name,
                    coordinates,
                    ports,
                })
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(wrong(&entry, "applications", "a list of applications")),
    };
    Ok(SliceInstance {
        name,
        plan,
        deployment,
        applications,
    })
}

/// Reads an application's `ports` (absent or `null`: none): each a mapping
/// `{protocol: TCP|UDP, port: 1-65535}`.
fn port_list(entry: &str, value: Option<&Value>) -> Result<Vec<Port>, SliceParseError> {
    const EXPECTED: &str = "a list of {protocol: TCP|UDP, port: 1-65535}";
    let wrong = || SliceParseError::InstanceField {
        entry: entry.to_owned(),
        field: "ports",
        expected: EXPECTED,
    };
    let items = match value {
        None | Some(Value::Other(_)) => return Ok(Vec::new()),
        Some(Value::List(items)) => items,
        Some(_) => return Err(wrong()),
    };
    items
        .iter()
        .map(|item| {
            let Value::Map(fields) = item else {
                return Err(wrong());
            };
            let protocol = match fields.get("protocol") {
                Some(Value::Text(protocol)) if protocol == "TCP" => Protocol::Tcp,
                Some(Value::Text(protocol)) if protocol == "UDP" => Protocol::Udp,
                _ => return Err(wrong()),
            };
            let port = match fields.get("port") {
                Some(Value::Number(port)) => u16::try_from(*port)
                    .ok()
                    .filter(|port| *port > 0)
                    .ok_or_else(wrong)?,
                _ => return Err(wrong()),
            };
            Ok(Port { protocol, port })
        })
        .collect()
}

/// Reads a list of strings; `Ok(None)` when absent, `null` counts as empty.
fn job_list<E>(
    value: Option<&Value>,
    field: &'static str,
    wrong_type: impl Fn(&'static str, &'static str) -> E,
) -> Result<Option<Vec<String>>, E> {
    const EXPECTED: &str = "a list of strings";
    match value {
        None => Ok(None),
        Some(Value::Other(_)) => Ok(Some(Vec::new())),
        Some(Value::List(items)) => items
            .iter()
            .map(|item| match item {
                Value::Text(key) => Ok(key.clone()),
                Value::Number(key) => Ok(key.to_string()),
                _ => Err(wrong_type(field, EXPECTED)),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(wrong_type(field, EXPECTED)),
    }
}

/// The seed-compatible index document (`config.yml` in the index ConfigMap),
/// as k8s-swarm wrote it: every member's jobs and a version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Index {
    /// Pod name → that member's jobs.
    pub workloads: BTreeMap<String, Workload>,
    /// The revision this index describes.
    pub version: u64,
}

/// One member's entry in the [`Index`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    /// The member's jobs, byte order.
    pub jobs: Vec<JobKey>,
    /// The revision at which this member's slice last changed.
    pub version: u64,
}

impl Index {
    /// The index of a set of slices at `version`.
    pub fn from_slices(slices: &BTreeMap<MemberId, Slice>, version: u64) -> Index {
        Index {
            workloads: slices
                .values()
                .map(|slice| {
                    let workload = Workload {
                        jobs: slice.jobs.as_slice().to_vec(),
                        version: slice.revision,
                    };
                    (slice.member.clone(), workload)
                })
                .collect(),
            version,
        }
    }
}

/// Why an index document was rejected. Every variant names the field path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexParseError {
    /// The text is not a YAML mapping.
    #[error("index document is not a YAML mapping: {message}")]
    Yaml {
        /// The YAML parser's message.
        message: String,
    },
    /// A required field is absent.
    #[error("index field `{field}` is missing")]
    MissingField {
        /// The field path.
        field: String,
    },
    /// A field has the wrong type.
    #[error("index field `{field}` must be {expected}")]
    WrongType {
        /// The field path.
        field: String,
        /// What it must be.
        expected: &'static str,
    },
    /// A workload's jobs are invalid.
    #[error("index field `workloads.{pod}.jobs`: {problems}")]
    InvalidJobs {
        /// The pod.
        pod: String,
        /// What is wrong.
        problems: InvalidJobs,
    },
}

/// Renders the index document (block style, members in name order).
pub fn render_index(index: &Index) -> String {
    to_yaml(index)
}

/// Parses a seed-compatible index document. Jobs are validated and returned
/// in byte order; a missing per-workload `version` defaults to the top-level
/// one (k8s-swarm documents always carry both).
pub fn parse_index(text_yaml: &str) -> Result<Index, IndexParseError> {
    let fields: BTreeMap<String, Value> =
        serde_saphyr::from_str_with_options(text_yaml, yaml_options_for(text_yaml.len())).map_err(
            |error| IndexParseError::Yaml {
                message: error.to_string(),
            },
        )?;
    let version = match fields.get("version") {
        None => {
            return Err(IndexParseError::MissingField {
                field: "version".to_owned(),
            });
        }
        Some(Value::Number(version)) => *version,
        Some(_) => {
            return Err(IndexParseError::WrongType {
                field: "version".to_owned(),
                expected: "a non-negative integer",
            });
        }
    };
    let entries = match fields.get("workloads") {
        None => {
            return Err(IndexParseError::MissingField {
                field: "workloads".to_owned(),
            });
        }
        Some(Value::Map(entries)) => entries,
        Some(Value::Other(_)) => &BTreeMap::new(),
        Some(_) => {
            return Err(IndexParseError::WrongType {
                field: "workloads".to_owned(),
                expected: "a mapping of pod names to workloads",
            });
        }
    };
    let mut workloads = BTreeMap::new();
    for (pod, entry) in entries {
        let Value::Map(entry) = entry else {
            return Err(IndexParseError::WrongType {
                field: format!("workloads.{pod}"),
                expected: "a mapping with `jobs` and `version`",
            });
        };
        let jobs_field = format!("workloads.{pod}.jobs");
        let keys = job_list(entry.get("jobs"), "jobs", |_, expected| {
            IndexParseError::WrongType {
                field: jobs_field.clone(),
                expected,
            }
        })?
        .ok_or_else(|| IndexParseError::MissingField {
            field: jobs_field.clone(),
        })?;
        let jobs = JobSet::parse(keys).map_err(|problems| IndexParseError::InvalidJobs {
            pod: pod.clone(),
            problems,
        })?;
        let workload_version = match entry.get("version") {
            None => version,
            Some(Value::Number(value)) => *value,
            Some(_) => {
                return Err(IndexParseError::WrongType {
                    field: format!("workloads.{pod}.version"),
                    expected: "a non-negative integer",
                });
            }
        };
        workloads.insert(
            pod.clone(),
            Workload {
                jobs: jobs.as_slice().to_vec(),
                version: workload_version,
            },
        );
    }
    Ok(Index { workloads, version })
}

/// Largest text stored directly under `data["slice.yaml"]` (ARCHITECTURE:
/// a slice ConfigMap holds at most ~900 KiB of data; the API server's limit
/// is 1 MiB for the whole object).
pub const MAX_PLAIN_BYTES: usize = 900 * 1024;

/// Largest raw byte count per `binaryData` entry: base64 inflates by 4/3, so
/// this keeps every ConfigMap under the same ~900 KiB on the wire.
pub const MAX_BINARY_BYTES: usize = MAX_PLAIN_BYTES / 4 * 3;

/// Largest decompressed text accepted by [`decode_text`] (and so by [`decode_slice`]):
/// guards against a hand-made gzip bomb in a slice, a history record or the index.
pub const MAX_DECODED_BYTES: u64 = 512 * 1024 * 1024;

/// How a text (a rendered slice, a history record, the index) is stored in ConfigMaps:
/// the one codec of everything Shoal writes as text.
///
/// * `Plain`: the text under its data key (`data["slice.yaml"]` of `<pod>-slice`).
/// * `Gzip`: its gzip under `binaryData["<key>.gz"]` (`slice.yaml.gz`).
/// * `Split`: the gzip bytes cut into parts, each in a ConfigMap of its own; for a
///   slice part `i` is `binaryData["slice.yaml.part<i>"]` of
///   [`slice_configmap_part(pod, i)`](crate::names::slice_configmap_part)
///   (`<pod>-slice`, `<pod>-slice-1`, …), and the first ConfigMap carries the
///   annotation [`ANNOTATION_PARTS`](crate::names::ANNOTATION_PARTS) = part count;
///   a history record also carries [`checksum`] of the parts
///   ([`ANNOTATION_CHECKSUM`](crate::names::ANNOTATION_CHECKSUM)).
///
/// The sidecar should compare the slice hash (a label or the parsed `hash`),
/// not the bytes: gzip output may differ between library versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncodedText {
    /// The text, small enough for `data`.
    Plain(String),
    /// gzip of the text, small enough for one `binaryData` entry.
    Gzip(Vec<u8>),
    /// gzip of the text in parts, each at most the binary limit it was encoded with.
    Split(Vec<Vec<u8>>),
}

/// A stored slice: the text codec's output for a rendered slice.
pub type EncodedSlice = EncodedText;

/// The `binaryData` key of part `part` of a split slice.
pub fn part_data_key(part: usize) -> String {
    format!("{}.part{part}", crate::names::SLICE_DATA_KEY)
}

/// Why stored slice data could not be turned back into a slice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A split slice without parts.
    #[error("split slice has no parts")]
    NoParts,
    /// The gzip stream is corrupt or truncated.
    #[error("slice gzip data is corrupt: {message}")]
    Gzip {
        /// The decompressor's message.
        message: String,
    },
    /// The decompressed slice is larger than [`MAX_DECODED_BYTES`].
    #[error("decompressed slice exceeds {MAX_DECODED_BYTES} bytes")]
    TooLarge,
    /// The decompressed bytes are not UTF-8.
    #[error("decompressed slice is not UTF-8 text")]
    NotText,
    /// The document inside is not a valid slice.
    #[error(transparent)]
    Parse(#[from] SliceParseError),
}

/// gzip-compresses text at level 2: a revision record of 100,000 jobs is compressed on
/// every scale event. On a 3 MB record-like text of 100,000 jobs, level 2 took 21 ms
/// for 361 KB where the default (6) took 98 ms for 341 KB, and level 1 15 ms for 602
/// KB (release build, medians of 5).
pub fn gzip(text: &str) -> Vec<u8> {
    use std::io::Write as _;

    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(2));
    // Writing into a Vec cannot fail; a failure would leave an invalid gzip
    // stream, which decode_text rejects rather than misreads.
    encoder
        .write_all(text.as_bytes())
        .and_then(|()| encoder.finish())
        .unwrap_or_default()
}

/// Stores `text`: as is when it fits `plain_limit`, else gzip when that fits
/// `binary_limit`, else gzip split into parts of at most `binary_limit` bytes.
pub fn encode_text(text: String, plain_limit: usize, binary_limit: usize) -> EncodedText {
    if text.len() <= plain_limit {
        return EncodedText::Plain(text);
    }
    let compressed = gzip(&text);
    let binary_limit = binary_limit.max(1);
    if compressed.len() <= binary_limit {
        EncodedText::Gzip(compressed)
    } else {
        EncodedText::Split(
            compressed
                .chunks(binary_limit)
                .map(<[u8]>::to_vec)
                .collect(),
        )
    }
}

/// The text back from its stored form, decompressing at most [`MAX_DECODED_BYTES`].
pub fn decode_text(encoded: &EncodedText) -> Result<String, DecodeError> {
    decode_text_within(encoded, MAX_DECODED_BYTES)
}

/// [`decode_text`] with the bound given (tests use a small one).
fn decode_text_within(encoded: &EncodedText, bound: u64) -> Result<String, DecodeError> {
    match encoded {
        EncodedText::Plain(text) => Ok(text.clone()),
        EncodedText::Gzip(bytes) => gunzip(bytes, bound),
        EncodedText::Split(parts) if parts.is_empty() => Err(DecodeError::NoParts),
        EncodedText::Split(parts) => gunzip(&parts.concat(), bound),
    }
}

/// Decompresses gzip text, at most `bound` bytes of it.
fn gunzip(compressed: &[u8], bound: u64) -> Result<String, DecodeError> {
    use std::io::Read as _;

    let mut text = Vec::new();
    flate2::read::GzDecoder::new(compressed)
        .take(bound.saturating_add(1))
        .read_to_end(&mut text)
        .map_err(|error| DecodeError::Gzip {
            message: error.to_string(),
        })?;
    if text.len() as u64 > bound {
        return Err(DecodeError::TooLarge);
    }
    String::from_utf8(text).map_err(|_| DecodeError::NotText)
}

/// The checksum of split parts: sha256 (hex) of their concatenation, so a missing,
/// stale or damaged part shows.
pub fn checksum(parts: &[Vec<u8>]) -> String {
    use sha2::{Digest, Sha256};

    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part);
    }
    hex::encode(hasher.finalize())
}

/// Encodes a slice for storage: plain YAML when it fits [`MAX_PLAIN_BYTES`],
/// else gzip when that fits [`MAX_BINARY_BYTES`], else gzip split into parts.
pub fn encode_slice(slice: &Slice) -> EncodedSlice {
    encode_slice_with_limits(slice, MAX_PLAIN_BYTES, MAX_BINARY_BYTES)
}

/// [`encode_slice`] with explicit limits (tests use small ones).
pub fn encode_slice_with_limits(
    slice: &Slice,
    plain_limit: usize,
    binary_limit: usize,
) -> EncodedSlice {
    encode_text(render_slice(slice), plain_limit, binary_limit)
}

/// Decodes stored slice data and parses (and hash-checks) the slice.
pub fn decode_slice(encoded: &EncodedSlice) -> Result<Slice, DecodeError> {
    Ok(parse_slice(&decode_text(encoded)?)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(bytes: usize) -> String {
        (0..bytes)
            .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
            .collect()
    }

    #[test]
    fn a_text_is_stored_plain_then_gzip_then_split_and_read_back_alike() {
        let long = text(4000);
        let plain = encode_text(long.clone(), 4000, 10_000);
        assert!(matches!(plain, EncodedText::Plain(_)));
        let gzip = encode_text(long.clone(), 100, 10_000);
        assert!(matches!(gzip, EncodedText::Gzip(_)));
        let split = encode_text(long.clone(), 100, 16);
        let EncodedText::Split(parts) = &split else {
            panic!("a stream longer than the binary limit is split: {split:?}");
        };
        assert!(parts.len() > 1 && parts.iter().all(|part| part.len() <= 16));
        for encoded in [plain, gzip, split] {
            assert_eq!(decode_text(&encoded).as_deref(), Ok(long.as_str()));
        }
    }

    #[test]
    fn a_stream_that_decompresses_past_the_bound_is_refused() {
        let encoded = EncodedText::Gzip(gzip(&"0".repeat(10_000)));
        assert_eq!(
            decode_text_within(&encoded, 9_999),
            Err(DecodeError::TooLarge)
        );
        assert_eq!(
            decode_text_within(&encoded, 10_000).map(|text| text.len()),
            Ok(10_000)
        );
    }

    #[test]
    fn split_parts_without_any_part_or_with_a_damaged_one_do_not_decode() {
        assert_eq!(
            decode_text(&EncodedText::Split(Vec::new())),
            Err(DecodeError::NoParts)
        );
        let EncodedText::Split(mut parts) = encode_text(text(4000), 0, 16) else {
            panic!("split expected");
        };
        parts.remove(1);
        assert!(decode_text(&EncodedText::Split(parts)).is_err());
    }

    #[test]
    fn the_checksum_covers_the_parts_joined_whatever_the_cut() {
        let stream = gzip(&text(1000));
        let halves = stream.split_at(stream.len() / 2);
        assert_eq!(
            checksum(&[halves.0.to_vec(), halves.1.to_vec()]),
            checksum(std::slice::from_ref(&stream))
        );
        assert_ne!(
            checksum(std::slice::from_ref(&stream)),
            checksum(&[stream[1..].to_vec()])
        );
        assert_eq!(checksum(&[stream]).len(), 64);
    }
}
