//! `kubectl shoal slices`: the slice ConfigMaps in the cluster (decoded as
//! the sidecar decodes them: plain, gzip or split), against the target the
//! controller published and what each sidecar acknowledged.

use serde::{Deserialize, Serialize};
use shoal_core::format::parse_slice;
use shoal_core::names;

use super::table::{Table, fields, short_hash};
use super::{Error, Report, Target};
use crate::swarm::decide::Observation;

/// One member's slice ConfigMap.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SliceRow {
    /// Pod name.
    pub member: String,
    /// The ConfigMap.
    pub config_map: String,
    /// Revision at which the slice last changed (absent when unreadable).
    pub revision: Option<u64>,
    /// Jobs in it.
    pub jobs: Option<usize>,
    /// Its hash.
    pub hash: Option<String>,
    /// `revoke` or `grant`: the step that wrote it.
    pub phase: Option<String>,
    /// ConfigMaps it occupies.
    pub parts: usize,
    /// Whether it is the slice the controller's status targets: `yes`, `no`, or `-` (not a member).
    pub target: String,
    /// Whether the member's sidecar acknowledged it: `yes`, `no`, or `no lease`.
    pub acknowledged: String,
    /// Why it cannot be read, if it cannot.
    pub error: Option<String>,
    /// The jobs (only in a single member's report).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub job_keys: Vec<String>,
}

/// `kubectl shoal slices`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SlicesReport {
    /// Swarm.
    pub swarm: String,
    /// Namespace.
    pub namespace: String,
    /// The member asked for, if one was.
    pub member: Option<String>,
    /// Slices by member.
    pub slices: Vec<SliceRow>,
}

fn row(obs: &Observation, member: &str, with_jobs: bool) -> SliceRow {
    let object = obs.slices.get(member);
    let target_hash = obs
        .status
        .members
        .iter()
        .find(|status| status.name == member)
        .map(|status| status.slice_hash.clone());
    let parsed = object.map(|object| match (&object.decode_error, &object.text) {
        (Some(error), _) => Err(error.clone()),
        (None, None) => Err(format!("no {} key", names::SLICE_DATA_KEY)),
        (None, Some(text)) => parse_slice(text).map_err(|error| error.to_string()),
    });
    let slice = parsed.as_ref().and_then(|parsed| parsed.as_ref().ok());
    let hash = slice.map(|slice| slice.hash.clone());
    let target = match &target_hash {
        None => "-".to_owned(),
        Some(target) if target.is_some() && *target == hash => "yes".to_owned(),
        Some(_) => "no".to_owned(),
    };
    let acknowledged = super::acknowledgement(obs, member, hash.as_deref());
    SliceRow {
        member: member.to_owned(),
        config_map: names::slice_configmap(member),
        revision: slice.map(|slice| slice.revision),
        jobs: slice.map(|slice| slice.jobs.len()),
        hash,
        phase: object.and_then(|object| object.phase.clone()),
        parts: object.map_or(0, |object| object.parts),
        target,
        acknowledged,
        error: match &parsed {
            None => Some("no slice ConfigMap".to_owned()),
            Some(Err(error)) => Some(error.clone()),
            Some(Ok(_)) => None,
        },
        job_keys: if with_jobs {
            slice
                .map(|slice| {
                    slice
                        .jobs
                        .iter()
                        .map(|key| key.as_str().to_owned())
                        .collect()
                })
                .unwrap_or_default()
        } else {
            Vec::new()
        },
    }
}

/// Builds the report from an observation. Pure.
pub fn report(
    obs: &Observation,
    namespace: &str,
    member: Option<&str>,
) -> Result<SlicesReport, Error> {
    let mut members: Vec<String> = obs
        .slices
        .keys()
        .cloned()
        .chain(obs.status.members.iter().map(|member| member.name.clone()))
        .collect();
    members.sort();
    members.dedup();
    let slices = match member {
        None => members.iter().map(|name| row(obs, name, false)).collect(),
        Some(name) if members.iter().any(|known| known == name) => vec![row(obs, name, true)],
        Some(name) => {
            return Err(Error::UnknownMember {
                swarm: obs.swarm.clone(),
                namespace: namespace.to_owned(),
                member: name.to_owned(),
                members,
            });
        }
    };
    Ok(SlicesReport {
        swarm: obs.swarm.clone(),
        namespace: namespace.to_owned(),
        member: member.map(str::to_owned),
        slices,
    })
}

/// Reads the Swarm's slices.
pub async fn slices(
    target: &Target,
    swarm: &str,
    member: Option<&str>,
) -> Result<SlicesReport, Error> {
    let (_, observation) = super::observe(target, swarm).await?;
    report(&observation, &target.namespace, member)
}

fn optional<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |value| value.to_string())
}

impl Report for SlicesReport {
    fn table(&self) -> String {
        if let (Some(member), Some(slice)) = (&self.member, self.slices.first()) {
            let mut out = String::from("Slice Info\n");
            out.push_str(&fields(&[
                ("Swarm", format!("{}/{}", self.namespace, self.swarm)),
                ("Member", member.clone()),
                ("ConfigMap", slice.config_map.clone()),
                ("Revision", optional(slice.revision)),
                ("Hash", optional(slice.hash.as_ref())),
                ("Written by", optional(slice.phase.as_ref())),
                ("Parts", slice.parts.to_string()),
                ("Target", slice.target.clone()),
                ("Acknowledged", slice.acknowledged.clone()),
                ("Problem", optional(slice.error.as_ref())),
            ]));
            out.push_str("\nJobs\n");
            let mut jobs = Table::new(["Job"]);
            for key in &slice.job_keys {
                jobs.row([key.clone()]);
            }
            out.push_str(&jobs.render("No jobs"));
            return out;
        }
        let mut out = format!("Slices of Swarm {}/{}\n", self.namespace, self.swarm);
        let mut table = Table::new([
            "Member",
            "ConfigMap",
            "Revision",
            "Jobs",
            "Hash",
            "Written By",
            "Parts",
            "Target",
            "Acknowledged",
            "Problem",
        ]);
        for slice in &self.slices {
            table.row([
                slice.member.clone(),
                slice.config_map.clone(),
                optional(slice.revision),
                optional(slice.jobs),
                slice
                    .hash
                    .as_deref()
                    .map_or_else(|| "-".to_owned(), short_hash),
                optional(slice.phase.as_ref()),
                slice.parts.to_string(),
                slice.target.clone(),
                slice.acknowledged.clone(),
                optional(slice.error.as_ref()),
            ]);
        }
        out.push_str(&table.render("No slices written yet"));
        out
    }
}
