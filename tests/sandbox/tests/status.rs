//! The deployment status walkthrough in the sandbox, as a user types it: the
//! sandbox serves the deployment status endpoint; the demo plan `web`'s
//! deployment goes pending → installing → installed as its instance
//! processes start, then one instance's process fails; at each step
//! `kubectl get dplan web -o jsonpath='{.status.deploymentStatus}'` and a
//! `curl` with a ServiceAccount token (`kubectl create token`) bound to the
//! reader role show the same document, and a token without the role gets 403.
//!
//! Emulator-only by design, like `plans.rs`: the sandbox is the emulated
//! cluster plus Shoal, with the sidecars as local processes.

use std::time::{Duration, Instant};

use serde_json::Value;
use shoal_core::deploy::status::DeploymentStatusDocument;
use shoal_sandbox::{Options, Sandbox, eventually, kubectl_shoal};

const WAIT: Duration = Duration::from_secs(90);

async fn kubectl(sandbox: &Sandbox, args: &[&str]) -> String {
    sandbox
        .kubectl()
        .run(args)
        .await
        .unwrap_or_else(|error| panic!("kubectl {args:?}: {error}"))
}

/// `kubectl get dplan web -o jsonpath='{.status.deploymentStatus}'`: the
/// document of the latest revision (the list is oldest first).
async fn latest_document(sandbox: &Sandbox) -> Result<DeploymentStatusDocument, String> {
    let text = kubectl(
        sandbox,
        &[
            "get",
            "dplan",
            "web",
            "-o",
            "jsonpath={.status.deploymentStatus}",
        ],
    )
    .await;
    let mut documents: Vec<DeploymentStatusDocument> =
        serde_json::from_str(&text).map_err(|error| format!("{error}: {text:?}"))?;
    documents.pop().ok_or_else(|| "no document yet".to_owned())
}

/// Whether `document` is revision `revision`'s and in `state`.
fn is_in(document: &DeploymentStatusDocument, revision: u64, state: &str) -> bool {
    document.adopted_manifest_version == Some(revision) && document.status.state == state
}

/// Waits until the latest revision `revision`'s document is in `state`.
async fn document_in(sandbox: &Sandbox, revision: u64, state: &str) -> DeploymentStatusDocument {
    eventually(&format!("deployment {revision} {state}"), WAIT, || async {
        let document = latest_document(sandbox).await?;
        if is_in(&document, revision, state) {
            Ok(document)
        } else {
            Err(format!("{document:?}"))
        }
    })
    .await
}

/// `curl` the endpoint (trusting the sandbox's CA) with `token`: the HTTP
/// status code and the body.
async fn curl(sandbox: &Sandbox, url: &str, token: &str) -> (u16, String) {
    let access = sandbox.status_api_access().expect("the endpoint is served");
    let output = tokio::process::Command::new("curl")
        .args(["-sS", "-o", "-", "-w", "\n%{http_code}", url])
        .arg("--cacert")
        .arg(&access.ca)
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .output()
        .await
        .expect("curl runs");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').expect("curl's status line");
    let code = code
        .parse()
        .unwrap_or_else(|_| panic!("curl {url}: {text} {output:?}"));
    (code, body.to_owned())
}

/// Reads `document`'s deployment over HTTP with `token` and checks it is
/// the document the plan's status shows.
async fn served_as_in_the_plan(
    sandbox: &Sandbox,
    token: &str,
    document: &DeploymentStatusDocument,
) {
    let address = sandbox
        .status_api_address()
        .expect("the endpoint is served");
    let url = format!(
        "https://{address}/api/v1/deployments/{}/status",
        document.deployment_id
    );
    let (code, body) = curl(sandbox, &url, token).await;
    assert_eq!(code, 200, "{body}");
    let served: DeploymentStatusDocument = serde_json::from_str(&body).expect("a document");
    assert_eq!(&served, document);
}

