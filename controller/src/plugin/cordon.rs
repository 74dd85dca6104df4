//! `kubectl shoal cordon|uncordon|drain <member>`: edits the `spec.cordon` list of the
//! member's Swarm, and nothing else.
//!
//! The member is a pod name (`worker-2` or `pod/worker-2`). Its Swarm is the one whose
//! status lists the member (or whose `spec.cordon` names it, so a member whose pod is
//! gone can still be uncordoned); `--swarm` says which when none or several do, and
//! cordons a name no Swarm lists yet (kept and reported by the controller).
//!
//! The write is a JSON merge patch of `spec.cordon` alone, carrying the
//! `resourceVersion` read, so a concurrent edit of the list is refused rather than
//! overwritten. Cordon changes no assignment; drain makes the controller propose a
//! revision that moves the member's jobs, through the approval gate.

use kube::Api;
use serde::Serialize;

use super::write::merge_patch;
use super::{Error, Report, Target, get_swarm};
use crate::api::swarm::{CordonSpec, MAX_MEMBERS, Swarm};

/// The member `cordon`, `uncordon` and `drain` name, and its Swarm.
#[derive(clap::Args, Debug, Clone)]
pub struct MemberArgs {
    /// The member's pod name: `<pod>` or `pod/<pod>`.
    #[arg(value_parser = member)]
    pub member: String,
    /// Its Swarm (`<name>` or `swarm/<name>`), when no or several Swarms list the member.
    #[arg(long, value_parser = super::kind::swarm)]
    pub swarm: Option<String>,
}

/// What `cordon`, `uncordon` or `drain` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Keep its work, take no new work.
    Cordon,
    /// Take new work again (remove the entry).
    Uncordon,
    /// Cordon and move its work off through the gate.
    Drain,
}

/// Command-line parser of a member argument: `<pod>` or `pod/<pod>` (also `pods/`, `po/`).
pub fn member(text: &str) -> Result<String, String> {
    let name = match text.split_once('/') {
        Some((word, name))
            if matches!(word.to_ascii_lowercase().as_str(), "pod" | "pods" | "po") =>
        {
            name
        }
        Some((word, _)) => {
            return Err(format!(
                "{word:?} is not a pod: give the member's pod name, <pod> or pod/<pod>"
            ));
        }
        None => text,
    };
    if name.is_empty() || name.contains('/') {
        return Err(format!("{text:?} is no pod name: give <pod> or pod/<pod>"));
    }
    Ok(name.to_owned())
}

/// What was written (or would be, under `--dry-run`).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CordonReport {
    /// The Swarm.
    pub swarm: String,
    /// The member's pod name.
    pub member: String,
    /// `Cordoned`, `Draining` or `Uncordoned`, as written in `spec.cordon`.
    pub state: &'static str,
    /// Whether the list already said so (nothing was written).
    pub unchanged: bool,
    /// `spec.cordon` as written.
    pub cordon: Vec<CordonSpec>,
}

impl Report for CordonReport {
    fn table(&self) -> String {
        let CordonReport {
            swarm,
            member,
            state,
            ..
        } = self;
        let already = if self.unchanged {
            " (already; nothing written)"
        } else {
            ""
        };
        let next = match *state {
            "Cordoned" => format!(
                "it keeps its jobs and plan instances and gets no new ones; `kubectl shoal drain {member} --swarm {swarm}` moves them off"
            ),
            "Draining" => format!(
                "the controller proposes a revision moving its jobs off (and RELOCATEs of its plan instances), through the approval gate; follow it with `kubectl shoal status {swarm}`"
            ),
            _ => "it takes new jobs and plan instances again".to_owned(),
        };
        format!("member {member} of Swarm {swarm}: {state}{already}; {next}\n")
    }
}

