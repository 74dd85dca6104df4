//! Running the real `kubectl-shoal` binary against a test cluster.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::process::Stdio;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::ListParams;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use shoal_controller::api::swarm::Swarm;

use crate::common::Env;

/// What one plugin run printed.
#[derive(Debug)]
pub struct Run {
    /// Exit status was 0.
    pub success: bool,
    /// The exit code (`None` when a signal ended the process).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Runs `kubectl-shoal --kubeconfig <cluster> -n <namespace> <args>`.
pub async fn shoal(env: &Env, args: &[&str]) -> Run {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-shoal"));
    command
        .arg("--kubeconfig")
        .arg(env.kubeconfig_path())
        .arg("-n")
        .arg(&env.namespace)
        .args(args)
        // The flag, not the environment, must pick the cluster.
        .env_remove("KUBECONFIG");
    run(command).await
}

/// Runs the plugin with an explicit environment and no connection flags.
pub async fn shoal_with_env(args: &[&str], vars: &[(&str, &str)]) -> Run {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-shoal"));
    command.args(args).env_remove("KUBECONFIG");
    for (key, value) in vars {
        command.env(key, value);
    }
    run(command).await
}

async fn run(mut command: tokio::process::Command) -> Run {
    let output = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output()
        .await
        .expect("kubectl-shoal runs");
    Run {
        success: output.status.success(),
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs the plugin with `-o json` and parses its report; panics naming the failure.
pub async fn shoal_json<T: DeserializeOwned>(env: &Env, args: &[&str]) -> T {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["-o", "json"]);
    let run = shoal(env, &all).await;
    assert!(run.success, "kubectl-shoal {all:?} failed: {}", run.stderr);
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|error| panic!("kubectl-shoal {all:?}: {error}\n{}", run.stdout))
}

/// Runs the plugin (table output) and returns stdout; panics naming the failure, and
/// when a default table (its `+`/`|` lines) is wider than 120 columns (only `-o wide` may be).
pub async fn shoal_ok(env: &Env, args: &[&str]) -> String {
    let run = shoal(env, args).await;
    assert!(run.success, "kubectl-shoal {args:?} failed: {}", run.stderr);
    if !args.contains(&"-o") {
        let table_lines = run
            .stdout
            .lines()
            .filter(|line| line.starts_with(['+', '|']));
        for line in table_lines {
            assert!(
                line.chars().count() <= 120,
                "kubectl-shoal {args:?} printed a line of {} columns:\n{}",
                line.chars().count(),
                run.stdout
            );
        }
    }
    run.stdout
}

/// Runs the plugin, expecting it to fail with `expected` in its error; panics otherwise.
pub async fn shoal_refused(env: &Env, args: &[&str], expected: &str) {
    let run = shoal(env, args).await;
    assert!(
        !run.success,
        "kubectl-shoal {args:?} succeeded: {}",
        run.stdout
    );
    assert!(
        run.stderr.contains(expected),
        "kubectl-shoal {args:?}: {expected:?} not in: {}",
        run.stderr
    );
}

async fn versions<K>(env: &Env, into: &mut BTreeMap<String, String>)
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(env.client.clone(), &env.namespace);
    for object in api.list(&ListParams::default()).await.expect("list").items {
        into.insert(
            format!("{}/{}", K::kind(&()), object.name_any()),
            object.resource_version().unwrap_or_default(),
        );
    }
}

/// resourceVersion of every Swarm, ConfigMap, StatefulSet, Pod and Lease of the namespace.
pub async fn resource_versions(env: &Env) -> BTreeMap<String, String> {
    let mut all = BTreeMap::new();
    versions::<Swarm>(env, &mut all).await;
    versions::<ConfigMap>(env, &mut all).await;
    versions::<StatefulSet>(env, &mut all).await;
    versions::<Pod>(env, &mut all).await;
    versions::<Lease>(env, &mut all).await;
    all
}

/// Owner of every job, from the slices in the cluster.
pub fn owners(slices: &BTreeMap<String, Vec<String>>) -> BTreeMap<String, String> {
    slices
        .iter()
        .flat_map(|(member, jobs)| jobs.iter().map(move |job| (job.clone(), member.clone())))
        .collect()
}

/// (job, from, to) of every job whose owner differs between two owner maps.
pub fn moved(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> Vec<(String, String, String)> {
    before
        .iter()
        .filter_map(|(job, from)| {
            let to = after.get(job)?;
            (to != from).then(|| (job.clone(), from.clone(), to.clone()))
        })
        .collect()
}
