//! The DeploymentPlan half of the ownership oracle (issue 23), run by the
//! same seeded schedule, the same faults and the same process ledger as the
//! Swarm jobs (`run_schedule` with `Mode::plans`).
//!
//! The pool's sidecars also run plan instances (`--exec-instance`): every
//! instance process appends `start`/`stop` lines to its own log, its "job"
//! being `<instance>@<deployment>@<image>` (what it actually runs, read from
//! its environment: `SHOAL_INSTANCE`, `SHOAL_DEPLOYMENT`, `SHOAL_APP_IMAGE`),
//! so the jobs' [`Ledger`] and [`Monitor`] record them unchanged.
//!
//! The plan is under `Manual` approval: nothing may change unless the schedule
//! approved it. The schedule approves with `kubectl shoal approve-op`
//! (several at once) or with `status.approveDeploymentWith`, and notes each
//! approval it gave (operation id, and when it wrote it). A recorder polls
//! the plan and keeps every operation it ever saw, and every deployment
//! record (revision → image). Afterwards [`plan_oracle`] checks:
//!
//! - every operation the status ever showed approved (`APPROVED`,
//!   `SUCCEEDED`, or carrying an approval record) is one the schedule
//!   approved; the stale, future, reused and wrong-hash approvals the
//!   schedule also writes must approve nothing;
//! - every instance process start (created, moved, updated, restarted) is
//!   named by an approved operation of that instance, member and deployment,
//!   approved before the process started, and runs exactly that deployment's
//!   content (the image of its record);
//! - every instance process stop is named by an approved operation of that
//!   instance taking it off that member (UPDATE, RELOCATE, STOP, RESTART,
//!   DELETE), or follows a fault on that member (pod deleted or scaled away)
//!   or one hitting every member (dropped watches, API errors: fencing);
//! - no instance ever has two running processes, except on the two members of
//!   an approved RELOCATE of it (make-before-break, also a blue-green copy),
//!   after that approval;
//! - no instance starts again on a member where the newest approved operation
//!   of it is a STOP or DELETE the controller put in force (its
//!   `approval.at`) more than 2 s before;
//! - what was approved is what is in force: an operation's content hash is
//!   the one the status showed when the schedule approved it, and a
//!   deployment record's content never changes;
//! - no UPDATE is opened while the user's pause holds (its
//!   `lastTransitionTime` inside a pause, 3 s slack at both ends).
//!
//! The plan must then come to rest (the schedule resumes, starts stopped
//! instances, rolls a halted rollout forward, approves what waits): every
//! entry installed and run by exactly one process, where and what it says.
//!
//! The hostile actions: a member writing instance reports on its own Lease
//! and on other members' (with a token bound to its pod), approvals stale,
//! future, reused or with a wrong hash, hand edits of `status.instances` by
//! another field manager, concurrent plugin calls (`approve-op`, `relocate`,
//! `stop`, `start`, `restart`), pauses during Rolling, Canary and BlueGreen
//! rollouts, scaling `spec.deployment.instances`, payload changes.
//!
//! Not checkable from outside, and the nearest check made instead: when the
//! controller put an approval in force (checked against when the schedule
//! wrote it, a lower bound); whether a stop came from fencing or from the
//! controller (a stop after a fault hitting its member, or every member,
//! within 30 s is put down to the fault); whether a blue-green green copy or
//! switch was opened under a pause (indistinguishable from relocations of
//! departed members and scale-down DELETEs, which go on under a pause: only
//! UPDATEs are checked); what a forged report made the controller believe
//! (only its effect on processes and approvals is checked).

use super::*;

use kube::api::{Patch, PatchParams};
use shoal_controller::api::deployment_plan::{
    DeploymentPlan, DeploymentPlanStatus, OperationStatus,
};

/// The plan.
pub const PLAN: &str = "web";
/// How long after a fault on a member a stop of its instances is the fault's.
const FAULT_WINDOW_NS: u128 = 30_000_000_000;
/// The rollout types, taken in turn by payload changes.
const ROLLOUTS: [&str; 3] = ["Rolling", "Canary", "BlueGreen"];

/// The script every instance process runs: one `start` line, one `stop` line
/// on SIGTERM, `<instance>@<deployment>@<image>` as the ledger's job.
pub fn instance_command(log: &Path) -> String {
    let script = log.with_extension("sh");
    let what = "$SHOAL_INSTANCE@$SHOAL_DEPLOYMENT@$SHOAL_APP_IMAGE";
    let body = format!(
        "trap 'echo \"${{EPOCHREALTIME/[.,]/}}000 stop {what} $SHOAL_MEMBER $$\" >> {log}; exit 0' TERM\n\
         echo \"${{EPOCHREALTIME/[.,]/}}000 start {what} $SHOAL_MEMBER $$\" >> {log}\n\
         sleep 100000 &\n\
         wait\n",
        log = log.display()
    );
    std::fs::write(&script, body).expect("write the instance script");
    format!("exec bash {}", script.display())
}

/// The plan as the user first applies it.
pub fn plan_yaml(instances: u32) -> String {
    format!(
        "apiVersion: shoal.dev/v1alpha1\nkind: DeploymentPlan\nmetadata:\n  name: {PLAN}\nspec:\n  swarm: {SWARM}\n\
         \x20 applications:\n  - name: app\n    resources: {{cores: 1}}\n  maxInstancesPerMember: 2\n\
         \x20 operationHistoryLimit: 1000\n  approval: {{policy: Manual}}\n  deployment:\n    instances: {instances}\n\
         \x20   payloads:\n    - application: app\n      coordinates: {{image: img-1}}\n"
    )
}

/// Annotates the pool so that its members can hold instances.
pub async fn describe_pool(cluster: &TestCluster) {
    kubectl(
        cluster,
        &[
            "annotate",
            "statefulset",
            POOL,
            "shoal.dev/capacity=cores=4",
            "shoal.dev/update-domain=zone-a",
            "--overwrite",
        ],
        None,
    )
    .await;
}

/// An instance process's ledger job, split: instance, deployment, image.
pub fn parse_job(job: &str) -> Option<(&str, u64, &str)> {
    let mut parts = job.split('@');
    let instance = parts.next()?;
    let deployment = parts.next()?.parse().ok()?;
    let image = parts.next()?;
    parts
        .next()
        .is_none()
        .then_some((instance, deployment, image))
}

/// What the recorder saw of the plan.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// Every operation, as last seen.
    pub ops: BTreeMap<String, OperationStatus>,
    /// Every operation, as first seen.
    pub first: BTreeMap<String, OperationStatus>,
    /// Deployment revision → the image of its record.
    pub images: BTreeMap<u64, String>,
    /// Every `status.approveDeploymentWith` value seen (for stale approvals).
    pub deployment_approvals: BTreeSet<String>,
    /// Successful reads.
    pub reads: usize,
    /// Deployment records seen to change content (they never may).
    pub records_changed: Vec<String>,
}

