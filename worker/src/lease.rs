//! The member Lease: liveness (renewals), acknowledgements (annotations) and
//! self-fencing.
//!
//! # Clock-skew margin
//!
//! The controller treats the Lease as expired at `renewTime +
//! leaseDurationSeconds` by *its* clock. The sidecar measures its own deadline
//! on a monotonic clock from the moment it *sent* the last successful renewal
//! (never later than the `renewTime` it wrote) and fences at `sent + duration
//! − margin`. So as long as the sidecar's wall clock is at most `margin`
//! behind the controller's, the sidecar has stopped every job before the
//! controller may hand them to anyone else. The default margin is 2 s; raise
//! it (`--fence-margin`) where node clocks are less well synchronised.
//!
//! Stopping takes time: a job may take its whole grace to exit after SIGTERM.
//! So fencing *starts* `--fence-grace` earlier, at `sent + duration − margin −
//! fence grace`, and a fenced job is SIGKILLed when that grace runs out: every
//! process is gone by `sent + duration − margin`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::Shared;
use crate::names;
use crate::view::AckTarget;

/// Writes the member's Lease. Only this sidecar writes it.
#[derive(Clone)]
pub(crate) struct LeaseWriter {
    api: Api<Lease>,
    name: String,
    holder: String,
    /// The pod as the Lease's owner: garbage-collected with it, and naming which pod
    /// (not just which pod name) acknowledged.
    owner: Option<OwnerReference>,
    duration_seconds: i32,
}

impl LeaseWriter {
    pub(crate) fn new(
        client: kube::Client,
        namespace: &str,
        pod: &str,
        pod_uid: Option<&str>,
        duration: Duration,
    ) -> LeaseWriter {
        LeaseWriter {
            api: Api::namespaced(client, namespace),
            name: names::member_lease(pod),
            holder: pod.to_string(),
            owner: pod_uid.map(|uid| OwnerReference {
                api_version: "v1".to_owned(),
                kind: "Pod".to_owned(),
                name: pod.to_owned(),
                uid: uid.to_owned(),
                ..OwnerReference::default()
            }),
            duration_seconds: i32::try_from(duration.as_secs().max(1)).unwrap_or(i32::MAX),
        }
    }

    /// Renews the Lease (creating it if missing) and, if given, records the
    /// acknowledgement and the instance states in the same write.
    pub(crate) async fn renew(
        &self,
        ack: Option<&AckTarget>,
        instance_states: Option<&str>,
    ) -> Result<(), kube::Error> {
        let now = MicroTime(Timestamp::now());
        let mut annotations = serde_json::Map::new();
        if let Some(states) = instance_states {
            annotations.insert(names::INSTANCE_STATES.into(), states.into());
        }
        if let Some(ack) = ack {
            annotations.insert(
                names::ACKED_REVISION.into(),
                ack.revision.to_string().into(),
            );
            annotations.insert(names::ACKED_HASH.into(), ack.hash.clone().into());
        }
        let mut metadata = serde_json::json!({
            "labels": { names::MEMBER_LABEL: self.holder },
            "annotations": annotations,
        });
        if let Some(owner) = &self.owner {
            // A replacement pod of the same name takes the Lease over.
            metadata["ownerReferences"] = serde_json::json!([owner]);
        }
        let patch = serde_json::json!({
            "metadata": metadata,
            "spec": {
                "holderIdentity": self.holder,
                "leaseDurationSeconds": self.duration_seconds,
                "renewTime": now,
            },
        });
        match self
            .api
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.is_not_found() => {
                self.create(now, ack, instance_states).await
            }
            Err(error) => Err(error),
        }
    }

    async fn create(
        &self,
        now: MicroTime,
        ack: Option<&AckTarget>,
        instance_states: Option<&str>,
    ) -> Result<(), kube::Error> {
        let mut lease = Lease::default();
        lease.metadata.name = Some(self.name.clone());
        lease.metadata.owner_references = self.owner.clone().map(|owner| vec![owner]);
        lease.metadata.labels = Some(BTreeMap::from([(
            names::MEMBER_LABEL.to_string(),
            self.holder.clone(),
        )]));
        if let Some(ack) = ack {
            lease.metadata.annotations = Some(BTreeMap::from([
                (names::ACKED_REVISION.to_string(), ack.revision.to_string()),
                (names::ACKED_HASH.to_string(), ack.hash.clone()),
            ]));
        }
        if let Some(states) = instance_states {
            lease
                .metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(names::INSTANCE_STATES.to_string(), states.to_owned());
        }
        let spec = lease.spec.get_or_insert_with(Default::default);
        spec.holder_identity = Some(self.holder.clone());
        spec.lease_duration_seconds = Some(self.duration_seconds);
        spec.acquire_time = Some(now.clone());
        spec.renew_time = Some(now);
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(()),
            // Created concurrently (an earlier attempt that timed out on our
            // side): renewing it again is the same thing.
            Err(kube::Error::Api(status)) if status.is_already_exists() => {
                Box::pin(self.renew(ack, instance_states)).await
            }
            Err(error) => Err(error),
        }
    }
}

