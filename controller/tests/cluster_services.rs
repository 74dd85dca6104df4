//! A plan's headless Service (`spec.serviceName`) and its ports, as a kubectl user
//! sees them: `kubectl get svc,endpointslices` lists exactly the members holding the
//! plan's instances and follows a relocation; a Service name a user holds is
//! reported, never touched; two plans needing one port never share a member.

use crate::cluster_plans::{WAIT, patch_plan, plan_yaml, report_installed, settled_plan, status};
use crate::common;
use crate::plugin_common;

use std::collections::BTreeSet;

use common::{Env, eventually};
use plugin_common::shoal_ok;

/// The IP of pod `pod`.
async fn pod_ip(env: &Env, pod: &str) -> String {
    env.kubectl(&["get", "pod", pod, "-o", "jsonpath={.status.podIP}"])
        .await
}

/// The addresses of the Service's EndpointSlices that Shoal manages, with whether
/// each is ready. (A user's Service with a selector gets the cluster's own slices,
/// managed by `endpointslice-controller.k8s.io` on a real control plane: not Shoal's.)
async fn endpoints(env: &Env, service: &str) -> BTreeSet<(String, bool)> {
    let selector = format!("kubernetes.io/service-name={service}");
    let listed = env
        .kubectl(&["get", "endpointslices", "-l", &selector, "-o", "json"])
        .await;
    let listed: serde_json::Value = serde_json::from_str(&listed).expect("JSON");
    let mut found = BTreeSet::new();
    for slice in listed["items"].as_array().into_iter().flatten() {
        if slice["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"]
            != "shoal-controller.shoal.dev"
        {
            continue;
        }
        for endpoint in slice["endpoints"].as_array().into_iter().flatten() {
            let ready = endpoint["conditions"]["ready"].as_bool().unwrap_or(false);
            for address in endpoint["addresses"].as_array().into_iter().flatten() {
                found.insert((address.as_str().unwrap_or_default().to_owned(), ready));
            }
        }
    }
    found
}

