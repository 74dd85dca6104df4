//! The example workers in the sandbox: the demo's pool runs its sidecars in exec mode
//! with `examples/python/worker.py` or `examples/node/worker.js` as the per-job process;
//! the Swarm converges, and after `kubectl scale` to three members the jobs that moved
//! were stopped by the example on their old member and started on the new one. Skipped,
//! saying so, when the interpreter is not installed.
//!
//! Emulator-only by design, as every sandbox test: the sandbox is the emulated cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use shoal_sandbox::observe::exec_log;
use shoal_sandbox::{Converged, Options, Sandbox, default_demo, installed};

const CONVERGE: Duration = Duration::from_secs(90);

/// A copy of the demo whose pool runs `command` for each job (exec mode) instead of
/// acknowledging on its own.
fn demo_running(dir: &Path, command: &str) -> std::path::PathBuf {
    let demo = dir.join("demo");
    std::fs::create_dir_all(&demo).expect("demo directory");
    for file in ["10-jobs.yaml", "20-swarm.yaml", "30-pool.yaml"] {
        let text = std::fs::read_to_string(default_demo().join(file))
            .unwrap_or_else(|error| panic!("reading the demo's {file}: {error}"));
        let text = if file == "30-pool.yaml" {
            let ack_on_apply = "        - name: SHOAL_ACK_ON_APPLY\n          value: \"true\"\n";
            assert!(
                text.contains(ack_on_apply),
                "the demo pool changed:\n{text}"
            );
            text.replace(
                ack_on_apply,
                &format!("        - name: SHOAL_EXEC\n          value: {command:?}\n"),
            )
        } else {
            text
        };
        std::fs::write(demo.join(file), text).expect("writing the demo copy");
    }
    demo
}

/// The jobs a member's example processes run according to their log: started and not
/// stopped since.
fn running_per_log(dir: &Path, pod: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(exec_log(dir, pod)).unwrap_or_default();
    let mut running = BTreeSet::new();
    for line in text.lines() {
        match line.split_whitespace().collect::<Vec<_>>()[..] {
            [member, "start", job] if member == pod => {
                running.insert(job.to_owned());
            }
            [member, "stop", job] if member == pod => {
                running.remove(job);
            }
            _ => {}
        }
    }
    running
}

/// Waits until every member's log shows exactly the jobs of its slice running.
async fn wait_until_logs_match(dir: &Path, converged: &Converged) {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let mismatched: BTreeMap<&String, (BTreeSet<String>, Vec<String>)> = converged
            .slices
            .iter()
            .map(|(pod, slice)| (pod, (running_per_log(dir, pod), slice.jobs.clone())))
            .filter(|(_, (running, jobs))| !running.iter().eq(jobs.iter()))
            .collect();
        if mismatched.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            // What each mismatched member's processes printed, to see why.
            let logs: Vec<String> = mismatched
                .keys()
                .map(|pod| {
                    let text = std::fs::read_to_string(exec_log(dir, pod)).unwrap_or_default();
                    format!("--- {pod}'s exec log:\n{text}")
                })
                .collect();
            panic!(
                "the example processes do not follow the slices (running per log, slice): {mismatched:?}\n{}",
                logs.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn the_example_converges_and_follows_a_scale(interpreter: &str, script: &str) {
    if !installed(interpreter) {
        println!("skipped: {interpreter} is not installed, so {script} cannot run");
        return;
    }
    let script_path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(script)
        .canonicalize()
        .unwrap_or_else(|error| panic!("{script}: {error}"));
    let dir = tempfile::tempdir().expect("temp dir");
    let mut options = Options::new(dir.path().join("sandbox"));
    options.demo = demo_running(
        dir.path(),
        // `exec`: the example itself gets SIGTERM and exits; a shell left in between
        // would exit first and take the example down before it says it stopped.
        &format!("exec {interpreter} {}", script_path.display()),
    );
    let mut sandbox = Sandbox::start(options).await.expect("the sandbox starts");
    let members_dir = dir.path().join("sandbox");

    let before = sandbox
        .wait_converged_with(2, CONVERGE)
        .await
        .expect("the demo converges with 2 members");
    wait_until_logs_match(&members_dir, &before).await;

    sandbox
        .kubectl()
        .run(&["scale", "statefulset", "swarm-worker", "--replicas=3"])
        .await
        .expect("kubectl scale succeeds");
    let after = sandbox
        .wait_converged_with(3, CONVERGE)
        .await
        .expect("the demo converges with 3 members");
    assert!(after.revision > before.revision);
    wait_until_logs_match(&members_dir, &after).await;

    // The new member's jobs all came from the old members: each was stopped there.
    let new_member = &after.slices["swarm-worker-2"];
    assert!(!new_member.jobs.is_empty(), "the new member got no jobs");
    for job in &new_member.jobs {
        let old_owner = before
            .slices
            .iter()
            .find(|(_, slice)| slice.jobs.contains(job))
            .map(|(pod, _)| pod.clone())
            .unwrap_or_else(|| panic!("{job} was nowhere before the scale"));
        let old_log =
            std::fs::read_to_string(exec_log(&members_dir, &old_owner)).unwrap_or_default();
        assert!(
            old_log
                .lines()
                .any(|line| line == format!("{old_owner} stop {job}")),
            "{job} moved from {old_owner} without being stopped there:\n{old_log}"
        );
    }
    eprintln!(
        "{script}: {} jobs moved to the new member",
        new_member.jobs.len()
    );
    sandbox.shutdown().await.expect("stops cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_example_converges_in_exec_mode_and_hands_jobs_over_on_a_scale() {
    the_example_converges_and_follows_a_scale("python3", "examples/python/worker.py").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_example_converges_in_exec_mode_and_hands_jobs_over_on_a_scale() {
    the_example_converges_and_follows_a_scale("node", "examples/node/worker.js").await;
}
