//! `kubectl shoal import-mrds <file> --swarm <swarm>`: an MRDS plan document
//! (as the MRDS README writes it, YAML or JSON) as DeploymentPlan manifests.
//!
//! The reading is [`shoal_core::deploy::mrds`] (pure, every refusal naming the
//! field and its path); this module builds the DeploymentPlan objects and
//! prints them (YAML; `-o json` a JSON object, or a `List` of several), or with
//! `--apply` / `--dry-run=client|server` writes them by server-side apply
//! through [`super::write`] like the plugin's other writes.
//!
//! ```text
//! kubectl shoal import-mrds plan.yaml --swarm edge > dplan.yaml   # print; writes nothing
//! kubectl shoal import-mrds plan.yaml --swarm edge --instances 2 --apply
//! kubectl shoal import-mrds plan.yaml --swarm edge --memory-unit Mi --dry-run=server
//! ```
//!
//! MRDS's `serviceName` becomes `spec.serviceName` (a headless Service owned by
//! the plan reaches the members holding its instances). An MRDS plan has no deployment yet
//! (MRDS adds deployments to a plan later), so the plan asks for
//! `--instances` instances (default 0) with no payload coordinates.

use std::path::{Path, PathBuf};

use clap::ValueEnum;
use kube::Api;
use serde::Serialize;
use shoal_core::deploy::mrds::{self, MemoryUnit, MrdsError, MrdsPlan, Options};

use super::table::Table;
use super::{Error, OutputFormat, Report, Target, hint, write};
use crate::api::deployment_plan::{
    Application, CapabilityRequirement, Comparator, DeploymentPlan, DeploymentPlanSpec,
    DeploymentSpec, Port, Protocol,
};

/// `--memory-unit`: the unit of `memory` in the Swarm's pools' `shoal.dev/capacity`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemoryUnitArg {
    /// GiB, as MRDS writes it (amounts kept).
    #[default]
    #[value(name = "Gi")]
    Gi,
    /// MiB (amounts × 1024).
    #[value(name = "Mi")]
    Mi,
}

impl From<MemoryUnitArg> for MemoryUnit {
    fn from(unit: MemoryUnitArg) -> MemoryUnit {
        match unit {
            MemoryUnitArg::Gi => MemoryUnit::Gi,
            MemoryUnitArg::Mi => MemoryUnit::Mi,
        }
    }
}

/// The flags of `import-mrds`.
#[derive(clap::Args, Debug, Clone)]
pub struct ImportArgs {
    /// The MRDS plan document: one plan, or `plans: [...]`; YAML or JSON.
    pub file: PathBuf,
    /// The Swarm (same namespace) whose members run the plan's instances.
    #[arg(long)]
    pub swarm: String,
    /// How many instances the plan asks for (an MRDS plan has no deployment yet).
    #[arg(long, default_value_t = 0)]
    pub instances: u32,
    /// The unit the Swarm's pools give `memory` in (`shoal.dev/capacity`): MRDS memory is GiB.
    #[arg(long, value_enum, default_value_t = MemoryUnitArg::Gi)]
    pub memory_unit: MemoryUnitArg,
    /// Leave MRDS `persistentVolumes` out instead of refusing them (a plan does not create the
    /// pods its instances run on); each one left out is named on standard error.
    #[arg(long)]
    pub skip_persistent_volumes: bool,
    /// Write the plans (server-side apply, field manager `kubectl-shoal`) instead of printing them.
    #[arg(long)]
    pub apply: bool,
    /// `--dry-run=client|server` (implies --apply).
    #[command(flatten)]
    pub write: write::WriteArgs,
}

impl ImportArgs {
    /// Whether the command writes (or dry-runs a write) rather than printing manifests.
    pub fn writes(&self) -> bool {
        self.apply || self.write.dry_run != write::DryRun::None
    }
}

/// Why `import-mrds` failed; each names the file or the plan.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The file cannot be read.
    #[error("reading {}: {source}", file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The document is not an MRDS plan Shoal can take.
    #[error("{}: {source}", file.display())]
    Mrds {
        /// The file.
        file: PathBuf,
        /// What is wrong, with the field's path.
        source: MrdsError,
    },
    /// The document's namespace and `-n` disagree.
    #[error(
        "{}: plan {plan:?} says namespace {document:?} but -n says {flag:?}; drop one of them",
        file.display()
    )]
    Namespace {
        /// The file.
        file: PathBuf,
        /// The plan.
        plan: String,
        /// `namespace` in the document.
        document: String,
        /// `-n`.
        flag: String,
    },
    /// The API server refused a plan.
    #[error("applying DeploymentPlan {namespace}/{plan}: {source}{}", hint(source))]
    Apply {
        /// The plan.
        plan: String,
        /// Namespace.
        namespace: String,
        /// Cause.
        source: kube::Error,
    },
    /// A manifest cannot be rendered.
    #[error("rendering DeploymentPlan {plan}: {message}")]
    Render {
        /// The plan.
        plan: String,
        /// Cause.
        message: String,
    },
}

