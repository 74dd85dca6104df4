//! A member's update domain is its Node's `topology.kubernetes.io/zone` when its
//! pool declares no `shoal.dev/update-domain`; where the controller may not read
//! Nodes, the domain stays the pool's own.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{Env, eventually, job_keys, swarm_yaml};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use shoal_controller::Settings;
use shoal_controller::api::deployment_plan::DeploymentPlan;
use shoal_controller::cluster::nodes::node_zones;

const WAIT: Duration = Duration::from_secs(30);

fn plan_yaml(instances: u32) -> String {
    format!(
        r#"apiVersion: shoal.dev/v1alpha1
kind: DeploymentPlan
metadata:
  name: web
spec:
  swarm: demo
  applications:
  - name: nginx
  deployment:
    instances: {instances}
"#
    )
}

/// The Node the pod runs on.
async fn node_of(env: &Env, pod: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &env.namespace);
    pods.get(pod)
        .await
        .expect("the pod exists")
        .spec
        .and_then(|spec| spec.node_name)
        .expect("the pod is bound to a Node")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_without_a_declared_domain_takes_its_nodes_zone_where_the_controller_may_read_nodes()
{
    // Labelling a Node is cluster-wide: only on the emulator, which is the test's own.
    let Some(env) = Env::start_emulated("labels a Node").await else {
        return;
    };
    env.install_plan_crd().await;
    env.apply(&swarm_yaml("demo", &job_keys(2), "")).await;
    env.pool("zoned", "demo", 1).await;
    env.pool("declared", "demo", 1).await;
    env.kubectl(&[
        "annotate",
        "statefulset",
        "declared",
        "shoal.dev/update-domain=ud-1",
    ])
    .await;
    env.ready_pool("zoned", 1).await;
    env.ready_pool("declared", 1).await;
    let node = node_of(&env, "zoned-0").await;
    env.kubectl(&[
        "label",
        "node",
        &node,
        "topology.kubernetes.io/zone=zone-a",
        "--overwrite",
    ])
    .await;
    // A namespace-scoped controller (as the namespace-scoped install runs it) may not read
    // Nodes and does not ask: the undeclared pool is its own domain.
    let scoped = env.start_controller();
    env.apply(&plan_yaml(2)).await;
    let plans: Api<DeploymentPlan> = Api::namespaced(env.client.clone(), &env.namespace);
    let placed = |plans: Api<DeploymentPlan>| async move {
        let status = plans.get("web").await.ok()?.status.unwrap_or_default();
        (status.instances.len() == 2).then(|| {
            status
                .instances
                .iter()
                .map(|instance| (instance.member.clone(), instance.update_domain.clone()))
                .collect::<BTreeSet<_>>()
        })
    };
    let domains = eventually("both instances placed", WAIT, || placed(plans.clone())).await;
    assert_eq!(
        domains,
        BTreeSet::from([
            ("declared-0".to_owned(), "ud-1".to_owned()),
            ("zoned-0".to_owned(), "zoned".to_owned()),
        ])
    );
    scoped.stop().await;
    env.kubectl(&["delete", "dplan", "web", "--wait=true"])
        .await;

    // A cluster-wide controller reads the Node: the undeclared pool's member is in its zone.
    let controller = env.start_controller_with(Settings {
        namespace: None,
        resync: Duration::from_secs(5),
        ..Settings::default()
    });
    env.apply(&plan_yaml(2)).await;
    let domains = eventually("both instances placed in their zones", WAIT, || async {
        placed(plans.clone())
            .await
            .filter(|domains| domains.contains(&("zoned-0".to_owned(), "zone-a".to_owned())))
    })
    .await;
    assert_eq!(
        domains,
        BTreeSet::from([
            ("declared-0".to_owned(), "ud-1".to_owned()),
            ("zoned-0".to_owned(), "zone-a".to_owned()),
        ])
    );
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn where_nodes_may_not_be_read_no_zone_is_known_and_the_refusal_is_reported() {
    let Some(env) = Env::start_emulated("needs the emulator's RBAC").await else {
        return;
    };
    env.pool("zoned", "demo", 1).await;
    env.ready_pool("zoned", 1).await;
    let node = node_of(&env, "zoned-0").await;
    env.kubectl(&["label", "node", &node, "topology.kubernetes.io/zone=zone-a"])
        .await;
    // A ServiceAccount bound to nothing, as the namespace-scoped install's controller is
    // for cluster-scoped objects.
    env.kubectl(&["create", "serviceaccount", "no-nodes"]).await;
    let token = env
        .cluster
        .service_account_token(&env.namespace, "no-nodes", None)
        .await
        .expect("a token");
    let refused_client = env
        .cluster
        .client_with_token(&token)
        .await
        .expect("a client");
    let refused = node_zones(&refused_client, BTreeSet::from([node.clone()]))
        .await
        .expect("a 403 is no error");
    assert!(refused.refused, "{refused:?}");
    assert_eq!(refused.zone(Some(&node)), None);

    let allowed = node_zones(&env.client, BTreeSet::from([node.clone()]))
        .await
        .expect("the admin reads Nodes");
    assert!(!allowed.refused);
    assert_eq!(allowed.zone(Some(&node)).as_deref(), Some("zone-a"));
    env.finish().await;
}
