//! The deployment-plan walkthrough of the README, as a user types it: the
//! sandbox's demo, plus `tests/sandbox/plans` (two GPU pools in two update
//! domains whose sidecars run plan instances, and the plan `web`), driven
//! through the real kubectl and the `kubectl shoal` plugin under Manual
//! approval: create, scale, a payload update as a canary then the rest,
//! `kubectl shoal relocate` (make-before-break), `stop`, `start`, `restart`,
//! and a member leaving. The instance processes are checked where they run: every
//! process whose output goes to a member's `<instance>.log` in the sandbox
//! directory, with its environment read from `/proc`.
//!
//! Emulator-only by design, like `sandbox.rs`: the sandbox is the emulated
//! cluster plus Shoal, with the sidecars as local processes.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use shoal_controller::api::deployment_plan::{
    DeploymentPlan, DeploymentPlanStatus, OperationStatus, RolloutType,
};
use shoal_sandbox::observe::{InstanceProcess, instance_processes};
use shoal_sandbox::{Sandbox, kubectl_shoal};

const WAIT: Duration = Duration::from_secs(90);

async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let started = Instant::now();
    loop {
        match check().await {
            Ok(value) => return value,
            Err(last) if started.elapsed() > WAIT => {
                panic!("timed out waiting for {what}; last: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// The walkthrough's user: kubectl and the plugin, in the sandbox's namespace.
struct User<'a> {
    sandbox: &'a Sandbox,
    kubeconfig: PathBuf,
}

impl User<'_> {
    async fn kubectl(&self, args: &[&str]) -> String {
        self.sandbox
            .kubectl()
            .run(args)
            .await
            .unwrap_or_else(|error| panic!("kubectl {args:?}: {error}"))
    }

    async fn shoal(&self, args: &[&str]) -> String {
        kubectl_shoal(&self.kubeconfig, self.sandbox.namespace(), args)
            .await
            .unwrap_or_else(|error| panic!("kubectl shoal {args:?}: {error}"))
    }

    /// `kubectl patch dplan web --type merge -p <patch>`.
    async fn patch_plan(&self, patch: &str) {
        self.kubectl(&["patch", "dplan", "web", "--type", "merge", "-p", patch])
            .await;
    }

    /// `kubectl get dplan web -o json`, its status.
    async fn plan(&self) -> DeploymentPlanStatus {
        let json = self.kubectl(&["get", "dplan", "web", "-o", "json"]).await;
        let plan: DeploymentPlan = serde_json::from_str(&json).expect("a DeploymentPlan");
        plan.status.unwrap_or_default()
    }

    /// Waits for exactly `count` operations of `type_` waiting for approval
    /// (listed by `kubectl shoal operations`); returns them.
    async fn waiting_for_approval(&self, type_: &str, count: usize) -> Vec<OperationStatus> {
        let waiting = eventually(&format!("{count} {type_} operations waiting"), || async {
            let status = self.plan().await;
            let waiting: Vec<OperationStatus> = status
                .operations
                .iter()
                .filter(|op| op.state == "PENDING_APPROVAL" && op.type_ == type_)
                .cloned()
                .collect();
            if waiting.len() == count {
                Ok(waiting)
            } else {
                Err(format!("{:#?}", status.operations))
            }
        })
        .await;
        let listed = self.shoal(&["operations", "web"]).await;
        for op in &waiting {
            assert!(listed.contains(&op.id), "{listed}");
        }
        waiting
    }

    /// Approves each operation with `kubectl shoal approve-op`.
    async fn approve(&self, operations: &[OperationStatus]) {
        for op in operations {
            self.shoal(&["approve-op", "web", &op.id]).await;
        }
    }

    /// Waits for `count` operations of `type_` waiting for approval, and
    /// approves each; returns them.
    async fn approve_waiting(&self, type_: &str, count: usize) -> Vec<OperationStatus> {
        let waiting = self.waiting_for_approval(type_, count).await;
        self.approve(&waiting).await;
        waiting
    }

    /// Waits until the plan is Ready with `instances` installed at
    /// `deployment`, and exactly one process per instance runs on its member
    /// with that deployment's coordinates; returns the processes.
    async fn running(
        &self,
        dir: &Path,
        instances: usize,
        deployment: u64,
        nginx: &str,
    ) -> Vec<InstanceProcess> {
        eventually(
            &format!("{instances} instances running deployment {deployment}"),
            || async {
                let status = self.plan().await;
                let ready = format!("{instances}/{instances}");
                if status.ready.as_deref() != Some(ready.as_str())
                    || status.phase.as_deref() != Some("Ready")
                {
                    return Err(format!("plan {:?} {:?}", status.ready, status.phase));
                }
                let placed: BTreeMap<String, String> = status
                    .instances
                    .iter()
                    .map(|entry| (entry.name.clone(), entry.member.clone()))
                    .collect();
                let processes = instance_processes(dir);
                let expected = processes.len() == instances
                    && processes.iter().all(|process| {
                        placed.get(&process.instance) == Some(&process.member)
                            && process.var("SHOAL_INSTANCE") == process.instance
                            && process.var("SHOAL_PLAN") == "web"
                            && process.var("SHOAL_MEMBER") == process.member
                            && process.var("SHOAL_DEPLOYMENT") == deployment.to_string()
                            && process.var("SHOAL_NGINX_IMAGE") == nginx
                            && process.var("SHOAL_EXPORTER_IMAGE")
                                == "nginx/nginx-prometheus-exporter:1.1"
                    });
                if expected && placed.len() == instances {
                    Ok(processes)
                } else {
                    Err(format!("placed {placed:?}, running {processes:#?}"))
                }
            },
        )
        .await
    }
}

/// The processes of one instance.
fn processes_of(dir: &Path, instance: &str) -> Vec<InstanceProcess> {
    instance_processes(dir)
        .into_iter()
        .filter(|process| process.instance == instance)
        .collect()
}

/// What an instance's processes on `member` printed.
fn log_of(dir: &Path, member: &str, instance: &str) -> String {
    std::fs::read_to_string(
        dir.join("members")
            .join(member)
            .join(format!("{instance}.log")),
    )
    .unwrap_or_default()
}

/// The row of the `kubectl shoal instances` table for `instance`, in cells.
fn instance_row(table: &str, instance: &str) -> Vec<String> {
    table
        .lines()
        .map(|line| {
            line.split(|c: char| c == '|' || c.is_whitespace())
                .filter(|cell| !cell.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .find(|words| words.first().map(String::as_str) == Some(instance))
        .unwrap_or_default()
}

/// The sandbox with the GPU pools of `plans/40-gpu-pools.yaml` beside the
/// demo's, once all eight members have converged.
async fn with_gpu_pools(dir: &Path) -> Sandbox {
    let plans = concat!(env!("CARGO_MANIFEST_DIR"), "/plans");
    Sandbox::start_with_pools(
        dir,
        Path::new(&format!("{plans}/40-gpu-pools.yaml")),
        8,
        WAIT,
    )
    .await
    .expect("the demo converges with eight members")
}

fn pool_of(member: &str) -> &str {
    member.rsplit_once('-').map_or(member, |(pool, _)| pool)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_walkthrough_runs_instances_with_their_coordinates_through_scale_canary_relocate_stop_restart_and_a_member_leaving()
 {
    if !Path::new("/proc/self/environ").exists() {
        eprintln!("skipped: reading instance processes needs /proc");
        return;
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().expect("temp dir");
    // The two GPU pools first; once their members run, the plan (placed earlier, its
    // operations would be withdrawn and placed again as members come up).
    let plans = concat!(env!("CARGO_MANIFEST_DIR"), "/plans");
    let sandbox = with_gpu_pools(dir.path()).await;
    let user = User {
        sandbox: &sandbox,
        kubeconfig: sandbox.kubeconfig_path(),
    };
    user.kubectl(&["apply", "-f", &format!("{plans}/50-deploymentplan.yaml")])
        .await;
    let creates = user.approve_waiting("CREATE", 3).await;
    let domains: Vec<&str> = creates
        .iter()
        .filter_map(|op| op.to_member.as_deref().map(pool_of))
        .collect();
    assert!(
        domains.contains(&"gpu-east") && domains.contains(&"gpu-west"),
        "spread over both update domains: {domains:?}"
    );
    let first = user.running(dir.path(), 3, 1, "nginx:1.25").await;
    for process in &first {
        let log = std::fs::read_to_string(
            dir.path()
                .join("members")
                .join(&process.member)
                .join(format!("{}.log", process.instance)),
        )
        .expect("the instance's log");
        assert!(
            log.contains(&format!(
                "{} on {}: deployment 1, nginx nginx:1.25",
                process.instance, process.member
            )),
            "{log}"
        );
    }
    let table = user.kubectl(&["get", "dplan", "web"]).await;
    assert!(table.contains("3/3") && table.contains("Ready"), "{table}");

    // Scale 3 -> 4: one CREATE.
    user.patch_plan(r#"{"spec":{"deployment":{"instances":4}}}"#)
        .await;
    user.approve_waiting("CREATE", 1).await;
    user.running(dir.path(), 4, 1, "nginx:1.25").await;

    // A new payload as a canary: deployment 2 goes to one instance first.
    user.patch_plan(
        r#"{"spec":{"deployment":{"rollout":{"type":"Canary","canaryInstances":1},"payloads":[
            {"application":"nginx","coordinates":{"image":"nginx:1.26"}},
            {"application":"exporter","coordinates":{"image":"nginx/nginx-prometheus-exporter:1.1"}}]}}}"#,
    )
    .await;
    let canary = user.approve_waiting("UPDATE", 1).await[0].instance.clone();
    // Once the canary runs the new coordinates, the other UPDATEs wait for approval
    // while their instances keep running deployment 1.
    let rest = user.waiting_for_approval("UPDATE", 3).await;
    assert!(rest.iter().all(|op| op.instance != canary), "{rest:#?}");
    let status = user.plan().await;
    let rollout = status.rollout.expect("status.rollout of a canary rollout");
    assert_eq!(rollout.canaries, std::slice::from_ref(&canary));
    let mixed = eventually("the canary alone on deployment 2", || async {
        let processes = instance_processes(dir.path());
        let on = |deployment: &str, image: &str| {
            processes
                .iter()
                .filter(|process| {
                    process.var("SHOAL_DEPLOYMENT") == deployment
                        && process.var("SHOAL_NGINX_IMAGE") == image
                })
                .map(|process| process.instance.clone())
                .collect::<Vec<_>>()
        };
        let (new, old) = (on("2", "nginx:1.26"), on("1", "nginx:1.25"));
        if processes.len() == 4 && new == [canary.clone()] && old.len() == 3 {
            Ok(processes)
        } else {
            Err(format!("{processes:#?}"))
        }
    })
    .await;
    let canary_process = mixed
        .iter()
        .find(|process| process.instance == canary)
        .expect("the canary runs");
    let log = log_of(dir.path(), &canary_process.member, &canary);
    assert!(
        log.contains(&format!(
            "{canary} on {}: deployment 2, nginx nginx:1.26",
            canary_process.member
        )),
        "{log}"
    );
    // The rest approved: every instance on deployment 2.
    user.approve(&rest).await;
    let updated = user.running(dir.path(), 4, 2, "nginx:1.26").await;
    let status = user.plan().await;
    assert_eq!(
        status
            .deployments
            .iter()
            .map(|record| record.revision)
            .collect::<Vec<_>>(),
        [1, 2]
    );

    // `kubectl shoal relocate`: make-before-break, as /proc shows it — the
    // instance never has no process, and the new one runs beside the old one
    // before the old one stops.
    let moving = updated
        .iter()
        .find(|process| process.member.ends_with("-0"))
        .expect("an instance on an ordinal-0 member")
        .clone();
    user.shoal(&["relocate", "web", &moving.instance]).await;
    let relocation = user.approve_waiting("RELOCATE", 1).await;
    let target = relocation[0].to_member.clone().expect("a target member");
    assert_ne!(target, moving.member);
    let started = Instant::now();
    let mut both_seen = false;
    loop {
        let members: Vec<String> = processes_of(dir.path(), &moving.instance)
            .into_iter()
            .map(|process| process.member)
            .collect();
        assert!(
            !members.is_empty(),
            "{} had no process during its relocation",
            moving.instance
        );
        both_seen |= members.contains(&moving.member) && members.contains(&target);
        if members == [target.clone()] {
            break;
        }
        assert!(
            started.elapsed() < WAIT,
            "relocation: running on {members:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        both_seen,
        "the new copy on {target} ran beside the old one on {}",
        moving.member
    );
    let relocated = user.running(dir.path(), 4, 2, "nginx:1.26").await;
    assert!(
        relocated
            .iter()
            .any(|process| process.instance == moving.instance && process.member == target)
    );
    let log = log_of(dir.path(), &target, &moving.instance);
    assert!(log.contains("deployment 2, nginx nginx:1.26"), "{log}");

    // `kubectl shoal stop`: the process goes, the placement stays.
    let stopping = relocated
        .iter()
        .find(|process| process.instance != moving.instance)
        .expect("another instance")
        .clone();
    user.shoal(&["stop", "web", &stopping.instance]).await;
    user.approve_waiting("STOP", 1).await;
    eventually(
        "the stopped instance's process gone, its placement kept",
        || async {
            let table = user.shoal(&["instances", "web"]).await;
            let row = instance_row(&table, &stopping.instance);
            let running = processes_of(dir.path(), &stopping.instance);
            if running.is_empty()
                && row.contains(&stopping.member)
                && row.iter().any(|word| word == "stopped")
            {
                Ok(())
            } else {
                Err(format!("{table}\nrunning {running:?}"))
            }
        },
    )
    .await;
    // `kubectl shoal start`: a new process on the same member.
    user.shoal(&["start", "web", &stopping.instance]).await;
    user.approve_waiting("RESTART", 1).await;
    let started_again = user.running(dir.path(), 4, 2, "nginx:1.26").await;
    let again = started_again
        .iter()
        .find(|process| process.instance == stopping.instance)
        .expect("the started instance runs");
    assert_eq!(again.member, stopping.member);
    assert_ne!(again.pid, stopping.pid, "a new process");
    // `kubectl shoal restart`: the running process is replaced by a new one.
    let restarting = started_again
        .iter()
        .find(|process| process.instance != stopping.instance)
        .expect("another instance")
        .clone();
    user.shoal(&["restart", "web", &restarting.instance]).await;
    user.approve_waiting("RESTART", 1).await;
    let restarted = eventually("a new process for the restarted instance", || async {
        let running = user.running(dir.path(), 4, 2, "nginx:1.26").await;
        let process = running
            .into_iter()
            .find(|process| process.instance == restarting.instance)
            .expect("the restarted instance runs");
        if process.pid != restarting.pid {
            Ok(process)
        } else {
            Err(format!("still pid {}", process.pid))
        }
    })
    .await;
    assert_eq!(restarted.member, restarting.member);

    // A member leaves mid-way: its pool scaled down; its instances are relocated.
    let current = instance_processes(dir.path());
    let leaving_member = current
        .iter()
        .map(|process| process.member.clone())
        .find(|member| member.ends_with("-1"))
        .expect("an instance on an ordinal-1 member");
    // Scaling its pool to one member takes every member but ordinal 0 away.
    let leaving_pool = pool_of(&leaving_member).to_owned();
    let gone = |member: &str| pool_of(member) == leaving_pool && !member.ends_with("-0");
    let mut leaving: Vec<String> = current
        .iter()
        .filter(|process| gone(&process.member))
        .map(|process| process.instance.clone())
        .collect();
    leaving.sort();
    user.kubectl(&[
        "scale",
        "statefulset",
        pool_of(&leaving_member),
        "--replicas=1",
    ])
    .await;
    let relocations = user.approve_waiting("RELOCATE", leaving.len()).await;
    let mut relocated_instances: Vec<String> =
        relocations.iter().map(|op| op.instance.clone()).collect();
    relocated_instances.sort();
    assert_eq!(relocated_instances, leaving);
    let after = user.running(dir.path(), 4, 2, "nginx:1.26").await;
    assert!(
        after.iter().all(|process| !gone(&process.member)),
        "{after:#?}"
    );

    // The ordered-rollouts tutorial continues from here: a domain order on the
    // canary rollout is refused, naming why; its patch as written is taken.
    let (refused, message) = match user
        .sandbox
        .kubectl()
        .run(&[
            "patch",
            "dplan",
            "web",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"deployment":{"rollout":{"domainOrder":["west","east"]}}}}"#,
        ])
        .await
    {
        Ok(out) => (false, out),
        Err(error) => (true, error.to_string()),
    };
    assert!(
        refused,
        "a domain order on a Canary rollout was taken: {message}"
    );
    assert!(
        message.contains("domainOrder applies to rollout type Rolling only"),
        "{message}"
    );
    user.patch_plan(
        r#"{"spec":{"deployment":{
  "payloads":[{"application":"nginx","coordinates":{"image":"nginx:1.27"}}],
  "rollout":{"type":"Rolling","canaryInstances":null,"pauseSeconds":null,"domainOrder":["west","east"]}}}}"#,
    )
    .await;
    let json = user.kubectl(&["get", "dplan", "web", "-o", "json"]).await;
    let plan: DeploymentPlan = serde_json::from_str(&json).expect("a DeploymentPlan");
    let rollout = plan.spec.deployment.rollout;
    assert_eq!(rollout.type_, RolloutType::Rolling);
    assert_eq!(rollout.domain_order, ["west", "east"]);
    assert_eq!(rollout.canary_instances, None);
    sandbox.shutdown().await.expect("the sandbox stops cleanly");
}