impl From<ImportError> for Error {
    fn from(error: ImportError) -> Error {
        Error::Import(Box::new(error))
    }
}

/// Reads `file` and builds its plans; `namespace` is `-n` when given.
pub fn import(
    args: &ImportArgs,
    namespace: Option<&str>,
) -> Result<Vec<DeploymentPlan>, ImportError> {
    let text = std::fs::read_to_string(&args.file).map_err(|source| ImportError::Read {
        file: args.file.clone(),
        source,
    })?;
    let options = Options {
        memory: args.memory_unit.into(),
        skip_persistent_volumes: args.skip_persistent_volumes,
    };
    let plans = mrds::parse(&text, options).map_err(|source| ImportError::Mrds {
        file: args.file.clone(),
        source,
    })?;
    for skipped in plans.iter().flat_map(|plan| &plan.skipped) {
        // Standard error, as kubectl's warnings: the manifests on standard output stay clean.
        eprintln!(
            "Warning: {}: {skipped} left out (--skip-persistent-volumes)",
            args.file.display()
        );
    }
    plans
        .into_iter()
        .map(|plan| deployment_plan(&args.file, plan, &args.swarm, args.instances, namespace))
        .collect()
}

/// One MRDS plan as a DeploymentPlan of `swarm` asking for `instances`.
fn deployment_plan(
    file: &Path,
    plan: MrdsPlan,
    swarm: &str,
    instances: u32,
    flag_namespace: Option<&str>,
) -> Result<DeploymentPlan, ImportError> {
    let namespace = match (plan.namespace.clone(), flag_namespace) {
        (Some(document), Some(flag)) if document != flag => {
            return Err(ImportError::Namespace {
                file: file.to_owned(),
                plan: plan.name,
                document,
                flag: flag.to_owned(),
            });
        }
        (document, flag) => document.or(flag.map(str::to_owned)),
    };
    let spec = DeploymentPlanSpec {
        swarm: swarm.to_owned(),
        applications: plan
            .applications
            .into_iter()
            .map(|application| Application {
                name: application.name,
                resources: application.resources,
                ports: application
                    .ports
                    .into_iter()
                    .map(|port| Port {
                        protocol: if port.protocol == "UDP" {
                            Protocol::UDP
                        } else {
                            Protocol::TCP
                        },
                        port: port.port,
                    })
                    .collect(),
            })
            .collect(),
        requirements: plan
            .requirements
            .into_iter()
            .map(|requirement| CapabilityRequirement {
                type_: requirement.capability_type,
                comparator: match requirement.comparator {
                    shoal_core::deploy::Comparator::In => Comparator::In,
                    shoal_core::deploy::Comparator::NotIn => Comparator::NotIn,
                    shoal_core::deploy::Comparator::Gte => Comparator::Gte,
                    shoal_core::deploy::Comparator::Lte => Comparator::Lte,
                },
                names: requirement.names.into_iter().collect(),
            })
            .collect(),
        max_instances_per_member: 1,
        deployment: DeploymentSpec {
            instances,
            payloads: Vec::new(),
            rollout: Default::default(),
        },
        approval: Default::default(),
        operation_history_limit: 100,
        deployment_history_limit: 10,
        paused: false,
        service_name: plan.service_name,
    };
    let mut object = DeploymentPlan::new(&plan.name, spec);
    object.metadata.namespace = namespace;
    Ok(object)
}

