//! Canonical per-member slices and their content hash.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::deploy::port::Port;
use crate::job::JobSet;

/// Prefix of every slice hash.
pub const HASH_PREFIX: &str = "sha256:";

/// Marks the start of the instances in the hashed bytes: a control character
/// (record separator) cannot begin a job key, so no job list can produce it.
const INSTANCES_MARKER: &[u8] = b"\x1einstances\n";

/// What one member owns at one revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    /// The Swarm's name.
    pub swarm: String,
    /// The member's pod name (`<pool>-<ordinal>`).
    pub member: String,
    /// The revision at which this member's slice last changed.
    pub revision: u64,
    /// [`slice_hash`] of `jobs` and `instances` ([`canonical_hash`] of the
    /// jobs when there are no instances).
    pub hash: String,
    /// The jobs, sorted by byte order, unique.
    pub jobs: JobSet,
    /// The plan instances placed on this member, sorted by name, unique.
    pub instances: Vec<SliceInstance>,
}

/// One plan instance placed on a member: what its processes must run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliceInstance {
    /// The instance's stable name, `<plan>-<n>`.
    pub name: String,
    /// The DeploymentPlan it belongs to.
    pub plan: String,
    /// The plan's deployment revision this instance runs.
    pub deployment: u64,
    /// The plan's applications with their payload coordinates, sorted by name, unique.
    pub applications: Vec<InstanceApplication>,
}

/// One application of an instance: its payload coordinates (e.g. image,
/// version) and the ports it listens on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceApplication {
    /// The application's name within its plan.
    pub name: String,
    /// Payload coordinates: key → value, sorted by key.
    pub coordinates: BTreeMap<String, String>,
    /// The ports it listens on, sorted (protocol, then number), unique; absent
    /// in the document when empty, and read as none when absent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<Port>,
}

impl InstanceApplication {
    /// An application with coordinates and no ports.
    pub fn new(name: impl Into<String>, coordinates: BTreeMap<String, String>) -> Self {
        InstanceApplication {
            name: name.into(),
            coordinates,
            ports: Vec::new(),
        }
    }
}

/// The state of one plan instance on its member, as the sidecar reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InstanceState {
    /// In the slice, not started (or not yet confirmed by the application).
    Pending,
    /// Its process started and has not yet run for the settle period.
    Installing,
    /// Running (past the settle period), completed with exit code 0, or
    /// confirmed by the application's acknowledgement.
    Installed,
    /// Being stopped (revoked, or replaced by a changed deployment).
    Removing,
    /// Stopped; reported once, then dropped from the report.
    Removed,
    /// Its process exited non-zero or could not start; see `code` and `message`.
    Failed,
}

/// One entry of the member Lease annotation
/// [`ANNOTATION_INSTANCE_STATES`](crate::names::ANNOTATION_INSTANCE_STATES):
/// `{"state": "...", "deployment": N, "code"?: "...", "message"?: "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceReport {
    /// Where the instance stands.
    pub state: InstanceState,
    /// The deployment revision this state is about.
    pub deployment: u64,
    /// Failure code: `ExitCode<n>`, `Signal<n>`, `SpawnFailed`, `EnvironmentCollision`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Human-readable detail of a failure (at most [`MAX_REPORT_MESSAGE_BYTES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Longest `message` in an [`InstanceReport`], in bytes.
pub const MAX_REPORT_MESSAGE_BYTES: usize = 256;

impl InstanceReport {
    /// A report without failure detail.
    pub fn new(state: InstanceState, deployment: u64) -> InstanceReport {
        InstanceReport {
            state,
            deployment,
            code: None,
            message: None,
        }
    }

    /// A `failed` report; the message is cut to [`MAX_REPORT_MESSAGE_BYTES`]
    /// (on a character boundary, marked with `…`).
    pub fn failed(deployment: u64, code: impl Into<String>, message: &str) -> InstanceReport {
        InstanceReport {
            state: InstanceState::Failed,
            deployment,
            code: Some(code.into()),
            message: Some(truncate_message(message)),
        }
    }
}

