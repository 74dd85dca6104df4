//! How the changing commands write, and `--dry-run` as kubectl has it: `client`
//! sends nothing and prints the merge patch it would send; `server` sends it with
//! `dryRun=All` (the API server checks it, admission included, and stores nothing)
//! and prints it with the server's answer. Every write of the plugin goes through
//! [`merge_patch`] or, for a whole object it creates or updates (`import-mrds
//! --apply`), [`server_side_apply`], so no command can write past a dry run.

use std::sync::{Arc, Mutex};

use clap::ValueEnum;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Error, OutputFormat, Report, render};

/// `--dry-run`: as kubectl's.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum DryRun {
    /// Write (the default).
    #[default]
    None,
    /// Send nothing; print the patch that would be sent.
    Client,
    /// Send the patch with `dryRun=All`: checked by the server, stored nowhere.
    Server,
}

/// The `--dry-run` flag of a changing command.
#[derive(clap::Args, Debug, Clone, Copy, Default)]
pub struct WriteArgs {
    /// `client`: print the patch and send nothing; `server`: have the API server check it
    /// and store nothing (`dryRun=All`); `none`: write. `--dry-run` alone is `client`.
    #[arg(long, value_enum, num_args = 0..=1, default_value_t = DryRun::None, default_missing_value = "client")]
    pub dry_run: DryRun,
}

/// One write a dry run would have made.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DryRunWrite {
    /// `Swarm` or `DeploymentPlan`.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Object name.
    pub name: String,
    /// The JSON merge patch, or the whole object of a server-side apply.
    pub patch: serde_json::Value,
    /// The write is a server-side apply of `patch` (field manager `kubectl-shoal`), not a merge patch.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub server_side_apply: bool,
    /// `server`: the object as the API server would have stored it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
}

/// The dry-run mode of one command run and the writes it held back.
#[derive(Clone, Debug, Default)]
pub struct Writes {
    /// The mode.
    pub mode: DryRun,
    namespace: String,
    held: Arc<Mutex<Vec<DryRunWrite>>>,
}

impl Writes {
    /// Writes in `namespace` under `mode`.
    pub fn new(mode: DryRun, namespace: &str) -> Writes {
        Writes {
            mode,
            namespace: namespace.to_owned(),
            held: Arc::default(),
        }
    }

    fn hold(&self, write: DryRunWrite) {
        if let Ok(mut held) = self.held.lock() {
            held.push(write);
        }
    }

    /// The same run's writes (held together) in another namespace.
    pub fn in_namespace(&self, namespace: &str) -> Writes {
        Writes {
            mode: self.mode,
            namespace: namespace.to_owned(),
            held: Arc::clone(&self.held),
        }
    }

    /// Holds a write made (`server`) or not made (`client`) under a dry run.
    fn record<K>(
        &self,
        name: &str,
        patch: serde_json::Value,
        server_side_apply: bool,
        result: Option<K>,
    ) where
        K: Resource<DynamicType = ()> + Serialize,
    {
        if self.mode != DryRun::None {
            self.hold(DryRunWrite {
                kind: K::kind(&()).into_owned(),
                namespace: self.namespace.clone(),
                name: name.to_owned(),
                patch,
                server_side_apply,
                result: result.and_then(|object| serde_json::to_value(object).ok()),
            });
        }
    }

    fn held(&self) -> Vec<DryRunWrite> {
        self.held
            .lock()
            .map(|held| held.clone())
            .unwrap_or_default()
    }
}

/// Sends `patch` to `name` as a JSON merge patch, or under a dry run holds it (`client`)
/// or has the server check it (`server`).
pub async fn merge_patch<K>(
    writes: &Writes,
    api: &Api<K>,
    name: &str,
    patch: serde_json::Value,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let params = PatchParams {
        dry_run: writes.mode == DryRun::Server,
        ..PatchParams::default()
    };
    let result = match writes.mode {
        DryRun::Client => None,
        _ => Some(api.patch(name, &params, &Patch::Merge(&patch)).await?),
    };
    writes.record::<K>(name, patch, false, result);
    Ok(())
}

/// Creates or updates `name` with the whole `object` by server-side apply (field manager
/// [`shoal_core::names::PLUGIN_FIELD_MANAGER`], forced: the user asked for this object), or
/// under a dry run holds it (`client`) or has the server check it (`server`).
pub async fn server_side_apply<K>(
    writes: &Writes,
    api: &Api<K>,
    name: &str,
    object: serde_json::Value,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let mut params = PatchParams::apply(shoal_core::names::PLUGIN_FIELD_MANAGER).force();
    params.dry_run = writes.mode == DryRun::Server;
    let result = match writes.mode {
        DryRun::Client => None,
        _ => Some(api.patch(name, &params, &Patch::Apply(&object)).await?),
    };
    writes.record::<K>(name, object, true, result);
    Ok(())
}

/// What a dry run printed: the writes held back and the report the command would give.
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct DryRunReport {
    /// `client` or `server`.
    pub dry_run: DryRun,
    /// What would have been written.
    pub writes: Vec<DryRunWrite>,
    /// The command's own report, as if written.
    pub report: serde_json::Value,
    #[serde(skip)]
    table: String,
}

impl Report for DryRunReport {
    fn table(&self) -> String {
        let mut out = String::new();
        for write in &self.writes {
            let patch = serde_json::to_string_pretty(&write.patch).unwrap_or_default();
            let what = if write.server_side_apply {
                "server-side apply"
            } else {
                "merge patch"
            };
            out.push_str(&match self.dry_run {
                DryRun::Server => format!(
                    "Dry run (server): the API server accepted this {what} to {} {}/{} with dryRun=All and stored nothing:\n{patch}\n",
                    write.kind, write.namespace, write.name
                ),
                _ => format!(
                    "Dry run (client): nothing was sent. The {what} to {} {}/{} would be:\n{patch}\n",
                    write.kind, write.namespace, write.name
                ),
            });
        }
        out.push_str("\nWhat the command reports once written:\n");
        out.push_str(&self.table);
        out
    }
}

/// Renders a changing command's report; under a dry run, with the writes held back.
pub fn render_written<R: Report>(
    writes: &Writes,
    report: &R,
    format: OutputFormat,
) -> Result<String, Error> {
    if writes.mode == DryRun::None {
        return render(report, format);
    }
    let dry = DryRunReport {
        dry_run: writes.mode,
        writes: writes.held(),
        report: serde_json::to_value(report).map_err(|error| Error::Render {
            format: "json",
            message: error.to_string(),
        })?,
        table: render(report, format)?,
    };
    render(&dry, format)
}
