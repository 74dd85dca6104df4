//! The bench's objects: the job list (one ConfigMap, or several through
//! `jobsFrom.configMapKeyRefs` when it does not fit in one, as users are told
//! to do), the StatefulSet of members, and the Swarm.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use shoal_controller::api::swarm::Swarm;
use shoal_emulator::harness::{Check, fixtures, wait_for};

use crate::watches::Sidecars;
use crate::{POOL, SWARM};

/// The most job list text one ConfigMap gets: what Shoal itself puts in one
/// (`MAX_PLAIN_BYTES`, under the API server's 1 MiB object limit with room
/// for the object's metadata).
const JOB_LIST_PART_BYTES: usize = shoal_core::format::MAX_PLAIN_BYTES;
/// The key of the job list in each ConfigMap.
const JOB_LIST_KEY: &str = "config.yml";

/// `jobs` job keys as `jobs:` documents, each under [`JOB_LIST_PART_BYTES`].
fn job_list_parts(jobs: usize) -> Vec<String> {
    let header = "jobs:\n";
    let mut parts = vec![String::from(header)];
    for index in 0..jobs {
        let line = format!("- stream:{index:08}\n");
        let current = parts.last_mut().expect("one part at least");
        if current.len() + line.len() > JOB_LIST_PART_BYTES {
            parts.push(format!("{header}{line}"));
        } else {
            current.push_str(&line);
        }
    }
    parts
}

/// Creates the job list ConfigMaps; returns the Swarm's `jobsFrom`.
pub async fn create_job_list(client: &Client, namespace: &str, jobs: usize) -> Value {
    let parts = job_list_parts(jobs);
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    let mut references = Vec::new();
    for (index, text) in parts.iter().enumerate() {
        let name = if parts.len() == 1 {
            "jobs".to_owned()
        } else {
            format!("jobs-{index}")
        };
        let mut part = ConfigMap::default();
        part.metadata.name = Some(name.clone());
        part.data = Some([(JOB_LIST_KEY.to_owned(), text.clone())].into());
        config_maps
            .create(&PostParams::default(), &part)
            .await
            .unwrap_or_else(|error| panic!("cannot create the job list ConfigMap {name}: {error}"));
        references.push(json!({ "name": name, "key": JOB_LIST_KEY }));
    }
    match references.as_slice() {
        [one] => json!({ "configMapKeyRef": one }),
        _ => json!({ "configMapKeyRefs": references }),
    }
}

/// Creates the StatefulSet of `members` (Parallel pod management, labelled
/// for the Swarm).
pub async fn create_members(client: &Client, namespace: &str, members: usize) {
    let mut set = fixtures::parallel(fixtures::statefulset(POOL, members as i32));
    set.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("shoal.dev/swarm".to_owned(), SWARM.to_owned());
    Api::<StatefulSet>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &set)
        .await
        .unwrap_or_else(|error| panic!("cannot create the StatefulSet: {error}"));
}

/// Waits until every member has a running sidecar.
pub async fn until_sidecars_run(sidecars: &Sidecars, members: usize) {
    let outcome = wait_for(
        "every member's sidecar",
        Duration::from_secs(600),
        || async {
            let running = sidecars.lock().await.len();
            if running == members {
                Check::Done(())
            } else {
                Check::Pending(format!("{running} of {members} sidecars running"))
            }
        },
    )
    .await;
    if let Err(error) = outcome {
        panic!("{error}");
    }
}

/// Creates the Swarm reading `jobs_from`.
pub async fn create_swarm(client: &Client, namespace: &str, jobs_from: Value) {
    let swarm: Swarm = serde_json::from_value(json!({
        "apiVersion": "shoal.dev/v1alpha1",
        "kind": "Swarm",
        "metadata": { "name": SWARM },
        "spec": { "jobsFrom": jobs_from },
    }))
    .expect("Swarm manifest");
    Api::<Swarm>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &swarm)
        .await
        .unwrap_or_else(|error| panic!("cannot create the Swarm: {error}"));
}

/// Scales the StatefulSet through its `scale` subresource, as `kubectl scale`.
pub async fn scale(client: &Client, namespace: &str, replicas: usize) {
    let patch = json!({ "spec": { "replicas": replicas } });
    if let Err(error) = Api::<StatefulSet>::namespaced(client.clone(), namespace)
        .patch_scale(POOL, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        panic!("cannot scale {POOL} to {replicas}: {error}");
    }
}
