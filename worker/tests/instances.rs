//! Plan instances on a member, with the real sidecar against the emulated API
//! server (or `SHOAL_TEST_KUBECONFIG`): processes per instance with their
//! coordinates in the environment, restarts only on change, stops on removal,
//! failures reported and not retried, and the `shoal.dev/instance-states`
//! annotation on the member Lease in its documented shape.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::*;
use shoal_core::slice::{InstanceApplication, SliceInstance};
use shoal_worker::{Settings, SliceView, Worker, slice_doc};

const LIMIT: Duration = Duration::from_secs(20);

fn settings(cluster: &Cluster, member: &str) -> Settings {
    let mut settings = short_lease_settings(cluster, member);
    settings.instance_settle = Duration::from_millis(300);
    settings
}

fn web(n: u32, deployment: u64, image: &str) -> SliceInstance {
    let coordinates = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect()
    };
    SliceInstance {
        name: format!("web-{n}"),
        plan: "web".into(),
        deployment,
        applications: vec![
            InstanceApplication {
                name: "nginx".into(),
                coordinates: coordinates(&[("image", image)]),
                ports: Vec::new(),
            },
            InstanceApplication {
                name: "php-fpm".into(),
                coordinates: coordinates(&[("config.path", "/etc/php 8.3")]),
                ports: Vec::new(),
            },
        ],
    }
}

fn with_instances(revision: u64, instances: Vec<SliceInstance>) -> SliceView {
    slice("pool-0", revision, &["stream:a"])
        .with_instances(instances)
        .expect("valid instances")
}

