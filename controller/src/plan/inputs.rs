//! The Swarm's inputs: its job list, strategy and failover setting, and the
//! assignment they ask for.

use std::time::Duration;

use serde::Deserialize;
use shoal_core::job::{JobProblem, JobProblemReason, JobSettingError, MAX_WEIGHT};
use shoal_core::{
    AssignError, Assignment, JobSet, JobSetting, JobSettings, Member, Strategy, reassign_weighted,
};

use super::{InputProblem, JobSource, Observation};
use crate::crd::{StrategySpec, StrategyType, SwarmSpec};

/// Default virtual nodes of the ring strategy.
pub const DEFAULT_VNODES: u32 = 64;

/// The seed's job-list document: `jobs: [...]`, each entry a key or `{key, weight?, dedicated?}`.
#[derive(Deserialize)]
struct JobListDocument {
    jobs: Option<Vec<JobEntry>>,
}

/// One entry of a job-list document: a bare key, or a key with its setting.
struct JobEntry {
    key: String,
    /// Weight and dedication as written (`None` for a bare key); checked later so that
    /// the problem names the entry.
    setting: Option<(Option<u64>, Option<bool>)>,
}

/// The mapping form of a [`JobEntry`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DetailedJobEntry {
    key: String,
    #[serde(default)]
    weight: Option<u64>,
    #[serde(default)]
    dedicated: Option<bool>,
}

impl<'de> Deserialize<'de> for JobEntry {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntryVisitor;
        impl<'de> serde::de::Visitor<'de> for EntryVisitor {
            type Value = JobEntry;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a job key or a mapping {key, weight, dedicated}")
            }
            fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<JobEntry, E> {
                Ok(JobEntry {
                    key: key.to_owned(),
                    setting: None,
                })
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, map: M) -> Result<JobEntry, M::Error> {
                let entry = DetailedJobEntry::deserialize(
                    serde::de::value::MapAccessDeserializer::new(map),
                )?;
                Ok(JobEntry {
                    key: entry.key,
                    setting: Some((entry.weight, entry.dedicated)),
                })
            }
        }
        deserializer.deserialize_any(EntryVisitor)
    }
}

/// The jobs one job-list document lists: its keys in order, and the settings its
/// mapping entries give, as `(position in the document, key, weight, dedicated)`.
pub(super) struct DocumentJobs {
    /// The keys, in document order.
    pub keys: Vec<String>,
    /// The settings written, unchecked.
    pub settings: Vec<(usize, String, Option<u64>, Option<bool>)>,
}

/// Reads one job-list document (`text` of ConfigMap `name` key `key`).
pub(super) fn document_jobs(
    swarm: &str,
    name: &str,
    key: &str,
    text: &str,
) -> Result<DocumentJobs, InputProblem> {
    let document: JobListDocument =
        serde_saphyr::from_str_with_options(text, shoal_core::format::yaml_options_for(text.len()))
            .map_err(|error| InputProblem {
                reason: "JobConfigMapInvalid",
                message: format!(
                    "Swarm {swarm}: ConfigMap {name} key {key} is not a `jobs: [...]` YAML document: {error}"
                ),
            })?;
    let Some(listed) = document.jobs else {
        return Err(InputProblem {
            reason: "JobConfigMapInvalid",
            message: format!("Swarm {swarm}: ConfigMap {name} key {key} has no `jobs` list"),
        });
    };
    let mut jobs = DocumentJobs {
        keys: Vec::with_capacity(listed.len()),
        settings: Vec::new(),
    };
    for (position, entry) in listed.into_iter().enumerate() {
        if let Some((weight, dedicated)) = entry.setting {
            jobs.settings
                .push((position, entry.key.clone(), weight, dedicated));
        }
        jobs.keys.push(entry.key);
    }
    Ok(jobs)
}

