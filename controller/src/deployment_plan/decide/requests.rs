//! User operations on one instance, asked for with the annotation
//! `shoal.dev/operate` on the plan (what `kubectl shoal relocate | stop |
//! start | restart` writes).
//!
//! # Grammar
//!
//! The value is a comma-separated list of requests, each
//! `<verb> <instance> [to <member>] [#<tag>]`:
//!
//! | verb | operation | what happens once approved |
//! | --- | --- | --- |
//! | `relocate` | `RELOCATE` | make-before-break to `<member>`, or (without `to`) to the member placement chooses with the current one excluded |
//! | `stop` | `STOP` | the entry becomes `stopped`: the process stops (the entry leaves its member's slice), the placement and its capacity are kept |
//! | `start` | `RESTART` of a stopped instance | as `restart` |
//! | `restart` | `RESTART` | the entry is `restarting` (out of the slice) until its member reports it `removed` or stops reporting it, then `pending` again (back in the slice); it succeeds when reported `installed` |
//!
//! The `#<tag>` is free text that makes a repeat distinct (the plugin puts
//! the time there), so `restart web-1` can be asked for twice.
//!
//! # Each request once
//!
//! A request is handled once: accepted (an operation through the plan's
//! approval policy, carrying the request in `status.operations[].request`)
//! or refused (a Warning `OperationRequestRefused` naming the request and
//! why). `status.handledRequests` lists the requests of the current value
//! already handled, so a standing annotation is never repeated; a request
//! that leaves the annotation is forgotten. Refused: an unknown verb, an
//! instance the plan does not have in force, an instance with an operation
//! open (waiting or under way), `stop` of a stopped instance, `start` of one
//! that is not stopped, `relocate` of a stopped one, `to` on another verb,
//! or a `to` member that is not a member of the Swarm, is the current one,
//! or cannot hold the instance (capabilities, capacity, per-member limit).
//! A value with more than [`MAX_REQUESTS`] new requests is refused whole,
//! once (each request may run a placement).

use std::collections::BTreeSet;

use shoal_core::MemberId;
use shoal_core::deploy::{InstanceId, Operation, OperationType, PlanRequest, place_plan};
use shoal_core::names::ANNOTATION_OPERATE;

use crate::api::deployment_plan::InstanceStatus;
use crate::api::limits::{MAX_HANDLED_REQUESTS, MAX_REQUEST_TEXT, clip};
use crate::observed::ordinal_member;

/// Most new requests one pass reads; a value with more is refused whole.
pub const MAX_REQUESTS: usize = crate::api::limits::MAX_REQUESTS as usize;

/// What a user asks for one instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// Move it (make-before-break).
    Relocate,
    /// Stop its process, keeping its placement.
    Stop,
    /// Start a stopped instance again.
    Start,
    /// Restart its process.
    Restart,
}

impl Verb {
    /// The word in the annotation.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Relocate => "relocate",
            Verb::Stop => "stop",
            Verb::Start => "start",
            Verb::Restart => "restart",
        }
    }

    fn parse(word: &str) -> Option<Verb> {
        [Verb::Relocate, Verb::Stop, Verb::Start, Verb::Restart]
            .into_iter()
            .find(|verb| verb.as_str() == word)
    }
}

/// One parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperateRequest {
    /// The verb.
    pub verb: Verb,
    /// The instance name, `<plan>-<n>`.
    pub instance: String,
    /// The member asked for (`relocate ... to <member>`).
    pub to: Option<String>,
}

