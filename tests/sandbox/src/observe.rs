//! Reading one [`Observation`] of a Swarm from the API and the members' files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use shoal_controller::api::swarm::Swarm;
use shoal_core::names;

use crate::convergence::{Ack, Observation};

/// Why an observation could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// An API call failed.
    #[error("{action}: {source}")]
    Api {
        /// What was being read.
        action: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
}

fn api_error(action: impl Into<String>) -> impl FnOnce(kube::Error) -> ObserveError {
    let action = action.into();
    move |source| ObserveError::Api { action, source }
}

/// The StatefulSets labelled `shoal.dev/swarm=<swarm>` in `namespace`, with their replicas.
pub async fn pools(
    client: &Client,
    namespace: &str,
    swarm: &str,
) -> Result<Vec<(String, u32)>, ObserveError> {
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    let selector = format!("{}={swarm}", names::LABEL_SWARM);
    let sets = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(api_error(format!(
            "listing StatefulSets {selector} in {namespace}"
        )))?;
    Ok(sets
        .items
        .iter()
        .map(|set| {
            let replicas = set
                .spec
                .as_ref()
                .and_then(|spec| spec.replicas)
                .unwrap_or(1);
            (set.name_any(), u32::try_from(replicas).unwrap_or(0))
        })
        .collect())
}

/// Pods of `pools` (by StatefulSet owner) that are not terminating.
pub async fn member_pods(
    client: &Client,
    namespace: &str,
    pools: &[String],
) -> Result<BTreeSet<String>, ObserveError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pods = api
        .list(&ListParams::default())
        .await
        .map_err(api_error(format!("listing pods in {namespace}")))?;
    Ok(pods
        .items
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter(|pod| {
            pod.owner_references()
                .iter()
                .any(|owner| owner.kind == "StatefulSet" && pools.contains(&owner.name))
        })
        .map(|pod| pod.name_any())
        .collect())
}

/// Where a member's slice file lives under the sandbox directory.
pub fn slice_file(dir: &Path, pod: &str) -> std::path::PathBuf {
    dir.join("members").join(pod).join("slice.yaml")
}

/// Where the job processes of member `pod` (exec mode) write their output.
pub fn exec_log(dir: &Path, pod: &str) -> std::path::PathBuf {
    dir.join("members").join(pod).join("exec.log")
}

/// Where the process of plan instance `instance` on member `pod` (exec mode,
/// `--exec-instance`) writes its output.
pub fn instance_log(dir: &Path, pod: &str, instance: &str) -> std::path::PathBuf {
    dir.join("members")
        .join(pod)
        .join(format!("{instance}.log"))
}

/// A running instance process: its member, instance and environment.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct InstanceProcess {
    /// The member (pod name) it runs for.
    pub member: String,
    /// The instance.
    pub instance: String,
    /// Its `SHOAL_*` environment variables.
    pub environment: BTreeMap<String, String>,
    /// Its process id.
    pub pid: u32,
}

impl InstanceProcess {
    /// The value of environment variable `name` (empty when unset).
    pub fn var(&self, name: &str) -> &str {
        self.environment.get(name).map_or("", String::as_str)
    }
}

/// Every process whose standard output is an instance log under `dir`
/// (`members/<pod>/<instance>.log`), with its environment.
pub fn instance_processes(dir: &Path) -> Vec<InstanceProcess> {
    let members = dir.join("members");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let proc_dir = entry.path();
        let Ok(output) = std::fs::read_link(proc_dir.join("fd/1")) else {
            continue;
        };
        let Ok(relative) = output.strip_prefix(&members) else {
            continue;
        };
        let parts: Vec<String> = relative
            .iter()
            .map(|part| part.to_string_lossy().into_owned())
            .collect();
        let [member, file] = parts.as_slice() else {
            continue;
        };
        let Some(instance) = file.strip_suffix(".log") else {
            continue;
        };
        let Ok(environ) = std::fs::read(proc_dir.join("environ")) else {
            continue;
        };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse().ok())
        else {
            continue;
        };
        let environment = environ
            .split(|byte| *byte == 0)
            .filter_map(|pair| {
                let pair = String::from_utf8_lossy(pair);
                let (key, value) = pair.split_once('=')?;
                key.starts_with("SHOAL_")
                    .then(|| (key.to_owned(), value.to_owned()))
            })
            .collect();
        found.push(InstanceProcess {
            member: member.clone(),
            instance: instance.to_owned(),
            environment,
            pid,
        });
    }
    found.sort();
    found
}

/// Observes `swarm` in `namespace`: its status, its member pods, their slice
/// ConfigMaps and Leases, and their slice files under `dir`.
pub async fn observe(
    client: &Client,
    namespace: &str,
    swarm: &str,
    dir: &Path,
) -> Result<Observation, ObserveError> {
    let swarms: Api<Swarm> = Api::namespaced(client.clone(), namespace);
    let object = swarms
        .get(swarm)
        .await
        .map_err(api_error(format!("reading Swarm {namespace}/{swarm}")))?;
    let status = object.status.unwrap_or_default();
    let reported_acks = status
        .members
        .iter()
        .map(|member| (member.name.clone(), member.acked_revision))
        .collect();
    let pool_names: Vec<String> = pools(client, namespace, swarm)
        .await?
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let pods = member_pods(client, namespace, &pool_names).await?;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let mut observation = Observation {
        swarm: swarm.to_owned(),
        phase: status.phase,
        current_revision: status.current_revision,
        pending_revision: status.pending_revision.map(|pending| pending.revision),
        jobs: status.jobs,
        pods,
        reported_acks,
        ..Observation::default()
    };
    for pod in &observation.pods {
        let name = names::slice_configmap(pod);
        let slice = config_maps
            .get_opt(&name)
            .await
            .map_err(api_error(format!("reading ConfigMap {namespace}/{name}")))?;
        if let Some(config_map) = slice {
            let decoded = shoal_worker::slice_doc::decode(&config_map, pod)
                .map_err(|problem| format!("ConfigMap {name}: {problem}"));
            observation.slices.insert(pod.clone(), decoded);
        }
        let lease_name = names::member_lease(pod);
        let lease = leases
            .get_opt(&lease_name)
            .await
            .map_err(api_error(format!("reading Lease {namespace}/{lease_name}")))?;
        if let Some(ack) = lease.as_ref().and_then(lease_ack) {
            observation.acks.insert(pod.clone(), ack);
        }
        let path = slice_file(dir, pod);
        if let Some(file) = read_slice_file(&path) {
            observation.files.insert(pod.clone(), file);
        }
    }
    Ok(observation)
}

/// The acknowledgement a member Lease carries, if any.
fn lease_ack(lease: &Lease) -> Option<Ack> {
    let annotations = lease.metadata.annotations.as_ref()?;
    let revision = annotations
        .get(names::ANNOTATION_ACKED_REVISION)?
        .parse()
        .ok()?;
    let hash = annotations.get(names::ANNOTATION_ACKED_HASH)?.clone();
    Some(Ack { revision, hash })
}

/// The slice a file holds; `None` when there is no file yet.
fn read_slice_file(path: &Path) -> Option<Result<shoal_worker::SliceView, String>> {
    match std::fs::read_to_string(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(error) => Some(Err(format!("cannot read {}: {error}", path.display()))),
        Ok(text) => Some(
            shoal_worker::slice_doc::parse(&text)
                .map_err(|problem| format!("{} is not a v1 slice: {problem}", path.display())),
        ),
    }
}
