//! Running the controller: watches, leader election, the metrics server.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::runtime::controller::Controller;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use shoal_core::names;
use tracing::{debug, info, warn};

use crate::api::deployment_plan::DeploymentPlan;
use crate::api::swarm::Swarm;
use crate::cluster::watched;
use crate::cluster::{Context, publish_on};
use crate::events::EventRecorders;
use crate::metrics::Metrics;
use crate::server::{Health, serve};
use crate::swarm::reconcile::{error_policy, reconcile};
use crate::{LeaderElection, Settings};

/// Why the controller stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Leader election could not start.
    #[error("leader election on Lease {lease}: {source}")]
    LeaderElection {
        /// Lease name.
        lease: String,
        /// Cause.
        source: kube_lease_manager::LeaseManagerError,
    },
    /// The metrics server could not bind.
    #[error("metrics server on {address}: {source}")]
    MetricsServer {
        /// Address.
        address: std::net::SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
}

/// The API clients the controller uses.
#[derive(Clone)]
pub struct Clients {
    /// Everything but evictions (kube's default client, which retries 429/503/504).
    pub api: Client,
    /// Evictions: a client that does not retry, so that a PodDisruptionBudget refusing
    /// an eviction (429) is seen and reported at once, not retried inside one call for
    /// minutes.
    pub evictions: Client,
}

impl Clients {
    /// Clients for `config`: the default one, and one without retries for evictions.
    pub fn from_config(config: kube::Config) -> Result<Clients, kube::Error> {
        let mut no_retries = config.clone();
        no_retries.default_retry = false;
        Ok(Clients {
            api: Client::try_from(config)?,
            evictions: Client::try_from(no_retries)?,
        })
    }
}

/// Runs the controller with one client for everything.
///
/// The client may retry 429 (kube's default does): evictions are sent so that its retry
/// layer cannot repeat them (`eviction::evict_once`), so a PodDisruptionBudget's refusal
/// is seen at once, reported (Progressing/EvictionBlocked, a Warning naming the pod and
/// the budget) and tried again next pass, through this entry point as through
/// [`run_with_clients`].
pub async fn run(
    client: Client,
    settings: Settings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    run_with_clients(
        Clients {
            api: client.clone(),
            evictions: client,
        },
        settings,
        shutdown,
    )
    .await
}

/// Runs the controller until `shutdown` completes.
///
/// With leader election configured, this replica reconciles only while it
/// holds the Lease; otherwise it stands by, watching nothing.
pub async fn run_with_clients(
    clients: Clients,
    settings: Settings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let client = clients.api.clone();
    let shutdown = shutdown.boxed().shared();
    let metrics = Arc::new(Metrics::new());
    let ready = Arc::new(AtomicBool::new(false));
    let server = match settings.metrics_address {
        None => None,
        Some(address) => {
            let health = Health {
                metrics: metrics.clone(),
                ready: ready.clone(),
            };
            let listener_check = tokio::net::TcpListener::bind(address).await;
            // Bind once here to report a clear error; the server binds again right after.
            drop(listener_check.map_err(|source| RunError::MetricsServer { address, source })?);
            Some(tokio::spawn(serve(address, health, shutdown.clone())))
        }
    };
    let reporter = Reporter {
        controller: "shoal-controller".to_owned(),
        instance: Some(settings.identity.clone()),
    };
    let ctx = Arc::new(Context {
        client: client.clone(),
        evictions: clients.evictions,
        blocked_evictions: Default::default(),
        events: EventRecorders::new(client.clone(), reporter),
        metrics: metrics.clone(),
        settings: settings.clone(),
        lease_clock: crate::lease_clock::LeaseClock::new(),
        decoded: Default::default(),
        watched: Default::default(),
    });

    match &settings.leader_election {
        None => {
            ready.store(true, Ordering::Relaxed);
            metrics.leader.set(1);
            run_controller(ctx, shutdown.clone()).await;
            metrics.leader.set(0);
        }
        Some(election) => {
            let manager = lease_manager(&client, election, &settings.identity)
                .await
                .map_err(|source| RunError::LeaderElection {
                    lease: election.lease_name.clone(),
                    source,
                })?;
            let (mut leader, lease_task) = watch_leadership(
                manager,
                client.clone(),
                election.clone(),
                settings.identity.clone(),
            );
            ready.store(true, Ordering::Relaxed);
            loop {
                let became_leader = tokio::select! {
                    _ = shutdown.clone() => false,
                    changed = wait_for_leadership(&mut leader, &client, election, &settings.identity) => changed,
                };
                if !became_leader {
                    break;
                }
                metrics.leader.set(1);
                info!(identity = %settings.identity, "became leader; reconciling");
                let mut watch_loss = leader.clone();
                let lost = async move {
                    let _ = watch_loss.wait_for(|is_leader| !*is_leader).await;
                };
                let stop = futures::future::select(shutdown.clone(), lost.boxed()).map(|_| ());
                run_controller(ctx.clone(), stop).await;
                metrics.leader.set(0);
                if shutdown.clone().now_or_never().is_some() {
                    break;
                }
                warn!(identity = %settings.identity, "lost leadership; standing by");
            }
            // Closing the channel makes the lease task release the Lease.
            drop(leader);
            if let Ok(Err(error)) = lease_task.await {
                warn!(%error, "releasing the leader Lease failed");
            }
        }
    }
    if let Some(server) = server {
        let _ = server.await;
    }
    Ok(())
}

