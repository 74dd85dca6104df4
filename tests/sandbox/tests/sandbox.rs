//! The sandbox end to end: the demo converges, follows `kubectl scale` and the
//! approval gate, and the binary prints a tour whose commands work.
//!
//! Emulator-only by design: the sandbox *is* the emulated cluster plus Shoal,
//! so these tests start their own emulator whether or not
//! `SHOAL_TEST_KUBECONFIG` names a real cluster (the real-cluster path of the
//! same demo is `manifests/example`, tested in `manifests.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use shoal_controller::api::swarm::Swarm;
use shoal_core::format::parse_slice;
use shoal_core::names;
use shoal_core::seed::SEED_STREAMS;
use shoal_sandbox::{Converged, Options, Sandbox};
use tokio::io::{AsyncBufReadExt, BufReader};

const CONVERGE: Duration = Duration::from_secs(90);

fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
}

async fn start(dir: &Path) -> Sandbox {
    init_tracing();
    Sandbox::start(Options::new(dir))
        .await
        .expect("the sandbox starts")
}

/// Jobs by member, as the slice ConfigMaps hold them.
fn jobs_by_member(converged: &Converged) -> BTreeMap<String, BTreeSet<String>> {
    converged
        .slices
        .iter()
        .map(|(pod, slice)| (pod.clone(), slice.jobs.iter().cloned().collect()))
        .collect()
}

/// Every job of every member, sorted, duplicates kept.
fn all_jobs(slices: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut all: Vec<String> = slices.values().flatten().cloned().collect();
    all.sort();
    all
}

/// The core's assignment of the seed's streams to `members` pods of the demo pool under
/// the demo's strategy, the default `sticky`, from the assignment in force (`None`:
/// nothing applied yet, where `sticky` spreads as `bounded` does).
fn core_assign(
    in_force: Option<&shoal_core::assignment::Assignment>,
    members: u32,
) -> shoal_core::assignment::Assignment {
    let jobs = shoal_core::job::JobSet::parse(SEED_STREAMS).expect("valid streams");
    let members = shoal_core::member::pool_members("swarm-worker", members);
    shoal_core::strategy::reassign(in_force, &jobs, &members, &shoal_core::Strategy::Sticky)
        .expect("assignable")
}

/// `assignment` of `members` pods as jobs by pod.
fn by_pod(
    assignment: &shoal_core::assignment::Assignment,
    members: u32,
) -> BTreeMap<String, BTreeSet<String>> {
    shoal_core::member::pool_members("swarm-worker", members)
        .into_iter()
        .map(|member| {
            let jobs = assignment
                .slice_of(&member.id)
                .expect("a member of the assignment");
            (
                member.id.to_string(),
                jobs.iter().map(|key| key.as_str().to_owned()).collect(),
            )
        })
        .collect()
}

/// The demo Swarm's `spec.strategy.type` as the API server stored it (defaults filled in).
async fn strategy_of_the_demo(sandbox: &Sandbox) -> String {
    sandbox
        .kubectl()
        .run(&[
            "-n",
            sandbox.namespace(),
            "get",
            "swarm",
            sandbox.swarm(),
            "-o",
            "jsonpath={.spec.strategy.type}",
        ])
        .await
        .expect("kubectl reads the Swarm")
        .trim()
        .to_owned()
}

fn seed_streams() -> Vec<String> {
    let mut streams: Vec<String> = SEED_STREAMS.iter().map(|s| (*s).to_owned()).collect();
    streams.sort();
    streams
}

