//! Custom resources served from their CRD (discovery, status and scale
//! subresources, schema validation, printer columns as a Table), built-in
//! scale subresource, and the Table output kubectl asks for.
//!
//! Emulator-only: each test starts its own `ApiServer` and creates and deletes
//! cluster-wide CRDs in it, which a shared real cluster must not be put through.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};
use shoal_emulator::ApiServer;

fn widget_crd(scope: &str) -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": scope,
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"}},
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "required": ["size"], "properties": {
                            "size": {"type": "integer", "minimum": 0},
                            "color": {"type": "string", "enum": ["red", "blue"]},
                            "tags": {"type": "array", "items": {"type": "string"}},
                            "labels": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name", "protocol"],
                                      "items": {"type": "object", "required": ["name"], "properties": {
                                          "name": {"type": "string"}, "protocol": {"type": "string"}, "port": {"type": "integer"}}}}
                        }},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                    }
                }}
            }]
        }
    }))
    .expect("crd")
}

fn widget_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    )
}

async fn with_crd(scope: &str) -> (ApiServer, kube::Client) {
    let server = ApiServer::start().await.expect("server starts");
    let mut config = server.config().await.expect("config");
    config.default_retry = false;
    let client = kube::Client::try_from(config).expect("client");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let created = crds
        .create(&PostParams::default(), &widget_crd(scope))
        .await
        .expect("crd");
    assert_eq!(
        created.metadata.name.as_deref(),
        Some("widgets.example.com")
    );
    (server, client)
}

fn widget(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec
    }))
    .expect("widget")
}

#[tokio::test]
async fn a_crd_becomes_established_and_discoverable() {
    let (_server, client) = with_crd("Namespaced").await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds.get("widgets.example.com").await.expect("get");
    let conditions = crd
        .status
        .and_then(|status| status.conditions)
        .unwrap_or_default();
    assert!(
        conditions
            .iter()
            .any(|condition| condition.type_ == "Established" && condition.status == "True")
    );
    let discovery = kube::discovery::Discovery::new(client)
        .run()
        .await
        .expect("discovery");
    let group = discovery.get("example.com").expect("group discovered");
    let (resource, capabilities) = group.recommended_kind("Widget").expect("kind");
    assert_eq!(resource.plural, "widgets");
    let mut subresources: Vec<String> = capabilities
        .subresources
        .iter()
        .map(|(sub, _)| sub.plural.clone())
        .collect();
    subresources.sort();
    assert_eq!(subresources, vec!["scale", "status"]);
}

#[tokio::test]
async fn custom_resources_are_created_read_and_listed() {
    let (_server, client) = with_crd("Namespaced").await;
    let widgets: Api<DynamicObject> = Api::namespaced_with(client, "default", &widget_resource());
    let created = widgets
        .create(&PostParams::default(), &widget("w", json!({"size": 2})))
        .await
        .expect("create");
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(widgets.get("w").await.expect("get").data["spec"]["size"], 2);
    assert_eq!(
        widgets
            .list(&Default::default())
            .await
            .expect("list")
            .items
            .len(),
        1
    );
}

#[tokio::test]
async fn schema_violations_are_422_with_field_paths() {
    let (_server, client) = with_crd("Namespaced").await;
    let widgets: Api<DynamicObject> = Api::namespaced_with(client, "default", &widget_resource());
    let result = widgets
        .create(
            &PostParams::default(),
            &widget("bad", json!({"size": "two", "color": "green"})),
        )
        .await;
    let Err(kube::Error::Api(status)) = result else {
        panic!("expected 422, got {result:?}");
    };
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    let mut fields: Vec<String> = status
        .details
        .as_ref()
        .map(|details| {
            details
                .causes
                .iter()
                .map(|cause| cause.field.clone())
                .collect()
        })
        .unwrap_or_default();
    fields.sort();
    assert_eq!(fields, vec!["spec.color", "spec.size"]);
    assert!(
        status
            .message
            .contains("spec.size in body must be of type integer"),
        "{}",
        status.message
    );
    let missing = widgets
        .create(
            &PostParams::default(),
            &widget("bad", json!({"color": "red"})),
        )
        .await;
    let Err(kube::Error::Api(status)) = missing else {
        panic!("expected 422, got {missing:?}");
    };
    assert_eq!(
        status.message,
        "Widget.example.com \"bad\" is invalid: spec.size: Required value"
    );
    let negative = widgets
        .create(&PostParams::default(), &widget("bad", json!({"size": -1})))
        .await;
    assert!(
        matches!(negative, Err(kube::Error::Api(ref status)) if status.code == 422),
        "{negative:?}"
    );
}

