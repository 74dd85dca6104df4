//! `kubectl shoal`: the kubectl plugin (binary `kubectl-shoal`).
//!
//! Every command reads the cluster alone; the computations reuse the
//! controller's own [`crate::swarm::observe::observe`] and [`crate::swarm::decide::decide`], so
//! what `diff` and `status` say is what the controller does. Only `approve`
//! and `undo` write, and only one annotation on the Swarm each: the controller
//! does the rest through its approval gate.
//!
//! * [`status`]: pools, members, revisions, pending summary, conditions, operations, Events.
//! * [`preview`]: `diff` (and the preview `undo` prints) — which jobs move from whom to whom.
//! * [`gate`]: `approve` and `undo`.
//! * [`history`]: recorded revisions.
//! * [`slices`]: slice ConfigMaps, one member's jobs.
//! * [`plans`]: DeploymentPlans: `plans`, `plan`, `instances`, `operations`, `approve-op`,
//!   and the user operations `relocate`, `stop`, `start`, `restart`.
//! * [`swarm_rollout`]: a Swarm's pool-by-pool restarts: `pause swarm/<name>`,
//!   `resume swarm/<name>`, `rollout-status swarm/<name>`.
//! * [`complete`]: `kubectl shoal <TAB>` through kubectl (`kubectl_complete-shoal`); and
//!   `completion bash|zsh|fish` ([`completion`]).
//! * [`cordon`]: `cordon`, `uncordon` and `drain <member>`: the Swarm's `spec.cordon`.
//! * [`kind`]: `swarm/<name>`, `dplan/<name>` and the CRDs' other names, as kubectl takes them.
//! * [`import_mrds`]: `import-mrds`, an MRDS plan document as DeploymentPlans.
//! * [`members`]: `members`, one row per member: pool, update domain, state, capabilities,
//!   capacity, reserved, remaining, plan instances and jobs held.
//! * [`plan_rollout`]: a plan's ordered rollout: `pause`, `resume`,
//!   `rollout-status`, `plan-history`, `plan-undo`.
//!
//! # Use
//!
//! Put `kubectl-shoal` on the `PATH`; kubectl finds it as `kubectl shoal`
//! (the plugin name comes first, flags after it):
//!
//! ```text
//! kubectl shoal status demo -n streams            # pools, members, pending revision, conditions, Events
//! kubectl shoal status demo --watch               # print it again on each change
//! kubectl shoal wait demo --for=in-force --timeout=5m   # exit 0 once the revision is in force
//! kubectl shoal diff demo --replicas 4            # which jobs would move from whom to whom; writes nothing
//! kubectl shoal diff demo --pool blue --replicas 3
//! kubectl shoal diff demo --jobs-file jobs.yaml   # a new job list (`jobs: [...]`, a YAML list, or lines)
//! kubectl shoal approve demo --revision 4         # refused unless 4 is the pending revision
//! kubectl shoal history demo [--revision 2]
//! kubectl shoal undo demo [--to-revision 2]       # rewrites the job list and strategy (jobsFrom kept); through the gate
//! kubectl shoal slices demo [worker-1]
//! kubectl shoal plans | plan web | instances web | operations web
//! kubectl shoal approve-op web create-web-0-r1-1
//! kubectl shoal cordon worker-2 | drain worker-2 | uncordon worker-2
//! ```
//!
//! `--kubeconfig`, `KUBECONFIG` (a list of files), `--context` and `-n` work as
//! in kubectl; `-o yaml|json` prints the report as data; tables fit 120 columns, and
//! `-o wide` shows every column at full width ([`table`]).
//!
//! # Rights
//!
//! Reading needs get/list on swarms, configmaps, statefulsets, pods, leases and
//! events in the Swarm's namespace; `approve` and `undo` also need patch on
//! swarms (`approve` writes the approval and the approver's name, learnt from a
//! SelfSubjectReview, which every authenticated user may create; `undo` rewrites
//! the job list and strategy; `cordon`, `uncordon` and `drain` write `spec.cordon`). The
//! plan commands need get/list on deploymentplans (in
//! `shoal-viewer`), and `approve-op`, `relocate`, `stop`, `start` and
//! `restart` patch on deploymentplans (in `shoal-approver`: each writes one
//! annotation, `approve-op` the approver's name beside it).

pub mod annotate;
pub mod complete;
pub mod cordon;
pub mod gate;
pub mod history;
pub mod import_mrds;
pub mod kind;
pub mod members;
pub mod plan_rollout;
pub mod plans;
pub mod preview;
pub mod slices;
pub mod status;
pub mod swarm_rollout;
pub mod table;
#[cfg(test)]
mod testing;
pub mod wait;
pub mod write;

use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde::Serialize;

use crate::api::swarm::Swarm;
use crate::deployment_plan::decide::Verb;
use swarm_rollout::RolloutObject;