/// The identity a replica holds the leader Lease under when `--identity` is not given:
/// its pod's name (`POD_NAME`, which the Deployment passes) in a pod; elsewhere the host
/// name the OS reports and the process id, `<host>-<pid>` (`shoal-controller-<pid>` when
/// the host name cannot be read). A host name alone is not enough: two controllers run
/// on one machine would share it and both lead. Empty values count as absent.
pub fn default_identity(pod_name: Option<&str>, host_name: Option<&str>, pid: u32) -> String {
    fn present(value: Option<&str>) -> Option<&str> {
        value.map(str::trim).filter(|value| !value.is_empty())
    }
    match (present(pod_name), present(host_name)) {
        (Some(pod), _) => pod.to_owned(),
        (None, Some(host)) => format!("{host}-{pid}"),
        (None, None) => format!("shoal-controller-{pid}"),
    }
}

/// How long a replica waits for the leader Lease before saying, at info level, that it
/// stands by: long enough for an uncontested Lease to be taken first.
const STANDBY_NOTICE_AFTER: Duration = Duration::from_secs(2);

/// Waits until this replica leads; `false` if the leadership task ended. A replica that
/// is not leading after [`STANDBY_NOTICE_AFTER`] logs once that it stands by, naming the
/// current holder of the Lease when it can read it, so that `kubectl logs` of a standby
/// is not silent.
async fn wait_for_leadership(
    leader: &mut tokio::sync::watch::Receiver<bool>,
    client: &Client,
    election: &LeaderElection,
    identity: &str,
) -> bool {
    let noticed = tokio::time::timeout(STANDBY_NOTICE_AFTER, leader.wait_for(|is| *is))
        .await
        .map(|changed| changed.is_ok());
    if let Ok(leading) = noticed {
        return leading;
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), &election.lease_namespace);
    let holder = match leases.get_opt(&election.lease_name).await {
        Ok(lease) => lease
            .and_then(|lease| lease.spec)
            .and_then(|spec| spec.holder_identity)
            .filter(|holder| !holder.is_empty()),
        Err(error) => {
            debug!(%error, "reading the leader Lease to name the leader");
            None
        }
    };
    let lease = format!("{}/{}", election.lease_namespace, election.lease_name);
    match holder {
        Some(holder) => info!(
            %identity, leader = %holder, %lease,
            "standing by: {holder} leads; this replica takes over if it stops"
        ),
        None => info!(
            %identity, %lease,
            "standing by: waiting for the leader Lease (no holder seen yet)"
        ),
    }
    leader.wait_for(|is| *is).await.is_ok()
}

/// A lease manager for this replica, its view of the Lease read fresh.
async fn lease_manager(
    client: &Client,
    election: &LeaderElection,
    identity: &str,
) -> Result<LeaseManager, LeaseManagerError> {
    LeaseManagerBuilder::new(client.clone(), &election.lease_name)
        .with_namespace(&election.lease_namespace)
        .with_identity(identity)
        .with_duration(election.duration_seconds.max(2))
        .with_grace((election.duration_seconds / 3).max(1))
        .build()
        .await
}

