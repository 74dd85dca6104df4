//! The deployment status REST endpoint through a real HTTP client (curl):
//! the document a plan's status shows, read with a ServiceAccount token;
//! every response code; callers without a valid token or without permission
//! refused; a client's report kept in the cluster across a restart of the
//! controller and its endpoint. Runs on the emulator and on a real control
//! plane (`SHOAL_TEST_KUBECONFIG`): TokenReview and SubjectAccessReview are
//! answered by the API server in both.

use crate::common;
use crate::plugin_common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Env, eventually, job_keys, report_instance_states, swarm_yaml};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, ResourceExt};
use plugin_common::{shoal, shoal_json, shoal_ok};
use serde_json::{Value, json};
use shoal_controller::api::deployment_plan::DeploymentPlan;
use shoal_controller::status_api::{StatusApi, serve, serve_tls};
use shoal_core::deploy::status::{DeploymentStatusDocument, SpecVersion, schema_of};

const WAIT: Duration = Duration::from_secs(30);

/// The endpoint running in-process on a port of its own.
pub struct Endpoint {
    pub base: String,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Endpoint {
    async fn start(env: &Env) -> Endpoint {
        Endpoint::start_as(env, env.controller_clients().api, None).await
    }

    /// The endpoint calling the API server with `client`'s identity, over
    /// TLS with `tls` (else plain HTTP).
    pub async fn start_as(
        env: &Env,
        client: kube::Client,
        tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    ) -> Endpoint {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a local port");
        let scheme = if tls.is_some() { "https" } else { "http" };
        let address = listener.local_addr().expect("an address");
        let base = format!("{scheme}://{address}");
        let api = StatusApi {
            client,
            namespace: Some(env.namespace.clone()),
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.await;
            };
            let served = match tls {
                Some(config) => serve_tls(listener, config, api, shutdown).await,
                None => serve(listener, api, shutdown).await,
            };
            served.expect("the endpoint serves");
        });
        Endpoint { base, stop, task }
    }

    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// One HTTP answer: status code (0: no HTTP answer, e.g. a refused TLS
/// handshake), content type, body, and curl's complaint if any.
#[derive(Debug)]
pub struct Answer {
    pub code: u16,
    pub content_type: String,
    pub body: String,
    pub stderr: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// A refusal: the code and an `application/problem+json` body saying it.
    pub fn assert_problem(&self, code: u16, detail_contains: &str) {
        assert_eq!(self.code, code, "{self:?}");
        assert_eq!(self.content_type, "application/problem+json", "{self:?}");
        let problem = self.json();
        assert_eq!(problem["status"], code, "{self:?}");
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(detail_contains), "{detail}");
    }
}

/// `curl` with `token` (if any), POSTing `body` when given.
async fn curl(url: &str, token: Option<&str>, body: Option<&str>) -> Answer {
    curl_with(&[], url, token, body).await
}