/// The request items of an annotation value, trimmed, in order.
pub fn request_items(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The item asking for `verb` on `instance` (to `to`), tagged with `tag`
/// so that it is distinct from an earlier identical request.
pub fn request_item(verb: Verb, instance: &str, to: Option<&str>, tag: &str) -> String {
    let to = to.map_or(String::new(), |member| format!(" to {member}"));
    format!("{} {instance}{to} #{tag}", verb.as_str())
}

/// Parses one item (see the module docs), naming what is wrong.
pub fn parse_request(item: &str) -> Result<OperateRequest, String> {
    let words: Vec<&str> = item
        .split_whitespace()
        .filter(|word| !word.starts_with('#'))
        .collect();
    let usage = "expected `<relocate|stop|start|restart> <instance> [to <member>] [#<tag>]`";
    let (verb, instance, rest) = match words.as_slice() {
        [verb, instance, rest @ ..] => (verb, instance, rest),
        _ => return Err(usage.to_owned()),
    };
    let verb = Verb::parse(&verb.to_ascii_lowercase())
        .ok_or_else(|| format!("{verb:?} is not a verb; {usage}"))?;
    let to = match rest {
        [] => None,
        ["to", member] if verb == Verb::Relocate => Some((*member).to_owned()),
        ["to", _] => {
            return Err("only relocate takes `to <member>`".to_owned());
        }
        _ => return Err(usage.to_owned()),
    };
    Ok(OperateRequest {
        verb,
        instance: (*instance).to_owned(),
        to,
    })
}

/// What deciding a request looks at.
pub(super) struct RequestContext<'a> {
    /// The plan's name.
    pub plan: &'a str,
    /// `status.instances` as this pass has it.
    pub entries: &'a [InstanceStatus],
    /// Every operation of the plan (open ones make their instance busy).
    pub operations: &'a [Operation],
    /// The placement request of this pass (members, reservations, placement in force).
    pub placement: &'a PlanRequest,
}

/// The operation `request` asks for (`PENDING`, not yet through the gate,
/// its id not yet unique), or why it is refused.
pub(super) fn operation_for(
    context: &RequestContext<'_>,
    request: &OperateRequest,
) -> Result<Operation, String> {
    let name = &request.instance;
    let instance = InstanceId::parse(context.plan, name)
        .map_err(|_| format!("{name:?} is not an instance of this plan"))?;
    let current = context
        .placement
        .in_force
        .get(&instance)
        .cloned()
        .ok_or_else(|| format!("instance {name} is not in force (not placed, or leaving)"))?;
    if let Some(open) = context
        .operations
        .iter()
        .find(|op| op.instance == instance && !op.state.is_terminal())
    {
        return Err(format!(
            "instance {name} has operation {} {}; ask again once it finished",
            open.id, open.state
        ));
    }
    let entry = context
        .entries
        .iter()
        .find(|entry| entry.name == *name && entry.member == current.pod_name())
        .ok_or_else(|| format!("instance {name} is not in force"))?;
    let stopped = entry.state == "stopped";
    let (operation_type, to) = match request.verb {
        Verb::Stop if stopped => return Err(format!("instance {name} is already stopped")),
        Verb::Stop => (OperationType::Stop, None),
        Verb::Start if !stopped => {
            return Err(format!(
                "instance {name} is {}, not stopped; use restart",
                entry.state
            ));
        }
        Verb::Start | Verb::Restart => (OperationType::Restart, Some(current.clone())),
        Verb::Relocate if stopped => {
            return Err(format!(
                "instance {name} is stopped; start it before relocating it"
            ));
        }
        Verb::Relocate => (
            OperationType::Relocate,
            Some(relocation_target(
                context,
                &instance,
                &current,
                request.to.as_deref(),
            )?),
        ),
    };
    Ok(Operation::planned(
        operation_type,
        instance,
        Some(current),
        to,
        entry.deployment,
    ))
}

/// The member `instance` relocates to: `named` when it can hold the
/// instance, else the member placement chooses with `current` excluded.
fn relocation_target(
    context: &RequestContext<'_>,
    instance: &InstanceId,
    current: &MemberId,
    named: Option<&str>,
) -> Result<MemberId, String> {
    let mut request = context.placement.clone();
    match named {
        Some(pod) => {
            let member = ordinal_member(pod)
                .filter(|member| request.members.iter().any(|m| &m.id == member))
                .ok_or_else(|| format!("{pod:?} is not a member of the plan's Swarm"))?;
            if &member == current {
                return Err(format!("instance {instance} already runs on {pod}"));
            }
            // Sticky placement keeps an instance where it is when that member can
            // hold it: so placing it "in force" on the named member checks exactly that.
            request.in_force.insert(instance.clone(), member.clone());
            let placed = place_plan(&request).map_err(|error| error.to_string())?;
            if placed.target.get(instance) == Some(&member) {
                Ok(member)
            } else {
                Err(format!(
                    "member {pod} cannot hold instance {instance} (capabilities, capacity or the per-member limit)"
                ))
            }
        }
        None => {
            request.in_force.remove(instance);
            for member in request.members.iter_mut().filter(|m| &m.id == current) {
                member.available = false;
            }
            let placed = place_plan(&request).map_err(|error| error.to_string())?;
            placed
                .target
                .get(instance)
                .filter(|member| *member != current)
                .cloned()
                .ok_or_else(|| {
                    let why = placed
                        .unplaced
                        .iter()
                        .find(|unplaced| &unplaced.instance == instance)
                        .map_or(String::new(), |unplaced| format!(": {}", unplaced.reason));
                    format!("no other member can hold instance {instance}{why}")
                })
        }
    }
}