/// What woke the leadership loop.
enum LeadershipStep {
    /// Every receiver is gone: the controller is stopping.
    Stop,
    /// The Lease was seen with no holder while this replica stands by.
    Released,
    /// The lease manager's own loop returned.
    Changed(Result<bool, LeaseManagerError>),
}

/// Sends `true` while this replica holds the leader Lease; releases it when
/// every receiver is dropped.
///
/// kube-lease-manager's own loop (`LeaseManager::watch`) sleeps until the
/// holder's Lease would expire even when the holder released it on a clean
/// stop, so a rolling update would leave no leader for up to a whole Lease
/// duration. This loop also watches the Lease, and when it sees it released
/// while standing by, starts over with a fresh view of it and takes it at once.
fn watch_leadership(
    manager: LeaseManager,
    client: Client,
    election: LeaderElection,
    identity: String,
) -> (
    tokio::sync::watch::Receiver<bool>,
    tokio::task::JoinHandle<Result<(), LeaseManagerError>>,
) {
    let (sender, receiver) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async move {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &election.lease_namespace);
        let only_this =
            watcher::Config::default().fields(&format!("metadata.name={}", election.lease_name));
        let mut released = watcher(leases, only_this)
            .default_backoff()
            .applied_objects()
            .filter_map(|lease| async move {
                let lease = lease.ok()?;
                let holder = lease.spec.and_then(|spec| spec.holder_identity);
                holder.is_none_or(|holder| holder.is_empty()).then_some(())
            })
            .boxed();
        let mut manager = manager;
        let mut backoff = Duration::from_millis(500);
        loop {
            let step = tokio::select! {
                biased;
                _ = sender.closed() => LeadershipStep::Stop,
                Some(()) = released.next(), if !*sender.borrow() => LeadershipStep::Released,
                result = manager.changed() => LeadershipStep::Changed(result),
            };
            match step {
                LeadershipStep::Stop => return manager.release().await,
                LeadershipStep::Released => {
                    debug!(%identity, "leader Lease released; trying to take it");
                    match lease_manager(&client, &election, &identity).await {
                        Ok(fresh) => manager = fresh,
                        Err(error) => warn!(%error, "re-reading the leader Lease failed"),
                    }
                }
                LeadershipStep::Changed(Ok(is_leader)) => {
                    backoff = Duration::from_millis(500);
                    if sender.send(is_leader).is_err() {
                        return manager.release().await;
                    }
                }
                LeadershipStep::Changed(Err(error)) => {
                    // The manager keeps its own view: a leader whose renewal failed stays
                    // leader until a renewal shows someone else holds the Lease.
                    warn!(%error, "leader election");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                }
            }
        }
    });
    (receiver, task)
}

