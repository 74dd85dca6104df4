//! ValidatingAdmissionPolicy as a real API server enforces it (GA in
//! Kubernetes 1.30): Deny with the policy's message and its reason's code,
//! Warn as a `Warning` kubectl prints, match conditions and selectors, the
//! user's extras from a pod-bound token, `oldObject` on delete, and
//! evaluation errors under `failurePolicy`. Runs on the emulator and on a
//! real cluster (1.30+).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use shoal_emulator::harness::fixtures::PAUSE_IMAGE;
use shoal_emulator::harness::{Check, TestCluster, wait_for};

const WAIT: Duration = Duration::from_secs(30);

async fn cluster() -> TestCluster {
    TestCluster::start().await.expect("a test cluster")
}

async fn kubectl_ok(cluster: &TestCluster, args: &[&str]) -> String {
    cluster
        .kubectl(args)
        .await
        .expect("kubectl runs")
        .ok()
        .unwrap_or_else(|error| panic!("kubectl {args:?}: {error}"))
        .stdout
}

async fn apply(cluster: &TestCluster, yaml: &str) {
    cluster
        .kubectl_with_stdin(&["apply", "-f", "-"], Some(yaml))
        .await
        .expect("kubectl runs")
        .ok()
        .unwrap_or_else(|error| panic!("kubectl apply: {error}\n{yaml}"));
}

/// A policy and its binding, both named `name` (suffixed with the namespace: they are
/// cluster-scoped and tests run side by side), selecting only the test's namespace.
async fn policy(cluster: &TestCluster, name: &str, actions: &str, spec: &str) -> String {
    let name = format!("{name}-{}", cluster.namespace());
    apply(
        cluster,
        &format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata:\n  name: {name}\nspec:\n{spec}\n---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata:\n  name: {name}\nspec:\n  policyName: {name}\n  validationActions: [{actions}]\n  matchResources:\n    namespaceSelector:\n      matchLabels:\n        kubernetes.io/metadata.name: {}\n",
            cluster.namespace()
        ),
    )
    .await;
    name
}

async fn delete_policy(cluster: &TestCluster, name: &str) {
    kubectl_ok(
        cluster,
        &[
            "delete",
            "validatingadmissionpolicybinding,validatingadmissionpolicy",
            name,
        ],
    )
    .await;
}

