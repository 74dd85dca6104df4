//! Job keys and job sets: validated, sorted by byte order, unique.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest accepted key, in bytes (a DNS subdomain's limit, so that a key can
/// always be carried in a label value or object name derived from it).
pub const MAX_KEY_BYTES: usize = 253;

/// Longest prefix of an offending key quoted in an error message.
const QUOTED_PREFIX_CHARS: usize = 64;

/// One validated job key: non-empty, at most [`MAX_KEY_BYTES`] bytes, no
/// control characters. Cheap to clone (shared string).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobKey(Arc<str>);

/// Why a single key is not a valid job key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobKeyError {
    /// The key is the empty string.
    #[error("empty key")]
    Empty,
    /// The key is longer than [`MAX_KEY_BYTES`].
    #[error("{len} bytes, longer than {MAX_KEY_BYTES}")]
    TooLong {
        /// Length of the key in bytes.
        len: usize,
    },
    /// The key contains a control character (Unicode category Cc).
    #[error("control character {character:?} at byte {offset}")]
    ControlCharacter {
        /// The offending character.
        character: char,
        /// Its byte offset in the key.
        offset: usize,
    },
}

impl JobKey {
    /// Validates `key` as a job key.
    pub fn new(key: impl Into<String>) -> Result<JobKey, JobKeyError> {
        let key: String = key.into();
        validate(&key)?;
        Ok(JobKey(Arc::from(key)))
    }

    /// The key as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key's bytes (what [`crate::hash::key_hash`] hashes).
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

fn validate(key: &str) -> Result<(), JobKeyError> {
    if key.is_empty() {
        return Err(JobKeyError::Empty);
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(JobKeyError::TooLong { len: key.len() });
    }
    if let Some((offset, character)) = key.char_indices().find(|(_, c)| c.is_control()) {
        return Err(JobKeyError::ControlCharacter { character, offset });
    }
    Ok(())
}

impl fmt::Display for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl AsRef<str> for JobKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for JobKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for JobKey {
    type Error = JobKeyError;
    fn try_from(key: &str) -> Result<Self, Self::Error> {
        JobKey::new(key)
    }
}

impl TryFrom<String> for JobKey {
    type Error = JobKeyError;
    fn try_from(key: String) -> Result<Self, Self::Error> {
        JobKey::new(key)
    }
}

impl Serialize for JobKey {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for JobKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let key = String::deserialize(deserializer)?;
        JobKey::new(key.clone())
            .map_err(|reason| serde::de::Error::custom(format!("job key {key:?}: {reason}")))
    }
}

/// One problem found in a job list: which entry, which key, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobProblem {
    /// Zero-based position of the entry in the input list.
    pub position: usize,
    /// The offending key as given.
    pub key: String,
    /// What is wrong with it.
    pub reason: JobProblemReason,
}

/// Why an entry of a job list was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobProblemReason {
    /// The key itself is invalid.
    #[error(transparent)]
    Invalid(#[from] JobKeyError),
    /// The key already appeared earlier in the list.
    #[error("duplicate of jobs[{first_position}]")]
    Duplicate {
        /// Position of its first occurrence.
        first_position: usize,
    },
}

impl fmt::Display for JobProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "jobs[{}] ", self.position)?;
        if self.key.chars().count() > QUOTED_PREFIX_CHARS {
            let prefix: String = self.key.chars().take(QUOTED_PREFIX_CHARS).collect();
            write!(f, "{prefix:?}…")?;
        } else {
            write!(f, "{:?}", self.key)?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// A rejected job list. Lists **every** problem, in input order, so that one
/// status condition can name all offending keys at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidJobs {
    /// All problems, ordered by position.
    pub problems: Vec<JobProblem>,
}

impl fmt::Display for InvalidJobs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.problems.len();
        write!(
            f,
            "invalid job list ({count} problem{}): ",
            if count == 1 { "" } else { "s" }
        )?;
        for (index, problem) in self.problems.iter().enumerate() {
            if index > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for InvalidJobs {}

/// A validated set of job keys, sorted by byte order, without duplicates.
///
/// Cloning is O(1): the keys are shared.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct JobSet {
    keys: Arc<[JobKey]>,
}

