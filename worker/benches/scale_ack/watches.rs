//! What the bench sees, as watches deliver it, stamped on arrival: every
//! member Lease's acknowledgement ([`AckLog`]), the milestones of a scale
//! event ([`Timeline`]: pods Ready or leaving, slice ConfigMaps written), the
//! Swarm's status; and one sidecar per live member pod ([`follow_pods`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use shoal_controller::api::swarm::{Swarm, SwarmStatus};
use shoal_emulator::sim::is_running_and_ready;
use shoal_worker::{Settings, Worker};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::{POOL, SWARM};

pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// An acknowledgement as a Lease carries it: slice revision and hash.
pub type Ack = (u64, String);

/// Every change of each member's acknowledgement, with when the watch saw it.
#[derive(Default)]
pub struct AckLog {
    current: BTreeMap<String, Ack>,
    changes: BTreeMap<String, Vec<(Instant, Ack)>>,
}

impl AckLog {
    fn record(&mut self, member: &str, ack: Ack) {
        if self.current.get(member) == Some(&ack) {
            return;
        }
        self.current.insert(member.to_owned(), ack.clone());
        self.changes
            .entry(member.to_owned())
            .or_default()
            .push((Instant::now(), ack));
    }

    /// When `member`'s Lease came to acknowledge the slice of hash `target`
    /// (no earlier than `since`), if it acknowledges it now.
    pub fn acked_at(&self, member: &str, target: &str, since: Instant) -> Option<Instant> {
        if self.current.get(member).map(|(_, hash)| hash.as_str()) != Some(target) {
            return None;
        }
        let changes = self.changes.get(member)?;
        let at = changes
            .iter()
            .rev()
            .find(|(_, (_, hash))| hash == target)?
            .0;
        Some(at.max(since))
    }
}

/// The acknowledgements, and a signal on each change.
#[derive(Clone, Default)]
pub struct Acks {
    pub log: Arc<Mutex<AckLog>>,
    pub changed: Arc<Notify>,
}

fn lease_ack(lease: &Lease) -> Option<(String, Ack)> {
    let member = lease.name_any().strip_suffix("-member")?.to_owned();
    let annotations = lease.metadata.annotations.as_ref()?;
    let revision = annotations.get("shoal.dev/acked-revision")?.parse().ok()?;
    let hash = annotations.get("shoal.dev/acked-hash")?.clone();
    Some((member, (revision, hash)))
}

/// Records every member Lease's acknowledgement as the watch delivers it.
pub fn watch_acks(client: Client, namespace: &str, acks: Acks) -> JoinHandle<()> {
    let leases: Api<Lease> = Api::namespaced(client, namespace);
    tokio::spawn(async move {
        let mut events = watcher(leases, watcher::Config::default()).boxed();
        while let Some(event) = events.next().await {
            let lease = match event {
                Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) => lease,
                _ => continue,
            };
            if let Some((member, ack)) = lease_ack(&lease) {
                lock(&acks.log).record(&member, ack);
                acks.changed.notify_waiters();
            }
        }
    })
}

/// The Swarm's latest status as its watch delivers it.
pub fn watch_swarm(
    client: Client,
    namespace: &str,
) -> (JoinHandle<()>, watch::Receiver<Option<SwarmStatus>>) {
    let swarms: Api<Swarm> = Api::namespaced(client, namespace);
    let (sender, receiver) = watch::channel(None);
    let task = tokio::spawn(async move {
        let config = watcher::Config::default().fields(&format!("metadata.name={SWARM}"));
        let mut events = watcher(swarms, config).boxed();
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Apply(swarm) | watcher::Event::InitApply(swarm)) = event {
                sender.send_replace(swarm.status);
            }
        }
    });
    (task, receiver)
}

/// Milestones of a scale event, for the breakdown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Milestone {
    /// A member pod became Ready.
    PodReady(String),
    /// A member pod was marked for deletion.
    PodLeaving(String),
    /// The controller wrote a member's slice ConfigMap.
    SliceWritten,
}

/// Milestones with when this process saw them.
pub type Timeline = Arc<Mutex<Vec<(Instant, Milestone)>>>;

/// Records every write of a slice ConfigMap as the watch delivers it.
pub fn watch_slices(client: Client, namespace: &str, timeline: Timeline) -> JoinHandle<()> {
    let config_maps: Api<ConfigMap> = Api::namespaced(client, namespace);
    tokio::spawn(async move {
        let config = watcher::Config::default().labels(&format!("shoal.dev/swarm={SWARM}"));
        let mut events = watcher(config_maps, config).boxed();
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Apply(config_map)) = event
                && config_map.name_any().ends_with("-slice")
            {
                lock(&timeline).push((Instant::now(), Milestone::SliceWritten));
            }
        }
    })
}

/// The sidecars, by member.
pub type Sidecars = Arc<tokio::sync::Mutex<BTreeMap<String, Worker>>>;

/// Where the pod follower puts what it sees.
pub struct PodFollower {
    /// The sidecars' client (their own user at the API server).
    pub client: Client,
    pub namespace: String,
    /// Where the sidecars write their slice files.
    pub directory: PathBuf,
    pub sidecars: Sidecars,
    pub timeline: Timeline,
}

/// One sidecar per live member pod: started when the pod appears, stopped
/// when it is marked for deletion (the kubelet stops its containers).
pub fn follow_pods(follower: PodFollower) -> JoinHandle<()> {
    let pods: Api<Pod> = Api::namespaced(follower.client.clone(), &follower.namespace);
    tokio::spawn(async move {
        // Pod uids already seen Ready / leaving, to record each transition once.
        let mut seen_ready = BTreeSet::new();
        let mut seen_leaving = BTreeSet::new();
        let config = watcher::Config::default().labels(&format!("app={POOL}"));
        let mut events = watcher(pods, config).boxed();
        while let Some(event) = events.next().await {
            let (pod, alive) = match event {
                Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                    let alive = pod.metadata.deletion_timestamp.is_none();
                    (pod, alive)
                }
                Ok(watcher::Event::Delete(pod)) => (pod, false),
                _ => continue,
            };
            let member = pod.name_any();
            let uid = pod.uid().unwrap_or_default();
            if alive && is_running_and_ready(&pod) && seen_ready.insert(uid.clone()) {
                let ready = Milestone::PodReady(member.clone());
                lock(&follower.timeline).push((Instant::now(), ready));
            }
            if !alive && seen_leaving.insert(uid) {
                let leaving = Milestone::PodLeaving(member.clone());
                lock(&follower.timeline).push((Instant::now(), leaving));
            }
            run_sidecar_while_alive(&follower, member, alive).await;
        }
    })
}

/// Starts `member`'s sidecar if it is alive and has none, stops it if it is not.
async fn run_sidecar_while_alive(follower: &PodFollower, member: String, alive: bool) {
    let mut running = follower.sidecars.lock().await;
    if alive && !running.contains_key(&member) {
        let mut settings = Settings::for_member(&member, &follower.namespace);
        settings.slice_file = Some(follower.directory.join(format!("{member}.yaml")));
        settings.ack_on_apply = true;
        match Worker::start(follower.client.clone(), settings).await {
            Ok(worker) => {
                running.insert(member, worker);
            }
            Err(error) => panic!("cannot start the sidecar of {member}: {error}"),
        }
    } else if !alive && let Some(worker) = running.remove(&member) {
        drop(running);
        if let Err(error) = worker.stop().await {
            panic!("the sidecar of {member} failed: {error}");
        }
    }
}
