//! The simulated StatefulSet controller: pure planning ([`plan`]) under a
//! thin `kube::runtime::Controller` that observes, plans and applies.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

use super::SimError;
use super::kubelet::is_running_and_ready;

/// Label naming the pod (lets a Service select exactly one member).
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// Label naming the ControllerRevision a pod was created from.
pub const CONTROLLER_REVISION_HASH_LABEL: &str = "controller-revision-hash";
/// Label holding the pod's ordinal.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
const REVISION_HASH_LABEL: &str = "controller.kubernetes.io/hash";
const FIELD_MANAGER: &str = "shoal-emulator-statefulset-controller";

/// How a set replaces pods whose template is out of date.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateStrategy {
    /// Replace pods from the highest ordinal down to `partition`, one at a
    /// time, each only once every pod is Running and Ready.
    RollingUpdate {
        /// Ordinals below this keep the current revision.
        partition: u32,
    },
    /// Pods get the new template only when something deletes them.
    OnDelete,
}

/// What the controller knows about one existing pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView {
    /// The revision name in its `controller-revision-hash` label.
    pub revision: String,
    /// Phase Running and condition Ready=True.
    pub running_and_ready: bool,
    /// It has a deletionTimestamp.
    pub terminating: bool,
    /// Phase Failed.
    pub failed: bool,
}

/// The observed state of one StatefulSet, input to [`plan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetView {
    /// `spec.replicas`.
    pub replicas: u32,
    /// `podManagementPolicy: Parallel` (otherwise OrderedReady).
    pub parallel: bool,
    /// `spec.updateStrategy`.
    pub strategy: UpdateStrategy,
    /// The revision of the current template.
    pub update_revision: String,
    /// The revision ordinals below the partition keep.
    pub current_revision: String,
    /// Existing pods owned by the set, by ordinal (condemned ones included).
    pub pods: BTreeMap<u32, PodView>,
}

/// One action of the controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Create the pod of this ordinal from this revision.
    Create {
        /// Pod ordinal.
        ordinal: u32,
        /// Revision name whose template to use.
        revision: String,
    },
    /// Delete the pod of this ordinal.
    Delete {
        /// Pod ordinal.
        ordinal: u32,
    },
}

impl SetView {
    fn target_revision(&self, ordinal: u32) -> &str {
        match self.strategy {
            UpdateStrategy::RollingUpdate { partition } if ordinal < partition => {
                &self.current_revision
            }
            _ => &self.update_revision,
        }
    }
}

/// What to do next for a set, following the upstream controller: failed pods
/// are replaced; missing ordinals below `replicas` are created (OrderedReady:
/// the lowest one, and only when every lower ordinal is Running and Ready);
/// ordinals at or above `replicas` are deleted from the highest (OrderedReady:
/// one at a time, waiting for each to be gone); then a rolling update deletes
/// the highest out-of-date pod at or above the partition once every pod is
/// Running and Ready. OrderedReady returns at most one step.
pub fn plan(view: &SetView) -> Vec<Step> {
    let ordered = !view.parallel;
    let mut steps = Vec::new();
    for (&ordinal, pod) in view.pods.range(..view.replicas) {
        if pod.failed && !pod.terminating {
            steps.push(Step::Delete { ordinal });
            if ordered {
                return steps;
            }
        }
    }
    for ordinal in 0..view.replicas {
        match view.pods.get(&ordinal) {
            None => {
                steps.push(Step::Create {
                    ordinal,
                    revision: view.target_revision(ordinal).to_owned(),
                });
                if ordered {
                    return steps;
                }
            }
            Some(pod) if ordered && (pod.terminating || !pod.running_and_ready) => return steps,
            Some(_) => {}
        }
    }
    for (&ordinal, pod) in view.pods.range(view.replicas..).rev() {
        if pod.terminating {
            if ordered {
                return steps;
            }
            continue;
        }
        steps.push(Step::Delete { ordinal });
        if ordered {
            return steps;
        }
    }
    if !steps.is_empty() {
        return steps;
    }
    if let UpdateStrategy::RollingUpdate { partition } = view.strategy {
        let all_healthy = (0..view.replicas).all(|ordinal| {
            view.pods
                .get(&ordinal)
                .is_some_and(|pod| pod.running_and_ready && !pod.terminating)
        });
        if !all_healthy {
            return steps;
        }
        for ordinal in (partition..view.replicas).rev() {
            if view
                .pods
                .get(&ordinal)
                .is_some_and(|pod| pod.revision != view.update_revision)
            {
                steps.push(Step::Delete { ordinal });
                return steps;
            }
        }
    }
    steps
}