/// [`curl`] with more arguments first (`--cacert`, `--cert`, `--key`).
pub async fn curl_with(
    arguments: &[&str],
    url: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> Answer {
    let mut command = tokio::process::Command::new("curl");
    command.args(arguments);
    command.args([
        "-sS",
        "-o",
        "-",
        "-w",
        "\n%{http_code} %{content_type}",
        url,
    ]);
    if let Some(token) = token {
        command.args(["-H", &format!("Authorization: Bearer {token}")]);
    }
    if let Some(body) = body {
        command.args([
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            body,
        ]);
    }
    let output = command.output().await.expect("curl runs");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, trailer) = text.rsplit_once('\n').expect("curl's trailer");
    let (code, content_type) = trailer.split_once(' ').unwrap_or((trailer, ""));
    Answer {
        code: code
            .parse()
            .unwrap_or_else(|_| panic!("curl: {text} {output:?}")),
        content_type: content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .to_owned(),
        body: body.to_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Swarm `demo` with one member `east-0` and plan `web` (one instance, two
/// applications, Automatic); the member pods' uids.
pub async fn plan_on_one_member(env: &Env) -> BTreeMap<String, String> {
    env.apply(&swarm_yaml("demo", &job_keys(2), "")).await;
    env.pool("east", "demo", 1).await;
    env.kubectl(&[
        "annotate",
        "statefulset",
        "east",
        "shoal.dev/capacity=cores=4",
    ])
    .await;
    let uids = env.ready_pool("east", 1).await;
    env.apply(
        r#"apiVersion: shoal.dev/v1alpha1
kind: DeploymentPlan
metadata: {name: web}
spec:
  swarm: demo
  applications: [{name: nginx, resources: {cores: 1}}, {name: exporter}]
  approval: {policy: Automatic}
  deployment:
    instances: 1
    payloads: [{application: nginx, coordinates: {image: "nginx:1.27"}}]
"#,
    )
    .await;
    uids
}

/// The plan CRD, the controller and the endpoint running, and plan `web` on
/// one member (see [`plan_on_one_member`]); the member pods' uids.
async fn serving_one_plan(env: &Env) -> (common::Running, Endpoint, BTreeMap<String, String>) {
    env.install_plan_crd().await;
    let controller = env.start_controller();
    let endpoint = Endpoint::start(env).await;
    let uids = plan_on_one_member(env).await;
    (controller, endpoint, uids)
}

async fn plan(env: &Env) -> DeploymentPlan {
    let api: Api<DeploymentPlan> = Api::namespaced(env.client.clone(), &env.namespace);
    api.get("web").await.expect("the plan exists")
}

/// The plan's document of its deployment 1 once it is in `state`.
pub async fn document_in(env: &Env, state: &str) -> DeploymentStatusDocument {
    eventually(&format!("deployment 1 of web is {state}"), WAIT, || async {
        let status = plan(env).await.status.unwrap_or_default();
        status
            .deployment_status
            .into_iter()
            .find(|d| d.adopted_manifest_version == Some(1))
            .filter(|d| d.status.state == state)
    })
    .await
}

/// Checks a served document against both definitions of the schema Shoal
/// publishes (re-stated from Margo 1.0.0 and 1.0.0-rc.3).
fn assert_published(document: &Value) {
    let valid = |version| jsonschema::is_valid(&schema_of(version), document);
    assert!(
        valid(SpecVersion::V1) && valid(SpecVersion::V1Rc3),
        "{document}"
    );
}

/// A Margo 1.0.0 report on deployment `id`: `status` as given, component
/// nginx as in `nginx` (its state and any more fields), exporter pending.
pub fn report_body(id: &str, status: Value, mut nginx: Value) -> String {
    nginx["name"] = json!("nginx");
    json!({"apiVersion": "deployment.margo.org/v1alpha1", "kind": "DeploymentStatusManifest",
        "deploymentId": id, "status": status,
        "components": [nginx, {"name": "exporter", "state": "pending"}]})
    .to_string()
}

/// The member's sidecar reports `state` for web-0 on its own Lease.
async fn report(env: &Env, pod: &str, uid: &str, state: Value) {
    report_instance_states(env, pod, uid, pod, json!({"web-0": state})).await;
}

/// ServiceAccounts `reader` and `reporter`, bound to the ClusterRoles of
/// `manifests/status-api/rbac.yaml` (the RBAC the README documents) by
/// RoleBindings, and `stranger` (nothing); their tokens. (On a real control
/// plane the ClusterRoles stay after the test: they grant nothing unbound.)
pub async fn callers(env: &Env) -> (String, String, String) {
    let namespace = &env.namespace;
    let rbac = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../manifests/status-api/rbac.yaml"
    );
    env.kubectl(&["apply", "-f", rbac]).await;
    env.apply(&format!(
        r#"apiVersion: v1
kind: ServiceAccount
metadata: {{name: reader}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: reporter}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: stranger}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: reader}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: shoal-deployment-status-reader}}
subjects: [{{kind: ServiceAccount, name: reader, namespace: {namespace}}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: reporter}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: shoal-deployment-status-reporter}}
subjects: [{{kind: ServiceAccount, name: reporter, namespace: {namespace}}}]
"#
    ))
    .await;
    let token = |account: &'static str| async move {
        env.cluster
            .service_account_token(namespace, account, None)
            .await
            .expect("a token")
    };
    (
        token("reader").await,
        token("reporter").await,
        token("stranger").await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_serves_the_plans_document_and_keeps_reports_across_a_restart() {
    let env = Env::start().await;
    let (controller, endpoint, uids) = serving_one_plan(&env).await;
    let (reader, reporter, stranger) = callers(&env).await;

    // pending → installed as the member reports; the same document over HTTP.
    let pending = document_in(&env, "pending").await;
    let id = pending.deployment_id.clone();
    let url = format!("{}/api/v1/deployments/{id}/status", endpoint.base);
    report(
        &env,
        "east-0",
        &uids["east-0"],
        json!({"state": "installing", "deployment": 1}),
    )
    .await;
    document_in(&env, "installing").await;
    report(
        &env,
        "east-0",
        &uids["east-0"],
        json!({"state": "installed", "deployment": 1}),
    )
    .await;
    let installed = document_in(&env, "installed").await;
    let read = curl(&url, Some(&reader), None).await;
    assert_eq!(
        (read.code, read.content_type.as_str()),
        (200, "application/json"),
        "{read:?}"
    );
    let served: DeploymentStatusDocument = serde_json::from_str(&read.body).expect("a document");
    assert_eq!(served, installed);
    assert_published(&read.json());
    let names: Vec<&str> = served.components.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["nginx", "exporter"]);
    let events = env.events().await;
    assert!(events.contains("DeploymentInstalled"), "{events}");
    let table = shoal_ok(&env, &["plan", "web"]).await;
    let deployments = table.split("\nDeployments\n").nth(1).unwrap_or_default();
    assert!(
        deployments.contains(&id) && deployments.contains("nginx=installed, exporter=installed"),
        "{table}"
    );

    // Nobody without a valid token, nobody without permission.
    curl(&url, None, None)
        .await
        .assert_problem(401, "bearer token");
    curl(&url, Some("not-a-token"), None)
        .await
        .assert_problem(401, "not valid");
    curl(&url, Some(&stranger), None)
        .await
        .assert_problem(403, "may not get");
    let installed = json!({"state": "installed"});
    let valid = report_body(&id, installed.clone(), installed.clone());
    let client_url = format!(
        "{}/api/v1/clients/edge-1/deployments/{id}/status",
        endpoint.base
    );
    curl(&client_url, Some(&reader), Some(&valid))
        .await
        .assert_problem(403, "may not update");
    let unknown = format!(
        "{}/api/v1/deployments/00000000-0000-8000-8000-000000000000/status",
        endpoint.base
    );
    curl(&unknown, Some(&reader), None)
        .await
        .assert_problem(404, "no DeploymentPlan");

    // Bodies: malformed 400, contradictions 422, first report 201, then 200.
    curl(&client_url, Some(&reporter), Some("{\"deploymentId\":"))
        .await
        .assert_problem(400, "not JSON");
    let other_id = report_body("another-id", installed.clone(), installed.clone());
    curl(&client_url, Some(&reporter), Some(&other_id))
        .await
        .assert_problem(422, "differs");
    let unknown_component = valid.replace("\"nginx\"", "\"redis\"");
    curl(&client_url, Some(&reporter), Some(&unknown_component))
        .await
        .assert_problem(422, "redis");
    let bad_state = report_body(&id, installed.clone(), json!({"state": "running"}));
    let refused = curl(&client_url, Some(&reporter), Some(&bad_state)).await;
    refused.assert_problem(422, "running");
    let problem = refused.json();
    assert_eq!(
        problem["type"],
        "https://docs.margo.org/specification/margo-management-interface/problem-types#semantic-error"
    );
    assert_eq!(problem["errors"][0]["pointer"], "/components/0/state");
    assert_eq!(problem["errors"][0]["field"], "components.0.state");
    // rc.3's route wants adoptedManifestVersion and a deviceId; 1.0.0's a kind.
    curl(&url, Some(&reporter), Some(&valid))
        .await
        .assert_problem(
            422,
            "adoptedManifestVersion is required by Margo 1.0.0-rc.3",
        );
    let draft_kind = valid.replace("DeploymentStatusManifest", "Deployment");
    curl(&client_url, Some(&reporter), Some(&draft_kind))
        .await
        .assert_problem(422, "kind \"Deployment\"");
    curl(&client_url, Some(&reporter), None)
        .await
        .assert_problem(404, "has not reported");
    let created = curl(&client_url, Some(&reporter), Some(&valid)).await;
    assert_eq!(created.code, 201, "{created:?}");
    assert_eq!(created.json()["deviceId"], "edge-1");
    let failing = json!({"deploymentId": id, "deviceId": "edge-1", "adoptedManifestVersion": 1,
        "status": {"state": "failed", "error": {"code": "HostUnavailable", "source": "web", "message": "no cluster"}},
        "components": [{"name": "nginx", "state": "pending"}, {"name": "exporter", "state": "pending"}]})
    .to_string();
    let replaced = curl(&url, Some(&reporter), Some(&failing)).await;
    assert_eq!(replaced.code, 200, "{replaced:?}");
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let kept = maps
        .get("web-deployment-reports")
        .await
        .expect("reports are kept in a ConfigMap");
    let owner = &kept.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("DeploymentPlan", "web")
    );
    assert_eq!(Some(owner.uid.clone()), plan(&env).await.uid());

    // A restart of the controller and its endpoint loses no report.
    endpoint.stop().await;
    controller.stop().await;
    let controller = env.start_controller();
    let endpoint = Endpoint::start(&env).await;
    let client_url = format!(
        "{}/api/v1/clients/edge-1/deployments/{id}/status",
        endpoint.base
    );
    let after = curl(&client_url, Some(&reader), None).await;
    assert_eq!(after.code, 200, "{after:?}");
    assert_eq!(after.json()["status"]["error"]["code"], "HostUnavailable");
    let schema = curl(
        &format!("{}/api/v1/schemas/deployment-status", endpoint.base),
        None,
        None,
    )
    .await;
    assert_eq!(schema.code, 200);
    assert_eq!(schema.json()["title"], "DeploymentStatusManifest");

    // A gateway reports for a device behind it, which keeps its own report.
    let child = report_body(
        &id,
        json!({"state": "failed", "error": {"code": "102",
        "source": "edge-1", "message": "Child device unreachable"}}),
        json!({"state": "pending"}),
    )
    .replace(
        "\"deploymentId\"",
        "\"deviceId\":\"edge-1/camera-2\",\"deploymentId\"",
    );
    let kept_child = curl(&client_url, Some(&reporter), Some(&child)).await;
    assert_eq!(kept_child.code, 201, "{kept_child:?}");
    let read_child = curl(
        &format!("{client_url}?deviceId=edge-1/camera-2"),
        Some(&reader),
        None,
    )
    .await;
    assert_eq!(
        read_child.json()["status"]["error"]["code"],
        "102",
        "{read_child:?}"
    );
    // The user sees what each device reported beside Shoal's own state.
    let listed: Value = shoal_json(&env, &["reports", "web"]).await;
    let seen: Vec<(&str, &str, Option<u64>, &str)> = listed["reports"]
        .as_array()
        .expect("a list of reports")
        .iter()
        .map(|row| {
            (
                row["deviceId"].as_str().unwrap_or_default(),
                row["state"].as_str().unwrap_or_default(),
                row["revision"].as_u64(),
                row["shoalState"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("edge-1", "failed", Some(1), "installed"),
            ("edge-1/camera-2", "failed", None, "-"),
        ]
    );
    let table = shoal_ok(&env, &["reports", "web"]).await;
    assert!(table.contains("edge-1/camera-2"), "{table}");

    // An instance whose process fails: the document says failed, with the error.
    let failed = json!({"state": "failed", "deployment": 1, "code": "ExitCode1", "message": "exited with status 1"});
    report(&env, "east-0", &uids["east-0"], failed).await;
    let document = document_in(&env, "failed").await;
    let error = document.components[0]
        .error
        .clone()
        .expect("the component's error");
    // The component's name as source; the instance and member in the message.
    assert_eq!(
        (error.code.as_str(), error.source.as_deref()),
        ("ExitCode1", Some("nginx"))
    );
    assert!(error.message.contains("web-0 on east-0"), "{error:?}");
    let url = format!("{}/api/v1/deployments/{id}/status", endpoint.base);
    let body = curl(&url, Some(&reader), None).await.body;
    let served: DeploymentStatusDocument = serde_json::from_str(&body).expect("a document");
    assert_eq!(served, document);
    assert_published(&serde_json::from_str(&body).expect("JSON"));

    endpoint.stop().await;
    controller.stop().await;
    env.finish().await;
}

/// An endpoint whose own identity may not create TokenReviews (its RBAC
/// component not applied) refuses every caller, valid token or not: it fails
/// closed, and the API server (the emulator too) refuses the review.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_not_allowed_to_review_tokens_lets_nobody_in() {
    let env = Env::start().await;
    let (reader, _, _) = callers(&env).await;
    let token = env
        .cluster
        .service_account_token(&env.namespace, "reader", None)
        .await
        .expect("a token");
    let weak = env
        .cluster
        .client_with_token(&token)
        .await
        .expect("a client");
    let endpoint = Endpoint::start_as(&env, weak, None).await;
    let url = format!("{}/api/v1/deployments/some-id/status", endpoint.base);
    let answer = curl(&url, Some(&reader), None).await;
    answer.assert_problem(503, "TokenReview");
    endpoint.stop().await;
    env.finish().await;
}

