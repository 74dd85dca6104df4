//! The emulator's integration tests, in one test binary: each file beside this one
//! is a module (`api_*`: the API server's conformance; `kubectl_*`: the real
//! kubectl against it; `sim_*`: the simulated controllers; `harness_*`: the test
//! harness). One binary, not one per file, so that CI compiles and links the kube,
//! tokio and axum code they instantiate once. One file's tests:
//! `cargo test -p shoal-emulator --test integration api_limits::`.

mod api_admission;
mod api_auth;
mod api_crd;
mod api_crud;
mod api_events;
mod api_faults;
mod api_lifecycle;
mod api_limits;
mod api_patch;
mod api_pods;
mod api_request_stats;
mod api_select;
mod api_watch;
mod harness_stand_in;
mod kubectl_apply;
mod kubectl_change;
mod kubectl_read;
mod sim_faults;
mod sim_kubelet;
mod sim_statefulset;
