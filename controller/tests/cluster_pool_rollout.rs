//! Restart policy across three pools: the pods a revision restarts go one pool
//! at a time in `rollout.poolOrder`, a pause (`kubectl shoal pause swarm/...`)
//! holds the rollout, resume finishes it, and a pod that never becomes Ready
//! halts it before the next pool until the user retries. Pools `a`, `b`, `c`
//! of two pods each; one pool's pods carry a readiness gate, so the test
//! decides when its restarted pods become Ready (on a real cluster too).

use crate::common;
use crate::plugin_common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use shoal_core::names::ANNOTATION_RETRY_ROLLOUT;

use common::{Env, all_jobs, eventually, job_keys, swarm_yaml};
use plugin_common::{shoal, shoal_ok};
use shoal_controller::api::swarm::SwarmRolloutStatus;

const WAIT: Duration = Duration::from_secs(90);
const POOLS: [&str; 3] = ["a", "b", "c"];

/// What the pods did, as a watch saw it in order.
#[derive(Default)]
struct Timeline {
    /// Pod name → (uid, Ready and not terminating).
    pods: BTreeMap<String, (String, bool)>,
    /// The pool of each restart (a pod name seen again with a new uid), in order.
    restarts: Vec<String>,
    /// Every pod name with the number of times it was restarted.
    restarted: BTreeMap<String, usize>,
    /// Moments two pools had a pod down together, once armed.
    overlaps: Vec<String>,
    /// Whether the initial start-up is over.
    armed: bool,
}

impl Timeline {
    fn see(&mut self, pod: &Pod, gone: bool) {
        let name = pod.name_any();
        let uid = pod.uid().unwrap_or_default();
        let ready = !gone
            && pod.metadata.deletion_timestamp.is_none()
            && shoal_emulator::sim::is_running_and_ready(pod);
        if gone {
            self.pods.remove(&name);
        } else {
            let previous = self.pods.insert(name.clone(), (uid.clone(), ready));
            if self.armed && previous.is_none_or(|(old, _)| old != uid) {
                self.restarts.push(pool_of(&name));
                *self.restarted.entry(name.clone()).or_default() += 1;
            }
        }
        if self.armed {
            let down: Vec<&str> = POOLS
                .into_iter()
                .filter(|pool| {
                    (0..2).any(|ordinal| {
                        self.pods
                            .get(&format!("{pool}-{ordinal}"))
                            .is_none_or(|(_, ready)| !ready)
                    })
                })
                .collect();
            if down.len() > 1 {
                self.overlaps
                    .push(format!("pools {down:?} down together at {name}"));
            }
        }
    }

    fn all_ready(&self) -> bool {
        self.pods.len() == 6 && self.pods.values().all(|(_, ready)| *ready)
    }

    /// The pools in the order their restarts came, repeats folded.
    fn pools_in_turn(&self) -> Vec<String> {
        let mut turns: Vec<String> = Vec::new();
        for pool in &self.restarts {
            if turns.last() != Some(pool) {
                turns.push(pool.clone());
            }
        }
        turns
    }
}

fn pool_of(pod: &str) -> String {
    pod.rsplit_once('-').map_or("", |(pool, _)| pool).to_owned()
}

fn watch_pods(env: &Env) -> Arc<Mutex<Timeline>> {
    let timeline: Arc<Mutex<Timeline>> = Arc::default();
    let api: Api<Pod> = Api::namespaced(env.client.clone(), &env.namespace);
    let sink = timeline.clone();
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default()).boxed();
        while let Some(Ok(event)) = events.next().await {
            let mut timeline = sink.lock().unwrap();
            match event {
                watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                    timeline.see(&pod, false)
                }
                watcher::Event::Delete(pod) => timeline.see(&pod, true),
                watcher::Event::Init | watcher::Event::InitDone => {}
            }
        }
    });
    timeline
}

