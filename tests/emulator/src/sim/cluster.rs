//! The emulated API server with the simulated controllers, as one unit.

use std::path::Path;

use super::{DeploymentController, Kubelet, KubeletConfig, SimError, StatefulSetController};
use crate::{ApiServer, Faults, ServerOptions};

/// Options for [`Cluster::start_with`].
#[derive(Clone, Debug, Default)]
pub struct ClusterOptions {
    /// The API server's options.
    pub server: ServerOptions,
    /// The kubelet's behaviour.
    pub kubelet: KubeletConfig,
    /// Run no kubelet: a control plane without kubelets, as some CI setups
    /// have (pods stay Pending and unbound unless a kubelet stand-in runs them).
    pub without_kubelet: bool,
}

/// An emulated cluster: the API server, the StatefulSet, Deployment and
/// ReplicaSet controllers and the kubelet. Dropping it stops them all.
pub struct Cluster {
    // Field order is drop order: controllers stop before the server.
    statefulsets: Option<StatefulSetController>,
    deployments: Option<DeploymentController>,
    kubelet: Option<Kubelet>,
    api: Option<ApiServer>,
    client: kube::Client,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Cluster")
            .field("api", &self.api)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Starts a cluster with default options.
    pub async fn start() -> Result<Cluster, SimError> {
        Cluster::start_with(ClusterOptions::default()).await
    }

    /// Starts a cluster with the given options.
    pub async fn start_with(options: ClusterOptions) -> Result<Cluster, SimError> {
        let api = ApiServer::start_with(options.server).await?;
        let client = api.client().await?;
        let statefulsets = StatefulSetController::start(api.client().await?);
        let deployments = DeploymentController::start(api.client().await?);
        let kubelet = if options.without_kubelet {
            None
        } else {
            Some(Kubelet::start(api.client().await?, options.kubelet))
        };
        Ok(Cluster {
            statefulsets: Some(statefulsets),
            deployments: Some(deployments),
            kubelet,
            api: Some(api),
            client,
        })
    }

    /// The API server.
    pub fn api(&self) -> &ApiServer {
        // Only `shutdown` takes it, and that consumes the cluster.
        self.api
            .as_ref()
            .unwrap_or_else(|| unreachable!("api taken only by shutdown"))
    }

    /// A client of the API server (the kubeconfig's default namespace).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The kubeconfig both `kube` and `kubectl` accept.
    pub fn kubeconfig_path(&self) -> &Path {
        self.api().kubeconfig_path()
    }

    /// Fault injection on the API server.
    pub fn faults(&self) -> Faults {
        self.api().faults()
    }

    /// Request statistics of the API server.
    pub fn request_stats(&self) -> crate::RequestStats {
        self.api().request_stats()
    }

    /// Stops the controllers, then the server (waiting for it to close).
    pub async fn shutdown(mut self) {
        if let Some(controller) = self.statefulsets.take() {
            controller.stop();
        }
        if let Some(controller) = self.deployments.take() {
            controller.stop();
        }
        if let Some(kubelet) = self.kubelet.take() {
            kubelet.stop();
        }
        if let Some(api) = self.api.take() {
            api.shutdown().await;
        }
    }
}
