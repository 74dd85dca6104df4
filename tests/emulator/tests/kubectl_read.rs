//! kubectl conformance, part 2: reading. `get` as a table, `-o yaml`,
//! `-o json`, `-o jsonpath`, `-o wide`; `describe` of a pod, a configmap, a
//! statefulset and a custom resource; a CRD's printer columns; `get -w` with
//! `--request-timeout`. Runs on the emulator and on a real cluster.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use shoal_emulator::harness::fixtures::{statefulset, wait_for_ready_pods};
use shoal_emulator::harness::{Check, TestCluster};

const TIMEOUT: Duration = Duration::from_secs(60);

async fn cluster() -> TestCluster {
    TestCluster::start().await.expect("a test cluster")
}

async fn kubectl_ok(cluster: &TestCluster, args: &[&str]) -> String {
    cluster
        .kubectl(args)
        .await
        .expect("kubectl runs")
        .ok()
        .unwrap_or_else(|error| panic!("kubectl {args:?}: {error}"))
        .stdout
}

async fn config_map(cluster: &TestCluster, name: &str, data: Value) -> ConfigMap {
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client(), cluster.namespace());
    let object: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "tier": "back" } },
        "data": data,
    }))
    .expect("configmap literal");
    maps.create(&PostParams::default(), &object)
        .await
        .expect("create configmap")
}

/// The line of a table whose first column is `name`, split into cells.
fn row<'a>(table: &'a str, name: &str) -> Vec<&'a str> {
    table
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&name))
        .unwrap_or_else(|| panic!("no row {name} in:\n{table}"))
}

fn header(table: &str) -> Vec<&str> {
    table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect()
}

/// The value after `key:` on the first line that starts (after
/// indentation) with it.
fn field<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .map(str::trim_start)
        .find_map(|line| line.strip_prefix(key))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {key} in:\n{text}"))
}

#[tokio::test]
async fn get_prints_yaml_json_and_jsonpath_of_what_the_cluster_holds() {
    let cluster = cluster().await;
    let created = config_map(&cluster, "settings", json!({ "a": "1", "b": "two" })).await;

    let yaml: Value = serde_saphyr::from_str(
        &kubectl_ok(&cluster, &["get", "configmap", "settings", "-o", "yaml"]).await,
    )
    .expect("kubectl prints YAML");
    assert_eq!(yaml["kind"], "ConfigMap");
    assert_eq!(yaml["apiVersion"], "v1");
    assert_eq!(yaml["metadata"]["name"], "settings");
    assert_eq!(yaml["metadata"]["namespace"], cluster.namespace());
    assert_eq!(yaml["metadata"]["uid"].as_str(), created.uid().as_deref());
    assert_eq!(yaml["data"], json!({ "a": "1", "b": "two" }));

    let as_json: Value = serde_json::from_str(
        &kubectl_ok(&cluster, &["get", "configmap", "settings", "-o", "json"]).await,
    )
    .expect("kubectl prints JSON");
    assert_eq!(as_json["metadata"]["uid"], yaml["metadata"]["uid"]);
    assert_eq!(
        as_json["metadata"]["resourceVersion"].as_str(),
        created.resource_version().as_deref()
    );
    assert_eq!(as_json["data"], yaml["data"]);

    let path = kubectl_ok(
        &cluster,
        &["get", "configmap", "settings", "-o", "jsonpath={.data.b}"],
    )
    .await;
    assert_eq!(path, "two");

    config_map(&cluster, "other", json!({ "c": "3" })).await;
    let names = kubectl_ok(
        &cluster,
        &[
            "get",
            "configmaps",
            "-l",
            "tier=back",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}{\" \"}{end}",
        ],
    )
    .await;
    assert_eq!(names.trim(), "other settings");

    let table = kubectl_ok(&cluster, &["get", "configmaps", "-l", "tier=back"]).await;
    assert_eq!(header(&table), vec!["NAME", "DATA", "AGE"]);
    assert_eq!(row(&table, "settings")[1], "2");
    assert_eq!(row(&table, "other")[1], "1");
    cluster.cleanup().await;
}

