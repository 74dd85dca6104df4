//! The I/O both controllers share: the context a reconcile runs with, the readers of
//! pools, pods, member Leases and slice ConfigMaps (returning `kube::Error`, which each
//! controller wraps in its own error), and Event publishing. Neither kind's modules are
//! imported here: both import this.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType};
use tracing::warn;

use crate::events::EventRecorders;
use crate::metrics::Metrics;

pub mod config_maps;
pub mod decoded;
pub mod leases;
pub mod nodes;
pub mod pools;
pub mod too_large;
pub mod watched;

/// What the controller needs at hand while reconciling.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// The client evictions go through: it does not retry a PodDisruptionBudget's 429.
    pub evictions: Client,
    /// Evictions a PodDisruptionBudget refused in the last pass, by Swarm
    /// (`namespace/name`) and pod: what the API server said.
    pub blocked_evictions: std::sync::Mutex<BTreeMap<String, BTreeMap<String, String>>>,
    /// Publishes Events.
    pub events: EventRecorders,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// How the controller runs.
    pub settings: crate::Settings,
    /// Member Lease liveness on this controller's clock.
    pub lease_clock: crate::lease_clock::LeaseClock,
    /// Revision records decoded by earlier passes, by the ConfigMap versions they were
    /// read from ([`decoded`]: at most the records each Swarm's latest pass read).
    pub decoded: decoded::Decoded,
    /// The Swarm controller's watch caches while it leads ([`watched`]); `None` before
    /// its watches start and after they stop.
    pub watched: std::sync::Mutex<Option<watched::Watched>>,
}

impl Context {
    /// The watch caches a pass may read: set, and each filled by its first list.
    pub fn watched(&self) -> Option<watched::Watched> {
        let watched = self
            .watched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        watched.as_ref().and_then(watched::Watched::ready).cloned()
    }
}

/// The API of `K` in `namespace`, or in every namespace (a cluster-wide controller).
pub fn api_in<K>(client: &Client, namespace: Option<&str>) -> kube::Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(namespace) => kube::Api::namespaced(client.clone(), namespace),
        None => kube::Api::all(client.clone()),
    }
}

/// The API server answered 404.
pub fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// Publishes an Event; failing to do so is logged, never fatal.
pub async fn publish_on(
    ctx: &Context,
    reference: &ObjectReference,
    warning: bool,
    reason: &str,
    note: &str,
) {
    let event = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.to_owned(),
        note: Some(note.chars().take(1000).collect()),
        action: "Reconcile".to_owned(),
        secondary: None,
    };
    ctx.metrics.wrote("event");
    if let Err(error) = ctx.events.publish(&event, reference).await {
        warn!(%error, reason, "could not publish Event");
    }
}
