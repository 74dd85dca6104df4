//! Maintenance windows end to end, through kubectl and the plugin. The
//! controller's clock is the real one here, so each test uses a window closed
//! now (it opens twelve hours from now) and one open now; the transition at
//! the opening is tested with an injected clock in the decide tests.

use crate::common;
use crate::plugin_common;

use std::time::Duration;

use common::{Env, all_jobs, eventually, job_keys, manual_plan_yaml, swarm_yaml};
use kube::Api;
use plugin_common::shoal_ok;
use shoal_controller::api::deployment_plan::DeploymentPlan;

const WAIT: Duration = Duration::from_secs(30);

/// A daily window of an hour opening twelve hours from now (closed now), in `zone`.
fn closed_window(zone: &str) -> String {
    let hour = (jiff::Timestamp::now().as_second() / 3600 + 12) % 24;
    format!("    - {{start: \"0 {hour} * * *\", duration: 1h, timeZone: {zone}}}\n")
}

/// A window that is always open: one opening every minute, each lasting an hour.
const OPEN_WINDOW: &str = "    - {start: \"* * * * *\", duration: 1h}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swarm_revision_waits_for_a_closed_window_and_applies_in_an_open_one() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    let closed = format!("  approval:\n    windows:\n{}", closed_window("UTC"));
    env.apply(&swarm_yaml("demo", &job_keys(6), &closed)).await;

    let next = eventually("the revision waits for the window", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        (status.phase.as_deref() == Some("WaitingForWindow")).then_some(status.next_window?)
    })
    .await;
    assert!(env.slices("demo").await.is_empty(), "nothing written");
    let table = env.kubectl(&["get", "sw", "demo"]).await;
    assert!(
        table.contains("NEXT-WINDOW") && table.contains(&next),
        "{table}"
    );
    let described = env.kubectl(&["describe", "sw", "demo"]).await;
    assert!(
        described.contains("WaitingForWindow") && described.contains("window 1"),
        "{described}"
    );
    let diff = shoal_ok(&env, &["diff", "demo"]).await;
    assert!(
        diff.contains("maintenance window") && diff.contains(&next),
        "{diff}"
    );
    let status = shoal_ok(&env, &["status", "demo"]).await;
    assert!(
        status.contains("Next window") && status.contains(&next),
        "{status}"
    );

    // An open window lets the approved revision through.
    let open = format!("{closed}{OPEN_WINDOW}");
    env.apply(&swarm_yaml("demo", &job_keys(6), &open)).await;
    eventually("the revision applies", WAIT, || async {
        let slices = env.slices("demo").await;
        (all_jobs(&slices) == job_keys(6)).then_some(())
    })
    .await;
    eventually("status.nextWindow cleared", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        (status.next_window.is_none() && status.phase.as_deref() != Some("WaitingForWindow"))
            .then_some(())
    })
    .await;
    drop(controller);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_the_api_server_or_the_controller_cannot_read_are_refused_naming_them() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 1).await;
    let four_fields = "  approval:\n    windows:\n    - {start: \"0 2 * *\", duration: 1h}\n";
    let refused = env
        .cluster
        .kubectl_with_stdin(
            &["apply", "-f", "-"],
            Some(&swarm_yaml("demo", &job_keys(2), four_fields)),
        )
        .await
        .expect("kubectl runs");
    assert!(
        !refused.success() && refused.stderr.contains("start"),
        "{}",
        refused.stderr
    );
    let bad_hour = "  approval:\n    windows:\n    - {start: \"0 25 * * *\", duration: 1h}\n";
    env.apply(&swarm_yaml("demo", &job_keys(2), bad_hour)).await;
    let message = eventually("Degraded InvalidWindow", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        status
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Degraded" && c.reason == "InvalidWindow")
            .map(|c| c.message)
    })
    .await;
    assert!(
        message.contains("window 1") && message.contains("0 25 * * *"),
        "{message}"
    );
    assert!(env.slices("demo").await.is_empty());
    drop(controller);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plans_approved_operations_wait_for_a_closed_window_and_go_on_in_an_open_one() {
    let env = Env::start().await;
    env.install_plan_crd().await;
    let controller = env.start_controller();
    env.apply(&swarm_yaml("demo", &job_keys(2), "")).await;
    env.pool("worker", "demo", 2).await;
    env.ready_pool("worker", 2).await;
    let automatic = |windows: &str| {
        manual_plan_yaml("web", 2).replace(
            "  approval: {policy: Manual}\n",
            &format!("  approval:\n    policy: Automatic\n    windows:\n{windows}"),
        )
    };
    env.apply(&automatic(&closed_window("Europe/Berlin"))).await;
    let api: Api<DeploymentPlan> = Api::namespaced(env.client.clone(), &env.namespace);
    let next = eventually("the operations wait for the window", WAIT, || async {
        let status = api.get("web").await.ok()?.status?;
        (status.phase.as_deref() == Some("WaitingForWindow")).then_some(status.next_window?)
    })
    .await;
    let status = api.get("web").await.unwrap().status.unwrap();
    assert!(status.instances.is_empty(), "{:?}", status.instances);
    assert_eq!(status.pending_operations, 0, "nothing waits for a person");
    let table = env.kubectl(&["get", "dplan", "web"]).await;
    assert!(table.contains(&next), "{table}");
    let plan = shoal_ok(&env, &["plan", "web"]).await;
    assert!(
        plan.contains("Next window") && plan.contains(&next),
        "{plan}"
    );

    let both = format!("{}{OPEN_WINDOW}", closed_window("Europe/Berlin"));
    env.apply(&automatic(&both)).await;
    eventually("the operations go on", WAIT, || async {
        let status = api.get("web").await.ok()?.status?;
        (status.instances.len() == 2 && status.next_window.is_none()).then_some(())
    })
    .await;
    drop(controller);
}