/// The job settings of a Swarm: `spec.jobSettings` and the mapping entries of its
/// `jobsFrom` document (`from_document`, named `document`), checked against `jobs`.
/// Lists every problem, each naming the entry.
fn job_settings(
    swarm: &str,
    spec: &SwarmSpec,
    from_document: Vec<(usize, String, Option<u64>, Option<bool>)>,
    document: Option<&(String, String)>,
    jobs: &JobSet,
) -> Result<JobSettings, InputProblem> {
    let inline = spec.job_settings.iter().map(|(key, setting)| {
        (
            format!("spec.jobSettings[{key:?}]"),
            key.clone(),
            setting.weight.map(u64::from),
            setting.dedicated,
        )
    });
    let written = from_document
        .into_iter()
        .map(|(position, key, weight, dedicated)| {
            let (name, data_key) = document.cloned().unwrap_or_default();
            (
                format!("ConfigMap {name} key {data_key} jobs[{position}]"),
                key,
                weight,
                dedicated,
            )
        });
    let mut settings = JobSettings::new();
    let mut problems = Vec::new();
    for (origin, key, weight, dedicated) in inline.chain(written) {
        let weight = weight.unwrap_or(1);
        let setting = JobSetting {
            weight: u32::try_from(weight).unwrap_or(u32::MAX),
            dedicated: dedicated.unwrap_or(false),
        };
        let Some(position) = jobs.position(&key) else {
            problems.push(format!(
                "{origin} names job {key:?}, which is not in the job list"
            ));
            continue;
        };
        let job = jobs.as_slice()[position].clone();
        match settings.insert(job, setting) {
            Ok(()) => {}
            Err(JobSettingError::WeightOutOfRange { .. }) => problems.push(format!(
                "{origin} job {key:?}: weight {weight} is out of range 1..={MAX_WEIGHT}"
            )),
            Err(JobSettingError::Repeated { .. }) => problems.push(format!(
                "{origin} job {key:?}: the job already has a setting (give it once, in spec.jobSettings or in the list)"
            )),
        }
    }
    if problems.is_empty() {
        Ok(settings)
    } else {
        Err(InputProblem {
            reason: "InvalidJobSettings",
            message: format!(
                "Swarm {swarm}: invalid job settings ({} problem{}): {}",
                problems.len(),
                if problems.len() == 1 { "" } else { "s" },
                problems.join("; ")
            ),
        })
    }
}

/// Reads the job list of a Swarm: inline keys plus the `jobsFrom` document.
pub fn job_list(swarm: &str, spec: &SwarmSpec, source: &JobSource) -> Result<JobSet, InputProblem> {
    job_list_and_settings(swarm, spec, source).map(|(jobs, _)| jobs)
}

/// Reads the job list of a Swarm and the weights and dedication given to its jobs.
pub fn job_list_and_settings(
    swarm: &str,
    spec: &SwarmSpec,
    source: &JobSource,
) -> Result<(JobSet, JobSettings), InputProblem> {
    let mut keys: Vec<String> = spec.jobs.clone();
    let mut document_settings = Vec::new();
    // Where the merged list's entries come from, to name them in errors.
    let mut from_config_map: Option<(String, String)> = None;
    match source {
        JobSource::NotReferenced => {}
        JobSource::MissingConfigMap { name } => {
            return Err(InputProblem {
                reason: "JobConfigMapMissing",
                message: format!("Swarm {swarm}: jobsFrom ConfigMap {name} does not exist"),
            });
        }
        JobSource::MissingKey { name, key } => {
            return Err(InputProblem {
                reason: "JobConfigMapMissing",
                message: format!("Swarm {swarm}: jobsFrom ConfigMap {name} has no key {key}"),
            });
        }
        JobSource::Text { name, key, text } => {
            let listed = document_jobs(swarm, name, key, text)?;
            keys.extend(listed.keys);
            document_settings = listed.settings;
            from_config_map = Some((name.clone(), key.clone()));
        }
    }
    let inline = spec.jobs.len();
    let origin = |position: usize| match &from_config_map {
        Some((name, key)) if position >= inline => {
            format!("ConfigMap {name} key {key} jobs[{}]", position - inline)
        }
        _ => format!("spec.jobs[{position}]"),
    };
    let jobs = JobSet::parse(keys).map_err(|invalid| InputProblem {
        reason: "InvalidJobs",
        message: format!(
            "Swarm {swarm}: invalid job list ({} problem{}): {}",
            invalid.problems.len(),
            if invalid.problems.len() == 1 { "" } else { "s" },
            invalid
                .problems
                .iter()
                .map(|problem| describe_problem(problem, &origin))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    })?;
    let settings = job_settings(
        swarm,
        spec,
        document_settings,
        from_config_map.as_ref(),
        &jobs,
    )?;
    Ok((jobs, settings))
}

/// One problem of a job list, naming where each entry involved comes from.
fn describe_problem(problem: &JobProblem, origin: &dyn Fn(usize) -> String) -> String {
    let key: String = if problem.key.chars().count() > 80 {
        format!("{:?}…", problem.key.chars().take(80).collect::<String>())
    } else {
        format!("{:?}", problem.key)
    };
    match &problem.reason {
        JobProblemReason::Duplicate { first_position } => format!(
            "{} {key} repeats {}",
            origin(problem.position),
            origin(*first_position)
        ),
        reason => format!("{} {key}: {reason}", origin(problem.position)),
    }
}

/// The core strategy for a strategy spec.
pub fn strategy_of(spec: &StrategySpec) -> Strategy {
    match spec.type_ {
        StrategyType::Bounded => Strategy::Bounded {
            epsilon: spec.epsilon.unwrap_or(0.0),
        },
        StrategyType::Jump => Strategy::Jump,
        StrategyType::Ring => Strategy::Ring {
            vnodes: spec.vnodes.unwrap_or(DEFAULT_VNODES),
        },
        StrategyType::Sticky => Strategy::Sticky,
    }
}

/// Parses a duration such as `90s`, `5m`, `1h30m`, `250ms`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration".to_owned());
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            return Err(format!("duration {text:?}: expected a number at {rest:?}"));
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("duration {text:?}: number too large"))?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(|b| b.is_ascii_alphabetic()).count();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let part = match unit {
            "ms" => Duration::from_millis(number),
            "s" => Duration::from_secs(number),
            "m" => Duration::from_secs(number.saturating_mul(60)),
            "h" => Duration::from_secs(number.saturating_mul(3600)),
            "" => return Err(format!("duration {text:?}: missing unit (ms, s, m, h)")),
            other => {
                return Err(format!(
                    "duration {text:?}: unknown unit {other:?} (ms, s, m, h)"
                ));
            }
        };
        total = total.saturating_add(part);
    }
    Ok(total)
}