fn truncate_message(message: &str) -> String {
    if message.len() <= MAX_REPORT_MESSAGE_BYTES {
        return message.to_owned();
    }
    let mut end = MAX_REPORT_MESSAGE_BYTES - '…'.len_utf8();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

/// Why an instance list cannot go into a slice. Names the offending entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstanceProblem {
    /// The name is not `<plan>-<n>`.
    #[error("instances[{position}] {name:?}: the name must be <plan>-<n> with plan {plan:?}")]
    BadName {
        /// Position in the list.
        position: usize,
        /// The name.
        name: String,
        /// The instance's plan.
        plan: String,
    },
    /// A name, plan, application or coordinate key is empty or holds a
    /// control character, or a coordinate value holds a NUL byte.
    #[error("instances[{position}] {name:?}: {field} {value:?} {why}")]
    BadText {
        /// Position in the list.
        position: usize,
        /// The instance's name.
        name: String,
        /// Which text (`plan`, `applications[i].name`, `applications[i].coordinates key`…).
        field: String,
        /// The text.
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// Two applications of one instance share a name.
    #[error("instances[{position}] {name:?}: application {application:?} is listed twice")]
    DuplicateApplication {
        /// Position in the list.
        position: usize,
        /// The instance's name.
        name: String,
        /// The repeated application.
        application: String,
    },
    /// An application lists one port twice.
    #[error("instances[{position}] {name:?}: application {application:?} lists port {port} twice")]
    DuplicatePort {
        /// Position in the list.
        position: usize,
        /// The instance's name.
        name: String,
        /// The application.
        application: String,
        /// The repeated port.
        port: Port,
    },
    /// Two instances share a name.
    #[error("instances[{position}] {name:?} is a duplicate of instances[{first_position}]")]
    DuplicateInstance {
        /// Position of the second entry.
        position: usize,
        /// Position of the first entry.
        first_position: usize,
        /// The name.
        name: String,
    },
}

impl Slice {
    /// A slice of jobs only, with its canonical hash computed from `jobs`.
    pub fn new(
        swarm: impl Into<String>,
        member: impl Into<String>,
        revision: u64,
        jobs: JobSet,
    ) -> Slice {
        Slice {
            swarm: swarm.into(),
            member: member.into(),
            revision,
            hash: canonical_hash(&jobs),
            jobs,
            instances: Vec::new(),
        }
    }

    /// The same slice carrying `instances` (any order; sorted here, applications
    /// too), with the hash recomputed over jobs and instances.
    pub fn with_instances(
        mut self,
        mut instances: Vec<SliceInstance>,
    ) -> Result<Slice, InstanceProblem> {
        for instance in &mut instances {
            instance
                .applications
                .sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
            for application in &mut instance.applications {
                application.ports.sort();
            }
        }
        instances.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        check_instances(&instances)?;
        self.hash = slice_hash(&self.jobs, &instances);
        self.instances = instances;
        Ok(self)
    }
}

/// Checks a sorted instance list: names `<plan>-<n>`, texts without control
/// characters, no duplicate instance, application or port of an application.
/// Positions refer to `instances`.
pub fn check_instances(instances: &[SliceInstance]) -> Result<(), InstanceProblem> {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (position, instance) in instances.iter().enumerate() {
        let bad_text = |field: String, value: &str, why| InstanceProblem::BadText {
            position,
            name: instance.name.clone(),
            field,
            value: value.to_owned(),
            why,
        };
        check_text(&instance.plan).map_err(|why| bad_text("plan".into(), &instance.plan, why))?;
        let number = instance
            .name
            .strip_prefix(instance.plan.as_str())
            .and_then(|rest| rest.strip_prefix('-'));
        if !number.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
            return Err(InstanceProblem::BadName {
                position,
                name: instance.name.clone(),
                plan: instance.plan.clone(),
            });
        }
        if let Some(first_position) = seen.insert(&instance.name, position) {
            return Err(InstanceProblem::DuplicateInstance {
                position,
                first_position,
                name: instance.name.clone(),
            });
        }
        let mut applications = BTreeMap::new();
        for (index, application) in instance.applications.iter().enumerate() {
            check_text(&application.name).map_err(|why| {
                bad_text(
                    format!("applications[{index}].name"),
                    &application.name,
                    why,
                )
            })?;
            if applications.insert(&application.name, index).is_some() {
                return Err(InstanceProblem::DuplicateApplication {
                    position,
                    name: instance.name.clone(),
                    application: application.name.clone(),
                });
            }
            let mut ports = std::collections::BTreeSet::new();
            if let Some(port) = application.ports.iter().find(|port| !ports.insert(**port)) {
                return Err(InstanceProblem::DuplicatePort {
                    position,
                    name: instance.name.clone(),
                    application: application.name.clone(),
                    port: *port,
                });
            }
            for (key, value) in &application.coordinates {
                check_text(key).map_err(|why| {
                    bad_text(format!("applications[{index}].coordinates key"), key, why)
                })?;
                if value.contains('\0') {
                    return Err(bad_text(
                        format!("applications[{index}].coordinates.{key}"),
                        value,
                        "holds a NUL byte",
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Names and keys: non-empty, no control characters (they become file,
/// environment and process names on the member).
fn check_text(text: &str) -> Result<(), &'static str> {
    if text.is_empty() {
        Err("is empty")
    } else if text.chars().any(char::is_control) {
        Err("holds a control character")
    } else {
        Ok(())
    }
}

/// `sha256:` + lowercase hex SHA-256 of every key followed by `\n`, in byte
/// order. Depends on the jobs only (not on revision, swarm or member), so an
/// unchanged slice keeps its hash. The empty slice hashes the empty string.
/// This is the hash of every slice without instances.
pub fn canonical_hash(jobs: &JobSet) -> String {
    slice_hash(jobs, &[])
}

/// The hash of a slice with instances: the bytes of [`canonical_hash`]
/// (every job key + `\n`), then, only if there are instances, the marker
/// `\x1e` `instances` `\n` and the canonical rendering of each instance in
/// name order:
///
/// ```text
/// instance <name> <plan> <deployment>\n
/// application <name>\n                  (per application, name order)
/// coordinate <key> <value>\n            (per coordinate, key order)
/// port <protocol> <number>\n            (per port, in order; none without ports)
/// ```
///
/// where every text is written as `<byte length>:<bytes>` (so any value,
/// spaces and newlines included, reads back one way), `deployment` and the
/// port number in decimal, the protocol `TCP` or `UDP`. A slice without
/// instances hashes exactly as before instances existed, and one whose
/// applications have no ports exactly as before ports existed.
pub fn slice_hash(jobs: &JobSet, instances: &[SliceInstance]) -> String {
    let mut hasher = Sha256::new();
    for key in jobs {
        hasher.update(key.as_bytes());
        hasher.update(b"\n");
    }
    if !instances.is_empty() {
        hasher.update(INSTANCES_MARKER);
        hasher.update(canonical_instances(instances));
    }
    format!("{HASH_PREFIX}{}", hex::encode(hasher.finalize()))
}

/// The canonical rendering of instances hashed by [`slice_hash`].
pub fn canonical_instances(instances: &[SliceInstance]) -> Vec<u8> {
    fn text(out: &mut Vec<u8>, value: &str) {
        out.extend_from_slice(value.len().to_string().as_bytes());
        out.push(b':');
        out.extend_from_slice(value.as_bytes());
    }
    let mut out = Vec::new();
    for instance in instances {
        out.extend_from_slice(b"instance ");
        text(&mut out, &instance.name);
        out.push(b' ');
        text(&mut out, &instance.plan);
        out.extend_from_slice(format!(" {}\n", instance.deployment).as_bytes());
        for application in &instance.applications {
            out.extend_from_slice(b"application ");
            text(&mut out, &application.name);
            out.push(b'\n');
            for (key, value) in &application.coordinates {
                out.extend_from_slice(b"coordinate ");
                text(&mut out, key);
                out.push(b' ');
                text(&mut out, value);
                out.push(b'\n');
            }
            for port in &application.ports {
                out.extend_from_slice(format!("port {} {}\n", port.protocol, port.port).as_bytes());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_of_a_slice_is_sha256_of_its_sorted_lines() {
        let jobs = JobSet::parse(["b", "a"]).unwrap();
        // printf 'a\nb\n' | sha256sum
        assert_eq!(
            canonical_hash(&jobs),
            "sha256:911169ddaaf146aff539f58c26c489af3b892dff0fe283c1c264c65ae5aa59a2"
        );
        assert_eq!(
            canonical_hash(&JobSet::default()),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
