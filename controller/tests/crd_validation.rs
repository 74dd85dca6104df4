//! The Swarm CRD's schema (OpenAPI bounds, patterns, `x-kubernetes-list-type: set` and
//! CEL rules) refuses what can be checked before the controller sees it: `kubectl apply`
//! fails with a message naming the field, and nothing is stored. Every Swarm shipped as
//! an example (manifests, the sandbox demo, the README and the book) still applies.

use crate::common;
use crate::documents;

use std::path::Path;

use common::{Env, job_keys, swarm_yaml};

/// A Swarm `demo` with `jobs` and extra spec lines, applied with kubectl: (accepted, output).
async fn try_apply(env: &Env, yaml: &str) -> (bool, String) {
    let output = env
        .cluster
        .kubectl_with_stdin(&["apply", "-f", "-"], Some(yaml))
        .await
        .expect("kubectl runs");
    (
        output.success(),
        format!("{}{}", output.stdout, output.stderr),
    )
}

/// Applies each bad Swarm and checks that it is refused with `field` and `words` in the
/// message, and that no Swarm was stored.
async fn assert_refused(env: &Env, cases: &[(&str, String, &str, &str)]) {
    let mut failures = Vec::new();
    for (what, yaml, field, words) in cases {
        let (accepted, output) = try_apply(env, yaml).await;
        if accepted {
            failures.push(format!("{what}: accepted:\n{output}\n{yaml}"));
        } else if !output.contains(field) || !output.contains(words) {
            failures.push(format!(
                "{what}: refused without naming {field:?} and {words:?}:\n{output}"
            ));
        }
        let (exists, text) = env.kubectl_status(&["get", "swarm", "demo"]).await;
        if exists {
            failures.push(format!("{what}: the refused Swarm was stored: {text}"));
            env.kubectl(&["delete", "swarm", "demo"]).await;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

fn with_spec(extra: &str) -> String {
    swarm_yaml("demo", &job_keys(2), extra)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_job_keys_are_refused_by_the_api_server_naming_the_entry() {
    let env = Env::start().await;
    let mut duplicated = job_keys(3);
    duplicated.push("stream:001".to_owned());
    let too_long = vec!["k".repeat(254)];
    let cases = [
        (
            "an empty key",
            swarm_yaml("demo", &["a".to_owned(), String::new()], ""),
            "spec.jobs[1]",
            "at least 1 chars long",
        ),
        (
            "a repeated key",
            swarm_yaml("demo", &duplicated, ""),
            "spec.jobs[3]",
            "Duplicate value: \"stream:001\"",
        ),
        (
            "a key of 254 bytes",
            swarm_yaml("demo", &too_long, ""),
            "spec.jobs[0]",
            "Too long",
        ),
        (
            "a key with a control character",
            swarm_yaml("demo", &["bell\\a".to_owned()], ""),
            "spec.jobs[0]",
            "should match",
        ),
    ];
    assert_refused(&env, &cases).await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_strategy_approval_rollout_and_failover_settings_are_refused_naming_the_field() {
    let env = Env::start().await;
    let cases = [
        (
            "an unknown strategy",
            with_spec("  strategy:\n    type: round-robin\n"),
            "spec.strategy.type",
            "Unsupported value",
        ),
        (
            "a negative epsilon",
            with_spec("  strategy:\n    epsilon: -0.5\n"),
            "spec.strategy.epsilon",
            "greater than or equal to 0",
        ),
        (
            "zero vnodes",
            with_spec("  strategy:\n    type: ring\n    vnodes: 0\n"),
            "spec.strategy.vnodes",
            "greater than or equal to 1",
        ),
        (
            "too many vnodes",
            with_spec("  strategy:\n    type: ring\n    vnodes: 5000\n"),
            "spec.strategy.vnodes",
            "less than or equal to 4096",
        ),
        (
            "vnodes for the bounded strategy",
            with_spec("  strategy:\n    type: bounded\n    vnodes: 8\n"),
            "spec.strategy",
            "vnodes applies only to the ring strategy",
        ),
        (
            "an unknown reload policy",
            with_spec("  reload: Sometimes\n"),
            "spec.reload",
            "Unsupported value",
        ),
        (
            "an unknown approval policy",
            with_spec("  approval:\n    policy: Never\n"),
            "spec.approval.policy",
            "Unsupported value",
        ),
        (
            "a Budget policy without a budget",
            with_spec("  approval:\n    policy: Budget\n"),
            "spec.approval",
            "the Budget policy needs maxDisruptedMembers or maxMovedJobs",
        ),
        (
            "a negative job budget",
            with_spec("  approval:\n    policy: Budget\n    maxMovedJobs: -1\n"),
            "spec.approval.maxMovedJobs",
            "greater than or equal to 0",
        ),
        (
            "more unavailable members than a Swarm can have",
            with_spec("  rollout:\n    maxUnavailable: 20000\n"),
            "spec.rollout.maxUnavailable",
            "less than or equal to 10000",
        ),
        (
            "a failover delay in words",
            with_spec("  failover:\n    after: 5 minutes\n"),
            "spec.failover.after",
            "should match",
        ),
        (
            "no revision history",
            with_spec("  revisionHistoryLimit: 0\n"),
            "spec.revisionHistoryLimit",
            "greater than or equal to 1",
        ),
    ];
    assert_refused(&env, &cases).await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_list_configmap_reference_must_name_a_configmap_and_a_key() {
    let env = Env::start().await;
    let from = |name: &str, key: &str| {
        with_spec(&format!(
            "  jobsFrom:\n    configMapKeyRef:\n      name: \"{name}\"\n      key: \"{key}\"\n"
        ))
    };
    let cases = [
        (
            "an upper-case ConfigMap name",
            from("Job_List", "jobs.yaml"),
            "spec.jobsFrom.configMapKeyRef.name",
            "should match",
        ),
        (
            "an empty ConfigMap name",
            from("", "jobs.yaml"),
            "spec.jobsFrom.configMapKeyRef.name",
            "at least 1 chars long",
        ),
        (
            "a key with a slash",
            from("job-list", "jobs/all.yaml"),
            "spec.jobsFrom.configMapKeyRef.key",
            "should match",
        ),
        (
            "a ConfigMap and a selector at once",
            with_spec(
                "  jobsFrom:\n    configMapKeyRef: {name: jobs, key: config.yml}\n    selector: {matchLabels: {app: streams}, key: config.yml}\n",
            ),
            "spec.jobsFrom",
            "exactly one of configMapKeyRef, configMapKeyRefs and selector",
        ),
        (
            "no ConfigMap at all",
            with_spec("  jobsFrom: {}\n"),
            "spec.jobsFrom",
            "exactly one of configMapKeyRef, configMapKeyRefs and selector",
        ),
        (
            "a selector without labels",
            with_spec("  jobsFrom:\n    selector: {matchLabels: {}, key: config.yml}\n"),
            "spec.jobsFrom.selector",
            "matchLabels needs at least one label",
        ),
        (
            "a part with a bad key",
            with_spec(
                "  jobsFrom:\n    configMapKeyRefs:\n    - {name: jobs-a, key: config.yml}\n    - {name: jobs-b, key: \"a/b\"}\n",
            ),
            "spec.jobsFrom.configMapKeyRefs[1].key",
            "should match",
        ),
    ];
    assert_refused(&env, &cases).await;
    env.finish().await;
}

/// The Swarms of `manifests/example`, the sandbox demo and the examples of the README and
/// the book (whole Swarms, and `spec:` fragments completed into one), each applied into
/// the test namespace.
fn shipped_swarms() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut swarms = Vec::new();
    for file in [
        "manifests/example/swarm.yaml",
        "tests/sandbox/demo/20-swarm.yaml",
    ] {
        let text = std::fs::read_to_string(root.join(file))
            .unwrap_or_else(|error| panic!("reading {file}: {error}"));
        swarms.push((file.to_owned(), text));
    }
    for document in documents::documents() {
        let text = documents::read(&document);
        for (index, block) in documents::code_blocks(&text, "yaml")
            .into_iter()
            .enumerate()
        {
            let origin = format!("{} yaml block {index}", document.display());
            if block.contains("kind: Swarm\n") {
                swarms.push((origin, block.to_owned()));
            } else if block.starts_with("spec:\n") {
                // A fragment of a Swarm's spec: whole, under a name of its own.
                let name = format!("fragment-{}", swarms.len());
                let whole = format!(
                    "apiVersion: shoal.dev/v1alpha1\nkind: Swarm\nmetadata:\n  name: {name}\n{block}"
                );
                swarms.push((origin, whole));
            }
        }
    }
    swarms
        .into_iter()
        .map(|(origin, text)| {
            // Into the test's namespace, whatever the example names.
            let text: Vec<&str> = text
                .lines()
                .filter(|line| !line.trim_start().starts_with("namespace:"))
                .collect();
            (origin, text.join("\n") + "\n")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_swarm_still_applies() {
    let env = Env::start().await;
    let swarms = shipped_swarms();
    assert!(
        swarms.len() >= 3,
        "expected the example, the demo and the documents' Swarms: {swarms:?}"
    );
    let mut failures = Vec::new();
    for (origin, yaml) in &swarms {
        let (accepted, output) = try_apply(&env, yaml).await;
        if !accepted {
            failures.push(format!("{origin} was refused:\n{output}\n{yaml}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_plan_must_name_a_swarm_and_applications_as_dns_names() {
    let env = Env::start().await;
    let crd = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/crd-deploymentplan.yaml");
    env.cluster
        .install_crd_file(&crd)
        .await
        .unwrap_or_else(|error| panic!("installing the DeploymentPlan CRD: {error}"));
    let plan = |swarm: &str, application: &str| {
        format!(
            "apiVersion: shoal.dev/v1alpha1\nkind: DeploymentPlan\nmetadata:\n  name: web\nspec:\n  swarm: \"{swarm}\"\n  applications:\n  - name: \"{application}\"\n  deployment:\n    instances: 1\n"
        )
    };
    let mut failures = Vec::new();
    for (what, yaml, field) in [
        (
            "an upper-case Swarm name",
            plan("Demo", "nginx"),
            "spec.swarm",
        ),
        (
            "an application name with a dot",
            plan("demo", "nginx.v2"),
            "spec.applications[0].name",
        ),
    ] {
        let (accepted, output) = try_apply(&env, &yaml).await;
        if accepted || !output.contains(field) || !output.contains("should match") {
            failures.push(format!("{what}: accepted {accepted}:\n{output}"));
        }
    }
    // The shipped example still applies.
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/example/deploymentplan.yaml"),
    )
    .expect("the example plan is readable");
    let example: Vec<&str> = example
        .lines()
        .filter(|line| !line.trim_start().starts_with("namespace:"))
        .collect();
    let (accepted, output) = try_apply(&env, &(example.join("\n") + "\n")).await;
    if !accepted {
        failures.push(format!(
            "manifests/example/deploymentplan.yaml was refused:\n{output}"
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_weight_out_of_range_is_refused_naming_the_job_setting() {
    let env = Env::start().await;
    let setting = |weight: &str| {
        with_spec(&format!(
            "  strategy:\n    type: sticky\n  jobSettings:\n    \"stream:000\":\n      weight: {weight}\n"
        ))
    };
    let cases = [
        (
            "weight 0",
            setting("0"),
            "spec.jobSettings.stream:000.weight",
            "greater than or equal to 1",
        ),
        (
            "weight 2000000",
            setting("2000000"),
            "spec.jobSettings.stream:000.weight",
            "less than or equal to 1000000",
        ),
    ];
    assert_refused(&env, &cases).await;
    // In range, it applies.
    let (accepted, output) = try_apply(&env, &setting("1000000")).await;
    assert!(accepted, "{output}");
    env.finish().await;
}