/// `kubectl shoal`: inspect and steer Shoal Swarms.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "kubectl-shoal",
    bin_name = "kubectl shoal",
    version,
    about = "Inspect and steer Shoal Swarms: status (--watch), wait, diff, approve, history, undo, slices."
)]
pub struct Cli {
    /// Namespace of the Swarm (default: the kubeconfig context's namespace, else `default`).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// Kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else in-cluster).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current context).
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// How a report is printed.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// Readable tables, at most 120 columns wide.
    Table,
    /// Readable tables with every column, as wide as they are (like `kubectl get -o wide`).
    Wide,
    /// YAML.
    Yaml,
    /// JSON.
    Json,
}

/// The plugin's commands.
#[derive(Subcommand, Debug, Clone)]
pub enum Command {
    /// Pools, members, revisions, the pending revision, conditions, operations and recent Events.
    Status {
        /// The Swarm: `<name>` or `swarm/<name>`.
        #[arg(value_parser = kind::swarm)]
        swarm: String,
        /// Keep watching: print the status again each time it changes (like `kubectl get -w`).
        #[arg(short = 'w', long)]
        watch: bool,
    },
    /// What a change would do, computed like the controller does; writes nothing.
    ///
    /// Without options: what the controller would do with the cluster as it is now.
    Diff {
        /// The Swarm: `<name>` or `swarm/<name>`.
        #[arg(value_parser = kind::swarm)]
        swarm: String,
        /// Scale a pool to this many replicas (with --pool when the Swarm has several pools).
        #[arg(long)]
        replicas: Option<u32>,
        /// The pool (StatefulSet) --replicas applies to.
        #[arg(long, requires = "replicas")]
        pool: Option<String>,
        /// Replace the whole job list with this file: a `jobs: [...]` YAML document
        /// (as in a jobsFrom ConfigMap), a YAML list, or one key per line.
        #[arg(long, conflicts_with = "replicas")]
        jobs_file: Option<PathBuf>,
    },
    /// Approve the pending revision (annotates the Swarm `shoal.dev/approve=<revision>/<hash>`
    /// and `shoal.dev/approved-by=<you>`).
    Approve {
        /// The Swarm: `<name>` or `swarm/<name>`.
        #[arg(value_parser = kind::swarm)]
        swarm: String,
        /// The revision to approve; refused unless it is the pending one.
        #[arg(long)]
        revision: Option<u64>,
        /// `--dry-run=client|server`.
        #[command(flatten)]
        write: write::WriteArgs,
    },
    /// Revisions recorded in the history ConfigMaps.
    History {
        /// The Swarm: `<name>` or `swarm/<name>`.
        #[arg(value_parser = kind::swarm)]
        swarm: String,
        /// Also show this revision in detail: its members and who owned which job.
        #[arg(long)]
        revision: Option<u64>,
    },
    /// Roll back to the job list and strategy of a recorded revision: rewrites the Swarm's
    /// `spec.jobs` and `spec.strategy`, which then go through the approval gate. A Swarm
    /// reading `spec.jobsFrom` keeps it: only its strategy is rolled back, and only when
    /// those ConfigMaps hold the revision's jobs already (else refused, saying what to do).
    Undo {
        /// The Swarm: `<name>` or `swarm/<name>`.
        #[arg(value_parser = kind::swarm)]
        swarm: String,
        /// The revision to return to (default: the one before the revision in force).
        #[arg(long)]
        to_revision: Option<u64>,
        /// Write the revision's jobs inline into `spec.jobs` even when the Swarm reads
        /// `spec.jobsFrom`, removing it (a GitOps tool managing the Swarm will put it back).
        #[arg(long)]
        inline_jobs: bool,
        /// `--dry-run=client|server`.
        #[command(flatten)]
        write: write::WriteArgs,
    },
    /// Slice ConfigMaps per member, or one member's jobs.
    Slices {
        /// The Swarm: `<name>` or `swarm/<name>`.
        #[arg(value_parser = kind::swarm)]
        swarm: String,
        /// A member (pod name): print its jobs.
        member: Option<String>,
    },
    /// One row per member of a Swarm (default: every Swarm of the namespace), as MRDS's
    /// `node list`: pool, update domain, state, capacity, remaining (after what the plans
    /// hold), plan instances and jobs held; `-o wide` adds capabilities and reserved.
    Members {
        /// The Swarm: `<name>` or `swarm/<name>`.
        #[arg(value_parser = kind::swarm)]
        swarm: Option<String>,
    },
    /// DeploymentPlans of the namespace.
    Plans,
    /// One DeploymentPlan: requirements, applications (resources, ports, payload), deployments,
    /// instance and operation summaries.
    Plan {
        /// The DeploymentPlan: `<name>` or `dplan/<name>`.
        #[arg(value_parser = kind::plan)]
        plan: String,
    },
    /// A plan's instances: member, update domain, deployment, state, error; unplaced ones.
    Instances {
        /// The DeploymentPlan: `<name>` or `dplan/<name>`.
        #[arg(value_parser = kind::plan)]
        plan: String,
    },
    /// A plan's operations and their states.
    Operations {
        /// The DeploymentPlan: `<name>` or `dplan/<name>`.
        #[arg(value_parser = kind::plan)]
        plan: String,
    },
    /// What devices reported to the status endpoint on a plan's deployment, beside the
    /// state Shoal computed for the same revision.
    Reports {
        /// The DeploymentPlan: `<name>` or `dplan/<name>`.
        #[arg(value_parser = kind::plan)]
        plan: String,
    },
    /// Approve one operation waiting for approval (annotates the plan
    /// `shoal.dev/approve=<id>/<hash>` and `shoal.dev/approved-by=<you>`).
    ApproveOp {
        /// The DeploymentPlan: `<name>` or `dplan/<name>`.
        #[arg(value_parser = kind::plan)]
        plan: String,
        /// The operation id (`kubectl shoal operations <plan>`).
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<String>,
        /// Approve the latest deployment as a whole instead: exactly the operations
        /// `status.approveDeploymentWith` pins, each listed (preview with --dry-run=client).
        #[arg(long)]
        all: bool,
        /// `--dry-run=client|server`.
        #[command(flatten)]
        write: write::WriteArgs,
    },
    /// Block until the controller has seen the Swarm's current spec, pool sizes and job
    /// list and the revision computed from them is in force (exit 0); exit 3 when that
    /// revision waits for approval; exit 1 with a message on timeout or when the Swarm is
    /// Degraded.
    Wait {
        /// The Swarm: `<name>` or `swarm/<name>`.
        #[arg(value_parser = kind::swarm)]
        swarm: String,
        /// `in-force`: no revision pending or being applied; `ready`: also every member ready.
        #[arg(long = "for", value_enum, default_value_t = wait::WaitFor::InForce)]
        for_: wait::WaitFor,
        /// Give up after this long, e.g. `90s`, `5m`.
        #[arg(long, default_value = "5m", value_parser = shoal_core::duration::parse_flag)]
        timeout: std::time::Duration,
    },
    /// Relocate one instance (make-before-break), to a named member or where
    /// placement chooses (annotates the plan `shoal.dev/operate`).
    Relocate {
        /// The DeploymentPlan: `<name>` or `dplan/<name>`.
        #[arg(value_parser = kind::plan)]
        plan: String,
        /// The instance, `<plan>-<n>`.
        instance: String,
        /// The member (pod name) to move it to.
        #[arg(long)]
        to: Option<String>,
        /// `--dry-run=client|server`.
        #[command(flatten)]
        write: write::WriteArgs,
    },
    /// Stop one instance's process, keeping its placement (annotates `shoal.dev/operate`).
    Stop {
        /// The DeploymentPlan: `<name>` or `dplan/<name>`.
        #[arg(value_parser = kind::plan)]
        plan: String,
        /// The instance, `<plan>-<n>`.
        instance: String,
        /// `--dry-run=client|server`.
        #[command(flatten)]
        write: write::WriteArgs,
    },
    /// Start a stopped instance again (annotates `shoal.dev/operate`).
    Start {
        /// The DeploymentPlan: `<name>` or `dplan/<name>`.
        #[arg(value_parser = kind::plan)]
        plan: String,
        /// The instance, `<plan>-<n>`.
        instance: String,
        /// `--dry-run=client|server`.
        #[command(flatten)]
        write: write::WriteArgs,
    },
    /// Restart one instance's process (annotates `shoal.dev/operate`).
    Restart {
        /// The DeploymentPlan: `<name>` or `dplan/<name>`.
        #[arg(value_parser = kind::plan)]
        plan: String,
        /// The instance, `<plan>-<n>`.
        instance: String,
        /// `--dry-run=client|server`.
        #[command(flatten)]
        write: write::WriteArgs,
    },
    /// Pause a rollout (sets `spec.paused`): a plan releases no further update; a Swarm
    /// (`swarm/<name>`) restarts no further pod and grants no job.
    Pause {
        /// `swarm/<name>` or `dplan/<name>`; a bare name is the DeploymentPlan (refused when a
        /// Swarm has that name too).
        #[arg(value_parser = swarm_rollout::RolloutObject::parse)]
        object: swarm_rollout::RolloutObject,
        /// `--dry-run=client|server`.
        #[command(flatten)]
        write: write::WriteArgs,
    },
    /// Resume a paused rollout (clears `spec.paused`).
    Resume {
        /// `swarm/<name>` or `dplan/<name>`; a bare name is the DeploymentPlan (refused when a
        /// Swarm has that name too).
        #[arg(value_parser = swarm_rollout::RolloutObject::parse)]
        object: swarm_rollout::RolloutObject,
        /// `--dry-run=client|server`.
        #[command(flatten)]
        write: write::WriteArgs,
    },
    /// Block until a rollout is done (exit 0), printing which update domain (plan) or
    /// pool (Swarm) is updating, done or waiting; exit 1 on timeout, when the rollout
    /// halts, or when the object is Degraded.
    RolloutStatus {
        /// `swarm/<name>` or `dplan/<name>`; a bare name is the DeploymentPlan (refused when a
        /// Swarm has that name too).
        #[arg(value_parser = swarm_rollout::RolloutObject::parse)]
        object: swarm_rollout::RolloutObject,
        /// Give up after this long, e.g. `90s`, `5m`.
        #[arg(long, default_value = "5m", value_parser = shoal_core::duration::parse_flag)]
        timeout: std::time::Duration,
    },
    /// Cordon a member: it keeps its jobs and plan instances but gets no new ones (an
    /// entry in its Swarm's `spec.cordon`; survives the pod being recreated).
    Cordon {
        /// The member and its Swarm.
        #[command(flatten)]
        named: cordon::MemberArgs,
        /// Why (shown in `spec.cordon`), e.g. a ticket.
        #[arg(long)]
        reason: Option<String>,
        /// `--dry-run=client|server`.
        #[command(flatten)]
        write: write::WriteArgs,
    },
    /// Uncordon a member: it takes new jobs and instances again (removes its `spec.cordon` entry).
    Uncordon {
        /// The member and its Swarm.
        #[command(flatten)]
        named: cordon::MemberArgs,
        /// `--dry-run=client|server`.
        #[command(flatten)]
        write: write::WriteArgs,
    },
    /// Drain a member: cordon it and move its jobs off through the approval gate (a
    /// revision holding nothing on it; `kubectl shoal approve` under Manual approval).
    Drain {
        /// The member and its Swarm.
        #[command(flatten)]
        named: cordon::MemberArgs,
        /// Why (shown in `spec.cordon`), e.g. a ticket.
        #[arg(long)]
        reason: Option<String>,
        /// `--dry-run=client|server`.
        #[command(flatten)]
        write: write::WriteArgs,
    },
    /// Print a shell completion script for `kubectl-shoal`, e.g.
    /// `source <(kubectl shoal completion bash)`; writes nothing to the cluster.
    Completion {
        /// The shell: bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Turn an MRDS plan document (YAML or JSON, one plan or `plans: [...]`) into
    /// DeploymentPlans of `--swarm`: printed as YAML (`-o json` as JSON), or written with
    /// `--apply` / `--dry-run=client|server`. Fields with no meaning here and unknown fields
    /// are refused, naming the field and its path.
    ImportMrds {
        /// The file, the Swarm, the instance count, the memory unit and how to write.
        #[command(flatten)]
        args: import_mrds::ImportArgs,
    },
    /// A plan's recorded deployment revisions with change cause and creation time.
    PlanHistory {
        /// The DeploymentPlan: `<name>` or `dplan/<name>`.
        #[arg(value_parser = kind::plan)]
        plan: String,
    },
    /// Rewrite a plan's payloads and rollout from a recorded revision (default: the one
    /// before the latest), like `kubectl rollout undo`; a new revision through the gate.
    PlanUndo {
        /// The DeploymentPlan: `<name>` or `dplan/<name>`.
        #[arg(value_parser = kind::plan)]
        plan: String,
        /// The recorded revision to go back to.
        #[arg(long)]
        to_revision: Option<u64>,
        /// `--dry-run=client|server`.
        #[command(flatten)]
        write: write::WriteArgs,
    },
}

impl Command {
    /// The `--dry-run` of a changing command; `none` for every other.
    pub fn dry_run(&self) -> write::DryRun {
        self.write_args()
            .map_or(write::DryRun::None, |write| write.dry_run)
    }