#[tokio::test]
async fn get_and_describe_show_a_statefulset_and_its_pods() {
    let cluster = cluster().await;
    let manifest = json!({ "apiVersion": "apps/v1", "kind": "StatefulSet" });
    let mut set = serde_json::to_value(statefulset("web", 2)).expect("json");
    set["apiVersion"] = manifest["apiVersion"].clone();
    set["kind"] = manifest["kind"].clone();
    cluster
        .kubectl_with_stdin(&["apply", "-f", "-"], Some(&set.to_string()))
        .await
        .expect("kubectl")
        .ok()
        .expect("apply");
    let pods = wait_for_ready_pods(&cluster.client(), cluster.namespace(), "web", 2, TIMEOUT)
        .await
        .expect("two ready pods");
    // Status catches up with the pods on the controller's next pass.
    cluster
        .wait_for("READY 2/2", TIMEOUT, || async {
            match cluster.kubectl(&["get", "statefulset", "web"]).await {
                Ok(output) if output.stdout.contains("2/2") => Check::Done(()),
                Ok(output) => Check::Pending(format!("{}{}", output.stdout, output.stderr)),
                Err(error) => Check::Pending(error.to_string()),
            }
        })
        .await
        .expect("the set reports two ready");

    let wide = kubectl_ok(&cluster, &["get", "statefulset", "web", "-o", "wide"]).await;
    assert_eq!(
        header(&wide),
        vec!["NAME", "READY", "AGE", "CONTAINERS", "IMAGES"]
    );
    let cells = row(&wide, "web");
    assert_eq!(cells[1], "2/2");
    assert_eq!(cells[3], "app");
    assert_eq!(cells[4], shoal_emulator::harness::fixtures::PAUSE_IMAGE);

    let pod_table = kubectl_ok(&cluster, &["get", "pods"]).await;
    assert_eq!(
        header(&pod_table),
        vec!["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    );
    for name in ["web-0", "web-1"] {
        let cells = row(&pod_table, name);
        assert_eq!(cells[1..4], ["1/1", "Running", "0"], "{pod_table}");
    }

    let set_text = kubectl_ok(&cluster, &["describe", "statefulset", "web"]).await;
    assert_eq!(field(&set_text, "Name:"), "web");
    assert_eq!(field(&set_text, "Namespace:"), cluster.namespace());
    assert_eq!(field(&set_text, "Selector:"), "app=web");
    assert_eq!(field(&set_text, "Replicas:"), "2 desired | 2 total");
    assert_eq!(field(&set_text, "Update Strategy:"), "RollingUpdate");
    assert!(
        field(&set_text, "Pods Status:").starts_with("2 Running / 0 Waiting"),
        "{set_text}"
    );
    assert!(set_text.contains(shoal_emulator::harness::fixtures::PAUSE_IMAGE));

    let pod_text = kubectl_ok(&cluster, &["describe", "pod", "web-0"]).await;
    assert_eq!(field(&pod_text, "Name:"), "web-0");
    assert_eq!(field(&pod_text, "Status:"), "Running");
    assert_eq!(field(&pod_text, "Controlled By:"), "StatefulSet/web");
    let ip = pods[&0]
        .status
        .as_ref()
        .and_then(|status| status.pod_ip.clone())
        .expect("pod IP");
    assert_eq!(field(&pod_text, "IP:"), ip);
    assert!(
        pod_text.contains("statefulset.kubernetes.io/pod-name=web-0"),
        "{pod_text}"
    );
    let ready_condition = pod_text
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&"Ready") && cells.len() == 2)
        .unwrap_or_else(|| panic!("no Ready condition row in:\n{pod_text}"));
    assert_eq!(ready_condition[1], "True");
    cluster.cleanup().await;
}

