//! `kubectl shoal status|slices|diff` and its errors: the real plugin binary
//! against the emulated cluster, its output compared with what the cluster holds.

use crate::common;
use crate::plugin_common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Env, eventually, job_keys, swarm_yaml};
use plugin_common::{
    moved, owners, resource_versions, shoal, shoal_json, shoal_ok, shoal_refused, shoal_with_env,
};
use shoal_controller::plugin::preview::DiffReport;
use shoal_controller::plugin::slices::SlicesReport;
use shoal_controller::plugin::status::StatusReport;

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_slices_after_convergence_show_what_the_cluster_holds() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 3).await;
    env.apply(&swarm_yaml("demo", &job_keys(14), "")).await;
    env.in_force("demo", 1, WAIT).await;
    eventually("3/3 members ready in the status", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        (status.ready.as_deref() == Some("3/3")).then_some(())
    })
    .await;
    let swarm_status = env.swarm("demo").await.status.expect("status written");
    let slices = env.slices("demo").await;

    // Sidecar Leases: worker-0 acknowledged its slice, worker-1 something else, worker-2 has none.
    let hash_of = |member: &str| {
        swarm_status
            .members
            .iter()
            .find(|status| status.name == member)
            .and_then(|status| status.slice_hash.clone())
            .expect("a target hash")
    };
    let renewed = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S.%6fZ");
    for (pod, hash) in [
        ("worker-0", hash_of("worker-0")),
        ("worker-1", "sha256:0000".to_owned()),
    ] {
        env.apply(&format!(
            "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: {pod}-member\n  labels:\n    shoal.dev/member: {pod}\n  annotations:\n    shoal.dev/acked-revision: \"1\"\n    shoal.dev/acked-hash: \"{hash}\"\nspec:\n  holderIdentity: {pod}\n  leaseDurationSeconds: 3600\n  renewTime: \"{renewed}\"\n"
        ))
        .await;
    }

    let report: StatusReport = shoal_json(&env, &["status", "demo"]).await;
    let acknowledged: Vec<(&str, &str)> = report
        .members
        .iter()
        .map(|member| (member.name.as_str(), member.acknowledged.as_str()))
        .collect();
    assert_eq!(
        acknowledged,
        [
            ("worker-0", "yes"),
            ("worker-1", "no"),
            ("worker-2", "no lease")
        ]
    );
    assert_eq!(report.swarm, "demo");
    assert_eq!(report.namespace, env.namespace);
    assert_eq!(report.current_revision, swarm_status.current_revision);
    assert_eq!(report.current_hash, swarm_status.current_hash);
    assert_eq!(report.phase.as_deref(), Some("Ready"));
    assert_eq!(report.jobs, 14);
    assert_eq!(report.pending, None);
    assert_eq!(report.pools.len(), 1);
    assert_eq!(
        (
            report.pools[0].name.as_str(),
            report.pools[0].replicas,
            report.pools[0].ready
        ),
        ("worker", 3, 3)
    );
    let members: BTreeMap<String, u64> = report
        .members
        .iter()
        .map(|member| (member.name.clone(), member.slice_size))
        .collect();
    let held: BTreeMap<String, u64> = slices
        .iter()
        .map(|(member, jobs)| (member.clone(), jobs.len() as u64))
        .collect();
    assert_eq!(members, held);
    assert!(
        report
            .members
            .iter()
            .all(|member| member.ready && member.slice_revision == Some(1)),
        "{:?}",
        report.members
    );
    assert_eq!(report.conditions, swarm_status.conditions);
    assert!(report.operations.is_empty(), "{:?}", report.operations);
    assert!(
        report
            .events
            .iter()
            .any(|event| event.reason == "RevisionApplied"),
        "{:?}",
        report.events
    );

    let table = shoal_ok(&env, &["status", "demo"]).await;
    for expected in [
        "Revision in force:",
        "| worker-0 ",
        "| worker-2 ",
        "No revision waits for approval",
        "No operations in flight",
        "RevisionApplied",
        "Total: 3",
    ] {
        assert!(table.contains(expected), "{expected:?} missing in\n{table}");
    }
    let yaml = shoal_ok(&env, &["status", "demo", "-o", "yaml"]).await;
    assert!(yaml.contains("currentRevision: 1"), "{yaml}");

    let listed: SlicesReport = shoal_json(&env, &["slices", "demo"]).await;
    let listed_sizes: BTreeMap<String, u64> = listed
        .slices
        .iter()
        .map(|slice| (slice.member.clone(), slice.jobs.unwrap_or_default() as u64))
        .collect();
    assert_eq!(listed_sizes, held);
    assert!(
        listed
            .slices
            .iter()
            .all(|slice| slice.target == "yes" && slice.error.is_none()),
        "{listed:?}"
    );
    assert_eq!(
        listed
            .slices
            .iter()
            .map(|slice| slice.acknowledged.as_str())
            .collect::<Vec<_>>(),
        ["yes", "no", "no lease"]
    );
    let one: SlicesReport = shoal_json(&env, &["slices", "demo", "worker-1"]).await;
    assert_eq!(one.slices.len(), 1);
    assert_eq!(one.slices[0].job_keys, slices["worker-1"]);
    let table = shoal_ok(&env, &["slices", "demo", "worker-1"]).await;
    for job in &slices["worker-1"] {
        assert!(
            table.contains(&format!("| {job} ")),
            "{job} missing in\n{table}"
        );
    }
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diff_of_a_scale_names_exactly_the_moves_the_controller_then_makes_and_writes_nothing() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 3).await;
    env.apply(&swarm_yaml("demo", &job_keys(20), "")).await;
    env.in_force("demo", 1, WAIT).await;
    eventually("3/3 members ready in the status", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        (status.ready.as_deref() == Some("3/3")).then_some(())
    })
    .await;
    // Nothing may write while the plugin runs, so that any change is the plugin's.
    controller.stop().await;
    let before_versions = resource_versions(&env).await;
    let before = owners(&env.slices("demo").await);

    let report: DiffReport = shoal_json(&env, &["diff", "demo", "--replicas", "5"]).await;
    let table = shoal_ok(&env, &["diff", "demo", "--replicas", "5"]).await;
    // The other read-only commands write nothing either.
    for args in [
        vec!["status", "demo"],
        vec!["history", "demo"],
        vec!["slices", "demo"],
        vec!["slices", "demo", "worker-0", "-o", "yaml"],
    ] {
        shoal_ok(&env, &args).await;
    }
    assert_eq!(resource_versions(&env).await, before_versions);
    assert_eq!(report.revision, Some(2));
    assert!(!report.needs_approval, "{}", report.decision);
    assert!(report.change.contains("from 3 to 5"), "{}", report.change);
    let summary = report.summary.clone().expect("a summary");
    assert!(!report.moves.is_empty(), "scaling 3 to 5 moves jobs");
    assert_eq!(summary.jobs_moved as usize, report.moves.len());
    assert!(summary.jobs_moved >= summary.lower_bound);
    assert!(report.created.is_empty() && report.deleted.is_empty());
    assert!(report.restarts.is_empty(), "HotReload restarts nothing");
    for moved in &report.moves {
        assert!(
            table.contains(&format!("| {} ", moved.job)),
            "{} missing in\n{table}",
            moved.job
        );
    }

    let controller = env.start_controller();
    env.kubectl(&["scale", "statefulset", "worker", "--replicas=5"])
        .await;
    env.in_force("demo", 2, WAIT).await;
    let after = owners(&env.slices("demo").await);
    let predicted: Vec<(String, String, String)> = report
        .moves
        .iter()
        .map(|moved| (moved.job.clone(), moved.from.clone(), moved.to.clone()))
        .collect();
    assert_eq!(predicted, moved(&before, &after));
    let sizes_after: BTreeMap<String, usize> = report
        .members
        .iter()
        .map(|member| (member.member.clone(), member.after))
        .collect();
    let held_after: BTreeMap<String, usize> = env
        .slices("demo")
        .await
        .into_iter()
        .map(|(member, jobs)| (member, jobs.len()))
        .collect();
    assert_eq!(sizes_after, held_after);
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_diff_with_restart_reload_lists_the_pods_that_restart_by_uid() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(8), "  reload: Restart\n"))
        .await;
    env.in_force("demo", 1, Duration::from_secs(60)).await;
    controller.stop().await;
    let uids = env.ready_pool("worker", 2).await;

    let jobs_file = tempfile::NamedTempFile::new().expect("a temporary file");
    let keys = job_keys(12);
    std::fs::write(
        jobs_file.path(),
        format!("jobs:\n- {}\n", keys.join("\n- ")),
    )
    .expect("write jobs file");
    let path = jobs_file.path().to_string_lossy().into_owned();
    let report: DiffReport = shoal_json(&env, &["diff", "demo", "--jobs-file", &path]).await;
    assert_eq!(report.created.len(), 4, "{report:?}");
    let summary = report.summary.clone().expect("a summary");
    let gaining: Vec<&str> = report
        .members
        .iter()
        .filter(|member| !member.gains.is_empty() || !member.loses.is_empty())
        .map(|member| member.member.as_str())
        .collect();
    assert!(!report.restarts.is_empty(), "{report:?}");
    assert_eq!(summary.restarts_needed as usize, report.restarts.len());
    assert_eq!(
        report
            .restarts
            .iter()
            .map(|restart| restart.pod.as_str())
            .collect::<Vec<_>>(),
        gaining
    );
    for restart in &report.restarts {
        assert_eq!(uids.get(&restart.pod), Some(&restart.uid));
    }
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_name_the_missing_object_and_say_what_to_do() {
    let env = Env::start().await;
    for args in [
        vec!["status", "nope"],
        vec!["diff", "nope", "--replicas", "2"],
        vec!["approve", "nope"],
        vec!["history", "nope"],
        vec!["undo", "nope"],
        vec!["slices", "nope"],
    ] {
        let run = shoal(&env, &args).await;
        assert!(!run.success, "{args:?} succeeded: {}", run.stdout);
        let expected = format!(
            "Swarm \"nope\" not found in namespace \"{}\"",
            env.namespace
        );
        assert!(run.stderr.contains(&expected), "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains("kubectl get swarms"),
            "{args:?}: {}",
            run.stderr
        );
    }

    // A Swarm that exists, before any controller looked at it.
    env.pool("worker", "demo", 1).await;
    env.apply(&swarm_yaml("demo", &job_keys(3), "")).await;
    let run = shoal(
        &env,
        &["diff", "demo", "--pool", "other", "--replicas", "2"],
    )
    .await;
    assert!(!run.success);
    assert!(
        run.stderr.contains("has no pool \"other\" (pools: worker)"),
        "{}",
        run.stderr
    );
    let run = shoal(&env, &["slices", "demo", "worker-7"]).await;
    assert!(!run.success);
    assert!(
        run.stderr.contains("has no member \"worker-7\""),
        "{}",
        run.stderr
    );
    let run = shoal(&env, &["approve", "demo"]).await;
    assert!(!run.success);
    assert!(
        run.stderr.contains("has no pending revision"),
        "{}",
        run.stderr
    );
    let run = shoal(&env, &["undo", "demo"]).await;
    assert!(!run.success);
    assert!(run.stderr.contains("nothing to undo"), "{}", run.stderr);
    let run = shoal(
        &env,
        &["diff", "demo", "--jobs-file", "/nonexistent/jobs.yaml"],
    )
    .await;
    assert!(!run.success);
    assert!(
        run.stderr
            .contains("cannot read jobs file /nonexistent/jobs.yaml"),
        "{}",
        run.stderr
    );

    // KUBECONFIG is honoured like kubectl honours it.
    let kubeconfig = env.kubeconfig_path().to_string_lossy().into_owned();
    let run = shoal_with_env(
        &["status", "demo", "-n", &env.namespace],
        &[("KUBECONFIG", &kubeconfig)],
    )
    .await;
    assert!(run.success, "{}", run.stderr);
    assert!(run.stdout.contains("No conditions yet"), "{}", run.stdout);
    // An API server that does not answer.
    let unreachable = tempfile::NamedTempFile::new().expect("a temporary file");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let dead = listener.local_addr().expect("its address");
    drop(listener);
    std::fs::write(
        unreachable.path(),
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://{dead}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n"
        ),
    )
    .expect("write kubeconfig");
    let path = unreachable.path().to_string_lossy().into_owned();
    let run = shoal_with_env(&["status", "demo", "--kubeconfig", &path], &[]).await;
    assert!(!run.success);
    assert!(
        run.stderr.contains("reading Swarm default/demo")
            && run
                .stderr
                .contains("is the API server in your kubeconfig reachable?"),
        "{}",
        run.stderr
    );
    let run = shoal_with_env(
        &["status", "demo", "--kubeconfig", "/nonexistent/kubeconfig"],
        &[],
    )
    .await;
    assert!(!run.success);
    assert!(
        run.stderr
            .contains("cannot use the kubeconfig /nonexistent/kubeconfig"),
        "{}",
        run.stderr
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_runs_the_plugin_found_on_its_path() {
    let env = Env::start().await;
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(3), "")).await;
    let plugin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_kubectl-shoal"))
        .parent()
        .expect("the plugin's directory")
        .to_path_buf();
    let path = std::env::join_paths(std::iter::once(plugin_dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("a PATH");
    let kubectl = std::env::var("SHOAL_KUBECTL").unwrap_or_else(|_| "kubectl".to_owned());
    // kubectl finds a plugin only when its name comes first; flags follow.
    let output = tokio::process::Command::new(kubectl)
        .args(["shoal", "status", "demo", "--kubeconfig"])
        .arg(env.kubeconfig_path())
        .args(["-n", &env.namespace])
        .env("PATH", path)
        .env_remove("KUBECONFIG")
        .output()
        .await
        .expect("kubectl runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains(&format!("Swarm:              {}/demo", env.namespace)),
        "{stdout}"
    );
    assert!(stdout.contains("| worker | 2        |"), "{stdout}");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diff_of_one_pool_among_two_matches_what_the_controller_does_when_that_pool_scales() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("red", "demo", 2).await;
    env.pool("blue", "demo", 1).await;
    env.apply(&swarm_yaml("demo", &job_keys(18), "")).await;
    env.in_force("demo", 1, WAIT).await;
    eventually("3/3 members ready in the status", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        (status.ready.as_deref() == Some("3/3")).then_some(())
    })
    .await;
    let before = owners(&env.slices("demo").await);

    let run = shoal(&env, &["diff", "demo", "--replicas", "3"]).await;
    assert!(!run.success);
    assert!(
        run.stderr.contains("has 2 pools (") && run.stderr.contains("--pool"),
        "{}",
        run.stderr
    );
    let report: DiffReport =
        shoal_json(&env, &["diff", "demo", "--pool", "blue", "--replicas", "3"]).await;
    assert!(
        report.change.contains("blue from 1 to 3"),
        "{}",
        report.change
    );
    assert!(
        report.moves.iter().any(|moved| moved.to == "blue-2"),
        "the new member blue-2 receives jobs: {:?}",
        report.moves
    );

    env.kubectl(&["scale", "statefulset", "blue", "--replicas=3"])
        .await;
    env.in_force("demo", 2, WAIT).await;
    let after = owners(&env.slices("demo").await);
    let predicted: Vec<(String, String, String)> = report
        .moves
        .iter()
        .map(|moved| (moved.job.clone(), moved.from.clone(), moved.to.clone()))
        .collect();
    assert_eq!(predicted, moved(&before, &after));
    controller.stop().await;
    env.finish().await;
}

