//! The plan controller's watch loop: a kube-runtime Controller on
//! DeploymentPlans, also woken by changes of the Swarms' StatefulSets, pods
//! and Leases. The runtime runs it beside the Swarm controller, inside the
//! same leadership, so only the leader reconciles plans.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use shoal_core::names;
use tracing::{debug, warn};

use super::apply::apply;
use super::decide::decide;
use super::observe::{ObserveError, observe};
use crate::api::deployment_plan::DeploymentPlan;
use crate::cluster::Context;

/// Why a plan's pass failed.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    /// Reading the cluster failed.
    #[error(transparent)]
    Observe(#[from] ObserveError),
    /// Writing the status failed.
    #[error("DeploymentPlan {plan}: writing its status: {source}")]
    WriteStatus {
        /// The plan.
        plan: String,
        /// Why.
        source: kube::Error,
    },
}

/// The plan controller running on its own task; dropping this stops it, so it
/// never outlives the leadership (or the caller) it was started under, even
/// when the caller is cancelled rather than stopped.
pub struct PlanTask(tokio::task::JoinHandle<()>);

impl Drop for PlanTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts [`run`] on a task of its own: a slow plan pass never delays the
/// Swarm controller's.
pub fn spawn(ctx: Arc<Context>) -> PlanTask {
    PlanTask(tokio::spawn(run(ctx)))
}

/// Reconciles DeploymentPlans until dropped (it never completes on its own:
/// a stream that ends, such as for a missing CRD, waits until the caller stops).
pub async fn run(ctx: Arc<Context>) {
    let client = ctx.client.clone();
    let namespace = ctx.settings.namespace.as_deref();
    let plans: Api<DeploymentPlan> = crate::cluster::api_in(&client, namespace);
    let controller = Controller::new(plans, watcher::Config::default());
    let store = controller.store();
    let by_pool = {
        let store = store.clone();
        move |sts: StatefulSet| {
            let swarm = sts.labels().get(names::LABEL_SWARM).cloned();
            plans_of(
                &store,
                &sts.namespace().unwrap_or_default(),
                swarm.as_deref(),
            )
        }
    };
    let by_pod = {
        let store = store.clone();
        move |pod: Pod| plans_of(&store, &pod.namespace().unwrap_or_default(), None)
    };
    let by_lease = {
        let store = store.clone();
        move |lease: Lease| {
            if lease.name_any().ends_with("-member") {
                plans_of(&store, &lease.namespace().unwrap_or_default(), None)
            } else {
                Vec::new()
            }
        }
    };
    // Another plan of the same Swarm changing (its placement reserves capacity) wakes this one.
    let by_other_plan = {
        let store = store.clone();
        move |plan: DeploymentPlan| {
            let name = plan.name_any();
            plans_of(
                &store,
                &plan.namespace().unwrap_or_default(),
                Some(plan.spec.swarm.as_str()),
            )
            .into_iter()
            .filter(|other| other.name != name)
            .collect::<Vec<_>>()
        }
    };
    let mut crd_missing_reported = false;
    controller
        .watches(
            crate::cluster::api_in::<DeploymentPlan>(&client, namespace),
            watcher::Config::default(),
            by_other_plan,
        )
        .watches(
            crate::cluster::api_in::<StatefulSet>(&client, namespace),
            watcher::Config::default(),
            by_pool,
        )
        .watches(
            crate::cluster::api_in::<Pod>(&client, namespace),
            watcher::Config::default(),
            by_pod,
        )
        .watches(
            crate::cluster::api_in::<Lease>(&client, namespace),
            watcher::Config::default(),
            by_lease,
        )
        .run(reconcile, error_policy, ctx)
        .for_each(|result| {
            match result {
                Err(kube::runtime::controller::Error::ObjectNotFound(object)) => {
                    debug!(%object, "change for a DeploymentPlan that no longer exists");
                }
                Err(error) if crd_missing(&error) => {
                    // Said once: a cluster without plans need not install their CRD.
                    if !std::mem::replace(&mut crd_missing_reported, true) {
                        warn!(
                            "the DeploymentPlan CRD (deploymentplans.shoal.dev) is not installed; plans are reconciled once `kubectl apply -f manifests/crd-deploymentplan.yaml` installs it"
                        );
                    }
                }
                Err(error) => warn!(%error, "DeploymentPlan controller stream error"),
                Ok(_) => {}
            }
            futures::future::ready(())
        })
        .await;
    futures::future::pending::<()>().await;
}

/// Whether a stream error says the DeploymentPlan resource is not served (404 on list).
fn crd_missing<E>(error: &kube::runtime::controller::Error<E, watcher::Error>) -> bool {
    matches!(
        error,
        kube::runtime::controller::Error::QueueError(watcher::Error::InitialListFailed(
            kube::Error::Api(status)
        )) if status.code == 404
    )
}

/// The plans of `namespace` (of `swarm` only, when given).
fn plans_of(
    store: &Store<DeploymentPlan>,
    namespace: &str,
    swarm: Option<&str>,
) -> Vec<ObjectRef<DeploymentPlan>> {
    store
        .state()
        .iter()
        .filter(|plan| plan.namespace().as_deref() == Some(namespace))
        .filter(|plan| swarm.is_none_or(|swarm| plan.spec.swarm == swarm))
        .map(|plan| ObjectRef::from_obj(plan.as_ref()))
        .collect()
}

/// The `kind` label of this controller's phase timings.
const KIND: &str = "plan";

/// One pass: observe, decide, apply.
async fn reconcile(plan: Arc<DeploymentPlan>, ctx: Arc<Context>) -> Result<Action, PassError> {
    let namespace = plan.namespace().unwrap_or_default();
    let name = plan.name_any();
    let cluster_wide = ctx.settings.namespace.is_none();
    let metrics = &ctx.metrics;
    let observed = metrics.timed(
        KIND,
        "observe",
        observe(
            &ctx.client,
            &namespace,
            &name,
            jiff::Timestamp::now(),
            cluster_wide,
        ),
    );
    let Some((plan, mut observation)) = observed.await? else {
        return Ok(Action::await_change());
    };
    observation.approved_by_policy = crate::approvers::vouched_for(
        &ctx.client,
        cluster_wide,
        crate::approvers::plan_may_approve(&observation.annotations, &observation.status),
    )
    .await;
    let decision = metrics
        .timed(KIND, "decide", async { decide(&observation) })
        .await;
    metrics
        .timed(KIND, "apply", apply(&ctx, &plan, &observation, &decision))
        .await
        .map_err(|source| PassError::WriteStatus {
            plan: format!("{namespace}/{name}"),
            source,
        })?;
    ctx.metrics.set_plan(
        &namespace,
        &name,
        &crate::metrics::PlanGauges::of(&decision.status, observation.now),
    );
    Ok(Action::requeue(
        decision.requeue_after.unwrap_or(ctx.settings.resync),
    ))
}

fn error_policy(plan: Arc<DeploymentPlan>, error: &PassError, _ctx: Arc<Context>) -> Action {
    warn!(plan = %plan.name_any(), %error, "DeploymentPlan reconcile failed");
    Action::requeue(Duration::from_secs(2))
}
