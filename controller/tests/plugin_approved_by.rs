//! Who approved, end to end: with the admission policy `shoal-approved-by` installed,
//! `kubectl shoal approve` and `approve-op` run as a real identity (a ServiceAccount
//! token, as a person's or a bot's credentials) name that identity, the controller
//! records it as verified, and `history`, `operations` and `plan-history` show it; the
//! controller's own approvals name the policy. Emulator only: it installs a
//! cluster-scoped admission policy, which a shared real cluster must not get from a test.

use crate::common;
use crate::plugin_common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Env, eventually, job_keys, manual_plan_yaml, swarm_yaml};
use kube::Api;
use plugin_common::{Run, shoal, shoal_with_env};
use shoal_controller::Settings;
use shoal_controller::api::deployment_plan::DeploymentPlan;
use shoal_controller::plugin::history::HistoryReport;

const WAIT: Duration = Duration::from_secs(30);
const MANUAL: &str = "  approval:\n    policy: Manual\n";

/// Installs the approvers' admission policies (as `manifests/admission/` does) and an
/// approver ServiceAccount `alice` allowed to read and patch Swarms and plans; returns a
/// kubeconfig that authenticates as her.
async fn approver(env: &Env, directory: &Path) -> PathBuf {
    let policies = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../manifests/admission/approvers.yaml"
    );
    env.kubectl(&["apply", "-f", policies]).await;
    env.apply(
        r#"apiVersion: v1
kind: ServiceAccount
metadata:
  name: alice
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: approves
rules:
- apiGroups: ["shoal.dev"]
  resources: ["swarms", "deploymentplans"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: alice-approves
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: approves
subjects:
- kind: ServiceAccount
  name: alice
"#,
    )
    .await;
    let token = env
        .cluster
        .service_account_token(&env.namespace, "alice", None)
        .await
        .expect("a token for alice");
    env.cluster
        .kubeconfig_with_token(directory, "alice", &token)
        .expect("alice's kubeconfig")
}

/// `kubectl shoal <args>` as the identity of `kubeconfig`.
async fn shoal_as(env: &Env, kubeconfig: &Path, args: &[&str]) -> Run {
    let mut full = vec![
        "--kubeconfig",
        kubeconfig.to_str().expect("a UTF-8 path"),
        "-n",
        &env.namespace,
    ];
    full.extend_from_slice(args);
    shoal_with_env(&full, &[]).await
}

/// The controller as the cluster-wide install runs it: only that one reads the policy
/// (a controller watching one namespace has no right to read cluster-scoped objects).
fn cluster_wide_controller(env: &Env) -> common::Running {
    env.start_controller_with(Settings {
        namespace: None,
        resync: Duration::from_secs(5),
        ..Settings::default()
    })
}

fn succeeded(run: Run) -> String {
    assert!(run.success, "kubectl shoal failed: {}", run.stderr);
    run.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_names_the_user_who_ran_kubectl_shoal_approve_and_the_policy_for_automatic() {
    let Some(env) = Env::start_emulated("it installs a cluster-scoped admission policy").await
    else {
        return;
    };
    let directory = tempfile::tempdir().expect("a temporary directory");
    let alice = approver(&env, directory.path()).await;
    let alice_name = format!("system:serviceaccount:{}:alice", env.namespace);
    let controller = cluster_wide_controller(&env);
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(6), MANUAL)).await;
    eventually("revision 1 pending", WAIT, || async {
        env.swarm("demo").await.status?.pending_revision
    })
    .await;

    let approved = succeeded(shoal_as(&env, &alice, &["approve", "demo"]).await);
    assert!(approved.contains(&alice_name), "{approved}");
    env.in_force("demo", 1, WAIT).await;

    // Revision 2 goes through under the Automatic policy.
    env.apply(&swarm_yaml("demo", &job_keys(8), "")).await;
    env.in_force("demo", 2, WAIT).await;

    let history: HistoryReport = serde_json::from_str(&succeeded(
        shoal(&env, &["history", "demo", "-o", "json"]).await,
    ))
    .expect("the history as JSON");
    let approvers: Vec<(u64, String, bool)> = history
        .revisions
        .iter()
        .filter_map(|row| {
            let approval = row.approval.as_ref()?;
            Some((row.revision, approval.by.clone(), approval.verified))
        })
        .collect();
    assert_eq!(
        approvers,
        [
            (1, alice_name.clone(), true),
            (2, "shoal-controller (Automatic)".to_owned(), true)
        ]
    );
    let table = succeeded(shoal(&env, &["history", "demo"]).await);
    assert!(table.contains("Approved-By"), "{table}");
    assert!(table.contains(&alice_name), "{table}");
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_and_plan_history_name_the_user_who_ran_kubectl_shoal_approve_op() {
    let Some(env) = Env::start_emulated("it installs a cluster-scoped admission policy").await
    else {
        return;
    };
    env.install_plan_crd().await;
    let directory = tempfile::tempdir().expect("a temporary directory");
    let alice = approver(&env, directory.path()).await;
    let alice_name = format!("system:serviceaccount:{}:alice", env.namespace);
    let controller = cluster_wide_controller(&env);
    env.pool("worker", "demo", 2).await;
    env.ready_pool("worker", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(2), "")).await;
    env.apply(&manual_plan_yaml("web", 1)).await;
    let plans: Api<DeploymentPlan> = Api::namespaced(env.client.clone(), &env.namespace);
    let waiting = eventually("an operation waiting for approval", WAIT, || async {
        let status = plans.get("web").await.ok()?.status?;
        status
            .operations
            .into_iter()
            .find(|op| op.state == "PENDING_APPROVAL")
    })
    .await;
    let annotated = succeeded(shoal_as(&env, &alice, &["approve-op", "web", &waiting.id]).await);
    assert!(annotated.contains(&alice_name), "{annotated}");
    let approval = eventually("the operation approved", WAIT, || async {
        let status = plans.get("web").await.ok()?.status?;
        status
            .operations
            .into_iter()
            .find(|op| op.id == waiting.id)?
            .approval
    })
    .await;
    assert_eq!(
        (approval.by.as_str(), approval.verified),
        (alice_name.as_str(), true)
    );

    // Who approved is a wide column, as in `kubectl get -o wide`.
    let operations = succeeded(shoal(&env, &["operations", "web", "-o", "wide"]).await);
    assert!(operations.contains(&alice_name), "{operations}");
    let history = succeeded(shoal(&env, &["plan-history", "web"]).await);
    assert!(history.contains("APPROVED-BY"), "{history}");
    assert!(history.contains(&alice_name), "{history}");
    controller.stop().await;
    env.finish().await;
}
