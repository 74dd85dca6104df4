//! The Swarm's observe: everything [`crate::swarm::decide`] looks at, read from the
//! cluster into an [`Observation`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::ListParams;
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt};
use shoal_core::names::{self, ANNOTATION_CHECKSUM, REVISION_DATA_KEY};

use super::reconcile::Error;
use crate::api::deployment_plan::DeploymentPlan;
use crate::api::swarm::{JobsFrom, Swarm};
use crate::cluster::config_maps::{
    edited_by, owned_by, owner_description, parts_of, read_text, slice_object,
};
use crate::cluster::decoded::{Decoded, Pass};
use crate::cluster::is_not_found;
use crate::cluster::leases::lease_state;
use crate::cluster::pools::{ListError, PodSource, observe_deployment_pool, observe_pool};
use crate::cluster::watched::Watched;
use crate::managed_fields;
use crate::observed::{LeaseState, PoolState, SliceObject};
use crate::swarm::decide::{self, JobSource, Observation, RevisionRecord};

/// Reads everything `plan` needs from the cluster: the pools, the ConfigMaps the Swarm
/// owns, its `jobsFrom`, the member Leases and the plans delivered through it. Revision
/// records are decoded through `memo` (the controller's, [`crate::cluster::Context`]): a
/// record read by the Swarm's previous pass from the same ConfigMap versions is not
/// decoded again. `None` decodes every record (a one-off reader). Pools and pods are read
/// from `watched`, the controller's watch caches, when given
/// ([`crate::cluster::watched`]: why that is safe), and listed otherwise.
pub async fn observe(
    swarm: &Swarm,
    client: &Client,
    memo: Option<&Decoded>,
    watched: Option<&Watched>,
) -> Result<Observation, Error> {
    let name = swarm.name_any();
    let namespace = swarm
        .namespace()
        .ok_or_else(|| Error::MissingNamespace(name.clone()))?;
    let cm_api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let uid = swarm.uid().unwrap_or_default();
    let in_force = swarm
        .status
        .as_ref()
        .map_or(0, |status| status.current_revision);
    let mut records = match memo {
        Some(memo) => memo.pass(memo_scope(&namespace, &name, &uid)),
        None => Pass::uncached(),
    };
    // The reads do not depend on one another (Leases only on the pools): they go out
    // together, and what they return is sorted and decoded afterwards.
    let members = async {
        let pools = read_pools(client, &namespace, &name, watched).await?;
        let leases = read_member_leases(client, &namespace, &name, &pools).await?;
        Ok::<_, Error>((pools, leases))
    };
    // With a memo, the job list's ConfigMaps are read by metadata first: their text is
    // the memo's while they are unchanged (see `read_jobs_from`).
    let metadata_first = records.keeps();
    let job_config_maps = async {
        match &swarm.spec.jobs_from {
            None => Ok(None),
            Some(from) => fetch_job_config_maps(&cm_api, from, metadata_first)
                .await
                .map(Some),
        }
    };
    let (mut config_maps, job_config_maps, (pools, leases), plans) = futures::try_join!(
        read_config_maps(&cm_api, &name, &uid, in_force, &mut records),
        job_config_maps,
        members,
        read_plans(client, &namespace, &name),
    )?;
    let (job_source, job_config_maps) = match (&swarm.spec.jobs_from, job_config_maps) {
        (Some(from), Some(fetched)) => {
            let mut documents = JobDocuments {
                swarm: &name,
                records: &mut records,
                parsed: &mut config_maps.parsed,
            };
            let (source, read) = read_jobs_from(&cm_api, from, fetched, &mut documents).await?;
            (source, Some(read))
        }
        _ => (JobSource::NotReferenced, None),
    };
    config_maps.parsed.job_list = Some(merged_job_list(
        swarm,
        &job_source,
        job_config_maps.as_ref(),
        &config_maps.parsed,
        &mut records,
    ));
    drop(records);
    Ok(Observation {
        swarm: name,
        generation: swarm.metadata.generation,
        spec: swarm.spec.clone(),
        annotations: swarm.annotations().clone(),
        status: swarm.status.clone().unwrap_or_default(),
        pools,
        job_source,
        slices: config_maps.slices,
        leases,
        history: config_maps.history,
        damaged_history: config_maps.damaged_history,
        index: config_maps.index,
        owned_config_maps: config_maps.owned,
        foreign_config_maps: config_maps.foreign,
        edited_config_maps: config_maps.edited,
        blocked_evictions: BTreeMap::new(),
        plans,
        // Read by the reconciler (`reconcile`), which knows whether it may look.
        approved_by_policy: false,
        now: jiff::Timestamp::now(),
        parsed: config_maps.parsed,
    })
}

/// The Swarm's pools: the StatefulSets and the Deployments labelled for it, each with
/// its pods.
async fn read_pools(
    client: &Client,
    namespace: &str,
    swarm: &str,
    watched: Option<&Watched>,
) -> Result<Vec<PoolState>, Error> {
    let (statefulsets, deployments) = match watched {
        Some(watched) => watched_pools(watched, namespace, swarm),
        None => list_pools(client, namespace, swarm).await?,
    };
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pods = match watched {
        Some(watched) => PodSource::Watched {
            store: &watched.pods,
            namespace,
        },
        None => PodSource::Listed(&pod_api),
    };
    let mut pools = Vec::new();
    for sts in &statefulsets {
        let pool = observe_pool(pods, sts)
            .await
            .map_err(|source| Error::ListPods {
                swarm: swarm.to_owned(),
                source,
            })?;
        pools.push(pool);
    }
    let replica_set_api: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
    for deployment in &deployments {
        let pool = observe_deployment_pool(&replica_set_api, pods, deployment)
            .await
            .map_err(|ListError { kind, source }| match kind {
                "pods" => Error::ListPods {
                    swarm: swarm.to_owned(),
                    source,
                },
                kind => Error::ListPools {
                    kind,
                    swarm: swarm.to_owned(),
                    source,
                },
            })?;
        pools.push(pool);
    }
    Ok(pools)
}

/// The ConfigMaps labelled for Swarm `swarm` (uid `uid`), sorted, with the record of
/// revision `in_force` replayed (once per version of its ConfigMaps).
///
/// With a memo (`records` keeps), a pass lists them by metadata only (uid,
/// `resourceVersion`, labels, annotations, owners, managedFields: all that sorting them
/// needs besides their data): what the memo keeps from those very versions (decoded by an
/// earlier pass, or written by the controller itself, see `apply`) is not read again, and
/// only the ConfigMaps of what it does not keep are read in full, each on its own. A pass
/// over slices and records that only the controller changed moves none of their bytes.
/// When more than a quarter missed (the first pass, many edits), and without a memo, it
/// lists every labelled ConfigMap in full, in one list, as one snapshot.
async fn read_config_maps(
    cm_api: &Api<ConfigMap>,
    swarm: &str,
    uid: &str,
    in_force: u64,
    records: &mut Pass<'_>,
) -> Result<SwarmConfigMaps, Error> {
    let selector = format!("{}={swarm}", names::LABEL_SWARM);
    let failed = |source| Error::ListConfigMaps {
        swarm: swarm.to_owned(),
        source,
    };
    if records.keeps() {
        let mut listed: Vec<ConfigMap> = cm_api
            .list_metadata(&ListParams::default().labels(&selector))
            .await
            .map_err(failed)?
            .items
            .into_iter()
            .map(|cm| ConfigMap {
                metadata: cm.metadata,
                ..ConfigMap::default()
            })
            .collect();
        records.missed.clear();
        let without_data = WithData::Only(BTreeSet::new());
        let sorted =
            SwarmConfigMaps::sort(swarm, uid, in_force, listed.clone(), &without_data, records);
        if records.missed.is_empty() {
            return Ok(sorted);
        }
        if records.missed.len() <= listed.len() / 4 {
            let missed = std::mem::take(&mut records.missed);
            let read = read_each(cm_api, &missed).await?;
            listed.retain(|cm| !missed.contains(&cm.name_any()));
            listed.extend(read);
            let sorted = SwarmConfigMaps::sort(
                swarm,
                uid,
                in_force,
                listed,
                &WithData::Only(missed),
                records,
            );
            if records.missed.is_empty() {
                return Ok(sorted);
            }
        }
    }
    let listed = cm_api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(failed)?;
    Ok(SwarmConfigMaps::sort(
        swarm,
        uid,
        in_force,
        listed.items,
        &WithData::All,
        records,
    ))
}