/// The ids of the operations waiting for approval now.
async fn waiting_ids(sandbox: &Sandbox) -> Result<Vec<String>, String> {
    let plan: Value =
        serde_json::from_str(&kubectl(sandbox, &["get", "dplan", "web", "-o", "json"]).await)
            .map_err(|error| error.to_string())?;
    Ok(plan["status"]["operations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|op| op["state"] == "PENDING_APPROVAL")
        .filter_map(|op| op["id"].as_str().map(str::to_owned))
        .collect())
}

/// Approves each of `ids` with `kubectl shoal approve-op`.
async fn approve_ids(sandbox: &Sandbox, ids: &[String]) {
    for id in ids {
        kubectl_shoal(
            &sandbox.kubeconfig_path(),
            sandbox.namespace(),
            &["approve-op", "web", id],
        )
        .await
        .unwrap_or_else(|error| panic!("kubectl shoal approve-op web {id}: {error}"));
    }
}

/// Approves `count` operations waiting for approval with `kubectl shoal approve-op`.
async fn approve(sandbox: &Sandbox, count: usize) {
    let waiting = eventually(&format!("{count} operations waiting"), WAIT, || async {
        let ids = waiting_ids(sandbox).await?;
        if ids.len() >= count {
            Ok(ids)
        } else {
            Err(format!("{ids:?}"))
        }
    })
    .await;
    approve_ids(sandbox, &waiting[..count]).await;
}

/// Approves whatever waits, as it comes, until the latest revision `revision`'s
/// document is in `state`: a rolling update releases its UPDATEs one update
/// domain at a time, and stops at a domain that fails.
async fn approve_until(sandbox: &Sandbox, revision: u64, state: &str) -> DeploymentStatusDocument {
    eventually(&format!("deployment {revision} {state}"), WAIT, || async {
        approve_ids(sandbox, &waiting_ids(sandbox).await?).await;
        let document = latest_document(sandbox).await?;
        if is_in(&document, revision, state) {
            Ok(document)
        } else {
            Err(format!("{document:?}"))
        }
    })
    .await
}

/// ServiceAccounts `status-reader` (bound to the reader role of
/// `manifests/status-api/rbac.yaml`) and `status-stranger` (nothing), and a
/// token of each from `kubectl create token`.
async fn callers(sandbox: &Sandbox) -> (String, String) {
    let namespace = sandbox.namespace();
    kubectl(sandbox, &["create", "serviceaccount", "status-reader"]).await;
    kubectl(sandbox, &["create", "serviceaccount", "status-stranger"]).await;
    kubectl(
        sandbox,
        &[
            "create",
            "rolebinding",
            "status-reader",
            "--clusterrole=shoal-deployment-status-reader",
            &format!("--serviceaccount={namespace}:status-reader"),
        ],
    )
    .await;
    let reader = kubectl(sandbox, &["create", "token", "status-reader"]).await;
    let stranger = kubectl(sandbox, &["create", "token", "status-stranger"]).await;
    (reader.trim().to_owned(), stranger.trim().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plans_deployment_status_reads_the_same_in_kubectl_and_over_http_from_pending_to_a_failed_instance()
 {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut options = Options::new(dir.path());
    options.status_api = Some("127.0.0.1:0".parse().expect("an address"));
    let mut sandbox = Sandbox::start(options).await.expect("the sandbox starts");
    sandbox
        .wait_converged(WAIT)
        .await
        .expect("the demo converges");
    let plans = concat!(env!("CARGO_MANIFEST_DIR"), "/plans");
    kubectl(
        &sandbox,
        &["apply", "-f", &format!("{plans}/40-gpu-pools.yaml")],
    )
    .await;
    let started = Instant::now();
    while sandbox
        .wait_converged(WAIT)
        .await
        .expect("the demo converges")
        .slices
        .len()
        < 8
    {
        assert!(started.elapsed() < WAIT, "eight members in time");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let converged = sandbox.wait_converged(WAIT).await.expect("converged");
    let tour = sandbox.tour(&converged).await.expect("the tour");
    let address = sandbox
        .status_api_address()
        .expect("the endpoint is served");
    assert!(
        tour.render()
            .contains(&format!("https://{address}/api/v1/deployments/")),
        "{}",
        tour.render()
    );
    let (reader, stranger) = callers(&sandbox).await;
    kubectl(
        &sandbox,
        &["apply", "-f", &format!("{plans}/50-deploymentplan.yaml")],
    )
    .await;

    // Nothing approved yet: pending.
    let pending = document_in(&sandbox, 1, "pending").await;
    served_as_in_the_plan(&sandbox, &reader, &pending).await;
    let url = format!(
        "https://{address}/api/v1/deployments/{}/status",
        pending.deployment_id
    );
    let (code, body) = curl(&sandbox, &url, &stranger).await;
    assert_eq!(code, 403, "{body}");

    // One approved: its process runs but has not settled (the GPU pools count
    // an instance installed after 5 s of running), so the deployment is
    // installing, beside two pending (Margo's order puts installing above
    // pending), under the same id.
    approve(&sandbox, 1).await;
    let installing = document_in(&sandbox, 1, "installing").await;
    assert_eq!(installing.deployment_id, pending.deployment_id);
    // All three approved, running and settled: installed. (One instance
    // installed beside two pending is `pending` again: Margo's order puts
    // pending above installed.)
    approve(&sandbox, 2).await;
    let installed = document_in(&sandbox, 1, "installed").await;
    assert_eq!(installed.deployment_id, pending.deployment_id);
    served_as_in_the_plan(&sandbox, &reader, &installed).await;
    let names: Vec<&str> = installed
        .components
        .iter()
        .map(|component| component.name.as_str())
        .collect();
    assert_eq!(names, ["nginx", "exporter"]);

    // The device the sandbox made a certificate for reports by the tour's own
    // command, and `kubectl shoal reports web` shows it beside Shoal's state.
    let access = sandbox.status_api_access().expect("the endpoint is served");
    let command = tour.device_report_command(access);
    assert!(tour.render().contains(&command), "{}", tour.render());
    assert!(
        command.contains("curl --cacert ") && command.contains(" --cert "),
        "{command}"
    );
    let posted = tokio::process::Command::new("sh")
        .args([
            "-c",
            &format!("{command} -sS -o /dev/null -w '%{{http_code}}'"),
        ])
        .env("KUBECONFIG", sandbox.kubeconfig_path())
        .output()
        .await
        .expect("sh runs");
    assert_eq!(
        String::from_utf8_lossy(&posted.stdout),
        "201",
        "{command}: {posted:?}"
    );
    let reports = kubectl_shoal(
        &sandbox.kubeconfig_path(),
        sandbox.namespace(),
        &["reports", "web"],
    )
    .await
    .expect("kubectl shoal reports");
    let row = reports
        .lines()
        .find(|line| line.contains("edge-1"))
        .unwrap_or_else(|| panic!("{reports}"));
    assert!(row.contains("installed"), "{reports}");

    // Deployment 2 names one instance whose process is to fail.
    let instances = kubectl(
        &sandbox,
        &[
            "get",
            "dplan",
            "web",
            "-o",
            "jsonpath={.status.instances[0].name}",
        ],
    )
    .await;
    let failing = instances.trim().to_owned();
    assert!(!failing.is_empty(), "an instance name");
    let patch = format!(
        r#"{{"spec":{{"deployment":{{"payloads":[
            {{"application":"nginx","coordinates":{{"image":"nginx:1.25","fail":"{failing}"}}}},
            {{"application":"exporter","coordinates":{{"image":"nginx/nginx-prometheus-exporter:1.1"}}}}]}}}}}}"#
    );
    kubectl(
        &sandbox,
        &["patch", "dplan", "web", "--type", "merge", "-p", &patch],
    )
    .await;
    let failed = approve_until(&sandbox, 2, "failed").await;
    assert_eq!(
        failed.deployment_id, pending.deployment_id,
        "one deploymentId across the payload update"
    );
    let error = failed.status.error.clone().expect("the failure's error");
    assert_eq!(error.code, "ExitCode3", "{error:?}");
    assert_eq!(
        error.source.as_deref(),
        Some("web"),
        "the deployment's name"
    );
    assert!(
        error.message.contains(&format!("instance {failing} on ")),
        "{error:?}"
    );
    assert!(error.message.contains("exiting 3"), "{error:?}");
    for component in &failed.components {
        assert_eq!(component.state, "failed", "{failed:?}");
        let own = component.error.as_ref().expect("the component's error");
        assert_eq!(own.code, "ExitCode3", "{failed:?}");
        assert_eq!(own.source.as_deref(), Some(component.name.as_str()));
    }
    served_as_in_the_plan(&sandbox, &reader, &failed).await;
    let (code, body) = curl(
        &sandbox,
        &format!(
            "https://{address}/api/v1/deployments/{}/status",
            failed.deployment_id
        ),
        &stranger,
    )
    .await;
    assert_eq!(code, 403, "{body}");

    sandbox.shutdown().await.expect("the sandbox stops cleanly");
}
