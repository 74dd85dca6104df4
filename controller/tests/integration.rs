//! The controller's integration tests, in one test binary: each file beside this
//! one is a module (one subject each: `cluster_*` on the emulated or a real API
//! server, `plugin_*` through kubectl, `crd_*`, `docs*` and `layering` on the
//! repository's own files). One binary, not one per file: every file used to
//! compile and link the shared helpers and the kube, tokio and axum code they
//! instantiate again, which cost CI about two minutes. Run one file's tests with
//! a filter: `cargo test -p shoal-controller --test integration cluster_plans::`.

mod common;
#[path = "support/documents.rs"]
mod documents;
mod plugin_common;

mod cluster_acks;
mod cluster_approval;
mod cluster_bad_input;
mod cluster_basics;
mod cluster_caches;
mod cluster_cordon;
mod cluster_deployments;
mod cluster_faults;
mod cluster_joblists;
mod cluster_large;
mod cluster_leader;
mod cluster_metrics;
mod cluster_misuse;
mod cluster_mrds;
mod cluster_node_zones;
mod cluster_ownership;
mod cluster_plans;
mod cluster_pool_rollout;
mod cluster_restart;
mod cluster_rollout;
mod cluster_services;
mod cluster_sizes;
mod cluster_status_api;
mod cluster_status_tls;
mod cluster_sticky;
mod cluster_weights;
mod cluster_windows;
mod cluster_writes;
mod crd_bounds;
mod crd_manifest;
mod crd_validation;
mod docs;
mod docs_reference;
mod layering;
mod plugin_approved_by;
mod plugin_gate;
mod plugin_install;
mod plugin_read;
mod plugin_restarts;
mod plugin_wait;
mod user_wording;