#[tokio::test]
async fn a_repeated_key_of_a_map_list_is_422_naming_the_repeat_and_its_keys() {
    let (_server, client) = with_crd("Namespaced").await;
    let widgets: Api<DynamicObject> = Api::namespaced_with(client, "default", &widget_resource());
    let result = widgets
        .create(
            &PostParams::default(),
            &widget(
                "w",
                json!({"size": 1, "ports": [
                    {"name": "web", "protocol": "TCP", "port": 80},
                    {"name": "web", "protocol": "UDP", "port": 80},
                    {"name": "web", "protocol": "TCP", "port": 81}
                ]}),
            ),
        )
        .await;
    let Err(kube::Error::Api(status)) = result else {
        panic!("expected 422, got {result:?}");
    };
    assert_eq!(status.code, 422);
    // As kube-apiserver words it: the key fields of the repeat, as a Go map.
    assert!(
        status.message.contains(
            "spec.ports[2]: Duplicate value: map[string]interface {}{\"name\":\"web\", \"protocol\":\"TCP\"}"
        ),
        "{}",
        status.message
    );
    assert!(
        !status.message.contains("spec.ports[1]"),
        "{}",
        status.message
    );
    // Items that differ in any key field are distinct.
    widgets
        .create(
            &PostParams::default(),
            &widget(
                "w",
                json!({"size": 1, "ports": [
                    {"name": "web", "protocol": "TCP", "port": 80},
                    {"name": "web", "protocol": "UDP", "port": 80}
                ]}),
            ),
        )
        .await
        .expect("distinct keys are accepted");
}

#[tokio::test]
async fn a_repeated_item_of_a_set_list_is_422_naming_each_repeat() {
    let (_server, client) = with_crd("Namespaced").await;
    let widgets: Api<DynamicObject> = Api::namespaced_with(client, "default", &widget_resource());
    let result = widgets
        .create(
            &PostParams::default(),
            &widget("w", json!({"size": 1, "labels": ["a", "b", "a", "b"]})),
        )
        .await;
    let Err(kube::Error::Api(status)) = result else {
        panic!("expected 422, got {result:?}");
    };
    assert_eq!(status.code, 422);
    for repeat in [
        "spec.labels[2]: Duplicate value: \"a\"",
        "spec.labels[3]: Duplicate value: \"b\"",
    ] {
        assert!(status.message.contains(repeat), "{}", status.message);
    }
    // A list without `x-kubernetes-list-type: set` may repeat items.
    widgets
        .create(
            &PostParams::default(),
            &widget(
                "w",
                json!({"size": 1, "tags": ["a", "a"], "labels": ["a", "b"]}),
            ),
        )
        .await
        .expect("repeats in an ordinary list and none in a set are accepted");
}

#[tokio::test]
async fn unknown_fields_are_pruned_or_rejected_under_strict_validation() {
    let (_server, client) = with_crd("Namespaced").await;
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &widget_resource());
    let pruned = widgets
        .create(
            &PostParams::default(),
            &widget("loose", json!({"size": 1, "surprise": true})),
        )
        .await
        .expect("create");
    assert!(pruned.data["spec"].get("surprise").is_none());
    let body =
        serde_json::to_vec(&widget("strict", json!({"size": 1, "surprise": true}))).expect("json");
    let result = client
        .request_text(
            http::Request::post(
                "/apis/example.com/v1/namespaces/default/widgets?fieldValidation=Strict",
            )
            .header("content-type", "application/json")
            .body(body)
            .expect("request"),
        )
        .await;
    let Err(kube::Error::Api(status)) = result else {
        panic!("expected 400, got {result:?}");
    };
    assert_eq!(status.code, 400);
    assert!(
        status.message.contains("unknown field \"spec.surprise\""),
        "{}",
        status.message
    );
}

