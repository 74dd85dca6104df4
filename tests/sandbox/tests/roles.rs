//! The people's roles through the real kubectl, as the identities they are bound to
//! (kubectl `--as`, `--as-group`): a `shoal-viewer` reads, lists and watches Swarms and
//! DeploymentPlans and their status; a member of `shoal.dev:approvers` (bound to
//! `shoal-approver`) changes the `shoal.dev/approve` annotation and nothing else, which
//! the admission policy `shoal-approvers` enforces; nobody approves in another user's
//! name (`shoal.dev/approved-by` is the requester's, policy `shoal-approved-by`); an editor (the aggregated `edit`
//! rules) still edits specs. Emulator only: it installs cluster-scoped objects (CRDs,
//! ClusterRoles, an admission policy), which a shared real cluster must not get from a
//! test.

use shoal_emulator::harness::{KubectlOutput, TestCluster};

const APPROVERS: &str = "shoal.dev:approvers";

fn repo_path(relative: &str) -> String {
    format!("{}/../../{relative}", env!("CARGO_MANIFEST_DIR"))
}

async fn kubectl(cluster: &TestCluster, args: &[&str]) -> KubectlOutput {
    cluster.kubectl(args).await.expect("kubectl runs")
}

/// kubectl as `user` (in `groups`); asserts nothing about the outcome.
async fn kubectl_as(
    cluster: &TestCluster,
    user: &str,
    groups: &[&str],
    args: &[&str],
) -> KubectlOutput {
    let mut full = vec![format!("--as={user}")];
    full.extend(groups.iter().map(|group| format!("--as-group={group}")));
    full.extend(args.iter().map(|arg| (*arg).to_owned()));
    let full: Vec<&str> = full.iter().map(String::as_str).collect();
    kubectl(cluster, &full).await
}

/// Alice, an approver, approves `kind` (`swarm/demo`, …) in her own name.
async fn alice_approves(cluster: &TestCluster, kind: &str) -> KubectlOutput {
    kubectl_as(
        cluster,
        "alice",
        &[APPROVERS],
        &[
            "annotate",
            kind,
            "shoal.dev/approve=1/sha256:abc",
            "shoal.dev/approved-by=alice",
            "--overwrite",
        ],
    )
    .await
}

fn assert_allowed(output: &KubectlOutput) {
    assert!(
        output.success(),
        "kubectl {:?} was refused: {}",
        output.args,
        output.stderr
    );
}

fn assert_refused(output: &KubectlOutput, because: &str) {
    assert!(
        !output.success(),
        "kubectl {:?} was allowed: {}",
        output.args,
        output.stdout
    );
    assert!(
        output.stderr.contains(because),
        "kubectl {:?} was refused for another reason than {because:?}: {}",
        output.args,
        output.stderr
    );
}

async fn install(cluster: &TestCluster) {
    for file in ["manifests/crd.yaml", "manifests/crd-deploymentplan.yaml"] {
        assert_allowed(&kubectl(cluster, &["apply", "-f", &repo_path(file)]).await);
    }
    for directory in ["manifests/roles", "manifests/admission"] {
        assert_allowed(&kubectl(cluster, &["apply", "-k", &repo_path(directory)]).await);
    }
    for crd in ["swarms.shoal.dev", "deploymentplans.shoal.dev"] {
        assert_allowed(
            &kubectl(
                cluster,
                &[
                    "wait",
                    "--for=condition=Established",
                    "--timeout=30s",
                    &format!("crd/{crd}"),
                ],
            )
            .await,
        );
    }
    let namespace = cluster.namespace().to_owned();
    let objects = format!(
        r#"
apiVersion: shoal.dev/v1alpha1
kind: Swarm
metadata:
  name: demo
  namespace: {namespace}
spec:
  jobs: ["a", "b", "c"]
---
apiVersion: shoal.dev/v1alpha1
kind: DeploymentPlan
metadata:
  name: web
  namespace: {namespace}
spec:
  swarm: demo
  applications:
    - name: nginx
  deployment:
    instances: 1
    payloads:
      - application: nginx
        coordinates:
          image: nginx:1.25
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: viewers
  namespace: {namespace}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: shoal-viewer
subjects:
  - kind: User
    name: vera
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: approvers
  namespace: {namespace}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: shoal-approver
subjects:
  - kind: Group
    name: {APPROVERS}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: editors
  namespace: {namespace}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: edit
subjects:
  - kind: User
    name: eddie
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: built-in-viewers
  namespace: {namespace}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: view
subjects:
  - kind: User
    name: victor
"#
    );
    let applied = cluster
        .kubectl_with_stdin(&["apply", "-f", "-"], Some(&objects))
        .await
        .expect("kubectl runs");
    assert_allowed(&applied);
}