/// Most ConfigMaps read at once by [`read_each`].
const READS_IN_FLIGHT: usize = 16;

/// Reads each ConfigMap named in full, at most [`READS_IN_FLIGHT`] at once; one deleted
/// since it was listed is left out, as a list taken now would.
async fn read_each(
    cm_api: &Api<ConfigMap>,
    names: &BTreeSet<String>,
) -> Result<Vec<ConfigMap>, Error> {
    // Collected first: a closure held across the awaits below would keep the reconcile
    // future from being `Send` (rustc cannot see it general over lifetimes).
    let reads: Vec<_> = names.iter().map(|name| read_one(cm_api, name)).collect();
    let read: Vec<Option<ConfigMap>> = futures::stream::iter(reads)
        .buffer_unordered(READS_IN_FLIGHT)
        .try_collect()
        .await?;
    Ok(read.into_iter().flatten().collect())
}

/// ConfigMap `name` in full, `None` when it does not exist.
async fn read_one(cm_api: &Api<ConfigMap>, name: &str) -> Result<Option<ConfigMap>, Error> {
    cm_api
        .get_opt(name)
        .await
        .map_err(|source| Error::ReadConfigMap {
            name: name.to_owned(),
            source,
        })
}

/// Which ConfigMaps handed to [`SwarmConfigMaps::sort`] carry their data.
enum WithData {
    /// Every one (a full list).
    All,
    /// Those named, read in full; the others were listed by metadata only.
    Only(BTreeSet<String>),
}

impl WithData {
    /// Whether every one of `sources` carries its data.
    fn all(&self, sources: &[&ConfigMap]) -> bool {
        match self {
            WithData::All => true,
            WithData::Only(names) => sources.iter().all(|cm| names.contains(&cm.name_any())),
        }
    }

    /// Sets `records` to decode from `sources` only if they carry their data.
    fn set_for(&self, records: &mut Pass<'_>, sources: &[&ConfigMap]) {
        records.metadata_only(!self.all(sources));
    }
}

/// The scope of a Swarm's entries in the memo of decoded records: a Swarm deleted and
/// created again under its name is another Swarm.
pub fn memo_scope(namespace: &str, swarm: &str, uid: &str) -> String {
    format!("{namespace}/{swarm}/{uid}")
}

/// The ConfigMaps labelled for a Swarm, sorted by what they are to it.
#[derive(Debug, Default)]
struct SwarmConfigMaps {
    /// Member (pod name) → its slice, from the ConfigMaps the Swarm owns.
    slices: BTreeMap<String, SliceObject>,
    /// Revision → its record, from history ConfigMaps nobody else edited.
    history: BTreeMap<u64, Arc<RevisionRecord>>,
    /// Revision → why its split record cannot be used.
    damaged_history: BTreeMap<u64, String>,
    /// The index document, unless someone else edited it.
    index: Option<String>,
    /// Name → uid of every ConfigMap the Swarm owns.
    owned: BTreeMap<String, String>,
    /// Name → who owns it, of every labelled ConfigMap the Swarm does not own.
    foreign: BTreeMap<String, String>,
    /// Name → the field manager that edited its data, of owned ConfigMaps.
    edited: BTreeMap<String, String>,
    /// The slices above, parsed (once per version of their ConfigMaps).
    parsed: decide::Parsed,
}

impl SwarmConfigMaps {
    /// Sorts the ConfigMaps labelled for Swarm `swarm` (uid `swarm_uid`). A label proves
    /// nothing (anyone may set it): only what the Swarm owns is read, and of that, no
    /// history record or index someone else edited. Records are decoded through
    /// `records`: once per ConfigMap version.
    fn sort(
        swarm: &str,
        swarm_uid: &str,
        in_force: u64,
        config_maps: Vec<ConfigMap>,
        with_data: &WithData,
        records: &mut Pass<'_>,
    ) -> SwarmConfigMaps {
        let mut sorted = SwarmConfigMaps::default();
        let mut slice_maps: BTreeMap<String, ConfigMap> = BTreeMap::new();
        // History ConfigMaps, records and parts of split records alike.
        let mut record_maps: BTreeMap<String, ConfigMap> = BTreeMap::new();
        for cm in config_maps {
            let cm_name = cm.name_any();
            if !owned_by(&cm, swarm_uid) {
                sorted.foreign.insert(cm_name, owner_description(&cm));
                continue;
            }
            sorted
                .owned
                .insert(cm_name.clone(), cm.uid().unwrap_or_default());
            let edited = edited_by(&cm);
            let is_history = cm
                .labels()
                .get(names::LABEL_REVISION_HISTORY)
                .is_some_and(|value| value == "true");
            if is_history && edited.is_none() {
                with_data.set_for(records, &[&cm]);
                let record = records
                    .get_or_decode("record", &[&cm], || {
                        read_text(&cm, REVISION_DATA_KEY)
                            .and_then(|text| serde_json::from_str::<RevisionRecord>(&text).ok())
                            .map(Arc::new)
                    })
                    .flatten();
                if let Some(record) = record {
                    sorted.history.insert(record.revision, record);
                }
                record_maps.insert(cm_name.clone(), cm);
            } else if is_history {
                // A record someone else changed is no record of what this Swarm decided.
            } else if cm.labels().contains_key(names::LABEL_MEMBER) {
                slice_maps.insert(cm_name.clone(), cm);
            } else if cm_name == names::index_configmap(swarm) && edited.is_none() {
                with_data.set_for(records, &[&cm]);
                sorted.index = records
                    .get_or_decode("index", &[&cm], || read_text(&cm, names::INDEX_DATA_KEY))
                    .flatten();
            }
            if let Some(editor) = edited {
                sorted.edited.insert(cm_name, editor);
            }
        }
        for (revision, joined) in split_records(swarm, &record_maps, with_data, records) {
            match joined {
                Ok(record) => {
                    sorted.history.insert(revision, record);
                }
                Err(why) => {
                    sorted.damaged_history.insert(revision, why);
                }
            }
        }
        // Replayed from a record kept or read above, never from the ConfigMaps' data.
        records.metadata_only(false);
        if let Some(record) = sorted.history.get(&in_force).filter(|r| !r.jobs_omitted) {
            let sources = record_sources(swarm, in_force, &record_maps);
            let replayed =
                records.get_or_decode("replay", &sources, || Arc::new(decide::replay(record)));
            sorted.parsed.replayed = replayed.map(|replayed| (in_force, replayed));
        }
        read_slices(swarm, &slice_maps, with_data, records, &mut sorted);
        records.metadata_only(false);
        sorted
    }
}