    /// The write flags of a command that changes an object; `None` for the reading ones.
    pub fn write_args(&self) -> Option<&write::WriteArgs> {
        match self {
            Command::Approve { write, .. }
            | Command::Undo { write, .. }
            | Command::ApproveOp { write, .. }
            | Command::Relocate { write, .. }
            | Command::Stop { write, .. }
            | Command::Start { write, .. }
            | Command::Restart { write, .. }
            | Command::Pause { write, .. }
            | Command::Resume { write, .. }
            | Command::PlanUndo { write, .. }
            | Command::Cordon { write, .. }
            | Command::Uncordon { write, .. }
            | Command::Drain { write, .. } => Some(write),
            Command::ImportMrds { args } => Some(&args.write),
            _ => None,
        }
    }
}

/// Why a command failed. One variant per failing step; each names the object
/// and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig could not be read or used.
    #[error(
        "cannot use the kubeconfig{}: {source}; pass --kubeconfig <file> or set KUBECONFIG",
        path.as_ref().map(|path| format!(" {}", path.display())).unwrap_or_default()
    )]
    Kubeconfig {
        /// The file given with --kubeconfig, if any.
        path: Option<PathBuf>,
        /// Cause.
        source: kube::config::KubeconfigError,
    },
    /// No kubeconfig and no in-cluster configuration.
    #[error("no cluster configuration found: {0}; pass --kubeconfig <file> or set KUBECONFIG")]
    InferConfig(kube::config::InferConfigError),
    /// The HTTP client could not be built.
    #[error("cannot build a Kubernetes client: {0}")]
    Client(kube::Error),
    /// The Swarm does not exist.
    #[error(
        "Swarm {swarm:?} not found in namespace {namespace:?}; list Swarms with `kubectl get swarms -n {namespace}` or pick the namespace with -n"
    )]
    SwarmNotFound {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
    },
    /// Reading the Swarm failed.
    #[error("reading Swarm {namespace}/{swarm}: {source}{}", hint(source))]
    ReadSwarm {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
        /// Cause.
        source: kube::Error,
    },
    /// Observing the Swarm's objects failed.
    #[error("reading the objects of Swarm {namespace}/{swarm}: {source}")]
    Observe {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
        /// Cause (boxed: it is large and rare).
        source: Box<crate::swarm::reconcile::Error>,
    },
    /// Listing the Swarm's ConfigMaps failed.
    #[error(
        "listing ConfigMaps of Swarm {namespace}/{swarm}: {source}{}",
        hint(source)
    )]
    ListConfigMaps {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
        /// Cause.
        source: kube::Error,
    },
    /// Listing the Swarm's Events failed.
    #[error(
        "listing Events of Swarm {namespace}/{swarm}: {source}{}",
        hint(source)
    )]
    ListEvents {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
        /// Cause.
        source: kube::Error,
    },
    /// `diff`: the change cannot be previewed.
    #[error(transparent)]
    Preview(Box<preview::PreviewError>),
    /// `approve` / `undo`: refused.
    #[error(transparent)]
    Gate(Box<gate::GateError>),
    /// `slices <member>`: no such member.
    #[error(
        "Swarm {namespace}/{swarm} has no member {member:?} (members: {}); pass a pod name listed by `kubectl shoal slices {swarm} -n {namespace}`",
        members.join(", ")
    )]
    UnknownMember {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
        /// The name given.
        member: String,
        /// Members with a slice or a pod.
        members: Vec<String>,
    },
    /// A DeploymentPlan command failed.
    #[error(transparent)]
    Plans(Box<plans::PlansError>),
    /// `wait`: timed out, or the Swarm is Degraded.
    #[error("{0}")]
    Wait(String),
    /// `wait`: the revision computed from the inputs the controller has seen waits for
    /// approval (exit code [`wait::EXIT_AWAITING_APPROVAL`]).
    #[error("{0}")]
    AwaitingApproval(String),
    /// `pause` / `resume swarm/<name>`: writing `spec.paused` failed.
    #[error(
        "setting spec.paused of Swarm {namespace}/{swarm}: {source}{}",
        hint(source)
    )]
    PauseSwarm {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
        /// Cause.
        source: kube::Error,
    },
    /// `pause` / `resume` / `rollout-status <name>`: a Swarm has the bare name (and
    /// perhaps a DeploymentPlan too), so which is meant must be said.
    #[error("{}", bare_rollout_name(name, namespace, command, *plan_too))]
    BareRolloutName {
        /// The name given.
        name: String,
        /// Namespace.
        namespace: String,
        /// `pause`, `resume` or `rollout-status`.
        command: &'static str,
        /// Whether a DeploymentPlan has the name too.
        plan_too: bool,
    },
    /// `cordon` / `uncordon` / `drain`: the member or its Swarm cannot be told.
    #[error("{0}")]
    Cordon(String),
    /// `cordon` / `uncordon` / `drain`: writing `spec.cordon` failed.
    #[error(
        "setting spec.cordon of Swarm {namespace}/{swarm}: {source}{}",
        hint(source)
    )]
    CordonWrite {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
        /// Cause.
        source: kube::Error,
    },
    /// `import-mrds` failed.
    #[error(transparent)]
    Import(Box<import_mrds::ImportError>),
    /// Serializing the report failed.
    #[error("rendering the report as {format}: {message}")]
    Render {
        /// `yaml` or `json`.
        format: &'static str,
        /// Cause.
        message: String,
    },
}