/// Watches and reconciles until `stop` completes.
async fn run_controller(ctx: Arc<Context>, stop: impl Future<Output = ()> + Send + 'static) {
    // The controller wants a Sync shutdown future; a oneshot receiver is one.
    let (stop_sender, stop_receiver) = tokio::sync::oneshot::channel::<()>();
    let stop_relay = tokio::spawn(async move {
        stop.await;
        let _ = stop_sender.send(());
    });
    let client = ctx.client.clone();
    let namespace = ctx.settings.namespace.as_deref();
    let swarms: Api<Swarm> = crate::cluster::api_in(&client, namespace);
    let config_maps: Api<ConfigMap> = crate::cluster::api_in(&client, namespace);
    let plans: Api<DeploymentPlan> = crate::cluster::api_in(&client, namespace);

    // A `jobsFrom` ConfigMap is the user's: the ConfigMap watch cannot be narrowed by label.
    // The watch caches a pass reads, each filled by the stream that also triggers passes
    // (`cluster::watched`: an event is in its cache before the pass it starts).
    let (watched, triggers) = watched::watch(&client, namespace);
    let pool_store = watched.statefulsets.clone();
    let deployment_store = watched.deployments.clone();
    *ctx.watched
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(watched);

    let controller = Controller::new(swarms, watcher::Config::default());
    let swarm_store = controller.store();

    let orphans = report_orphan_pools(ctx.clone(), pool_store.clone(), swarm_store.clone());
    let orphan_deployments =
        report_orphan_pools(ctx.clone(), deployment_store.clone(), swarm_store.clone());

    let by_config_map = {
        let swarm_store = swarm_store.clone();
        move |cm: ConfigMap| config_map_swarms(&cm, &swarm_store)
    };
    let by_pool = {
        let swarm_store = swarm_store.clone();
        move |sts: StatefulSet| pool_swarms(&sts, &swarm_store)
    };
    let by_deployment = {
        let swarm_store = swarm_store.clone();
        move |deployment: Deployment| pool_swarms(&deployment, &swarm_store)
    };
    let by_pod = {
        let pool_store = pool_store.clone();
        let deployment_store = deployment_store.clone();
        move |pod: Pod| {
            let namespace = pod.namespace().unwrap_or_default();
            pod.owner_references()
                .iter()
                .filter_map(|owner| match owner.kind.as_str() {
                    "StatefulSet" => swarm_of_pool(&pool_store, &owner.name, &namespace),
                    // The Deployment controller names a ReplicaSet `<deployment>-<hash>`.
                    "ReplicaSet" => owner.name.rsplit_once('-').and_then(|(deployment, _)| {
                        swarm_of_pool(&deployment_store, deployment, &namespace)
                    }),
                    _ => None,
                })
                .collect::<Vec<_>>()
        }
    };
    let by_lease = {
        let pool_store = pool_store.clone();
        let deployment_store = deployment_store.clone();
        move |lease: Lease| {
            let namespace = lease.namespace().unwrap_or_default();
            let pod = lease.name_any().strip_suffix("-member")?.to_owned();
            // `<statefulset>-<ordinal>`, or a Deployment's `<deployment>-<hash>-<suffix>`.
            let statefulset = pod
                .rsplit_once('-')
                .and_then(|(pool, _)| swarm_of_pool(&pool_store, pool, &namespace));
            statefulset.or_else(|| {
                let (replica_set, _) = pod.rsplit_once('-')?;
                let (deployment, _) = replica_set.rsplit_once('-')?;
                swarm_of_pool(&deployment_store, deployment, &namespace)
            })
        }
    };

    let controller = controller
        .watches(config_maps, watcher::Config::default(), by_config_map)
        .watches_stream(triggers.statefulsets, by_pool)
        .watches_stream(triggers.deployments, by_deployment)
        .watches_stream(triggers.pods, by_pod)
        .watches_stream(triggers.leases, by_lease)
        // A plan's status carries the instances its Swarm's slices deliver: any change of a
        // plan reconciles the Swarms (all of them: a targeted trigger needs kube's unstable
        // stream API). Its own backed-off watch, not `watches`: the Controller backs off
        // *all* its triggers on one trigger's error, and without the DeploymentPlan CRD
        // this watch fails for good.
        .reconcile_all_on(plan_changes(plans))
        .graceful_shutdown_on(stop_receiver.map(|_| ()))
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|result| {
            match result {
                // A pool or ConfigMap naming a Swarm that does not exist; reported separately.
                Err(kube::runtime::controller::Error::ObjectNotFound(object)) => {
                    tracing::debug!(%object, "change for a Swarm that does not exist");
                }
                Err(error) => warn!(%error, "controller stream error"),
                Ok(_) => {}
            }
            futures::future::ready(())
        });

    // DeploymentPlans, under the same leadership, on a task of their own (stopped on drop).
    let _plans = crate::deployment_plan::run::spawn(ctx.clone());
    // The side tasks live only as long as the controller.
    controller.await;
    // The caches end with the watches that fill them: the next term starts empty ones.
    *ctx.watched
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    orphans.abort();
    orphan_deployments.abort();
    stop_relay.abort();
}

/// One item per change of any DeploymentPlan (deletions included). Watch errors (such as
/// a missing CRD, which the plan controller reports) are backed off and dropped here.
fn plan_changes(plans: Api<DeploymentPlan>) -> impl futures::Stream<Item = ()> + Send {
    watcher(plans, watcher::Config::default())
        .default_backoff()
        .touched_objects()
        .filter_map(|touched| futures::future::ready(touched.ok().map(|_| ())))
}

/// The Swarm of a labelled pool (StatefulSet or Deployment) in `store`.
fn swarm_of_pool<K>(store: &Store<K>, pool: &str, namespace: &str) -> Option<ObjectRef<Swarm>>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let found = store.get(&ObjectRef::new(pool).within(namespace))?;
    let swarm = found.labels().get(names::LABEL_SWARM)?;
    Some(ObjectRef::new(swarm).within(namespace))
}

