//! Reported documents, kept in the cluster: one ConfigMap per plan,
//! `<plan>-deployment-reports`, owned by the plan (a `controller: true`
//! ownerReference to its uid, so it goes with the plan), one data key per
//! deployment and reporting device, `<deploymentId>.<deviceId, escaped>.json`
//! (see [`escape`]: a device behind a gateway, `gateway/child`, has its own
//! key), holding
//! `{"reportedAt": <RFC 3339>, "document": <the report>}` (a bare document, as
//! earlier versions wrote, is read too).
//!
//! A ConfigMap of that name the plan does not own is never read or written.
//!
//! Storage is bounded, whatever devices send and however long a plan lives
//! (a ConfigMap holds at most 1 MiB; one that is full refuses every write):
//! before a report is kept, the same write drops the reports of deployments
//! the plan no longer has (`status.deploymentStatus`, which follows its
//! deployment history), then the reporting device's oldest reports until its
//! own fit [`MAX_DEVICE_BYTES`], then the oldest reports of any device until
//! the plan's fit [`MAX_PLAN_BYTES`]. The write carries the `resourceVersion`
//! it was computed from, so two reports at once cannot together overfill it
//! (the later one is computed again).

use std::collections::{BTreeMap, BTreeSet};

use axum::http::StatusCode;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use shoal_core::deploy::status::DeploymentStatusDocument;
use shoal_core::names::CONTROLLER_FIELD_MANAGER;

use super::problem::Problem;
use crate::api::deployment_plan::DeploymentPlan;

/// Longest client id (a label value's length).
const MAX_CLIENT_ID: usize = 63;

/// The most one plan's reports take together, in bytes (a ConfigMap holds at
/// most 1 MiB; half of it leaves room for the entry being written).
pub const MAX_PLAN_BYTES: usize = 512 * 1024;

/// The most one device's reports on one plan take together, in bytes (two
/// reports of the largest body).
pub const MAX_DEVICE_BYTES: usize = 2 * super::MAX_BODY_BYTES + 1024;

/// How often a write computed from a ConfigMap that changed meanwhile is
/// computed again before the report is refused (503).
const WRITE_ATTEMPTS: usize = 5;

/// The ConfigMap holding a plan's reported documents.
pub fn reports_name(plan: &str) -> String {
    format!("{plan}-deployment-reports")
}

/// Longest `deviceId` kept, in characters: escaped (at most three
/// characters each) behind a deployment id it still fits a ConfigMap data
/// key's 253.
pub const MAX_DEVICE_ID: usize = 70;

/// The data key of one device's report on one deployment.
fn key(deployment_id: &str, device_id: &str) -> String {
    format!("{deployment_id}.{}.json", escape(device_id))
}

/// A device id as a ConfigMap data key may spell it (letters, digits, `-`,
/// `_`, `.`): every other character, and `_` and `.` themselves, as `_XX`
/// (its byte in hex), so that no two ids share a key and the key's only dots
/// are its separators. `gateway01/dev.1` is `gateway01_2Fdev_2E1`.
fn escape(device_id: &str) -> String {
    device_id
        .bytes()
        .map(|byte| {
            if byte.is_ascii_alphanumeric() || byte == b'-' {
                char::from(byte).to_string()
            } else {
                format!("_{byte:02X}")
            }
        })
        .collect()
}

/// The reporting client of a device: the first id of its hierarchy.
pub fn client_of(device_id: &str) -> &str {
    device_id.split('/').next().unwrap_or_default()
}