/// The requests of `value` the controller reads and remembers as handled: the first
/// [`MAX_HANDLED_REQUESTS`], each cut to [`MAX_REQUEST_TEXT`] characters (the bounds of
/// `status.handledRequests`; a request that long names no instance and is refused).
fn read_items(value: &str) -> Vec<String> {
    request_items(value)
        .into_iter()
        .take(MAX_HANDLED_REQUESTS as usize)
        .map(|item| clip(&item, MAX_REQUEST_TEXT))
        .collect()
}

/// The requests of `value` not yet handled (per `handled`), in order.
pub(super) fn unhandled(value: &str, handled: &[String]) -> Vec<String> {
    let handled: BTreeSet<&str> = handled.iter().map(String::as_str).collect();
    read_items(value)
        .into_iter()
        .filter(|item| !handled.contains(item.as_str()))
        .collect()
}

/// What one pass made of the annotation.
#[derive(Debug, Default)]
pub(super) struct TakenRequests {
    /// New operations (`PENDING`, each carrying its request), for the gate.
    pub operations: Vec<Operation>,
    /// Why requests were refused, one sentence each, naming the plan and the request.
    pub refusals: Vec<String>,
    /// Every request of the current value: all are handled after this pass.
    pub handled: Vec<String>,
}

/// Handles the requests of `value` that `handled` does not list yet (see
/// the module docs). Operations decided in this call make their instance
/// busy for the later requests of the same value.
pub(super) fn take_requests(
    context: &RequestContext<'_>,
    value: &str,
    handled: &[String],
) -> TakenRequests {
    let mut taken = TakenRequests {
        handled: read_items(value),
        ..TakenRequests::default()
    };
    let fresh = unhandled(value, handled);
    let written = request_items(value).len();
    if written > MAX_HANDLED_REQUESTS as usize && !fresh.is_empty() {
        // Said once: the next pass finds every request it reads handled.
        taken.refusals.push(format!(
            "DeploymentPlan {}: {ANNOTATION_OPERATE} holds {written} requests; only the first {MAX_HANDLED_REQUESTS} are read, the rest are ignored; remove handled requests from the annotation",
            context.plan
        ));
    }
    if fresh.len() > MAX_REQUESTS {
        // Each request may run a placement: a careless or hostile value cannot make
        // the pass spin. Every item counts as handled, so this is said once.
        taken.refusals.push(format!(
            "DeploymentPlan {}: {ANNOTATION_OPERATE} holds {} new requests; at most {MAX_REQUESTS} are read at once, so none was; write fewer",
            context.plan,
            fresh.len()
        ));
        return taken;
    }
    let mut operations = context.operations.to_vec();
    for item in fresh {
        let context = RequestContext {
            operations: &operations,
            ..*context
        };
        // `read_items` cut it: what is left is not what the user wrote.
        let cut = item.chars().count() == MAX_REQUEST_TEXT as usize && item.ends_with('…');
        let decided = if cut {
            Err(format!(
                "longer than {MAX_REQUEST_TEXT} characters (no instance and member names are that long)"
            ))
        } else {
            parse_request(&item).and_then(|request| operation_for(&context, &request))
        };
        match decided {
            Ok(mut operation) => {
                operation.request = Some(item);
                operations.push(operation.clone());
                taken.operations.push(operation);
            }
            Err(why) => taken.refusals.push(format!(
                "DeploymentPlan {}: {ANNOTATION_OPERATE} request {item:?} refused: {why}",
                context.plan
            )),
        }
    }
    taken
}