/// Pends until `deadline`, forever if there is none.
async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Renews the Lease every `duration / 3`, writes acknowledgements as they
/// come, fences when the deadline passes without a renewal, and unfences only
/// after a renewal *and* a fresh read of the slice (a slice written while we
/// were cut off may have revoked jobs).
pub(crate) async fn keep(
    shared: Arc<Shared>,
    writer: LeaseWriter,
    mut ack_target: watch::Receiver<Option<AckTarget>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let renew_every = shared
        .settings
        .renew_interval()
        .max(Duration::from_millis(100));
    let fence_after = shared.settings.fence_after();
    let mut deadline: Option<Instant> = None;
    let mut retry_delay = retry_start(renew_every);
    let mut instance_reports = shared.instance_reports.subscribe();
    // Whether the Lease carries instance states that a later write must update.
    let mut reporting = false;
    loop {
        let ack = ack_target.borrow_and_update().clone();
        let reports = instance_reports.borrow_and_update().clone();
        // Members without instances never get the annotation at all.
        let states =
            (reporting || !reports.is_empty()).then(|| crate::instances::render_reports(&reports));
        let sent_at = Instant::now();
        let renewed = tokio::select! {
            renewed = tokio::time::timeout(renew_every, writer.renew(ack.as_ref(), states.as_deref())) => renewed,
            _ = sleep_until_some(deadline) => {
                fence(&shared, "the Lease renewal did not complete before the fencing deadline");
                deadline = None;
                continue;
            }
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        let next_attempt = match renewed {
            Ok(Ok(())) => {
                shared.metrics.lease_renewals.inc();
                shared.set_status(|status| status.lease_error = None);
                deadline = Some(sent_at + fence_after);
                retry_delay = retry_start(renew_every);
                if let Some(ack) = &ack {
                    shared
                        .metrics
                        .acked_revision
                        .set(i64::try_from(ack.revision).unwrap_or(i64::MAX));
                }
                shared.acked.send_replace(ack);
                reporting = !reports.is_empty();
                drop_reported_removals(&shared, &reports);
                if *shared.fenced.borrow() && !unfence(&shared).await {
                    // Renewed but not yet safe to run anything: try again soon.
                    next_retry(&mut retry_delay, renew_every)
                } else {
                    sent_at + renew_every
                }
            }
            Ok(Err(error)) => {
                shared.metrics.lease_renew_errors.inc();
                tracing::warn!(%error, lease = writer.name, "cannot renew the member Lease; retrying");
                shared.set_status(|status| {
                    status.lease_error =
                        Some(format!("cannot renew Lease {}: {error}", writer.name))
                });
                next_retry(&mut retry_delay, renew_every)
            }
            Err(_) => {
                shared.metrics.lease_renew_errors.inc();
                tracing::warn!(
                    lease = writer.name,
                    "renewing the member Lease timed out; retrying"
                );
                shared.set_status(|status| {
                    status.lease_error = Some(format!("renewing Lease {} timed out", writer.name))
                });
                next_retry(&mut retry_delay, renew_every)
            }
        };
        tokio::select! {
            _ = tokio::time::sleep_until(next_attempt) => {}
            // A new acknowledgement is written at once (with a renewal), but
            // only while unfenced: fenced, we are not entitled to claim anything.
            changed = ack_target.changed(), if !*shared.fenced.borrow() => if changed.is_err() { return },
            changed = instance_reports.changed(), if !*shared.fenced.borrow() => if changed.is_err() { return },
            _ = sleep_until_some(deadline) => {
                fence(&shared, "the Lease could not be renewed before renewTime + leaseDuration - margin");
                deadline = None;
            }
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

/// `removed` entries are reported once: those just written (unchanged since)
/// leave the report, which the next write then carries without them.
fn drop_reported_removals(shared: &Shared, written: &crate::instances::InstanceReports) {
    shared.instance_reports.send_if_modified(|reports| {
        let before = reports.len();
        reports.retain(|name, report| {
            report.state != shoal_core::slice::InstanceState::Removed
                || written.get(name) != Some(report)
        });
        reports.len() != before
    });
}

fn retry_start(renew_every: Duration) -> Duration {
    (renew_every / 10).max(Duration::from_millis(50))
}

fn next_retry(retry_delay: &mut Duration, renew_every: Duration) -> Instant {
    let next = Instant::now() + *retry_delay;
    *retry_delay = (*retry_delay * 2).min(renew_every);
    next
}

fn fence(shared: &Shared, reason: &str) {
    if shared.fenced.send_replace(true) {
        return;
    }
    shared.metrics.fenced.set(1);
    shared.metrics.fencings.inc();
    tracing::error!(
        reason,
        "self-fencing: stopping every job and reporting not ready until the Lease is renewed"
    );
}

/// Returns whether the sidecar is no longer fenced.
async fn unfence(shared: &Shared) -> bool {
    match shared.refresh_slice().await {
        Ok(()) => {
            shared.fenced.send_replace(false);
            shared.metrics.fenced.set(0);
            tracing::info!("Lease renewed and slice re-read: not fenced");
            true
        }
        Err(error) => {
            tracing::warn!(%error, "Lease renewed but the slice could not be re-read; staying fenced");
            false
        }
    }
}