#[tokio::test]
async fn the_status_subresource_separates_status_from_spec_and_generation() {
    let (_server, client) = with_crd("Namespaced").await;
    let widgets: Api<DynamicObject> = Api::namespaced_with(client, "default", &widget_resource());
    let mut with_status = widget("w", json!({"size": 1}));
    with_status.data["status"] = json!({"phase": "ignored on create"});
    let created = widgets
        .create(&PostParams::default(), &with_status)
        .await
        .expect("create");
    assert!(created.data.get("status").is_none());
    let status = widgets
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"size": 1}, "spec": {"size": 9}})),
        )
        .await
        .expect("status");
    assert_eq!(status.data["status"]["size"], 1);
    assert_eq!(
        status.data["spec"]["size"], 1,
        "status writes leave spec alone"
    );
    assert_eq!(
        status.metadata.generation,
        Some(1),
        "status writes do not bump generation"
    );
    let spec = widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 4}, "status": {"size": 0}})),
        )
        .await
        .expect("spec");
    assert_eq!(spec.metadata.generation, Some(2));
    assert_eq!(
        spec.data["status"]["size"], 1,
        "main writes leave status alone"
    );
}

#[tokio::test]
async fn the_scale_subresource_of_a_custom_resource_follows_its_paths() {
    let (_server, client) = with_crd("Namespaced").await;
    let widgets: Api<DynamicObject> = Api::namespaced_with(client, "default", &widget_resource());
    widgets
        .create(&PostParams::default(), &widget("w", json!({"size": 2})))
        .await
        .expect("create");
    let scale = widgets.get_scale("w").await.expect("scale");
    assert_eq!(scale.spec.and_then(|spec| spec.replicas), Some(2));
    widgets
        .patch_scale(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .expect("patch scale");
    assert_eq!(widgets.get("w").await.expect("get").data["spec"]["size"], 5);
}

#[tokio::test]
async fn a_cluster_scoped_crd_serves_objects_without_a_namespace() {
    let (_server, client) = with_crd("Cluster").await;
    let widgets: Api<DynamicObject> = Api::all_with(client, &widget_resource());
    let created = widgets
        .create(
            &PostParams::default(),
            &widget("global", json!({"size": 1})),
        )
        .await
        .expect("create");
    assert!(created.metadata.namespace.is_none());
    assert_eq!(
        widgets.get("global").await.expect("get").data["spec"]["size"],
        1
    );
}

#[tokio::test]
async fn deleting_a_crd_deletes_its_objects_and_stops_serving_them() {
    let (_server, client) = with_crd("Namespaced").await;
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &widget_resource());
    widgets
        .create(&PostParams::default(), &widget("w", json!({"size": 1})))
        .await
        .expect("create");
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .expect("delete crd");
    assert!(
        crds.get_opt("widgets.example.com")
            .await
            .expect("get")
            .is_none()
    );
    let result = widgets.get("w").await;
    assert!(
        matches!(result, Err(kube::Error::Api(ref status)) if status.code == 404),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_strategic_merge_patch_on_a_custom_resource_is_415() {
    let (_server, client) = with_crd("Namespaced").await;
    let widgets: Api<DynamicObject> = Api::namespaced_with(client, "default", &widget_resource());
    widgets
        .create(&PostParams::default(), &widget("w", json!({"size": 1})))
        .await
        .expect("create");
    let result = widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"size": 2}})),
        )
        .await;
    assert!(
        matches!(result, Err(kube::Error::Api(ref status)) if status.code == 415),
        "{result:?}"
    );
}

async fn table(client: &kube::Client, path: &str) -> Value {
    let text = client
        .request_text(
            http::Request::get(path)
                .header(
                    "accept",
                    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
                )
                .body(Vec::new())
                .expect("request"),
        )
        .await
        .expect("table");
    serde_json::from_str(&text).expect("json")
}

