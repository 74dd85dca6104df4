//! Authentication and authorization as a real API server does them: tokens
//! (the TokenRequest API, bound to a pod), 401 for a bad one, RBAC with its
//! real 403 messages (resources, subresources, resourceNames, watches by
//! name, non-resource paths, aggregated roles), impersonation, the review
//! APIs behind `kubectl auth can-i` and `whoami`, and a server-side apply that
//! creates needing `create`. Runs on the emulator and on a real cluster.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use shoal_emulator::harness::fixtures::PAUSE_IMAGE;
use shoal_emulator::harness::{Check, TestCluster, wait_for};

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

/// A ServiceAccount `name` of the test namespace and a client with its token.
async fn account(cluster: &TestCluster, name: &str) -> Client {
    kubectl_ok(cluster, &["create", "serviceaccount", name]).await;
    let token = cluster
        .service_account_token(cluster.namespace(), name, None)
        .await
        .expect("a token");
    cluster.client_with_token(&token).await.expect("a client")
}

fn user(cluster: &TestCluster, account: &str) -> String {
    format!("system:serviceaccount:{}:{account}", cluster.namespace())
}

/// The message and code of a refused request.
fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.message.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_token_is_refused_with_401_by_kube_and_by_kubectl() {
    let cluster = cluster().await;
    let stranger = cluster
        .client_with_token("not-a-token")
        .await
        .expect("a client");
    let maps: Api<ConfigMap> = Api::namespaced(stranger, cluster.namespace());
    let (code, _) = refusal(maps.list(&ListParams::default()).await);
    assert_eq!(code, 401);
    let output = cluster
        .kubectl(&["--token=not-a-token", "get", "configmaps"])
        .await
        .expect("kubectl runs");
    assert!(!output.success());
    assert!(
        output
            .stderr
            .contains("You must be logged in to the server"),
        "{}",
        output.stderr
    );
    cluster.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_kind_of_missing_grant_gets_a_real_servers_403_message() {
    let cluster = cluster().await;
    let bot = account(&cluster, "bot").await;
    let namespace = cluster.namespace().to_owned();
    let who = user(&cluster, "bot");
    let pods: Api<Pod> = Api::namespaced(bot.clone(), &namespace);
    assert_eq!(
        refusal(pods.list(&ListParams::default()).await),
        (
            403,
            format!(
                "pods is forbidden: User \"{who}\" cannot list resource \"pods\" in API group \"\" in the namespace \"{namespace}\""
            )
        )
    );
    assert_eq!(
        refusal(pods.get("web").await).1,
        format!(
            "pods \"web\" is forbidden: User \"{who}\" cannot get resource \"pods\" in API group \"\" in the namespace \"{namespace}\""
        )
    );
    let leases: Api<Lease> = Api::namespaced(bot.clone(), &namespace);
    assert_eq!(
        refusal(leases.get("x").await).1,
        format!(
            "leases.coordination.k8s.io \"x\" is forbidden: User \"{who}\" cannot get resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"{namespace}\""
        )
    );
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(bot.clone());
    assert_eq!(
        refusal(namespaces.list(&ListParams::default()).await).1,
        format!(
            "namespaces is forbidden: User \"{who}\" cannot list resource \"namespaces\" at the cluster scope"
        )
        .replace(
            "resource \"namespaces\" at",
            "resource \"namespaces\" in API group \"\" at"
        )
    );
    let evicted = pods.evict("web", &kube::api::EvictParams::default()).await;
    assert!(
        refusal(evicted)
            .1
            .contains("cannot create resource \"pods/eviction\""),
    );
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let (code, message) = refusal(bot.request_text(request).await);
    assert_eq!(code, 403);
    assert_eq!(
        message,
        format!("forbidden: User \"{who}\" cannot get path \"/metrics\"")
    );
    cluster.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_names_allow_only_the_named_object_and_a_watch_of_it() {
    let cluster = cluster().await;
    let member = account(&cluster, "member").await;
    kubectl_ok(
        &cluster,
        &[
            "create",
            "role",
            "own-lease",
            "--verb=get,list,watch,patch",
            "--resource=leases",
            "--resource-name=a-member",
        ],
    )
    .await;
    kubectl_ok(
        &cluster,
        &[
            "create",
            "rolebinding",
            "own-lease",
            "--role=own-lease",
            &format!("--serviceaccount={}:member", cluster.namespace()),
        ],
    )
    .await;
    let admin: Api<Lease> = Api::namespaced(cluster.client(), cluster.namespace());
    for name in ["a-member", "b-member"] {
        let lease: Lease = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        admin.create(&PostParams::default(), &lease).await.unwrap();
    }
    let leases: Api<Lease> = Api::namespaced(member, cluster.namespace());
    // Give RBAC a moment on a real server (the binding is cached briefly).
    wait_for(
        "the binding to take effect",
        Duration::from_secs(30),
        || {
            let leases = leases.clone();
            async move {
                match leases.get("a-member").await {
                    Ok(_) => Check::Done(()),
                    Err(error) => Check::Pending(error.to_string()),
                }
            }
        },
    )
    .await
    .unwrap();
    assert_eq!(refusal(leases.get("b-member").await).0, 403);
    assert_eq!(refusal(leases.list(&ListParams::default()).await).0, 403);
    let one = leases
        .list(&ListParams::default().fields("metadata.name=a-member"))
        .await
        .expect("a list selecting the named object by name is allowed");
    assert_eq!(one.items.len(), 1);
    let patch = json!({"metadata": {"annotations": {"touched": "yes"}}});
    leases
        .patch("a-member", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch of the named object");
    assert_eq!(
        refusal(
            leases
                .patch("b-member", &PatchParams::default(), &Patch::Merge(&patch))
                .await
        )
        .0,
        403
    );
    let created: Lease =
        serde_json::from_value(json!({"metadata": {"name": "a-member-2"}})).unwrap();
    assert_eq!(
        refusal(leases.create(&PostParams::default(), &created).await).0,
        403,
        "resourceNames never cover a create"
    );
    cluster.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn can_i_whoami_impersonation_and_aggregated_roles_answer_as_a_real_server() {
    let cluster = cluster().await;
    account(&cluster, "bot").await;
    let who = user(&cluster, "bot");
    let can_i = |args: &'static [&'static str]| {
        let cluster = &cluster;
        let who = who.clone();
        async move {
            let mut full = vec!["auth", "can-i"];
            full.extend_from_slice(args);
            let as_flag = format!("--as={who}");
            full.push(&as_flag);
            let output = cluster.kubectl(&full).await.expect("kubectl runs");
            output.stdout.trim().to_owned()
        }
    };
    assert_eq!(can_i(&["list", "pods"]).await, "no");
    // The aggregated `view` role picks up a role labelled for it.
    kubectl_ok(
        &cluster,
        &[
            "create",
            "rolebinding",
            "bot-view",
            "--clusterrole=view",
            &format!("--serviceaccount={}:bot", cluster.namespace()),
        ],
    )
    .await;
    assert_eq!(can_i(&["list", "pods"]).await, "yes");
    assert_eq!(can_i(&["delete", "pods"]).await, "no");
    assert_eq!(can_i(&["list", "secrets"]).await, "no");
    let name = format!("secrets-viewer-{}", cluster.namespace());
    cluster
        .kubectl_with_stdin(
            &["apply", "-f", "-"],
            Some(&format!(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {name}\n  labels:\n    rbac.authorization.k8s.io/aggregate-to-view: \"true\"\nrules:\n- apiGroups: [\"\"]\n  resources: [secrets]\n  verbs: [list]\n"
            )),
        )
        .await
        .expect("kubectl runs")
        .ok()
        .expect("the aggregated role applies");
    wait_for("the aggregation", Duration::from_secs(30), || async {
        match can_i(&["list", "secrets"]).await.as_str() {
            "yes" => Check::Done(()),
            other => Check::Pending(other.to_owned()),
        }
    })
    .await
    .unwrap();
    kubectl_ok(&cluster, &["delete", "clusterrole", &name]).await;
    // whoami with the bot's own token.
    let token = cluster
        .service_account_token(cluster.namespace(), "bot", None)
        .await
        .unwrap();
    let whoami = kubectl_ok(&cluster, &["auth", "whoami", &format!("--token={token}")]).await;
    assert!(whoami.contains(&who), "{whoami}");
    assert!(whoami.contains("system:serviceaccounts"), "{whoami}");
    // A ServiceAccount may not impersonate anyone.
    let output = cluster
        .kubectl(&[
            &format!("--token={token}"),
            "--as=system:admin",
            "get",
            "pods",
        ])
        .await
        .expect("kubectl runs");
    assert!(!output.success());
    assert!(
        output.stderr.contains(&format!(
            "User \"{who}\" cannot impersonate resource \"users\""
        )),
        "{}",
        output.stderr
    );
    cluster.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_bound_to_a_pod_names_the_pod_and_stops_working_when_it_is_gone() {
    let cluster = cluster().await;
    kubectl_ok(&cluster, &["create", "serviceaccount", "worker"]).await;
    kubectl_ok(
        &cluster,
        &[
            "run",
            "member-0",
            &format!("--image={PAUSE_IMAGE}"),
            "--restart=Never",
        ],
    )
    .await;
    let token = cluster
        .service_account_token(cluster.namespace(), "worker", Some("member-0"))
        .await
        .expect("a pod-bound token");
    let review = |token: String| {
        let client = cluster.client();
        async move {
            let request = json!({
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            });
            let request = http::Request::post("/apis/authentication.k8s.io/v1/tokenreviews")
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(serde_json::to_vec(&request).unwrap())
                .unwrap();
            client
                .request::<serde_json::Value>(request)
                .await
                .expect("a TokenReview")
        }
    };
    let reviewed = review(token.clone()).await;
    assert_eq!(reviewed["status"]["authenticated"], true, "{reviewed}");
    assert_eq!(
        reviewed["status"]["user"]["extra"]["authentication.kubernetes.io/pod-name"],
        json!(["member-0"]),
        "{reviewed}"
    );
    kubectl_ok(
        &cluster,
        &["delete", "pod", "member-0", "--grace-period=0", "--force"],
    )
    .await;
    wait_for("the token to stop working", Duration::from_secs(60), || {
        let review = review(token.clone());
        async move {
            let reviewed = review.await;
            if reviewed["status"]["authenticated"] == false {
                Check::Done(())
            } else {
                Check::Pending(reviewed.to_string())
            }
        }
    })
    .await
    .unwrap();
    let stale = cluster.client_with_token(&token).await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(stale, cluster.namespace());
    assert_eq!(refusal(maps.list(&ListParams::default()).await).0, 401);
    cluster.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_side_apply_that_creates_needs_create_as_well_as_patch() {
    let cluster = cluster().await;
    let patcher = account(&cluster, "patcher").await;
    kubectl_ok(
        &cluster,
        &[
            "create",
            "role",
            "patch-only",
            "--verb=get,patch",
            "--resource=configmaps",
        ],
    )
    .await;
    kubectl_ok(
        &cluster,
        &[
            "create",
            "rolebinding",
            "patch-only",
            "--role=patch-only",
            &format!("--serviceaccount={}:patcher", cluster.namespace()),
        ],
    )
    .await;
    let maps: Api<ConfigMap> = Api::namespaced(patcher, cluster.namespace());
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "new"}, "data": {"a": "1"}});
    let params = PatchParams::apply("test");
    let refused = wait_for(
        "the binding to take effect",
        Duration::from_secs(30),
        || {
            let maps = maps.clone();
            let body = body.clone();
            let params = params.clone();
            async move {
                match maps.patch("new", &params, &Patch::Apply(&body)).await {
                    Err(kube::Error::Api(status))
                        if status.code == 403 && status.message.contains("cannot create") =>
                    {
                        Check::Done(status.message.clone())
                    }
                    other => Check::Pending(format!("{other:?}")),
                }
            }
        },
    )
    .await
    .unwrap();
    assert!(
        refused.contains("configmaps \"new\" is forbidden"),
        "{refused}"
    );
    cluster.cleanup().await;
}