/// How long a member may be unavailable before its jobs move, when `failover.after` is
/// unset: as long as Kubernetes waits before evicting pods from an unreachable node.
pub const DEFAULT_FAILOVER_AFTER: &str = "5m";

/// `failover.after` (default [`DEFAULT_FAILOVER_AFTER`]), parsed; a bad value is a problem
/// and means "never".
pub(super) fn failover_after(
    obs: &Observation,
    problems: &mut Vec<InputProblem>,
) -> Option<Duration> {
    let text = obs
        .spec
        .failover
        .after
        .as_deref()
        .unwrap_or(DEFAULT_FAILOVER_AFTER);
    match parse_duration(text) {
        Ok(after) => Some(after),
        Err(error) => {
            problems.push(InputProblem {
                reason: "InvalidFailover",
                message: format!("Swarm {}: failover.after: {error}", obs.swarm),
            });
            None
        }
    }
}

/// What the inputs ask for: the job list, the strategy it was assigned with, and the assignment.
pub(super) struct Desired {
    /// The job list.
    pub jobs: JobSet,
    /// The weight and dedication given to jobs of `jobs`.
    pub settings: JobSettings,
    /// The strategy as written in the Swarm.
    pub strategy: StrategySpec,
    /// The assignment of `jobs` to the members.
    pub assignment: Assignment,
}

/// The assignment the Swarm's job list and strategy ask for, from the assignment in force
/// (read from the cluster by `history::in_force`; only `sticky` looks at it).
pub(super) fn desired(
    obs: &Observation,
    members: &[Member],
    in_force: Option<&Assignment>,
) -> Result<Desired, InputProblem> {
    let (jobs, settings) = job_list_and_settings(&obs.swarm, &obs.spec, &obs.job_source)?;
    let strategy = obs.spec.strategy.clone();
    let assignment =
        reassign_weighted(in_force, &jobs, &settings, members, &strategy_of(&strategy)).map_err(
            |error| InputProblem {
                reason: match error {
                    AssignError::SettingsNotSupported { .. }
                    | AssignError::SettingForUnlistedJob { .. }
                    | AssignError::TooManyDedicated { .. } => "InvalidJobSettings",
                    _ if members.is_empty() => "NoMembers",
                    _ => "AssignmentFailed",
                },
                message: format!("Swarm {}: {error}", obs.swarm),
            },
        )?;
    Ok(Desired {
        jobs,
        settings,
        strategy,
        assignment,
    })
}

/// `rollout.maxUnavailable` of 0 would restart nothing, so under `Restart` the jobs a
/// revision moves would run nowhere: refused (the schema refuses it too).
pub(super) fn rollout_problem(obs: &Observation) -> Option<InputProblem> {
    (obs.spec.rollout.max_unavailable == 0).then(|| InputProblem {
        reason: "InvalidRollout",
        message: format!(
            "Swarm {}: rollout.maxUnavailable is 0, but at least one member must be allowed to restart (else the jobs a revision moves would run nowhere); no new revision is applied until it is 1 or more",
            obs.swarm
        ),
    })
}