async fn addresses_of(env: &Env, members: impl IntoIterator<Item = &String>) -> BTreeSet<String> {
    let mut addresses = BTreeSet::new();
    for member in members {
        addresses.insert(pod_ip(env, member).await);
    }
    addresses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plans_headless_service_lists_exactly_the_members_holding_its_instances_and_follows_a_relocation()
 {
    let env = Env::start().await;
    env.install_plan_crd().await;
    let controller = env.start_controller();
    let (uids, members) = settled_plan(&env, 2, "Automatic").await;
    patch_plan(&env, r#"{"spec":{"serviceName":"web-svc"}}"#).await;

    let holding = addresses_of(&env, members.values()).await;
    let wanted: BTreeSet<(String, bool)> = holding.iter().map(|ip| (ip.clone(), true)).collect();
    eventually("the slices list the two members, ready", WAIT, || async {
        (endpoints(&env, "web-svc").await == wanted).then_some(())
    })
    .await;
    let service: serde_json::Value =
        serde_json::from_str(&env.kubectl(&["get", "svc", "web-svc", "-o", "json"]).await)
            .expect("JSON");
    assert_eq!(service["spec"]["clusterIP"], "None");
    assert!(service["spec"].get("selector").is_none(), "{service}");
    assert_eq!(service["spec"]["ports"][0]["port"], 80);
    assert_eq!(
        service["metadata"]["ownerReferences"][0]["kind"],
        "DeploymentPlan"
    );
    let listing = env.kubectl(&["get", "svc,endpointslices"]).await;
    assert!(
        listing.contains("web-svc") && listing.contains("web-svc-shoal-0"),
        "{listing}"
    );
    let plan = shoal_ok(&env, &["plan", "web"]).await;
    assert!(
        plan.contains("web-svc (headless): 2/2 endpoints ready, ports TCP/80"),
        "{plan}"
    );

    // RELOCATE web-0 to a member holding nothing: the new member is listed (not ready)
    // beside the old one, then alone once it reports installed.
    let free = ["east-0", "east-1", "west-0", "west-1"]
        .into_iter()
        .find(|member| !members.values().any(|held| held == member))
        .expect("a free member");
    shoal_ok(&env, &["relocate", "web", "web-0", "--to", free]).await;
    let new_ip = pod_ip(&env, free).await;
    let old_ip = pod_ip(&env, &members["web-0"]).await;
    eventually("the new member is listed, not ready yet", WAIT, || async {
        endpoints(&env, "web-svc")
            .await
            .contains(&(new_ip.clone(), false))
            .then_some(())
    })
    .await;
    let relocating = status(&env, "web").await;
    report_installed(&env, &uids, &relocating).await;
    let wanted: BTreeSet<(String, bool)> = holding
        .iter()
        .filter(|ip| **ip != old_ip)
        .chain(std::iter::once(&new_ip))
        .map(|ip| (ip.clone(), true))
        .collect();
    eventually("the slices follow the relocation", WAIT, || async {
        (endpoints(&env, "web-svc").await == wanted).then_some(())
    })
    .await;

    // Renaming the Service removes the old one and its slices.
    patch_plan(&env, r#"{"spec":{"serviceName":"web-renamed"}}"#).await;
    eventually("the old Service is gone", WAIT, || async {
        let (found, _) = env.kubectl_status(&["get", "svc", "web-svc"]).await;
        (!found && endpoints(&env, "web-svc").await.is_empty()).then_some(())
    })
    .await;
    eventually("the new Service lists the members", WAIT, || async {
        (endpoints(&env, "web-renamed").await == wanted).then_some(())
    })
    .await;
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_name_a_user_holds_is_reported_and_never_touched() {
    let env = Env::start().await;
    env.install_plan_crd().await;
    let controller = env.start_controller();
    env.apply(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: taken\nspec:\n  selector: {app: mine}\n  ports: [{port: 8080}]\n",
    )
    .await;
    let before = env
        .kubectl(&[
            "get",
            "svc",
            "taken",
            "-o",
            "jsonpath={.metadata.resourceVersion}",
        ])
        .await;
    let (_, _) = settled_plan(&env, 1, "Automatic").await;
    patch_plan(&env, r#"{"spec":{"serviceName":"taken"}}"#).await;
    let message = eventually("Degraded names both objects", WAIT, || async {
        status(&env, "web")
            .await
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Degraded" && c.status == "True")
            .filter(|c| c.reason == "OwnershipConflict")
            .map(|c| c.message)
    })
    .await;
    assert!(
        message.contains("DeploymentPlan web") && message.contains("Service taken"),
        "{message}"
    );
    let events = env
        .kubectl(&[
            "get",
            "events",
            "--field-selector",
            "reason=OwnershipConflict",
        ])
        .await;
    assert!(events.contains("Service taken"), "{events}");
    let after = env
        .kubectl(&[
            "get",
            "svc",
            "taken",
            "-o",
            "jsonpath={.metadata.resourceVersion}",
        ])
        .await;
    assert_eq!(before, after, "the user's Service was written");
    assert!(endpoints(&env, "taken").await.is_empty());
    let plan = shoal_ok(&env, &["plan", "web"]).await;
    assert!(plan.contains("taken: not the plan's"), "{plan}");
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_plans_needing_one_port_never_share_a_member() {
    let env = Env::start().await;
    env.install_plan_crd().await;
    let controller = env.start_controller();
    // web holds TCP/80 on two of the four capable members.
    let (_, web_members) = settled_plan(&env, 2, "Automatic").await;
    // api (TCP/80 too) asks for three: two fit, the third names the port and its holder.
    env.apply(&plan_yaml("api", 3, "nginx:1.25", "v100", "Automatic"))
        .await;
    let api = eventually("api places two and reports the third", WAIT, || async {
        let api = status(&env, "api").await;
        (api.instances.len() == 2 && api.unplaced.len() == 1).then_some(api)
    })
    .await;
    let web: BTreeSet<&String> = web_members.values().collect();
    for entry in &api.instances {
        assert!(!web.contains(&entry.member), "{entry:?} shares with web");
    }
    let reason = &api.unplaced[0].reason;
    assert!(
        reason.contains("TCP/80 on") && reason.contains("held by instance web-"),
        "{reason}"
    );
    controller.stop().await;
    env.finish().await;
}
