//! `/metrics`, `/healthz` and `/readyz` of an in-process controller, for Swarms and
//! DeploymentPlans.

use crate::common;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::ListParams;
use shoal_controller::Settings;

use common::{Env, all_jobs, eventually, job_keys, manual_plan_yaml, swarm_yaml};

const WAIT: Duration = Duration::from_secs(30);

/// The value of `series` (its name and labels, as `/metrics` prints them).
fn value(metrics: &str, series: &str) -> Option<usize> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

/// `GET path`: the body of a 200 answer; `None` until the server answers 200.
async fn get(address: std::net::SocketAddr, path: &str) -> Option<String> {
    let response = shoal_emulator::http_client::get(address, path).await.ok()?;
    (response.status == 200).then_some(response.body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_server_reports_health_and_applied_revisions() {
    let env = Env::start().await;
    // Before the controller starts: the plan controller watches only a served CRD.
    env.install_plan_crd().await;
    let address = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
        probe.local_addr().expect("address")
    };
    let controller = env.start_controller_with(Settings {
        namespace: Some(env.namespace.clone()),
        metrics_address: Some(address),
        resync: Duration::from_secs(5),
        ..Settings::default()
    });
    eventually("/healthz is 200", WAIT, || get(address, "/healthz")).await;
    let ready = eventually("/readyz is 200", WAIT, || get(address, "/readyz")).await;
    assert!(ready.contains("ready"));

    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(8), "")).await;
    eventually("revision 1 applied", WAIT, || async {
        (all_jobs(&env.slices("demo").await) == job_keys(8)).then_some(())
    })
    .await;
    env.in_force("demo", 1, WAIT).await;
    eventually("the index written", WAIT, || async {
        env.kubectl_status(&["get", "configmap", "demo"])
            .await
            .0
            .then_some(())
    })
    .await;
    let metrics = eventually("revisions_applied counted", WAIT, || async {
        let metrics = get(address, "/metrics").await?;
        metrics
            .contains("shoal_revisions_applied_total 1")
            .then_some(metrics)
    })
    .await;
    let namespace = &env.namespace;
    let expected: Vec<String> = vec![
        "shoal_reconcile_duration_seconds_count".to_owned(),
        "shoal_jobs_moved_total".to_owned(),
        "shoal_members_restarted_total".to_owned(),
        format!(
            "shoal_pending_approvals{{namespace=\"{}\",swarm=\"demo\"}} 0",
            namespace
        ),
        format!(
            "shoal_swarm_phase{{namespace=\"{}\",swarm=\"demo\",phase=\"Ready\"}} 1",
            namespace
        ),
        format!(
            "shoal_revision_in_force{{namespace=\"{}\",swarm=\"demo\"}} 1",
            namespace
        ),
        // No leader election here: this replica reconciles, so it counts as the leader.
        "shoal_leader 1".to_owned(),
        format!(
            "shoal_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        ),
        "shoal_change_to_applied_seconds_count".to_owned(),
        "shoal_slices_written_total 2".to_owned(),
        // Revision 1 on two members: its history, two slices and the index, nothing more.
        "shoal_api_writes_total{kind=\"configmap\"} 4".to_owned(),
        "shoal_api_writes_total{kind=\"status\"}".to_owned(),
        "shoal_api_writes_total{kind=\"event\"}".to_owned(),
    ];
    for name in &expected {
        assert!(
            metrics.contains(name.as_str()),
            "/metrics lacks {name}:\n{metrics}"
        );
    }
    // The bodies of those four writes: more than the data they carry, less than the
    // objects as stored (the server adds uid, managedFields, timestamps).
    let counted = value(&metrics, "shoal_api_write_bytes_total{kind=\"configmap\"}");
    let written = Api::<ConfigMap>::namespaced(env.client.clone(), namespace)
        .list(&ListParams::default().labels("shoal.dev/swarm=demo"))
        .await
        .expect("list the Swarm's ConfigMaps")
        .items;
    assert_eq!(written.len(), 4, "{written:?}");
    let data: usize = written
        .iter()
        .flat_map(|map| map.data.iter().flatten())
        .map(|(key, text)| key.len() + text.len())
        .sum();
    let stored: usize = written
        .iter()
        .map(|map| serde_json::to_vec(map).expect("JSON").len())
        .sum();
    assert!(
        counted.is_some_and(|bytes| data < bytes && bytes < stored),
        "{counted:?} bytes written, wanted between {data} and {stored}:\n{metrics}"
    );
    assert!(
        value(&metrics, "shoal_api_write_bytes_total{kind=\"status\"}")
            .is_some_and(|bytes| bytes > 0),
        "{metrics}"
    );

    // A plan whose operations wait for a person: its pass sets the plan's gauges, under
    // the plan's own namespace.
    env.apply(&manual_plan_yaml("web", 2)).await;
    let waiting = format!(
        "shoal_plan_operations{{namespace=\"{namespace}\",plan=\"web\",state=\"PENDING_APPROVAL\"}} 2"
    );
    let metrics = eventually("the plan's operations counted", WAIT, || async {
        let metrics = get(address, "/metrics").await?;
        metrics.contains(&waiting).then_some(metrics)
    })
    .await;
    for line in [
        format!(
            "shoal_plan_phase{{namespace=\"{namespace}\",plan=\"web\",state=\"AwaitingApproval\"}} 1"
        ),
        format!(
            "shoal_plan_operations{{namespace=\"{namespace}\",plan=\"web\",state=\"SUCCEEDED\"}} 0"
        ),
        format!(
            "shoal_plan_oldest_pending_operation_seconds{{namespace=\"{namespace}\",plan=\"web\"}}"
        ),
        format!("shoal_plan_instances{{namespace=\"{namespace}\",plan=\"web\",state=\"pending\"}}"),
    ] {
        assert!(metrics.contains(&line), "/metrics lacks {line}:\n{metrics}");
    }
    controller.stop().await;
    env.finish().await;
}