impl From<preview::PreviewError> for Error {
    fn from(error: preview::PreviewError) -> Error {
        Error::Preview(Box::new(error))
    }
}

impl From<plans::PlansError> for Error {
    fn from(error: plans::PlansError) -> Error {
        Error::Plans(Box::new(error))
    }
}

impl From<gate::GateError> for Error {
    fn from(error: gate::GateError) -> Error {
        Error::Gate(Box::new(error))
    }
}

impl Error {
    /// The process exit code for this error: [`wait::EXIT_AWAITING_APPROVAL`] when `wait`
    /// ends on a revision waiting for approval, 1 for every other failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::AwaitingApproval(_) => wait::EXIT_AWAITING_APPROVAL,
            _ => 1,
        }
    }
}

fn bare_rollout_name(name: &str, namespace: &str, command: &str, plan_too: bool) -> String {
    if plan_too {
        format!(
            "both Swarm {namespace}/{name} and DeploymentPlan {namespace}/{name} exist; say which: `kubectl shoal {command} swarm/{name}` or `kubectl shoal {command} dplan/{name}`"
        )
    } else {
        format!(
            "no DeploymentPlan {namespace}/{name} (a bare name means a DeploymentPlan here), but Swarm {namespace}/{name} exists: `kubectl shoal {command} swarm/{name}`"
        )
    }
}