/// Whether `device_id` is `client_id` or a device behind it.
pub fn is_of_client(device_id: &str, client_id: &str) -> bool {
    device_id
        .strip_prefix(client_id)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Checks a client id: 1–63 ASCII letters, digits, `-`, `_`, `.`, `~` (the
/// unreserved characters Margo's device ids are made of), starting with a
/// letter or digit (it becomes part of a ConfigMap data key, escaped).
pub fn check_client_id(client_id: &str) -> Result<(), Problem> {
    let fits = !client_id.is_empty()
        && client_id.len() <= MAX_CLIENT_ID
        && client_id.starts_with(|c: char| c.is_ascii_alphanumeric())
        && client_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~'));
    if fits {
        Ok(())
    } else {
        Err(Problem::new(
            StatusCode::BAD_REQUEST,
            format!(
                "client id {client_id:?} must be 1-{MAX_CLIENT_ID} letters, digits, '-', '_', '.' or '~', starting with a letter or digit"
            ),
        ))
    }
}

/// A failure inside, as the caller sees it: which step failed, not the API
/// server's words (logged instead).
fn failed(what: String) -> impl FnOnce(kube::Error) -> Problem {
    move |error| {
        tracing::warn!(%error, "deployment status endpoint: {what} failed");
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{what} failed; try again later"),
        )
    }
}

/// Whether the plan owns `map` (a controller ownerReference to its uid).
pub fn owned_by(map: &ConfigMap, plan: &DeploymentPlan) -> bool {
    let uid = plan.uid().unwrap_or_default();
    map.owner_references()
        .iter()
        .any(|owner| owner.controller == Some(true) && owner.uid == uid)
}

fn not_owned(namespace: &str, name: &str, plan: &str) -> Problem {
    Problem::new(
        StatusCode::CONFLICT,
        format!(
            "ConfigMap {namespace}/{name} exists but DeploymentPlan {plan} does not own it; Shoal neither reads nor writes it (delete or rename it to let reports be kept)"
        ),
    )
}

/// The plan's reports ConfigMap, if it exists and the plan owns it.
async fn owned_map(client: &Client, plan: &DeploymentPlan) -> Result<Option<ConfigMap>, Problem> {
    let namespace = plan.namespace().unwrap_or_default();
    let name = reports_name(&plan.name_any());
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let map = api
        .get_opt(&name)
        .await
        .map_err(failed(format!("reading ConfigMap {namespace}/{name}")))?;
    match map {
        Some(map) if !owned_by(&map, plan) => Err(not_owned(&namespace, &name, &plan.name_any())),
        other => Ok(other),
    }
}

/// What `device_id` reported on the deployment, if anything.
pub async fn read(
    client: &Client,
    plan: &DeploymentPlan,
    deployment_id: &str,
    device_id: &str,
) -> Result<Option<DeploymentStatusDocument>, Problem> {
    let Some(map) = owned_map(client, plan).await? else {
        return Ok(None);
    };
    let stored = map
        .data
        .as_ref()
        .and_then(|data| data.get(&key(deployment_id, device_id)));
    Ok(stored
        .and_then(|text| stored_report(text))
        .map(|report| report.document))
}

/// One kept report: when it was kept, and the document.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredReport {
    /// RFC 3339.
    reported_at: String,
    document: DeploymentStatusDocument,
}

impl StoredReport {
    /// When it was kept; the earliest time when that does not read.
    fn at(&self) -> jiff::Timestamp {
        self.reported_at.parse().unwrap_or(jiff::Timestamp::MIN)
    }
}

/// A kept report as stored; a bare document (earlier versions) counts as kept
/// at the earliest time, so it is the first to go.
fn stored_report(text: &str) -> Option<StoredReport> {
    serde_json::from_str(text).ok().or_else(|| {
        let document = serde_json::from_str(text).ok()?;
        Some(StoredReport {
            reported_at: String::new(),
            document,
        })
    })
}

/// One kept report as `kubectl shoal reports` shows it: who reported, on which
/// revision, what state, and when it was kept.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeptReport {
    /// The reporting device: a client, or a device behind it (`client/child`).
    pub device_id: String,
    /// The deployment reported on.
    pub deployment_id: String,
    /// The plan revision the device says it runs (`adoptedManifestVersion`).
    pub revision: Option<u64>,
    /// The overall state the device reports.
    pub state: String,
    /// The components it reports failed, as `name: code message`.
    pub failed: Vec<String>,
    /// When it was kept (RFC 3339; empty for a report an earlier version kept).
    pub reported_at: String,
}

/// Every report kept in `map`, oldest first (then by device); an entry that
/// does not read as a report is left out.
pub fn kept_reports(map: &ConfigMap) -> Vec<KeptReport> {
    let mut kept: Vec<(jiff::Timestamp, KeptReport)> = map
        .data
        .iter()
        .flatten()
        .filter_map(|(key, text)| {
            let (deployment_id, device) = key_device(key)?;
            let stored = stored_report(text)?;
            Some((
                stored.at(),
                kept_report(deployment_id, &unescape(device), stored),
            ))
        })
        .collect();
    kept.sort_by(|(a_at, a), (b_at, b)| a_at.cmp(b_at).then_with(|| a.device_id.cmp(&b.device_id)));
    kept.into_iter().map(|(_, report)| report).collect()
}

