//! The Swarm's inputs: its job list, strategy and failover setting, and the
//! assignment they ask for.

use std::time::Duration;

use serde::Deserialize;
use shoal_core::job::{JobProblem, JobProblemReason};
use shoal_core::{Assignment, JobSet, Member, Strategy, reassign};

use super::{DEFAULT_PROGRESS_DEADLINE, InputProblem, JobSource, Observation};
use crate::crd::{StrategySpec, StrategyType, SwarmSpec};

/// Default virtual nodes of the ring strategy.
pub const DEFAULT_VNODES: u32 = 64;

/// The seed's job-list document: `jobs: [...]`.
#[derive(Deserialize)]
struct JobListDocument {
    jobs: Option<Vec<String>>,
}

/// Reads the job list of a Swarm: inline keys plus the `jobsFrom` document.
pub fn job_list(swarm: &str, spec: &SwarmSpec, source: &JobSource) -> Result<JobSet, InputProblem> {
    let mut keys: Vec<String> = spec.jobs.clone();
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
            let document: JobListDocument = serde_saphyr::from_str_with_options(
                text,
                shoal_core::format::yaml_options_for(text.len()),
            )
            .map_err(|error| InputProblem {
                    reason: "JobConfigMapInvalid",
                    message: format!(
                        "Swarm {swarm}: ConfigMap {name} key {key} is not a `jobs: [...]` YAML document: {error}"
                    ),
                })?;
            let Some(listed) = document.jobs else {
                return Err(InputProblem {
                    reason: "JobConfigMapInvalid",
                    message: format!(
                        "Swarm {swarm}: ConfigMap {name} key {key} has no `jobs` list"
                    ),
                });
            };
            keys.extend(listed);
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
    JobSet::parse(keys).map_err(|invalid| InputProblem {
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
    })
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
    let text = obs.spec.failover.after.as_deref();
    duration_setting(
        obs,
        "failover.after",
        text.unwrap_or(DEFAULT_FAILOVER_AFTER),
    )
    .map_err(|problem| problems.push(problem.with_reason("InvalidFailover")))
    .ok()
}

/// A duration setting of the spec, parsed, or the problem naming it.
fn duration_setting(
    obs: &Observation,
    setting: &str,
    text: &str,
) -> Result<Duration, InputProblem> {
    parse_duration(text).map_err(|error| InputProblem {
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
    let jobs = job_list(&obs.swarm, &obs.spec, &obs.job_source)?;
    let strategy = obs.spec.strategy.clone();
    let assignment =
        reassign(in_force, &jobs, members, &strategy_of(&strategy)).map_err(|error| {
            InputProblem {
                reason: if members.is_empty() {
                    "NoMembers"
                } else {
                    "AssignmentFailed"
                },
                message: format!("Swarm {}: {error}", obs.swarm),
            }
        })?;
    Ok(Desired {
        jobs,
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