/// Whether a member's own sidecar acknowledged the slice with `hash`, in words: `yes`, `no`,
/// `no lease`, or that the Lease is not the member's (the controller ignores it too).
pub(crate) fn acknowledgement(
    obs: &crate::swarm::decide::Observation,
    member: &str,
    hash: Option<&str>,
) -> String {
    let Some(lease) = obs.leases.get(member) else {
        return "no lease".to_owned();
    };
    let pod_uid = obs
        .pools
        .iter()
        .find_map(|pool| pool.pod(member))
        .map(|pod| pod.uid.clone())
        .unwrap_or_default();
    if !lease.speaks_for(member, &pod_uid) {
        return format!(
            "not its own (held by {})",
            lease.holder.as_deref().unwrap_or("nobody")
        );
    }
    match hash {
        Some(hash) if lease.acked_hash.as_deref() == Some(hash) => "yes".to_owned(),
        _ => "no".to_owned(),
    }
}

/// What to do about an API error, as a sentence to append to its message.
pub fn hint(error: &kube::Error) -> &'static str {
    match error {
        kube::Error::Api(status) if status.code == 401 => {
            "; the cluster did not accept your credentials: check the user in your kubeconfig"
        }
        kube::Error::Api(status) if status.code == 403 => {
            "; your user may not do this: reading needs get/list on swarms, configmaps, statefulsets, pods, leases and events; approve and undo need patch on swarms (the shoal-approver role)"
        }
        kube::Error::Api(_) => "",
        _ => "; is the API server in your kubeconfig reachable? (try `kubectl cluster-info`)",
    }
}

