//! One [`Members`] per labelled StatefulSet of the demo's namespace, following
//! pools as they are labelled, unlabelled, created and deleted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use shoal_core::names;
use shoal_worker::Settings;
use shoal_worker::exec::shell_quote;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use crate::members::{self, Members, MembersError, SIDECAR_CONTAINER};
use crate::observe::{exec_log, instance_log, slice_file};

/// How the sandbox's sidecars run.
#[derive(Debug, Clone)]
pub(crate) struct SidecarOptions {
    /// Namespace of the pools.
    pub namespace: String,
    /// The sandbox directory (slice files under `members/<pod>/slice.yaml`).
    pub dir: PathBuf,
    /// Member Lease duration for pods without a `shoal-worker` container.
    pub lease: Duration,
    /// Pods whose sidecar waits for the application's `POST /v1/ack` (no
    /// `--ack-on-apply`): a user runs an example worker against it.
    pub app_ack: BTreeSet<String>,
}

/// A pool's sidecars and the StatefulSet they belong to.
struct Pool {
    uid: String,
    selector: String,
    members: Members,
}

/// The sidecars of every labelled pool of a namespace.
pub(crate) struct Sidecars {
    pools: Arc<Mutex<BTreeMap<String, Pool>>>,
    task: JoinHandle<()>,
}

impl Sidecars {
    /// Starts following the labelled StatefulSets of `options.namespace`.
    pub fn start(client: Client, options: SidecarOptions) -> Sidecars {
        let pools = Arc::new(Mutex::new(BTreeMap::new()));
        let task = tokio::spawn(follow(client, options, pools.clone()));
        Sidecars { pools, task }
    }

    /// Pods whose sidecar could not start, with why.
    pub async fn failures(&self) -> BTreeMap<String, String> {
        let pools = self.pools.lock().await;
        let mut failures = BTreeMap::new();
        for pool in pools.values() {
            failures.extend(pool.members.failures().await);
        }
        failures
    }

    /// Each running sidecar's local API address, by pod.
    pub async fn addresses(&self) -> BTreeMap<String, std::net::SocketAddr> {
        let pools = self.pools.lock().await;
        pools
            .values()
            .flat_map(|pool| pool.members.running())
            .map(|(pod, running)| (pod, running.http_addr))
            .collect()
    }

    /// Stops following pools and stops every sidecar gracefully.
    pub async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
        let pools = std::mem::take(&mut *self.pools.lock().await);
        futures::future::join_all(pools.into_values().map(|pool| pool.members.stop())).await;
    }
}

/// Keeps one [`Members`] per labelled StatefulSet (by uid and selector).
async fn follow(
    client: Client,
    options: SidecarOptions,
    pools: Arc<Mutex<BTreeMap<String, Pool>>>,
) {
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &options.namespace);
    let labelled = ListParams::default().labels(names::LABEL_SWARM);
    loop {
        match sets.list(&labelled).await {
            Err(error) => tracing::warn!(%error, "sandbox: listing the pools"),
            Ok(list) => {
                let wanted: BTreeMap<String, (String, String)> = list
                    .items
                    .iter()
                    .filter(|set| set.metadata.deletion_timestamp.is_none())
                    .filter_map(|set| {
                        let selector = set.spec.as_ref().map(|spec| &spec.selector)?;
                        match selector_text(selector) {
                            Some(text) => {
                                Some((set.name_any(), (set.uid().unwrap_or_default(), text)))
                            }
                            None => {
                                tracing::warn!(
                                    pool = set.name_any(),
                                    "sandbox: a pool with an empty selector gets no sidecars"
                                );
                                None
                            }
                        }
                    })
                    .collect();
                let mut current = pools.lock().await;
                let stale: Vec<String> = current
                    .iter()
                    .filter(|(name, pool)| {
                        wanted.get(*name) != Some(&(pool.uid.clone(), pool.selector.clone()))
                    })
                    .map(|(name, _)| name.clone())
                    .collect();
                for name in stale {
                    if let Some(pool) = current.remove(&name) {
                        tracing::info!(pool = name, "sandbox: pool gone; stopping its sidecars");
                        pool.members.stop().await;
                    }
                }
                for (name, (uid, selector)) in wanted {
                    if current.contains_key(&name) {
                        continue;
                    }
                    tracing::info!(pool = name, selector, "sandbox: running sidecars for pool");
                    let settings_options = options.clone();
                    let members =
                        Members::start(client.clone(), &options.namespace, &selector, move |pod| {
                            sidecar_settings(pod, &settings_options)
                        });
                    current.insert(
                        name,
                        Pool {
                            uid,
                            selector,
                            members,
                        },
                    );
                }
            }
        }
        remove_gone_member_dirs(&client, &options).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Removes `members/<pod>/` of pods that no longer exist, as a pod's
/// `emptyDir` goes with the pod (a pod object stays until its sidecar
/// stopped, see [`members::SIDECAR_FINALIZER`]).
async fn remove_gone_member_dirs(client: &Client, options: &SidecarOptions) {
    let members_dir = options.dir.join("members");
    let Ok(entries) = std::fs::read_dir(&members_dir) else {
        return;
    };
    let dirs: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.path().is_dir())
        .filter_map(|entry| entry.file_name().into_string().ok())
        .collect();
    if dirs.is_empty() {
        return;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &options.namespace);
    let existing: BTreeSet<String> = match pods.list_metadata(&ListParams::default()).await {
        Ok(list) => list.items.iter().map(|pod| pod.name_any()).collect(),
        Err(error) => {
            tracing::debug!(%error, "sandbox: listing pods");
            return;
        }
    };
    for dir in dirs.iter().filter(|dir| !existing.contains(*dir)) {
        let path = members_dir.join(dir);
        match std::fs::remove_dir_all(&path) {
            Ok(()) => tracing::info!(pod = dir, "sandbox: pod gone; its slice directory too"),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "sandbox: removing a gone pod's directory")
            }
        }
    }
}

