//! The Swarm's inputs: its job list, strategy and failover setting, and the
//! assignment they ask for.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Deserialize;
use shoal_core::job::{JobProblem, JobProblemReason, JobSettingError, MAX_WEIGHT};
use shoal_core::{
    AssignError, Assignment, JobSet, JobSetting, JobSettings, Member, MemberId, Strategy,
    reassign_cordoned,
};

use super::{DEFAULT_PROGRESS_DEADLINE, InputProblem, JobSource, Observation};
use crate::api::swarm::{ObservedInputs, StrategySpec, StrategyType, SwarmSpec};

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentJobs {
    /// The keys, in document order.
    pub keys: Vec<String>,
    /// The settings written, unchecked.
    pub settings: Vec<(usize, String, Option<u64>, Option<bool>)>,
}

/// Reads one job-list document (`text` of ConfigMap `name` key `key`) of Swarm `swarm`:
/// what observe keeps in [`super::Parsed::job_documents`].
pub fn parsed_job_document(
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
/// `jobsFrom` documents (`from_documents`: origin, key, weight, dedicated), checked against `jobs`.
/// Lists every problem, each naming the entry.
fn job_settings(
    swarm: &str,
    spec: &SwarmSpec,
    from_documents: Vec<(String, String, Option<u64>, Option<bool>)>,
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
    let mut settings = JobSettings::new();
    let mut problems = Vec::new();
    for (origin, key, weight, dedicated) in inline.chain(from_documents) {
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

/// Where a run of the merged job list comes from: a ConfigMap key, from `start` on.
struct PartOrigin {
    /// Position in the merged list of the part's first entry.
    start: usize,
    /// ConfigMap name.
    name: String,
    /// Data key.
    key: String,
}

/// Reads the job list of a Swarm: inline keys plus every `jobsFrom` part, merged in order.
pub fn job_list(swarm: &str, spec: &SwarmSpec, source: &JobSource) -> Result<JobSet, InputProblem> {
    job_list_and_settings(swarm, spec, source).map(|(jobs, _)| jobs)
}

/// Reads the job list of a Swarm (inline keys plus every `jobsFrom` part, merged in
/// order) and the weights and dedication given to its jobs. A missing or unreadable part
/// is a problem naming it (all such parts are named at once); a key repeated anywhere is
/// a problem naming both places.
pub fn job_list_and_settings(
    swarm: &str,
    spec: &SwarmSpec,
    source: &JobSource,
) -> Result<(JobSet, JobSettings), InputProblem> {
    read_job_list(swarm, spec, source, &super::Parsed::default())
}

/// [`job_list_and_settings`], taking a part's document from `parsed` when observe has
/// already read it (what observe keeps in [`super::Parsed::job_list`]).
pub fn read_job_list(
    swarm: &str,
    spec: &SwarmSpec,
    source: &JobSource,
    parsed: &super::Parsed,
) -> Result<(JobSet, JobSettings), InputProblem> {
    if let Some(from) = &spec.jobs_from
        && (from.named().is_empty() == from.selector.is_none())
    {
        return Err(InputProblem {
            reason: "JobConfigMapInvalid",
            message: format!(
                "Swarm {swarm}: jobsFrom takes exactly one of configMapKeyRef, configMapKeyRefs and selector"
            ),
        });
    }
    let mut keys: Vec<String> = spec.jobs.clone();
    let mut origins: Vec<PartOrigin> = Vec::new();
    let mut part_problems: Vec<InputProblem> = Vec::new();
    let mut document_settings = Vec::new();
    let parts: &[JobSource] = match source {
        JobSource::Parts(parts) => parts,
        single => std::slice::from_ref(single),
    };
    for part in parts {
        match read_part(swarm, part, parsed) {
            Ok(None) => {}
            Ok(Some(listed)) => {
                origins.push(PartOrigin {
                    start: keys.len(),
                    name: listed.name.to_owned(),
                    key: listed.key.to_owned(),
                });
                document_settings.extend(listed.settings.into_iter().map(
                    |(position, key, weight, dedicated)| {
                        let origin = format!(
                            "ConfigMap {} key {} jobs[{position}]",
                            listed.name, listed.key
                        );
                        (origin, key, weight, dedicated)
                    },
                ));
                keys.extend(listed.keys);
            }
            Err(problem) => part_problems.push(problem),
        }
    }
    if let Some(first) = part_problems.first() {
        return Err(InputProblem {
            reason: first.reason,
            message: part_problems
                .iter()
                .map(|problem| problem.message.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        });
    }
    let origin = |position: usize| match origins.iter().rev().find(|part| part.start <= position) {
        Some(part) => format!(
            "ConfigMap {} key {} jobs[{}]",
            part.name,
            part.key,
            position - part.start
        ),
        None => format!("spec.jobs[{position}]"),
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
    let settings = job_settings(swarm, spec, document_settings, &jobs)?;
    Ok((jobs, settings))
}

/// The keys one ConfigMap of `jobsFrom` lists, and where they come from.
struct PartKeys<'a> {
    /// ConfigMap name.
    name: &'a str,
    /// Data key.
    key: &'a str,
    /// The job keys, as listed.
    keys: Vec<String>,
    /// The settings its mapping entries give: (position in the part, key, weight, dedicated).
    settings: Vec<(usize, String, Option<u64>, Option<bool>)>,
}

/// The keys one part of `jobsFrom` lists, with the ConfigMap and key they come from;
/// `None` when the Swarm reads no ConfigMap.
fn read_part<'a>(
    swarm: &str,
    part: &'a JobSource,
    parsed: &super::Parsed,
) -> Result<Option<PartKeys<'a>>, InputProblem> {
    match part {
        JobSource::NotReferenced => Ok(None),
        JobSource::MissingConfigMap { name } => Err(InputProblem {
            reason: "JobConfigMapMissing",
            message: format!("Swarm {swarm}: jobsFrom ConfigMap {name} does not exist"),
        }),
        JobSource::MissingKey { name, key } => Err(InputProblem {
            reason: "JobConfigMapMissing",
            message: format!("Swarm {swarm}: jobsFrom ConfigMap {name} has no key {key}"),
        }),
        JobSource::NoMatch { selector } => Err(InputProblem {
            reason: "JobConfigMapMissing",
            message: format!("Swarm {swarm}: jobsFrom.selector {selector} matches no ConfigMap"),
        }),
        JobSource::Parts(_) => Err(InputProblem {
            reason: "JobConfigMapInvalid",
            message: format!("Swarm {swarm}: jobsFrom parts nested in parts"),
        }),
        JobSource::Text { name, key, text } => {
            let listed = match parsed.job_documents.get(&(name.clone(), key.clone())) {
                Some(document) => {
                    DocumentJobs::clone(document.as_ref().as_ref().map_err(Clone::clone)?)
                }
                None => parsed_job_document(swarm, name, key, text)?,
            };
            Ok(Some(PartKeys {
                name,
                key,
                keys: listed.keys,
                settings: listed.settings,
            }))
        }
    }
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

/// The inputs outside the Swarm's spec that a status is computed from: every pool with
/// its `spec.replicas`, and a fingerprint of the `jobsFrom` documents. The controller
/// records them in `status.observedInputs`; `kubectl shoal wait` computes them from its
/// own reads with this same function and waits until they agree.
pub fn observed_inputs<'a>(
    pools: impl IntoIterator<Item = (&'a str, u32)>,
    source: &JobSource,
) -> ObservedInputs {
    ObservedInputs {
        pools: pools
            .into_iter()
            .map(|(name, replicas)| (name.to_owned(), replicas))
            .collect(),
        job_sources: match source {
            JobSource::NotReferenced => None,
            source => {
                let mut bytes = Vec::new();
                canonical_source(source, &mut bytes);
                Some(format!("{:016x}", shoal_core::hash::key_hash(&bytes)))
            }
        },
    }
}

/// A job source as bytes: a tag per variant, then each text as `<length>:<bytes>`, so
/// that no two sources give the same bytes. A stable encoding (not `Debug`), since a
/// plugin of another build compares it.
fn canonical_source(source: &JobSource, out: &mut Vec<u8>) {
    let text = |out: &mut Vec<u8>, value: &str| {
        out.extend_from_slice(value.len().to_string().as_bytes());
        out.push(b':');
        out.extend_from_slice(value.as_bytes());
    };
    match source {
        JobSource::NotReferenced => out.extend_from_slice(b"none\n"),
        JobSource::MissingConfigMap { name } => {
            out.extend_from_slice(b"missing ");
            text(out, name);
        }
        JobSource::MissingKey { name, key } => {
            out.extend_from_slice(b"missing-key ");
            text(out, name);
            text(out, key);
        }
        JobSource::Text {
            name,
            key,
            text: document,
        } => {
            out.extend_from_slice(b"text ");
            text(out, name);
            text(out, key);
            text(out, document);
        }
        JobSource::Parts(parts) => {
            out.extend_from_slice(format!("parts {}\n", parts.len()).as_bytes());
            for part in parts {
                canonical_source(part, out);
            }
        }
        JobSource::NoMatch { selector } => {
            out.extend_from_slice(b"no-match ");
            text(out, selector);
        }
    }
    out.push(b'\n');
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

/// How long a member may be unavailable before its jobs move, when `failover.after` is
/// unset: as long as Kubernetes waits before evicting pods from an unreachable node.
pub const DEFAULT_FAILOVER_AFTER: &str = "5m";

/// `failover.after` (default [`DEFAULT_FAILOVER_AFTER`]), parsed; a bad value is a problem
/// and means "never".
pub(super) fn failover_after(
    obs: &Observation,
    problems: &mut Vec<InputProblem>,
) -> Option<Duration> {
    let text = obs.spec.failover.after.as_deref();
    duration_setting(
        obs,
        "failover.after",
        text.unwrap_or(DEFAULT_FAILOVER_AFTER),
    )
    .map_err(|problem| problems.push(problem.with_reason("InvalidFailover")))
    .ok()
}

/// The maintenance windows (`approval.windows`), checked by the one window rule; `None`
/// with the problem (`InvalidWindow`, naming the window and the input) when one is bad:
/// every window then counts as closed, so nothing but re-homing starts until it is fixed.
pub(super) fn windows(
    obs: &Observation,
    problems: &mut Vec<InputProblem>,
) -> Option<shoal_core::window::Windows> {
    obs.spec
        .approval
        .windows()
        .map_err(|error| {
            problems.push(InputProblem {
                reason: "InvalidWindow",
                message: format!(
                    "Swarm {}: approval.windows: {error}; no approved revision starts until it is fixed",
                    obs.swarm
                ),
            })
        })
        .ok()
}

/// A duration setting of the spec, parsed, or the problem naming it.
fn duration_setting(
    obs: &Observation,
    setting: &str,
    text: &str,
) -> Result<Duration, InputProblem> {
    shoal_core::duration::parse(text).map_err(|error| InputProblem {
        reason: "InvalidRollout",
        message: format!("Swarm {}: {setting}: {error}", obs.swarm),
    })
}

impl InputProblem {
    fn with_reason(self, reason: &'static str) -> Self {
        InputProblem { reason, ..self }
    }
}

/// `rollout.progressDeadline` (default [`DEFAULT_PROGRESS_DEADLINE`]), parsed; a bad value
/// is a problem, and no restart rollout halts on time until it is fixed.
pub(super) fn progress_deadline(
    obs: &Observation,
    problems: &mut Vec<InputProblem>,
) -> Option<Duration> {
    let text = obs.spec.rollout.progress_deadline.as_deref();
    duration_setting(
        obs,
        "rollout.progressDeadline",
        text.unwrap_or(DEFAULT_PROGRESS_DEADLINE),
    )
    .map_err(|problem| problems.push(problem))
    .ok()
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
    cordoned: &BTreeSet<MemberId>,
    in_force: Option<&Assignment>,
) -> Result<Desired, InputProblem> {
    let (jobs, settings) = match &obs.parsed.job_list {
        Some(job_list) => Result::clone(job_list)?,
        None => read_job_list(&obs.swarm, &obs.spec, &obs.job_source, &obs.parsed)?,
    };
    let strategy = obs.spec.strategy.clone();
    let assignment = reassign_cordoned(
        in_force,
        &jobs,
        &settings,
        members,
        cordoned,
        &strategy_of(&strategy),
    )
    .map_err(|error| InputProblem {
        reason: match error {
            AssignError::SettingsNotSupported { .. }
            | AssignError::SettingForUnlistedJob { .. }
            | AssignError::TooManyDedicated { .. } => "InvalidJobSettings",
            AssignError::CordonWithSettings => "CordonWithJobSettings",
            AssignError::AllCordoned { .. } => "AllMembersCordoned",
            _ if members.is_empty() => "NoMembers",
            _ => "AssignmentFailed",
        },
        message: format!("Swarm {}: {error}", obs.swarm),
    })?;
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
    if obs.spec.rollout.max_unavailable == 0 {
        return Some(InputProblem {
            reason: "InvalidRollout",
            message: format!(
                "Swarm {}: rollout.maxUnavailable is 0, but at least one member must be allowed to restart (else the jobs a revision moves would run nowhere); no new revision is applied until it is 1 or more",
                obs.swarm
            ),
        });
    }
    restart_of_deployment_pools(obs)
}

/// `reload: Restart` restarts a member by evicting its pod, which only a StatefulSet gives
/// back under the same name: a Deployment's replacement is a new member, whose grant
/// would be restarted in turn, without end. Refused, naming the pools.
fn restart_of_deployment_pools(obs: &Observation) -> Option<InputProblem> {
    if obs.spec.reload != crate::api::swarm::ReloadPolicy::Restart {
        return None;
    }
    let deployments: Vec<&str> = obs
        .pools
        .iter()
        .filter(|pool| pool.deployment_pods.is_some())
        .map(|pool| pool.name.as_str())
        .collect();
    (!deployments.is_empty()).then(|| InputProblem {
        reason: "InvalidRollout",
        message: format!(
            "Swarm {}: reload: Restart needs StatefulSet pools, but {} {} a Deployment (an evicted Deployment pod comes back as a new member under a new name); use reload: HotReload with Deployment pools; no new revision is applied meanwhile",
            obs.swarm,
            deployments.join(", "),
            if deployments.len() == 1 { "is" } else { "are" }
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec_reading(jobs_from: serde_json::Value) -> SwarmSpec {
        serde_json::from_value(serde_json::json!({ "jobsFrom": jobs_from })).expect("spec")
    }

    fn part(name: &str, text: &str) -> JobSource {
        JobSource::Text {
            name: name.to_owned(),
            key: "config.yml".to_owned(),
            text: text.to_owned(),
        }
    }

    fn two_refs() -> SwarmSpec {
        spec_reading(serde_json::json!({"configMapKeyRefs": [
            {"name": "jobs-a", "key": "config.yml"},
            {"name": "jobs-b", "key": "config.yml"},
        ]}))
    }

    #[test]
    fn parts_are_merged_in_order() {
        let source = JobSource::Parts(vec![
            part("jobs-a", "jobs: [a, b]"),
            part("jobs-b", "jobs: [c]"),
        ]);
        let jobs = job_list("demo", &two_refs(), &source).expect("a valid list");
        let keys: Vec<&str> = jobs.iter().map(|key| key.as_str()).collect();
        assert_eq!(keys.len(), 3);
        for key in ["a", "b", "c"] {
            assert!(keys.contains(&key), "{key} missing from {keys:?}");
        }
    }

    #[test]
    fn a_key_in_two_parts_is_refused_naming_both_config_maps_and_positions() {
        let source = JobSource::Parts(vec![
            part("jobs-a", "jobs: [a, b]"),
            part("jobs-b", "jobs: [c, b]"),
        ]);
        let problem = job_list("demo", &two_refs(), &source).expect_err("a duplicate");
        assert_eq!(problem.reason, "InvalidJobs");
        assert!(
            problem.message.contains(
                "ConfigMap jobs-b key config.yml jobs[1] \"b\" repeats ConfigMap jobs-a key config.yml jobs[1]"
            ),
            "{}",
            problem.message
        );
    }

    #[test]
    fn settings_in_any_part_are_read_and_a_bad_one_is_named_by_its_part_and_position() {
        let source = JobSource::Parts(vec![
            part("jobs-a", "jobs: [a, {key: b, weight: 3}]"),
            part(
                "jobs-b",
                "jobs: [{key: c, dedicated: true}, {key: d, weight: 0}]",
            ),
        ]);
        let problem = job_list_and_settings("demo", &two_refs(), &source).expect_err("weight 0");
        assert_eq!(problem.reason, "InvalidJobSettings");
        assert!(
            problem
                .message
                .contains("ConfigMap jobs-b key config.yml jobs[1] job \"d\": weight 0"),
            "{}",
            problem.message
        );
        let source = JobSource::Parts(vec![
            part("jobs-a", "jobs: [a, {key: b, weight: 3}]"),
            part("jobs-b", "jobs: [{key: c, dedicated: true}, d]"),
        ]);
        let (jobs, settings) = job_list_and_settings("demo", &two_refs(), &source).expect("valid");
        assert_eq!(jobs.len(), 4);
        assert_eq!(settings.get("b").weight, 3);
        assert!(settings.get("c").dedicated);
        assert_eq!(settings.get("d"), JobSetting::default());
    }

    #[test]
    fn every_missing_part_is_named() {
        let source = JobSource::Parts(vec![
            JobSource::MissingConfigMap {
                name: "jobs-a".to_owned(),
            },
            part("jobs-b", "jobs: [c]"),
            JobSource::MissingKey {
                name: "jobs-c".to_owned(),
                key: "config.yml".to_owned(),
            },
        ]);
        let problem = job_list("demo", &two_refs(), &source).expect_err("missing parts");
        assert_eq!(problem.reason, "JobConfigMapMissing");
        assert!(
            problem.message.contains("ConfigMap jobs-a does not exist"),
            "{}",
            problem.message
        );
        assert!(
            problem
                .message
                .contains("ConfigMap jobs-c has no key config.yml"),
            "{}",
            problem.message
        );
    }

    #[test]
    fn a_selector_matching_nothing_is_a_problem_naming_the_selector() {
        let spec = spec_reading(serde_json::json!({"selector": {
            "matchLabels": {"app": "streams"}, "key": "config.yml"
        }}));
        let source = JobSource::NoMatch {
            selector: "app=streams".to_owned(),
        };
        let problem = job_list("demo", &spec, &source).expect_err("no part");
        assert!(
            problem.message.contains("app=streams matches no ConfigMap"),
            "{}",
            problem.message
        );
    }

    #[test]
    fn a_jobs_from_with_two_forms_or_none_is_refused() {
        let both = spec_reading(serde_json::json!({
            "configMapKeyRef": {"name": "jobs-a", "key": "config.yml"},
            "selector": {"matchLabels": {"app": "streams"}, "key": "config.yml"},
        }));
        let none = spec_reading(serde_json::json!({}));
        for spec in [both, none] {
            let problem =
                job_list("demo", &spec, &part("jobs-a", "jobs: [a]")).expect_err("ambiguous");
            assert!(
                problem.message.contains("exactly one of"),
                "{}",
                problem.message
            );
        }
    }

    #[test]
    fn the_single_config_map_form_still_reads() {
        let spec = spec_reading(serde_json::json!({
            "configMapKeyRef": {"name": "jobs-a", "key": "config.yml"}
        }));
        let jobs = job_list("demo", &spec, &part("jobs-a", "jobs: [a, b]")).expect("valid");
        assert_eq!(jobs.len(), 2);
    }
}
