//! Keeping the slice current: a watch on the member's own slice ConfigMap
//! (by name, through the API), resumed after disconnects with backoff.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, ExponentialBackoff};
use tokio::sync::watch;

use crate::Shared;
use crate::slice_doc::{self, SliceProblem, Stored};
use crate::view::SliceView;
use shoal_core::format::EncodedSlice;

/// The slice watch's backoff: the n-th retry waits between
/// `c = min(2.5 s, 100 ms * 2^n)` and `2c` (backon's exponential backoff, each
/// delay stretched by a random 0-100 %), so never more than 5 s.
///
/// Tighter than kube's default (up to 30 s): one small watch per member is
/// cheap, and after a partition heals the member should see revokes quickly.
/// The jitter spreads hundreds of sidecars that lost the API server at the same
/// moment over the window instead of reconnecting in lockstep: each draws from
/// its own generator, seeded from process randomness unless `seed` is given
/// (tests).
pub fn watch_backoff(seed: Option<u64>) -> ExponentialBackoff {
    let builder = backon::ExponentialBuilder::default()
        .with_min_delay(WATCH_BACKOFF_START)
        .with_max_delay(WATCH_BACKOFF_MAX / 2)
        .with_factor(2.0)
        .without_max_times()
        .with_jitter();
    match seed {
        Some(seed) => builder.with_jitter_seed(seed),
        None => builder,
    }
    .into()
}

/// The shortest delay and the first ceiling.
pub const WATCH_BACKOFF_START: Duration = Duration::from_millis(100);
/// The longest delay.
pub const WATCH_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Follows `<pod>-slice` until `shutdown` fires.
pub(crate) async fn follow(
    shared: Arc<Shared>,
    api: Api<ConfigMap>,
    mut shutdown: watch::Receiver<bool>,
) {
    let name = shared.slice_config_map.clone();
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let events = watcher::watcher(api, config).backoff(watch_backoff(None));
    futures::pin_mut!(events);
    // Whether the current (re)list saw the ConfigMap at all.
    let mut seen_in_list = false;
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        let Some(event) = event else {
            tracing::error!(config_map = name, "the slice watch ended unexpectedly");
            return;
        };
        match event {
            Ok(Event::Init) => seen_in_list = false,
            Ok(Event::InitApply(config_map)) => {
                seen_in_list = true;
                shared.accept(&config_map).await;
            }
            Ok(Event::InitDone) => {
                shared.set_status(|status| {
                    status.synced = true;
                    status.watch_error = None;
                    if !seen_in_list {
                        status.config_map_missing = true;
                    }
                });
                if !seen_in_list {
                    tracing::info!(
                        config_map = name,
                        "no slice ConfigMap yet; waiting for the controller to write it"
                    );
                }
            }
            Ok(Event::Apply(config_map)) => {
                shared.set_status(|status| status.watch_error = None);
                shared.accept(&config_map).await;
            }
            Ok(Event::Delete(_)) => {
                // Deleting the ConfigMap is not a revocation: the controller
                // revokes by writing a reduced slice. Keep the last good one.
                tracing::warn!(
                    config_map = name,
                    "slice ConfigMap deleted; keeping the last good slice"
                );
                shared.set_status(|status| status.config_map_missing = true);
            }
            Err(error) => {
                shared.metrics.watch_errors.inc();
                tracing::warn!(config_map = name, %error, "slice watch failed; resuming with backoff");
                shared.set_status(|status| {
                    status.watch_error = Some(format!("watch of ConfigMap {name}: {error}"))
                });
            }
        }
    }
}

/// Reads `<pod>-slice` once and accepts it (used when unfencing).
pub(crate) async fn read_once(shared: &Shared, api: &Api<ConfigMap>) -> Result<(), kube::Error> {
    if let Some(config_map) = api.get_opt(&shared.slice_config_map).await? {
        shared.accept(&config_map).await;
    }
    Ok(())
}