/// The status counters a view implies (upstream semantics: `replicas` counts
/// every existing pod; `currentRevision` advances once every pod runs the
/// update revision and is ready).
pub fn status_of(view: &SetView, previous_current: &str) -> StatefulSetStatus {
    let count = |keep: &dyn Fn(&PodView) -> bool| {
        i32::try_from(view.pods.values().filter(|pod| keep(pod)).count()).unwrap_or(i32::MAX)
    };
    let replicas = count(&|_| true);
    let ready = count(&|pod| pod.running_and_ready && !pod.terminating);
    let updated = count(&|pod| pod.revision == view.update_revision);
    let mut current_revision = if previous_current.is_empty() {
        view.update_revision.clone()
    } else {
        previous_current.to_owned()
    };
    let wanted = i32::try_from(view.replicas).unwrap_or(i32::MAX);
    if updated == wanted && ready == wanted && replicas == wanted {
        current_revision = view.update_revision.clone();
    }
    let current = count(&|pod| pod.revision == current_revision);
    StatefulSetStatus {
        replicas,
        ready_replicas: Some(ready),
        available_replicas: Some(ready),
        current_replicas: Some(current),
        updated_replicas: Some(updated),
        current_revision: Some(current_revision),
        update_revision: Some(view.update_revision.clone()),
        ..StatefulSetStatus::default()
    }
}

