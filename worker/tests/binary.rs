//! The `shoal-worker` binary: identity from the downward-API environment,
//! flags from the environment, the kubeconfig from `KUBECONFIG`, and a clean
//! stop on SIGTERM (the kubelet stopping the pod) that stops exec processes.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use rustix::process::{Pid, Signal};

const LIMIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn the_binary_reads_its_identity_from_the_environment_and_stops_its_jobs_on_sigterm() {
    let cluster = Cluster::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("jobs.log");
    let file = dir.path().join("slice.yaml");
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let address: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut sidecar = tokio::process::Command::new(env!("CARGO_BIN_EXE_shoal-worker"))
        .env("KUBECONFIG", cluster.kubeconfig_path())
        .env("POD_NAME", "pool-3")
        .env("POD_NAMESPACE", cluster.namespace())
        .env("SHOAL_LISTEN", address.to_string())
        // Not the default 0.0.0.0:9464: tests run side by side on one host.
        .env("SHOAL_METRICS_ADDRESS", "127.0.0.1:0")
        .env("SHOAL_SLICE_FILE", &file)
        .env("SHOAL_STOP_GRACE", "3s")
        .env(
            "SHOAL_EXEC",
            format!(
                "echo start $SHOAL_JOB >> {log}; trap 'echo stop $SHOAL_JOB >> {log}; exit 0' TERM; sleep 1000 & wait",
                log = log.display()
            ),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    write_slice(
        &cluster.client(),
        cluster.namespace(),
        &slice("pool-3", 1, &["x"]),
    )
    .await;
    eventually("acked on the Lease", LIMIT, || async {
        lease_ack(&cluster.client(), cluster.namespace(), "pool-3").await
    })
    .await;
    eventually("the job running", LIMIT, || async {
        std::fs::read_to_string(&log)
            .ok()
            .filter(|log| log == "start x\n")
    })
    .await;
    let slice = eventually("the HTTP server on SHOAL_LISTEN", LIMIT, || async {
        let connected = tokio::net::TcpStream::connect(address).await.is_ok();
        if !connected {
            return None;
        }
        Some(get(address, "/v1/slice").await.json())
    })
    .await;
    assert_eq!(slice["member"], "pool-3");
    assert!(std::fs::read_to_string(&file).unwrap().contains("- x\n"));

    let pid = Pid::from_raw(sidecar.id().unwrap() as i32).unwrap();
    rustix::process::kill_process(pid, Signal::TERM).unwrap();
    let status = tokio::time::timeout(LIMIT, sidecar.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "start x\nstop x\n");
}

#[tokio::test]
async fn the_binary_refuses_to_start_without_its_identity() {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_shoal-worker"))
        .env_remove("POD_NAME")
        .env_remove("POD_NAMESPACE")
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--pod-name"), "{stderr}");
}

fn free_local_address() -> std::net::SocketAddr {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap()
}

/// Prometheus scrapes the sidecar from outside the pod: `/metrics` answers on
/// `SHOAL_METRICS_ADDRESS`, a listener apart from the loopback slice API, which serves
/// neither the slice nor acknowledgements. With `SHOAL_LOG_FORMAT=json` every line the
/// binary logs is a JSON object, and none carries a terminal colour code.
#[tokio::test]
async fn the_binary_serves_metrics_on_their_own_port_and_logs_json_lines() {
    let cluster = Cluster::start().await;
    let listen = free_local_address();
    let metrics = free_local_address();
    let sidecar = tokio::process::Command::new(env!("CARGO_BIN_EXE_shoal-worker"))
        .env("KUBECONFIG", cluster.kubeconfig_path())
        .env("POD_NAME", "pool-4")
        .env("POD_NAMESPACE", cluster.namespace())
        .env("SHOAL_LISTEN", listen.to_string())
        .env("SHOAL_METRICS_ADDRESS", metrics.to_string())
        .env("SHOAL_LOG_FORMAT", "json")
        .env("SHOAL_ACK_ON_APPLY", "true")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    write_slice(
        &cluster.client(),
        cluster.namespace(),
        &slice("pool-4", 2, &["x", "y"]),
    )
    .await;
    let scraped = eventually("the slice counted on the metrics port", LIMIT, || async {
        tokio::net::TcpStream::connect(metrics).await.ok()?;
        let scraped = get(metrics, "/metrics").await;
        (scraped.status == 200 && scraped.body.contains("shoal_worker_slice_revision 2"))
            .then_some(scraped.body)
    })
    .await;
    assert!(scraped.contains("shoal_worker_slice_jobs 2"), "{scraped}");
    // A scrape that asks for nothing gets the Prometheus text format, in which a counter
    // family is declared under its `_total` name (what `promtool check metrics` reads).
    assert!(
        scraped.contains("# TYPE shoal_worker_slice_updates_total counter\n")
            && !scraped.contains("# EOF"),
        "{scraped}"
    );
    for private in ["/v1/slice", "/readyz"] {
        assert_eq!(
            get(metrics, private).await.status,
            404,
            "{private} must stay on the loopback listener"
        );
    }
    assert_eq!(get(listen, "/v1/slice").await.json()["member"], "pool-4");

    let pid = Pid::from_raw(sidecar.id().unwrap() as i32).unwrap();
    rustix::process::kill_process(pid, Signal::TERM).unwrap();
    let output = tokio::time::timeout(LIMIT, sidecar.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(output.status.success(), "{}", output.status);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!stderr.contains('\u{1b}'), "colour codes in {stderr}");
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("{error}: {line:?}")))
        .collect();
    let starting = lines
        .iter()
        .find(|line| line["fields"]["message"] == "shoal-worker starting")
        .unwrap_or_else(|| panic!("no start line in {stderr}"));
    assert_eq!(starting["level"], "INFO");
    assert_eq!(starting["fields"]["member"], "pool-4");
    assert!(starting["timestamp"].is_string(), "{starting}");
}