impl Default for JobSet {
    fn default() -> Self {
        JobSet {
            keys: Arc::from(Vec::new()),
        }
    }
}

impl JobSet {
    /// Validates a job list. Rejects empty keys, keys longer than
    /// [`MAX_KEY_BYTES`], keys with control characters and duplicates; the
    /// error lists every offending entry. Input order does not matter.
    pub fn parse<I, S>(keys: I) -> Result<JobSet, InvalidJobs>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut problems = Vec::new();
        let mut valid: Vec<(JobKey, usize)> = Vec::new();
        for (position, key) in keys.into_iter().enumerate() {
            let key: String = key.into();
            match validate(&key) {
                Ok(()) => valid.push((JobKey(Arc::from(key)), position)),
                Err(reason) => problems.push(JobProblem {
                    position,
                    key,
                    reason: reason.into(),
                }),
            }
        }
        valid.sort_unstable();
        let mut unique: Vec<JobKey> = Vec::with_capacity(valid.len());
        let mut first_position = 0;
        for (key, position) in valid {
            if unique.last() == Some(&key) {
                problems.push(JobProblem {
                    position,
                    key: key.as_str().to_owned(),
                    reason: JobProblemReason::Duplicate { first_position },
                });
            } else {
                first_position = position;
                unique.push(key);
            }
        }
        if problems.is_empty() {
            Ok(JobSet {
                keys: Arc::from(unique),
            })
        } else {
            problems.sort_by_key(|problem| problem.position);
            Err(InvalidJobs { problems })
        }
    }

    /// Builds a set from already validated keys; duplicates are rejected.
    pub fn from_keys<I: IntoIterator<Item = JobKey>>(keys: I) -> Result<JobSet, InvalidJobs> {
        let mut keys: Vec<(JobKey, usize)> = keys
            .into_iter()
            .enumerate()
            .map(|(position, key)| (key, position))
            .collect();
        keys.sort_unstable();
        let mut problems = Vec::new();
        let mut unique: Vec<JobKey> = Vec::with_capacity(keys.len());
        let mut first_position = 0;
        for (key, position) in keys {
            if unique.last() == Some(&key) {
                problems.push(JobProblem {
                    position,
                    key: key.as_str().to_owned(),
                    reason: JobProblemReason::Duplicate { first_position },
                });
            } else {
                first_position = position;
                unique.push(key);
            }
        }
        if problems.is_empty() {
            Ok(JobSet {
                keys: Arc::from(unique),
            })
        } else {
            problems.sort_by_key(|problem| problem.position);
            Err(InvalidJobs { problems })
        }
    }

    /// Keys already known to be sorted and unique (crate-internal fast path).
    pub(crate) fn from_sorted_unique(keys: Vec<JobKey>) -> JobSet {
        debug_assert!(keys.windows(2).all(|pair| pair[0] < pair[1]));
        JobSet {
            keys: Arc::from(keys),
        }
    }

    /// Whether both sets share the very same key storage (a clone of one
    /// another): O(1), and `true` implies equality.
    pub(crate) fn same_keys(&self, other: &JobSet) -> bool {
        Arc::ptr_eq(&self.keys, &other.keys)
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys in byte order.
    pub fn as_slice(&self) -> &[JobKey] {
        &self.keys
    }

    /// Iterates over the keys in byte order.
    pub fn iter(&self) -> std::slice::Iter<'_, JobKey> {
        self.keys.iter()
    }

    /// Position of `key` in byte order, if present.
    pub fn position(&self, key: &str) -> Option<usize> {
        self.keys
            .binary_search_by(|probe| probe.as_str().cmp(key))
            .ok()
    }

    /// Whether `key` is in the set.
    pub fn contains(&self, key: &str) -> bool {
        self.position(key).is_some()
    }

    /// Whether every key of this set is in `other`: one walk over both (they are
    /// sorted), where asking `other` key by key would search it once per key.
    pub fn is_subset(&self, other: &JobSet) -> bool {
        let mut candidates = other.iter();
        self.iter()
            .all(|key| candidates.by_ref().any(|candidate| candidate == key))
    }
}

impl fmt::Debug for JobSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.keys.iter()).finish()
    }
}