/// A stable hash of a pod template: FNV-1a 32 over its JSON, written with the
/// alphabet upstream uses for revision names (no vowels, so no words).
pub fn template_hash(template: &PodTemplateSpec) -> String {
    // serde_json's map keeps keys sorted, so equal templates give equal bytes.
    let canonical = serde_json::to_value(template)
        .map(|value| value.to_string())
        .unwrap_or_default();
    let mut hash: u32 = 0x811c_9dc5;
    for byte in canonical.as_bytes() {
        hash ^= u32::from(*byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    hash.to_string()
        .bytes()
        .map(|digit| ALPHABET[usize::from(digit - b'0') % ALPHABET.len()] as char)
        .collect()
}

/// The ControllerRevision name of a template hash: `<set>-<hash>`.
pub fn revision_name(set: &str, hash: &str) -> String {
    format!("{set}-{hash}")
}

/// The ordinal of `<set>-<ordinal>`, if the pod name has that shape.
pub fn ordinal_of(set: &str, pod: &str) -> Option<u32> {
    let suffix = pod.strip_prefix(set)?.strip_prefix('-')?;
    if suffix.is_empty() || (suffix.len() > 1 && suffix.starts_with('0')) {
        return None;
    }
    suffix.parse().ok()
}

/// Renders a label selector as the `labelSelector` query parameter.
pub fn selector_query(selector: &LabelSelector) -> String {
    let mut terms: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    for requirement in selector.match_expressions.iter().flatten() {
        let values = requirement.values.clone().unwrap_or_default().join(",");
        terms.push(match requirement.operator.as_str() {
            "In" => format!("{} in ({values})", requirement.key),
            "NotIn" => format!("{} notin ({values})", requirement.key),
            "Exists" => requirement.key.clone(),
            _ => format!("!{}", requirement.key),
        });
    }
    terms.join(",")
}

fn owner_reference(set: &StatefulSet) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".to_owned(),
        kind: "StatefulSet".to_owned(),
        name: set.name_any(),
        uid: set.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The pod of `ordinal` built from `template` at `revision`.
pub fn build_pod(
    set: &StatefulSet,
    template: &PodTemplateSpec,
    revision: &str,
    ordinal: u32,
) -> Pod {
    let set_name = set.name_any();
    let name = format!("{set_name}-{ordinal}");
    let template_meta = template.metadata.clone().unwrap_or_default();
    let mut labels = template_meta.labels.unwrap_or_default();
    labels.insert(POD_NAME_LABEL.to_owned(), name.clone());
    labels.insert(
        CONTROLLER_REVISION_HASH_LABEL.to_owned(),
        revision.to_owned(),
    );
    labels.insert(POD_INDEX_LABEL.to_owned(), ordinal.to_string());
    let mut spec = template.spec.clone().unwrap_or_default();
    spec.hostname = Some(name.clone());
    if let Some(service) = set.spec.as_ref().and_then(|spec| spec.service_name.clone())
        && !service.is_empty()
    {
        spec.subdomain = Some(service);
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: set.namespace(),
            labels: Some(labels),
            annotations: template_meta.annotations,
            owner_references: Some(vec![owner_reference(set)]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// The simulated StatefulSet controller. Runs until dropped.
pub struct StatefulSetController {
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for StatefulSetController {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("StatefulSetController")
    }
}

struct Context {
    client: Client,
    reporter: Reporter,
}

/// Records what the real StatefulSet controller records, with its reasons and
/// wording, so that `kubectl describe statefulset` shows the same history.
/// Failing to record is logged, never fatal (as in the real controller). A
/// fresh `Recorder` per Event: one shared Recorder would fold "create Pod
/// web-1" into the series of "create Pod web-0" (kube keys series by reason,
/// not by message).
async fn record(
    context: &Context,
    set: &StatefulSet,
    warning: bool,
    (reason, action): (&str, &str),
    note: String,
) {
    let event = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.to_owned(),
        note: Some(note),
        action: action.to_owned(),
        secondary: None,
    };
    let recorder = Recorder::new(context.client.clone(), context.reporter.clone());
    if let Err(error) = recorder.publish(&event, &set.object_ref(&())).await {
        tracing::debug!(%error, reason, "statefulset event");
    }
}

impl StatefulSetController {
    /// Starts reconciling every StatefulSet the client can see (all
    /// namespaces), re-planning on every change of a set or of a pod it owns.
    pub fn start(client: Client) -> StatefulSetController {
        let sets: Api<StatefulSet> = Api::all(client.clone());
        let pods: Api<Pod> = Api::all(client.clone());
        let reporter = Reporter {
            controller: "statefulset-controller".to_owned(),
            instance: None,
        };
        let context = Arc::new(Context { client, reporter });
        let task = tokio::spawn(async move {
            Controller::new(sets, watcher::Config::default())
                .owns(pods, watcher::Config::default())
                .run(reconcile, error_policy, context)
                .for_each(|outcome| async move {
                    if let Err(error) = outcome {
                        tracing::debug!(%error, "statefulset reconcile");
                    }
                })
                .await;
        });
        StatefulSetController { task }
    }

    /// Stops the controller.
    pub fn stop(self) {
        self.task.abort();
    }
}

impl Drop for StatefulSetController {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn error_policy(_set: Arc<StatefulSet>, error: &SimError, _context: Arc<Context>) -> Action {
    tracing::debug!(%error, "statefulset reconcile failed; retrying");
    Action::requeue(Duration::from_millis(300))
}

fn api_error(action: &'static str, object: String) -> impl FnOnce(kube::Error) -> SimError {
    move |source| SimError::Api {
        action,
        object,
        source,
    }
}

async fn reconcile(set: Arc<StatefulSet>, context: Arc<Context>) -> Result<Action, SimError> {
    if set.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = set.namespace().unwrap_or_else(|| "default".to_owned());
    let set_name = set.name_any();
    let object = format!("{namespace}/{set_name}");
    let Some(spec) = set.spec.as_ref() else {
        return Err(SimError::Invalid {
            object,
            problem: "StatefulSet has no spec".to_owned(),
        });
    };
    let set_uid = set.uid().unwrap_or_default();
    let client = &context.client;
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let revisions_api: Api<ControllerRevision> = Api::namespaced(client.clone(), &namespace);
    let sets_api: Api<StatefulSet> = Api::namespaced(client.clone(), &namespace);

    // Observe: the update revision (created if new), the pods the set owns.
    let hash = template_hash(&spec.template);
    let update_revision = revision_name(&set_name, &hash);
    let selector = selector_query(&spec.selector);
    let revisions = revisions_api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(api_error("list controllerrevisions of", object.clone()))?;
    let owned_revisions: Vec<&ControllerRevision> = revisions
        .items
        .iter()
        .filter(|revision| owned_by(&revision.metadata, &set_uid))
        .collect();
    let highest = owned_revisions
        .iter()
        .map(|revision| revision.revision)
        .max()
        .unwrap_or(0);
    match owned_revisions
        .iter()
        .find(|revision| revision.name_any() == update_revision)
    {
        None => {
            let mut labels = spec
                .template
                .metadata
                .as_ref()
                .and_then(|meta| meta.labels.clone())
                .unwrap_or_default();
            labels.insert(REVISION_HASH_LABEL.to_owned(), hash.clone());
            let revision = ControllerRevision {
                metadata: ObjectMeta {
                    name: Some(update_revision.clone()),
                    namespace: Some(namespace.clone()),
                    labels: Some(labels),
                    owner_references: Some(vec![owner_reference(&set)]),
                    ..ObjectMeta::default()
                },
                data: Some(RawExtension(
                    json!({ "spec": { "template": spec.template } }),
                )),
                revision: highest + 1,
            };
            match revisions_api
                .create(&PostParams::default(), &revision)
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(source) => {
                    return Err(SimError::Api {
                        action: "create controllerrevision for",
                        object,
                        source,
                    });
                }
            }
        }
        Some(existing) if existing.revision < highest => {
            // A rollback to an older template makes that revision the newest.
            revisions_api
                .patch(
                    &update_revision,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "revision": highest + 1 })),
                )
                .await
                .map_err(api_error("renumber controllerrevision of", object.clone()))?;
        }
        Some(_) => {}
    }
    let previous_status = set.status.clone().unwrap_or_default();
    let current_revision = previous_status
        .current_revision
        .clone()
        .filter(|revision| !revision.is_empty())
        .unwrap_or_else(|| update_revision.clone());

    let pod_list = pods_api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(api_error("list pods of", object.clone()))?;
    let mut pods = BTreeMap::new();
    for pod in &pod_list.items {
        if !owned_by(&pod.metadata, &set_uid) {
            continue;
        }
        let Some(ordinal) = ordinal_of(&set_name, &pod.name_any()) else {
            continue;
        };
        let phase = pod
            .status
            .as_ref()
            .and_then(|status| status.phase.as_deref())
            .unwrap_or_default();
        pods.insert(
            ordinal,
            PodView {
                revision: pod
                    .labels()
                    .get(CONTROLLER_REVISION_HASH_LABEL)
                    .cloned()
                    .unwrap_or_default(),
                running_and_ready: is_running_and_ready(pod),
                terminating: pod.metadata.deletion_timestamp.is_some(),
                failed: phase == "Failed",
            },
        );
    }
    let strategy = match spec.update_strategy.as_ref() {
        Some(strategy) if strategy.type_.as_deref() == Some("OnDelete") => UpdateStrategy::OnDelete,
        Some(strategy) => UpdateStrategy::RollingUpdate {
            partition: strategy
                .rolling_update
                .as_ref()
                .and_then(|rolling| rolling.partition)
                .and_then(|partition| u32::try_from(partition).ok())
                .unwrap_or(0),
        },
        None => UpdateStrategy::RollingUpdate { partition: 0 },
    };
    let view = SetView {
        replicas: spec
            .replicas
            .and_then(|replicas| u32::try_from(replicas).ok())
            .unwrap_or(1),
        parallel: spec.pod_management_policy.as_deref() == Some("Parallel"),
        strategy,
        update_revision: update_revision.clone(),
        current_revision: current_revision.clone(),
        pods: pods.clone(),
    };

    // Plan and apply.
    for step in plan(&view) {
        match step {
            Step::Create { ordinal, revision } => {
                let template = if revision == update_revision {
                    spec.template.clone()
                } else {
                    template_of_revision(&revisions.items, &revision)
                        .unwrap_or_else(|| spec.template.clone())
                };
                let pod = build_pod(&set, &template, &revision, ordinal);
                let pod_name = format!("{set_name}-{ordinal}");
                match pods_api.create(&PostParams::default(), &pod).await {
                    Ok(_) => {
                        let note =
                            format!("create Pod {pod_name} in StatefulSet {set_name} successful");
                        record(&context, &set, false, ("SuccessfulCreate", "Create"), note).await;
                    }
                    // Still terminating under the same name; its deletion
                    // will trigger another pass.
                    Err(kube::Error::Api(status)) if status.code == 409 => {}
                    Err(source) => {
                        let note = format!(
                            "create Pod {pod_name} in StatefulSet {set_name} failed error: {source}"
                        );
                        record(&context, &set, true, ("FailedCreate", "Create"), note).await;
                        return Err(SimError::Api {
                            action: "create pod",
                            object: format!("{namespace}/{set_name}-{ordinal}"),
                            source,
                        });
                    }
                }
            }
            Step::Delete { ordinal } => {
                let name = format!("{set_name}-{ordinal}");
                match delete_listed_pod(&pods_api, &pod_list.items, &name).await {
                    Ok(true) => {
                        let note =
                            format!("delete Pod {name} in StatefulSet {set_name} successful");
                        record(&context, &set, false, ("SuccessfulDelete", "Delete"), note).await;
                    }
                    Ok(false) => {}
                    Err(source) => {
                        let note = format!(
                            "delete Pod {name} in StatefulSet {set_name} failed error: {source}"
                        );
                        record(&context, &set, true, ("FailedDelete", "Delete"), note).await;
                        return Err(SimError::Api {
                            action: "delete pod",
                            object: format!("{namespace}/{name}"),
                            source,
                        });
                    }
                }
            }
        }
    }

    // Report: status through the status subresource, only when it changed.
    let mut status = status_of(&view, &current_revision);
    status.observed_generation = set.metadata.generation;
    status.collision_count = previous_status.collision_count;
    status.conditions = previous_status.conditions.clone();
    if status != previous_status {
        sets_api
            .patch_status(
                &set_name,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.to_owned()),
                    ..PatchParams::default()
                },
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .map_err(api_error("update status of statefulset", object.clone()))?;
    }

    // Truncate history: revisions no pod uses beyond revisionHistoryLimit.
    let mut live: std::collections::BTreeSet<String> =
        pods.values().map(|pod| pod.revision.clone()).collect();
    live.insert(status.current_revision.clone().unwrap_or_default());
    live.insert(update_revision.clone());
    let history: Vec<(String, i64)> = owned_revisions
        .iter()
        .map(|revision| (revision.name_any(), revision.revision))
        .collect();
    let limit = spec
        .revision_history_limit
        .and_then(|limit| usize::try_from(limit).ok())
        .unwrap_or(10);
    for name in revisions_to_prune(&history, &live, limit) {
        match revisions_api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => {
                return Err(SimError::Api {
                    action: "prune controllerrevision",
                    object: format!("{namespace}/{name}"),
                    source,
                });
            }
        }
    }
    Ok(Action::requeue(Duration::from_secs(5)))
}

