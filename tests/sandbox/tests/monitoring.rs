//! `manifests/monitoring/`: the alerts and the dashboard name only metrics Shoal exports
//! (read from the controller's and the sidecar's own registries), `promtool check rules`
//! accepts the alerts and both binaries' `/metrics` text when promtool is installed, the
//! monitors scrape ports that exist and keep Shoal's `namespace` label (`honorLabels`),
//! every runbook an alert names exists, and the directory renders with `kubectl kustomize`.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::Value;

fn repo_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative)
}

fn read_yaml(relative: &str) -> Value {
    let text = std::fs::read_to_string(repo_path(relative))
        .unwrap_or_else(|error| panic!("{relative}: {error}"));
    serde_saphyr::from_str(&text).unwrap_or_else(|error| panic!("{relative}: {error}"))
}

/// Every metric name the controller and the sidecar export, as Prometheus sees them.
fn exported_metrics() -> BTreeSet<String> {
    let mut names = shoal_controller::metrics::Metrics::exported_names();
    let sidecar = shoal_worker::metrics::Metrics::default()
        .render()
        .expect("the sidecar's metrics render");
    names.extend(shoal_controller::metrics::exported_names(&sidecar));
    names
}

/// The Shoal metric names a PromQL expression uses: identifiers starting with `shoal_`,
/// outside quoted label values.
fn shoal_metrics_in(expr: &str) -> Vec<String> {
    let mut unquoted = String::new();
    let mut quote = None;
    for c in expr.chars() {
        match quote {
            Some(open) if c == open => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' || c == '`' => quote = Some(c),
            None => unquoted.push(c),
        }
    }
    unquoted
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|word| word.starts_with("shoal_"))
        .map(str::to_owned)
        .collect()
}

/// Fails naming `place` when `expr` uses no Shoal metric or one Shoal does not export.
fn assert_uses_exported_metrics(place: &str, expr: &str, exported: &BTreeSet<String>) {
    let used = shoal_metrics_in(expr);
    assert!(!used.is_empty(), "{place}: `{expr}` uses no Shoal metric");
    let unknown: Vec<&String> = used
        .iter()
        .filter(|name| !exported.contains(*name))
        .collect();
    assert!(
        unknown.is_empty(),
        "{place}: `{expr}` names metrics Shoal does not export: {unknown:?}"
    );
}

#[test]
fn the_metric_name_check_sees_names_and_ignores_label_values() {
    assert_eq!(
        shoal_metrics_in(r#"sum by (kind) (rate(shoal_api_writes_total{kind="shoal_x"}[5m]))"#),
        ["shoal_api_writes_total"]
    );
    let exported = exported_metrics();
    assert!(exported.contains("shoal_worker_fenced"));
    assert!(exported.contains("shoal_leader"));
    assert!(!exported.contains("shoal_no_such_metric_total"));
}

#[test]
fn every_alert_names_only_exported_metrics_and_the_alerts_that_matter_exist() {
    let rule = read_yaml("manifests/monitoring/alerts.yaml");
    assert_eq!(rule["kind"], "PrometheusRule");
    let exported = exported_metrics();
    let mut alerts = BTreeSet::new();
    for group in rule["spec"]["groups"].as_array().expect("spec.groups") {
        for entry in group["rules"].as_array().expect("rules") {
            let alert = entry["alert"].as_str().expect("every rule is an alert");
            let expr = entry["expr"].as_str().expect("expr");
            assert_uses_exported_metrics(alert, expr, &exported);
            assert!(
                entry["labels"]["severity"].is_string(),
                "{alert} has no severity"
            );
            for annotation in ["summary", "description"] {
                assert!(
                    entry["annotations"][annotation].is_string(),
                    "{alert} has no {annotation}"
                );
            }
            assert!(alerts.insert(alert.to_owned()), "{alert} twice");
        }
    }
    for wanted in [
        "ShoalRevisionStuck",
        "ShoalApprovalWaiting",
        "ShoalMemberNotAcknowledging",
        "ShoalMemberFenced",
        "ShoalControllerNoLeader",
        "ShoalPlanOperationWaiting",
        "ShoalPlanProgressingTooLong",
        "ShoalPlanDegraded",
        "ShoalPlanRolloutHalted",
        "ShoalPlanInstancesFailed",
    ] {
        assert!(alerts.contains(wanted), "no {wanted} among {alerts:?}");
    }
}

#[test]
fn promtool_accepts_the_alerting_rules() {
    let installed = shoal_sandbox::installed("promtool");
    if !installed {
        println!("promtool is not on PATH (Debian: apt-get install prometheus); skipped it");
        return;
    }
    let rule = read_yaml("manifests/monitoring/alerts.yaml");
    let dir = tempfile::tempdir().expect("a temporary directory");
    // promtool reads plain rule files: the PrometheusRule's spec. JSON is YAML.
    let file = dir.path().join("shoal-rules.yaml");
    std::fs::write(&file, rule["spec"].to_string()).expect("write the rules");
    let checked = std::process::Command::new("promtool")
        .arg("check")
        .arg("rules")
        .arg(&file)
        .output()
        .expect("promtool runs");
    assert!(
        checked.status.success(),
        "promtool check rules:\n{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}

/// What `curl <pod>:9464/metrics | promtool check metrics` sees: the Prometheus text
/// format, every family with HELP and TYPE, for the sidecar as for the controller.
#[test]
fn promtool_accepts_both_binaries_metrics_as_a_plain_scrape_gets_them() {
    use shoal_core::exposition::{Format, render, undeclared};
    let sidecar = shoal_worker::metrics::Metrics::default()
        .render()
        .expect("the sidecar's metrics render");
    let controller = shoal_controller::metrics::Metrics::with_every_family().encode();
    let installed = shoal_sandbox::installed("promtool");
    for (binary, openmetrics) in [("shoal-worker", sidecar), ("shoal-controller", controller)] {
        let text = render(&openmetrics, Format::Prometheus);
        assert_eq!(
            undeclared(&text, Format::Prometheus),
            Vec::<String>::new(),
            "{binary}:\n{text}"
        );
        if !installed {
            continue;
        }
        let mut check = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("promtool runs");
        std::io::Write::write_all(&mut check.stdin.take().expect("stdin"), text.as_bytes())
            .expect("feeds promtool");
        let checked = check.wait_with_output().expect("promtool finishes");
        assert!(
            checked.status.success() && checked.stdout.is_empty() && checked.stderr.is_empty(),
            "promtool check metrics on {binary}:\n{}{}\n{text}",
            String::from_utf8_lossy(&checked.stdout),
            String::from_utf8_lossy(&checked.stderr)
        );
    }
    if !installed {
        println!("promtool is not on PATH (Debian: apt-get install prometheus); skipped it");
    }
}

#[test]
fn every_dashboard_panel_and_variable_names_only_exported_metrics() {
    let text = std::fs::read_to_string(repo_path("manifests/monitoring/dashboard.json"))
        .expect("the dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let exported = exported_metrics();
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 8, "{} panels", panels.len());
    let mut used = BTreeSet::new();
    for panel in panels {
        let title = panel["title"].as_str().expect("every panel has a title");
        if panel["type"] == "row" {
            // A row only groups the panels below it.
            continue;
        }
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {title} queries nothing");
        for target in targets {
            let expr = target["expr"].as_str().expect("expr");
            assert_uses_exported_metrics(&format!("panel {title}"), expr, &exported);
            used.extend(shoal_metrics_in(expr));
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
    {
        if let Some(query) = variable["definition"].as_str() {
            assert_uses_exported_metrics("a dashboard variable", query, &exported);
        }
    }
    // Both sides are on the dashboard: the controller and the sidecars.
    assert!(used.contains("shoal_leader") && used.contains("shoal_worker_fenced"));
    // DeploymentPlans have a row of their own, showing every plan metric.
    assert!(
        panels
            .iter()
            .any(|panel| panel["type"] == "row" && panel["title"] == "DeploymentPlans"),
        "no DeploymentPlans row"
    );
    for plan_metric in [
        "shoal_plan_phase",
        "shoal_plan_rollout_phase",
        "shoal_plan_operations",
        "shoal_plan_oldest_pending_operation_seconds",
        "shoal_plan_instances",
    ] {
        assert!(used.contains(plan_metric), "no panel shows {plan_metric}");
    }
}

/// Every alert's `runbook` annotation names a file of the repository and a heading in
/// it (mdbook's anchor: the heading lowercased); every DeploymentPlan alert has one, and
/// its runbook's commands take the alert's namespace.
#[test]
fn every_runbook_an_alert_names_exists_and_every_plan_alert_has_one() {
    let rule = read_yaml("manifests/monitoring/alerts.yaml");
    let mut plan_alerts = 0;
    for group in rule["spec"]["groups"].as_array().expect("spec.groups") {
        for entry in group["rules"].as_array().expect("rules") {
            let alert = entry["alert"].as_str().expect("alert");
            let Some(runbook) = entry["annotations"]["runbook"].as_str() else {
                assert_ne!(group["name"], "shoal-plans", "{alert} has no runbook");
                continue;
            };
            let (file, anchor) = runbook
                .split_once('#')
                .unwrap_or_else(|| panic!("{alert}: runbook {runbook} names no heading"));
            let text = std::fs::read_to_string(repo_path(file))
                .unwrap_or_else(|error| panic!("{alert}: runbook {file}: {error}"));
            let section = text
                .split("\n### ")
                .skip(1)
                .find(|section| {
                    section.lines().next().is_some_and(|heading| {
                        heading.trim().to_lowercase().replace(' ', "-") == anchor
                    })
                })
                .unwrap_or_else(|| panic!("{alert}: {file} has no heading #{anchor}"));
            assert!(
                section.contains(alert),
                "{alert}: #{anchor} is about another alert"
            );
            let body = section.split("\n## ").next().unwrap_or(section);
            assert!(
                body.contains("-n $NS"),
                "{alert}: the runbook's commands do not take the alert's namespace"
            );
            if group["name"] == "shoal-plans" {
                plan_alerts += 1;
                assert!(
                    entry["expr"]
                        .as_str()
                        .is_some_and(|expr| expr.contains("(namespace, plan)")),
                    "{alert} does not keep the namespace and plan labels its runbook uses"
                );
            }
        }
    }
    assert!(plan_alerts >= 5, "{plan_alerts} plan alerts");
}

/// The ServiceMonitor scrapes a port the controller's Service has; the PodMonitor a port
/// the example's sidecar container declares, at the sidecar's default metrics address.
#[test]
fn the_monitors_scrape_ports_that_exist() {
    let monitor = read_yaml("manifests/monitoring/servicemonitor.yaml");
    let port = monitor["spec"]["endpoints"][0]["port"]
        .as_str()
        .expect("port");
    let controller = std::fs::read_to_string(repo_path("manifests/controller/controller.yaml"))
        .expect("controller.yaml");
    let service: Value = controller
        .split("\n---\n")
        .map(|document| serde_saphyr::from_str::<Value>(document).expect("YAML"))
        .find(|document| document["kind"] == "Service")
        .expect("the metrics Service");
    assert!(
        service["spec"]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .any(|declared| declared["name"] == port),
        "the Service has no port {port}"
    );

    let monitor = read_yaml("manifests/monitoring/podmonitor.yaml");
    let port = monitor["spec"]["podMetricsEndpoints"][0]["port"]
        .as_str()
        .expect("port");
    let example = std::fs::read_to_string(repo_path("manifests/example/statefulset.yaml"))
        .expect("statefulset.yaml");
    let pool: Value = example
        .split("\n---\n")
        .map(|document| serde_saphyr::from_str::<Value>(document).expect("YAML"))
        .find(|document| document["kind"] == "StatefulSet")
        .expect("the example StatefulSet");
    let template = &pool["spec"]["template"];
    let label = monitor["spec"]["selector"]["matchExpressions"][0]["key"]
        .as_str()
        .expect("the selected label");
    assert!(
        template["metadata"]["labels"][label].is_string(),
        "the example's pods lack {label}, which the PodMonitor selects"
    );
    let sidecar = template["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .find(|container| container["name"] == "shoal-worker")
        .expect("the sidecar");
    let declared = sidecar["ports"]
        .as_array()
        .expect("the sidecar declares ports")
        .iter()
        .find(|declared| declared["name"] == port)
        .unwrap_or_else(|| panic!("the sidecar has no port {port}"));
    let defaults = <shoal_worker::Settings as clap::Parser>::try_parse_from([
        "shoal-worker",
        "--pod-name=p-0",
        "--pod-namespace=ns",
    ])
    .expect("defaults parse");
    let default_port = defaults.metrics_address.expect("a metrics address").port();
    assert_eq!(declared["containerPort"], u64::from(default_port));
}

/// The controller labels its per-Swarm and per-plan series with the object's namespace;
/// without `honorLabels` Prometheus replaces that label with the scraped target's
/// (`shoal-system`), and every filter, alert text and runbook command names the wrong one.
#[test]
fn both_monitors_keep_the_namespace_label_shoal_sets() {
    for (file, endpoints) in [
        ("manifests/monitoring/servicemonitor.yaml", "endpoints"),
        (
            "manifests/monitoring/podmonitor.yaml",
            "podMetricsEndpoints",
        ),
    ] {
        let monitor = read_yaml(file);
        let endpoints = monitor["spec"][endpoints]
            .as_array()
            .unwrap_or_else(|| panic!("{file} has no {endpoints}"));
        assert!(!endpoints.is_empty(), "{file} scrapes nothing");
        for endpoint in endpoints {
            assert_eq!(
                endpoint["honorLabels"],
                Value::Bool(true),
                "{file}: endpoint {} lacks honorLabels: true",
                endpoint["port"]
            );
        }
    }
}

#[test]
fn the_monitoring_directory_renders_with_kubectl_kustomize() {
    let kubectl = std::env::var("SHOAL_KUBECTL").unwrap_or_else(|_| "kubectl".to_owned());
    let rendered = std::process::Command::new(kubectl)
        .args(["kustomize", "manifests/monitoring"])
        .current_dir(repo_path(""))
        .output()
        .expect("kubectl runs");
    assert!(
        rendered.status.success(),
        "{}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    let text = String::from_utf8_lossy(&rendered.stdout);
    for kind in [
        "kind: ServiceMonitor",
        "kind: PodMonitor",
        "kind: PrometheusRule",
        "name: shoal-grafana-dashboard",
        "grafana_dashboard: \"1\"",
    ] {
        assert!(text.contains(kind), "the render lacks {kind}:\n{text}");
    }
}