/// The plan's condition `type_` (status, reason, message), as `kubectl get` reads it.
/// Waits until the six members of the GPU pools are Ready and their sidecars hold
/// their member Leases.
async fn gpu_members_up(user: &User<'_>) {
    eventually("the six GPU members Ready with their Leases", || async {
        let json = user
            .kubectl(&[
                "get",
                "pods",
                "-l",
                "app in (gpu-east,gpu-west)",
                "-o",
                "json",
            ])
            .await;
        let pods: serde_json::Value = serde_json::from_str(&json).expect("a pod list");
        let ready: Vec<String> = pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|pod| {
                pod["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|condition| condition["type"] == "Ready" && condition["status"] == "True")
            })
            .filter_map(|pod| pod["metadata"]["name"].as_str().map(str::to_owned))
            .collect();
        let leases = user.kubectl(&["get", "leases", "-o", "name"]).await;
        let with_lease = ready
            .iter()
            .filter(|pod| leases.contains(&format!("lease.coordination.k8s.io/{pod}-member")))
            .count();
        if with_lease == 6 {
            Ok(())
        } else {
            Err(format!("{with_lease} of 6 Ready with a Lease: {ready:?}"))
        }
    })
    .await;
}

async fn plan_condition(user: &User<'_>, type_: &str) -> Option<(String, String, String)> {
    let status = user.plan().await;
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_readme_order_after_the_tour_a_plan_on_new_pools_says_which_swarm_revision_to_approve() {
    if !Path::new("/proc/self/environ").exists() {
        eprintln!("skipped: reading instance processes needs /proc");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let plans = concat!(env!("CARGO_MANIFEST_DIR"), "/plans");
    let mut sandbox = Sandbox::start(shoal_sandbox::Options::new(dir.path()))
        .await
        .expect("the sandbox starts");
    sandbox
        .wait_converged(WAIT)
        .await
        .expect("the demo converges");
    let user = User {
        sandbox: &sandbox,
        kubeconfig: sandbox.kubeconfig_path(),
    };
    // The tour's last step leaves the Swarm under Manual approval.
    user.kubectl(&[
        "patch",
        "swarm",
        "demo",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"approval":{"policy":"Manual"}}}"#,
    ])
    .await;
    // The plan walkthrough, as written: the GPU pools, then the plan.
    user.kubectl(&["apply", "-f", &format!("{plans}/40-gpu-pools.yaml")])
        .await;
    // As the walkthrough's reader waits for the new members before the plan: operations
    // placed while members are still joining are withdrawn as the rest arrive (their
    // placement changes), and an approval would find one withdrawn.
    gpu_members_up(&user).await;
    user.kubectl(&["apply", "-f", &format!("{plans}/50-deploymentplan.yaml")])
        .await;
    user.approve_waiting("CREATE", 3).await;
    // The new members wait in a Swarm revision: the plan names it and what to type.
    let (message, approve_with) = eventually("the plan waits for the Swarm", || async {
        let json = user.kubectl(&["get", "swarm", "demo", "-o", "json"]).await;
        let swarm: shoal_controller::api::swarm::Swarm =
            serde_json::from_str(&json).expect("a Swarm");
        let pending = swarm.status.and_then(|status| status.pending_revision);
        let condition = plan_condition(&user, "WaitingForSwarm").await;
        let phase = user.plan().await.phase;
        match (pending, condition) {
            (Some(pending), Some((status, _, message)))
                if status == "True" && phase.as_deref() == Some("WaitingForSwarm") =>
            {
                Ok((message, pending.approve_with))
            }
            other => Err(format!("{other:?} phase {phase:?}")),
        }
    })
    .await;
    assert!(
        message.contains("kubectl shoal approve demo") && message.contains(&approve_with),
        "{message}"
    );
    let table = user.kubectl(&["get", "dplan", "web"]).await;
    assert!(table.contains("WaitingForSwarm"), "{table}");
    // Approving the Swarm's revision as the message says lets the plan finish.
    user.shoal(&["approve", "demo"]).await;
    user.running(dir.path(), 3, 1, "nginx:1.25").await;
    let (status, reason, _) = plan_condition(&user, "WaitingForSwarm")
        .await
        .expect("the condition stays, False");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "MembersInForce")
    );
    // Two demo workers and six GPU members, as the walkthrough says to wait for.
    let swarms = user.kubectl(&["get", "swarm", "demo"]).await;
    assert!(swarms.contains("8/8"), "{swarms}");
    sandbox.shutdown().await.expect("the sandbox stops cleanly");
}

