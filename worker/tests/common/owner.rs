//! Writing slice ConfigMaps exactly as the controller does: server-side apply
//! with its field manager, labelled for the member, owned by a Swarm. The
//! sidecar refuses anything else (a hand edit, a ConfigMap no Swarm owns).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, CustomResourceExt, Resource};
use shoal_controller::crd::Swarm;

/// The Swarm `demo` of the namespace as the owner of slices: installs the CRD and
/// creates the Swarm (no controller runs: it is only an owner) on first use.
pub async fn slice_owner(client: &kube::Client, namespace: &str) -> OwnerReference {
    let swarms: Api<Swarm> = Api::namespaced(client.clone(), namespace);
    for _ in 0..100 {
        match swarms.get_opt("demo").await {
            Ok(Some(swarm)) => {
                return swarm
                    .controller_owner_ref(&())
                    .expect("a stored Swarm has a name and uid");
            }
            Ok(None) => {
                let swarm: Swarm = serde_json::from_value(serde_json::json!({
                    "apiVersion": "shoal.dev/v1alpha1",
                    "kind": "Swarm",
                    "metadata": {"name": "demo"},
                    "spec": {},
                }))
                .expect("a Swarm manifest");
                if swarms.create(&PostParams::default(), &swarm).await.is_err() {
                    // Not served yet (404): install the CRD and wait for it.
                    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
                    let _ = crds.create(&PostParams::default(), &Swarm::crd()).await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    panic!("cannot create the Swarm that owns the test slices");
}

/// Server-side applies a slice ConfigMap the way the controller does.
pub async fn apply_slice_config_map(
    client: &kube::Client,
    namespace: &str,
    member: &str,
    revision: u64,
    document: String,
) -> Result<(), kube::Error> {
    let owner = slice_owner(client, namespace).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let name = shoal_worker::names::slice_config_map(member);
    let labels = BTreeMap::from([
        ("shoal.dev/swarm".to_string(), "demo".to_string()),
        ("shoal.dev/member".to_string(), member.to_string()),
        ("shoal.dev/revision".to_string(), revision.to_string()),
    ]);
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels, "ownerReferences": [owner]},
        "data": { "slice.yaml": document },
    });
    api.patch(
        &name,
        &PatchParams::apply(shoal_core::names::CONTROLLER_FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map(|_| ())
}