/// Marks the gated pods of `pool` Ready whenever they run unready, while `open`.
fn readiness_gate(env: &Env, pool: &'static str, open: Arc<AtomicBool>) {
    let client = env.client.clone();
    let namespace = env.namespace.clone();
    tokio::spawn(async move {
        let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        loop {
            if open.load(Ordering::SeqCst) {
                for ordinal in 0..2 {
                    let name = format!("{pool}-{ordinal}");
                    let Ok(Some(pod)) = api.get_opt(&name).await else {
                        continue;
                    };
                    let running = pod
                        .status
                        .as_ref()
                        .and_then(|status| status.phase.as_deref())
                        == Some("Running");
                    if running && !shoal_emulator::sim::is_running_and_ready(&pod) {
                        let _ =
                            shoal_emulator::sim::set_pod_ready(&client, &namespace, &name, true)
                                .await;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
}

/// Three pools of two pods for Swarm demo, `gated`'s pods behind a readiness
/// gate opened by the returned flag (open now); revision 1 in force.
async fn three_pools(env: &Env, gated: &'static str, rollout: &str) -> Arc<AtomicBool> {
    let open = Arc::new(AtomicBool::new(true));
    readiness_gate(env, gated, open.clone());
    for pool in POOLS {
        env.statefulset(pool, Some("demo"), 2, pool == gated).await;
    }
    for pool in POOLS {
        env.ready_pool(pool, 2).await;
    }
    env.apply(&swarm_yaml("demo", &job_keys(12), rollout)).await;
    eventually("revision 1 in force", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        (status.current_revision == 1 && status.phase.as_deref() == Some("Ready")).then_some(())
    })
    .await;
    open
}

/// Every job replaced: each member gives all its jobs away and receives new ones.
fn other_jobs() -> Vec<String> {
    (0..12).map(|i| format!("other:{i:03}")).collect()
}

/// The restarts the `RevisionApproved` Event of `revision` announced.
async fn planned_restarts(env: &Env, revision: u64) -> usize {
    let events = env.event_messages().await;
    let line = events
        .lines()
        .find(|line| line.starts_with(&format!("RevisionApproved: applying revision {revision} ")))
        .unwrap_or_else(|| panic!("no RevisionApproved of revision {revision}: {events}"));
    line.trim_end()
        .strip_suffix(" restarts")
        .and_then(|rest| rest.rsplit(' ').next())
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("no restart count in {line}"))
}

async fn rollout(env: &Env) -> Option<SwarmRolloutStatus> {
    env.swarm("demo").await.status?.rollout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_restart_in_order_a_pause_holds_them_and_resume_finishes() {
    let env = Env::start().await;
    let controller = env.start_controller();
    // Order c, a, b. maxUnavailable 2 would let two pools go at once.
    let spec = "  reload: Restart\n  rollout:\n    maxUnavailable: 2\n    poolOrder: [c]\n";
    let gate_of_a = three_pools(&env, "a", spec).await;
    let timeline = watch_pods(&env);
    eventually("the watch sees every pod Ready", WAIT, || async {
        timeline.lock().unwrap().all_ready().then_some(())
    })
    .await;
    timeline.lock().unwrap().armed = true;
    // Pool a's restarted pods stay unready until the gate opens.
    gate_of_a.store(false, Ordering::SeqCst);
    env.apply(&swarm_yaml("demo", &other_jobs(), spec)).await;
    eventually(
        "pool a restarting, held by its unready pods",
        WAIT,
        || async {
            let rollout = rollout(&env).await?;
            let a = rollout.pools.iter().find(|pool| pool.name == "a")?;
            let restarted_a = timeline.lock().unwrap().restarts.contains(&"a".to_owned());
            (a.state == "Updating" && restarted_a).then_some(())
        },
    )
    .await;
    shoal_ok(&env, &["pause", "swarm/demo"]).await;
    gate_of_a.store(true, Ordering::SeqCst);
    eventually("the rollout paused, every pod Ready", WAIT, || async {
        let rollout = rollout(&env).await?;
        (rollout.phase == "Paused" && timeline.lock().unwrap().all_ready()).then_some(())
    })
    .await;
    let restarts_when_paused = timeline.lock().unwrap().restarts.clone();
    let blocked = shoal(&env, &["rollout-status", "swarm/demo", "--timeout", "2s"]).await;
    assert!(!blocked.success, "rollout-status returned 0 while paused");
    assert!(
        blocked.stdout.contains("paused") || blocked.stderr.contains("paused"),
        "{blocked:?}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        timeline.lock().unwrap().restarts,
        restarts_when_paused,
        "a pod was restarted while paused"
    );
    let status = shoal_ok(&env, &["status", "demo"]).await;
    assert!(status.contains("Paused"), "{status}");
    shoal_ok(&env, &["resume", "swarm/demo"]).await;
    let done = shoal_ok(&env, &["rollout-status", "swarm/demo", "--timeout", "60s"]).await;
    assert!(done.contains("c Done") && done.contains("b Done"), "{done}");
    assert_eq!(all_jobs(&env.slices("demo").await), other_jobs());
    // rollout-status is done only once every restarted pod is back.
    assert_eq!(
        rollout(&env).await.map(|rollout| rollout.phase).as_deref(),
        Some("Complete")
    );
    let planned = planned_restarts(&env, 2).await;
    {
        let timeline = timeline.lock().unwrap();
        assert!(timeline.overlaps.is_empty(), "{:?}", timeline.overlaps);
        // The release pass in order, then the pick-up pass (the pool released last
        // may still be the active pool when its grants come, and pick up at once).
        let turns = timeline.pools_in_turn();
        assert!(
            turns.starts_with(&["c".to_owned(), "a".to_owned(), "b".to_owned()])
                && turns.len() <= 6,
            "{turns:?}"
        );
        // Exactly the restarts the revision announced, each pod at most twice
        // (release, pick up).
        assert_eq!(timeline.restarts.len(), planned, "{:?}", timeline.restarted);
        for (pod, times) in &timeline.restarted {
            assert!(*times <= 2, "{pod} restarted {times} times");
        }
    }
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_never_ready_halts_the_rollout_before_the_next_pool_until_retried() {
    let env = Env::start().await;
    let controller = env.start_controller();
    let spec = "  reload: Restart\n  rollout:\n    maxUnavailable: 1\n    progressDeadline: 3s\n";
    let gate_of_b = three_pools(&env, "b", spec).await;
    let timeline = watch_pods(&env);
    eventually("the watch sees every pod Ready", WAIT, || async {
        timeline.lock().unwrap().all_ready().then_some(())
    })
    .await;
    timeline.lock().unwrap().armed = true;
    gate_of_b.store(false, Ordering::SeqCst);
    env.apply(&swarm_yaml("demo", &other_jobs(), spec)).await;
    let halted = eventually("the rollout halted in pool b", WAIT, || async {
        let rollout = rollout(&env).await?;
        (rollout.phase == "Halted").then_some(rollout)
    })
    .await;
    let halt = halted.halted.clone().expect("status.rollout.halted");
    assert_eq!(
        (halt.pool.as_str(), halt.pod.as_str()),
        ("b", "b-0"),
        "{halted:?}"
    );
    assert!(halt.cause.contains("is not Ready"), "{halt:?}");
    let condition = env
        .swarm("demo")
        .await
        .status
        .unwrap_or_default()
        .conditions;
    assert!(
        condition
            .iter()
            .any(|c| c.type_ == "RolloutHalted" && c.status == "True"),
        "{condition:?}"
    );
    // Pool c is not touched while halted.
    tokio::time::sleep(Duration::from_secs(3)).await;
    {
        let timeline = timeline.lock().unwrap();
        assert!(
            !timeline.restarts.contains(&"c".to_owned()),
            "pool c restarted during the halt: {:?}",
            timeline.restarts
        );
        assert!(timeline.overlaps.is_empty(), "{:?}", timeline.overlaps);
    }
    let failed = shoal(&env, &["rollout-status", "swarm/demo", "--timeout", "10s"]).await;
    assert!(!failed.success);
    assert!(failed.stderr.contains("halted in pool b"), "{failed:?}");
    let events = env.event_messages().await;
    let warnings: Vec<&str> = events
        .lines()
        .filter(|line| line.starts_with("PoolRestartFailed:"))
        .collect();
    assert_eq!(warnings.len(), 1, "{events}");
    assert!(
        warnings[0].contains("pool b") && warnings[0].contains("pod b-0"),
        "{}",
        warnings[0]
    );
    // The user fixes the pod and retries this revision.
    gate_of_b.store(true, Ordering::SeqCst);
    env.kubectl(&[
        "annotate",
        "swarm",
        "demo",
        &format!("{}={}", ANNOTATION_RETRY_ROLLOUT, halted.revision),
        "--overwrite",
    ])
    .await;
    // rollout-status fails at once on a halt: wait for the controller to see the retry.
    eventually("the retry seen", WAIT, || async {
        (rollout(&env).await?.phase != "Halted").then_some(())
    })
    .await;
    shoal_ok(&env, &["rollout-status", "swarm/demo", "--timeout", "60s"]).await;
    assert_eq!(all_jobs(&env.slices("demo").await), other_jobs());
    assert!(
        timeline.lock().unwrap().restarts.contains(&"c".to_owned()),
        "pool c restarted after the retry"
    );
    controller.stop().await;
    env.finish().await;
}