/// Deletes the pod `name` of `listed` with its uid as precondition, so that a pod created
/// again under the same name since the list is never deleted in its place. `Ok(false)`:
/// it was gone already or is another pod now.
pub(super) async fn delete_listed_pod(
    pods_api: &Api<Pod>,
    listed: &[Pod],
    name: &str,
) -> Result<bool, kube::Error> {
    let uid = listed
        .iter()
        .find(|pod| pod.name_any() == name)
        .and_then(|pod| pod.uid());
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match pods_api.delete(name, &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(false),
        Err(source) => Err(source),
    }
}

/// The ControllerRevisions to delete, as upstream's history truncation:
/// revisions not `live` (used by a pod, or the current or update revision)
/// beyond the newest `limit` of them, oldest first.
pub fn revisions_to_prune(
    history: &[(String, i64)],
    live: &std::collections::BTreeSet<String>,
    limit: usize,
) -> Vec<String> {
    let mut idle: Vec<&(String, i64)> = history
        .iter()
        .filter(|(name, _)| !live.contains(name))
        .collect();
    idle.sort_by_key(|(_, number)| *number);
    let excess = idle.len().saturating_sub(limit);
    idle.into_iter()
        .take(excess)
        .map(|(name, _)| name.clone())
        .collect()
}

fn owned_by(meta: &ObjectMeta, uid: &str) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|owner| owner.controller == Some(true) && owner.uid == uid)
}

