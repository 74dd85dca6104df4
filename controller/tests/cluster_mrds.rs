//! MRDS users at home: the MRDS README's example plan, imported with
//! `kubectl shoal import-mrds` as written, is accepted by the API server and
//! placed on the Swarm's capable members.

use crate::common;
use crate::plugin_common;

use std::time::Duration;

use common::{Env, eventually, job_keys, swarm_yaml};
use kube::Api;
use plugin_common::{shoal, shoal_json, shoal_ok};
use shoal_controller::api::deployment_plan::DeploymentPlan;

const WAIT: Duration = Duration::from_secs(30);

/// The plan of the MRDS README's walkthrough, verbatim (shared with the sandbox's test).
const MRDS_README_PLAN: &str = include_str!("../../tests/sandbox/plans/mrds-readme-plan.yaml");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mrds_readme_plan_imports_as_written_places_on_capable_members_and_members_shows_what_remains()
 {
    let env = Env::start().await;
    env.install_plan_crd().await;
    let controller = env.start_controller();
    env.apply(&swarm_yaml("demo", &job_keys(2), "")).await;
    // Two pools as MRDS's `node list` shows its nodes (64 cores, 512 GiB, of which 4 and
    // 32 system-reserved): one with the GPUs and CPU the plan asks for, one without.
    for (pool, capabilities) in [
        ("gpu", "GPU=nvidia-v100:3,nvidia-p100:2;CPU=intel-xeon"),
        ("plain", "CPU=intel-xeon"),
    ] {
        env.pool(pool, "demo", 2).await;
        env.kubectl(&[
            "annotate",
            "statefulset",
            pool,
            "shoal.dev/capacity=cores=64,memory=512",
            "shoal.dev/reserved=cores=4,memory=32",
            &format!("shoal.dev/capabilities={capabilities}"),
        ])
        .await;
        env.ready_pool(pool, 2).await;
    }
    // The README's plan names its own namespace; here it is the test's.
    let plan = MRDS_README_PLAN.replace("nginx-namespace", &env.namespace);
    let file = std::env::temp_dir().join(format!("{}-mrds-plan.yaml", env.namespace));
    std::fs::write(&file, &plan).expect("the plan file is written");
    let file = file.to_str().expect("a UTF-8 path");

    // Persistent volumes on pods the plan does not create are refused, naming the field.
    let refused = shoal(&env, &["import-mrds", file, "--swarm", "demo", "--apply"]).await;
    assert!(!refused.success, "{}", refused.stdout);
    assert!(
        refused.stderr.contains(
            "plans[0].applications[0].persistentVolumes: persistent volumes have no meaning here"
        ),
        "{}",
        refused.stderr
    );

    // The server checks the converted plan and stores nothing on --dry-run=server.
    let args = [
        "import-mrds",
        file,
        "--swarm",
        "demo",
        "--instances",
        "2",
        "--skip-persistent-volumes",
    ];
    let dry = shoal(&env, &[&args[..], &["--dry-run=server"]].concat()).await;
    assert!(dry.success, "{}", dry.stderr);
    assert!(dry.stdout.contains("Dry run (server)"), "{}", dry.stdout);
    assert!(
        dry.stderr
            .contains("plans[0].applications[0].persistentVolumes (2 volumes) left out"),
        "{}",
        dry.stderr
    );
    let plans: Api<DeploymentPlan> = Api::namespaced(env.client.clone(), &env.namespace);
    assert!(
        plans
            .get_opt("nginx-deployment-plan")
            .await
            .unwrap()
            .is_none()
    );

    let applied = shoal(&env, &[&args[..], &["--apply"]].concat()).await;
    assert!(applied.success, "{}", applied.stderr);
    assert!(
        applied.stdout.contains("nginx-deployment-plan"),
        "{}",
        applied.stdout
    );
    let stored = plans
        .get("nginx-deployment-plan")
        .await
        .expect("the plan is stored");
    assert_eq!(stored.spec.service_name.as_deref(), Some("nginx-service"));
    let application = &stored.spec.applications[0];
    assert_eq!(application.name, "nginx-payload");
    assert_eq!(application.resources.get("memory"), Some(&64));
    assert_eq!(application.ports.len(), 2);

    // Both instances land on the GPU pool, the only one meeting `gte` and `eq`.
    let instances = eventually("both instances placed", WAIT, || async {
        let status = plans
            .get("nginx-deployment-plan")
            .await
            .ok()?
            .status
            .unwrap_or_default();
        (status.instances.len() == 2 && status.unplaced.is_empty()).then_some(status.instances)
    })
    .await;
    assert!(
        instances
            .iter()
            .all(|instance| instance.member.starts_with("gpu-")),
        "{instances:?}"
    );

    // `kubectl shoal members`, as MRDS's `node list`: total, reserved and remaining.
    let report: serde_json::Value = shoal_json(&env, &["members", "demo"]).await;
    let members = report["swarms"][0]["members"]
        .as_array()
        .expect("a member list")
        .clone();
    assert_eq!(members.len(), 4, "{report}");
    for member in &members {
        let name = member["name"].as_str().unwrap_or_default();
        let holds = !member["instances"]
            .as_array()
            .expect("instances")
            .is_empty();
        assert_eq!(holds, name.starts_with("gpu-"), "{report}");
        assert_eq!(member["capacity"]["cores"], 64, "{report}");
        assert_eq!(member["reserved"]["memory"], 32, "{report}");
        let (cores, memory) = if holds { (56, 416) } else { (60, 480) };
        assert_eq!(member["remaining"]["cores"], cores, "{report}");
        assert_eq!(member["remaining"]["memory"], memory, "{report}");
        assert_eq!(member["state"], "Ready", "{report}");
    }
    let table = shoal_ok(&env, &["members", "demo"]).await;
    for column in [
        "Member",
        "Pool",
        "Domain",
        "State",
        "Capacity",
        "Remaining",
        "Instances",
        "Jobs",
    ] {
        assert!(table.contains(column), "{table}");
    }
    let wide = shoal_ok(&env, &["members", "-o", "wide"]).await;
    assert!(
        wide.contains("nvidia-v100:3") && wide.contains("Reserved"),
        "{wide}"
    );
    controller.stop().await;
    env.finish().await;
}