/// Reads, independently of the sandbox's own judgement, each member's slice
/// ConfigMap, its Lease and its slice file, and checks they agree: the file
/// holds exactly the ConfigMap's slice and the Lease acknowledges its hash.
/// Returns the jobs by member.
async fn check_members_hold_their_slices(
    sandbox: &Sandbox,
    pods: &[&str],
) -> BTreeMap<String, BTreeSet<String>> {
    let config_maps: Api<ConfigMap> = Api::namespaced(sandbox.client(), sandbox.namespace());
    let leases: Api<Lease> = Api::namespaced(sandbox.client(), sandbox.namespace());
    let mut slices = BTreeMap::new();
    for pod in pods {
        let config_map = config_maps
            .get(&names::slice_configmap(pod))
            .await
            .expect("the member's slice ConfigMap exists");
        let text = config_map
            .data
            .as_ref()
            .and_then(|data| data.get(names::SLICE_DATA_KEY))
            .expect("the slice is plain text");
        let slice = parse_slice(text).expect("the ConfigMap holds a v1 slice");
        assert_eq!(slice.member, *pod);
        let file = std::fs::read_to_string(sandbox.slice_file(pod)).expect("the slice file exists");
        let in_file = parse_slice(&file).expect("the file holds a v1 slice");
        assert_eq!(in_file, slice, "{pod}'s file holds its ConfigMap's slice");
        let lease = leases
            .get(&names::member_lease(pod))
            .await
            .expect("the member's Lease exists");
        let annotations = lease.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations.get(names::ANNOTATION_ACKED_HASH),
            Some(&slice.hash),
            "{pod} acknowledged its slice"
        );
        slices.insert(
            (*pod).to_owned(),
            slice
                .jobs
                .iter()
                .map(|key| key.as_str().to_owned())
                .collect(),
        );
    }
    slices
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_converges_to_two_slices_covering_the_27_streams_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut sandbox = start(dir.path()).await;
    let converged = sandbox.wait_converged(CONVERGE).await.expect("converges");
    assert_eq!(sandbox.swarm(), "demo");
    assert_eq!(converged.revision, 1);
    let slices =
        check_members_hold_their_slices(&sandbox, &["swarm-worker-0", "swarm-worker-1"]).await;
    assert_eq!(slices, jobs_by_member(&converged));
    assert_eq!(
        all_jobs(&slices),
        seed_streams(),
        "every stream exactly once"
    );
    let mut sizes: Vec<usize> = slices.values().map(BTreeSet::len).collect();
    sizes.sort();
    assert_eq!(sizes, [13, 14], "balanced: the largest slice is ceil(27/2)");

    let swarms = Api::<Swarm>::namespaced(sandbox.client(), sandbox.namespace());
    let status = swarms
        .get("demo")
        .await
        .expect("the Swarm exists")
        .status
        .expect("the Swarm has a status");
    assert_eq!(status.phase.as_deref(), Some("Ready"));
    assert_eq!(status.ready.as_deref(), Some("2/2"));
    assert_eq!(status.jobs, 27);
    let ready = status
        .conditions
        .iter()
        .find(|condition| condition.type_ == "Ready")
        .expect("a Ready condition");
    assert_eq!(ready.status, "True");
    // The status reports the Lease acknowledgements as of the controller's
    // last reconcile, which a sidecar's first Lease write may trigger just after.
    let started = Instant::now();
    loop {
        let status = swarms
            .get("demo")
            .await
            .expect("the Swarm exists")
            .status
            .unwrap_or_default();
        let acked: Vec<(String, Option<u64>)> = status
            .members
            .iter()
            .map(|member| (member.name.clone(), member.acked_revision))
            .collect();
        let expected = vec![
            ("swarm-worker-0".to_owned(), Some(1)),
            ("swarm-worker-1".to_owned(), Some(1)),
        ];
        if acked == expected {
            break;
        }
        assert!(
            started.elapsed() < CONVERGE,
            "the status never showed both members acknowledging revision 1: {acked:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The seed-compatible index lists the same assignment.
    let index = sandbox
        .kubectl()
        .run(&["get", "cm", "demo", "-o", "jsonpath={.data.config\\.yml}"])
        .await
        .expect("kubectl reads the index");
    let index = shoal_core::format::parse_index(&index).expect("a seed-compatible index");
    let from_index: BTreeMap<String, BTreeSet<String>> = index
        .workloads
        .into_iter()
        .map(|(pod, workload)| {
            (
                pod,
                workload
                    .jobs
                    .iter()
                    .map(|key| key.as_str().to_owned())
                    .collect(),
            )
        })
        .collect();
    assert_eq!(from_index, slices);
    sandbox.shutdown().await.expect("stops cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_scale_to_three_moves_only_the_streams_the_new_member_takes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut sandbox = start(dir.path()).await;
    let before = jobs_by_member(&sandbox.wait_converged(CONVERGE).await.expect("converges"));

    sandbox
        .kubectl()
        .run(&["scale", "statefulset", "swarm-worker", "--replicas=3"])
        .await
        .expect("kubectl scale succeeds");
    let converged = sandbox
        .wait_converged_with(3, CONVERGE)
        .await
        .expect("the demo converges with 3 members");
    assert_eq!(converged.revision, 2);
    let after = check_members_hold_their_slices(
        &sandbox,
        &["swarm-worker-0", "swarm-worker-1", "swarm-worker-2"],
    )
    .await;
    assert_eq!(after, jobs_by_member(&converged));
    assert_eq!(
        all_jobs(&after),
        seed_streams(),
        "every stream exactly once"
    );
    for (pod, jobs) in &after {
        assert_eq!(jobs.len(), 9, "{pod} holds ceil(27/3) streams");
    }
    // The demo is on the default strategy, as the README recommends.
    assert_eq!(strategy_of_the_demo(&sandbox).await, "sticky");
    // Exactly the assignments the core computes for two members, then for three from
    // those two, so the streams that changed hands are exactly the core's planned moves.
    let two = core_assign(None, 2);
    let three = core_assign(Some(&two), 3);
    assert_eq!(before, by_pod(&two, 2));
    assert_eq!(after, by_pod(&three, 3));
    let moved: BTreeSet<String> = before
        .iter()
        .flat_map(|(pod, jobs)| jobs.difference(&after[pod]).cloned())
        .collect();
    let planned = shoal_core::diff::diff(&two, &three);
    let planned_moves: BTreeSet<String> = planned
        .moved
        .iter()
        .map(|job| job.key.as_str().to_owned())
        .collect();
    assert_eq!(moved, planned_moves);
    assert!(
        after["swarm-worker-2"].is_subset(&moved),
        "the new member's streams all moved to it"
    );
    // The new member must receive 9 streams; anything more would be movement between
    // the old members that balance alone does not require, and `sticky` makes none.
    assert_eq!(planned.lower_bound, 9);
    assert_eq!(moved.len(), 9, "moved {moved:?}");
    eprintln!(
        "scale 2 -> 3: {} streams moved, lower bound {}",
        moved.len(),
        planned.lower_bound
    );
    sandbox.shutdown().await.expect("stops cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_follows_a_scale_down_and_a_second_labelled_pool() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut sandbox = start(dir.path()).await;
    sandbox.wait_converged(CONVERGE).await.expect("converges");
    let kubectl = sandbox.kubectl().clone();

    kubectl
        .run(&["scale", "statefulset", "swarm-worker", "--replicas=1"])
        .await
        .expect("kubectl scale succeeds");
    let alone = sandbox
        .wait_converged_with(1, CONVERGE)
        .await
        .expect("the demo converges with 1 members");
    let slices = check_members_hold_their_slices(&sandbox, &["swarm-worker-0"]).await;
    assert_eq!(slices, jobs_by_member(&alone));
    assert_eq!(
        all_jobs(&slices),
        seed_streams(),
        "one member holds every stream"
    );
    // The removed pod's directory goes with it, as an emptyDir would.
    let gone = sandbox
        .slice_file("swarm-worker-1")
        .parent()
        .expect("the slice file has a directory")
        .to_path_buf();
    let started = Instant::now();
    while gone.exists() {
        assert!(
            started.elapsed() < CONVERGE,
            "{} still exists",
            gone.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let second_pool = dir.path().join("second-pool.yaml");
    std::fs::write(
        &second_pool,
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: swarm-worker-b
  labels:
    shoal.dev/swarm: demo
spec:
  replicas: 2
  serviceName: swarm-worker-b
  selector:
    matchLabels:
      app: swarm-worker-b
  template:
    metadata:
      labels:
        app: swarm-worker-b
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: app
        image: registry.k8s.io/pause:3.10
"#,
    )
    .expect("write the second pool");
    kubectl
        .run(&["apply", "-f", &second_pool.display().to_string()])
        .await
        .expect("kubectl apply succeeds");
    let pods = ["swarm-worker-0", "swarm-worker-b-0", "swarm-worker-b-1"];
    let converged = sandbox
        .wait_converged_with(3, CONVERGE)
        .await
        .expect("the demo converges with 3 members");
    assert_eq!(
        converged
            .slices
            .keys()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        pods
    );
    let slices = check_members_hold_their_slices(&sandbox, &pods).await;
    assert_eq!(
        all_jobs(&slices),
        seed_streams(),
        "every stream exactly once"
    );
    sandbox.shutdown().await.expect("stops cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_manual_approval_a_scale_waits_until_its_revision_is_approved() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut sandbox = start(dir.path()).await;
    let before = jobs_by_member(&sandbox.wait_converged(CONVERGE).await.expect("converges"));
    let kubectl = sandbox.kubectl().clone();
    kubectl
        .run(&[
            "patch",
            "swarm",
            "demo",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"approval":{"policy":"Manual"}}}"#,
        ])
        .await
        .expect("kubectl patch succeeds");
    kubectl
        .run(&["scale", "statefulset", "swarm-worker", "--replicas=3"])
        .await
        .expect("kubectl scale succeeds");

    let swarms: Api<Swarm> = Api::namespaced(sandbox.client(), sandbox.namespace());
    let started = Instant::now();
    let pending = loop {
        let status = swarms
            .get("demo")
            .await
            .expect("the Swarm exists")
            .status
            .unwrap_or_default();
        if let Some(pending) = status.pending_revision {
            assert_eq!(status.phase.as_deref(), Some("AwaitingApproval"));
            assert_eq!(
                status.current_revision, 1,
                "nothing applied before approval"
            );
            break pending;
        }
        assert!(
            started.elapsed() < CONVERGE,
            "no pending revision; status {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let held =
        check_members_hold_their_slices(&sandbox, &["swarm-worker-0", "swarm-worker-1"]).await;
    assert_eq!(
        held, before,
        "the old members keep their slices until approval"
    );

    kubectl
        .run(&[
            "annotate",
            "swarm",
            "demo",
            "--overwrite",
            &format!("{}={}", names::ANNOTATION_APPROVE, pending.approve_with),
        ])
        .await
        .expect("kubectl annotate succeeds");
    let converged = sandbox
        .wait_converged_with(3, CONVERGE)
        .await
        .expect("the demo converges with 3 members");
    assert_eq!(converged.revision, pending.revision);
    assert_eq!(all_jobs(&jobs_by_member(&converged)), seed_streams());
    sandbox.shutdown().await.expect("stops cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_prints_a_tour_whose_kubectl_commands_work_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_shoal-sandbox"))
        .arg("--dir")
        .arg(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the sandbox binary starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut tour = Vec::new();
    let read_tour = async {
        while let Some(line) = lines.next_line().await.expect("stdout is readable") {
            let done = line.starts_with("Press Ctrl-C");
            tour.push(line);
            if done {
                return true;
            }
        }
        false
    };
    let complete = tokio::time::timeout(CONVERGE, read_tour)
        .await
        .expect("the tour is printed in time");
    assert!(complete, "stdout ended before the tour: {tour:#?}");
    let tour_text = tour.join("\n");

    let kubeconfig = tour
        .iter()
        .find_map(|line| line.trim().strip_prefix("export KUBECONFIG="))
        .expect("the tour exports KUBECONFIG");
    assert_eq!(Path::new(kubeconfig), dir.path().join("kubeconfig"));
    assert!(tour_text.contains("27 jobs over 2 members"), "{tour_text}");
    let command_of = |prefix: &str| {
        tour.iter()
            .map(|line| line.trim())
            .find(|line| line.starts_with(prefix))
            .and_then(|line| line.split("  #").next())
            .map(|command| command.trim().to_owned())
            .unwrap_or_else(|| panic!("the tour has a `{prefix}` line: {tour_text}"))
    };
    // Run as printed, through a shell, with only the exported kubeconfig.
    let run = |command: String| {
        let kubeconfig = kubeconfig.to_owned();
        async move {
            let output = tokio::process::Command::new("sh")
                .arg("-c")
                .arg(&command)
                .env("KUBECONFIG", kubeconfig)
                .output()
                .await
                .expect("sh runs");
            assert!(
                output.status.success(),
                "`{command}` failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            String::from_utf8_lossy(&output.stdout).into_owned()
        }
    };
    let swarms = run(command_of("kubectl get swarms")).await;
    let row = swarms
        .lines()
        .find(|line| line.starts_with("demo "))
        .unwrap_or_else(|| panic!("`kubectl get swarms` lists demo: {swarms}"));
    let columns: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&columns[1..4], ["2/2", "27", "1"], "{swarms}");
    assert!(row.contains("Ready"), "{swarms}");
    let fields = run(command_of("kubectl explain swarm.spec")).await;
    for field in ["approval", "jobs", "jobsFrom", "reload", "strategy"] {
        assert!(
            fields
                .lines()
                .any(|line| line.trim_start().starts_with(&format!("{field}\t"))),
            "`kubectl explain swarm.spec` lists {field}: {fields}"
        );
    }
    let slice = run(command_of("kubectl describe cm")).await;
    assert!(slice.contains("format: shoal.dev/slice/v1"), "{slice}");
    let file = run(command_of("cat ")).await;
    assert!(file.contains("member: swarm-worker-0"), "{file}");
    // The deployment status endpoint over HTTPS (the sandbox's CA), with a
    // reader's token, as the tour shows: served and authorized (404: the demo
    // has no plan with that deployment).
    run(command_of("kubectl create serviceaccount status-reader")).await;
    run(command_of("kubectl create rolebinding status-reader")).await;
    let read = command_of("curl --cacert ").replace("<deploymentId>", "no-such-deployment")
        + " -sS -w ' %{http_code}'";
    let answer = run(read).await;
    assert!(
        answer.ends_with(" 404") && answer.contains("no-such-deployment"),
        "{answer}"
    );

    // A second sandbox on the same directory is refused, naming the first.
    let pid = child.id().expect("the sandbox is running");
    let second = tokio::process::Command::new(env!("CARGO_BIN_EXE_shoal-sandbox"))
        .arg("--dir")
        .arg(dir.path())
        .stdin(Stdio::null())
        .output()
        .await
        .expect("a second sandbox binary runs");
    let refusal = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "{refusal}");
    assert!(
        refusal.contains(&format!("is in use by process {pid}")),
        "{refusal}"
    );

    let killed = tokio::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .await
        .expect("kill runs");
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("the sandbox exits within 30 s of SIGTERM")
        .expect("waiting for the sandbox");
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        use tokio::io::AsyncReadExt;
        let _ = pipe.read_to_string(&mut stderr).await;
    }
    assert!(status.success(), "exit {status:?}; stderr: {stderr}");
    assert!(stderr.contains("SIGTERM; stopping"), "{stderr}");
    assert!(
        !dir.path().join("sandbox.pid").exists(),
        "the stopped sandbox releases its directory"
    );
    assert!(
        stderr.trim_end().ends_with("shoal-sandbox: stopped"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_demo_or_kubectl_is_named_in_the_error() {
    init_tracing();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut no_demo = Options::new(dir.path());
    no_demo.demo = dir.path().join("no-such-demo");
    let error = Sandbox::start(no_demo)
        .await
        .expect_err("a missing demo is refused")
        .to_string();
    assert!(
        error.contains("the demo") && error.contains("no-such-demo does not exist"),
        "{error}"
    );

    let mut no_kubectl = Options::new(dir.path());
    no_kubectl.kubectl = "/nonexistent/kubectl".to_owned();
    let error = Sandbox::start(no_kubectl)
        .await
        .expect_err("a missing kubectl is refused")
        .to_string();
    assert!(
        error.contains("installing the CRD") && error.contains("cannot run /nonexistent/kubectl"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_cluster_example_runs_in_the_sandbox_from_its_kustomization() {
    init_tracing();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut options = Options::new(dir.path());
    options.demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../manifests/example");
    let mut sandbox = Sandbox::start(options)
        .await
        .expect("the sandbox applies manifests/example with kubectl apply -k");
    assert_eq!(sandbox.namespace(), "shoal-demo");
    assert_eq!(sandbox.swarm(), "demo");
    // The real-cluster example is on the default strategy too.
    assert_eq!(strategy_of_the_demo(&sandbox).await, "sticky");
    let converged = sandbox.wait_converged(CONVERGE).await.expect("converges");
    let slices =
        check_members_hold_their_slices(&sandbox, &["swarm-worker-0", "swarm-worker-1"]).await;
    assert_eq!(slices, jobs_by_member(&converged));
    assert_eq!(
        all_jobs(&slices),
        seed_streams(),
        "every stream exactly once"
    );
    let tour = sandbox.tour(&converged).await.expect("a tour").render();
    assert!(
        tour.contains("kubectl -n shoal-demo scale statefulset swarm-worker --replicas=3"),
        "{tour}"
    );
    // Exec mode: the demo consumers run, their output in each member's log.
    let log = dir.path().join("members/swarm-worker-0/exec.log");
    assert!(
        tour.contains(&format!("tail -f {}", log.display())),
        "{tour}"
    );
    let started = Instant::now();
    loop {
        let printed = std::fs::read_to_string(&log).unwrap_or_default();
        let streams = &slices["swarm-worker-0"];
        let running = streams
            .iter()
            .filter(|stream| printed.contains(&format!("swarm-worker-0 consuming {stream} ")))
            .count();
        if running == streams.len() {
            break;
        }
        assert!(
            started.elapsed() < CONVERGE,
            "{running} of {} consumers printed: {printed}",
            streams.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sandbox.shutdown().await.expect("stops cleanly");
}