#[tokio::test]
async fn describe_shows_a_configmaps_data() {
    let cluster = cluster().await;
    config_map(&cluster, "settings", json!({ "greeting": "hello world" })).await;
    let text = kubectl_ok(&cluster, &["describe", "configmap", "settings"]).await;
    assert_eq!(field(&text, "Name:"), "settings");
    assert_eq!(field(&text, "Labels:"), "tier=back");
    let lines: Vec<&str> = text.lines().collect();
    let key = lines
        .iter()
        .position(|line| *line == "greeting:")
        .unwrap_or_else(|| panic!("no key line in:\n{text}"));
    assert!(lines[key + 1].starts_with("----"), "{text}");
    assert_eq!(lines[key + 2], "hello world");
    cluster.cleanup().await;
}

fn gizmo_crd(group: &str) -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "metadata": { "name": format!("gizmos.{group}") },
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": { "plural": "gizmos", "singular": "gizmo", "kind": "Gizmo" },
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": { "status": {} },
                "additionalPrinterColumns": [
                    { "name": "Size", "type": "integer", "jsonPath": ".spec.size" },
                    { "name": "Phase", "type": "string", "jsonPath": ".status.phase" },
                    { "name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp" },
                ],
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": { "type": "object", "required": ["size"], "properties": {
                            "size": { "type": "integer", "description": "How big the gizmo is." },
                            "color": { "type": "string" }
                        } },
                        "status": { "type": "object", "properties": {
                            "phase": { "type": "string" }
                        } }
                    }
                } }
            }]
        }
    }))
    .expect("crd literal")
}

/// Installs the Gizmo CRD under a group unique to this test (CRDs are
/// cluster-wide, so a real cluster must not see two tests share one) and
/// waits until kubectl can use it. Returns the group.
async fn install_gizmos(cluster: &TestCluster) -> (String, Api<DynamicObject>) {
    let group = format!("{}.shoal.test", cluster.namespace());
    // Established is not enough: kubectl reads discovery and the OpenAPI schema.
    shoal_emulator::harness::install_crd(&cluster.client(), &gizmo_crd(&group))
        .await
        .expect("the gizmo CRD is served");
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(&group, "v1", "Gizmo"), "gizmos");
    let api = Api::namespaced_with(cluster.client(), cluster.namespace(), &resource);
    (group, api)
}

async fn remove_gizmos(cluster: &TestCluster, group: &str) {
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client());
    crds.delete(&format!("gizmos.{group}"), &DeleteParams::default())
        .await
        .expect("delete crd");
}

#[tokio::test]
async fn get_shows_a_crds_printer_columns_and_describe_its_spec() {
    let cluster = cluster().await;
    let (group, gizmos) = install_gizmos(&cluster).await;
    let resource = format!("gizmos.{group}");
    let manifest = json!({
        "apiVersion": format!("{group}/v1"), "kind": "Gizmo",
        "metadata": { "name": "big" },
        "spec": { "size": 7, "color": "blue" },
    });
    cluster
        .kubectl_with_stdin(&["apply", "-f", "-"], Some(&manifest.to_string()))
        .await
        .expect("kubectl")
        .ok()
        .expect("apply a custom resource");
    gizmos
        .patch_status(
            "big",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "phase": "Polished" } })),
        )
        .await
        .expect("status");

    let table = kubectl_ok(&cluster, &["get", &resource]).await;
    assert_eq!(header(&table), vec!["NAME", "SIZE", "PHASE", "AGE"]);
    let cells = row(&table, "big");
    assert_eq!(cells[1..3], ["7", "Polished"], "{table}");

    let text = kubectl_ok(&cluster, &["describe", &resource, "big"]).await;
    assert_eq!(field(&text, "Name:"), "big");
    assert_eq!(field(&text, "Kind:"), "Gizmo");
    assert_eq!(field(&text, "API Version:"), format!("{group}/v1"));
    assert_eq!(field(&text, "Size:"), "7");
    assert_eq!(field(&text, "Color:"), "blue");
    assert_eq!(field(&text, "Phase:"), "Polished");

    let refused = cluster
        .kubectl_with_stdin(
            &["apply", "-f", "-"],
            Some(
                &json!({
                    "apiVersion": format!("{group}/v1"), "kind": "Gizmo",
                    "metadata": { "name": "bad" },
                    "spec": { "size": "huge" },
                })
                .to_string(),
            ),
        )
        .await
        .expect("kubectl");
    assert!(!refused.success(), "a schema violation is refused");
    assert!(refused.stderr.contains("spec.size"), "{}", refused.stderr);
    assert!(gizmos.get_opt("bad").await.expect("get").is_none());
    remove_gizmos(&cluster, &group).await;
    cluster.cleanup().await;
}