fn column_names(table: &Value) -> Vec<String> {
    table["columnDefinitions"]
        .as_array()
        .expect("columns")
        .iter()
        .map(|column| column["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn printer_columns_of_a_crd_render_as_a_table() {
    let (_server, client) = with_crd("Namespaced").await;
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &widget_resource());
    widgets
        .create(&PostParams::default(), &widget("w", json!({"size": 3})))
        .await
        .expect("create");
    widgets
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})),
        )
        .await
        .expect("status");
    let rendered = table(&client, "/apis/example.com/v1/namespaces/default/widgets").await;
    assert_eq!(rendered["kind"], "Table");
    assert_eq!(column_names(&rendered), vec!["Name", "Size", "Ready"]);
    assert_eq!(rendered["rows"][0]["cells"], json!(["w", 3, "True"]));
    assert_eq!(
        rendered["rows"][0]["object"]["kind"],
        "PartialObjectMetadata"
    );
}

#[tokio::test]
async fn built_in_tables_show_the_columns_kubectl_prints() {
    let (_server, client) = with_crd("Namespaced").await;
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "default");
    let map =
        serde_json::from_value(json!({"metadata": {"name": "cm"}, "data": {"a": "1", "b": "2"}}))
            .expect("cm");
    maps.create(&PostParams::default(), &map)
        .await
        .expect("create");
    let rendered = table(&client, "/api/v1/namespaces/default/configmaps/cm").await;
    assert_eq!(column_names(&rendered), vec!["Name", "Data", "Age"]);
    assert_eq!(rendered["rows"][0]["cells"][0], "cm");
    assert_eq!(rendered["rows"][0]["cells"][1], 2);
    let pods = table(&client, "/api/v1/namespaces/default/pods").await;
    assert_eq!(
        column_names(&pods),
        vec!["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node"]
    );
}

#[tokio::test]
async fn kubectl_scale_path_works_on_statefulsets() {
    let (_server, client) = with_crd("Namespaced").await;
    let sets: Api<StatefulSet> = Api::namespaced(client, "default");
    let set: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "serviceName": "web",
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}
    }))
    .expect("sts");
    sets.create(&PostParams::default(), &set)
        .await
        .expect("create");
    let scale = sets.get_scale("web").await.expect("scale");
    assert_eq!(scale.spec.as_ref().and_then(|spec| spec.replicas), Some(2));
    assert_eq!(
        scale
            .status
            .as_ref()
            .and_then(|status| status.selector.clone())
            .as_deref(),
        Some("app=web")
    );
    let mut wanted = scale.clone();
    wanted.spec = Some(k8s_openapi::api::autoscaling::v1::ScaleSpec { replicas: Some(4) });
    sets.replace_scale("web", &PostParams::default(), &wanted)
        .await
        .expect("replace scale");
    let updated = sets.get("web").await.expect("get");
    assert_eq!(updated.spec.and_then(|spec| spec.replicas), Some(4));
    assert_eq!(updated.metadata.generation, Some(2));
    let stale = sets
        .replace_scale("web", &PostParams::default(), &scale)
        .await;
    assert!(
        matches!(stale, Err(kube::Error::Api(ref status)) if status.code == 409),
        "{stale:?}"
    );
}

/// A server publishing new CRDs `delay` after their creation, as a real one does.
async fn with_publication_delay(delay: std::time::Duration) -> (ApiServer, kube::Client) {
    let server = ApiServer::start_with(shoal_emulator::ServerOptions {
        crd_publication_delay: delay,
        ..shoal_emulator::ServerOptions::default()
    })
    .await
    .expect("server starts");
    let client = server.client().await.expect("client");
    (server, client)
}