/// A ConfigMap that takes the reports' name but that the plan does not own (a
/// user's, or a squatter's) is never written: a report is refused with 409
/// naming it, and the ConfigMap keeps what it held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_is_refused_when_the_reports_configmap_is_not_the_plans() {
    let env = Env::start().await;
    let (controller, endpoint, _) = serving_one_plan(&env).await;
    let (_, reporter, _) = callers(&env).await;
    let id = document_in(&env, "pending").await.deployment_id;
    let squatter = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-deployment-reports\ndata:\n  mine: \"yes\"\n";
    env.apply(squatter).await;
    let installed = json!({"state": "installed"});
    let report = report_body(&id, installed.clone(), installed);
    let url = format!(
        "{}/api/v1/clients/edge-1/deployments/{id}/status",
        endpoint.base
    );
    curl(&url, Some(&reporter), Some(&report))
        .await
        .assert_problem(409, "does not own it");
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let kept = maps
        .get("web-deployment-reports")
        .await
        .expect("the ConfigMap");
    assert_eq!(
        kept.data,
        Some(BTreeMap::from([("mine".to_owned(), "yes".to_owned())]))
    );
    assert!(kept.owner_references().is_empty());
    // Nor does the plugin read it as the plan's reports.
    let listed = shoal(&env, &["reports", "web"]).await;
    assert!(
        !listed.success
            && listed
                .stderr
                .contains("ConfigMap web-deployment-reports is not DeploymentPlan web's"),
        "{listed:?}"
    );
    endpoint.stop().await;
    controller.stop().await;
    env.finish().await;
}