fn kept_report(deployment_id: &str, device_id: &str, stored: StoredReport) -> KeptReport {
    let document = stored.document;
    let failed = document
        .components
        .iter()
        .filter(|component| component.state == "failed")
        .map(|component| match &component.error {
            Some(error) => format!("{}: {} {}", component.name, error.code, error.message),
            None => component.name.clone(),
        })
        .collect();
    KeptReport {
        device_id: device_id.to_owned(),
        deployment_id: deployment_id.to_owned(),
        revision: document.adopted_manifest_version,
        state: document.status.state,
        failed,
        reported_at: stored.reported_at,
    }
}

/// The device id [`escape`] spelled `escaped`.
fn unescape(escaped: &str) -> String {
    let mut bytes = Vec::with_capacity(escaped.len());
    let mut rest = escaped.as_bytes();
    while let Some((&first, tail)) = rest.split_first() {
        let hex = tail
            .get(..2)
            .and_then(|pair| std::str::from_utf8(pair).ok())
            .and_then(|pair| u8::from_str_radix(pair, 16).ok());
        match hex {
            Some(byte) if first == b'_' => {
                bytes.push(byte);
                rest = &tail[2..];
            }
            _ => {
                bytes.push(first);
                rest = tail;
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A data key's deployment id and reporting device, escaped
/// (`<deploymentId>.<deviceId, escaped>.json`; a deployment id is a UUID, so
/// the first `.` ends it): the inverse of [`key`].
fn key_device(key: &str) -> Option<(&str, &str)> {
    key.strip_suffix(".json")?.split_once('.')
}

/// A data key's deployment id and reporting client, escaped (the escaped `/`
/// ends the client).
fn key_parts(key: &str) -> Option<(&str, &str)> {
    let (deployment, device) = key_device(key)?;
    Some((deployment, device.split("_2F").next().unwrap_or_default()))
}

/// The keys to drop so that `new_key` (of `new_bytes`, by `client_id`, as
/// escaped in keys: a gateway's reports and those of the devices behind it
/// share its budget) can be kept within the bounds (see the module docs), given what `data` holds and
/// the deployment ids the plan still has.
fn to_prune(
    data: &BTreeMap<String, String>,
    deployments: &BTreeSet<&str>,
    client_id: &str,
    new_key: &str,
    new_bytes: usize,
) -> Vec<String> {
    let mut prune = Vec::new();
    // Oldest first; a key that does not read as a report goes first of all.
    let mut kept: Vec<(jiff::Timestamp, &str, &str, usize)> = Vec::new();
    for (key, text) in data {
        if key == new_key {
            continue;
        }
        let parts = key_parts(key);
        if parts.is_none_or(|(deployment, _)| !deployments.contains(deployment)) {
            prune.push(key.clone());
            continue;
        }
        let at = stored_report(text).map_or(jiff::Timestamp::MIN, |r| r.at());
        let client = parts.map_or("", |(_, client)| client);
        kept.push((at, key, client, key.len() + text.len()));
    }
    kept.sort();
    let mut device: usize = new_bytes
        + kept
            .iter()
            .filter(|(_, _, client, _)| *client == client_id)
            .map(|entry| entry.3)
            .sum::<usize>();
    let mut total: usize = new_bytes + kept.iter().map(|entry| entry.3).sum::<usize>();
    for (_, key, client, bytes) in &kept {
        if *client == client_id && device > MAX_DEVICE_BYTES {
            device -= bytes;
            total -= bytes;
            prune.push((*key).to_owned());
        }
    }
    for (_, key, _, bytes) in &kept {
        if total <= MAX_PLAN_BYTES {
            break;
        }
        if !prune.iter().any(|gone| gone == key) {
            total -= bytes;
            prune.push((*key).to_owned());
        }
    }
    prune
}

/// Keeps `document` as `device_id`'s report; `true` when it is the device's
/// first report on the deployment (created), `false` when it replaced one.
/// Prunes in the same write (see the module docs).
pub async fn write(
    client: &Client,
    plan: &DeploymentPlan,
    device_id: &str,
    document: &DeploymentStatusDocument,
) -> Result<bool, Problem> {
    let namespace = plan.namespace().unwrap_or_default();
    let plan_name = plan.name_any();
    let name = reports_name(&plan_name);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    if device_id.chars().count() > MAX_DEVICE_ID {
        return Err(Problem::new(
            StatusCode::BAD_REQUEST,
            format!(
                "deviceId {device_id:?} is longer than {MAX_DEVICE_ID} characters, the most Shoal keeps a report for"
            ),
        ));
    }
    let data_key = key(&document.deployment_id, device_id);
    let client_id = escape(client_of(device_id));
    let stored = StoredReport {
        reported_at: jiff::Timestamp::now().to_string(),
        document: document.clone(),
    };
    let text = serde_json::to_string(&stored).unwrap_or_default();
    let deployments: BTreeSet<&str> = plan
        .status
        .iter()
        .flat_map(|status| &status.deployment_status)
        .map(|document| document.deployment_id.as_str())
        .collect();
    for _ in 0..WRITE_ATTEMPTS {
        if let Some(map) = owned_map(client, plan).await? {
            let data = map.data.clone().unwrap_or_default();
            let prune = to_prune(
                &data,
                &deployments,
                &client_id,
                &data_key,
                data_key.len() + text.len(),
            );
            match patch_in(&api, &map, &data_key, &text, &prune).await {
                Err(kube::Error::Api(response)) if response.code == 409 => continue,
                written => {
                    written.map_err(failed(format!("writing ConfigMap {namespace}/{name}")))?;
                    return Ok(!data.contains_key(&data_key));
                }
            }
        }
        let map = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                labels: Some(BTreeMap::from([(
                    shoal_core::names::LABEL_DEPLOYMENT_PLAN.to_owned(),
                    plan_name.clone(),
                )])),
                owner_references: Some(vec![OwnerReference {
                    api_version: "shoal.dev/v1alpha1".to_owned(),
                    kind: "DeploymentPlan".to_owned(),
                    name: plan_name.clone(),
                    uid: plan.uid().unwrap_or_default(),
                    controller: Some(true),
                    block_owner_deletion: None,
                }]),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(data_key.clone(), text.clone())])),
            ..ConfigMap::default()
        };
        let params = PostParams {
            field_manager: Some(CONTROLLER_FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        match api.create(&params, &map).await {
            Ok(_) => return Ok(true),
            // Another report created it meanwhile: write into it.
            Err(kube::Error::Api(response)) if response.code == 409 => continue,
            Err(error) => {
                return Err(failed(format!("creating ConfigMap {namespace}/{name}"))(
                    error,
                ));
            }
        }
    }
    tracing::warn!(
        "deployment status endpoint: ConfigMap {namespace}/{name} changed under {WRITE_ATTEMPTS} writes in a row"
    );
    Err(Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("writing ConfigMap {namespace}/{name} failed; try again later"),
    ))
}

/// Sets one data key of an owned ConfigMap and drops `prune`, only if it is
/// still the version read (uid and resourceVersion preconditions: a 409 says
/// it changed meanwhile).
async fn patch_in(
    api: &Api<ConfigMap>,
    map: &ConfigMap,
    data_key: &str,
    text: &str,
    prune: &[String],
) -> Result<(), kube::Error> {
    // A merge patch touches only the keys named (server-side apply by one
    // field manager would drop the keys of the other clients' reports).
    let mut data = serde_json::Map::new();
    for gone in prune {
        data.insert(gone.clone(), serde_json::Value::Null);
    }
    data.insert(data_key.to_owned(), json!(text));
    let patch = json!({
        "metadata": {"uid": map.uid(), "resourceVersion": map.resource_version()},
        "data": data,
    });
    let params = PatchParams {
        field_manager: Some(CONTROLLER_FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    api.patch(&map.name_any(), &params, &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(at: i64, bytes: usize) -> String {
        let stored = json!({
            "reportedAt": jiff::Timestamp::from_second(at).expect("a time").to_string(),
            "document": {"deploymentId": "d", "status": {"state": "installed"},
                         "components": [], "pad": "x".repeat(bytes)},
        });
        stored.to_string()
    }

    #[test]
    fn every_device_id_reads_back_from_its_escaped_key() {
        for device in ["edge-1", "gateway01/dev.1", "gw_1/a~b", "x/y/z", "_2F"] {
            assert_eq!(unescape(&escape(device)), device);
        }
    }

    #[test]
    fn kept_reports_name_each_device_its_revision_state_and_failed_components_oldest_first() {
        let failed = json!({
            "reportedAt": "2026-11-28T00:00:02Z",
            "document": {"deploymentId": "d1", "adoptedManifestVersion": 3,
                         "status": {"state": "failed"},
                         "components": [
                             {"name": "web", "state": "failed",
                              "error": {"code": "ExitCode1", "message": "exited 1"}},
                             {"name": "db", "state": "installed"}]},
        });
        let map = ConfigMap {
            data: Some(BTreeMap::from([
                ("d1.gw_2Fcam-2.json".to_owned(), failed.to_string()),
                ("d1.edge-1.json".to_owned(), report(1, 0)),
                ("not a report".to_owned(), "x".to_owned()),
            ])),
            ..ConfigMap::default()
        };
        let kept = kept_reports(&map);
        let seen: Vec<(&str, Option<u64>, &str)> = kept
            .iter()
            .map(|report| {
                (
                    report.device_id.as_str(),
                    report.revision,
                    report.state.as_str(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("edge-1", None, "installed"),
                ("gw/cam-2", Some(3), "failed")
            ]
        );
        assert_eq!(kept[1].failed, ["web: ExitCode1 exited 1"]);
        assert_eq!(kept[1].reported_at, "2026-11-28T00:00:02Z");
    }

    #[test]
    fn reports_of_deployments_the_plan_no_longer_has_go_first() {
        let data = BTreeMap::from([
            ("old-id.edge-1.json".to_owned(), report(1, 10)),
            ("new-id.edge-1.json".to_owned(), report(2, 10)),
            ("not a report".to_owned(), "x".to_owned()),
        ]);
        let deployments = BTreeSet::from(["new-id"]);
        let prune = to_prune(&data, &deployments, "edge-2", "new-id.edge-2.json", 100);
        assert_eq!(prune, ["not a report", "old-id.edge-1.json"]);
    }

    #[test]
    fn a_device_over_its_share_loses_its_own_oldest_reports() {
        let big = MAX_DEVICE_BYTES / 3;
        let data = BTreeMap::from([
            ("a.edge-1.json".to_owned(), report(3, big)),
            ("b.edge-1.json".to_owned(), report(1, big)),
            ("c.edge-1.json".to_owned(), report(2, big)),
            ("a.edge-2.json".to_owned(), report(0, big)),
        ]);
        let deployments = BTreeSet::from(["a", "b", "c", "d"]);
        let prune = to_prune(&data, &deployments, "edge-1", "d.edge-1.json", big);
        assert_eq!(
            prune,
            ["b.edge-1.json", "c.edge-1.json"],
            "edge-1's two oldest, none of edge-2's"
        );
    }

    #[test]
    fn a_full_plan_loses_its_oldest_reports_of_any_device() {
        let each = 60 * 1024;
        let deployments = BTreeSet::from(["d"]);
        let data: BTreeMap<String, String> = (0..20)
            .map(|i| (format!("d.edge-{i}.json"), report(i64::from(i), each)))
            .collect();
        let new_bytes = each + 100;
        let prune = to_prune(&data, &deployments, "edge-99", "d.edge-99.json", new_bytes);
        let left: usize = data
            .iter()
            .filter(|(key, _)| !prune.contains(key))
            .map(|(key, text)| key.len() + text.len())
            .sum();
        assert!(left + new_bytes <= MAX_PLAN_BYTES, "{left}");
        assert!(prune.contains(&"d.edge-0.json".to_owned()), "{prune:?}");
        assert!(!prune.contains(&"d.edge-19.json".to_owned()), "{prune:?}");
    }

    #[test]
    fn a_device_behind_a_gateway_has_its_own_key_and_shares_the_gateways_budget() {
        assert_eq!(escape("gateway01/dev.1_a~b"), "gateway01_2Fdev_2E1_5Fa_7Eb");
        assert_ne!(escape("a/b"), escape("a_2Fb"), "no two ids share a key");
        let child = key("d", "gateway01/dev01");
        assert_eq!(child, "d.gateway01_2Fdev01.json");
        assert_eq!(key_parts(&child), Some(("d", "gateway01")));
        assert_eq!(key_parts("d.gateway01.json"), Some(("d", "gateway01")));
        assert!(is_of_client("gw/child", "gw"));
        assert!(is_of_client("gw", "gw"));
        assert!(!is_of_client("gw2/child", "gw"));
        assert_eq!(client_of("gw/a/b"), "gw");
        let worst = "~".repeat(MAX_DEVICE_ID);
        assert!(key("3a5549f2-02a4-4faf-9bc4-1ea9866684c1", &worst).len() <= 253);
    }

    #[test]
    fn a_report_kept_by_an_earlier_version_is_read_and_counts_as_oldest() {
        let bare = json!({"deploymentId": "d", "status": {"state": "installed"}, "components": []});
        let read = stored_report(&bare.to_string()).expect("a bare document reads");
        assert_eq!(read.at(), jiff::Timestamp::MIN);
        assert_eq!(read.document.deployment_id, "d");
        assert!(stored_report("not json").is_none());
    }
}