#[tokio::test]
async fn a_client_that_does_not_wait_for_a_new_crd_gets_not_found_until_it_is_published() {
    let delay = std::time::Duration::from_millis(600);
    let (_server, client) = with_publication_delay(delay).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let created_at = std::time::Instant::now();
    let created = crds
        .create(&PostParams::default(), &widget_crd("Namespaced"))
        .await
        .expect("crd");
    let established = |crd: &CustomResourceDefinition| {
        crd.status
            .iter()
            .flat_map(|status| status.conditions.iter().flatten())
            .any(|condition| condition.type_ == "Established" && condition.status == "True")
    };
    assert!(!established(&created), "{:?}", created.status);
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &widget_resource());
    match widgets
        .create(&PostParams::default(), &widget("early", json!({"size": 1})))
        .await
    {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 404, "{}", status.message),
        other => panic!("a custom resource was written before its CRD was served: {other:?}"),
    }

    shoal_emulator::harness::wait_for_crd(
        &client,
        "widgets.example.com",
        std::time::Duration::from_secs(10),
    )
    .await
    .expect("the CRD is served after the delay");
    assert!(
        created_at.elapsed() >= delay,
        "served after {:?}, before the {delay:?} delay",
        created_at.elapsed()
    );
    assert!(established(
        &crds.get("widgets.example.com").await.expect("get")
    ));
    widgets
        .create(&PostParams::default(), &widget("late", json!({"size": 1})))
        .await
        .expect("once served, custom resources are accepted");
}

#[tokio::test]
async fn install_crd_returns_only_once_the_crd_is_served() {
    let (_server, client) = with_publication_delay(std::time::Duration::from_millis(300)).await;
    shoal_emulator::harness::install_crd(&client, &widget_crd("Namespaced"))
        .await
        .expect("installed");
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &widget_resource());
    widgets
        .create(&PostParams::default(), &widget("first", json!({"size": 2})))
        .await
        .expect("a custom resource right after install_crd is accepted");
    // Installing again (the CRD exists) is not an error.
    shoal_emulator::harness::install_crd(&client, &widget_crd("Namespaced"))
        .await
        .expect("installed again");
}

fn gadget_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "metadata": {"name": "gadgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "x-kubernetes-validations": [
                                {"rule": "self.min <= self.max", "message": "min must not exceed max"},
                                {"rule": "self.max < 100"}
                            ],
                            "properties": {
                                "min": {"type": "integer"},
                                "max": {"type": "integer"},
                                "name": {
                                    "type": "string",
                                    "pattern": "^[a-z]+$",
                                    "x-kubernetes-validations": [
                                        {"rule": "self == oldSelf", "message": "name is immutable"}
                                    ]
                                }
                            }
                        }
                    }
                }}
            }]
        }
    }))
    .expect("crd")
}

async fn with_gadgets() -> (ApiServer, Api<DynamicObject>) {
    let server = ApiServer::start().await.expect("server starts");
    let client = server.client().await.expect("client");
    shoal_emulator::harness::install_crd(&client, &gadget_crd())
        .await
        .expect("crd");
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Gadget"),
        "gadgets",
    );
    (server, Api::namespaced_with(client, "default", &resource))
}

fn gadget(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": name}, "spec": spec
    }))
    .expect("gadget")
}

fn invalid_message<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(status)) => {
            assert_eq!(
                (status.code, status.reason.as_str()),
                (422, "Invalid"),
                "{}",
                status.message
            );
            status.message
        }
        other => panic!("expected 422 Invalid, got {other:?}"),
    }
}

#[tokio::test]
async fn a_failed_validation_rule_is_422_with_its_message_or_the_rule() {
    let (_server, gadgets) = with_gadgets().await;
    let message = invalid_message(
        gadgets
            .create(
                &PostParams::default(),
                &gadget("g", json!({"min": 5, "max": 1})),
            )
            .await,
    );
    assert_eq!(
        message,
        "Gadget.example.com \"g\" is invalid: spec: Invalid value: \"object\": min must not exceed max"
    );
    let message = invalid_message(
        gadgets
            .create(
                &PostParams::default(),
                &gadget("g", json!({"min": 1, "max": 200})),
            )
            .await,
    );
    assert_eq!(
        message,
        "Gadget.example.com \"g\" is invalid: spec: Invalid value: \"object\": failed rule: self.max < 100"
    );
    gadgets
        .create(
            &PostParams::default(),
            &gadget("g", json!({"min": 1, "max": 2, "name": "ok"})),
        )
        .await
        .expect("a gadget keeping every rule is accepted");
}

#[tokio::test]
async fn a_string_not_matching_its_pattern_is_422_naming_the_pattern() {
    let (_server, gadgets) = with_gadgets().await;
    let message = invalid_message(
        gadgets
            .create(
                &PostParams::default(),
                &gadget("g", json!({"min": 1, "max": 2, "name": "Not-Lower"})),
            )
            .await,
    );
    assert_eq!(
        message,
        "Gadget.example.com \"g\" is invalid: spec.name: Invalid value: \"Not-Lower\": spec.name in body should match '^[a-z]+$'"
    );
}