/// A command's result: serializable for `-o yaml|json`, and a readable table.
pub trait Report: Serialize {
    /// The readable rendering, at most [`table::MAX_TABLE_WIDTH`] columns wide where the
    /// words allow.
    fn table(&self) -> String;
    /// `-o wide`: every column; by default the table itself (it hides nothing).
    fn wide(&self) -> String {
        self.table()
    }
}

/// Renders a report in the requested format.
pub fn render<R: Report>(report: &R, format: OutputFormat) -> Result<String, Error> {
    match format {
        OutputFormat::Table => Ok(report.table()),
        OutputFormat::Wide => Ok(report.wide()),
        OutputFormat::Json => serde_json::to_string_pretty(report)
            .map(|text| text + "\n")
            .map_err(|error| Error::Render {
                format: "json",
                message: error.to_string(),
            }),
        OutputFormat::Yaml => {
            // Through a JSON value so that maps with non-string keys cannot trip the YAML writer.
            let value = serde_json::to_value(report).map_err(|error| Error::Render {
                format: "yaml",
                message: error.to_string(),
            })?;
            let mut text = serde_saphyr::to_string(&value).map_err(|error| Error::Render {
                format: "yaml",
                message: error.to_string(),
            })?;
            if !text.ends_with('\n') {
                text.push('\n');
            }
            Ok(text)
        }
    }
}

/// A client and the namespace commands act in.
#[derive(Clone)]
pub struct Target {
    /// The API client.
    pub client: Client,
    /// The namespace.
    pub namespace: String,
    /// How this run writes (`--dry-run`).
    pub writes: write::Writes,
}

/// Connects like kubectl does: `--kubeconfig`, else `KUBECONFIG` (a list of
/// files, merged), else `~/.kube/config`, else the in-cluster service account;
/// `--context` picks a context; `-n` overrides the context's namespace.
pub async fn connect(cli: &Cli) -> Result<Target, Error> {
    let options = KubeConfigOptions {
        context: cli.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match &cli.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path).map_err(|source| Error::Kubeconfig {
                path: Some(path.clone()),
                source,
            })?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|source| Error::Kubeconfig {
                    path: Some(path.clone()),
                    source,
                })?
        }
        None if cli.context.is_some() => Config::from_kubeconfig(&options)
            .await
            .map_err(|source| Error::Kubeconfig { path: None, source })?,
        None => Config::infer().await.map_err(Error::InferConfig)?,
    };
    let namespace = cli
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config).map_err(Error::Client)?;
    Ok(Target {
        client,
        writes: write::Writes::new(cli.command.dry_run(), &namespace),
        namespace,
    })
}

