//! The sandbox: emulator, controller and sidecars in one process.
//!
//! [`Sandbox::start`] starts the emulated cluster (`shoal_emulator::sim::Cluster`),
//! applies Shoal's CRD and the demo (`tests/sandbox/demo`: the seed's 27 streams,
//! a Swarm reading them, a 2-replica labelled StatefulSet) with the real
//! `kubectl`, and runs the controller and one `shoal-worker` sidecar per member
//! pod in-process. [`Sandbox::wait_converged`] waits until every member
//! acknowledged its slice; [`Tour::render`] is what `cargo run -p shoal-sandbox`
//! prints then.

pub mod convergence;
pub mod instructions;
pub mod kubectl;
pub mod members;
pub mod observe;
mod sandbox;
mod sidecars;

pub use convergence::{Converged, Observation, Verdict};
pub use instructions::{Plugin, Sidecar, StatusApiAccess, Tour};
pub use kubectl::{Kubectl, KubectlError, eventually, kubectl_shoal};
pub use sandbox::{Options, Sandbox, SandboxError, default_crd, default_demo};

/// Whether `program --version` runs: the tests that use an optional tool
/// (an interpreter, promtool, shellcheck) skip, saying so, when it does not.
pub fn installed(program: &str) -> bool {
    std::process::Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success())
}