const PLAN_DEMO: &str = r#"apiVersion: shoal.dev/v1alpha1
kind: DeploymentPlan
metadata:
  name: demo
spec:
  swarm: demo
  applications:
  - name: nginx
    resources: {cores: 1}
  deployment:
    instances: 1
    payloads:
    - application: nginx
      coordinates: {image: "nginx:1"}
"#;

/// `spec.paused` of the Swarm and of the plan named `demo`.
async fn paused(env: &Env) -> (bool, bool) {
    let plans: kube::Api<shoal_controller::api::deployment_plan::DeploymentPlan> =
        kube::Api::namespaced(env.client.clone(), &env.namespace);
    let plan = plans.get("demo").await.expect("the plan exists");
    (env.swarm("demo").await.spec.paused, plan.spec.paused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_are_named_as_kubectl_names_them_and_a_bare_name_both_kinds_carry_is_refused() {
    let env = Env::start().await;
    env.install_plan_crd().await;
    env.apply(&swarm_yaml("demo", &job_keys(2), "")).await;
    env.apply(PLAN_DEMO).await;
    for args in [
        ["status", "swarm/demo"],
        ["history", "sw/demo"],
        ["slices", "swarms.shoal.dev/demo"],
        ["plan", "dplan/demo"],
        ["instances", "deploymentplans/demo"],
        ["operations", "deploymentplan/demo"],
    ] {
        shoal_ok(&env, &args).await;
    }
    shoal_refused(
        &env,
        &["status", "dplan/demo"],
        "dplan/demo is a DeploymentPlan, and this command takes a Swarm",
    )
    .await;

    // Ambiguous: both kinds are named demo. Nothing is written.
    let namespace = &env.namespace;
    for command in ["pause", "resume", "rollout-status"] {
        let expected = format!(
            "both Swarm {namespace}/demo and DeploymentPlan {namespace}/demo exist; say which: `kubectl shoal {command} swarm/demo` or `kubectl shoal {command} dplan/demo`"
        );
        shoal_refused(&env, &[command, "demo"], &expected).await;
    }
    assert_eq!(paused(&env).await, (false, false));
    shoal_ok(&env, &["pause", "swarm/demo"]).await;
    assert_eq!(paused(&env).await, (true, false));
    shoal_ok(&env, &["pause", "dplan/demo"]).await;
    assert_eq!(paused(&env).await, (true, true));

    // Only a Swarm has the name: a bare name (a plan's) is refused, naming the Swarm form.
    env.apply(&swarm_yaml("solo", &job_keys(1), "")).await;
    shoal_refused(&env, &["pause", "solo"], "`kubectl shoal pause swarm/solo`").await;
    env.finish().await;
}
