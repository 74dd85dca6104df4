//! What a pure decision of either kind hands back besides its writes: the Events of the
//! transitions it made and the status conditions it sets.

use crate::api::swarm::Condition;

/// An Event to emit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedEvent {
    /// Warning (true) or Normal.
    pub warning: bool,
    /// CamelCase reason.
    pub reason: String,
    /// What happened.
    pub note: String,
}

/// A status condition as a decision sets it; `lastTransitionTime` and
/// `observedGeneration` are filled in by the caller, which knows the previous status.
pub(crate) fn condition(type_: &str, status: bool, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message,
        last_transition_time: None,
        observed_generation: None,
    }
}
