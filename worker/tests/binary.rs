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