/// A labelled pool (StatefulSet or Deployment) maps to its Swarm; an unlabelled one (it may
/// just have been unlabelled) to every Swarm of its namespace.
fn pool_swarms<K: kube::Resource>(sts: &K, swarms: &Store<Swarm>) -> Vec<ObjectRef<Swarm>> {
    let namespace = sts.namespace().unwrap_or_default();
    match sts.labels().get(names::LABEL_SWARM) {
        Some(swarm) => vec![ObjectRef::new(swarm).within(&namespace)],
        None => swarms
            .state()
            .iter()
            .filter(|swarm| swarm.namespace().as_deref() == Some(namespace.as_str()))
            .map(|swarm| ObjectRef::from_obj(swarm.as_ref()))
            .collect(),
    }
}

/// A ConfigMap maps to the Swarm that owns it, labels it, or reads its job list (or part
/// of it) from it. A part relabelled out of a selector is noticed at the next resync.
fn config_map_swarms(cm: &ConfigMap, swarms: &Store<Swarm>) -> Vec<ObjectRef<Swarm>> {
    let namespace = cm.namespace().unwrap_or_default();
    let mut found: BTreeSet<String> = BTreeSet::new();
    if let Some(swarm) = cm.labels().get(names::LABEL_SWARM) {
        found.insert(swarm.clone());
    }
    for owner in cm.owner_references() {
        if owner.kind == "Swarm" && owner.api_version.starts_with("shoal.dev/") {
            found.insert(owner.name.clone());
        }
    }
    let name = cm.name_any();
    for swarm in swarms.state() {
        let reads_it = swarm
            .spec
            .jobs_from
            .as_ref()
            .is_some_and(|from| from.reads(&name, cm.labels()));
        if reads_it && swarm.namespace().as_deref() == Some(namespace.as_str()) {
            found.insert(swarm.name_any());
        }
    }
    found
        .into_iter()
        .map(|swarm| ObjectRef::new(&swarm).within(&namespace))
        .collect()
}