/// Accepts a slice ConfigMap if it is well-formed and not older than what we
/// have; otherwise keeps the last good slice and reports the problem.
pub(crate) async fn accept(shared: &Shared, config_map: &ConfigMap) {
    let resource_version = config_map
        .metadata
        .resource_version
        .as_deref()
        .and_then(|rv| rv.parse::<u64>().ok());
    let name = &shared.slice_config_map;
    {
        let status = shared.lock_status();
        // A re-read racing the watch must not bring back an older version.
        if let (Some(seen), Some(new)) = (status.resource_version, resource_version)
            && new < seen
        {
            return;
        }
    }
    match read_slice(shared, config_map).await {
        Ok(slice) => {
            shared.set_status(|status| {
                status.resource_version = resource_version.or(status.resource_version);
                status.rejected = None;
                status.config_map_missing = false;
            });
            shared.metrics.slice_rejected_current.set(0);
            let slice = Arc::new(slice);
            let changed = shared.latest.send_if_modified(|latest| {
                if latest.as_deref() == Some(&*slice) {
                    return false;
                }
                *latest = Some(slice.clone());
                true
            });
            if changed {
                shared.metrics.slice_updates.inc();
                tracing::info!(
                    config_map = name,
                    revision = slice.revision,
                    hash = slice.hash,
                    jobs = slice.jobs.len(),
                    "slice accepted"
                );
            }
        }
        Err(problem) => {
            let kept = shared.latest.borrow().as_ref().map(|slice| slice.revision);
            shared.metrics.slice_rejected.inc();
            shared.metrics.slice_rejected_current.set(1);
            tracing::error!(config_map = name, %problem, kept_revision = kept, "slice ConfigMap rejected; keeping the last good slice");
            shared.set_status(|status| {
                status.resource_version = resource_version.or(status.resource_version);
                status.rejected = Some(format!("ConfigMap {name}: {problem}"));
                status.config_map_missing = false;
            });
        }
    }
}

/// Decodes the slice from its first ConfigMap, fetching the other parts of a
/// split slice. The controller writes the other parts before the first, so
/// once the first changed, the parts it announces are in place.
async fn read_slice(shared: &Shared, config_map: &ConfigMap) -> Result<SliceView, SliceProblem> {
    let pod = &shared.settings.pod_name;
    slice_doc::provenance(config_map, pod)?;
    match slice_doc::stored_slice(config_map)? {
        Stored::Complete(encoded) => slice_doc::decode_encoded(&encoded, pod),
        Stored::Split { parts, first } => {
            let mut chunks = Vec::with_capacity(parts);
            chunks.push(first);
            for part in 1..parts {
                let name = shoal_core::names::slice_configmap_part(pod, part);
                let part_map = shared.config_maps.get_opt(&name).await.map_err(|error| {
                    SliceProblem::ReadPart {
                        config_map: name.clone(),
                        reason: error.to_string(),
                    }
                })?;
                if let Some(part_map) = &part_map {
                    slice_doc::provenance(part_map, pod)?;
                }
                chunks.push(slice_doc::part_of(part_map.as_ref(), pod, part, parts)?);
            }
            slice_doc::decode_encoded(&EncodedSlice::Split(chunks), pod)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::utils::Backoff as _;

    /// The shortest delay of the n-th retry (counting from 0); the longest is twice it.
    fn floor(attempt: u32) -> Duration {
        (WATCH_BACKOFF_START * 2u32.saturating_pow(attempt.min(16))).min(WATCH_BACKOFF_MAX / 2)
    }

    #[test]
    fn two_sidecars_wait_different_times_within_the_backoff_bounds() {
        let first: Vec<Duration> = watch_backoff(None).take(12).collect();
        let second: Vec<Duration> = watch_backoff(None).take(12).collect();
        assert_ne!(first, second, "two sidecars would reconnect in lockstep");
        for delays in [&first, &second] {
            for (attempt, delay) in delays.iter().enumerate() {
                let attempt = attempt as u32;
                assert!(
                    *delay >= floor(attempt) && *delay <= floor(attempt) * 2,
                    "retry {attempt} waits {delay:?}, outside {:?}..={:?}",
                    floor(attempt),
                    floor(attempt) * 2
                );
                assert!(*delay <= WATCH_BACKOFF_MAX, "{delay:?}");
            }
        }
    }

    #[test]
    fn many_sidecars_spread_their_retries_over_the_window() {
        // 200 sidecars at their 6th retry (window 2.5 s to 5 s): in lockstep they
        // would all pick one delay; with jitter they cover most of the window.
        let delays: std::collections::BTreeSet<Duration> = (0..200u64)
            .map(|seed| watch_backoff(Some(seed)).nth(5).unwrap_or_default())
            .collect();
        assert!(delays.len() > 150, "only {} distinct delays", delays.len());
        let lowest = delays.first().copied().unwrap_or_default();
        let highest = delays.last().copied().unwrap_or_default();
        assert!(lowest < Duration::from_millis(3000), "{lowest:?}");
        assert!(highest > Duration::from_millis(4500), "{highest:?}");
    }

    #[test]
    fn a_reset_starts_again_from_the_shortest_window() {
        let mut backoff = watch_backoff(Some(7));
        let _ = backoff.by_ref().take(10).count();
        backoff.reset();
        let delay = backoff.next().unwrap_or_default();
        assert!(delay <= floor(0) * 2, "{delay:?} after a reset");
    }
}
