//! Revision history: the inputs of each revision kept as `<swarm>-rev-<n>`, so the
//! assignment in force can be recomputed exactly after a controller restart.
//!
//! A `sticky` revision depends on the revision before it, so recomputing it from its
//! inputs alone is not possible: its record also keeps the assignment itself (`owners`,
//! the owner of each job as an index into `members`), and replaying it reads that back.
//! The stateless strategies are recomputed from their inputs as before.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use shoal_core::format::{self, EncodedText};
use shoal_core::names::REVISION_DATA_KEY;
use shoal_core::{Assignment, JobSet, JobSettings, Member, MemberId, Slice, assign};

use super::inputs::strategy_of;
use super::members::member_of_pod;
use super::{InputProblem, Observation, Operation};
use crate::api::approval_record::ApprovalRecord;
use crate::api::swarm::StrategySpec;

/// Inputs of one revision, stored as `<swarm>-rev-<n>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevisionRecord {
    /// Revision number.
    pub revision: u64,
    /// Assignment hash.
    pub hash: String,
    /// Strategy as written in the Swarm.
    pub strategy: StrategySpec,
    /// Members (pod names) that could own work.
    pub members: Vec<String>,
    /// Members listed but failed over (own nothing).
    #[serde(default)]
    pub unavailable: Vec<String>,
    /// Job keys, sorted (empty when `jobsOmitted`).
    pub jobs: RecordJobs,
    /// Written by earlier versions when the job list was too large for one ConfigMap
    /// even compressed (records are now split over several): this revision cannot be
    /// replayed and the slices in the cluster stand for it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub jobs_omitted: bool,
    /// `sticky` only: the owner of each job (aligned with `jobs`) as an index into
    /// `members`. Empty for the stateless strategies, which are recomputed from the inputs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owners: Vec<u32>,
    /// Members with generated names (pods of a Deployment pool): pod name → pool. Every
    /// other member is `<pool>-<ordinal>`. A generated name can look like one (its suffix
    /// may be all digits), so replay needs the pool said, not guessed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub generated_members: BTreeMap<String, String>,
    /// Who approved the revision and when (none in records of earlier releases, and in
    /// a record rewritten after it went missing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalRecord>,
    /// Weights and dedication the revision was computed with (`sticky` only; replay
    /// reads `owners`, these say what the loads were).
    #[serde(default, skip_serializing_if = "JobSettings::is_plain")]
    pub job_settings: JobSettings,
    /// Members cordoned (`spec.cordon`, not draining) when the revision was computed. A
    /// cordon makes the assignment depend on the one in force, so such a record keeps
    /// `owners` whatever the strategy, and replay reads them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cordoned: Vec<String>,
}

/// The job keys of a record, shared between records that list the same ones.
///
/// The controller keeps every record of a Swarm's history decoded
/// ([`crate::cluster::decoded`]), up to `revisionHistoryLimit` of them, and successive
/// revisions mostly list the same jobs: a scale event changes the members, not the
/// jobs. At 100,000 jobs one list is about 4 MiB, and ten copies of it were most of the
/// controller's heap. A list decoded equal to one a record (of this process) holds is
/// that one: one allocation, however many records hold it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordJobs(Arc<[String]>);

/// The job lists records were decoded with, while a record holds them.
static DECODED_JOBS: Mutex<Vec<Weak<[String]>>> = Mutex::new(Vec::new());

impl RecordJobs {
    /// `jobs` as decoded: a list still held that is equal to it, else `jobs`, kept for
    /// the next record. Lists no record holds any more are forgotten here.
    fn shared(jobs: Vec<String>) -> RecordJobs {
        let mut decoded = DECODED_JOBS.lock().unwrap_or_else(PoisonError::into_inner);
        decoded.retain(|held| held.strong_count() > 0);
        let equal = decoded
            .iter()
            .filter_map(Weak::upgrade)
            .find(|held| **held == *jobs);
        if let Some(held) = equal {
            return RecordJobs(held);
        }
        let jobs: Arc<[String]> = jobs.into();
        decoded.push(Arc::downgrade(&jobs));
        RecordJobs(jobs)
    }