const NO_FORBIDDEN_KEY: &str = "  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [\"\"]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [configmaps]
  validations:
  - expression: \"!has(object.data) || !('forbidden' in object.data)\"
    messageExpression: \"'ConfigMap ' + object.metadata.name + ' may not carry the key forbidden'\"
    reason: Forbidden";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denying_policy_refuses_with_its_message_and_its_reasons_code() {
    let cluster = cluster().await;
    let name = policy(&cluster, "no-forbidden-key", "Deny", NO_FORBIDDEN_KEY).await;
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client(), cluster.namespace());
    let bad: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "bad"}, "data": {"forbidden": "x"}}))
            .unwrap();
    let refused = wait_for("the policy to take effect", WAIT, || {
        let maps = maps.clone();
        let bad = bad.clone();
        async move {
            match maps.create(&PostParams::default(), &bad).await {
                Err(kube::Error::Api(status)) => Check::Done((status.code, status.message.clone())),
                other => {
                    let _ = maps.delete("bad", &DeleteParams::default()).await;
                    Check::Pending(format!("{other:?}"))
                }
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(
        refused,
        (
            403,
            format!(
                "configmaps \"bad\" is forbidden: ValidatingAdmissionPolicy '{name}' with binding '{name}' denied request: ConfigMap bad may not carry the key forbidden"
            )
        )
    );
    let output = cluster
        .kubectl(&[
            "create",
            "configmap",
            "also-bad",
            "--from-literal=forbidden=y",
        ])
        .await
        .expect("kubectl runs");
    assert!(!output.success());
    assert!(
        output.stderr.contains("may not carry the key forbidden"),
        "{}",
        output.stderr
    );
    kubectl_ok(
        &cluster,
        &["create", "configmap", "fine", "--from-literal=a=b"],
    )
    .await;
    delete_policy(&cluster, &name).await;
    cluster.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warning_policy_lets_the_write_through_and_kubectl_prints_the_warning() {
    let cluster = cluster().await;
    let name = policy(&cluster, "warn-forbidden-key", "Warn", NO_FORBIDDEN_KEY).await;
    let printed = wait_for("the warning", WAIT, || async {
        let output = cluster
            .kubectl(&[
                "create",
                "configmap",
                "warned",
                "--from-literal=forbidden=y",
            ])
            .await
            .expect("kubectl runs");
        let _ = cluster.kubectl(&["delete", "configmap", "warned"]).await;
        if output.success() && output.stderr.contains("Warning:") {
            Check::Done(output.stderr)
        } else {
            Check::Pending(format!("{}{}", output.stdout, output.stderr))
        }
    })
    .await
    .unwrap();
    assert!(
        printed.contains(&format!(
            "Validation failed for ValidatingAdmissionPolicy '{name}'"
        )) && printed.contains("may not carry the key forbidden"),
        "{printed}"
    );
    delete_policy(&cluster, &name).await;
    cluster.cleanup().await;
}

/// A policy of the shape Shoal ships for member Leases: a pod-bound token may write
/// only the Lease named after its own pod.
const OWN_LEASE_ONLY: &str = "  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [coordination.k8s.io]
      apiVersions: [v1]
      operations: [CREATE, UPDATE, DELETE]
      resources: [leases]
  matchConditions:
  - name: member-lease
    expression: \"(object != null && has(object.metadata.labels) && 'shoal.dev/member' in object.metadata.labels) || (oldObject != null && has(oldObject.metadata.labels) && 'shoal.dev/member' in oldObject.metadata.labels)\"
  - name: not-an-administrator
    expression: \"!('system:masters' in request.userInfo.groups)\"
  variables:
  - name: pod
    expression: \"'authentication.kubernetes.io/pod-name' in request.userInfo.extra ? request.userInfo.extra['authentication.kubernetes.io/pod-name'][0] : ''\"
  validations:
  - expression: \"variables.pod != '' && request.name == variables.pod + '-member'\"
    messageExpression: \"'a member Lease may be written only by its own pod; ' + request.userInfo.username + ' (pod ' + variables.pod + ') may not write ' + request.name\"
    reason: Forbidden";

async fn pod_client(cluster: &TestCluster, pod: &str) -> Client {
    kubectl_ok(
        cluster,
        &[
            "run",
            pod,
            &format!("--image={PAUSE_IMAGE}"),
            "--restart=Never",
        ],
    )
    .await;
    let token = cluster
        .service_account_token(cluster.namespace(), "member", Some(pod))
        .await
        .expect("a pod-bound token");
    cluster.client_with_token(&token).await.expect("a client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_may_write_its_own_member_lease_and_no_other() {
    let cluster = cluster().await;
    kubectl_ok(&cluster, &["create", "serviceaccount", "member"]).await;
    kubectl_ok(
        &cluster,
        &[
            "create",
            "role",
            "leases",
            "--verb=get,create,patch,delete",
            "--resource=leases",
        ],
    )
    .await;
    kubectl_ok(
        &cluster,
        &[
            "create",
            "rolebinding",
            "leases",
            "--role=leases",
            &format!("--serviceaccount={}:member", cluster.namespace()),
        ],
    )
    .await;
    let name = policy(&cluster, "own-lease-only", "Deny", OWN_LEASE_ONLY).await;
    let first = pod_client(&cluster, "pool-0").await;
    let second = pod_client(&cluster, "pool-1").await;
    let lease = |pod: &str| -> Lease {
        serde_json::from_value(json!({
            "metadata": {"name": format!("{pod}-member"), "labels": {"shoal.dev/member": pod}},
            "spec": {"holderIdentity": pod, "leaseDurationSeconds": 10},
        }))
        .unwrap()
    };
    let own: Api<Lease> = Api::namespaced(first.clone(), cluster.namespace());
    let other: Api<Lease> = Api::namespaced(second, cluster.namespace());
    wait_for("pool-0 creating its own Lease", WAIT, || {
        let own = own.clone();
        let lease = lease("pool-0");
        async move {
            match own.create(&PostParams::default(), &lease).await {
                Ok(_) => Check::Done(()),
                Err(error) => Check::Pending(error.to_string()),
            }
        }
    })
    .await
    .unwrap();
    other
        .create(&PostParams::default(), &lease("pool-1"))
        .await
        .expect("pool-1 creates its own Lease");
    // pool-1 forging pool-0's acknowledgement.
    let forged = json!({"metadata": {"annotations": {"shoal.dev/acked-revision": "999"}}});
    match other
        .patch(
            "pool-0-member",
            &PatchParams::default(),
            &Patch::Merge(&forged),
        )
        .await
    {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403);
            assert!(
                status.message.contains(&format!(
                    "ValidatingAdmissionPolicy '{name}' with binding '{name}' denied request: a member Lease may be written only by its own pod"
                )) && status.message.contains("(pod pool-1) may not write pool-0-member"),
                "{}",
                status.message
            );
        }
        other => panic!("pool-1 wrote pool-0's Lease: {other:?}"),
    }
    // Nor may it remove the label to slip out of the policy, or delete the Lease.
    let unlabel = json!({"metadata": {"labels": {"shoal.dev/member": null}}});
    assert!(
        other
            .patch(
                "pool-0-member",
                &PatchParams::default(),
                &Patch::Merge(&unlabel)
            )
            .await
            .is_err()
    );
    assert!(
        other
            .delete("pool-0-member", &DeleteParams::default())
            .await
            .is_err()
    );
    own.patch(
        "pool-0-member",
        &PatchParams::default(),
        &Patch::Merge(&forged),
    )
    .await
    .expect("pool-0 writes its own Lease");
    delete_policy(&cluster, &name).await;
    cluster.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expression_that_fails_to_evaluate_denies_under_fail_and_passes_under_ignore() {
    let cluster = cluster().await;
    let spec = |failure: &str| {
        format!(
            "  failurePolicy: {failure}
  matchConstraints:
    resourceRules:
    - apiGroups: [\"\"]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [configmaps]
  validations:
  - expression: \"object.data.missing == 'x'\""
        )
    };
    let strict = policy(&cluster, "strict", "Deny", &spec("Fail")).await;
    let refused = wait_for("the strict policy", WAIT, || async {
        let output = cluster
            .kubectl(&["create", "configmap", "probe", "--from-literal=a=b"])
            .await
            .expect("kubectl runs");
        let _ = cluster.kubectl(&["delete", "configmap", "probe"]).await;
        if output.success() {
            Check::Pending("accepted".to_owned())
        } else {
            Check::Done(output.stderr)
        }
    })
    .await
    .unwrap();
    assert!(
        refused.contains(&format!("ValidatingAdmissionPolicy '{strict}'")),
        "{refused}"
    );
    delete_policy(&cluster, &strict).await;
    let lenient = policy(&cluster, "lenient", "Deny", &spec("Ignore")).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    kubectl_ok(
        &cluster,
        &["create", "configmap", "through", "--from-literal=a=b"],
    )
    .await;
    delete_policy(&cluster, &lenient).await;
    cluster.cleanup().await;
}
