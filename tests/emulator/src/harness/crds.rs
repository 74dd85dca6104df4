//! Installing a CustomResourceDefinition and waiting until it is served. A real
//! API server establishes a new CRD, then publishes its types in discovery and
//! in the OpenAPI v3 document, each a moment later; a client that writes a
//! custom resource right after the create (or kubectl, which reads discovery and
//! the OpenAPI schema) can get a 404 until then. The emulator does the same with
//! `ServerOptions::crd_publication_delay`.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::Value;

use super::{Check, HarnessError, TestCluster, wait_for};

/// How long [`install_crd`] waits for a CRD to be served.
pub const CRD_PUBLICATION_TIMEOUT: Duration = Duration::from_secs(60);

/// Creates `crd` (an existing one of that name is left as it is) and waits until
/// it is served (see [`wait_for_crd`]).
pub async fn install_crd(
    client: &Client,
    crd: &CustomResourceDefinition,
) -> Result<(), HarnessError> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    match crds.create(&PostParams::default(), crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(source) => {
            return Err(HarnessError::Crd {
                name,
                reason: format!("create: {source}"),
            });
        }
    }
    wait_for_crd(client, &name, CRD_PUBLICATION_TIMEOUT).await
}

/// Waits until CRD `name` is Established, each served version lists the
/// resource in discovery, and the OpenAPI v3 document of that group-version is
/// published.
pub async fn wait_for_crd(
    client: &Client,
    name: &str,
    timeout: Duration,
) -> Result<(), HarnessError> {
    wait_for(
        &format!("CustomResourceDefinition {name} to be served"),
        timeout,
        || async {
            match served(client, name).await {
                Ok(()) => Check::Done(()),
                Err(seen) => Check::Pending(seen),
            }
        },
    )
    .await
}

/// `Ok` once the CRD is served; otherwise what is missing.
async fn served(client: &Client, name: &str) -> Result<(), String> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds
        .get(name)
        .await
        .map_err(|error| format!("get the CRD: {error}"))?;
    let established = crd
        .status
        .iter()
        .flat_map(|status| status.conditions.iter().flatten())
        .any(|condition| condition.type_ == "Established" && condition.status == "True");
    if !established {
        return Err("the CRD is not Established yet".to_owned());
    }
    let group = &crd.spec.group;
    let plural = &crd.spec.names.plural;
    let index = get_json(client, "/openapi/v3").await?;
    for version in crd.spec.versions.iter().filter(|version| version.served) {
        let discovery = format!("/apis/{group}/{}", version.name);
        let listed: APIResourceList = serde_json::from_value(get_json(client, &discovery).await?)
            .map_err(|error| format!("{discovery}: {error}"))?;
        if !listed
            .resources
            .iter()
            .any(|resource| &resource.name == plural)
        {
            return Err(format!("{plural} is not in discovery ({discovery}) yet"));
        }
        let openapi = format!("apis/{group}/{}", version.name);
        if index["paths"].get(&openapi).is_none() {
            return Err(format!("/openapi/v3 does not list {openapi} yet"));
        }
        get_json(client, &format!("/openapi/v3/{openapi}")).await?;
    }
    Ok(())
}

async fn get_json(client: &Client, path: &str) -> Result<Value, String> {
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(|error| format!("{path}: {error}"))?;
    let text = client
        .request_text(request)
        .await
        .map_err(|error| format!("{path}: {error}"))?;
    serde_json::from_str(&text).map_err(|error| format!("{path}: {error}"))
}

impl TestCluster {
    /// Applies the CRD manifest at `path` with the real kubectl and waits until
    /// it is served (see [`wait_for_crd`]).
    pub async fn install_crd_file(&self, path: &Path) -> Result<(), HarnessError> {
        let manifest = std::fs::read_to_string(path).map_err(|error| HarnessError::Crd {
            name: path.display().to_string(),
            reason: format!("read: {error}"),
        })?;
        let crd: CustomResourceDefinition =
            serde_saphyr::from_str(&manifest).map_err(|error| HarnessError::Crd {
                name: path.display().to_string(),
                reason: format!("not a CustomResourceDefinition: {error}"),
            })?;
        let path_text = path.display().to_string();
        self.kubectl(&["apply", "-f", &path_text]).await?.ok()?;
        let name = crd.metadata.name.unwrap_or_default();
        wait_for_crd(&self.client(), &name, CRD_PUBLICATION_TIMEOUT).await
    }
}