/// The Swarm that `member` belongs to: `--swarm` when given, else the one Swarm of the
/// namespace whose status lists it or whose `spec.cordon` names it.
async fn swarm_of(target: &Target, member: &str, swarm: Option<&str>) -> Result<Swarm, Error> {
    if let Some(swarm) = swarm {
        return get_swarm(target, swarm).await;
    }
    let api: Api<Swarm> = Api::namespaced(target.client.clone(), &target.namespace);
    let swarms = api
        .list(&Default::default())
        .await
        .map_err(|source| Error::ReadSwarm {
            swarm: "(all)".to_owned(),
            namespace: target.namespace.clone(),
            source,
        })?;
    let mut holding: Vec<Swarm> = swarms
        .items
        .into_iter()
        .filter(|object| names_member(object, member))
        .collect();
    match holding.len() {
        1 => Ok(holding.remove(0)),
        0 => Err(Error::Cordon(format!(
            "no Swarm in namespace {} has a member {member}: give its Swarm with --swarm <name> (check the pod name with `kubectl shoal status <swarm>`)",
            target.namespace
        ))),
        _ => Err(Error::Cordon(format!(
            "member {member} is named by several Swarms in namespace {} ({}): say which with --swarm <name>",
            target.namespace,
            holding
                .iter()
                .map(|object| object.metadata.name.clone().unwrap_or_default())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

fn names_member(swarm: &Swarm, member: &str) -> bool {
    let listed = swarm
        .status
        .as_ref()
        .is_some_and(|status| status.members.iter().any(|entry| entry.name == member));
    listed || swarm.spec.cordon.iter().any(|entry| entry.member == member)
}

/// `spec.cordon` after `action` on `member`. Pure.
pub fn edited(
    list: &[CordonSpec],
    member: &str,
    action: Action,
    reason: Option<&str>,
) -> Vec<CordonSpec> {
    let mut list: Vec<CordonSpec> = list.to_vec();
    let at = list.iter().position(|entry| entry.member == member);
    match (action, at) {
        (Action::Uncordon, Some(at)) => {
            list.remove(at);
        }
        (Action::Uncordon, None) => {}
        (_, Some(at)) => {
            let entry = &mut list[at];
            entry.drain = action == Action::Drain;
            if let Some(reason) = reason {
                entry.reason = Some(reason.to_owned());
            }
        }
        (_, None) => list.push(CordonSpec {
            member: member.to_owned(),
            drain: action == Action::Drain,
            reason: reason.map(str::to_owned),
        }),
    }
    list
}

/// `kubectl shoal cordon|uncordon|drain <member> [--swarm <name>] [--reason <text>]`.
pub async fn set(
    target: &Target,
    named: &MemberArgs,
    action: Action,
    reason: Option<&str>,
) -> Result<CordonReport, Error> {
    let member = named.member.as_str();
    let object = swarm_of(target, member, named.swarm.as_deref()).await?;
    let name = object.metadata.name.clone().unwrap_or_default();
    let list = edited(&object.spec.cordon, member, action, reason);
    if list.len() > MAX_MEMBERS as usize {
        return Err(Error::Cordon(format!(
            "Swarm {name}: spec.cordon would list {} members, more than the {MAX_MEMBERS} a Swarm may have; uncordon some first",
            list.len()
        )));
    }
    let state = match action {
        Action::Cordon => "Cordoned",
        Action::Drain => "Draining",
        Action::Uncordon => "Uncordoned",
    };
    let unchanged = list == object.spec.cordon;
    if !unchanged {
        let value = if list.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::to_value(&list).unwrap_or_default()
        };
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": object.metadata.resource_version},
            "spec": {"cordon": value}
        });
        let api = Api::<Swarm>::namespaced(target.client.clone(), &target.namespace);
        merge_patch(&target.writes, &api, &name, patch)
            .await
            .map_err(|source| Error::CordonWrite {
                swarm: name.clone(),
                namespace: target.namespace.clone(),
                source,
            })?;
    }
    Ok(CordonReport {
        swarm: name,
        member: member.to_owned(),
        state,
        unchanged,
        cordon: list,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(member: &str, drain: bool) -> CordonSpec {
        CordonSpec {
            member: member.to_owned(),
            drain,
            reason: None,
        }
    }

    #[test]
    fn a_member_is_a_pod_name_bare_or_as_pod_slash_name() {
        assert_eq!(member("worker-1"), Ok("worker-1".to_owned()));
        assert_eq!(member("pod/worker-1"), Ok("worker-1".to_owned()));
        assert_eq!(member("po/worker-1"), Ok("worker-1".to_owned()));
        let refused = member("swarm/demo").expect_err("not a pod");
        assert!(refused.contains("not a pod"), "{refused}");
        assert!(member("pod/").is_err());
    }

    #[test]
    fn each_action_edits_only_the_members_entry() {
        let list = vec![entry("a-0", false), entry("a-1", true)];
        assert_eq!(
            edited(&list, "a-2", Action::Cordon, Some("disk")),
            vec![
                entry("a-0", false),
                entry("a-1", true),
                CordonSpec {
                    reason: Some("disk".to_owned()),
                    ..entry("a-2", false)
                }
            ]
        );
        assert_eq!(
            edited(&list, "a-0", Action::Drain, None),
            vec![entry("a-0", true), entry("a-1", true)]
        );
        assert_eq!(
            edited(&list, "a-1", Action::Uncordon, None),
            vec![entry("a-0", false)]
        );
        assert_eq!(edited(&list, "a-9", Action::Uncordon, None), list);
        assert_eq!(edited(&list, "a-0", Action::Cordon, None), list);
    }
}
