//! The Swarm controller's watch caches: the pods and pools its watches deliver, kept so
//! that a pass reads them from memory instead of listing them.
//!
//! A cache is only as new as the last event its watch delivered. What makes it safe to
//! read:
//! - **The cache is filled by the very stream that triggers passes** (`watches_stream` on
//!   a reflected watch, `runtime::run_controller`): an event is in the cache before the
//!   pass it triggers starts, so a pass is never older than its trigger, and the last
//!   event of a change always triggers a pass that sees it.
//! - **Only what the controller does not write is cached.** Slices, history and the index
//!   (what decides ownership) and the Swarm's status are still read from the API server
//!   each pass, with the memo of decoded ConfigMaps (`decoded`).
//! - **A lagging pod cache only delays.** A pod not yet seen gets nothing; a pod seen
//!   Ready after it left keeps its slice until its deletion arrives, as it would between
//!   a list and its deletion; a pod not yet seen Ready again looks as it did a moment
//!   before, which the cluster can show a list as well.
//! - **Leases are listed.** A member's Lease is its liveness: a Lease cache whose watch
//!   stalled would show a live member's renewals stopped, and after `failoverAfter` its
//!   jobs would be handed to others while it still works them. Their watch only triggers
//!   passes; each pass lists them from the API server, as before.
//! - **Until a cache has been filled once** (its first list done), passes list, as
//!   one-off readers do.
//!
//! Pods keep only what a pass reads ([`strip_pod`]): a namespace of thousands of pods
//! costs the controller hundreds of bytes each, not the whole object.

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodSpec, PodStatus};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use shoal_core::names;

/// The caches of one term of leadership (the watches end with it).
#[derive(Clone)]
pub struct Watched {
    /// Pods, stripped to what a pass reads ([`strip_pod`]).
    pub pods: Store<Pod>,
    /// StatefulSets labelled for a Swarm.
    pub statefulsets: Store<StatefulSet>,
    /// Deployments labelled for a Swarm.
    pub deployments: Store<Deployment>,
}

impl Watched {
    /// The caches, if every one of them has been filled by its first list: a pass reads
    /// all of them or none, so that it never mixes a full cache with an empty one.
    pub fn ready(&self) -> Option<&Watched> {
        let filled = filled(&self.pods) && filled(&self.statefulsets) && filled(&self.deployments);
        filled.then_some(self)
    }
}

/// A watch's objects, each delivered after its cache holds it: what triggers passes.
pub type Trigger<K> = BoxStream<'static, Result<K, watcher::Error>>;

/// The watches that fill [`Watched`] (and the member Leases' one), as triggers for the controller
/// (`Controller::watches_stream`): each stream must be polled for its cache to fill.
pub struct Triggers {
    /// StatefulSets labelled for a Swarm.
    pub statefulsets: Trigger<StatefulSet>,
    /// Deployments labelled for a Swarm.
    pub deployments: Trigger<Deployment>,
    /// Pods (stripped).
    pub pods: Trigger<Pod>,
    /// Member Leases.
    pub leases: Trigger<Lease>,
}

impl Triggers {
    /// Polls every stream, dropping its events, until the returned tasks are aborted:
    /// fills the caches without a controller (tests, benchmarks).
    pub fn drain(self) -> Vec<tokio::task::JoinHandle<()>> {
        let Triggers {
            statefulsets,
            deployments,
            pods,
            leases,
        } = self;
        vec![
            tokio::spawn(statefulsets.for_each(|_| async {})),
            tokio::spawn(deployments.for_each(|_| async {})),
            tokio::spawn(pods.for_each(|_| async {})),
            tokio::spawn(leases.for_each(|_| async {})),
        ]
    }
}

/// Starts the watches of `namespace` (every namespace: `None`) and their caches.
///
/// Only what Shoal's labels mark is watched where a label can narrow it: StatefulSets and
/// Deployments labelled for a Swarm (one that loses its label leaves the selection, which
/// the watch reports as a deletion, so its Swarm still hears of it) and member Leases.
/// Pods cannot be narrowed so: pool pods carry their pool's labels.
pub fn watch(client: &Client, namespace: Option<&str>) -> (Watched, Triggers) {
    let pools_only = || watcher::Config::default().labels(names::LABEL_SWARM);
    let member_leases_only = || watcher::Config::default().labels(names::LABEL_MEMBER);
    let (statefulsets, statefulset_events) = reflected(
        super::api_in(client, namespace),
        pools_only(),
        strip_managed_fields::<StatefulSet>,
    );
    let (deployments, deployment_events) = reflected(
        super::api_in(client, namespace),
        pools_only(),
        strip_managed_fields::<Deployment>,
    );
    let (pods, pod_events) = reflected(
        super::api_in(client, namespace),
        watcher::Config::default(),
        strip_pod,
    );
    // Member Leases trigger passes but are not cached: a pass lists them (see the
    // module docs, "Leases are listed").
    let lease_events = watcher(
        super::api_in::<Lease>(client, namespace),
        member_leases_only(),
    )
    .default_backoff()
    .touched_objects()
    .boxed();
    (
        Watched {
            pods,
            statefulsets,
            deployments,
        },
        Triggers {
            statefulsets: statefulset_events,
            deployments: deployment_events,
            pods: pod_events,
            leases: lease_events,
        },
    )
}

/// A backed-off watch of `api`, each object trimmed by `strip`, put in the returned cache
/// before the stream delivers it.
fn reflected<K>(api: Api<K>, config: watcher::Config, strip: fn(&mut K)) -> (Store<K>, Trigger<K>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let events = watcher(api, config)
        .default_backoff()
        .modify(strip)
        .reflect(writer)
        .touched_objects()
        .boxed();
    (store, events)
}