fn template_of_revision(revisions: &[ControllerRevision], name: &str) -> Option<PodTemplateSpec> {
    let revision = revisions
        .iter()
        .find(|revision| revision.metadata.name.as_deref() == Some(name))?;
    let template = revision.data.as_ref()?.0.get("spec")?.get("template")?;
    serde_json::from_value(template.clone()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(revision: &str, ready: bool) -> PodView {
        PodView {
            revision: revision.to_owned(),
            running_and_ready: ready,
            terminating: false,
            failed: false,
        }
    }

    fn view(replicas: u32, parallel: bool, pods: &[(u32, PodView)]) -> SetView {
        SetView {
            replicas,
            parallel,
            strategy: UpdateStrategy::RollingUpdate { partition: 0 },
            update_revision: "web-new".to_owned(),
            current_revision: "web-old".to_owned(),
            pods: pods.iter().cloned().collect(),
        }
    }

    #[test]
    fn ordered_ready_creates_the_next_ordinal_only_after_the_previous_is_ready() {
        let waiting = view(3, false, &[(0, pod("web-new", false))]);
        assert_eq!(plan(&waiting), vec![]);
        let ready = view(3, false, &[(0, pod("web-new", true))]);
        assert_eq!(
            plan(&ready),
            vec![Step::Create {
                ordinal: 1,
                revision: "web-new".to_owned()
            }]
        );
    }

    #[test]
    fn parallel_creates_every_missing_ordinal_at_once() {
        let steps = plan(&view(3, true, &[(1, pod("web-new", false))]));
        assert_eq!(
            steps,
            vec![
                Step::Create {
                    ordinal: 0,
                    revision: "web-new".to_owned()
                },
                Step::Create {
                    ordinal: 2,
                    revision: "web-new".to_owned()
                }
            ]
        );
    }

    #[test]
    fn ordered_scale_down_deletes_the_highest_ordinal_and_waits_for_it() {
        let pods: Vec<(u32, PodView)> = (0..4)
            .map(|ordinal| (ordinal, pod("web-new", true)))
            .collect();
        assert_eq!(
            plan(&view(2, false, &pods)),
            vec![Step::Delete { ordinal: 3 }]
        );
        let mut terminating = pods.clone();
        terminating[3].1.terminating = true;
        assert_eq!(plan(&view(2, false, &terminating)), vec![]);
        assert_eq!(
            plan(&view(2, true, &terminating)),
            vec![Step::Delete { ordinal: 2 }]
        );
    }

    #[test]
    fn rolling_update_replaces_the_highest_outdated_ordinal_above_the_partition() {
        let pods: Vec<(u32, PodView)> = (0..3)
            .map(|ordinal| (ordinal, pod("web-old", true)))
            .collect();
        let mut set = view(3, false, &pods);
        set.strategy = UpdateStrategy::RollingUpdate { partition: 1 };
        assert_eq!(plan(&set), vec![Step::Delete { ordinal: 2 }]);
        set.pods.insert(2, pod("web-new", true));
        assert_eq!(plan(&set), vec![Step::Delete { ordinal: 1 }]);
        set.pods.insert(1, pod("web-new", true));
        assert_eq!(plan(&set), vec![], "ordinal 0 is below the partition");
        set.pods.remove(&0);
        assert_eq!(
            plan(&set),
            vec![Step::Create {
                ordinal: 0,
                revision: "web-old".to_owned()
            }],
            "a pod below the partition is recreated at the current revision"
        );
    }

    #[test]
    fn rolling_update_waits_while_an_updated_pod_is_not_ready() {
        let mut set = view(
            2,
            true,
            &[(0, pod("web-old", true)), (1, pod("web-new", false))],
        );
        assert_eq!(plan(&set), vec![]);
        set.pods.insert(1, pod("web-new", true));
        assert_eq!(plan(&set), vec![Step::Delete { ordinal: 0 }]);
    }

    #[test]
    fn on_delete_never_deletes_outdated_pods_but_recreates_with_the_new_template() {
        let mut set = view(
            2,
            false,
            &[(0, pod("web-old", true)), (1, pod("web-old", true))],
        );
        set.strategy = UpdateStrategy::OnDelete;
        assert_eq!(plan(&set), vec![]);
        set.pods.remove(&1);
        assert_eq!(
            plan(&set),
            vec![Step::Create {
                ordinal: 1,
                revision: "web-new".to_owned()
            }]
        );
    }

    #[test]
    fn a_failed_pod_is_deleted_so_it_can_be_recreated() {
        let mut failed = pod("web-new", false);
        failed.failed = true;
        assert_eq!(
            plan(&view(1, false, &[(0, failed)])),
            vec![Step::Delete { ordinal: 0 }]
        );
    }

    #[test]
    fn status_advances_the_current_revision_only_when_every_pod_is_updated_and_ready() {
        let partial = view(
            2,
            false,
            &[(0, pod("web-old", true)), (1, pod("web-new", true))],
        );
        let status = status_of(&partial, "web-old");
        assert_eq!(status.current_revision.as_deref(), Some("web-old"));
        assert_eq!(status.updated_replicas, Some(1));
        assert_eq!(status.current_replicas, Some(1));
        let done = view(
            2,
            false,
            &[(0, pod("web-new", true)), (1, pod("web-new", true))],
        );
        let status = status_of(&done, "web-old");
        assert_eq!(status.current_revision.as_deref(), Some("web-new"));
        assert_eq!(status.current_replicas, Some(2));
        assert_eq!(status.ready_replicas, Some(2));
    }

    #[test]
    fn template_hash_is_stable_and_changes_with_the_template() {
        let mut template = PodTemplateSpec::default();
        let first = template_hash(&template);
        assert_eq!(first, template_hash(&template.clone()));
        assert!(
            first
                .chars()
                .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c))
        );
        template.metadata = Some(ObjectMeta {
            labels: Some([("app".to_owned(), "web".to_owned())].into()),
            ..ObjectMeta::default()
        });
        assert_ne!(first, template_hash(&template));
    }

    #[test]
    fn history_keeps_live_revisions_and_the_newest_idle_ones_up_to_the_limit() {
        let history: Vec<(String, i64)> = [("web-a", 1), ("web-b", 2), ("web-c", 3), ("web-d", 4)]
            .iter()
            .map(|(name, number)| ((*name).to_owned(), *number))
            .collect();
        let live: std::collections::BTreeSet<String> =
            ["web-a".to_owned(), "web-d".to_owned()].into();
        assert_eq!(revisions_to_prune(&history, &live, 1), vec!["web-b"]);
        assert_eq!(
            revisions_to_prune(&history, &live, 0),
            vec!["web-b", "web-c"]
        );
        assert!(revisions_to_prune(&history, &live, 10).is_empty());
    }

    #[test]
    fn ordinals_are_parsed_only_from_the_set_prefix() {
        assert_eq!(ordinal_of("web", "web-12"), Some(12));
        assert_eq!(ordinal_of("web", "web-x"), None);
        assert_eq!(ordinal_of("web", "webx-1"), None);
        assert_eq!(ordinal_of("web", "web-01"), None);
        assert_eq!(ordinal_of("web-a", "web-a-0"), Some(0));
    }
}