/// A label selector in the syntax of `?labelSelector=`; `None` when it selects everything.
fn selector_text(selector: &LabelSelector) -> Option<String> {
    let mut terms: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    for expression in selector.match_expressions.iter().flatten() {
        let values = expression.values.clone().unwrap_or_default().join(",");
        let key = &expression.key;
        terms.push(match expression.operator.as_str() {
            "In" => format!("{key} in ({values})"),
            "NotIn" => format!("{key} notin ({values})"),
            "Exists" => key.clone(),
            _ => format!("!{key}"),
        });
    }
    (!terms.is_empty()).then(|| terms.join(","))
}

/// The sidecar settings of a pod: its `shoal-worker` container's flags when it
/// has one (file/HTTP mode or exec mode), else file mode; always with the
/// slice file under the sandbox directory, and acknowledging on apply unless
/// in exec mode (no application runs here to confirm).
pub(crate) fn sidecar_settings(
    pod: &Pod,
    options: &SidecarOptions,
) -> Result<Settings, MembersError> {
    let name = pod.name_any();
    let mut settings = match members::settings_from_pod(pod, SIDECAR_CONTAINER) {
        Ok(settings) => settings,
        Err(MembersError::NoSidecarContainer { .. }) => {
            let mut settings = Settings::for_member(name.clone(), options.namespace.clone());
            settings.lease_duration = options.lease;
            settings.pod_uid = pod.metadata.uid.clone();
            settings
        }
        Err(error) => return Err(error),
    };
    let file = slice_file(&options.dir, &name);
    create_parent(&file).map_err(|reason| MembersError::Settings {
        pod: name.clone(),
        reason,
    })?;
    settings.slice_file = Some(file);
    // Each instance process writes its standard output into its own log,
    // `members/<pod>/<instance>.log`: `{instance}` is replaced shell-quoted, and
    // adjacent quoted words make one path. Its standard error stays with the
    // sidecar, as in a pod: the sidecar prefixes it into its own output and
    // reports the last line as the message of a failed instance.
    if let Some(template) = settings.exec_instance.take() {
        let directory = instance_log(&options.dir, &name, "")
            .parent()
            .map(|dir| format!("{}/", dir.display()))
            .unwrap_or_default();
        settings.exec_instance = Some(format!(
            "exec >>{}{{instance}}{}; {template}",
            shell_quote(&directory),
            shell_quote(".log")
        ));
    }
    match settings.exec.take() {
        // Job processes inherit this process's output; into a per-member log
        // it does not bury the tour on the terminal.
        Some(template) => {
            let log = exec_log(&options.dir, &name);
            settings.exec = Some(format!(
                "exec >>{} 2>&1; {template}",
                shell_quote(&log.display().to_string())
            ));
        }
        // No application runs here to confirm a slice, unless the user said
        // they run one against this member's sidecar.
        None => settings.ack_on_apply = !options.app_ack.contains(&name),
    }
    Ok(settings)
}