#[tokio::test]
async fn a_transition_rule_compares_with_the_old_value_on_update_only() {
    let (_server, gadgets) = with_gadgets().await;
    gadgets
        .create(
            &PostParams::default(),
            &gadget("g", json!({"min": 1, "max": 2, "name": "first"})),
        )
        .await
        .expect("on create there is no oldSelf, so the transition rule does not apply");
    gadgets
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"max": 3}})),
        )
        .await
        .expect("changing another field keeps the name");
    let message = invalid_message(
        gadgets
            .patch(
                "g",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"name": "second"}})),
            )
            .await,
    );
    assert_eq!(
        message,
        "Gadget.example.com \"g\" is invalid: spec.name: Invalid value: \"string\": name is immutable"
    );
    let stored = gadgets.get("g").await.expect("get");
    assert_eq!(stored.data["spec"]["name"], "first");
}

/// The DeploymentPlan CRD as it was before its schema was bounded (issue 29).
const UNBOUNDED_PLAN_CRD: &str = "tests/fixtures/deploymentplan-crd-unbounded.yaml";

/// What a real kube-apiserver v1.28.7 answers to that CRD, word for word.
const UNBOUNDED_PLAN_REASON: &str = "spec.validation.openAPIV3Schema.properties[status].properties[deployments].items.properties[rollout].x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 1.153434x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)";

#[tokio::test]
async fn a_crd_whose_rule_costs_more_than_a_real_server_allows_is_refused_on_create_and_update_with_the_servers_reason()
 {
    let server = ApiServer::start().await.expect("server starts");
    let client = server.client().await.expect("client");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(UNBOUNDED_PLAN_CRD);
    let text = std::fs::read_to_string(&path).expect("the fixture is readable");
    let fixture: Value = serde_saphyr::from_str(&text).expect("the fixture is YAML");
    let crd: CustomResourceDefinition =
        serde_json::from_value(fixture.clone()).expect("the fixture is a CRD");
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let message = invalid_message(crds.create(&PostParams::default(), &crd).await);
    assert_eq!(
        message,
        format!(
            "CustomResourceDefinition.apiextensions.k8s.io \"deploymentplans.shoal.dev\" is invalid: {UNBOUNDED_PLAN_REASON}"
        )
    );
    // kubectl prints it as it does for a real server.
    let output = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(server.kubeconfig_path())
        .args(["apply", "--dry-run=server", "-f"])
        .arg(&path)
        .output()
        .await
        .expect("kubectl runs");
    assert!(!output.status.success(), "kubectl apply succeeded");
    assert_eq!(
        String::from_utf8_lossy(&output.stderr).trim(),
        format!(
            "The CustomResourceDefinition \"deploymentplans.shoal.dev\" is invalid: {UNBOUNDED_PLAN_REASON}"
        )
    );
    assert!(
        crds.get_opt("deploymentplans.shoal.dev")
            .await
            .expect("get")
            .is_none(),
        "the refused CRD is not stored"
    );
    // Bounded, the list makes the rule cheap enough (11 per item, 100 items);
    // an update taking the bound away again is refused for the same reason.
    let mut bounded = fixture;
    bounded["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
        ["deployments"]["maxItems"] = json!(100);
    let bounded: CustomResourceDefinition = serde_json::from_value(bounded).expect("a CRD");
    let stored = crds
        .create(&PostParams::default(), &bounded)
        .await
        .expect("the bounded CRD is accepted");
    let mut unbounded = crd;
    unbounded.metadata.resource_version = stored.metadata.resource_version;
    let message = invalid_message(
        crds.replace(
            "deploymentplans.shoal.dev",
            &PostParams::default(),
            &unbounded,
        )
        .await,
    );
    assert_eq!(
        message,
        format!(
            "CustomResourceDefinition.apiextensions.k8s.io \"deploymentplans.shoal.dev\" is invalid: {UNBOUNDED_PLAN_REASON}"
        )
    );
}