/// Reports are bounded per plan and per device: twenty devices reporting 60 KB
/// each are all kept (201) while the oldest reports go, instead of the
/// ConfigMap filling up and every later device getting 503. Refusals are
/// problem+json and tell nothing they should not: an oversized body is 413, a
/// caller without access gets the same 403 for an unknown deployment id as for
/// a real one, and a failure inside says which step failed, not the API
/// server's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_stay_within_their_budget_and_refusals_tell_nothing_internal() {
    let Some(env) = Env::start_emulated("fault injection").await else {
        return;
    };
    let (controller, endpoint, _) = serving_one_plan(&env).await;
    let (reader, reporter, stranger) = callers(&env).await;
    let id = document_in(&env, "pending").await.deployment_id;
    let client_url = |device: &str| {
        format!(
            "{}/api/v1/clients/{device}/deployments/{id}/status",
            endpoint.base
        )
    };

    let message = "m".repeat(60 * 1024);
    for device in 0..20 {
        let body = report_body(
            &id,
            json!({"state": "failed", "error": {"code": "Big", "message": message}}),
            json!({"state": "failed"}),
        );
        let answer = curl(
            &client_url(&format!("edge-{device}")),
            Some(&reporter),
            Some(&body),
        )
        .await;
        assert_eq!(answer.code, 201, "device edge-{device}: {answer:?}");
    }
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let kept = maps
        .get("web-deployment-reports")
        .await
        .expect("the reports ConfigMap")
        .data
        .unwrap_or_default();
    let bytes: usize = kept.iter().map(|(key, text)| key.len() + text.len()).sum();
    assert!(
        bytes <= shoal_controller::status_api::reports::MAX_PLAN_BYTES,
        "{bytes} bytes kept"
    );
    curl(&client_url("edge-0"), Some(&reader), None)
        .await
        .assert_problem(404, "has not reported");
    let newest = curl(&client_url("edge-19"), Some(&reader), None).await;
    assert_eq!(newest.code, 200, "{newest:?}");

    let oversized = report_body(
        &id,
        json!({"state": "installed"}),
        json!({"state": "installed", "pad": "p".repeat(100 * 1024)}),
    );
    curl(&client_url("edge-big"), Some(&reporter), Some(&oversized))
        .await
        .assert_problem(413, "over 65536 bytes");

    let unknown_id = "00000000-0000-8000-8000-000000000000";
    let real = curl(
        &format!("{}/api/v1/deployments/{id}/status", endpoint.base),
        Some(&stranger),
        None,
    )
    .await;
    let unknown = curl(
        &format!("{}/api/v1/deployments/{unknown_id}/status", endpoint.base),
        Some(&stranger),
        None,
    )
    .await;
    real.assert_problem(403, "may not get");
    unknown.assert_problem(403, "may not get");
    assert_eq!(
        real.body.replace(&id, "<id>"),
        unknown.body.replace(unknown_id, "<id>"),
        "the same answer whether the deployment exists or not"
    );

    // The controller is stopped so that the injected fault meets the endpoint's read.
    controller.stop().await;
    env.faults()
        .fail_next(1, Some("get"), Some("configmaps"), 500);
    let failed = curl(&client_url("edge-19"), Some(&reader), None).await;
    failed.assert_problem(503, "try again later");
    assert!(!failed.body.contains("injected"), "{failed:?}");
    endpoint.stop().await;
    env.finish().await;
}