fn create_parent(file: &Path) -> Result<(), String> {
    let Some(parent) = file.parent() else {
        return Ok(());
    };
    std::fs::create_dir_all(parent)
        .map_err(|error| format!("cannot create {}: {error}", parent.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn pod(yaml_containers: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "swarm-worker-1", "namespace": "demo-ns"},
            "spec": {"containers": yaml_containers},
        }))
        .expect("valid pod")
    }

    fn options(dir: &Path) -> SidecarOptions {
        SidecarOptions {
            namespace: "demo-ns".to_owned(),
            dir: dir.to_path_buf(),
            lease: Duration::from_secs(6),
            app_ack: BTreeSet::new(),
        }
    }

    #[test]
    fn a_pod_without_a_sidecar_container_gets_file_mode_acknowledging_on_apply() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pod = pod(serde_json::json!([{"name": "app", "image": "pause"}]));
        let settings = sidecar_settings(&pod, &options(dir.path())).expect("settings");
        assert_eq!(settings.pod_name, "swarm-worker-1");
        assert_eq!(settings.pod_namespace, "demo-ns");
        assert!(settings.ack_on_apply);
        assert!(settings.exec.is_none());
        assert_eq!(settings.lease_duration, Duration::from_secs(6));
        let file = dir.path().join("members/swarm-worker-1/slice.yaml");
        assert_eq!(settings.slice_file.as_deref(), Some(file.as_path()));
        assert!(file.parent().is_some_and(Path::is_dir));
    }

    #[test]
    fn a_sidecar_container_keeps_its_flags_but_writes_the_file_into_the_sandbox() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pod = pod(serde_json::json!([{
            "name": "shoal-worker",
            "image": "shoal-worker:dev",
            "env": [
                {"name": "SHOAL_SLICE_FILE", "value": "/var/run/shoal/slice.yaml"},
                {"name": "SHOAL_EXEC", "value": "sleep 60"},
                {"name": "SHOAL_LEASE_DURATION", "value": "9s"},
            ],
        }]));
        let settings = sidecar_settings(&pod, &options(dir.path())).expect("settings");
        let log = dir.path().join("members/swarm-worker-1/exec.log");
        assert_eq!(
            settings.exec,
            Some(format!("exec >>'{}' 2>&1; sleep 60", log.display()))
        );
        assert!(!settings.ack_on_apply, "exec mode acknowledges by itself");
        assert_eq!(settings.lease_duration, Duration::from_secs(9));
        assert_eq!(
            settings.slice_file,
            Some(dir.path().join("members/swarm-worker-1/slice.yaml"))
        );
    }

    #[tokio::test]
    async fn exec_mode_job_output_lands_in_the_members_log() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pod = pod(serde_json::json!([{
            "name": "shoal-worker",
            "image": "shoal-worker:dev",
            "env": [{"name": "SHOAL_EXEC", "value": "echo \"$SHOAL_MEMBER runs {job}\""}],
        }]));
        let settings = sidecar_settings(&pod, &options(dir.path())).expect("settings");
        let command = settings
            .exec
            .expect("exec mode")
            .replace("{job}", "stream:a");
        let status = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(&command)
            .env("SHOAL_MEMBER", "swarm-worker-1")
            .stdout(std::process::Stdio::null())
            .status()
            .await
            .expect("sh runs");
        assert!(status.success());
        let log = std::fs::read_to_string(dir.path().join("members/swarm-worker-1/exec.log"))
            .expect("the log exists");
        assert_eq!(log, "swarm-worker-1 runs stream:a\n");
    }

    #[tokio::test]
    async fn exec_instance_output_lands_in_the_instances_own_log() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pod = pod(serde_json::json!([{
            "name": "shoal-worker",
            "image": "shoal-worker:dev",
            "env": [{"name": "SHOAL_EXEC_INSTANCE", "value": "echo \"$SHOAL_INSTANCE runs $SHOAL_NGINX_IMAGE\""}],
        }]));
        let settings = sidecar_settings(&pod, &options(dir.path())).expect("settings");
        let web0 = shoal_core::slice::SliceInstance {
            name: "web-0".to_owned(),
            plan: "web".to_owned(),
            deployment: 1,
            applications: Vec::new(),
        };
        // As the sidecar builds the command of one instance.
        let command = shoal_worker::instances::instance_command(
            &settings.exec_instance.expect("instance exec mode"),
            &web0,
            "swarm-worker-1",
        );
        let status = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(&command)
            .env("SHOAL_INSTANCE", "web-0")
            .env("SHOAL_NGINX_IMAGE", "nginx:1.25")
            .stdout(std::process::Stdio::null())
            .status()
            .await
            .expect("sh runs");
        assert!(status.success());
        let log = std::fs::read_to_string(dir.path().join("members/swarm-worker-1/web-0.log"))
            .expect("the instance's log exists");
        assert_eq!(log, "web-0 runs nginx:1.25\n");
    }

    #[test]
    fn selectors_render_in_label_selector_syntax() {
        let selector = LabelSelector {
            match_labels: Some([("app".to_owned(), "swarm-worker".to_owned())].into()),
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "tier".to_owned(),
                    operator: "In".to_owned(),
                    values: Some(vec!["a".to_owned(), "b".to_owned()]),
                },
                LabelSelectorRequirement {
                    key: "canary".to_owned(),
                    operator: "DoesNotExist".to_owned(),
                    values: None,
                },
            ]),
        };
        assert_eq!(
            selector_text(&selector).as_deref(),
            Some("app=swarm-worker,tier in (a,b),!canary")
        );
        assert_eq!(selector_text(&LabelSelector::default()), None);
    }
}