impl Seen {
    fn note(&mut self, status: &DeploymentPlanStatus) {
        self.reads += 1;
        for op in &status.operations {
            self.first
                .entry(op.id.clone())
                .or_insert_with(|| op.clone());
            // An operation never goes back from an approved state; keep the record that says most.
            let keep_old = self
                .ops
                .get(&op.id)
                .is_some_and(|old| approved(old) && !approved(op));
            if !keep_old {
                self.ops.insert(op.id.clone(), op.clone());
            }
        }
        for record in &status.deployments {
            if let Some(image) = record
                .payloads
                .iter()
                .find(|payload| payload.application == "app")
                .and_then(|payload| payload.coordinates.get("image"))
                && let Some(before) = self.images.insert(record.revision, image.clone())
                && before != *image
            {
                self.records_changed.push(format!(
                    "the record of deployment {} said {before}, now {image}",
                    record.revision
                ));
            }
        }
        if let Some(value) = &status.approve_deployment_with {
            self.deployment_approvals.insert(value.clone());
        }
    }
}

/// Whether the status shows `op` approved (now or before).
pub fn approved(op: &OperationStatus) -> bool {
    matches!(op.state.as_str(), "APPROVED" | "SUCCEEDED") || op.approval.is_some()
}

fn seen_lock(seen: &Mutex<Seen>) -> MutexGuard<'_, Seen> {
    seen.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Polls the plan (every 100 ms) into a [`Seen`] until dropped.
