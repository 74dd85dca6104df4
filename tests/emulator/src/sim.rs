//! Simulated cluster controllers (StatefulSet, Deployment and ReplicaSet,
//! kubelet) acting through the public API.
//!
//! Each controller is an ordinary `kube` client: it watches through the API
//! and writes through the API (including the `status` subresource), so it
//! would behave the same against a real API server. They exist because the
//! emulator has no kube-controller-manager and no kubelet; tests drive
//! readiness and failure the way a test on a real cluster would, by patching
//! `pods/status` ([`set_pod_ready`], [`fail_pod`]).

mod cluster;
mod deployment;
mod kubelet;
mod statefulset;

pub use cluster::{Cluster, ClusterOptions};
pub use deployment::{
    DeploymentController, POD_TEMPLATE_HASH_LABEL, ReplicaPod, ReplicaSetView, ReplicaStep,
    plan_replicas, plan_rollout,
};
pub use kubelet::{
    Kubelet, KubeletConfig, MANUAL_READINESS_ANNOTATION, READINESS_GATE, STAND_IN_NODE_LABEL,
    fail_pod, is_running_and_ready, readiness_gates_met, set_pod_ready,
};
pub use statefulset::{
    CONTROLLER_REVISION_HASH_LABEL, POD_INDEX_LABEL, POD_NAME_LABEL, SetView,
    StatefulSetController, Step, UpdateStrategy, ordinal_of, plan, revision_name,
    revisions_to_prune, template_hash,
};

/// What can go wrong while a simulated controller acts on an object.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A call to the API server failed.
    #[error("{action} {object}: {source}")]
    Api {
        /// What the controller was doing.
        action: &'static str,
        /// `namespace/name` of the object.
        object: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// An object from the cluster lacks something the controller needs.
    #[error("{object}: {problem}")]
    Invalid {
        /// `namespace/name` of the object.
        object: String,
        /// What is wrong with it.
        problem: String,
    },
    /// Building a client for the emulated server failed.
    #[error("emulated API server: {0}")]
    Server(#[from] crate::ServerError),
}