/// Reads a Swarm, with an error that says how to find it when it is missing.
pub async fn get_swarm(target: &Target, swarm: &str) -> Result<Swarm, Error> {
    let api: Api<Swarm> = Api::namespaced(target.client.clone(), &target.namespace);
    match api.get_opt(swarm).await {
        Ok(Some(object)) => Ok(object),
        Ok(None) => Err(Error::SwarmNotFound {
            swarm: swarm.to_owned(),
            namespace: target.namespace.clone(),
        }),
        Err(source) => Err(Error::ReadSwarm {
            swarm: swarm.to_owned(),
            namespace: target.namespace.clone(),
            source,
        }),
    }
}

/// Reads a Swarm and observes its objects exactly as the controller does.
pub async fn observe(
    target: &Target,
    swarm: &str,
) -> Result<(Swarm, crate::swarm::decide::Observation), Error> {
    let object = get_swarm(target, swarm).await?;
    let observation = crate::swarm::observe::observe(&object, &target.client, None, None)
        .await
        .map_err(observe_failed(target, swarm))?;
    Ok((object, observation))
}

/// The plugin's error for a failed read of what the controller observes of `swarm`.
pub(crate) fn observe_failed(
    target: &Target,
    swarm: &str,
) -> impl FnOnce(crate::swarm::reconcile::Error) -> Error {
    let (swarm, namespace) = (swarm.to_owned(), target.namespace.clone());
    move |source| Error::Observe {
        swarm,
        namespace,
        source: Box::new(source),
    }
}

/// Prints at once (for the commands that keep running: `status --watch`, `wait`).
fn print_now(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

/// `pause` / `resume` of a plan or a Swarm.
async fn set_paused(
    target: &Target,
    object: &RolloutObject,
    paused: bool,
    output: OutputFormat,
) -> Result<String, Error> {
    let command = if paused { "pause" } else { "resume" };
    let writes = &target.writes;
    match swarm_rollout::resolve(target, object, command).await? {
        RolloutObject::Swarm(swarm) => write::render_written(
            writes,
            &swarm_rollout::set_paused(target, &swarm, paused).await?,
            output,
        ),
        RolloutObject::Plan(plan) | RolloutObject::Bare(plan) => write::render_written(
            writes,
            &plan_rollout::set_paused(target, &plan, paused).await?,
            output,
        ),
    }
}

/// The completion script of `shell` for the binary `kubectl-shoal` (the name it is
/// installed under: shells complete commands, and `kubectl shoal` is kubectl's).
pub fn completion(shell: clap_complete::Shell) -> String {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "kubectl-shoal", &mut script);
    String::from_utf8_lossy(&script).into_owned()
}

/// Runs one command and returns what to print.
pub async fn run(cli: &Cli) -> Result<String, Error> {
    // The one command that needs no cluster.
    if let Command::Completion { shell } = &cli.command {
        return Ok(completion(*shell));
    }
    // Printing the manifests needs no cluster either.
    if let Command::ImportMrds { args } = &cli.command {
        let plans = import_mrds::import(args, cli.namespace.as_deref())?;
        if !args.writes() {
            return Ok(import_mrds::manifests(&plans, cli.output)?);
        }
        let target = connect(cli).await?;
        return import_mrds::apply(&target, plans, cli.output).await;
    }
    let target = connect(cli).await?;
    if cli.command.write_args().is_some() {
        return change(&target, &cli.command, cli.output).await;
    }
    read(&target, &cli.command, cli.output).await
}