/// An emulated cluster with Shoal's CRDs, roles, policies and test objects; `None` (after
/// saying why) on a real cluster.
async fn installed_cluster() -> Option<TestCluster> {
    let cluster = TestCluster::start().await.expect("a test cluster");
    if !cluster.is_emulated() {
        println!("skipped on a real cluster: it installs CRDs, ClusterRoles and a policy");
        cluster.cleanup().await;
        return None;
    }
    install(&cluster).await;
    Some(cluster)
}

#[tokio::test]
async fn a_viewer_gets_lists_and_watches_swarms_and_plans_with_their_status() {
    let Some(cluster) = installed_cluster().await else {
        return;
    };
    for args in [
        &["get", "swarms"][..],
        &["get", "deploymentplans"],
        &["get", "swarm", "demo", "-o", "yaml"],
        &["get", "deploymentplan", "web", "-o", "yaml"],
        &["get", "swarm", "demo", "--subresource=status"],
        &["get", "deploymentplan", "web", "--subresource=status"],
    ] {
        assert_allowed(&kubectl_as(&cluster, "vera", &[], args).await);
    }
    for resource in ["swarms", "deploymentplans"] {
        // A watch ends when its request times out; it must have started, not been refused.
        let watched = kubectl_as(
            &cluster,
            "vera",
            &[],
            &["get", resource, "--watch", "--request-timeout=2s"],
        )
        .await;
        assert!(
            !watched.stderr.contains("Forbidden") && !watched.stderr.contains("forbidden"),
            "watching {resource} as a viewer: {}",
            watched.stderr
        );
        assert!(
            watched.stdout.contains("demo") || watched.stdout.contains("web"),
            "watching {resource} printed nothing: {watched:?}"
        );
    }
    // The built-in `view` role reads them too (aggregation), and writes nothing.
    for args in [
        &["get", "swarms"][..],
        &["get", "deploymentplan", "web", "-o", "yaml"],
    ] {
        assert_allowed(&kubectl_as(&cluster, "victor", &[], args).await);
    }
    assert_refused(
        &kubectl_as(
            &cluster,
            "victor",
            &[],
            &["annotate", "swarm", "demo", "shoal.dev/approve=1/sha256:x"],
        )
        .await,
        "forbidden",
    );
    assert_refused(
        &kubectl_as(
            &cluster,
            "vera",
            &[],
            &["annotate", "swarm", "demo", "shoal.dev/approve=1/sha256:x"],
        )
        .await,
        "forbidden",
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn an_approver_changes_the_approval_annotation_and_nothing_else() {
    let Some(cluster) = installed_cluster().await else {
        return;
    };
    let alice = |args: &'static [&'static str]| kubectl_as(&cluster, "alice", &[APPROVERS], args);
    for kind in ["swarm/demo", "deploymentplan/web"] {
        let approve = alice_approves(&cluster, kind).await;
        assert_allowed(&approve);
    }
    let approved = kubectl(
        &cluster,
        &[
            "get",
            "swarm",
            "demo",
            "-o",
            "jsonpath={.metadata.annotations}",
        ],
    )
    .await;
    assert!(approved.stdout.contains("1/sha256:abc"), "{approved:?}");

    let only_approve = "may change only the annotation shoal.dev/approve";
    assert_refused(
        &alice(&[
            "patch",
            "swarm",
            "demo",
            "--type=merge",
            "-p",
            r#"{"spec":{"jobs":["a"]}}"#,
        ])
        .await,
        only_approve,
    );
    assert_refused(
        &alice(&[
            "patch",
            "deploymentplan",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec":{"deployment":{"instances":3}}}"#,
        ])
        .await,
        only_approve,
    );
    assert_refused(
        &alice(&["annotate", "swarm", "demo", "shoal.dev/failover-now=demo-0"]).await,
        only_approve,
    );
    assert_refused(
        &alice(&["label", "swarm", "demo", "team=a"]).await,
        only_approve,
    );
    // RBAC grants no create or delete at all.
    assert_refused(&alice(&["delete", "swarm", "demo"]).await, "forbidden");

    // Nothing changed but the approval.
    let jobs = kubectl(
        &cluster,
        &["get", "swarm", "demo", "-o", "jsonpath={.spec.jobs}"],
    )
    .await;
    assert_eq!(jobs.stdout, r#"["a","b","c"]"#);

    // An editor (the built-in `edit` role, which aggregates shoal-aggregate-to-edit), not
    // in the group, still edits the spec.
    assert_allowed(
        &kubectl_as(
            &cluster,
            "eddie",
            &[],
            &[
                "patch",
                "swarm",
                "demo",
                "--type=merge",
                "-p",
                r#"{"spec":{"jobs":["a"]}}"#,
            ],
        )
        .await,
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn nobody_approves_in_another_users_name() {
    let Some(cluster) = installed_cluster().await else {
        return;
    };
    let in_another_name = "nobody approves in another name";
    let alone = "changes only together with shoal.dev/approve";
    for kind in ["swarm/demo", "deploymentplan/web"] {
        // Alice claims Bob approved; then gives no name at all.
        for claim in [&["shoal.dev/approved-by=bob"][..], &[]] {
            let mut args = vec!["annotate", kind, "shoal.dev/approve=1/sha256:abc"];
            args.extend(claim);
            args.push("--overwrite");
            assert_refused(
                &kubectl_as(&cluster, "alice", &[APPROVERS], &args).await,
                in_another_name,
            );
        }
        // An editor is held to it too, and so is an approval written at creation.
        assert_refused(
            &kubectl_as(
                &cluster,
                "eddie",
                &[],
                &[
                    "annotate",
                    kind,
                    "shoal.dev/approve=1/sha256:abc",
                    "shoal.dev/approved-by=alice",
                    "--overwrite",
                ],
            )
            .await,
            in_another_name,
        );
        // In her own name, Alice approves.
        assert_allowed(&alice_approves(&cluster, kind).await);
        // Bob cannot take her approval over by renaming it, nor Eddie by erasing the name.
        assert_refused(
            &kubectl_as(
                &cluster,
                "bob",
                &[APPROVERS],
                &["annotate", kind, "shoal.dev/approved-by=bob", "--overwrite"],
            )
            .await,
            alone,
        );
        assert_refused(
            &kubectl_as(
                &cluster,
                "eddie",
                &[],
                &["annotate", kind, "shoal.dev/approved-by-"],
            )
            .await,
            alone,
        );
        // An edit that leaves the approval alone is not held to it.
        assert_allowed(
            &kubectl_as(
                &cluster,
                "eddie",
                &[],
                &["label", kind, "team=a", "--overwrite"],
            )
            .await,
        );
        let annotations = kubectl(
            &cluster,
            &["get", kind, "-o", "jsonpath={.metadata.annotations}"],
        )
        .await;
        assert!(
            annotations
                .stdout
                .contains(r#""shoal.dev/approved-by":"alice""#),
            "{kind}: {annotations:?}"
        );
    }
    let created = cluster
        .kubectl_with_stdin(
            &["--as=eddie", "apply", "-f", "-"],
            Some(&format!(
                r#"
apiVersion: shoal.dev/v1alpha1
kind: Swarm
metadata:
  name: forged
  namespace: {}
  annotations:
    shoal.dev/approve: 1/sha256:abc
    shoal.dev/approved-by: alice
spec:
  jobs: ["a"]
"#,
                cluster.namespace()
            )),
        )
        .await
        .expect("kubectl runs");
    assert_refused(&created, in_another_name);
    cluster.cleanup().await;
}