/// Reads every member's slice out of the Swarm's own, unedited slice ConfigMaps
/// `slice_maps` into `sorted`: the slice as read and parsed, each decoded once per
/// version of its ConfigMaps (gunzip, parse and render again was most of a pass over
/// unchanged slices). A slice not kept whose ConfigMaps lack their data is left out and
/// named in `records.missed`.
fn read_slices(
    swarm: &str,
    slice_maps: &BTreeMap<String, ConfigMap>,
    with_data: &WithData,
    records: &mut Pass<'_>,
    sorted: &mut SwarmConfigMaps,
) {
    for (cm_name, cm) in slice_maps {
        let Some(member) = cm.labels().get(names::LABEL_MEMBER) else {
            continue;
        };
        // Parts 1.. of a split slice are read through their first ConfigMap.
        if *cm_name != names::slice_configmap(member) {
            continue;
        }
        let sources: Vec<&ConfigMap> = (0..parts_of(cm))
            .filter_map(|part| slice_maps.get(&names::slice_configmap_part(member, part)))
            .collect();
        with_data.set_for(records, &sources);
        let read = records.get_or_decode("slice", &sources, || {
            let object = slice_object(member, cm, slice_maps);
            let parsed = Arc::new(decide::parsed_slice(swarm, member, &object));
            (object, parsed)
        });
        if let Some((object, parsed)) = read {
            sorted.parsed.slices.insert(member.clone(), parsed);
            sorted.slices.insert(member.clone(), object);
        }
    }
}

/// Keeps in `memo` what a pass of Swarm `swarm` would decode from the ConfigMaps the
/// controller just `written` (as the API server returned them): the same decoding, under
/// the same keys, as [`SwarmConfigMaps::sort`]. The next pass lists them by metadata and
/// finds them; a later write by anyone gives a ConfigMap another `resourceVersion`, and
/// that version is read. A split slice or record is kept only when all its parts are
/// among `written`, as they are when it is written whole.
pub fn remember_written(memo: &Decoded, swarm: &Swarm, written: Vec<ConfigMap>) {
    let name = swarm.name_any();
    let uid = swarm.uid().unwrap_or_default();
    let scope = memo_scope(&swarm.namespace().unwrap_or_default(), &name, &uid);
    let mut adding = memo.adding(scope);
    SwarmConfigMaps::sort(&name, &uid, 0, written, &WithData::All, &mut adding);
}

/// The member Leases of the Swarm's pods, by pod name.
async fn read_member_leases(
    client: &Client,
    namespace: &str,
    swarm: &str,
    pools: &[PoolState],
) -> Result<BTreeMap<String, LeaseState>, Error> {
    let member_names = lease_holders(pools);
    let Some(selector) = member_lease_selector(&member_names) else {
        return Ok(BTreeMap::new());
    };
    // Listed every pass, never read from a cache (`cluster::watched`: a Lease is liveness).
    let leases = Api::<Lease>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| Error::ListLeases {
            swarm: swarm.to_owned(),
            source,
        })?
        .items;
    Ok(leases
        .iter()
        .filter_map(|lease| {
            let pod = lease.name_any().strip_suffix("-member")?.to_owned();
            member_names
                .contains(&pod)
                .then(|| (pod, lease_state(lease)))
        })
        .collect())
}

/// The plans naming the Swarm, as delivery reads them. Without the DeploymentPlan CRD
/// installed (404) there are no plans: Swarms work alone. Refused (403: a role without
/// access, such as the plugin's viewer) the instances in the slices are kept as they
/// are; any other failure fails the pass.
async fn read_plans(
    client: &Client,
    namespace: &str,
    swarm: &str,
) -> Result<Result<Vec<decide::PlanForDelivery>, String>, Error> {
    match Api::<DeploymentPlan>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => Ok(Ok(list
            .items
            .iter()
            .filter(|plan| plan.spec.swarm == swarm)
            .filter_map(plan_for_delivery)
            .collect())),
        Err(source) if is_not_found(&source) => Ok(Ok(Vec::new())),
        Err(kube::Error::Api(status)) if status.code == 403 => Ok(Err(format!(
            "listing DeploymentPlans was refused: {}",
            status.message
        ))),
        Err(source) => Err(Error::ListPlans {
            swarm: swarm.to_owned(),
            source,
        }),
    }
}

/// A plan naming the Swarm, as delivery reads it; `None` while the controller has not
/// written its status yet (it has no instances then). A status whose instances or
/// deployments someone other than the controller wrote (a user with access to the status
/// subresource) is not trusted: it could hand a member any payload without approval.
fn plan_for_delivery(plan: &DeploymentPlan) -> Option<decide::PlanForDelivery> {
    let status = plan.status.clone()?;
    let entries = plan.metadata.managed_fields.as_deref().unwrap_or_default();
    if !managed_fields::controller_owns(entries, &["status"], &|_| true) {
        return None;
    }
    // The plan controller puts such a record back (`deployment_plan::decide::drift`); meanwhile the
    // slices keep what they hold.
    let editor = managed_fields::plan_record_editors(entries)
        .into_values()
        .next();
    Some(decide::PlanForDelivery {
        name: plan.name_any(),
        status: match editor {
            None => Ok(status),
            Some(manager) => Err(format!(
                "status.instances or status.deployments was written by {manager}, not by the controller; they are delivered again once the controller has rewritten them"
            )),
        },
    })
}

/// The pods whose member Leases the plan reads: the members in `0..replicas` of each pool,
/// at most [`decide::MAX_MEMBERS`] in all (`spec.replicas` is input: a scale to two billion
/// must not build two billion names; beyond the bound the plan reports TooManyMembers and
/// keeps the revision in force), and every existing pod (pods beyond `replicas`, scaling
/// down, still hold their jobs until they acknowledge).
fn lease_holders(pools: &[PoolState]) -> std::collections::BTreeSet<String> {
    let mut room = decide::MAX_MEMBERS;
    let mut names = std::collections::BTreeSet::new();
    for pool in pools {
        if let Some(pods) = &pool.deployment_pods {
            // A Deployment's members are its pods: there are no names beyond them.
            room = room.saturating_sub(u32::try_from(pods.len()).unwrap_or(u32::MAX));
            names.extend(pods.keys().cloned());
            continue;
        }
        let members = pool.replicas.min(room);
        room -= members;
        names.extend(
            (0..members)
                .chain(pool.pods.keys().copied())
                .map(|ordinal| format!("{}-{ordinal}", pool.name)),
        );
    }
    names
}

/// Most members named in a Lease list's selector; beyond, the URL would grow too long.
const MAX_NAMED_LEASES: usize = 100;

/// The label selector of the member Leases to read: the sidecar labels its Lease
/// `shoal.dev/member=<pod>`, so a few members are named (`in (...)`, nothing of other
/// Swarms listed); many are read from every member Lease of the namespace, kept by name
/// afterwards. `None`: no member, nothing to read.
fn member_lease_selector(members: &std::collections::BTreeSet<String>) -> Option<String> {
    if members.is_empty() {
        return None;
    }
    if members.len() > MAX_NAMED_LEASES {
        return Some(names::LABEL_MEMBER.to_owned());
    }
    let named: Vec<&str> = members.iter().map(String::as_str).collect();
    Some(format!("{} in ({})", names::LABEL_MEMBER, named.join(",")))
}

/// The StatefulSets and Deployments labelled for Swarm `swarm` in the watch caches.
fn watched_pools(
    watched: &Watched,
    namespace: &str,
    swarm: &str,
) -> (Vec<StatefulSet>, Vec<Deployment>) {
    (
        labelled_for(&watched.statefulsets, namespace, swarm),
        labelled_for(&watched.deployments, namespace, swarm),
    )
}

/// The objects of `store` in `namespace` labelled for Swarm `swarm`, sorted by name as a
/// list returns them (a cache is unordered).
fn labelled_for<K>(store: &Store<K>, namespace: &str, swarm: &str) -> Vec<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let mut pools: Vec<K> = store
        .state_filter(|pool| {
            pool.meta().namespace.as_deref() == Some(namespace)
                && pool
                    .labels()
                    .get(names::LABEL_SWARM)
                    .is_some_and(|label| label == swarm)
        })
        .iter()
        .map(|pool| K::clone(pool))
        .collect();
    pools.sort_by_key(ResourceExt::name_any);
    pools
}

