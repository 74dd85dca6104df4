//! Writing slice ConfigMaps exactly as the controller does: server-side apply
//! with its field manager, labelled for the member, owned by a Swarm. The
//! sidecar refuses anything else (a hand edit, a ConfigMap no Swarm owns).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, CustomResourceExt, Resource};
use shoal_controller::api::swarm::Swarm;

/// The Swarm `demo` of the namespace as the owner of slices: installs the CRD
/// (waiting until it is served) and creates the Swarm (no controller runs: it is
/// only an owner) on first use.
pub async fn slice_owner(client: &kube::Client, namespace: &str) -> OwnerReference {
    let swarms: Api<Swarm> = Api::namespaced(client.clone(), namespace);
    let owner = |swarm: Swarm| {
        swarm
            .controller_owner_ref(&())
            .expect("a stored Swarm has a name and uid")
    };
    if let Ok(Some(swarm)) = swarms.get_opt("demo").await {
        return owner(swarm);
    }
    // Tests that inject API errors reach this first under the fault: retry (bounded),
    // as any client installing a CRD would.
    let mut installed = Err(String::new());
    for _ in 0..50 {
        installed = shoal_emulator::harness::install_crd(client, &Swarm::crd())
            .await
            .map_err(|error| error.to_string());
        if installed.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    if let Err(error) = installed {
        panic!("installing the Swarm CRD: {error}");
    }
    let swarm: Swarm = serde_json::from_value(serde_json::json!({
        "apiVersion": "shoal.dev/v1alpha1",
        "kind": "Swarm",
        "metadata": {"name": "demo"},
        "spec": {},
    }))
    .expect("a Swarm manifest");
    match swarms.create(&PostParams::default(), &swarm).await {
        Ok(created) => owner(created),
        // Created meanwhile by another writer of the test.
        Err(kube::Error::Api(status)) if status.code == 409 => owner(
            swarms
                .get("demo")
                .await
                .expect("the Swarm that owns the test slices"),
        ),
        Err(error) => panic!("cannot create the Swarm that owns the test slices: {error}"),
    }
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
