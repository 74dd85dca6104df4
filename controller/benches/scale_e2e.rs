//! Time from `kubectl scale` to the new revision in force, API writes per
//! scale event, and the controller's peak memory, on the emulated cluster.
//!
//! The cluster is the emulator with its simulated StatefulSet controller and
//! kubelet, so members are real pods that become Ready; the controller is the
//! release `shoal-controller` binary in its own process (so its peak memory,
//! `VmHWM` from `/proc/<pid>/status` through `shoal_emulator::harness::process`,
//! is its own), talking to the emulator over HTTP like it would to a real API
//! server. Writes are the controller's
//! own count (`shoal_api_writes_total` on `/metrics`).
//!
//! `cargo bench -p shoal-controller --bench scale_e2e` (`-- --quick` for a
//! small run).

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use shoal_controller::api::swarm::Swarm;
use shoal_emulator::harness::process;
use shoal_emulator::sim::{Cluster, is_running_and_ready};
use tokio::io::AsyncWriteExt;

const NAMESPACE: &str = "default";

async fn kubectl(cluster: &Cluster, args: &[&str], stdin: Option<&str>) {
    let mut child = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig_path())
        .arg("-n")
        .arg(NAMESPACE)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .await
            .expect("kubectl stdin");
    }
    let output = child.wait_with_output().await.expect("kubectl runs");
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

async fn versions(client: &Client) -> BTreeMap<String, String> {
    Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default().labels("shoal.dev/swarm=bench"))
        .await
        .expect("list ConfigMaps")
        .items
        .into_iter()
        .map(|cm| (cm.name_any(), cm.resource_version().unwrap_or_default()))
        .collect()
}