/// The StatefulSets and Deployments labelled for Swarm `swarm`: its pools.
async fn list_pools(
    client: &Client,
    namespace: &str,
    swarm: &str,
) -> Result<(Vec<StatefulSet>, Vec<Deployment>), Error> {
    let list = ListParams::default().labels(&format!("{}={swarm}", names::LABEL_SWARM));
    let failed = |kind: &'static str| {
        move |source| Error::ListPools {
            kind,
            swarm: swarm.to_owned(),
            source,
        }
    };
    let statefulsets = Api::<StatefulSet>::namespaced(client.clone(), namespace)
        .list(&list)
        .await
        .map_err(failed("StatefulSets"))?;
    let deployments = Api::<Deployment>::namespaced(client.clone(), namespace)
        .list(&list)
        .await
        .map_err(failed("Deployments"))?;
    Ok((statefulsets.items, deployments.items))
}

/// A pool's `spec.replicas` as the controller reads it (absent: 1, as the API server
/// defaults it).
fn replicas_of(replicas: Option<i32>) -> u32 {
    replicas.unwrap_or(1).max(0) as u32
}

/// The inputs outside the Swarm that its status records (`status.observedInputs`), read
/// now: what `kubectl shoal wait` compares with the status, without the rest of an
/// observation (pods, slices, Leases are the controller's to judge).
pub async fn observe_inputs(
    swarm: &Swarm,
    client: &Client,
) -> Result<crate::api::swarm::ObservedInputs, Error> {
    let name = swarm.name_any();
    let namespace = swarm
        .namespace()
        .ok_or_else(|| Error::MissingNamespace(name.clone()))?;
    let (statefulsets, deployments) = list_pools(client, &namespace, &name).await?;
    let mut pools: Vec<(String, u32)> = statefulsets
        .iter()
        .map(|sts| {
            let replicas = sts.spec.as_ref().and_then(|spec| spec.replicas);
            (sts.name_any(), replicas_of(replicas))
        })
        .collect();
    pools.extend(deployments.iter().map(|deployment| {
        let replicas = deployment.spec.as_ref().and_then(|spec| spec.replicas);
        (deployment.name_any(), replicas_of(replicas))
    }));
    let job_source = match &swarm.spec.jobs_from {
        None => JobSource::NotReferenced,
        Some(from) => {
            let cm_api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
            read_job_sources(&cm_api, from, None).await?
        }
    };
    Ok(decide::observed_inputs(
        pools
            .iter()
            .map(|(pool, replicas)| (pool.as_str(), *replicas)),
        &job_source,
    ))
}

/// Looks up the ConfigMaps a plan would write that observe did not see (observe lists
/// this Swarm's ConfigMaps by label, and a label can be removed by hand): one of this
/// Swarm's becomes owned, anyone else's foreign. Returns whether any was found foreign.
pub async fn check_targets(
    cm_api: &Api<ConfigMap>,
    swarm_uid: &str,
    names: impl IntoIterator<Item = String>,
    observation: &mut Observation,
) -> Result<bool, Error> {
    let mut taken = false;
    for name in names {
        let found = cm_api
            .get_opt(&name)
            .await
            .map_err(|source| Error::ReadConfigMap {
                name: name.clone(),
                source,
            })?;
        let Some(cm) = found else { continue };
        if owned_by(&cm, swarm_uid) {
            observation
                .owned_config_maps
                .insert(name, cm.uid().unwrap_or_default());
        } else {
            observation
                .foreign_config_maps
                .insert(name, owner_description(&cm));
            taken = true;
        }
    }
    Ok(taken)
}

/// The parts `0..parts` of the split record of `revision`, each `None` when absent.
fn record_part_maps<'a>(
    swarm: &str,
    revision: u64,
    parts: usize,
    record_maps: &'a BTreeMap<String, ConfigMap>,
) -> Vec<Option<&'a ConfigMap>> {
    (0..parts)
        .map(|part| record_maps.get(&decide::record_part_configmap(swarm, revision, part)))
        .collect()
}

/// The ConfigMaps the record of `revision` was read from: its own, and the parts present
/// when it is split (what its entry in the memo is keyed by).
fn record_sources<'a>(
    swarm: &str,
    revision: u64,
    record_maps: &'a BTreeMap<String, ConfigMap>,
) -> Vec<&'a ConfigMap> {
    let Some(head) = record_maps.get(&names::revision_configmap(swarm, revision)) else {
        return Vec::new();
    };
    // An unsplit record is its own ConfigMap alone.
    let parts = Some(parts_of(head)).filter(|parts| *parts > 1).unwrap_or(0);
    let mut sources = vec![head];
    sources.extend(
        record_part_maps(swarm, revision, parts, record_maps)
            .into_iter()
            .flatten(),
    );
    sources
}

/// The records split over several ConfigMaps, reassembled (see `decide::join_record`):
/// revision → the record, or why it cannot be used. `record_maps` are the Swarm's own
/// history ConfigMaps (edited ones left out, so a part someone changed is missing).
/// Each record is joined once per version of its ConfigMaps (`records`).
fn split_records(
    swarm: &str,
    record_maps: &BTreeMap<String, ConfigMap>,
    with_data: &WithData,
    records: &mut Pass<'_>,
) -> Vec<(u64, Result<Arc<RevisionRecord>, String>)> {
    let mut joined_records = Vec::new();
    for cm in record_maps.values() {
        let annotations = cm.annotations();
        let parts = parts_of(cm);
        if parts <= 1 {
            continue;
        }
        let Some(revision) = cm
            .labels()
            .get(names::LABEL_REVISION)
            .and_then(|revision| revision.parse::<u64>().ok())
            .filter(|revision| cm.name_any() == names::revision_configmap(swarm, *revision))
        else {
            continue;
        };
        let checksum = annotations
            .get(ANNOTATION_CHECKSUM)
            .cloned()
            .unwrap_or_default();
        let part_maps = record_part_maps(swarm, revision, parts, record_maps);
        // Keyed by every part present (and the head, which carries the count and checksum).
        let mut sources: Vec<&ConfigMap> = vec![cm];
        sources.extend(part_maps.iter().flatten().copied());
        with_data.set_for(records, &sources);
        let joined = records.get_or_decode("split record", &sources, || {
            let chunks: Vec<Option<Vec<u8>>> = part_maps
                .iter()
                .enumerate()
                .map(|(part, found)| {
                    (*found)?
                        .binary_data
                        .as_ref()?
                        .get(&decide::record_part_key(part))
                        .map(|bytes| bytes.0.clone())
                })
                .collect();
            decide::join_record(&chunks, &checksum, &|part| {
                decide::record_part_configmap(swarm, revision, part)
            })
            .and_then(|record| {
                // A record claiming another revision is no record of this one.
                (record.revision == revision)
                    .then(|| Arc::new(record))
                    .ok_or_else(|| {
                        format!(
                            "ConfigMap {}: holds the record of another revision",
                            cm.name_any()
                        )
                    })
            })
        });
        // Not kept, and listed without data: the caller reads the records in full.
        let Some(joined) = joined else { continue };
        joined_records.push((revision, joined));
    }
    joined_records
}

/// Reads every part of a `jobsFrom`: the ConfigMaps it names, in order, or those its
/// selector picks, in name order. One part is returned as itself (the single-ConfigMap
/// form), several as [`JobSource::Parts`].
async fn read_job_sources(
    cm_api: &Api<ConfigMap>,
    from: &JobsFrom,
    parsed: Option<&mut JobDocuments<'_, '_>>,
) -> Result<JobSource, Error> {
    let fetched = fetch_job_config_maps(cm_api, from, false).await?;
    Ok(job_sources(from, &fetched, parsed))
}

