//! The zones of the Nodes that members run on: a member's update domain when its pool
//! declares none (`shoal_core::deploy::member_update_domain`).
//!
//! Each distinct Node is read with one GET (never a list of every Node of the
//! cluster). A namespace-scoped controller (one watching a single namespace, as the
//! namespace-scoped install runs it) has no cluster-scoped rights and does not ask
//! ([`zones_not_read`]); a cluster-wide one refused (403: a ClusterRole without `get`
//! on nodes) knows no zone. Either way every member's domain stays its pool's
//! default, and that is logged once per process, not on every pass.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client};
use shoal_core::deploy::pool::NODE_ZONE_LABEL;

/// Whether the refusal to read Nodes was logged already.
static REFUSAL_LOGGED: AtomicBool = AtomicBool::new(false);

/// The zones read, Node name → zone; Nodes without the label, gone, or not readable
/// are absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeZones {
    /// Node → its `topology.kubernetes.io/zone`.
    pub zones: BTreeMap<String, String>,
    /// The API server refused to let the controller read Nodes (403).
    pub refused: bool,
}

impl NodeZones {
    /// The zone of `node`, if known.
    pub fn zone(&self, node: Option<&str>) -> Option<String> {
        node.and_then(|node| self.zones.get(node)).cloned()
    }
}

/// Logs once that zones are not read because the controller watches one namespace.
pub fn zones_not_read() {
    if !REFUSAL_LOGGED.swap(true, Ordering::Relaxed) {
        tracing::info!(
            "a namespace-scoped controller does not read Nodes: members' update domains cannot come from their node's {NODE_ZONE_LABEL} label, so a pool without shoal.dev/update-domain is its own domain (annotate the pools)"
        );
    }
}

/// Reads the zone of each of `nodes`. A 403 ends the reading: no zone is known, and the
/// refusal is logged once. Other failures are errors (the caller retries its pass).
pub async fn node_zones(
    client: &Client,
    nodes: BTreeSet<String>,
) -> Result<NodeZones, kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let mut read = NodeZones::default();
    for node in nodes {
        match api.get_opt(&node).await {
            Ok(Some(object)) => {
                if let Some(zone) = object
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|labels| labels.get(NODE_ZONE_LABEL))
                {
                    read.zones.insert(node, zone.clone());
                }
            }
            Ok(None) => {}
            Err(kube::Error::Api(status)) if status.code == 403 => {
                if !REFUSAL_LOGGED.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        node,
                        "the controller may not read Nodes (403): members' update domains cannot come from their node's {NODE_ZONE_LABEL} label, so a pool without shoal.dev/update-domain is its own domain (grant get on nodes, as the cluster-wide install does, to use zones)"
                    );
                }
                return Ok(NodeZones {
                    zones: BTreeMap::new(),
                    refused: true,
                });
            }
            Err(error) => return Err(error),
        }
    }
    Ok(read)
}