/// Runs a command that changes an object (the ones with `--dry-run`).
async fn change(target: &Target, command: &Command, output: OutputFormat) -> Result<String, Error> {
    let writes = &target.writes;
    let operate = async |plan: &str, verb: Verb, instance: &str, to: Option<&str>| {
        let report = plans::operate(target, plan, verb, instance, to).await?;
        write::render_written(writes, &report, output)
    };
    match command {
        Command::Approve {
            swarm, revision, ..
        } => write::render_written(
            writes,
            &gate::approve(target, swarm, *revision).await?,
            output,
        ),
        Command::Undo {
            swarm,
            to_revision,
            inline_jobs,
            ..
        } => {
            let report = gate::undo(target, swarm, *to_revision, *inline_jobs).await?;
            write::render_written(writes, &report, output)
        }
        Command::ApproveOp {
            plan, id: Some(id), ..
        } => write::render_written(writes, &plans::approve_op(target, plan, id).await?, output),
        Command::ApproveOp { plan, id: None, .. } => write::render_written(
            writes,
            &plans::approve_deployment(target, plan).await?,
            output,
        ),
        Command::Relocate {
            plan, instance, to, ..
        } => operate(plan, Verb::Relocate, instance, to.as_deref()).await,
        Command::Stop { plan, instance, .. } => operate(plan, Verb::Stop, instance, None).await,
        Command::Start { plan, instance, .. } => operate(plan, Verb::Start, instance, None).await,
        Command::Restart { plan, instance, .. } => {
            operate(plan, Verb::Restart, instance, None).await
        }
        Command::Cordon { named, reason, .. } | Command::Drain { named, reason, .. } => {
            let action = match command {
                Command::Drain { .. } => cordon::Action::Drain,
                _ => cordon::Action::Cordon,
            };
            let report = cordon::set(target, named, action, reason.as_deref()).await?;
            write::render_written(writes, &report, output)
        }
        Command::Uncordon { named, .. } => {
            let report = cordon::set(target, named, cordon::Action::Uncordon, None).await?;
            write::render_written(writes, &report, output)
        }
        Command::Pause { object, .. } => set_paused(target, object, true, output).await,
        Command::Resume { object, .. } => set_paused(target, object, false, output).await,
        Command::ImportMrds { args } => {
            let plans = import_mrds::import(args, None)?;
            import_mrds::apply(target, plans, output).await
        }
        Command::PlanUndo {
            plan, to_revision, ..
        } => write::render_written(
            writes,
            &plan_rollout::undo(target, plan, *to_revision).await?,
            output,
        ),
        _ => read(target, command, output).await,
    }
}

/// Runs a command that only reads.
async fn read(target: &Target, command: &Command, output: OutputFormat) -> Result<String, Error> {
    match command {
        Command::Status {
            swarm,
            watch: false,
        } => render(&status::status(target, swarm).await?, output),
        Command::Status { swarm, watch: true } => {
            wait::watch_status(target, swarm, output, print_now).await
        }
        Command::Wait {
            swarm,
            for_,
            timeout,
        } => {
            wait::wait(target, swarm, *for_, *timeout, |line| {
                print_now(&format!("{line}\n"))
            })
            .await
        }
        Command::Diff {
            swarm,
            replicas,
            pool,
            jobs_file,
        } => render(
            &diff(target, swarm, *replicas, pool, jobs_file).await?,
            output,
        ),
        Command::History { swarm, revision } => {
            render(&history::history(target, swarm, *revision).await?, output)
        }
        Command::Slices { swarm, member } => render(
            &slices::slices(target, swarm, member.as_deref()).await?,
            output,
        ),
        Command::Members { swarm } => {
            render(&members::members(target, swarm.as_deref()).await?, output)
        }
        Command::Plans => render(&plans::plans(target).await?, output),
        Command::Plan { plan } => render(&plans::plan(target, plan).await?, output),
        Command::Instances { plan } => render(&plans::instances(target, plan).await?, output),
        Command::Operations { plan } => render(&plans::operations(target, plan).await?, output),
        Command::Reports { plan } => render(&plans::reports(target, plan).await?, output),
        Command::RolloutStatus { object, timeout } => {
            rollout_status(target, object, *timeout).await
        }
        Command::Completion { shell } => Ok(completion(*shell)),
        Command::PlanHistory { plan } => {
            render(&plan_rollout::history(target, plan).await?, output)
        }
        // `run` sends the changing commands to `change`; boxed: the two call each other.
        _ => Box::pin(change(target, command, output)).await,
    }
}

/// `diff`: what the change given by the flags would do.
async fn diff(
    target: &Target,
    swarm: &str,
    replicas: Option<u32>,
    pool: &Option<String>,
    jobs_file: &Option<PathBuf>,
) -> Result<preview::DiffReport, Error> {
    let change = match (replicas, jobs_file) {
        (Some(replicas), _) => preview::Change::Replicas {
            pool: pool.clone(),
            replicas,
        },
        (None, Some(path)) => preview::Change::Jobs {
            source: path.display().to_string(),
            jobs: preview::read_jobs_file(path)?,
        },
        (None, None) => preview::Change::AsIs,
    };
    let (_, mut observation) = observe(target, swarm).await?;
    Ok(preview::preview(
        &mut observation,
        &target.namespace,
        &change,
    )?)
}

/// `rollout-status` of a Swarm or a plan.
async fn rollout_status(
    target: &Target,
    object: &RolloutObject,
    timeout: std::time::Duration,
) -> Result<String, Error> {
    let print_line = |line: &str| print_now(&format!("{line}\n"));
    match swarm_rollout::resolve(target, object, "rollout-status").await? {
        RolloutObject::Swarm(swarm) => {
            swarm_rollout::rollout_status(target, &swarm, timeout, print_line).await
        }
        RolloutObject::Plan(plan) | RolloutObject::Bare(plan) => {
            plan_rollout::rollout_status(target, &plan, timeout, print_line).await
        }
    }
}