/// The ConfigMaps a `jobsFrom` reads, as the API server returned them.
struct JobConfigMaps {
    /// `selector`'s label query and what it selected, sorted by name.
    selected: Option<(String, Vec<ConfigMap>)>,
    /// Each of `named()`'s ConfigMaps, in order; `None`: not found.
    named: Vec<Option<ConfigMap>>,
    /// They were read by metadata only (no `data`).
    metadata_only: bool,
}

/// The job list of `from` read through `documents`'s memo: when the ConfigMaps were read
/// by metadata only and the memo keeps the text of every one of those versions, that is
/// all (a pass over an unchanged job list moves none of its bytes); otherwise they are
/// read again in full, and what changed is parsed.
async fn read_jobs_from(
    cm_api: &Api<ConfigMap>,
    from: &JobsFrom,
    fetched: JobConfigMaps,
    documents: &mut JobDocuments<'_, '_>,
) -> Result<(JobSource, JobConfigMaps), Error> {
    if fetched.metadata_only {
        // Whatever was missed before concerned the other ConfigMaps, read in full since.
        documents.records.missed.clear();
        documents.records.metadata_only(true);
        let source = job_sources(from, &fetched, Some(documents));
        documents.records.metadata_only(false);
        if documents.records.missed.is_empty() {
            return Ok((source, fetched));
        }
    }
    let fetched = fetch_job_config_maps(cm_api, from, false).await?;
    Ok((job_sources(from, &fetched, Some(documents)), fetched))
}

/// The Swarm's whole job list, merged and checked ([`decide::read_job_list`]) once per
/// version of its spec and of the ConfigMaps `read` it comes from: merging and checking
/// 100,000 keys on every pass was a sixth of decide.
fn merged_job_list(
    swarm: &Swarm,
    job_source: &JobSource,
    read: Option<&JobConfigMaps>,
    parsed: &decide::Parsed,
    records: &mut Pass<'_>,
) -> Arc<Result<(shoal_core::JobSet, shoal_core::JobSettings), decide::InputProblem>> {
    use sha2::Digest as _;
    let sources: Vec<&ConfigMap> = read
        .map(|read| {
            let selected = read.selected.iter().flat_map(|(_, listed)| listed);
            selected.chain(read.named.iter().flatten()).collect()
        })
        .unwrap_or_default();
    let spec = serde_json::to_vec(&swarm.spec).unwrap_or_default();
    let what = format!("job list {:x}", sha2::Sha256::digest(&spec));
    let merge = || {
        Arc::new(decide::read_job_list(
            &swarm.name_any(),
            &swarm.spec,
            job_source,
            parsed,
        ))
    };
    records
        .get_or_decode(&what, &sources, merge)
        .unwrap_or_else(merge)
}

/// Reads the ConfigMaps of `from`: the selected ones in one list, the named ones each,
/// together; by metadata only when `metadata_only`.
async fn fetch_job_config_maps(
    cm_api: &Api<ConfigMap>,
    from: &JobsFrom,
    metadata_only: bool,
) -> Result<JobConfigMaps, Error> {
    let metadata = |metadata| ConfigMap {
        metadata,
        ..ConfigMap::default()
    };
    let mut selected = None;
    if let Some(selector) = &from.selector {
        let labels = selector.label_selector();
        let params = ListParams::default().labels(&labels);
        let listed = if metadata_only {
            cm_api.list_metadata(&params).await.map(|list| {
                list.items
                    .into_iter()
                    .map(|cm| metadata(cm.metadata))
                    .collect()
            })
        } else {
            cm_api.list(&params).await.map(|list| list.items)
        };
        let mut listed: Vec<ConfigMap> = listed.map_err(|source| Error::ReadJobConfigMap {
            name: format!("labelled {labels}"),
            source,
        })?;
        listed.sort_by_key(|cm| cm.name_any());
        selected = Some((labels, listed));
    }
    let named = futures::future::try_join_all(from.named().into_iter().map(|reference| async {
        let found = if metadata_only {
            cm_api
                .get_metadata_opt(&reference.name)
                .await
                .map(|found| found.map(|cm| metadata(cm.metadata)))
        } else {
            cm_api.get_opt(&reference.name).await
        };
        match found {
            Err(source) if !is_not_found(&source) => Err(Error::ReadJobConfigMap {
                name: reference.name.clone(),
                source,
            }),
            Err(_) => Ok(None),
            Ok(found) => Ok(found),
        }
    }))
    .await?;
    Ok(JobConfigMaps {
        selected,
        named,
        metadata_only,
    })
}

/// The job list `from` reads, out of its ConfigMaps `fetched`; each document is also
/// parsed into `parsed` when given.
fn job_sources(
    from: &JobsFrom,
    fetched: &JobConfigMaps,
    mut parsed: Option<&mut JobDocuments<'_, '_>>,
) -> JobSource {
    let mut parts = Vec::new();
    if let (Some(selector), Some((labels, listed))) = (&from.selector, &fetched.selected) {
        if listed.is_empty() {
            return JobSource::NoMatch {
                selector: labels.clone(),
            };
        }
        parts.extend(listed.iter().map(|cm| {
            job_source_of(
                cm.name_any(),
                &selector.key,
                Some(cm),
                parsed.as_deref_mut(),
            )
        }));
    }
    for (reference, cm) in from.named().into_iter().zip(&fetched.named) {
        parts.push(job_source_of(
            reference.name.clone(),
            &reference.key,
            cm.as_ref(),
            parsed.as_deref_mut(),
        ));
    }
    match parts.len() {
        1 => parts.remove(0),
        _ => JobSource::Parts(parts),
    }
}

/// Where the job-list documents of a Swarm's `jobsFrom` go once parsed
/// ([`decide::Parsed::job_documents`]), each once per version of its ConfigMap (`records`,
/// the controller's memo).
struct JobDocuments<'a, 'memo> {
    swarm: &'a str,
    records: &'a mut Pass<'memo>,
    parsed: &'a mut decide::Parsed,
}

