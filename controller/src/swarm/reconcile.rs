//! The thin I/O around [`crate::swarm::decide`]: observe the cluster ([`super::observe`]),
//! decide, apply ([`super::apply`]); the reconcile loop's entry and its error.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use tracing::{info, instrument, warn};

use super::observe::{check_targets, observe};
use crate::api::swarm::Swarm;
pub use crate::cluster::{Context, publish_on};
use crate::swarm::decide::{self, Observation};

/// Why a reconcile failed. One variant per failing step.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Swarm has no namespace (cannot happen for a namespaced resource).
    #[error("Swarm {0} has no namespace")]
    MissingNamespace(String),
    /// Reading the Swarm itself failed.
    #[error("reading Swarm {swarm}: {source}")]
    ReadSwarm {
        /// Swarm.
        swarm: String,
        /// Cause.
        source: kube::Error,
    },
    /// Listing the Swarm's pools failed.
    #[error("listing {kind} labelled for Swarm {swarm}: {source}")]
    ListPools {
        /// What was listed (`StatefulSets`, `Deployments`, `ReplicaSets`).
        kind: &'static str,
        /// Swarm.
        swarm: String,
        /// Cause.
        source: kube::Error,
    },
    /// Listing pods failed.
    #[error("listing pods of Swarm {swarm}: {source}")]
    ListPods {
        /// Swarm.
        swarm: String,
        /// Cause.
        source: kube::Error,
    },
    /// Reading a member's pod failed.
    #[error("reading pod {pod}: {source}")]
    ReadPod {
        /// Pod.
        pod: String,
        /// Cause.
        source: kube::Error,
    },
    /// Listing the Swarm's ConfigMaps failed.
    #[error("listing ConfigMaps of Swarm {swarm}: {source}")]
    ListConfigMaps {
        /// Swarm.
        swarm: String,
        /// Cause.
        source: kube::Error,
    },
    /// Listing member Leases failed.
    #[error("listing member Leases of Swarm {swarm}: {source}")]
    ListLeases {
        /// Swarm.
        swarm: String,
        /// Cause.
        source: kube::Error,
    },
    /// Listing the DeploymentPlans of the namespace failed.
    #[error("listing the DeploymentPlans of Swarm {swarm}: {source}")]
    ListPlans {
        /// Swarm.
        swarm: String,
        /// Cause.
        source: kube::Error,
    },
    /// Reading the `jobsFrom` ConfigMap failed (other than not found).
    #[error("reading job ConfigMap {name}: {source}")]
    ReadJobConfigMap {
        /// ConfigMap.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Looking up a ConfigMap the plan would write failed.
    #[error("reading ConfigMap {name}: {source}")]
    ReadConfigMap {
        /// ConfigMap.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// A ConfigMap appeared under a name the plan writes, owned by someone else, between
    /// looking it up and writing it.
    #[error(
        "ConfigMap {name} was created by someone else while Swarm {swarm} was about to create it; it is left alone"
    )]
    NotOwned {
        /// ConfigMap.
        name: String,
        /// Swarm.
        swarm: String,
    },
    /// Writing a history ConfigMap failed.
    #[error("writing revision history {name}: {source}")]
    WriteRevision {
        /// ConfigMap.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Writing status failed.
    #[error("writing status of Swarm {swarm}: {source}")]
    WriteStatus {
        /// Swarm.
        swarm: String,
        /// Cause.
        source: kube::Error,
    },
    /// Writing a slice ConfigMap failed.
    #[error("writing slice {name}: {source}")]
    WriteSlice {
        /// ConfigMap.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Deleting a slice ConfigMap failed.
    #[error("deleting slice {name}: {source}")]
    DeleteSlice {
        /// ConfigMap.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Evicting a pod failed (other than a PodDisruptionBudget refusing it).
    #[error("evicting pod {pod}: {source}")]
    Evict {
        /// Pod.
        pod: String,
        /// Cause.
        source: kube::Error,
    },
    /// Writing the index ConfigMap failed.
    #[error("writing index {name}: {source}")]
    WriteIndex {
        /// ConfigMap.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Deleting an old history ConfigMap failed.
    #[error("pruning revision history {name}: {source}")]
    PruneRevision {
        /// ConfigMap.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Serializing a history record failed.
    #[error("serializing revision {revision}: {source}")]
    SerializeRevision {
        /// Revision.
        revision: u64,
        /// Cause.
        source: serde_json::Error,
    },
}

impl Error {
    /// A short CamelCase name of the failing step: metric label and Event reason.
    pub fn category(&self) -> &'static str {
        match self {
            Error::MissingNamespace(_) => "MissingNamespace",
            Error::ReadSwarm { .. } => "ReadSwarmFailed",
            Error::ListPools { .. } => "ListPoolsFailed",
            Error::ListPods { .. } => "ListPodsFailed",
            Error::ReadPod { .. } => "ReadPodFailed",
            Error::ListConfigMaps { .. } => "ListConfigMapsFailed",
            Error::ListLeases { .. } => "ListLeasesFailed",
            Error::ListPlans { .. } => "ListPlansFailed",
            Error::ReadJobConfigMap { .. } => "ReadJobConfigMapFailed",
            Error::ReadConfigMap { .. } => "ReadConfigMapFailed",
            Error::NotOwned { .. } => "OwnershipConflict",
            Error::WriteRevision { .. } => "WriteRevisionFailed",
            Error::WriteStatus { .. } => "WriteStatusFailed",
            Error::WriteSlice { .. } => "WriteSliceFailed",
            Error::DeleteSlice { .. } => "DeleteSliceFailed",
            Error::Evict { .. } => "EvictFailed",
            Error::WriteIndex { .. } => "WriteIndexFailed",
            Error::PruneRevision { .. } => "PruneRevisionFailed",
            Error::SerializeRevision { .. } => "SerializeRevisionFailed",
        }
    }
}

/// The `kind` label of this controller's phase timings.
const KIND: &str = "swarm";

/// Publishes an Event about the Swarm.
pub(crate) async fn publish(ctx: &Context, swarm: &Swarm, warning: bool, reason: &str, note: &str) {
    publish_on(ctx, &swarm.object_ref(&()), warning, reason, note).await;
}

/// Reconciles one Swarm: observe, plan, apply.
#[instrument(skip_all, fields(swarm = %swarm.name_any(), namespace = swarm.namespace().unwrap_or_default()))]
pub async fn reconcile(swarm: Arc<Swarm>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = reconcile_inner(&swarm, &ctx).await;
    if let Err(error) = &result {
        // Repeats of one error fold into an Event series; a different error is a new Event.
        publish(&ctx, &swarm, true, error.category(), &error.to_string()).await;
    }
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    result
}

async fn reconcile_inner(swarm: &Swarm, ctx: &Context) -> Result<Action, Error> {
    // The Swarm as the API server holds it now, not as the watch cache last saw it: a
    // reconcile triggered by a pod or Lease right after this controller wrote the status
    // would otherwise plan from the status before that write (and, for one, announce
    // revision 1 twice).
    let name = swarm.name_any();
    let namespace = swarm
        .namespace()
        .ok_or_else(|| Error::MissingNamespace(name.clone()))?;
    let swarms: Api<Swarm> = Api::namespaced(ctx.client.clone(), &namespace);
    let fresh = swarms
        .get_opt(&name)
        .await
        .map_err(|source| Error::ReadSwarm {
            swarm: name.clone(),
            source,
        })?;
    let memo_scope =
        super::observe::memo_scope(&namespace, &name, &swarm.uid().unwrap_or_default());
    let Some(fresh) = fresh else {
        ctx.decoded.forget(&memo_scope);
        return Ok(Action::await_change());
    };
    if fresh.metadata.deletion_timestamp.is_some() {
        // Owned ConfigMaps go with the Swarm (ownerReferences); nothing to do.
        ctx.decoded.forget(&memo_scope);
        return Ok(Action::await_change());
    }
    let swarm = &fresh;
    let metrics = &ctx.metrics;
    let watched = ctx.watched();
    let mut observation = metrics
        .timed(
            KIND,
            "observe",
            observe(swarm, &ctx.client, Some(&ctx.decoded), watched.as_ref()),
        )
        .await?;
    observation.approved_by_policy = crate::approvers::vouched_for(
        &ctx.client,
        ctx.settings.namespace.is_none(),
        crate::approvers::swarm_may_approve(&observation.annotations, &observation.status),
    )
    .await;
    observation.blocked_evictions = ctx
        .blocked_evictions
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&format!("{namespace}/{name}"))
        .cloned()
        .unwrap_or_default();
    for note in ctx
        .lease_clock
        .stamp(&namespace, &mut observation.leases, observation.now)
    {
        publish(ctx, swarm, true, "LeaseNotTrusted", &note).await;
    }
    let changed_at = observation.status.changed_at.clone();
    let decision = metrics
        .timed(KIND, "decide", decide_checked(swarm, &mut observation, ctx))
        .await?;
    metrics
        .timed(
            KIND,
            "apply",
            crate::swarm::apply::apply(swarm, &observation, &decision, ctx),
        )
        .await?;
    for event in &decision.events {
        publish(ctx, swarm, event.warning, &event.reason, &event.note).await;
    }
    if let Some(revision) = decision.applied_revision {
        info!(
            revision,
            jobs_moved = decision.jobs_moved,
            "revision applied"
        );
        ctx.metrics.revisions_applied.inc();
        ctx.metrics.jobs_moved.inc_by(decision.jobs_moved);
    }
    ctx.metrics.set_swarm(
        &namespace,
        &observation.swarm,
        crate::metrics::SwarmGauges {
            pending: decision.status.pending_revision.is_some(),
            phase: decision.status.phase.as_deref(),
            revision_in_force: decision.status.current_revision,
            unowned_jobs: decision.status.unowned_jobs,
        },
    );
    let converged = decision
        .events
        .iter()
        .any(|event| event.reason == "RevisionApplied");
    if converged
        && let Some(since) = changed_at.and_then(|text| text.parse::<jiff::Timestamp>().ok())
    {
        let seconds = observation.now.duration_since(since).as_secs_f64();
        ctx.metrics.change_to_applied.observe(seconds.max(0.0));
    }
    Ok(match decision.requeue_after {
        Some(after) => Action::requeue(after.max(Duration::from_millis(200))),
        None => Action::requeue(ctx.settings.resync),
    })
}

/// Plans; if the plan would write ConfigMaps observe did not see, looks them up first and,
/// when one belongs to someone else, plans again knowing it.
async fn decide_checked(
    swarm: &Swarm,
    observation: &mut Observation,
    ctx: &Context,
) -> Result<decide::Decision, Error> {
    let decision = decide::decide(observation);
    let unchecked = decide::unchecked_targets(observation, &decision.operations);
    if unchecked.is_empty() {
        return Ok(decision);
    }
    let namespace = swarm.namespace().unwrap_or_default();
    let cm_api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    let uid = swarm.uid().unwrap_or_default();
    if check_targets(&cm_api, &uid, unchecked, observation).await? {
        return Ok(decide::decide(observation));
    }
    Ok(decision)
}

/// What to do after a failed reconcile: count it, say it, retry soon.
pub fn error_policy(swarm: Arc<Swarm>, error: &Error, ctx: Arc<Context>) -> Action {
    warn!(swarm = %swarm.name_any(), %error, "reconcile failed");
    ctx.metrics
        .reconcile_errors
        .get_or_create(&crate::metrics::ErrorLabels {
            category: error.category().to_owned(),
        })
        .inc();
    Action::requeue(Duration::from_secs(2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_has_a_distinct_category() {
        let categories = [
            Error::MissingNamespace("x".into()).category(),
            Error::SerializeRevision {
                revision: 1,
                source: serde_json::from_str::<u8>("x").unwrap_err(),
            }
            .category(),
        ];
        assert_ne!(categories[0], categories[1]);
    }
}
