//! Objects and observations tests share, built so they also run on a real
//! cluster (a real image, readiness gates rather than emulator-only knobs).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec, StatefulSetUpdateStrategy};
use k8s_openapi::api::core::v1::{Container, Pod, PodReadinessGate, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use super::{Check, HarnessError, wait_for};
use crate::sim::{READINESS_GATE, is_running_and_ready, ordinal_of};

/// The image test pods run (only a real cluster pulls it).
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// A StatefulSet `name` of `replicas` pause pods labelled `app: <name>`,
/// OrderedReady, RollingUpdate, grace period 1 s.
pub fn statefulset(name: &str, replicas: i32) -> StatefulSet {
    let labels: BTreeMap<String, String> = [("app".to_owned(), name.to_owned())].into();
    StatefulSet {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(StatefulSetSpec {
            replicas: Some(replicas),
            service_name: Some(name.to_owned()),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    termination_grace_period_seconds: Some(1),
                    containers: vec![Container {
                        name: "app".to_owned(),
                        image: Some(PAUSE_IMAGE.to_owned()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("RollingUpdate".to_owned()),
                rolling_update: None,
            }),
            ..StatefulSetSpec::default()
        }),
        status: None,
    }
}

/// Gives the set's pods the [`READINESS_GATE`], so they stay unready until a
/// test calls `set_pod_ready`.
pub fn gated(mut set: StatefulSet) -> StatefulSet {
    if let Some(spec) = set
        .spec
        .as_mut()
        .and_then(|spec| spec.template.spec.as_mut())
    {
        spec.readiness_gates = Some(vec![PodReadinessGate {
            condition_type: READINESS_GATE.to_owned(),
        }]);
    }
    set
}

/// Sets `podManagementPolicy: Parallel`.
pub fn parallel(mut set: StatefulSet) -> StatefulSet {
    if let Some(spec) = set.spec.as_mut() {
        spec.pod_management_policy = Some("Parallel".to_owned());
    }
    set
}

/// The pods of `set` in `namespace` (by its `app` label), by ordinal.
pub async fn pods_of(
    client: &Client,
    namespace: &str,
    set: &str,
) -> Result<BTreeMap<u32, Pod>, kube::Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let list = pods
        .list(&ListParams::default().labels(&format!("app={set}")))
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|pod| ordinal_of(set, &pod.name_any()).map(|ordinal| (ordinal, pod)))
        .collect())
}

/// One line per pod: name, phase, ready, terminating.
pub fn describe_pods(pods: &BTreeMap<u32, Pod>) -> String {
    let lines: Vec<String> = pods
        .values()
        .map(|pod| {
            format!(
                "{}(phase={}, ready={}, terminating={})",
                pod.name_any(),
                pod.status
                    .as_ref()
                    .and_then(|status| status.phase.clone())
                    .unwrap_or_default(),
                is_running_and_ready(pod),
                pod.metadata.deletion_timestamp.is_some()
            )
        })
        .collect();
    if lines.is_empty() {
        "no pods".to_owned()
    } else {
        lines.join(", ")
    }
}

/// Waits until exactly ordinals `0..count` of `set` exist, all Running and
/// Ready and none terminating; returns them.
pub async fn wait_for_ready_pods(
    client: &Client,
    namespace: &str,
    set: &str,
    count: u32,
    timeout: Duration,
) -> Result<BTreeMap<u32, Pod>, HarnessError> {
    wait_for(&format!("{count} ready pods of {set}"), timeout, || async {
        match pods_of(client, namespace, set).await {
            Err(error) => Check::Pending(format!("list failed: {error}")),
            Ok(pods) => {
                let done = pods.len() == count as usize
                    && pods.keys().copied().eq(0..count)
                    && pods.values().all(|pod| {
                        is_running_and_ready(pod) && pod.metadata.deletion_timestamp.is_none()
                    });
                if done {
                    Check::Done(pods)
                } else {
                    Check::Pending(describe_pods(&pods))
                }
            }
        }
    })
    .await
}