impl<'a> IntoIterator for &'a JobSet {
    type Item = &'a JobKey;
    type IntoIter = std::slice::Iter<'a, JobKey>;
    fn into_iter(self) -> Self::IntoIter {
        self.keys.iter()
    }
}

impl Serialize for JobSet {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.keys.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for JobSet {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let keys = Vec::<String>::deserialize(deserializer)?;
        JobSet::parse(keys).map_err(serde::de::Error::custom)
    }
}

/// Heaviest accepted job weight (the lightest is 1).
pub const MAX_WEIGHT: u32 = 1_000_000;

/// What one job costs and whether it needs a member to itself.
///
/// The default (weight 1, shared) is what every job without a setting gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSetting {
    /// Cost of the job in the balance, 1..=[`MAX_WEIGHT`].
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// The job gets a member of its own (resource reservation).
    #[serde(default)]
    pub dedicated: bool,
}

fn default_weight() -> u32 {
    1
}

impl Default for JobSetting {
    fn default() -> Self {
        JobSetting {
            weight: 1,
            dedicated: false,
        }
    }
}

/// A job setting that cannot be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobSettingError {
    /// The weight is 0 or above [`MAX_WEIGHT`].
    #[error("job {key:?}: weight {weight} is out of range 1..={MAX_WEIGHT}")]
    WeightOutOfRange {
        /// The job.
        key: String,
        /// The rejected weight.
        weight: u64,
    },
    /// The job was given a setting twice.
    #[error("job {key:?} has more than one setting")]
    Repeated {
        /// The job.
        key: String,
    },
}

/// Per-job weights and dedication, keyed by job. Only settings that differ
/// from the default are stored, so a list where every job has weight 1 and
/// none is dedicated is [`JobSettings::is_plain`] whatever was written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobSettings {
    by_key: std::collections::BTreeMap<JobKey, JobSetting>,
}

impl JobSettings {
    /// No settings: every job weighs 1 and shares its member.
    pub fn new() -> JobSettings {
        JobSettings::default()
    }

    /// Records the setting of `key`; rejects a weight out of range and a key
    /// given twice (even with the default setting).
    pub fn insert(&mut self, key: JobKey, setting: JobSetting) -> Result<(), JobSettingError> {
        if setting.weight == 0 || setting.weight > MAX_WEIGHT {
            return Err(JobSettingError::WeightOutOfRange {
                key: key.as_str().to_owned(),
                weight: u64::from(setting.weight),
            });
        }
        if self.by_key.contains_key(&key) {
            return Err(JobSettingError::Repeated {
                key: key.as_str().to_owned(),
            });
        }
        // Default entries are kept too, so that a repeat is caught; they
        // never count as "weighted" (see `is_plain`).
        self.by_key.insert(key, setting);
        Ok(())
    }

    /// The setting of `key` (the default when none was given).
    pub fn get(&self, key: &str) -> JobSetting {
        self.by_key.get(key).copied().unwrap_or_default()
    }

    /// Whether every job weighs 1 and none is dedicated.
    pub fn is_plain(&self) -> bool {
        self.by_key
            .values()
            .all(|setting| *setting == JobSetting::default())
    }

    /// The settings given, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&JobKey, &JobSetting)> + '_ {
        self.by_key.iter()
    }

    /// Weight and dedication per job of `jobs`, aligned with its byte order, in
    /// one merge pass (both are sorted by byte order); a setting for a key not
    /// in `jobs` is returned as the error.
    pub(crate) fn aligned(&self, jobs: &JobSet) -> Result<(Vec<u32>, Vec<bool>), &JobKey> {
        let mut weights = vec![1u32; jobs.len()];
        let mut dedicated = vec![false; jobs.len()];
        let listed = jobs.as_slice();
        let mut next = 0;
        for (key, setting) in &self.by_key {
            while listed.get(next).is_some_and(|job| job < key) {
                next += 1;
            }
            if listed.get(next) != Some(key) {
                return Err(key);
            }
            weights[next] = setting.weight;
            dedicated[next] = setting.dedicated;
        }
        Ok((weights, dedicated))
    }

    /// Total weight of the jobs of `jobs` (each job without a setting counts 1).
    pub fn total_weight(&self, jobs: &JobSet) -> u64 {
        jobs.iter()
            .map(|key| u64::from(self.get(key.as_str()).weight))
            .sum()
    }
}