#[tokio::test]
async fn explain_describes_a_custom_resources_fields_from_its_crd_schema() {
    let cluster = cluster().await;
    let (group, _gizmos) = install_gizmos(&cluster).await;
    let api_version = format!("--api-version={group}/v1");

    let top = kubectl_ok(&cluster, &["explain", "gizmo", &api_version]).await;
    assert!(top.contains("KIND:       Gizmo"), "{top}");
    for field in ["apiVersion", "kind", "metadata", "spec", "status"] {
        assert!(
            top.lines().any(|line| line.trim_start().starts_with(field)),
            "{field} missing from:\n{top}"
        );
    }
    let spec = kubectl_ok(&cluster, &["explain", "gizmo.spec", &api_version]).await;
    let size = spec
        .lines()
        .find(|line| line.trim_start().starts_with("size"))
        .unwrap_or_else(|| panic!("no size field in:\n{spec}"));
    assert!(size.contains("<integer>"), "{size}");
    assert!(size.contains("-required-"), "{size}");
    assert!(spec.contains("How big the gizmo is."), "{spec}");
    let missing = cluster
        .kubectl(&["explain", "gizmo.spec.weight", &api_version])
        .await
        .expect("kubectl");
    assert!(!missing.success(), "an unknown field is refused");
    assert!(missing.stderr.contains("weight"), "{}", missing.stderr);
    remove_gizmos(&cluster, &group).await;
    cluster.cleanup().await;
}

#[tokio::test]
async fn get_watch_prints_changes_until_its_request_timeout() {
    let cluster = cluster().await;
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client(), cluster.namespace());
    config_map(&cluster, "watched", json!({ "value": "v0" })).await;
    let finished = Arc::new(AtomicBool::new(false));
    let watching = async {
        let output = cluster
            .kubectl(&[
                "get",
                "configmap",
                "watched",
                "-w",
                "--request-timeout=4s",
                "-o",
                "jsonpath={.data.value}{\"\\n\"}",
            ])
            .await;
        finished.store(true, Ordering::SeqCst);
        output
    };
    // kubectl's start is not observable from here, so change the object
    // until kubectl is done: whatever it prints after the first line it saw
    // through its watch.
    let changing = async {
        let mut written = Vec::new();
        let mut round = 1;
        while !finished.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let value = format!("v{round}");
            maps.patch(
                "watched",
                &PatchParams::default(),
                &Patch::Merge(json!({ "data": { "value": value } })),
            )
            .await
            .expect("change");
            written.push(value);
            round += 1;
        }
        written
    };
    let (output, written) = tokio::join!(watching, changing);
    let output = output.expect("kubectl runs");
    assert!(
        output.success(),
        "the request timeout ends the watch cleanly: {output:?}"
    );
    let printed: Vec<&str> = output.stdout.lines().collect();
    assert!(
        printed.len() >= 2,
        "kubectl printed the object and at least one change: {printed:?}"
    );
    let all: Vec<String> = std::iter::once("v0".to_owned())
        .chain(written.iter().cloned())
        .collect();
    let positions: Vec<usize> = printed
        .iter()
        .map(|value| {
            all.iter()
                .position(|known| known == value)
                .unwrap_or_else(|| panic!("{value} was never written: {printed:?}"))
        })
        .collect();
    assert!(
        positions.windows(2).all(|pair| pair[1] == pair[0] + 1),
        "the watch prints every change in order after the first: {printed:?}"
    );
    cluster.cleanup().await;
}