/// Warns (an Event on the pool, once per pool and name) about pools (StatefulSets or
/// Deployments) labelled for a Swarm that does not exist.
fn report_orphan_pools<K>(
    ctx: Arc<Context>,
    pools: Store<K>,
    swarms: Store<Swarm>,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    tokio::spawn(async move {
        if pools.wait_until_ready().await.is_err() {
            return;
        }
        let mut reported: BTreeSet<(String, String)> = BTreeSet::new();
        loop {
            let mut orphaned_now = BTreeSet::new();
            for sts in pools.state() {
                let Some(swarm) = sts.labels().get(names::LABEL_SWARM) else {
                    continue;
                };
                let namespace = sts.namespace().unwrap_or_default();
                if swarms
                    .get(&ObjectRef::new(swarm).within(&namespace))
                    .is_some()
                {
                    continue;
                }
                // The Swarm cache may still be filling; only the API can say it is absent.
                let api: Api<Swarm> = Api::namespaced(ctx.client.clone(), &namespace);
                if !matches!(api.get_opt(swarm).await, Ok(None)) {
                    continue;
                }
                let key = (sts.uid().unwrap_or_default(), swarm.clone());
                orphaned_now.insert(key.clone());
                if reported.insert(key) {
                    let note = format!(
                        "{} {namespace}/{} is labelled {}={swarm} but Swarm {swarm} does not exist in {namespace}",
                        K::kind(&()),
                        sts.name_any(),
                        names::LABEL_SWARM
                    );
                    warn!("{note}");
                    publish_on(&ctx, &sts.object_ref(&()), true, "SwarmNotFound", &note).await;
                }
            }
            // Forget resolved ones so that a relapse is reported again.
            reported.retain(|key| orphaned_now.contains(key));
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn two_controllers_outside_a_pod_on_one_host_get_different_identities() {
        let first = super::default_identity(None, Some("myhost"), 12345);
        let second = super::default_identity(None, Some("myhost"), 12346);
        assert_eq!(first, "myhost-12345");
        assert_ne!(first, second);
        // No host name (or an empty one): still one identity per process.
        assert_ne!(
            super::default_identity(None, Some(""), 1),
            super::default_identity(None, None, 2)
        );
        assert_eq!(super::default_identity(None, None, 7), "shoal-controller-7");
    }

    #[test]
    fn in_a_pod_the_identity_is_the_pod_name() {
        assert_eq!(
            super::default_identity(Some("shoal-controller-7d9f-abcde"), Some("node-1"), 1),
            "shoal-controller-7d9f-abcde"
        );
        assert_eq!(
            super::default_identity(Some(" "), Some("node-1"), 1),
            "node-1-1"
        );
    }

    use super::*;
    use kube::runtime::watcher::Event;

    fn swarm(name: &str, jobs_from: Option<&str>) -> Swarm {
        let mut spec = serde_json::json!({});
        if let Some(cm) = jobs_from {
            spec = serde_json::json!({"jobsFrom": {"configMapKeyRef": {"name": cm, "key": "config.yml"}}});
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "shoal.dev/v1alpha1",
            "kind": "Swarm",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": spec,
        }))
        .expect("valid Swarm")
    }

    fn swarm_store(swarms: Vec<Swarm>) -> Store<Swarm> {
        let (reader, mut writer) = kube::runtime::reflector::store::<Swarm>();
        for swarm in swarms {
            writer.apply_watcher_event(&Event::Apply(swarm));
        }
        reader
    }

    fn names(refs: Vec<ObjectRef<Swarm>>) -> Vec<String> {
        let mut names: Vec<String> = refs.into_iter().map(|r| r.name).collect();
        names.sort();
        names
    }

    #[test]
    fn a_job_configmap_maps_to_every_swarm_reading_it() {
        let store = swarm_store(vec![
            swarm("a", Some("jobs")),
            swarm("b", Some("jobs")),
            swarm("c", Some("other")),
        ]);
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "jobs", "namespace": "ns"}
        }))
        .unwrap();
        assert_eq!(names(config_map_swarms(&cm, &store)), ["a", "b"]);
    }

    #[test]
    fn a_part_of_a_job_list_maps_to_the_swarms_listing_it_or_selecting_its_labels() {
        let with_spec = |name: &str, jobs_from: serde_json::Value| -> Swarm {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "shoal.dev/v1alpha1",
                "kind": "Swarm",
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"jobsFrom": jobs_from},
            }))
            .expect("valid Swarm")
        };
        let store = swarm_store(vec![
            with_spec(
                "listed",
                serde_json::json!({"configMapKeyRefs": [
                    {"name": "jobs-a", "key": "config.yml"},
                    {"name": "jobs-b", "key": "config.yml"},
                ]}),
            ),
            with_spec(
                "selected",
                serde_json::json!({"selector": {"matchLabels": {"app": "streams"}, "key": "config.yml"}}),
            ),
            with_spec(
                "elsewhere",
                serde_json::json!({"selector": {"matchLabels": {"app": "other"}, "key": "config.yml"}}),
            ),
        ]);
        let part = |name: &str, labels: serde_json::Value| -> ConfigMap {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "ns", "labels": labels}
            }))
            .unwrap()
        };
        let both = part("jobs-b", serde_json::json!({"app": "streams"}));
        assert_eq!(
            names(config_map_swarms(&both, &store)),
            ["listed", "selected"]
        );
        let unlabelled = part("jobs-c", serde_json::json!({}));
        assert!(config_map_swarms(&unlabelled, &store).is_empty());
    }

    #[test]
    fn a_slice_configmap_maps_to_its_swarm_by_label() {
        let store = swarm_store(vec![]);
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "worker-0-slice", "namespace": "ns", "labels": {"shoal.dev/swarm": "demo"}}
        }))
        .unwrap();
        assert_eq!(names(config_map_swarms(&cm, &store)), ["demo"]);
    }

    #[test]
    fn an_unlabelled_statefulset_maps_to_every_swarm_of_its_namespace() {
        let store = swarm_store(vec![swarm("a", None), swarm("b", None)]);
        let sts: StatefulSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "worker", "namespace": "ns"}
        }))
        .unwrap();
        assert_eq!(names(pool_swarms(&sts, &store)), ["a", "b"]);
        let labelled: StatefulSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "worker", "namespace": "ns", "labels": {"shoal.dev/swarm": "b"}}
        }))
        .unwrap();
        assert_eq!(names(pool_swarms(&labelled, &store)), ["b"]);
    }
}
