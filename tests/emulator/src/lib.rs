//! Shoal's test infrastructure: an in-process Kubernetes API server that speaks
//! the real HTTP protocol (so the real `kube` client and the real `kubectl`
//! work against it unmodified), simulated StatefulSet and kubelet controllers
//! that act through the public API like any other client, and the test
//! harness. It is never shipped to users as a substitute for a cluster.

pub mod harness;
pub mod http_client;
pub mod pki;
pub mod server;
pub mod sim;

pub use server::{
    ApiServer, Audit, AuditEntry, Faults, RequestCounts, RequestKey, RequestStats, RequestTally,
    ServerError, ServerOptions, UserInfo,
};