/// The store has been filled by its watch's first list (it stays so: a relist replaces
/// its content at once, when the new list is complete).
fn filled<K>(store: &Store<K>) -> bool
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    use futures::FutureExt;
    matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
}

/// Keeps of a pod what the controller reads (`cluster::pools::pod_state`, the pool's
/// selector and ownership, the trigger's owner lookup): name, namespace, uid, labels,
/// owners, deletion, resourceVersion, node, IP and the Ready condition.
pub fn strip_pod(pod: &mut Pod) {
    let metadata = &mut pod.metadata;
    metadata.annotations = None;
    metadata.managed_fields = None;
    metadata.finalizers = None;
    metadata.generate_name = None;
    pod.spec = pod.spec.take().map(|spec| PodSpec {
        node_name: spec.node_name,
        ..PodSpec::default()
    });
    pod.status = pod.status.take().map(|status| PodStatus {
        pod_ip: status.pod_ip,
        conditions: status.conditions.map(|conditions| {
            conditions
                .into_iter()
                .filter(|condition| condition.type_ == "Ready")
                .map(|condition| PodCondition {
                    type_: condition.type_,
                    status: condition.status,
                    ..PodCondition::default()
                })
                .collect()
        }),
        ..PodStatus::default()
    });
}

/// Drops what no reader of a cached object looks at: the managed fields, often the
/// largest part of an object's metadata.
pub fn strip_managed_fields<K: kube::Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Container;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        ManagedFieldsEntry, ObjectMeta, OwnerReference, Time,
    };

    use super::*;
    use crate::cluster::pools::pod_state;

    fn full_pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("worker-3".into()),
                namespace: Some("jobs".into()),
                uid: Some("uid-3".into()),
                resource_version: Some("42".into()),
                labels: Some([("app".to_owned(), "worker".to_owned())].into()),
                annotations: Some([("note".to_owned(), "x".repeat(4096))].into()),
                owner_references: Some(vec![OwnerReference {
                    kind: "StatefulSet".into(),
                    name: "worker".into(),
                    uid: "sts-uid".into(),
                    ..OwnerReference::default()
                }]),
                deletion_timestamp: Some(Time(jiff::Timestamp::UNIX_EPOCH)),
                managed_fields: Some(vec![ManagedFieldsEntry::default(); 3]),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some("node-a".into()),
                containers: vec![Container {
                    name: "worker".into(),
                    image: Some("worker:1".into()),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                pod_ip: Some("10.0.0.3".into()),
                phase: Some("Running".into()),
                conditions: Some(vec![
                    PodCondition {
                        type_: "PodScheduled".into(),
                        status: "True".into(),
                        ..PodCondition::default()
                    },
                    PodCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        message: Some("ready".into()),
                        ..PodCondition::default()
                    },
                ]),
                ..PodStatus::default()
            }),
        }
    }

    /// Marks a cache filled, as its watch's first complete list does.
    fn fill<K>(writer: &mut reflector::store::Writer<K>)
    where
        K: kube::Resource<DynamicType = ()> + Clone + 'static,
    {
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
    }

    #[test]
    fn the_caches_are_read_only_once_every_one_was_filled() {
        let (pods, mut pod_writer) = reflector::store::<Pod>();
        let (statefulsets, mut statefulset_writer) = reflector::store::<StatefulSet>();
        let (deployments, mut deployment_writer) = reflector::store::<Deployment>();
        let watched = Watched {
            pods,
            statefulsets,
            deployments,
        };
        assert!(watched.ready().is_none(), "nothing filled yet");
        fill(&mut pod_writer);
        fill(&mut statefulset_writer);
        assert!(
            watched.ready().is_none(),
            "the Deployment cache is still empty: a pass must list rather than read no pool"
        );
        fill(&mut deployment_writer);
        assert!(watched.ready().is_some());
    }

    #[test]
    fn a_stripped_pod_reads_as_the_whole_pod_does() {
        let pod = full_pod();
        let mut stripped = pod.clone();
        strip_pod(&mut stripped);
        assert_eq!(pod_state(&stripped), pod_state(&pod));
        assert_eq!(stripped.metadata.labels, pod.metadata.labels);
        assert_eq!(
            stripped.metadata.owner_references,
            pod.metadata.owner_references
        );
        assert_eq!(stripped.metadata.name, pod.metadata.name);
        assert_eq!(stripped.metadata.namespace, pod.metadata.namespace);
    }

    #[test]
    fn a_stripped_pod_keeps_a_fraction_of_the_pod() {
        let pod = full_pod();
        let mut stripped = pod.clone();
        strip_pod(&mut stripped);
        let size = |pod: &Pod| {
            serde_json::to_vec(pod)
                .map(|bytes| bytes.len())
                .unwrap_or(0)
        };
        assert!(
            size(&stripped) * 4 < size(&pod),
            "{} of {} bytes kept",
            size(&stripped),
            size(&pod)
        );
        assert!(stripped.metadata.annotations.is_none());
        assert!(stripped.metadata.managed_fields.is_none());
    }

    #[test]
    fn a_pod_not_ready_stays_not_ready_when_stripped() {
        let mut pod = full_pod();
        if let Some(conditions) = pod
            .status
            .as_mut()
            .and_then(|status| status.conditions.as_mut())
        {
            conditions[1].status = "False".into();
        }
        let mut stripped = pod.clone();
        strip_pod(&mut stripped);
        assert!(!pod_state(&stripped).ready);
        assert_eq!(pod_state(&stripped), pod_state(&pod));
    }
}