/// Where one ConfigMap of a job list stands: absent, without the key, or its text, which
/// is also parsed into `documents` when given.
fn job_source_of(
    name: String,
    key: &str,
    cm: Option<&ConfigMap>,
    mut documents: Option<&mut JobDocuments<'_, '_>>,
) -> JobSource {
    let Some(cm) = cm else {
        return JobSource::MissingConfigMap { name };
    };
    let text = match documents.as_deref_mut() {
        // Kept as read, so that a pass that reads the ConfigMap by metadata finds it.
        Some(documents) => documents
            .records
            .get_or_decode(&format!("text {key}"), &[cm], || {
                cm.data.as_ref().and_then(|data| data.get(key)).cloned()
            })
            .flatten(),
        None => cm.data.as_ref().and_then(|data| data.get(key)).cloned(),
    };
    // (Read by metadata and not kept: the caller reads it in full and asks again.)
    let Some(text) = text else {
        return JobSource::MissingKey {
            name,
            key: key.to_owned(),
        };
    };
    if let Some(documents) = documents {
        let swarm = documents.swarm;
        let document = documents
            .records
            .get_or_decode(&format!("jobs {key}"), &[cm], || {
                Arc::new(decide::parsed_job_document(swarm, &name, key, &text))
            });
        if let Some(document) = document {
            documents
                .parsed
                .job_documents
                .insert((name.clone(), key.to_owned()), document);
        }
    }
    JobSource::Text {
        name,
        key: key.to_owned(),
        text,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        FieldsV1, ManagedFieldsEntry, ObjectMeta, OwnerReference,
    };

    use super::*;
    use crate::observed::PodState;

    /// A ConfigMap labelled for Swarm `demo`, owned by the Swarm of uid `owner`.
    fn labelled(name: &str, owner: &str, labels: &[(&str, &str)], data: (&str, &str)) -> ConfigMap {
        let mut all_labels = BTreeMap::from([(names::LABEL_SWARM.to_owned(), "demo".to_owned())]);
        all_labels.extend(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                uid: Some(format!("{name}-uid")),
                labels: Some(all_labels),
                owner_references: Some(vec![OwnerReference {
                    api_version: "shoal.dev/v1alpha1".to_owned(),
                    kind: "Swarm".to_owned(),
                    name: "demo".to_owned(),
                    uid: owner.to_owned(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(data.0.to_owned(), data.1.to_owned())])),
            ..ConfigMap::default()
        }
    }

    fn edited_by_hand(mut cm: ConfigMap, key: &str) -> ConfigMap {
        cm.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("kubectl-edit".to_owned()),
            fields_v1: Some(FieldsV1(
                serde_json::json!({ "f:data": { format!("f:{key}"): {} } }),
            )),
            ..ManagedFieldsEntry::default()
        }]);
        cm
    }

    #[test]
    fn a_labelled_configmap_of_someone_else_is_named_foreign_and_never_read() {
        let theirs = labelled(
            "worker-0-slice",
            "another-swarm",
            &[(names::LABEL_MEMBER, "worker-0")],
            (names::SLICE_DATA_KEY, "jobs: []"),
        );
        let sorted = SwarmConfigMaps::sort(
            "demo",
            "demo-uid",
            0,
            vec![theirs],
            &WithData::All,
            &mut Pass::uncached(),
        );
        assert!(sorted.slices.is_empty() && sorted.owned.is_empty());
        assert_eq!(
            sorted.foreign.get("worker-0-slice").map(String::as_str),
            Some("it is owned by Swarm demo")
        );
    }

    #[test]
    fn an_owned_slice_is_read_even_when_edited_and_the_edit_is_named() {
        let slice = labelled(
            "worker-0-slice",
            "demo-uid",
            &[(names::LABEL_MEMBER, "worker-0")],
            (names::SLICE_DATA_KEY, "jobs: []"),
        );
        let sorted = SwarmConfigMaps::sort(
            "demo",
            "demo-uid",
            0,
            vec![edited_by_hand(slice, names::SLICE_DATA_KEY)],
            &WithData::All,
            &mut Pass::uncached(),
        );
        assert_eq!(sorted.slices["worker-0"].text.as_deref(), Some("jobs: []"));
        assert_eq!(sorted.edited["worker-0-slice"], "kubectl-edit");
        assert_eq!(sorted.owned["worker-0-slice"], "worker-0-slice-uid");
    }

    #[test]
    fn an_edited_history_record_and_index_are_not_read() {
        let record = labelled(
            "demo-rev-1",
            "demo-uid",
            &[
                (names::LABEL_REVISION_HISTORY, "true"),
                (names::LABEL_REVISION, "1"),
            ],
            (REVISION_DATA_KEY, "{}"),
        );
        let index = labelled(
            "demo",
            "demo-uid",
            &[],
            (names::INDEX_DATA_KEY, "version: 1"),
        );
        let sorted = SwarmConfigMaps::sort(
            "demo",
            "demo-uid",
            0,
            vec![
                edited_by_hand(record, REVISION_DATA_KEY),
                edited_by_hand(index.clone(), names::INDEX_DATA_KEY),
            ],
            &WithData::All,
            &mut Pass::uncached(),
        );
        assert!(sorted.history.is_empty() && sorted.damaged_history.is_empty());
        assert_eq!(sorted.index, None);
        assert_eq!(sorted.edited.len(), 2);
        let unedited = SwarmConfigMaps::sort(
            "demo",
            "demo-uid",
            0,
            vec![index],
            &WithData::All,
            &mut Pass::uncached(),
        );
        assert_eq!(unedited.index.as_deref(), Some("version: 1"));
    }

    /// A record of revision `revision` over `jobs` jobs, as the controller writes it.
    fn record_text(revision: u64, jobs: usize) -> String {
        serde_json::json!({
            "revision": revision,
            "hash": format!("h{revision}"),
            "strategy": {"type": "sticky"},
            "members": ["worker-0", "worker-1"],
            "jobs": (0..jobs).map(|i| format!("job-{i:05}")).collect::<Vec<_>>(),
            "owners": (0..jobs).map(|i| i % 2).collect::<Vec<_>>(),
        })
        .to_string()
    }

    /// The history ConfigMap `name` of revision `revision`, at `version`.
    fn history_map(name: &str, revision: u64, version: &str, data: (&str, &str)) -> ConfigMap {
        let mut cm = labelled(
            name,
            "demo-uid",
            &[
                (names::LABEL_REVISION_HISTORY, "true"),
                (names::LABEL_REVISION, &revision.to_string()),
            ],
            data,
        );
        cm.metadata.resource_version = Some(version.to_owned());
        cm
    }

    /// Revision `revision`'s record split over several ConfigMaps (small parts), at
    /// `version`.
    fn split_history(revision: u64, version: &str) -> Vec<ConfigMap> {
        let decide::StoredRecord::Split { chunks, checksum } =
            decide::store_record(&record_text(revision, 2000), 1024, 1024)
        else {
            panic!("expected a split record");
        };
        let count = chunks.len();
        chunks
            .into_iter()
            .enumerate()
            .map(|(part, chunk)| {
                let name = decide::record_part_configmap("demo", revision, part);
                let mut cm = history_map(&name, revision, version, ("unused", ""));
                cm.data = None;
                cm.binary_data = Some(BTreeMap::from([(
                    decide::record_part_key(part),
                    k8s_openapi::ByteString(chunk),
                )]));
                if part == 0 {
                    cm.metadata.annotations = Some(BTreeMap::from([
                        (names::ANNOTATION_PARTS.to_owned(), count.to_string()),
                        (ANNOTATION_CHECKSUM.to_owned(), checksum.clone()),
                    ]));
                }
                cm
            })
            .collect()
    }

    /// Revision 1's record in one ConfigMap (5 jobs), revision 2's split (2,000 jobs).
    fn two_records() -> Vec<ConfigMap> {
        let mut maps = vec![history_map(
            "demo-rev-1",
            1,
            "10",
            (REVISION_DATA_KEY, &record_text(1, 5)),
        )];
        maps.extend(split_history(2, "11"));
        maps
    }

    /// Sorts `config_maps` as one pass of Swarm `demo` through `memo`; how many records
    /// it decoded.
    fn pass(memo: &Decoded, config_maps: Vec<ConfigMap>) -> (SwarmConfigMaps, usize) {
        pass_in_force(memo, 0, config_maps)
    }

    /// [`pass`] with revision `in_force` in force.
    fn pass_in_force(
        memo: &Decoded,
        in_force: u64,
        config_maps: Vec<ConfigMap>,
    ) -> (SwarmConfigMaps, usize) {
        let mut records = memo.pass(memo_scope("ns", "demo", "demo-uid"));
        let sorted = SwarmConfigMaps::sort(
            "demo",
            "demo-uid",
            in_force,
            config_maps,
            &WithData::All,
            &mut records,
        );
        (sorted, records.decodes)
    }

    #[test]
    fn the_record_in_force_whole_or_split_is_replayed_once_per_version_of_its_configmaps() {
        for in_force in [1, 2] {
            let memo = Decoded::default();
            let (first, _) = pass_in_force(&memo, in_force, two_records());
            let (revision, replayed) = first.parsed.replayed.clone().expect("replayed");
            assert_eq!(revision, in_force);
            assert!(replayed.is_ok(), "{replayed:?}");
            assert_eq!(*replayed, decide::replay(&first.history[&in_force]));
            let (second, decodes) = pass_in_force(&memo, in_force, two_records());
            assert_eq!(
                decodes, 0,
                "revision {in_force} was decoded or replayed again"
            );
            let (_, again) = second.parsed.replayed.expect("replayed");
            assert!(Arc::ptr_eq(&again, &replayed));
        }
        let (other, _) = pass_in_force(&Decoded::default(), 3, two_records());
        assert_eq!(
            other.parsed.replayed, None,
            "only the revision in force is replayed"
        );
    }

    #[test]
    fn a_second_pass_over_the_same_history_decodes_nothing() {
        let memo = Decoded::default();
        let maps = two_records();
        let (first, decodes) = pass(&memo, maps.clone());
        assert!(decodes > 0);
        assert_eq!(first.history.keys().copied().collect::<Vec<_>>(), [1, 2]);
        assert_eq!(first.history[&2].jobs.len(), 2000);
        let (second, decodes) = pass(&memo, maps);
        assert_eq!(decodes, 0, "the second pass decoded again");
        assert_eq!(second.history, first.history);
        // One entry per ConfigMap read as a record, one per split record: no more.
        assert!(
            memo.len() <= 2 + split_history(2, "11").len(),
            "{}",
            memo.len()
        );
    }

    #[test]
    fn a_changed_record_is_decoded_again_and_an_edited_one_is_still_refused() {
        let memo = Decoded::default();
        let one = history_map(
            "demo-rev-1",
            1,
            "10",
            (REVISION_DATA_KEY, &record_text(1, 5)),
        );
        let (first, _) = pass(&memo, vec![one]);
        assert_eq!(first.history[&1].jobs.len(), 5);
        // Rewritten (a new resourceVersion): read again, not the remembered record.
        let rewritten = history_map(
            "demo-rev-1",
            1,
            "12",
            (REVISION_DATA_KEY, &record_text(1, 7)),
        );
        let (second, decodes) = pass(&memo, vec![rewritten.clone()]);
        assert_eq!(decodes, 1);
        assert_eq!(second.history[&1].jobs.len(), 7);
        // Edited by someone else: refused, though a record of its uid was remembered.
        let mut edited = edited_by_hand(rewritten, REVISION_DATA_KEY);
        edited.metadata.resource_version = Some("13".to_owned());
        let (third, _) = pass(&memo, vec![edited]);
        assert!(third.history.is_empty());
        assert_eq!(third.edited["demo-rev-1"], "kubectl-edit");
    }

    /// `maps` as a metadata-only list returns them: no data.
    fn without_data(maps: &[ConfigMap]) -> Vec<ConfigMap> {
        maps.iter()
            .map(|cm| ConfigMap {
                metadata: cm.metadata.clone(),
                ..ConfigMap::default()
            })
            .collect()
    }

    #[test]
    fn records_listed_without_data_come_from_the_memo_and_a_new_one_asks_for_a_full_read() {
        let memo = Decoded::default();
        let mut maps = two_records();
        let (full, _) = pass(&memo, maps.clone());
        let mut records = memo.pass(memo_scope("ns", "demo", "demo-uid"));
        let none = WithData::Only(BTreeSet::new());
        let sorted = SwarmConfigMaps::sort(
            "demo",
            "demo-uid",
            0,
            without_data(&maps),
            &none,
            &mut records,
        );
        assert!(records.missed.is_empty());
        assert_eq!(records.decodes, 0);
        assert_eq!(sorted.history, full.history);
        assert!(sorted.damaged_history.is_empty());
        drop(records);
        // A record not kept (new, or rewritten) is not taken as absent or damaged: the
        // pass says it missed, and observe reads the records in full.
        maps.push(history_map(
            "demo-rev-3",
            3,
            "30",
            (REVISION_DATA_KEY, &record_text(3, 5)),
        ));
        let mut records = memo.pass(memo_scope("ns", "demo", "demo-uid"));
        SwarmConfigMaps::sort(
            "demo",
            "demo-uid",
            0,
            without_data(&maps),
            &none,
            &mut records,
        );
        assert_eq!(
            records.missed,
            BTreeSet::from(["demo-rev-3".to_owned()]),
            "only the new record is named, to be read in full"
        );
        let read_in_full = WithData::Only(std::mem::take(&mut records.missed));
        let mut listed = without_data(&maps);
        listed.pop();
        listed.extend(maps.last().cloned());
        let sorted =
            SwarmConfigMaps::sort("demo", "demo-uid", 0, listed, &read_in_full, &mut records);
        assert_eq!(
            sorted.history.keys().copied().collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert_eq!(records.decodes, 1, "only the new record is decoded");
    }

    /// Member `worker-0`'s slice ConfigMap holding `jobs`, at `version`.
    fn slice_map(jobs: &[&str], version: &str) -> ConfigMap {
        let jobs = shoal_core::JobSet::from_keys(
            jobs.iter()
                .map(|job| shoal_core::JobKey::new(*job).unwrap()),
        )
        .unwrap();
        let slice = shoal_core::Slice {
            swarm: "demo".to_owned(),
            member: "worker-0".to_owned(),
            revision: 1,
            hash: shoal_core::slice::slice_hash(&jobs, &[]),
            jobs,
            instances: Vec::new(),
        };
        let text = shoal_core::format::render_slice(&slice);
        let mut cm = labelled(
            "worker-0-slice",
            "demo-uid",
            &[(names::LABEL_MEMBER, "worker-0")],
            (names::SLICE_DATA_KEY, &text),
        );
        cm.metadata.resource_version = Some(version.to_owned());
        cm
    }

    /// ConfigMap `streams` (not the Swarm's) at `version`, its key `config.yml` holding
    /// `jobs`.
    fn job_list_map(jobs: &[&str], version: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("streams".to_owned()),
                uid: Some("streams-uid".to_owned()),
                resource_version: Some(version.to_owned()),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(
                "config.yml".to_owned(),
                format!(
                    "jobs:\n{}",
                    jobs.iter()
                        .map(|job| format!("- {job}\n"))
                        .collect::<String>()
                ),
            )])),
            ..ConfigMap::default()
        }
    }

    /// One pass of Swarm `demo` over `jobsFrom: streams/config.yml` as `fetched`: the job
    /// source, and whether a full read is asked for.
    fn job_list_pass(
        memo: &Decoded,
        fetched: Option<ConfigMap>,
        metadata_only: bool,
    ) -> (JobSource, bool) {
        let from = JobsFrom {
            config_map_key_ref: Some(crate::api::swarm::ConfigMapKeyRef {
                name: "streams".to_owned(),
                key: "config.yml".to_owned(),
            }),
            ..JobsFrom::default()
        };
        let fetched = JobConfigMaps {
            selected: None,
            named: vec![fetched],
            metadata_only,
        };
        let mut records = memo.pass(memo_scope("ns", "demo", "demo-uid"));
        let mut parsed = decide::Parsed::default();
        records.metadata_only(metadata_only);
        let source = job_sources(
            &from,
            &fetched,
            Some(&mut JobDocuments {
                swarm: "demo",
                records: &mut records,
                parsed: &mut parsed,
            }),
        );
        (source, !records.missed.is_empty())
    }

    #[test]
    fn the_merged_job_list_is_kept_while_the_spec_and_its_configmaps_are_unchanged() {
        let memo = Decoded::default();
        let from = JobsFrom {
            config_map_key_ref: Some(crate::api::swarm::ConfigMapKeyRef {
                name: "streams".to_owned(),
                key: "config.yml".to_owned(),
            }),
            ..JobsFrom::default()
        };
        let mut swarm = Swarm::new("demo", crate::swarm::fixtures::spec_with_jobs(Vec::new()));
        swarm.spec.jobs_from = Some(from.clone());
        let merged = |swarm: &Swarm, cm: ConfigMap| {
            let read = JobConfigMaps {
                selected: None,
                named: vec![Some(cm)],
                metadata_only: false,
            };
            let mut records = memo.pass(memo_scope("ns", "demo", "demo-uid"));
            let mut parsed = decide::Parsed::default();
            let source = job_sources(
                &from,
                &read,
                Some(&mut JobDocuments {
                    swarm: "demo",
                    records: &mut records,
                    parsed: &mut parsed,
                }),
            );
            merged_job_list(swarm, &source, Some(&read), &parsed, &mut records)
        };
        let first = merged(&swarm, job_list_map(&["b", "a"], "7"));
        let (jobs, _) = Result::clone(&first).expect("a valid job list");
        assert_eq!(jobs, shoal_core::JobSet::parse(["a", "b"]).unwrap());
        let again = merged(&swarm, job_list_map(&["b", "a"], "7"));
        assert!(
            Arc::ptr_eq(&first, &again),
            "merged again though nothing changed"
        );
        // A new version of the ConfigMap, or another spec, is merged again.
        let (changed, _) =
            Result::clone(&merged(&swarm, job_list_map(&["c"], "8"))).expect("valid");
        assert_eq!(changed, shoal_core::JobSet::parse(["c"]).unwrap());
        swarm.spec.jobs = vec!["inline".to_owned()];
        let (with_inline, _) =
            Result::clone(&merged(&swarm, job_list_map(&["c"], "8"))).expect("valid");
        assert_eq!(
            with_inline,
            shoal_core::JobSet::parse(["c", "inline"]).unwrap()
        );
    }

    #[test]
    fn an_unchanged_job_list_read_by_metadata_is_the_text_read_in_full_before() {
        let memo = Decoded::default();
        let full = job_list_map(&["a", "b"], "7");
        let (first, missed) = job_list_pass(&memo, Some(full.clone()), false);
        assert!(!missed);
        assert!(matches!(&first, JobSource::Text { text, .. } if text.contains("- b")));
        let metadata = |cm: &ConfigMap| ConfigMap {
            metadata: cm.metadata.clone(),
            ..ConfigMap::default()
        };
        let (second, missed) = job_list_pass(&memo, Some(metadata(&full)), true);
        assert!(!missed);
        assert_eq!(second, first);
        // Changed: its new version is not kept, so it must be read in full.
        let changed = job_list_map(&["a", "c"], "8");
        let (_, missed) = job_list_pass(&memo, Some(metadata(&changed)), true);
        assert!(missed, "a changed job list was taken from the memo");
        // Gone: said so, by metadata as in full.
        let (gone, missed) = job_list_pass(&memo, None, true);
        assert!(!missed);
        assert!(matches!(gone, JobSource::MissingConfigMap { .. }));
    }

    #[test]
    fn a_slice_is_decoded_once_per_version_of_its_configmap_not_on_every_pass() {
        let memo = Decoded::default();
        let (first, _) = pass(&memo, vec![slice_map(&["a", "b"], "5")]);
        // Another text under the same uid and resourceVersion cannot happen on an API
        // server; here it shows that the second pass did not decode the ConfigMap again
        // (decoding and rendering every slice was most of a pass at 1,000 members).
        let (second, decodes) = pass(&memo, vec![slice_map(&["z"], "5")]);
        assert_eq!(decodes, 0);
        assert_eq!(second.slices["worker-0"], first.slices["worker-0"]);
        let (third, _) = pass(&memo, vec![slice_map(&["z"], "6")]);
        assert_ne!(third.slices["worker-0"], first.slices["worker-0"]);
    }

    #[test]
    fn a_slice_is_parsed_once_per_version_of_its_configmap_as_decide_would_parse_it() {
        let memo = Decoded::default();
        let (first, decodes) = pass(&memo, vec![slice_map(&["a", "b"], "5")]);
        assert_eq!(decodes, 1);
        let parsed = first.parsed.slices["worker-0"].as_ref().clone();
        assert_eq!(
            parsed,
            decide::parsed_slice("demo", "worker-0", &first.slices["worker-0"])
        );
        assert_eq!(parsed.unwrap().jobs.len(), 2);
        let (_, decodes) = pass(&memo, vec![slice_map(&["a", "b"], "5")]);
        assert_eq!(decodes, 0, "the unchanged slice was parsed again");
        // Rewritten: a new resourceVersion is parsed again, never the remembered slice.
        let (third, decodes) = pass(&memo, vec![slice_map(&["c"], "6")]);
        assert_eq!(decodes, 1);
        let jobs = third.parsed.slices["worker-0"]
            .as_ref()
            .clone()
            .unwrap()
            .jobs;
        assert_eq!(jobs.len(), 1);
    }

    #[test]
    fn a_slice_edited_by_hand_is_parsed_again_and_refused_as_decide_refuses_it() {
        let memo = Decoded::default();
        pass(&memo, vec![slice_map(&["a", "b"], "5")]);
        let mut edited = slice_map(&["a", "b"], "7");
        edited.data.as_mut().unwrap().insert(
            names::SLICE_DATA_KEY.to_owned(),
            "jobs: [a, b, c]".to_owned(),
        );
        let (sorted, decodes) = pass(&memo, vec![edited]);
        assert_eq!(decodes, 1);
        assert!(sorted.parsed.slices["worker-0"].is_err());
    }

    #[test]
    fn a_changed_part_of_a_split_record_joins_it_again() {
        let memo = Decoded::default();
        let maps = split_history(2, "11");
        pass(&memo, maps.clone());
        let mut changed = maps;
        let last = changed.len() - 1;
        changed[last].metadata.resource_version = Some("20".to_owned());
        let (sorted, decodes) = pass(&memo, changed.clone());
        // The changed part (looked at as a ConfigMap of its own) and the record it is part
        // of; none of the other parts.
        assert!(changed.len() > 2);
        assert_eq!(
            decodes, 2,
            "only the changed part and its record are read again"
        );
        assert_eq!(sorted.history[&2].jobs.len(), 2000);
        // A part gone: the record is damaged, not remembered whole.
        changed.remove(last);
        let (sorted, _) = pass(&memo, changed);
        assert!(sorted.history.is_empty());
        assert!(sorted.damaged_history.contains_key(&2));
    }

    #[test]
    fn lease_holders_of_a_pool_scaled_to_two_billion_stop_at_the_member_bound() {
        let pools = vec![
            PoolState {
                name: "huge".to_owned(),
                replicas: 2_000_000_000,
                deployment_pods: None,
                pods: BTreeMap::new(),
                observed_current: true,
            },
            PoolState {
                name: "small".to_owned(),
                replicas: 2,
                deployment_pods: None,
                pods: BTreeMap::from([(
                    0,
                    PodState {
                        uid: "u".to_owned(),
                        ready: true,
                        deleting: false,
                        ip: None,
                        node: None,
                    },
                )]),
                observed_current: true,
            },
        ];
        let names = lease_holders(&pools);
        assert_eq!(names.len(), decide::MAX_MEMBERS as usize + 1);
        assert!(names.contains("huge-9999") && !names.contains("huge-10000"));
        assert!(names.contains("small-0") && !names.contains("small-1"));
    }

    #[test]
    fn member_leases_are_listed_by_name_when_few_and_by_label_when_many() {
        let few: std::collections::BTreeSet<String> =
            ["worker-0", "worker-1"].map(str::to_owned).into();
        assert_eq!(
            member_lease_selector(&few).as_deref(),
            Some("shoal.dev/member in (worker-0,worker-1)")
        );
        let many: std::collections::BTreeSet<String> = (0..=MAX_NAMED_LEASES)
            .map(|i| format!("worker-{i}"))
            .collect();
        assert_eq!(
            member_lease_selector(&many).as_deref(),
            Some("shoal.dev/member")
        );
        assert_eq!(member_lease_selector(&Default::default()), None);
    }
}
