//! An ordered rollout of a plan over three pools (three update domains), as a
//! user drives it with the real kubectl and the `kubectl shoal` plugin, with
//! the instance processes checked where they run (exec-mode sidecars; see
//! `tests/sandbox/rollout`): the update goes domain by domain in the order set
//! (`west`, `north`, `east`: not byte order); a pause half-way holds it and
//! resume finishes it; a payload failing in the second domain stops it before
//! the third; a newer update supersedes the halted one (domains not started
//! get the newer one only); undo returns every domain to the first payload,
//! including a pool added after that revision; a direct edit of the plan's
//! placement record moves no process and is put back.
//!
//! Emulator-only by design, like `plans.rs`: the sandbox is the emulated
//! cluster plus Shoal, with the sidecars as local processes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use shoal_controller::api::deployment_plan::{DeploymentPlan, DeploymentPlanStatus};
use shoal_sandbox::observe::instance_processes;
use shoal_sandbox::{Sandbox, eventually, kubectl_shoal};

const WAIT: Duration = Duration::from_secs(60);

/// The rollout order the plan sets.
const ORDER: [&str; 3] = ["west", "north", "east"];

/// What runs in one update domain (each pool is one, with one member): the
/// deployment and image of its instance's process, and the process id.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Running {
    deployment: u64,
    image: String,
    pid: u32,
}

/// The instance process of each domain, by domain (the member's pool).
fn by_domain(dir: &Path) -> BTreeMap<String, Running> {
    instance_processes(dir)
        .into_iter()
        .filter(|process| process.var("SHOAL_PLAN") == "web")
        .map(|process| {
            let domain = process
                .member
                .rsplit_once('-')
                .map_or(process.member.as_str(), |(pool, _)| pool)
                .to_owned();
            let running = Running {
                deployment: process.var("SHOAL_DEPLOYMENT").parse().unwrap_or(0),
                image: process.var("SHOAL_WEB_IMAGE").to_owned(),
                pid: process.pid,
            };
            (domain, running)
        })
        .collect()
}

fn deployments(running: &BTreeMap<String, Running>) -> BTreeMap<&str, u64> {
    running
        .iter()
        .map(|(domain, running)| (domain.as_str(), running.deployment))
        .collect()
}

/// The placement record as (instance, member, deployment, state), sorted.
fn record(status: &DeploymentPlanStatus) -> Vec<(String, String, u64, String)> {
    let mut entries: Vec<_> = status
        .instances
        .iter()
        .map(|e| {
            (
                e.name.clone(),
                e.member.clone(),
                e.deployment,
                e.state.clone(),
            )
        })
        .collect();
    entries.sort();
    entries
}

struct User<'a> {
    sandbox: &'a Sandbox,
    kubeconfig: PathBuf,
    dir: &'a Path,
}

