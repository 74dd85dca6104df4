//! Time from `kubectl scale` to the new revision in force (every slice written),
//! and ConfigMap writes per scale event, on the emulated API server with the
//! controller in-process. No pods run (members without pods count as having
//! applied their revoke), so this measures the controller and the API path.
//!
//! `cargo bench -p shoal-controller --bench scale_e2e`

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use shoal_controller::crd::Swarm;
use shoal_controller::{Settings, run};
use shoal_emulator::server::ApiServer;

async fn kubectl(server: &ApiServer, args: &[&str]) {
    let output = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(server.kubeconfig_path())
        .args(args)
        .output()
        .await
        .expect("kubectl runs");
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

async fn versions(client: &Client) -> BTreeMap<String, String> {
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .list(&ListParams::default().labels("shoal.dev/swarm=bench"))
        .await
        .expect("list ConfigMaps")
        .items
        .into_iter()
        .map(|cm| (cm.name_any(), cm.resource_version().unwrap_or_default()))
        .collect()
}

async fn wait_for_revision(client: &Client, revision: u64) -> Duration {
    let started = Instant::now();
    let api: Api<Swarm> = Api::namespaced(client.clone(), "default");
    loop {
        if let Ok(swarm) = api.get("bench").await
            && let Some(status) = swarm.status
            && status.current_revision == revision
            && status.phase.as_deref() == Some("Ready")
        {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "revision {revision} never applied"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn scenario(members: u32, jobs: usize) {
    let server = ApiServer::start().await.expect("API server");
    let client = server.client().await.expect("client");
    let crd = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/crd.yaml");
    kubectl(&server, &["apply", "-f", crd]).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let sts = dir.path().join("sts.yaml");
    std::fs::write(
        &sts,
        format!(
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: worker\n  labels:\n    shoal.dev/swarm: bench\nspec:\n  replicas: {members}\n  serviceName: worker\n  selector:\n    matchLabels:\n      app: worker\n  template:\n    metadata:\n      labels:\n        app: worker\n    spec:\n      containers:\n      - name: app\n        image: example.invalid/app:1\n"
        ),
    )
    .expect("write sts");
    kubectl(&server, &["apply", "-f", &sts.to_string_lossy()]).await;
    let jobs_cm = dir.path().join("jobs.yaml");
    let mut text = String::from(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: jobs\ndata:\n  config.yml: |\n    jobs:\n",
    );
    for i in 0..jobs {
        text.push_str(&format!("    - stream:{i:08}\n"));
    }
    std::fs::write(&jobs_cm, text).expect("write jobs");
    kubectl(
        &server,
        &["apply", "--server-side", "-f", &jobs_cm.to_string_lossy()],
    )
    .await;
    let swarm = dir.path().join("swarm.yaml");
    std::fs::write(
        &swarm,
        "apiVersion: shoal.dev/v1alpha1\nkind: Swarm\nmetadata:\n  name: bench\nspec:\n  jobsFrom:\n    configMapKeyRef:\n      name: jobs\n      key: config.yml\n",
    )
    .expect("write swarm");

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = tokio::spawn(run(
        client.clone(),
        Settings {
            namespace: Some("default".to_owned()),
            ..Settings::default()
        },
        async move {
            let _ = stopped.await;
        },
    ));
    kubectl(&server, &["apply", "-f", &swarm.to_string_lossy()]).await;
    let first = wait_for_revision(&client, 1).await;
    let before = versions(&client).await;
    let started = Instant::now();
    kubectl(
        &server,
        &[
            "scale",
            "statefulset",
            "worker",
            &format!("--replicas={}", members + 1),
        ],
    )
    .await;
    wait_for_revision(&client, 2).await;
    let scale = started.elapsed();
    let after = versions(&client).await;
    let writes = after
        .iter()
        .filter(|(name, version)| before.get(*name) != Some(*version))
        .count();
    let swarm: Swarm = Api::namespaced(client.clone(), "default")
        .get("bench")
        .await
        .expect("swarm");
    let affected = swarm
        .status
        .map(|status| status.members.iter().filter(|m| m.slice_size > 0).count())
        .unwrap_or(0);
    println!(
        "{members} -> {} members x {jobs} jobs: first revision in force after {first:?}; scale to revision 2 in force after {scale:?}; {writes} ConfigMaps created or rewritten ({affected} members own jobs)",
        members + 1
    );
    let _ = stop.send(());
    let _ = controller.await;
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