    /// Whether two lists are one allocation (not only equal).
    pub fn shares_with(&self, other: &RecordJobs) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::ops::Deref for RecordJobs {
    type Target = [String];

    fn deref(&self) -> &[String] {
        &self.0
    }
}

impl From<Vec<String>> for RecordJobs {
    fn from(jobs: Vec<String>) -> RecordJobs {
        RecordJobs(jobs.into())
    }
}

impl Serialize for RecordJobs {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for RecordJobs {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<RecordJobs, D::Error> {
        Vec::<String>::deserialize(deserializer).map(RecordJobs::shared)
    }
}

impl RevisionRecord {
    /// Keeps `assignment` (the revision's own) in the record when the strategy needs it
    /// to be replayed (`sticky`).
    pub(super) fn keep_assignment(&mut self, assignment: &Assignment) {
        if !strategy_of(&self.strategy).is_stateful() && self.cordoned.is_empty() {
            return;
        }
        let position: BTreeMap<&str, u32> = self
            .members
            .iter()
            .enumerate()
            .map(|(index, name)| (name.as_str(), index as u32))
            .collect();
        let member_position: Vec<u32> = assignment
            .members()
            .iter()
            .map(|member| {
                position
                    .get(member.pod_name().as_str())
                    .copied()
                    .unwrap_or(u32::MAX)
            })
            .collect();
        self.owners = assignment
            .owner_indices()
            .iter()
            .map(|&owner| member_position[owner as usize])
            .collect();
    }
}

/// A revision record as stored: one ConfigMap (plain or gzip text), or a gzip stream
/// split over several ConfigMaps (`<swarm>-rev-<n>`, then `<swarm>-rev-<n>-part-<i>`),
/// each under the 1 MiB object limit. A record is never shortened: the owners of a
/// `sticky` revision are recoverable at every size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredRecord {
    /// JSON text, small enough to keep as is.
    Plain(String),
    /// gzip of the JSON, small enough for one ConfigMap.
    Gzip(Vec<u8>),
    /// gzip of the JSON in parts, with the sha256 of the whole stream.
    Split {
        /// The parts, in order; part 0 goes in the first ConfigMap.
        chunks: Vec<Vec<u8>>,
        /// sha256 (hex) of the concatenated chunks.
        checksum: String,
    },
}

/// How `text` (a serialized record) is stored, given the largest plain text and the
/// largest binary entry one ConfigMap takes (the controller passes its limits; tests,
/// small ones).
pub fn store_record(text: &str, plain_limit: usize, binary_limit: usize) -> StoredRecord {
    match format::encode_text(text.to_owned(), plain_limit, binary_limit) {
        EncodedText::Plain(text) => StoredRecord::Plain(text),
        EncodedText::Gzip(compressed) => StoredRecord::Gzip(compressed),
        EncodedText::Split(chunks) => StoredRecord::Split {
            checksum: format::checksum(&chunks),
            chunks,
        },
    }
}

/// The ConfigMap holding part `part` of revision `revision`'s record (part 0 is the
/// record's own ConfigMap, which carries the part count and checksum); pruning deletes
/// every `<swarm>-rev-<n>-part-*` the Swarm owns.
pub fn record_part_configmap(swarm: &str, revision: u64, part: usize) -> String {
    let head = shoal_core::names::revision_configmap(swarm, revision);
    if part == 0 {
        head
    } else {
        format!("{head}-part-{part}")
    }
}

/// The `binaryData` key of part `part` of a split record.
pub fn record_part_key(part: usize) -> String {
    format!("{REVISION_DATA_KEY}.gz.part{part}")
}

/// Reassembles a split record from its parts (`None` where a part's ConfigMap or key is
/// missing; `names` name each part's ConfigMap in errors). Any missing part, a checksum
/// that does not match, or a stream that does not decode is an error naming it: a
/// damaged record is never used.
pub fn join_record(
    chunks: &[Option<Vec<u8>>],
    checksum: &str,
    names: &dyn Fn(usize) -> String,
) -> Result<RevisionRecord, String> {
    let count = chunks.len();
    let mut parts = Vec::with_capacity(count);
    for (part, chunk) in chunks.iter().enumerate() {
        let Some(chunk) = chunk else {
            return Err(format!(
                "part {} of {count} (ConfigMap {}) is missing",
                part + 1,
                names(part)
            ));
        };
        parts.push(chunk.clone());
    }
    if format::checksum(&parts) != checksum {
        return Err(format!(
            "its {count} parts (ConfigMaps {} to {}) do not match the recorded checksum",
            names(0),
            names(count.saturating_sub(1))
        ));
    }
    let text = format::decode_text(&EncodedText::Split(parts))
        .map_err(|_| format!("ConfigMap {}: the record is not gzip text", names(0)))?;
    serde_json::from_str(&text)
        .map_err(|error| format!("ConfigMap {}: the record does not parse: {error}", names(0)))
}

pub(super) fn revision_record(
    revision: u64,
    hash: &str,
    strategy: &StrategySpec,
    members: &[Member],
    jobs: &JobSet,
) -> RevisionRecord {
    RevisionRecord {
        revision,
        hash: hash.to_owned(),
        strategy: strategy.clone(),
        members: members.iter().map(|member| member.id.pod_name()).collect(),
        unavailable: members
            .iter()
            .filter(|member| !member.available)
            .map(|member| member.id.pod_name())
            .collect(),
        jobs: RecordJobs::from(
            jobs.iter()
                .map(|key| key.as_str().to_owned())
                .collect::<Vec<_>>(),
        ),
        jobs_omitted: false,
        owners: Vec::new(),
        generated_members: members
            .iter()
            .filter(|member| member.id.ordinal().is_none())
            .map(|member| (member.id.pod_name(), member.id.pool.clone()))
            .collect(),
        approval: None,
        job_settings: JobSettings::new(),
        cordoned: Vec::new(),
    }
}

/// Records in the history records a plan writes the members cordoned when their
/// assignment was computed (every record a plan writes is of the desired inputs).
pub(super) fn keep_cordon(operations: &mut [Operation], cordoned: &BTreeSet<MemberId>) {
    for operation in operations {
        if let Operation::WriteRevision(record) = operation {
            record.cordoned = cordoned.iter().map(MemberId::pod_name).collect();
        }
    }
}

/// Records in the history records a plan writes the job settings their assignment was
/// computed with (every record a plan writes is of the desired inputs).
pub(super) fn keep_settings(operations: &mut [Operation], settings: &JobSettings) {
    for operation in operations {
        if let Operation::WriteRevision(record) = operation {
            record.job_settings = settings.clone();
        }
    }
}

/// Completes the history records a plan writes with the assignment of their revision,
/// for strategies whose replay needs it (see the module docs). `target` is the revision
/// the plan converges to: the only one whose record a plan writes.
pub(super) fn keep_assignments(operations: &mut [Operation], target: Option<&(u64, Assignment)>) {
    let Some((revision, assignment)) = target else {
        return;
    };
    for operation in operations {
        if let Operation::WriteRevision(record) = operation
            && record.revision == *revision
        {
            record.keep_assignment(assignment);
        }
    }
}

/// The assignment of a recorded revision: recomputed from its inputs, or for `sticky`,
/// read from the record (checked: every job owned by a listed, available member).
pub fn replay(record: &RevisionRecord) -> Result<Assignment, String> {
    let jobs = JobSet::parse(record.jobs.iter().cloned()).map_err(|error| error.to_string())?;
    let unavailable: BTreeSet<&str> = record.unavailable.iter().map(String::as_str).collect();
    let mut members = Vec::new();
    for name in &record.members {
        let id = match record.generated_members.get(name) {
            Some(pool) => MemberId::generated(pool.clone(), name.clone()),
            None => name
                .rsplit_once('-')
                .and_then(|(pool, ordinal)| Some(MemberId::new(pool, ordinal.parse().ok()?)))
                .ok_or_else(|| format!("revision {}: bad member name {name}", record.revision))?,
        };
        members.push(Member::of(id).with_available(!unavailable.contains(name.as_str())));
    }
    let strategy = strategy_of(&record.strategy);
    if strategy.is_stateful() || !record.cordoned.is_empty() {
        return Assignment::from_owners(&members, jobs, &record.owners).map_err(|error| {
            format!(
                "revision {}: the recorded {strategy} assignment is inconsistent: {error}",
                record.revision
            )
        });
    }
    assign(&jobs, &members, &strategy).map_err(|error| error.to_string())
}

/// What observe replayed of the record of `revision` ([`super::Parsed::replayed`]: once
/// per version of its ConfigMaps; replaying on every pass was a tenth of decide's time at
/// 100,000 jobs).
fn replayed_by_observe(obs: &Observation, revision: u64) -> Option<Result<Assignment, String>> {
    obs.parsed
        .replayed
        .as_ref()
        .filter(|(replayed, _)| *replayed == revision)
        .map(|(_, replayed)| Result::clone(replayed))
}

/// The revision in force, as far as the cluster tells.
pub(super) struct InForce {
    /// The revision in force recomputed from its history record, when it can be.
    pub replayed: Option<Assignment>,
    /// What the slices in the cluster say, when there is no replayed revision.
    from_slices: Option<Assignment>,
}

impl InForce {
    /// What is in force: the replayed revision, else what the slices in the cluster say.
    /// (Borrowed, not a copy: at a million jobs an assignment is tens of megabytes.)
    pub fn assignment(&self) -> Option<&Assignment> {
        self.replayed.as_ref().or(self.from_slices.as_ref())
    }
}

/// Recovers the assignment in force from the history (or, failing that, the slices).
pub(super) fn in_force(
    obs: &Observation,
    observed: &BTreeMap<String, Result<Slice, String>>,
    problems: &mut Vec<InputProblem>,
) -> InForce {
    let current_revision = obs.status.current_revision;
    if let Some(why) = obs.damaged_history.get(&current_revision) {
        problems.push(InputProblem {
            reason: "HistoryDamaged",
            message: format!(
                "Swarm {}: the record of revision {current_revision} in force cannot be used: {why}; the slices in the cluster stand for it until it is written again",
                obs.swarm
            ),
        });
    }
    let replayed = match obs.history.get(&current_revision) {
        _ if current_revision == 0 => None,
        // Reported by the gate unless the inputs still match it, in which case it is rewritten.
        None => None,
        // Too large to keep: the slices in the cluster stand for it.
        Some(record) if record.jobs_omitted => None,
        Some(record) => {
            match replayed_by_observe(obs, current_revision).unwrap_or_else(|| replay(record)) {
                Ok(assignment) => Some(assignment),
                Err(error) => {
                    problems.push(InputProblem {
                        reason: "HistoryInvalid",
                        message: format!("revision {current_revision} cannot be replayed: {error}"),
                    });
                    None
                }
            }
        }
    };
    let from_slices = match &replayed {
        Some(_) => None,
        None => {
            let slices = observed.iter().filter_map(|(name, slice)| {
                let slice = slice.as_ref().ok()?;
                Some((member_of_pod(&obs.pools, name), slice.jobs.clone()))
            });
            // Two slices claiming one job (hand edits) leave nothing trustworthy to diff against.
            Assignment::from_slices(slices)
                .or_else(|_| Assignment::from_slices(std::iter::empty()))
                .ok()
        }
    };
    InForce {
        replayed,
        from_slices,
    }
}

/// Deletes history beyond `limit` revisions, never the revision in force.
pub(super) fn prune(
    obs: &Observation,
    limit: u32,
    applied_revision: Option<u64>,
    current_revision: u64,
) -> Vec<Operation> {
    let limit = limit.max(1) as usize;
    let mut kept: Vec<u64> = obs.history.keys().copied().collect();
    if let Some(applied) = applied_revision {
        kept.push(applied);
    }
    kept.sort_unstable();
    kept.dedup();
    if kept.len() <= limit {
        return Vec::new();
    }
    kept[..kept.len() - limit]
        .iter()
        .filter(|revision| **revision != current_revision && obs.history.contains_key(revision))
        .map(|revision| Operation::PruneRevision {
            revision: *revision,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record of `jobs` keys whose JSON is about `jobs * 20` bytes and compresses poorly.
    fn record(jobs: usize) -> RevisionRecord {
        RevisionRecord {
            revision: 7,
            hash: "h".to_owned(),
            strategy: StrategySpec::default(),
            members: vec!["worker-0".to_owned(), "worker-1".to_owned()],
            unavailable: Vec::new(),
            jobs: (0..jobs)
                .map(|i| format!("{:016x}", (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)))
                .collect::<Vec<_>>()
                .into(),
            jobs_omitted: false,
            owners: (0..jobs).map(|i| (i % 2) as u32).collect(),
            generated_members: BTreeMap::new(),
            approval: None,
            job_settings: JobSettings::new(),
            cordoned: Vec::new(),
        }
    }

    fn name(part: usize) -> String {
        record_part_configmap("demo", 7, part)
    }

    #[test]
    fn records_decoded_with_the_same_jobs_share_one_list() {
        let text = serde_json::to_string(&record(1_000)).unwrap();
        let first: RevisionRecord = serde_json::from_str(&text).unwrap();
        let mut next = record(1_000);
        next.revision = 8;
        next.members.push("worker-2".to_owned());
        let next: RevisionRecord =
            serde_json::from_str(&serde_json::to_string(&next).unwrap()).unwrap();
        assert!(first.jobs.shares_with(&next.jobs));
        assert_eq!(first, record(1_000));
        assert_eq!(serde_json::to_string(&first).unwrap(), text);
    }

    #[test]
    fn records_decoded_with_other_jobs_keep_their_own() {
        let text = serde_json::to_string(&record(1_000)).unwrap();
        let first: RevisionRecord = serde_json::from_str(&text).unwrap();
        let fewer: RevisionRecord =
            serde_json::from_str(&serde_json::to_string(&record(999)).unwrap()).unwrap();
        assert!(!first.jobs.shares_with(&fewer.jobs));
        assert_eq!((first.jobs.len(), fewer.jobs.len()), (1_000, 999));
        assert_eq!(fewer, record(999));
    }

    fn split(record: &RevisionRecord) -> (Vec<Option<Vec<u8>>>, String) {
        let text = serde_json::to_string(record).unwrap();
        match store_record(&text, 1024, 1024) {
            StoredRecord::Split { chunks, checksum } => {
                (chunks.into_iter().map(Some).collect(), checksum)
            }
            other => panic!("expected a split record, got {other:?}"),
        }
    }

    #[test]
    fn a_record_past_the_limits_is_split_and_joins_back_whole_with_its_owners() {
        let original = record(2000);
        let (chunks, checksum) = split(&original);
        assert!(chunks.len() > 2, "{} parts", chunks.len());
        assert!(chunks.iter().flatten().all(|chunk| chunk.len() <= 1024));
        let joined = join_record(&chunks, &checksum, &name).expect("whole");
        assert_eq!(joined, original);
        assert_eq!(joined.owners.len(), 2000);
    }

    #[test]
    fn small_records_stay_in_one_config_map() {
        let text = serde_json::to_string(&record(3)).unwrap();
        assert_eq!(
            store_record(&text, 1024, 1024),
            StoredRecord::Plain(text.clone())
        );
        assert!(matches!(
            store_record(&text, 10, 1024 * 1024),
            StoredRecord::Gzip(_)
        ));
    }

    #[test]
    fn a_missing_part_is_named_and_the_record_not_used() {
        let (mut chunks, checksum) = split(&record(2000));
        chunks[2] = None;
        let error = join_record(&chunks, &checksum, &name).err();
        let error = error.expect("a record with a part missing is refused");
        assert!(
            error.contains("part 3 of")
                && error.contains("(ConfigMap demo-rev-7-part-2) is missing"),
            "{error}"
        );
    }

    #[test]
    fn a_damaged_part_fails_the_checksum() {
        let (mut chunks, checksum) = split(&record(2000));
        if let Some(chunk) = chunks[1].as_mut() {
            chunk[10] ^= 1;
        }
        let error = join_record(&chunks, &checksum, &name).err();
        let error = error.expect("a damaged record is refused");
        assert!(
            error.contains("demo-rev-7 to demo-rev-7-part-")
                && error.contains("do not match the recorded checksum"),
            "{error}"
        );
    }
}