/// A deployment keeps its id through its revisions (Margo: one id per
/// deployment, the revision in `adoptedManifestVersion`), so a device's report
/// on it is replaced, never piled up per revision; a report kept under an id
/// the plan does not have (an earlier Shoal version gave each revision its
/// own) is dropped by the next report kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_keeps_its_id_through_revisions_and_reports_of_ids_the_plan_lacks_go() {
    let env = Env::start().await;
    let (controller, endpoint, uids) = serving_one_plan(&env).await;
    env.kubectl(&[
        "patch",
        "dplan",
        "web",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"deploymentHistoryLimit":1}}"#,
    ])
    .await;
    let (_, reporter, _) = callers(&env).await;
    let id = document_in(&env, "pending").await.deployment_id;
    let installed = json!({"state": "installed"});
    let report = report_body(&id, installed.clone(), installed);
    let url = format!(
        "{}/api/v1/clients/edge-1/deployments/{id}/status",
        endpoint.base
    );
    let kept = curl(&url, Some(&reporter), Some(&report)).await;
    assert_eq!(kept.code, 201, "{kept:?}");
    let stale = "00000000-0000-8000-8000-000000000001.edge-1.json";
    env.kubectl(&[
        "patch",
        "configmap",
        "web-deployment-reports",
        "--type",
        "merge",
        "-p",
        &json!({"data": {stale: "{}"}}).to_string(),
    ])
    .await;

    // The instance is installed (its CREATE done), then runs deployment 2.
    let installed = json!({"state": "installed", "deployment": 1});
    report_instance_states(
        &env,
        "east-0",
        &uids["east-0"],
        "east-0",
        json!({"web-0": installed}),
    )
    .await;
    document_in(&env, "installed").await;
    env.kubectl(&[
        "patch",
        "dplan",
        "web",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"deployment":{"payloads":[{"application":"nginx","coordinates":{"image":"nginx:1.28"}}]}}}"#,
    ])
    .await;
    eventually(
        "deployment 2 is the latest document, under the same id",
        WAIT,
        || async {
            let documents = plan(&env)
                .await
                .status
                .unwrap_or_default()
                .deployment_status;
            let latest = documents.last()?;
            let same_id = documents.iter().all(|d| d.deployment_id == id);
            (same_id && latest.adopted_manifest_version == Some(2)).then_some(())
        },
    )
    .await;
    let replaced = curl(&url, Some(&reporter), Some(&report)).await;
    assert_eq!(replaced.code, 200, "{replaced:?}");
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let keys: Vec<String> = maps
        .get("web-deployment-reports")
        .await
        .expect("the reports ConfigMap")
        .data
        .unwrap_or_default()
        .into_keys()
        .collect();
    assert_eq!(keys, [format!("{id}.edge-1.json")]);
    endpoint.stop().await;
    controller.stop().await;
    env.finish().await;
}