impl User<'_> {
    async fn kubectl(&self, args: &[&str]) -> String {
        self.sandbox
            .kubectl()
            .run(args)
            .await
            .unwrap_or_else(|error| panic!("kubectl {args:?}: {error}"))
    }

    async fn shoal(&self, args: &[&str]) -> Result<String, String> {
        kubectl_shoal(&self.kubeconfig, self.sandbox.namespace(), args).await
    }

    async fn plan(&self) -> DeploymentPlanStatus {
        let json = self.kubectl(&["get", "dplan", "web", "-o", "json"]).await;
        let plan: DeploymentPlan = serde_json::from_str(&json).expect("a DeploymentPlan");
        plan.status.unwrap_or_default()
    }

    /// A new payload for `web` (`kubectl patch`), with a change cause.
    async fn deploy(&self, coordinates: &str, cause: &str) {
        let cause = format!("kubernetes.io/change-cause={cause}");
        self.kubectl(&["annotate", "--overwrite", "dplan", "web", &cause])
            .await;
        let patch = format!(
            r#"{{"spec":{{"deployment":{{"payloads":[{{"application":"web","coordinates":{coordinates}}}]}}}}}}"#
        );
        self.kubectl(&["patch", "dplan", "web", "--type", "merge", "-p", &patch])
            .await;
    }

    /// Waits until `check` holds of the processes by domain; returns them.
    async fn processes_until(
        &self,
        what: &str,
        check: impl Fn(&BTreeMap<String, Running>) -> bool,
    ) -> BTreeMap<String, Running> {
        eventually(what, WAIT, || async {
            let running = by_domain(self.dir);
            if check(&running) {
                Ok(running)
            } else {
                Err(format!("{running:#?}"))
            }
        })
        .await
    }

    /// Waits until every domain in `domains` runs `deployment` with `image`,
    /// noting the order in which domains first ran it.
    async fn rolled_out(
        &self,
        domains: &[&str],
        deployment: u64,
        image: &str,
        order: &mut Vec<String>,
    ) -> BTreeMap<String, Running> {
        eventually(
            &format!("{domains:?} run deployment {deployment} ({image})"),
            WAIT,
            || {
                let running = by_domain(self.dir);
                for (domain, process) in &running {
                    if process.deployment == deployment
                        && process.image == image
                        && !order.contains(domain)
                    {
                        order.push(domain.clone());
                    }
                }
                let done = domains.iter().all(|domain| {
                    running
                        .get(*domain)
                        .is_some_and(|p| p.deployment == deployment && p.image == image)
                });
                async move {
                    if done {
                        Ok(running)
                    } else {
                        Err(format!("{running:#?}"))
                    }
                }
            },
        )
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_rolls_out_over_three_pools_in_the_set_order_pauses_halts_on_a_failure_is_superseded_and_undone()
 {
    if !Path::new("/proc/self/environ").exists() {
        eprintln!("skipped: reading instance processes needs /proc");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let manifests = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/rollout"));
    let sandbox =
        Sandbox::start_with_pools(dir.path(), &manifests.join("40-three-pools.yaml"), 5, WAIT)
            .await
            .expect("the demo converges with the three pools' members");
    let user = User {
        sandbox: &sandbox,
        kubeconfig: sandbox.kubeconfig_path(),
        dir: dir.path(),
    };
    user.kubectl(&[
        "apply",
        "-f",
        &manifests
            .join("50-deploymentplan.yaml")
            .display()
            .to_string(),
    ])
    .await;
    user.rolled_out(&ORDER, 1, "web:1", &mut Vec::new()).await;
    user.shoal(&["rollout-status", "web", "--timeout", "30s"])
        .await
        .expect("deployment 1 rolled out");

    // Deployment 2, paused as soon as the first domain is updating (before its member
    // has even restarted the instance): it finishes, the rest is held.
    user.deploy(r#"{"image":"web:2"}"#, "web 2").await;
    eventually("west updating to deployment 2", WAIT, || async {
        let rollout = user.plan().await.rollout;
        let updating = rollout.as_ref().is_some_and(|rollout| {
            rollout.deployment == 2
                && rollout
                    .domains
                    .iter()
                    .any(|d| d.name == "west" && d.state == "Updating")
        });
        if updating {
            Ok(())
        } else {
            Err(format!("{rollout:#?}"))
        }
    })
    .await;
    user.shoal(&["pause", "web"]).await.expect("paused");
    let mut order = Vec::new();
    user.rolled_out(&ORDER[..1], 2, "web:2", &mut order).await;
    eventually("the rollout is paused", WAIT, || async {
        let phase = user.plan().await.rollout.map(|rollout| rollout.phase);
        (phase.as_deref() == Some("Paused"))
            .then_some(())
            .ok_or(format!("{phase:?}"))
    })
    .await;
    let held = by_domain(dir.path());
    assert_eq!(
        deployments(&held),
        BTreeMap::from([("east", 1), ("north", 1), ("west", 2)]),
        "paused after the first domain: {held:#?}"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(by_domain(dir.path()), held, "nothing changes while paused");
    let blocked = user
        .shoal(&["rollout-status", "web", "--timeout", "1s"])
        .await;
    assert!(blocked.is_err(), "rollout-status returned 0 while paused");

    // Resume: the rest follows, in the order set.
    user.shoal(&["resume", "web"]).await.expect("resumed");
    let second = user.rolled_out(&ORDER, 2, "web:2", &mut order).await;
    assert_eq!(order, ORDER, "domains updated in the order set");

    // A pool added later, and a fourth instance on it once its member is up (a scale:
    // still deployment 2).
    user.kubectl(&[
        "apply",
        "-f",
        &manifests.join("45-fourth-pool.yaml").display().to_string(),
    ])
    .await;
    user.kubectl(&[
        "patch",
        "dplan",
        "web",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"deployment":{"instances":4}}}"#,
    ])
    .await;
    let mut all = ORDER.to_vec();
    all.push("south");
    let before_failure = user.rolled_out(&all, 2, "web:2", &mut Vec::new()).await;
    for domain in ORDER {
        assert_eq!(
            before_failure[domain].pid, second[domain].pid,
            "{domain} kept running"
        );
    }

    // Deployment 3 fails in north, the second domain: the rollout stops there.
    user.deploy(
        r#"{"image":"web:3","fail":"north"}"#,
        "web 3, failing in north",
    )
    .await;
    user.rolled_out(&ORDER[..1], 3, "web:3", &mut Vec::new())
        .await;
    let halted = eventually("the rollout halts in north", WAIT, || async {
        let status = user.plan().await;
        let halted = status.conditions.iter().any(|c| {
            c.type_ == "RolloutHalted" && c.status == "True" && c.message.contains("north")
        });
        if halted {
            Ok(status)
        } else {
            Err(format!("{:#?}", status.conditions))
        }
    })
    .await;
    let states: BTreeMap<String, String> = halted
        .rollout
        .expect("status.rollout")
        .domains
        .into_iter()
        .map(|d| (d.name, d.state))
        .collect();
    assert_eq!(states["north"], "Failed", "{states:?}");
    assert_eq!(states["east"], "Waiting", "{states:?}");
    let events = user
        .kubectl(&[
            "get",
            "events",
            "--field-selector",
            "reason=DomainFailed",
            "-o",
            "yaml",
        ])
        .await;
    assert!(
        events.contains("north") && events.contains("Warning"),
        "{events}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stopped = by_domain(dir.path());
    assert!(
        !stopped.contains_key("north"),
        "north's process failed: {stopped:#?}"
    );
    for domain in ["east", "south"] {
        assert_eq!(
            stopped[domain], before_failure[domain],
            "{domain} untouched"
        );
    }

    // Deployment 4 supersedes it: from the first domain again; east and south never run 3.
    user.deploy(r#"{"image":"web:4"}"#, "web 4").await;
    user.rolled_out(&all, 4, "web:4", &mut Vec::new()).await;
    for domain in ["east", "south"] {
        let log = std::fs::read_to_string(
            instance_processes(dir.path())
                .iter()
                .find(|p| p.member.starts_with(&format!("{domain}-")))
                .map(|p| {
                    dir.path()
                        .join("members")
                        .join(&p.member)
                        .join(format!("{}.log", p.instance))
                })
                .expect("a process in the domain"),
        )
        .unwrap_or_default();
        assert!(
            !log.contains("deployment 3"),
            "{domain} ran deployment 3: {log}"
        );
        assert!(log.contains("deployment 4, web web:4"), "{log}");
    }

    // Undo to revision 1: every domain, south too (added after it), runs web:1 again.
    let history = user.shoal(&["plan-history", "web"]).await.expect("history");
    assert!(history.contains("web 3, failing in north"), "{history}");
    user.shoal(&["plan-undo", "web", "--to-revision", "1"])
        .await
        .expect("undone");
    let undone = user
        .processes_until("every domain back on web:1 at deployment 5", |running| {
            all.iter().all(|domain| {
                running
                    .get(*domain)
                    .is_some_and(|p| p.deployment == 5 && p.image == "web:1")
            })
        })
        .await;
    assert_eq!(deployments(&undone).len(), 4, "{undone:#?}");
    user.shoal(&["rollout-status", "web", "--timeout", "30s"])
        .await
        .expect("the undo rolled out");

    // A direct edit of the placement record moves nothing, and is put back and reported.
    let placed = record(&user.plan().await);
    let edit = serde_json::json!({"status": {"instances": [{
        "name": placed[0].0, "member": placed[1].1, "deployment": 9, "state": "installed",
    }]}})
    .to_string();
    user.kubectl(&[
        "patch",
        "dplan",
        "web",
        "--subresource=status",
        "--type=merge",
        "--field-manager=intruder",
        "-p",
        &edit,
    ])
    .await;
    eventually("the placement record is put back", WAIT, || async {
        let now = record(&user.plan().await);
        if now == placed {
            Ok(())
        } else {
            Err(format!("{now:?}"))
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        by_domain(dir.path()),
        undone,
        "no process moved or restarted"
    );
    let events = user
        .kubectl(&[
            "get",
            "events",
            "--field-selector",
            "reason=PlacementRestored",
            "-o",
            "yaml",
        ])
        .await;
    assert!(
        events.contains("intruder") && events.contains(&placed[0].0),
        "{events}"
    );
    sandbox.shutdown().await.expect("the sandbox stops");
}
