//! The example workers against a member the sandbox leaves to them
//! (`--app-ack`): the tour's way to try `examples/python/worker.py` and
//! `examples/node/worker.js` over HTTP. The demo converges only once the example
//! acknowledges its member's slice. Skipped, saying so, when the interpreter is
//! not installed. A binary of its own, so that its sandboxes do not load the exec-mode
//! ones of `examples.rs`.
//!
//! Emulator-only by design, as every sandbox test: the sandbox is the emulated cluster.

use std::path::Path;
use std::time::Duration;

use shoal_sandbox::{Options, Sandbox, installed};

const CONVERGE: Duration = Duration::from_secs(90);

/// The tour's way to try an example: `--app-ack swarm-worker-0`, then the
/// example over HTTP against the address the sandbox prints.
async fn a_member_left_to_its_application_converges_once_the_example_acknowledges(
    interpreter: &str,
    script: &str,
) {
    if !installed(interpreter) {
        println!("skipped: {interpreter} is not installed, so {script} cannot run");
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(script);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut options = Options::new(dir.path().join("sandbox"));
    options.app_ack = vec!["swarm-worker-0".to_owned()];
    let mut sandbox = Sandbox::start(options).await.expect("the sandbox starts");
    // The address the sandbox prints before it waits for the demo.
    let sidecars = sandbox
        .app_ack_sidecars(CONVERGE)
        .await
        .expect("the member's sidecar runs");
    let address = sidecars["swarm-worker-0"];
    let log = dir.path().join("example.log");
    let mut example = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec {interpreter} {} >>{} 2>&1",
            script.display(),
            log.display()
        ))
        .env("SHOAL_API", format!("http://{address}"))
        .kill_on_drop(true)
        .spawn()
        .expect("the example starts");
    let converged = sandbox
        .wait_converged_with(2, CONVERGE)
        .await
        .expect("the demo converges once the example acknowledges");
    let slice = &converged.slices["swarm-worker-0"];
    let jobs = slice.jobs.join(" ");
    let acked = format!("swarm-worker-0 ack {} {jobs}", slice.revision);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.lines().any(|line| line == acked),
        "{acked:?} not in:\n{text}"
    );
    // The tour lists both sidecars, and says which one waits for the application.
    let tour = sandbox.tour(&converged).await.expect("the tour").render();
    assert!(
        tour.contains(&format!("swarm-worker-0  http://{address}"))
            && tour.contains("waits for your application's POST /v1/ack")
            && tour.contains("--app-ack swarm-worker-1"),
        "{tour}"
    );
    let _ = example.kill().await;
    sandbox.shutdown().await.expect("stops cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_example_over_http_acknowledges_a_member_the_sandbox_leaves_to_it() {
    a_member_left_to_its_application_converges_once_the_example_acknowledges(
        "python3",
        "examples/python/worker.py",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_example_over_http_acknowledges_a_member_the_sandbox_leaves_to_it() {
    a_member_left_to_its_application_converges_once_the_example_acknowledges(
        "node",
        "examples/node/worker.js",
    )
    .await;
}