/// The manifests as text: YAML documents, or JSON (one object, or a `List`).
pub fn manifests(plans: &[DeploymentPlan], output: OutputFormat) -> Result<String, ImportError> {
    let values = plans
        .iter()
        .map(|plan| {
            serde_json::to_value(plan).map_err(|error| ImportError::Render {
                plan: plan.metadata.name.clone().unwrap_or_default(),
                message: error.to_string(),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let render_error = |message: String| ImportError::Render {
        plan: "(all)".to_owned(),
        message,
    };
    if output == OutputFormat::Json {
        let value = match values.as_slice() {
            [one] => one.clone(),
            _ => serde_json::json!({"apiVersion": "v1", "kind": "List", "items": values}),
        };
        return serde_json::to_string_pretty(&value)
            .map(|text| text + "\n")
            .map_err(|error| render_error(error.to_string()));
    }
    let documents = values
        .iter()
        .map(|value| {
            serde_saphyr::to_string(value).map_err(|error| render_error(error.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(documents
        .iter()
        .map(|document| format!("---\n{}", document.trim_end()))
        .collect::<Vec<_>>()
        .join("\n")
        + "\n")
}

/// What `import-mrds --apply` wrote.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ImportReport {
    /// The plans written, in document order.
    pub plans: Vec<ImportedPlan>,
}

/// One plan written.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ImportedPlan {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The Swarm.
    pub swarm: String,
    /// Instances asked for.
    pub instances: u32,
    /// Applications.
    pub applications: usize,
    /// Requirements.
    pub requirements: usize,
}

impl Report for ImportReport {
    fn table(&self) -> String {
        let mut table = Table::new([
            "Namespace",
            "DeploymentPlan",
            "Swarm",
            "Instances",
            "Applications",
            "Requirements",
        ]);
        for plan in &self.plans {
            table.row([
                plan.namespace.clone(),
                plan.name.clone(),
                plan.swarm.clone(),
                plan.instances.to_string(),
                plan.applications.to_string(),
                plan.requirements.to_string(),
            ]);
        }
        format!(
            "Imported (server-side apply, field manager kubectl-shoal):\n{}",
            table.render("No plan.")
        )
    }
}

/// `--apply` / `--dry-run`: writes each plan by server-side apply in its namespace.
pub async fn apply(
    target: &Target,
    plans: Vec<DeploymentPlan>,
    output: OutputFormat,
) -> Result<String, Error> {
    let writes = write::Writes::new(target.writes.mode, &target.namespace);
    let mut report = ImportReport { plans: Vec::new() };
    for plan in plans {
        let name = plan.metadata.name.clone().unwrap_or_default();
        let namespace = plan
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| target.namespace.clone());
        let object = serde_json::to_value(&plan).map_err(|error| ImportError::Render {
            plan: name.clone(),
            message: error.to_string(),
        })?;
        let api: Api<DeploymentPlan> = Api::namespaced(target.client.clone(), &namespace);
        let plan_writes = writes.in_namespace(&namespace);
        write::server_side_apply(&plan_writes, &api, &name, object)
            .await
            .map_err(|source| ImportError::Apply {
                plan: name.clone(),
                namespace: namespace.clone(),
                source,
            })?;
        report.plans.push(ImportedPlan {
            namespace,
            name,
            swarm: plan.spec.swarm.clone(),
            instances: plan.spec.deployment.instances,
            applications: plan.spec.applications.len(),
            requirements: plan.spec.requirements.len(),
        });
    }
    write::render_written(&writes, &report, output)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED_PLAN: &str = "plans:\n  - name: web\n    serviceName: web-svc\n    matchingComputeCapabilities:\n      - {capabilityType: GPU, comparator: gte, capabilityNames: [v100]}\n    applications:\n      - payloadName: nginx\n        resources: {cores: 1, memory: 2}\n        ports: [{protocol: udp, port: 53}]\n";

    fn plan(namespace: Option<&str>) -> Result<DeploymentPlan, ImportError> {
        let options = Options {
            memory: MemoryUnit::Mi,
            ..Options::default()
        };
        let parsed = mrds::parse(SEED_PLAN, options).unwrap().remove(0);
        deployment_plan(Path::new("plan.yaml"), parsed, "edge", 2, namespace)
    }

    #[test]
    fn an_mrds_plan_becomes_a_deployment_plan_of_the_swarm_with_its_service_name() {
        let plan = plan(Some("apps")).unwrap();
        assert_eq!(plan.metadata.namespace.as_deref(), Some("apps"));
        assert_eq!(plan.spec.service_name.as_deref(), Some("web-svc"));
        assert_eq!(plan.spec.swarm, "edge");
        assert_eq!(plan.spec.deployment.instances, 2);
        assert_eq!(plan.spec.requirements[0].comparator, Comparator::Gte);
        let application = &plan.spec.applications[0];
        assert_eq!(application.resources.get("memory"), Some(&2048));
        assert_eq!(application.ports[0].protocol, Protocol::UDP);
        let yaml = manifests(&[plan], OutputFormat::Yaml).unwrap();
        assert!(
            yaml.starts_with("---\napiVersion: shoal.dev/v1alpha1\nkind: DeploymentPlan\n"),
            "{yaml}"
        );
    }

    #[test]
    fn a_document_namespace_that_contradicts_the_flag_is_refused() {
        let error = plan(None).map(|_| ()).and_then(|()| {
            let parsed = mrds::parse(
                &SEED_PLAN.replace("name: web", "name: web\n    namespace: other"),
                Options::default(),
            )
            .unwrap()
            .remove(0);
            deployment_plan(Path::new("plan.yaml"), parsed, "edge", 0, Some("apps")).map(|_| ())
        });
        assert_eq!(
            error.unwrap_err().to_string(),
            "plan.yaml: plan \"web\" says namespace \"other\" but -n says \"apps\"; drop one of them"
        );
    }
}