pub struct Recorder {
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    pub fn start(client: &Client, namespace: &str) -> Recorder {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let plans: Api<DeploymentPlan> = Api::namespaced(client.clone(), namespace);
        let task = tokio::spawn({
            let seen = seen.clone();
            async move {
                loop {
                    if let Ok(Some(plan)) = plans.get_opt(PLAN).await
                        && let Some(status) = &plan.status
                    {
                        seen_lock(&seen).note(status);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
        Recorder { seen, task }
    }

    pub fn seen(&self) -> Seen {
        seen_lock(&self.seen).clone()
    }

    /// Notes a status read elsewhere too.
    pub fn note(&self, status: &DeploymentPlanStatus) {
        seen_lock(&self.seen).note(status);
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the plan actions did, for the report.
#[derive(Debug, Default)]
pub struct PlanCounts {
    pub approve_ops: usize,
    pub approve_deployments: usize,
    pub concurrent_calls: usize,
    pub calls_refused: usize,
    pub stale_approvals: BTreeMap<&'static str, usize>,
    pub hand_edits: usize,
    pub forged_reports: usize,
    pub forged_reports_not_delivered: usize,
    pub pauses: BTreeMap<String, usize>,
    pub payloads: BTreeMap<String, usize>,
    pub scales: usize,
}

/// The plan side of a schedule: what it approved, the faults that excuse a
/// stop, and its counters.
pub struct PlanSchedule {
    pub kubeconfig: PathBuf,
    pub recorder: Recorder,
    /// Operation id → when the schedule first wrote an approval of it (ns).
    pub approvals: BTreeMap<String, u128>,
    /// Operation id → the content hash the status showed when the schedule approved it.
    pub approved_hashes: BTreeMap<String, String>,
    /// Faults: when, and the member hit (`None`: every member).
    pub disruptions: Vec<(u128, Option<String>)>,
    pub counts: PlanCounts,
    /// When the schedule's pauses held (ns): from the pause's return to the resume's call.
    pub pauses: Vec<(u128, Option<u128>)>,
    /// The image number of the latest payload.
    image: u32,
    /// The rollout type of the latest payload.
    rollout: &'static str,
    paused: bool,
}

impl PlanSchedule {
    pub fn new(cluster: &TestCluster) -> PlanSchedule {
        PlanSchedule {
            kubeconfig: cluster.kubeconfig_path().to_path_buf(),
            recorder: Recorder::start(&cluster.client(), cluster.namespace()),
            approvals: BTreeMap::new(),
            approved_hashes: BTreeMap::new(),
            disruptions: Vec::new(),
            counts: PlanCounts::default(),
            pauses: Vec::new(),
            image: 1,
            rollout: "Rolling",
            paused: false,
        }
    }

    async fn status(&self, cluster: &TestCluster) -> Option<DeploymentPlanStatus> {
        let plans: Api<DeploymentPlan> = Api::namespaced(cluster.client(), cluster.namespace());
        let status = plans.get_opt(PLAN).await.ok().flatten()?.status?;
        self.recorder.note(&status);
        Some(status)
    }

    async fn shoal(&self, namespace: &str, args: &[&str]) -> Result<String, String> {
        shoal_sandbox::kubectl_shoal(&self.kubeconfig, namespace, args).await
    }

    /// `kubectl shoal approve-op` for each of `ids`, all at once; each noted
    /// as approved by the schedule from the moment before its call.
    async fn approve_ops(
        &mut self,
        namespace: &str,
        status: &DeploymentPlanStatus,
        ids: &[String],
    ) -> usize {
        self.note_approvals(status, ids, now_ns());
        let kubeconfig = &self.kubeconfig;
        let calls = ids.iter().map(|id| async move {
            shoal_sandbox::kubectl_shoal(kubeconfig, namespace, &["approve-op", PLAN, id]).await
        });
        let results = futures::future::join_all(calls).await;
        self.counts.approve_ops += ids.len();
        if ids.len() > 1 {
            self.counts.concurrent_calls += ids.len();
        }
        let refused = results.iter().filter(|result| result.is_err()).count();
        self.counts.calls_refused += refused;
        ids.len() - refused
    }

    /// Notes that the schedule approves `ids` from `at` on, with the content
    /// hash `status` shows for each.
    fn note_approvals(&mut self, status: &DeploymentPlanStatus, ids: &[String], at: u128) {
        for id in ids {
            self.approvals.entry(id.clone()).or_insert(at);
            if let Some(op) = status.operations.iter().find(|op| op.id == *id) {
                self.approved_hashes
                    .entry(id.clone())
                    .or_insert_with(|| op.hash.clone());
            }
        }
    }

    /// The user approves what waits: a few operations with `approve-op`
    /// (concurrently), or a whole revision with `approveDeploymentWith`.
    async fn approve(&mut self, cluster: &TestCluster, rng: &mut Rng) -> String {
        let Some(status) = self.status(cluster).await else {
            return "plan approve: no status".to_owned();
        };
        let waiting: Vec<&OperationStatus> = status
            .operations
            .iter()
            .filter(|op| op.state == "PENDING_APPROVAL")
            .collect();
        if waiting.is_empty() {
            // A user who paused and finds nothing to approve lets the rollout go on.
            if self.paused {
                return format!(
                    "plan approve: nothing waits; {}",
                    self.pause(cluster, false).await
                );
            }
            return "plan approve: nothing waits".to_owned();
        }
        if let Some(value) = status.approve_deployment_with.clone()
            && rng.below(4) == 0
        {
            let revision = status.latest_deployment;
            let at = now_ns();
            let covered: Vec<String> = waiting
                .iter()
                .filter(|op| op.deployment == revision)
                .map(|op| op.id.clone())
                .collect();
            self.note_approvals(&status, &covered, at);
            let annotation = format!("{}={value}", names::ANNOTATION_APPROVE);
            kubectl(
                cluster,
                &["annotate", "dplan", PLAN, &annotation, "--overwrite"],
                None,
            )
            .await;
            self.counts.approve_deployments += 1;
            return format!("plan approve deployment {revision} ({covered:?}) with {value}");
        }
        let mut ids: Vec<String> = waiting.iter().map(|op| op.id.clone()).collect();
        for index in (1..ids.len()).rev() {
            ids.swap(index, rng.below(index + 1));
        }
        if rng.below(2) == 0 {
            ids.truncate(1 + rng.below(ids.len().min(3)));
        }
        let done = self.approve_ops(cluster.namespace(), &status, &ids).await;
        format!("plan approve-op {ids:?} at once: {done} succeeded")
    }

    /// Concurrent `kubectl shoal relocate | stop | start | restart` calls
    /// (and an `approve-op` beside them when something waits).
    async fn requests(&mut self, cluster: &TestCluster, rng: &mut Rng) -> String {
        let Some(status) = self.status(cluster).await else {
            return "plan requests: no status".to_owned();
        };
        let instances: Vec<String> = status
            .instances
            .iter()
            .map(|entry| entry.name.clone())
            .collect();
        if instances.is_empty() {
            return "plan requests: no instance".to_owned();
        }
        let verbs = ["relocate", "stop", "start", "restart"];
        let requests: Vec<(String, String)> = (0..2 + rng.below(2))
            .map(|_| {
                (
                    verbs[rng.below(verbs.len())].to_owned(),
                    instances[rng.below(instances.len())].clone(),
                )
            })
            .collect();
        // Up to two waiting operations approved in the same breath: every call
        // writes the plan's annotations, each through its guarded write.
        let waiting: Vec<String> = status
            .operations
            .iter()
            .filter(|op| op.state == "PENDING_APPROVAL")
            .map(|op| op.id.clone())
            .take(2)
            .collect();
        self.note_approvals(&status, &waiting, now_ns());
        let mut calls: Vec<Vec<String>> = requests
            .iter()
            .map(|(verb, instance)| vec![verb.clone(), PLAN.to_owned(), instance.clone()])
            .collect();
        calls.extend(
            waiting
                .iter()
                .map(|id| vec!["approve-op".to_owned(), PLAN.to_owned(), id.clone()]),
        );
        let namespace = cluster.namespace();
        let kubeconfig = &self.kubeconfig;
        let results = futures::future::join_all(calls.iter().map(|args| async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            shoal_sandbox::kubectl_shoal(kubeconfig, namespace, &args).await
        }))
        .await;
        let refused = results.iter().filter(|result| result.is_err()).count();
        self.counts.concurrent_calls += calls.len();
        self.counts.calls_refused += refused;
        self.counts.approve_ops += waiting.len();
        format!("plan requests {requests:?} and approve-op {waiting:?} at once ({refused} refused)")
    }

    /// A new payload, rolled out by the next rollout type in turn; half the
    /// time paused right away (`kubectl shoal pause`), as a user holding it.
    async fn payload(&mut self, cluster: &TestCluster, rng: &mut Rng) -> String {
        self.image += 1;
        let index = self.counts.payloads.values().sum::<usize>() % ROLLOUTS.len();
        self.rollout = ROLLOUTS[index];
        let rollout = match self.rollout {
            "Canary" => format!(
                r#"{{"type":"Canary","canaryInstances":1,"pauseSeconds":{}}}"#,
                // No pause (the rest waits for approval), or one second.
                ["null", "1"][rng.below(2)]
            ),
            // A merge patch: the canary's fields must go, or the schema refuses the rollout.
            other => format!(r#"{{"type":"{other}","canaryInstances":null,"pauseSeconds":null}}"#),
        };
        let patch = format!(
            r#"{{"spec":{{"deployment":{{"rollout":{rollout},"payloads":[{{"application":"app","coordinates":{{"image":"img-{}"}}}}]}}}}}}"#,
            self.image
        );
        kubectl(
            cluster,
            &["patch", "dplan", PLAN, "--type", "merge", "-p", &patch],
            None,
        )
        .await;
        *self
            .counts
            .payloads
            .entry(self.rollout.to_owned())
            .or_default() += 1;
        let mut note = format!("plan payload img-{} by {}", self.image, self.rollout);
        // Every rollout type is paused at least once, then a quarter of the time.
        if !self.counts.pauses.contains_key(self.rollout) || rng.below(4) == 0 {
            tokio::time::sleep(rng.millis(0, 1500)).await;
            note.push_str(&format!("; {}", self.pause(cluster, true).await));
        }
        note
    }

    /// `kubectl shoal pause | resume`.
    async fn pause(&mut self, cluster: &TestCluster, pause: bool) -> String {
        let verb = if pause { "pause" } else { "resume" };
        if !pause {
            self.resumed();
        }
        let result = self.shoal(cluster.namespace(), &[verb, PLAN]).await;
        if result.is_ok() {
            self.paused = pause;
            if pause {
                if self.pauses.last().is_none_or(|(_, end)| end.is_some()) {
                    self.pauses.push((now_ns(), None));
                }
                *self
                    .counts
                    .pauses
                    .entry(self.rollout.to_owned())
                    .or_default() += 1;
            }
        }
        format!(
            "plan {verb} during a {} rollout: {}",
            self.rollout,
            if result.is_ok() { "done" } else { "failed" }
        )
    }

    /// Ends the open pause interval: from now on the plan may be resumed.
    fn resumed(&mut self) {
        let now = now_ns();
        for (_, end) in &mut self.pauses {
            end.get_or_insert(now);
        }
    }

    /// `spec.deployment.instances` to 1..=4.
    async fn scale(&mut self, cluster: &TestCluster, rng: &mut Rng) -> String {
        let instances = 1 + rng.below(4);
        let patch = format!(r#"{{"spec":{{"deployment":{{"instances":{instances}}}}}}}"#);
        kubectl(
            cluster,
            &["patch", "dplan", PLAN, "--type", "merge", "-p", &patch],
            None,
        )
        .await;
        self.counts.scales += 1;
        format!("plan scaled to {instances} instances")
    }

    /// An approval that must approve nothing: reused (an operation approved
    /// before), of a finished or failed operation, of a future operation or
    /// deployment number, with a wrong hash, or a stale deployment approval.
    async fn stale_approval(&mut self, cluster: &TestCluster, rng: &mut Rng) -> String {
        let Some(status) = self.status(cluster).await else {
            return "stale approval: no status".to_owned();
        };
        let seen = self.recorder.seen();
        let not_waiting: Vec<&OperationStatus> = status
            .operations
            .iter()
            .filter(|op| op.state != "PENDING_APPROVAL" && !op.approve_with.is_empty())
            .collect();
        let hash = status.operations.last().map_or_else(
            || format!("sha256:{}", "0".repeat(64)),
            |op| op.hash.clone(),
        );
        let kinds = [
            "reused",
            "future operation",
            "future deployment",
            "wrong hash",
            "stale deployment",
        ];
        // The drawn kind, or the next one that has something to base it on.
        let first = rng.below(kinds.len());
        let mut chosen = None;
        for offset in 0..kinds.len() {
            let kind = kinds[(first + offset) % kinds.len()];
            if let Some(value) = self.stale_value(kind, &status, &seen, &not_waiting, &hash, rng) {
                chosen = Some((kind, value));
                break;
            }
        }
        let Some((kind, value)) = chosen else {
            return "stale approval: nothing to base one on".to_owned();
        };
        let annotation = format!("{}={value}", names::ANNOTATION_APPROVE);
        kubectl(
            cluster,
            &["annotate", "dplan", PLAN, &annotation, "--overwrite"],
            None,
        )
        .await;
        *self.counts.stale_approvals.entry(kind).or_default() += 1;
        format!("stale approval ({kind}): {value}")
    }

    /// A `shoal.dev/approve` value of `kind` that must approve nothing, if
    /// the status gives something to base it on.
    fn stale_value(
        &self,
        kind: &str,
        status: &DeploymentPlanStatus,
        seen: &Seen,
        not_waiting: &[&OperationStatus],
        hash: &str,
        rng: &mut Rng,
    ) -> Option<String> {
        let any_op = status.operations.last();
        match kind {
            "reused" if !not_waiting.is_empty() => Some(
                not_waiting[rng.below(not_waiting.len())]
                    .approve_with
                    .clone(),
            ),
            "future operation" => any_op.map(|op| {
                let number = status.operation_counter + 1 + rng.below(5) as u64;
                let stem = op
                    .id
                    .rsplit_once('-')
                    .map_or(op.id.as_str(), |(stem, _)| stem);
                format!("{stem}-{number}/{}", op.hash)
            }),
            "future deployment" => Some(format!(
                "deployment-{}/{hash}",
                status.deployment_counter + 1 + rng.below(3) as u64
            )),
            "wrong hash" => status
                .operations
                .iter()
                .find(|op| op.state == "PENDING_APPROVAL")
                .map(|op| {
                    let mut wrong = op.hash.clone();
                    let last = if wrong.ends_with('0') { '1' } else { '0' };
                    wrong.pop();
                    wrong.push(last);
                    format!("{}/{wrong}", op.id)
                }),
            "stale deployment" => {
                let current = status.approve_deployment_with.clone().unwrap_or_default();
                let stale: Vec<&String> = seen
                    .deployment_approvals
                    .iter()
                    .filter(|value| **value != current)
                    .collect();
                (!stale.is_empty()).then(|| stale[rng.below(stale.len())].clone())
            }
            _ => None,
        }
    }

    /// A user with access to the status subresource rewrites
    /// `status.instances` under another field manager: an instance moved to
    /// another member, given a later deployment, or one made up.
    async fn hand_edit(&mut self, cluster: &TestCluster, rng: &mut Rng, replicas: u32) -> String {
        let Some(status) = self.status(cluster).await else {
            return "status hand edit: no status".to_owned();
        };
        let mut instances = status.instances.clone();
        let member = format!("{POOL}-{}", rng.below(replicas.max(1) as usize));
        let what = match (rng.below(3), instances.is_empty()) {
            (0, false) => {
                let index = rng.below(instances.len());
                instances[index].member = member.clone();
                instances[index].state = "installed".to_owned();
                format!("{} moved to {member}", instances[index].name)
            }
            (1, false) => {
                let index = rng.below(instances.len());
                instances[index].deployment = status.latest_deployment + 1;
                format!(
                    "{} given deployment {}",
                    instances[index].name, instances[index].deployment
                )
            }
            _ => {
                let mut made_up = instances.first().cloned().unwrap_or_else(|| {
                    serde_json::from_value(serde_json::json!({
                        "name": "", "member": "", "deployment": 1, "state": "installed"
                    }))
                    .expect("an instance entry")
                });
                made_up.name = format!("{PLAN}-9");
                made_up.member = member.clone();
                made_up.deployment = status.latest_deployment.max(1);
                made_up.state = "installed".to_owned();
                instances.push(made_up);
                format!("{PLAN}-9 made up on {member}")
            }
        };
        let patch = serde_json::json!({"status": {"instances": instances}}).to_string();
        let written = cluster
            .kubectl_with_stdin(
                &[
                    "patch",
                    "dplan",
                    PLAN,
                    "--subresource=status",
                    "--type=merge",
                    "--field-manager=oracle-hand-edit",
                    "-p",
                    &patch,
                ],
                None,
            )
            .await
            .expect("kubectl runs");
        if written.success() {
            self.counts.hand_edits += 1;
            format!("status hand edit: {what}")
        } else {
            format!(
                "status hand edit ({what}) not written: {}",
                written.stderr.trim()
            )
        }
    }

    /// A running member writes instance reports (`shoal.dev/instance-states`)
    /// on its own Lease or on another member's, with a token bound to its pod:
    /// states no operation gave (installed, removed, failed, installing) for
    /// instances it may not even hold, at the deployment in force or a later one.
    async fn forge_reports(
        &mut self,
        cluster: &TestCluster,
        members: &Members,
        rng: &mut Rng,
    ) -> String {
        let running: Vec<String> = members.running().into_keys().collect();
        if running.is_empty() {
            return "forged reports: no member".to_owned();
        }
        let Some(status) = self.status(cluster).await else {
            return "forged reports: no status".to_owned();
        };
        let forger = running[rng.below(running.len())].clone();
        let victim = if rng.below(2) == 0 {
            forger.clone()
        } else {
            running[rng.below(running.len())].clone()
        };
        let mut names: Vec<String> = status
            .instances
            .iter()
            .map(|entry| entry.name.clone())
            .collect();
        names.push(format!("{PLAN}-0"));
        let states = ["installed", "removed", "failed", "installing"];
        let mut reports = serde_json::Map::new();
        for _ in 0..1 + rng.below(2) {
            let name = names[rng.below(names.len())].clone();
            let state = states[rng.below(states.len())];
            let deployment = status.latest_deployment + rng.below(2) as u64;
            let mut report = serde_json::json!({"state": state, "deployment": deployment});
            if state == "failed" {
                report["code"] = "Forged".into();
                report["message"] = "written by another member".into();
            }
            reports.insert(name, report);
        }
        let value = serde_json::Value::Object(reports).to_string();
        let patch = serde_json::json!({"metadata": {"annotations": {
            names::ANNOTATION_INSTANCE_STATES: value,
        }}});
        let note = format!("forged reports: {forger} writes {victim}'s Lease {value}");
        let namespace = cluster.namespace().to_owned();
        for _ in 0..10 {
            let Ok(token) = cluster
                .service_account_token(&namespace, FORGER_ACCOUNT, Some(&forger))
                .await
            else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            let Ok(intruder) = cluster.client_with_token(&token).await else {
                continue;
            };
            let leases: Api<Lease> = Api::namespaced(intruder, &namespace);
            match leases
                .patch(
                    &names::member_lease(&victim),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => {
                    self.counts.forged_reports += 1;
                    return format!("{note}: written");
                }
                Err(kube::Error::Api(status)) if status.code == 403 => {
                    panic!("the forger lacks the grant the scenario needs: {status:?}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        self.counts.forged_reports_not_delivered += 1;
        format!("{note}: not delivered (API errors or the pod went)")
    }

    /// One plan action of the schedule.
    pub async fn step(
        &mut self,
        action: Action,
        cluster: &TestCluster,
        members: &Members,
        rng: &mut Rng,
        replicas: u32,
    ) -> String {
        match action {
            Action::PlanApprove => self.approve(cluster, rng).await,
            Action::PlanRequests => self.requests(cluster, rng).await,
            Action::PlanPayload => self.payload(cluster, rng).await,
            Action::PlanPause => {
                let pause = !self.paused;
                self.pause(cluster, pause).await
            }
            Action::PlanScale => self.scale(cluster, rng).await,
            Action::StaleApproval => self.stale_approval(cluster, rng).await,
            Action::StatusHandEdit => self.hand_edit(cluster, rng, replicas).await,
            Action::ForgeReports => self.forge_reports(cluster, members, rng).await,
            other => format!("{other:?} is not a plan action"),
        }
    }

    /// Notes a fault: on `member`, or on every member.
    pub fn disrupted(&mut self, member: Option<String>) {
        self.disruptions.push((now_ns(), member));
    }

    /// The first approval: the CREATEs of the plan's instances.
    pub async fn first_deployment(&mut self, cluster: &TestCluster, monitor: &Monitor) {
        kubectl(cluster, &["apply", "-f", "-"], Some(&plan_yaml(3))).await;
        self.settle(cluster, monitor, Duration::from_secs(120))
            .await
            .unwrap_or_else(|pending| panic!("the plan's first deployment: {pending}"));
    }

    /// The plan's instances, its last operations, the instance processes and
    /// the member Leases' reports: why the plan is not at rest.
    async fn explain(&self, cluster: &TestCluster, monitor: &Monitor) -> String {
        let mut lines = Vec::new();
        if let Some(status) = self.status(cluster).await {
            for entry in &status.instances {
                lines.push(format!(
                    "entry {} on {} deployment {} {} {:?}",
                    entry.name, entry.member, entry.deployment, entry.state, entry.error
                ));
            }
            for op in status.operations.iter().rev().take(12) {
                lines.push(format!(
                    "operation {} {:?}->{:?} {} {:?} {}",
                    op.id, op.from_member, op.to_member, op.state, op.reason, op.message
                ));
            }
            lines.push(format!(
                "rollout {:?}, unplaced {:?}, ignored reports {:?}",
                status.rollout, status.unplaced, status.ignored_reports.current
            ));
        }
        lines.push(format!("running {:?}", monitor.running()));
        let leases: Api<Lease> = Api::namespaced(cluster.client(), cluster.namespace());
        if let Ok(list) = leases.list(&ListParams::default()).await {
            for lease in list.items {
                lines.push(format!(
                    "lease {} holder {:?}: {:?}",
                    lease.name_any(),
                    lease
                        .spec
                        .as_ref()
                        .and_then(|spec| spec.holder_identity.clone()),
                    lease.annotations().get(names::ANNOTATION_INSTANCE_STATES)
                ));
            }
        }
        lines.join("\n")
    }

    /// Brings the plan to rest: resumes it, starts stopped instances, rolls a
    /// halted rollout forward with a new payload, approves whatever waits,
    /// until every placed instance runs once, where and what its entry says.
    pub async fn settle(
        &mut self,
        cluster: &TestCluster,
        monitor: &Monitor,
        limit: Duration,
    ) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        let namespace = cluster.namespace().to_owned();
        let mut started: BTreeMap<String, Instant> = BTreeMap::new();
        let mut rolled_forward = 0;
        // Since when nothing waited for approval and nothing came to rest.
        let mut quiet_since = Instant::now();
        loop {
            let pending = match self.status(cluster).await {
                None => "no status".to_owned(),
                Some(status) => {
                    let paused = status.rollout.as_ref().is_some_and(|r| r.phase == "Paused");
                    if self.paused || paused {
                        self.resumed();
                    }
                    if (self.paused || paused)
                        && self.shoal(&namespace, &["resume", PLAN]).await.is_ok()
                    {
                        self.paused = false;
                    }
                    for entry in status.instances.iter().filter(|e| e.state == "stopped") {
                        let due = started
                            .get(&entry.name)
                            .is_none_or(|at| at.elapsed() > Duration::from_secs(10));
                        if due {
                            started.insert(entry.name.clone(), Instant::now());
                            let _ = self.shoal(&namespace, &["start", PLAN, &entry.name]).await;
                        }
                    }
                    // A halted rollout, or one that waits for what cannot come (a
                    // blue-green rollout whose green copies fit nowhere once the pool
                    // shrank: the switch waits, as documented), is rolled forward by a
                    // new Rolling payload, as a user would; at most twice.
                    let halted = status.rollout.as_ref().is_some_and(|r| r.phase == "Halted");
                    let stuck = quiet_since.elapsed() > Duration::from_secs(20);
                    if (halted || stuck) && rolled_forward < 2 {
                        rolled_forward += 1;
                        quiet_since = Instant::now();
                        self.image += 1;
                        let patch = format!(
                            r#"{{"spec":{{"deployment":{{"rollout":{{"type":"Rolling","canaryInstances":null,"pauseSeconds":null}},"payloads":[{{"application":"app","coordinates":{{"image":"img-{}"}}}}]}}}}}}"#,
                            self.image
                        );
                        kubectl(
                            cluster,
                            &["patch", "dplan", PLAN, "--type", "merge", "-p", &patch],
                            None,
                        )
                        .await;
                    }
                    let waiting: Vec<String> = status
                        .operations
                        .iter()
                        .filter(|op| op.state == "PENDING_APPROVAL")
                        .map(|op| op.id.clone())
                        .collect();
                    if !waiting.is_empty() {
                        quiet_since = Instant::now();
                        self.approve_ops(&namespace, &status, &waiting).await;
                    }
                    at_rest(&status, &self.recorder.seen().images, monitor)
                }
            };
            if pending.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the plan did not come to rest within {limit:?}: {pending}\n{}",
                    self.explain(cluster, monitor).await
                ));
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

/// Empty when the plan is at rest: nothing open, and the instance processes
/// are exactly the entries of `status.instances` (instance, member,
/// deployment, that deployment's image); otherwise what is not.
fn at_rest(
    status: &DeploymentPlanStatus,
    images: &BTreeMap<u64, String>,
    monitor: &Monitor,
) -> String {
    let open: Vec<&str> = status
        .operations
        .iter()
        .filter(|op| {
            matches!(
                op.state.as_str(),
                "PENDING" | "PENDING_APPROVAL" | "APPROVED"
            )
        })
        .map(|op| op.id.as_str())
        .collect();
    if !open.is_empty() {
        return format!("open operations {open:?}");
    }
    let odd: Vec<String> = status
        .instances
        .iter()
        .filter(|entry| !matches!(entry.state.as_str(), "installed" | "failed"))
        .map(|entry| format!("{} {}", entry.name, entry.state))
        .collect();
    if !odd.is_empty() {
        return format!("entries not at rest {odd:?}");
    }
    let expected: BTreeSet<(String, String)> = status
        .instances
        .iter()
        .map(|entry| {
            let image = images.get(&entry.deployment).cloned().unwrap_or_default();
            (
                format!("{}@{}@{image}", entry.name, entry.deployment),
                entry.member.clone(),
            )
        })
        .collect();
    let running: Vec<(String, String)> = monitor.running();
    let running_set: BTreeSet<(String, String)> = running.iter().cloned().collect();
    if running.len() != running_set.len() || running_set != expected {
        return format!("running {running:?}, expected {expected:?}");
    }
    String::new()
}

/// What [`plan_oracle`] found.
#[derive(Debug, Default)]
pub struct PlanVerdict {
    /// Instance changes checked: process starts and stops (not deaths of killed sidecars).
    pub changes: usize,
    /// Operations the status showed approved, each checked against the schedule's approvals.
    pub approved_ops: usize,
    /// Overlaps of two copies inside an approved relocation.
    pub relocations_overlapping: usize,
    /// Stops put down to a fault rather than an operation.
    pub stops_by_faults: usize,
    pub violations: Vec<String>,
}

const STARTING: [&str; 4] = ["CREATE", "UPDATE", "RELOCATE", "RESTART"];
const STOPPING: [&str; 5] = ["UPDATE", "RELOCATE", "STOP", "RESTART", "DELETE"];

/// How long before a process start a STOP or DELETE must have been in force
/// (by the controller's clock, in seconds) to count as broken by the start.
const REVIVAL_SLACK_NS: u128 = 2_000_000_000;

/// The number an operation id ends in (`<type>-<instance>-r<deployment>-<number>`).
fn operation_number(id: &str) -> u64 {
    id.rsplit_once('-')
        .and_then(|(_, number)| number.parse().ok())
        .unwrap_or_default()
}

/// When the controller applied `op`'s approval (ns since the epoch).
fn in_force_at(op: &OperationStatus) -> Option<u128> {
    let at: k8s_openapi::jiff::Timestamp = op.approval.as_ref()?.at.parse().ok()?;
    u128::try_from(at.as_nanosecond()).ok()
}

fn names_member(op: &OperationStatus, member: &str) -> bool {
    op.from_member.as_deref() == Some(member) || op.to_member.as_deref() == Some(member)
}

/// The plan oracle over the instance processes' ledger `events`, the
/// operations the status showed (`ops`), the schedule's approvals (operation
/// id → when written), the deployment records' images, and the faults.
pub fn plan_oracle(
    mut events: Vec<Event>,
    ops: &BTreeMap<String, OperationStatus>,
    approvals: &BTreeMap<String, u128>,
    images: &BTreeMap<u64, String>,
    disruptions: &[(u128, Option<String>)],
) -> PlanVerdict {
    let mut verdict = PlanVerdict::default();
    for op in ops.values().filter(|op| approved(op)) {
        verdict.approved_ops += 1;
        if !approvals.contains_key(&op.id) {
            verdict.violations.push(format!(
                "{} {} of {} ({:?} -> {:?}, deployment {}) is {} (approval {:?}) but the schedule never approved it",
                op.id, op.type_, op.instance, op.from_member, op.to_member, op.deployment, op.state, op.approval
            ));
        }
    }
    // An approved operation, as the schedule approved it: (operation, when).
    let approved_ops: Vec<(&OperationStatus, u128)> = ops
        .values()
        .filter_map(|op| approvals.get(&op.id).map(|at| (op, *at)))
        .collect();
    events.sort();
    // Instance → running copies (member, pid, start).
    let mut running: BTreeMap<String, Vec<(String, u32, u128)>> = BTreeMap::new();
    for event in &events {
        let Some((instance, deployment, image)) = parse_job(&event.job) else {
            verdict
                .violations
                .push(format!("unreadable instance process {event:?}"));
            continue;
        };
        let member = event.member.as_str();
        if event.start {
            verdict.changes += 1;
            if images.get(&deployment).map(String::as_str) != Some(image) {
                verdict.violations.push(format!(
                    "{instance} started on {member} (pid {}) at {} running {image} as deployment {deployment}, whose record says {:?}",
                    event.pid, event.at, images.get(&deployment)
                ));
            }
            let named = approved_ops.iter().any(|(op, at)| {
                op.instance == instance
                    && op.deployment == deployment
                    && STARTING.contains(&op.type_.as_str())
                    && (op.to_member.as_deref() == Some(member)
                        || (op.type_ != "RELOCATE" && op.from_member.as_deref() == Some(member)))
                    && *at <= event.at
            });
            if !named {
                verdict.violations.push(format!(
                    "{instance} started on {member} (pid {}) at {} with deployment {deployment} ({image}): no operation approved before names it",
                    event.pid, event.at
                ));
            }
            // Not revived after a STOP or DELETE in force: the newest (by operation
            // number) approved operation of the instance on this member is not one that
            // the controller put in force more than REVIVAL_SLACK_NS before the start.
            let newest = approved_ops
                .iter()
                .filter(|(op, at)| {
                    op.instance == instance
                        && *at <= event.at
                        && names_member(op, member)
                        && (op.type_ != "RELOCATE" || op.to_member.as_deref() == Some(member))
                })
                .max_by_key(|(op, _)| operation_number(&op.id));
            if let Some((op, _)) = newest
                && matches!(op.type_.as_str(), "STOP" | "DELETE")
                && op.state != "FAILED"
                && in_force_at(op).is_some_and(|at| at + REVIVAL_SLACK_NS <= event.at)
            {
                verdict.violations.push(format!(
                    "{instance} started on {member} (pid {}) at {} after {} ({}) was put in force at {:?}",
                    event.pid, event.at, op.id, op.type_, op.approval
                ));
            }
            let copies = running.entry(instance.to_owned()).or_default();
            for (other, pid, since) in copies.iter() {
                if other == member {
                    verdict.violations.push(format!(
                        "{instance}: two processes on {member} (pid {pid} since {since}, pid {} from {})",
                        event.pid, event.at
                    ));
                    continue;
                }
                let relocating = approved_ops.iter().any(|(op, at)| {
                    op.instance == instance
                        && op.type_ == "RELOCATE"
                        && names_member(op, member)
                        && names_member(op, other)
                        && *at <= event.at
                });
                if relocating {
                    verdict.relocations_overlapping += 1;
                } else {
                    verdict.violations.push(format!(
                        "{instance} started on {member} (pid {}) at {} while it ran on {other} (pid {pid} since {since}), no approved relocation between them",
                        event.pid, event.at
                    ));
                }
            }
            copies.push((member.to_owned(), event.pid, event.at));
        } else {
            if let Some(copies) = running.get_mut(instance) {
                copies.retain(|(_, pid, _)| *pid != event.pid);
            }
            if event.seen_dead {
                // Killed with its sidecar (SIGKILL): a fault, not a change.
                continue;
            }
            verdict.changes += 1;
            let named = approved_ops.iter().any(|(op, at)| {
                op.instance == instance
                    && STOPPING.contains(&op.type_.as_str())
                    && names_member(op, member)
                    && *at <= event.at
            });
            if named {
                continue;
            }
            let fault = disruptions.iter().any(|(at, hit)| {
                *at <= event.at
                    && event.at <= at + FAULT_WINDOW_NS
                    && hit.as_deref().is_none_or(|hit| hit == member)
            });
            if fault {
                verdict.stops_by_faults += 1;
            } else {
                verdict.violations.push(format!(
                    "{instance} stopped on {member} (pid {}) at {}: no operation approved before takes it off {member}, and no fault hit {member}",
                    event.pid, event.at
                ));
            }
        }
    }
    verdict
}

/// How long a pause may take to hold (a pass under way when it was written)
/// and how coarse `lastTransitionTime` is, in ns.
const PAUSE_SLACK_NS: u128 = 3_000_000_000;

/// UPDATEs opened while the user's pause held (`spec.paused` holds every
/// rollout type): an operation first seen waiting whose `lastTransitionTime`
/// (its opening, in whole seconds) falls inside a pause, with slack on both
/// sides. Green copies and the switch of a blue-green rollout cannot be told
/// from outside from relocations of departed members and scale-down DELETEs,
/// which go on under a pause; they are not checked here.
fn opened_under_pause(
    first: &BTreeMap<String, OperationStatus>,
    pauses: &[(u128, Option<u128>)],
) -> Vec<String> {
    let mut found = Vec::new();
    for op in first.values() {
        if op.type_ != "UPDATE" || !matches!(op.state.as_str(), "PENDING" | "PENDING_APPROVAL") {
            continue;
        }
        let Some(opened) = op
            .last_transition_time
            .as_deref()
            .and_then(|at| at.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .and_then(|at| u128::try_from(at.as_nanosecond()).ok())
        else {
            continue;
        };
        for (from, to) in pauses {
            let held_from = from + PAUSE_SLACK_NS;
            let held_to = to.map_or(u128::MAX, |to| to.saturating_sub(PAUSE_SLACK_NS));
            if held_from <= opened && opened <= held_to {
                found.push(format!(
                    "{} ({} of {}, deployment {}) was opened at {:?} while the plan was paused (from {from} to {to:?})",
                    op.id, op.type_, op.instance, op.deployment, op.last_transition_time
                ));
            }
        }
    }
    found
}

/// Checks the instance ledger with [`plan_oracle`] and reports; panics on a
/// violation (with the schedule around it) or when the plan never came to rest.
pub fn report(
    plan: PlanSchedule,
    ledger: Ledger,
    rest: Result<(), String>,
    actions: &[(u128, String)],
    context: String,
) {
    assert!(
        ledger.problems.is_empty(),
        "the instance log is inconsistent: {:?}",
        ledger.problems
    );
    let seen = plan.recorder.seen();
    let starts = ledger.events.iter().filter(|event| event.start).count();
    let mut verdict = plan_oracle(
        ledger.events.clone(),
        &seen.ops,
        &plan.approvals,
        &seen.images,
        &plan.disruptions,
    );
    // What an approval named is what was put in force: the content hash did not change.
    for op in seen.ops.values() {
        if let Some(hash) = plan.approved_hashes.get(&op.id)
            && *hash != op.hash
        {
            verdict.violations.push(format!(
                "{} was approved with hash {hash}, the status now shows {}",
                op.id, op.hash
            ));
        }
    }
    verdict
        .violations
        .extend(seen.records_changed.iter().cloned());
    verdict
        .violations
        .extend(opened_under_pause(&seen.first, &plan.pauses));
    println!(
        "plan oracle ({context}): {} instance changes checked ({starts} process starts, {} stops put down to faults), \
         {} operations seen ({} approved, each one the schedule approved; {} approvals written by the schedule), \
         {} overlaps inside approved relocations, {} plan reads; {:?}; {} violations",
        verdict.changes,
        verdict.stops_by_faults,
        seen.ops.len(),
        verdict.approved_ops,
        plan.approvals.len(),
        verdict.relocations_overlapping,
        seen.reads,
        plan.counts,
        verdict.violations.len(),
    );
    if !verdict.violations.is_empty() {
        let first = verdict
            .violations
            .first()
            .and_then(|violation| violation.split_whitespace().next())
            .unwrap_or_default()
            .to_owned();
        let mut history: Vec<&Event> = ledger
            .events
            .iter()
            .filter(|event| parse_job(&event.job).is_some_and(|(instance, _, _)| instance == first))
            .collect();
        history.sort();
        let operations: Vec<String> = seen
            .ops
            .values()
            .filter(|op| op.instance == first)
            .map(|op| {
                format!(
                    "{} {} {:?}->{:?} d{} {} approved by the schedule at {:?}",
                    op.id,
                    op.type_,
                    op.from_member,
                    op.to_member,
                    op.deployment,
                    op.state,
                    plan.approvals.get(&op.id)
                )
            })
            .collect();
        panic!(
            "plan ownership violated ({context}): {} violations:\n{:#?}\n{first}'s processes: {history:#?}\n{first}'s operations: {operations:#?}\nschedule: {actions:#?}",
            verdict.violations.len(),
            verdict.violations
        );
    }
    if let Err(pending) = rest {
        panic!("{pending}\n({context}); no ownership violation; schedule: {actions:#?}");
    }
    assert!(verdict.changes > 0, "the schedule changed no instance");
}

// ---------------------------------------------------------------------------
// The plan oracle itself must be able to fail.

#[cfg(test)]
mod checks {
    use super::*;

    fn op(
        id: &str,
        type_: &str,
        instance: &str,
        from: Option<&str>,
        to: Option<&str>,
        deployment: u64,
    ) -> OperationStatus {
        serde_json::from_value(serde_json::json!({
            "id": id, "type": type_, "instance": instance, "fromMember": from, "toMember": to,
            "deployment": deployment, "state": "SUCCEEDED", "hash": "sha256:0",
        }))
        .expect("an operation")
    }

    fn ops(list: Vec<OperationStatus>) -> BTreeMap<String, OperationStatus> {
        list.into_iter().map(|op| (op.id.clone(), op)).collect()
    }

    fn images() -> BTreeMap<u64, String> {
        BTreeMap::from([(1, "img-1".to_owned()), (2, "img-2".to_owned())])
    }

    #[test]
    fn a_start_needs_an_operation_approved_before_it_for_that_member_and_deployment() {
        let ops = ops(vec![op(
            "CREATE-web-0-r1-1",
            "CREATE",
            "web-0",
            None,
            Some("pool-0"),
            1,
        )]);
        let approvals = BTreeMap::from([("CREATE-web-0-r1-1".to_owned(), 10)]);
        let fine = plan_oracle(
            vec![event(20, true, "web-0@1@img-1", "pool-0", 7)],
            &ops,
            &approvals,
            &images(),
            &[],
        );
        assert!(fine.violations.is_empty(), "{fine:?}");
        assert_eq!(fine.changes, 1);
        for (events, why) in [
            (vec![event(5, true, "web-0@1@img-1", "pool-0", 7)], "before"),
            (
                vec![event(20, true, "web-0@1@img-1", "pool-1", 7)],
                "member",
            ),
            (
                vec![event(20, true, "web-0@2@img-2", "pool-0", 7)],
                "deployment",
            ),
            (
                vec![event(20, true, "web-0@1@img-2", "pool-0", 7)],
                "content",
            ),
        ] {
            let found = plan_oracle(events, &ops, &approvals, &images(), &[]);
            assert!(!found.violations.is_empty(), "{why}: {found:?}");
        }
        let unapproved = plan_oracle(Vec::new(), &ops, &BTreeMap::new(), &images(), &[]);
        assert_eq!(unapproved.violations.len(), 1, "{unapproved:?}");
        // Stopped (in force at 1 s), then started again at 5 s without a RESTART.
        let mut stopped = op("STOP-web-0-r1-2", "STOP", "web-0", Some("pool-0"), None, 1);
        stopped.approval = Some(
            serde_json::from_value(serde_json::json!({
                "by": "user", "verified": false, "at": "1970-01-01T00:00:01Z"
            }))
            .expect("an approval record"),
        );
        let mut with_stop = ops.clone();
        with_stop.insert(stopped.id.clone(), stopped);
        let mut approvals = approvals.clone();
        approvals.insert("STOP-web-0-r1-2".to_owned(), 15);
        let revived = plan_oracle(
            vec![
                event(20, true, "web-0@1@img-1", "pool-0", 7),
                event(30, false, "web-0@1@img-1", "pool-0", 7),
                event(5_000_000_000, true, "web-0@1@img-1", "pool-0", 8),
            ],
            &with_stop,
            &approvals,
            &images(),
            &[],
        );
        assert_eq!(revived.violations.len(), 1, "{revived:?}");
    }

    #[test]
    fn an_update_opened_while_the_pause_held_is_reported() {
        let mut update = op(
            "UPDATE-web-0-r2-4",
            "UPDATE",
            "web-0",
            Some("pool-0"),
            None,
            2,
        );
        update.state = "PENDING_APPROVAL".to_owned();
        update.last_transition_time = Some("1970-01-01T00:00:10Z".to_owned());
        let first = ops(vec![update]);
        let second = 1_000_000_000;
        assert_eq!(
            opened_under_pause(&first, &[(5 * second, Some(20 * second))]).len(),
            1
        );
        assert_eq!(opened_under_pause(&first, &[(5 * second, None)]).len(), 1);
        // Within the slack of the pause's start or end: a pass under way.
        assert!(opened_under_pause(&first, &[(8 * second, None)]).is_empty());
        assert!(opened_under_pause(&first, &[(1, Some(12 * second))]).is_empty());
    }

    #[test]
    fn two_copies_only_inside_an_approved_relocation_and_stops_only_by_operations_or_faults() {
        let ops = ops(vec![
            op(
                "CREATE-web-0-r1-1",
                "CREATE",
                "web-0",
                None,
                Some("pool-0"),
                1,
            ),
            op(
                "CREATE-web-1-r1-2",
                "CREATE",
                "web-1",
                None,
                Some("pool-1"),
                1,
            ),
            op(
                "RELOCATE-web-0-r1-3",
                "RELOCATE",
                "web-0",
                Some("pool-0"),
                Some("pool-2"),
                1,
            ),
        ]);
        let mut approvals: BTreeMap<String, u128> = ops.keys().map(|id| (id.clone(), 10)).collect();
        let moved = vec![
            event(20, true, "web-0@1@img-1", "pool-0", 7),
            event(30, true, "web-0@1@img-1", "pool-2", 8),
            event(40, false, "web-0@1@img-1", "pool-0", 7),
        ];
        let fine = plan_oracle(moved.clone(), &ops, &approvals, &images(), &[]);
        assert!(fine.violations.is_empty(), "{fine:?}");
        assert_eq!(fine.relocations_overlapping, 1);
        approvals.remove("RELOCATE-web-0-r1-3");
        let found = plan_oracle(moved, &ops, &approvals, &images(), &[]);
        // Approved without the schedule, the new copy started without it and beside the
        // old one, and the old one stopped without it.
        assert_eq!(found.violations.len(), 4, "{found:?}");
        approvals.insert("RELOCATE-web-0-r1-3".to_owned(), 10);
        let twice = vec![
            event(20, true, "web-1@1@img-1", "pool-1", 7),
            event(30, true, "web-1@1@img-1", "pool-1", 8),
        ];
        let found = plan_oracle(twice, &ops, &approvals, &images(), &[]);
        assert_eq!(found.violations.len(), 1, "{found:?}");
        let stopped = vec![
            event(20, true, "web-1@1@img-1", "pool-1", 7),
            event(30, false, "web-1@1@img-1", "pool-1", 7),
        ];
        let found = plan_oracle(stopped.clone(), &ops, &approvals, &images(), &[]);
        assert_eq!(found.violations.len(), 1, "{found:?}");
        let faulted = plan_oracle(
            stopped,
            &ops,
            &approvals,
            &images(),
            &[(25, Some("pool-1".to_owned()))],
        );
        assert!(faulted.violations.is_empty(), "{faulted:?}");
        assert_eq!(faulted.stops_by_faults, 1);
    }
}