/// Every value the Lease annotation takes, in order, seen through a watch of
/// the Lease (real API semantics: one event per write).
struct StatesLog {
    values: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    leases_seen: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl StatesLog {
    fn start(cluster: &Cluster) -> StatesLog {
        use futures::StreamExt as _;
        use kube::runtime::{WatchStreamExt as _, watcher};
        let api: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
            kube::Api::namespaced(cluster.client(), cluster.namespace());
        let config = watcher::Config::default().fields("metadata.name=pool-0-member");
        let values = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let seen = values.clone();
        let leases_seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = leases_seen.clone();
        let task = tokio::spawn(async move {
            let mut leases = std::pin::pin!(watcher(api, config).applied_objects());
            while let Some(Ok(lease)) = leases.next().await {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let value = lease
                    .metadata
                    .annotations
                    .and_then(|annotations| annotations.get("shoal.dev/instance-states").cloned());
                let mut seen = seen.lock().unwrap();
                if let Some(value) = value
                    && seen.last() != Some(&value)
                {
                    seen.push(value);
                }
            }
        });
        StatesLog {
            values,
            leases_seen,
            task,
        }
    }

    /// Waits until the watch has seen the Lease: every later write is then seen too.
    async fn wait_for_lease(&self) {
        eventually("the Lease seen by the watch", LIMIT, || async {
            (self.leases_seen.load(std::sync::atomic::Ordering::SeqCst) > 0).then_some(())
        })
        .await;
    }

    fn values(&self) -> Vec<String> {
        self.values.lock().unwrap().clone()
    }
}

impl Drop for StatesLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The raw annotation and its parsed JSON, once present.
async fn instance_states(cluster: &Cluster) -> Option<(String, serde_json::Value)> {
    let lease = lease(&cluster.client(), cluster.namespace(), "pool-0").await?;
    let raw = lease
        .metadata
        .annotations?
        .get("shoal.dev/instance-states")?
        .clone();
    let parsed = serde_json::from_str(&raw).expect("the annotation is JSON");
    Some((raw, parsed))
}

/// Logs `start <instance> <deployment> <coordinates...> <member>` to `<dir>/<instance>`
/// and `stop <instance>` on SIGTERM, running until stopped.
fn logging_template(dir: &Path) -> String {
    format!(
        "log={}/{{instance}}; echo \"start $SHOAL_INSTANCE $SHOAL_PLAN $SHOAL_DEPLOYMENT \
         $SHOAL_NGINX_IMAGE|$SHOAL_PHP_FPM_CONFIG_PATH|$SHOAL_MEMBER\" >> \"$log\"; \
         trap 'echo stop $SHOAL_INSTANCE >> \"$log\"; exit 0' TERM; sleep 1000 & wait",
        dir.display()
    )
}

#[tokio::test]
async fn exec_instance_runs_one_process_per_instance_restarts_only_a_changed_one_and_stops_a_removed_one()
 {
    let cluster = Cluster::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut settings = settings(&cluster, "pool-0");
    settings.exec_instance = Some(logging_template(dir.path()));
    let states_log = StatesLog::start(&cluster);
    let worker = Worker::start(cluster.client(), settings).await.unwrap();
    states_log.wait_for_lease().await;
    let log = |name: &str| dir.path().join(name);

    let first = with_instances(1, vec![web(0, 4, "nginx:1.27"), web(1, 4, "nginx:1.27")]);
    write_slice(&cluster.client(), cluster.namespace(), &first).await;
    for name in ["web-0", "web-1"] {
        eventually("each instance's process", LIMIT, || async {
            (log_lines(&log(name))
                == [format!("start {name} web 4 nginx:1.27|/etc/php 8.3|pool-0")])
            .then_some(())
        })
        .await;
    }
    let (raw, _) = eventually("both instances installed on the Lease", LIMIT, || async {
        instance_states(&cluster).await.filter(|(_, states)| {
            states["web-0"]["state"] == "installed" && states["web-1"]["state"] == "installed"
        })
    })
    .await;
    assert_eq!(
        raw,
        r#"{"web-0":{"state":"installed","deployment":4},"web-1":{"state":"installed","deployment":4}}"#
    );
    wait_for_ack(&cluster, &first, LIMIT).await;

    // web-0 gets a new deployment with another image; web-1 is unchanged.
    let second = with_instances(2, vec![web(0, 5, "nginx:1.28"), web(1, 4, "nginx:1.27")]);
    write_slice(&cluster.client(), cluster.namespace(), &second).await;
    eventually(
        "web-0 restarted with its new coordinates",
        LIMIT,
        || async {
            (log_lines(&log("web-0"))
                == [
                    "start web-0 web 4 nginx:1.27|/etc/php 8.3|pool-0",
                    "stop web-0",
                    "start web-0 web 5 nginx:1.28|/etc/php 8.3|pool-0",
                ])
            .then_some(())
        },
    )
    .await;
    eventually("web-0 installed at deployment 5", LIMIT, || async {
        instance_states(&cluster).await.filter(|(_, states)| {
            states["web-0"]["state"] == "installed" && states["web-0"]["deployment"] == 5
        })
    })
    .await;
    assert_eq!(
        log_lines(&log("web-1")),
        ["start web-1 web 4 nginx:1.27|/etc/php 8.3|pool-0"],
        "an unchanged instance keeps its process"
    );

    // web-1 is taken away: its process stops and it leaves the report.
    let third = with_instances(3, vec![web(0, 5, "nginx:1.28")]);
    write_slice(&cluster.client(), cluster.namespace(), &third).await;
    wait_for_ack(&cluster, &third, LIMIT).await;
    // Acknowledged only once the removed process is gone.
    assert_eq!(
        log_lines(&log("web-1")).last().map(String::as_str),
        Some("stop web-1")
    );
    eventually(
        "web-1 dropped from the report after its removal",
        LIMIT,
        || async {
            instance_states(&cluster)
                .await
                .filter(|(raw, _)| raw == r#"{"web-0":{"state":"installed","deployment":5}}"#)
        },
    )
    .await;
    assert_eq!(log_lines(&log("web-0")).len(), 3, "web-0 was not touched");
    // The removal was reported once before the entry left.
    let values = states_log.values();
    let removed = r#""web-1":{"state":"removed","deployment":4}"#;
    assert_eq!(
        values
            .iter()
            .filter(|value| value.contains(removed))
            .count(),
        1,
        "{values:#?}"
    );
    assert!(
        values
            .iter()
            .rposition(|value| value.contains(removed))
            .is_some_and(|at| !values[at + 1..].iter().any(|value| value.contains("web-1"))),
        "{values:#?}"
    );

    worker.stop().await.unwrap();
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_failing_instance_is_reported_failed_with_its_code_and_is_not_restarted() {
    let cluster = Cluster::start().await;
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let mut settings = settings(&cluster, "pool-0");
    settings.exec_instance = Some(format!(
        "echo \"run $SHOAL_DEPLOYMENT\" >> {}; echo 'starting'; echo \"bad image $SHOAL_NGINX_IMAGE\" >&2; exit 3",
        runs.display()
    ));
    let worker = Worker::start(cluster.client(), settings).await.unwrap();

    let first = with_instances(1, vec![web(0, 4, "nginx:broken")]);
    write_slice(&cluster.client(), cluster.namespace(), &first).await;
    let (raw, _) = eventually("web-0 reported failed", LIMIT, || async {
        instance_states(&cluster)
            .await
            .filter(|(_, states)| states["web-0"]["state"] == "failed")
    })
    .await;
    assert_eq!(
        raw,
        r#"{"web-0":{"state":"failed","deployment":4,"code":"ExitCode3","message":"process exited with exit status: 3: bad image nginx:broken"}}"#
    );
    // The failure is what is in effect: the slice is still acknowledged.
    wait_for_ack(&cluster, &first, LIMIT).await;
    // Several restart backoffs' worth of time: still one run.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        log_lines(&runs),
        ["run 4"],
        "a failed instance is not restarted"
    );

    // A new deployment is a new attempt.
    let second = with_instances(2, vec![web(0, 5, "nginx:fixed")]);
    write_slice(&cluster.client(), cluster.namespace(), &second).await;
    eventually("the new deployment attempted once", LIMIT, || async {
        (log_lines(&runs) == ["run 4", "run 5"]).then_some(())
    })
    .await;
    eventually("deployment 5 reported failed", LIMIT, || async {
        instance_states(&cluster).await.filter(|(_, states)| {
            states["web-0"]["deployment"] == 5 && states["web-0"]["code"] == "ExitCode3"
        })
    })
    .await;

    worker.stop().await.unwrap();
    cluster.cleanup().await;
}

#[tokio::test]
async fn without_exec_instance_an_instance_is_delivered_pending_and_installed_once_acknowledged() {
    let cluster = Cluster::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("slice.yaml");
    let mut settings = settings(&cluster, "pool-0");
    settings.slice_file = Some(file.clone());
    let states_log = StatesLog::start(&cluster);
    let worker = Worker::start(cluster.client(), settings).await.unwrap();
    states_log.wait_for_lease().await;

    let first = with_instances(1, vec![web(0, 4, "nginx:1.27")]);
    write_slice(&cluster.client(), cluster.namespace(), &first).await;
    let expected = slice_doc::render(&first).unwrap();
    assert!(
        expected.contains("instances:\n- name: web-0\n"),
        "{expected}"
    );
    eventually("the slice file with the instance", LIMIT, || async {
        (std::fs::read_to_string(&file).ok().as_deref() == Some(expected.as_str())).then_some(())
    })
    .await;
    let served = get(worker.http_addr(), "/v1/slice").await.json();
    assert_eq!(served["instances"][0]["name"], "web-0");
    assert_eq!(
        served["instances"][0]["applications"][0]["coordinates"]["image"],
        "nginx:1.27"
    );
    eventually(
        "web-0 pending until the application confirms",
        LIMIT,
        || async {
            instance_states(&cluster)
                .await
                .filter(|(raw, _)| raw == r#"{"web-0":{"state":"pending","deployment":4}}"#)
        },
    )
    .await;

    worker.ack(first.ack_target()).expect("the delivered slice");
    eventually("web-0 installed once acknowledged", LIMIT, || async {
        instance_states(&cluster)
            .await
            .filter(|(raw, _)| raw == r#"{"web-0":{"state":"installed","deployment":4}}"#)
    })
    .await;

    let second = with_instances(2, Vec::new());
    write_slice(&cluster.client(), cluster.namespace(), &second).await;
    eventually(
        "web-0 removing until the application confirms",
        LIMIT,
        || async {
            instance_states(&cluster)
                .await
                .filter(|(raw, _)| raw == r#"{"web-0":{"state":"removing","deployment":4}}"#)
        },
    )
    .await;
    let mut slices = worker.slices();
    slices
        .wait_for(|delivered| delivered.slice.as_ref().is_some_and(|s| s.revision == 2))
        .await;
    worker
        .ack(second.ack_target())
        .expect("the delivered slice");
    eventually("web-0 reported removed, then dropped", LIMIT, || async {
        instance_states(&cluster)
            .await
            .filter(|(raw, _)| raw == "{}")
    })
    .await;
    // Every state in order, each written once; `removed` exactly once.
    eventually("the watch caught up", LIMIT, || async {
        (states_log.values().last().map(String::as_str) == Some("{}")).then_some(())
    })
    .await;
    assert_eq!(
        states_log.values(),
        [
            r#"{"web-0":{"state":"pending","deployment":4}}"#,
            r#"{"web-0":{"state":"installed","deployment":4}}"#,
            r#"{"web-0":{"state":"removing","deployment":4}}"#,
            r#"{"web-0":{"state":"removed","deployment":4}}"#,
            "{}",
        ]
    );

    worker.stop().await.unwrap();
    cluster.cleanup().await;
}

#[tokio::test]
async fn exec_instance_hands_the_instance_its_ports_and_restarts_it_when_they_change() {
    use shoal_core::deploy::Port;
    let cluster = Cluster::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ports");
    let mut settings = settings(&cluster, "pool-0");
    settings.exec_instance = Some(format!(
        "echo \"$SHOAL_INSTANCE $SHOAL_PORTS\" >> {}; sleep 1000 & wait",
        log.display()
    ));
    let worker = Worker::start(cluster.client(), settings).await.unwrap();
    let with_ports = |ports: Vec<Port>| {
        let mut instance = web(0, 4, "nginx:1.27");
        instance.applications[0].ports = ports;
        instance
    };

    let first = with_instances(1, vec![with_ports(vec![Port::tcp(80), Port::udp(53)])]);
    write_slice(&cluster.client(), cluster.namespace(), &first).await;
    eventually("the process sees its ports", LIMIT, || async {
        (log_lines(&log) == ["web-0 TCP/80,UDP/53"]).then_some(())
    })
    .await;
    wait_for_ack(&cluster, &first, LIMIT).await;

    // Same deployment, another port: the slice's hash changes and the process restarts.
    let second = with_instances(1, vec![with_ports(vec![Port::tcp(8080)])]);
    assert_ne!(first.hash, second.hash);
    write_slice(&cluster.client(), cluster.namespace(), &second).await;
    eventually("the process restarted with the new port", LIMIT, || async {
        (log_lines(&log) == ["web-0 TCP/80,UDP/53", "web-0 TCP/8080"]).then_some(())
    })
    .await;
    wait_for_ack(&cluster, &second, LIMIT).await;

    worker.stop().await.unwrap();
    cluster.cleanup().await;
}