async fn wait_for_pods(client: &Client, count: usize) {
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let started = Instant::now();
    loop {
        let ready = api
            .list(&ListParams::default().labels("app=worker"))
            .await
            .map(|pods| {
                pods.items
                    .iter()
                    .filter(|pod| is_running_and_ready(pod))
                    .count()
            })
            .unwrap_or(0);
        if ready == count {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "only {ready} of {count} pods Ready"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn wait_for_revision(client: &Client, revision: u64) -> Duration {
    let started = Instant::now();
    let api: Api<Swarm> = Api::namespaced(client.clone(), NAMESPACE);
    loop {
        if let Ok(swarm) = api.get("bench").await
            && let Some(status) = swarm.status
            && status.current_revision == revision
            && status.phase.as_deref() == Some("Ready")
        {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "revision {revision} never in force"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `shoal_api_writes_total` by kind, from the controller's `/metrics`.
async fn writes(address: std::net::SocketAddr) -> BTreeMap<String, u64> {
    let text = process::scrape_metrics(address, Duration::from_secs(10))
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    process::metric_samples(&text, "shoal_api_writes_total")
        .into_iter()
        .map(|(labels, value)| {
            (
                labels.get("kind").cloned().unwrap_or_default(),
                value as u64,
            )
        })
        .collect()
}

async fn scenario(members: u32, jobs: usize) {
    let cluster = Cluster::start().await.expect("emulated cluster");
    let client = cluster.client();
    let crd = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/crd.yaml");
    kubectl(&cluster, &["apply", "-f", crd], None).await;
    let sts = format!(
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: worker\n  labels:\n    shoal.dev/swarm: bench\nspec:\n  replicas: {members}\n  podManagementPolicy: Parallel\n  serviceName: worker\n  selector:\n    matchLabels:\n      app: worker\n  template:\n    metadata:\n      labels:\n        app: worker\n    spec:\n      terminationGracePeriodSeconds: 0\n      containers:\n      - name: app\n        image: registry.k8s.io/pause:3.10\n"
    );
    kubectl(&cluster, &["apply", "-f", "-"], Some(&sts)).await;
    // Short keys in flow style keep even 100,000 jobs under the 1 MiB a real
    // ConfigMap may hold.
    let keys: Vec<String> = (0..jobs).map(|i| format!("j{i:06}")).collect();
    let jobs_cm = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: jobs\ndata:\n  config.yml: \"jobs: [{}]\"\n",
        keys.join(",")
    );
    kubectl(
        &cluster,
        &["apply", "--server-side", "-f", "-"],
        Some(&jobs_cm),
    )
    .await;
    wait_for_pods(&client, members as usize).await;

    let address = process::free_local_address().expect("free port");
    let mut controller = tokio::process::Command::new(env!("CARGO_BIN_EXE_shoal-controller"))
        .args([
            "--namespace",
            NAMESPACE,
            "--metrics-address",
            &address.to_string(),
            "--leader-lease",
            "",
            "--resync-seconds",
            "600",
        ])
        .env("KUBECONFIG", cluster.kubeconfig_path())
        .env(
            "RUST_LOG",
            std::env::var("SHOAL_BENCH_LOG").unwrap_or_else(|_| "warn".to_owned()),
        )
        // The controller logs to stdout; shown only when SHOAL_BENCH_LOG asks for logs.
        .stdout(if std::env::var_os("SHOAL_BENCH_LOG").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .kill_on_drop(true)
        .spawn()
        .expect("shoal-controller starts");
    let pid = controller.id().expect("controller pid");
    kubectl(
        &cluster,
        &["apply", "-f", "-"],
        Some("apiVersion: shoal.dev/v1alpha1\nkind: Swarm\nmetadata:\n  name: bench\nspec:\n  jobsFrom:\n    configMapKeyRef:\n      name: jobs\n      key: config.yml\n"),
    )
    .await;
    let first = wait_for_revision(&client, 1).await;
    // Let the Events of revision 1 land before counting.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writes_before = writes(address).await;
    let peak_first = process::memory_of(pid).unwrap_or_default().peak_mib();
    let before = versions(&client).await;

    let started = Instant::now();
    kubectl(
        &cluster,
        &[
            "scale",
            "statefulset",
            "worker",
            &format!("--replicas={}", members + 1),
        ],
        None,
    )
    .await;
    wait_for_revision(&client, 2).await;
    let scale = started.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writes_after = writes(address).await;
    let memory = process::memory_of(pid).unwrap_or_default();

    let after = versions(&client).await;
    let changed = after
        .iter()
        .filter(|(name, version)| before.get(*name) != Some(*version))
        .count();
    let delta: BTreeMap<&str, u64> = writes_after
        .iter()
        .map(|(kind, count)| {
            let earlier = writes_before.get(kind).copied().unwrap_or(0);
            (kind.as_str(), count.saturating_sub(earlier))
        })
        .collect();
    let total: u64 = delta.values().sum();
    let swarm: Swarm = Api::namespaced(client.clone(), NAMESPACE)
        .get("bench")
        .await
        .expect("swarm");
    let slice_maps = after.keys().filter(|name| name.ends_with("-slice")).count();
    let affected = {
        // Members whose slice ConfigMap changed: the scale event's affected set.
        after
            .iter()
            .filter(|(name, version)| {
                name.ends_with("-slice") && before.get(*name) != Some(*version)
            })
            .count()
    };
    println!(
        "{members} -> {} members x {jobs} jobs: revision 1 in force after {first:.2?}; \
         kubectl scale to revision 2 in force (every slice written, phase Ready) after {scale:.2?}",
        members + 1
    );
    println!(
        "  API writes for the scale event: {total} ({delta:?}); ConfigMaps changed: {changed} \
         ({affected} affected members' slices of {slice_maps}, + index + history); \
         target <= affected + 2 = {} (a member that both loses and gains jobs is written \
         twice: revoke, then grant)",
        affected + 2
    );
    println!(
        "  controller peak memory (VmHWM): {:.1} MiB after revision 1, {:.1} MiB after the scale; \
         RSS now {:.1} MiB; status lists {} members",
        peak_first,
        memory.peak_mib(),
        memory.resident_mib(),
        swarm.status.map_or(0, |status| status.members.len())
    );
    let _ = controller.start_kill();
    let _ = controller.wait().await;
    cluster.shutdown().await;
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let sizes: Vec<(u32, usize)> = match std::env::args().any(|arg| arg == "--quick") {
        true => vec![(10, 1_000)],
        false => vec![(100, 10_000), (500, 100_000)],
    };
    for (members, jobs) in sizes {
        runtime.block_on(scenario(members, jobs));
    }
}