/// The MRDS README's walkthrough plan, as MRDS writes it.
const MRDS_README_PLAN: &str = include_str!("../plans/mrds-readme-plan.yaml");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mrds_readme_plan_imported_as_written_runs_its_instances_on_the_gpu_members() {
    if !Path::new("/proc/self/environ").exists() {
        eprintln!("skipped: reading instance processes needs /proc");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let sandbox = with_gpu_pools(dir.path()).await;
    let user = User {
        sandbox: &sandbox,
        kubeconfig: sandbox.kubeconfig_path(),
    };
    // Its namespace is MRDS's example's; the sandbox's Swarm is in the sandbox's.
    let file = dir.path().join("mrds-plan.yaml");
    std::fs::write(
        &file,
        MRDS_README_PLAN.replace("nginx-namespace", sandbox.namespace()),
    )
    .expect("the plan file is written");
    // The GPU pools offer cores=4 and memory=131072 (MiB, 128 GiB): the plan's
    // 64 GiB is read in the pools' unit, and one instance takes a member's four cores.
    user.shoal(&[
        "import-mrds",
        file.to_str().expect("a UTF-8 path"),
        "--swarm",
        "demo",
        "--instances",
        "2",
        "--memory-unit",
        "Mi",
        "--skip-persistent-volumes",
        "--apply",
    ])
    .await;
    let plan = "nginx-deployment-plan";
    let running = eventually("the imported plan's two instances running", || async {
        let json = user.kubectl(&["get", "dplan", plan, "-o", "json"]).await;
        let status = serde_json::from_str::<DeploymentPlan>(&json)
            .expect("a DeploymentPlan")
            .status
            .unwrap_or_default();
        let placed: BTreeMap<String, String> = status
            .instances
            .iter()
            .map(|entry| (entry.name.clone(), entry.member.clone()))
            .collect();
        let processes: Vec<InstanceProcess> = instance_processes(dir.path())
            .into_iter()
            .filter(|process| process.var("SHOAL_PLAN") == plan)
            .collect();
        let every_placed_runs = processes.len() == 2
            && processes
                .iter()
                .all(|process| placed.get(&process.instance) == Some(&process.member));
        if status.ready.as_deref() == Some("2/2") && every_placed_runs {
            Ok(processes)
        } else {
            Err(format!(
                "ready {:?} unplaced {:?}, placed {placed:?}, running {processes:#?}",
                status.ready, status.unplaced
            ))
        }
    })
    .await;
    // Only members offering the GPUs and CPU it asks for, one instance each
    // (its TCP/80 and UDP/53, and a member's four cores).
    let mut members: Vec<&str> = running
        .iter()
        .map(|process| process.member.as_str())
        .collect();
    members.sort();
    members.dedup();
    assert_eq!(members.len(), 2, "{running:#?}");
    assert!(
        members.iter().all(|member| member.starts_with("gpu-")),
        "{members:?}"
    );
    // Its Service reaches them, and `kubectl shoal members` shows what they hold.
    let slices = user
        .kubectl(&[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=nginx-service",
            "-o",
            "jsonpath={.items[*].endpoints[*].targetRef.name}",
        ])
        .await;
    let mut endpoints: Vec<&str> = slices.split_whitespace().collect();
    endpoints.sort();
    assert_eq!(endpoints, members, "{slices}");
    let report: serde_json::Value =
        serde_json::from_str(&user.shoal(&["members", "demo", "-o", "json"]).await)
            .expect("kubectl shoal members -o json");
    let mut holding: Vec<&str> = report["swarms"][0]["members"]
        .as_array()
        .expect("the Swarm's members")
        .iter()
        .filter(|row| {
            row["instances"]
                .as_array()
                .is_some_and(|instances| !instances.is_empty())
        })
        .filter_map(|row| row["name"].as_str())
        .collect();
    holding.sort();
    assert_eq!(holding, members, "{report:#}");
    sandbox.shutdown().await.expect("the sandbox stops cleanly");
}
