//! `manifests/crd.yaml` must be exactly what the Swarm types generate.

#[test]
fn the_committed_crd_manifest_matches_the_generated_one() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/crd.yaml");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = shoal_controller::crd::crd_yaml();
    assert!(
        committed == generated,
        "{} is out of date with controller/src/crd.rs; regenerate it with \
         `cargo run -p shoal-controller -- crd > manifests/crd.yaml`",
        path.display()
    );
}

#[test]
fn the_crd_declares_short_name_status_subresource_and_printer_columns() {
    let yaml = shoal_controller::crd::crd_yaml();
    for needle in [
        "name: swarms.shoal.dev",
        "- sw",
        "status: {}",
        "name: Ready",
        "name: Jobs",
        "name: Revision",
        "name: Pending",
        "name: Phase",
        "name: Age",
        "scope: Namespaced",
    ] {
        assert!(
            yaml.contains(needle),
            "generated CRD lacks `{needle}`:\n{yaml}"
        );
    }
}

#[test]
fn the_committed_deployment_plan_crd_matches_the_generated_one() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../manifests/crd-deploymentplan.yaml");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = shoal_controller::deployment_plan::crd_yaml();
    assert!(
        committed == generated,
        "{} is out of date with controller/src/deployment_plan.rs; regenerate it with \
         `cargo run -p shoal-controller -- crd deploymentplan > manifests/crd-deploymentplan.yaml`",
        path.display()
    );
}

#[test]
fn the_deployment_plan_crd_declares_short_name_status_and_printer_columns() {
    let yaml = shoal_controller::deployment_plan::crd_yaml();
    for needle in [
        "name: deploymentplans.shoal.dev",
        "- dplan",
        "status: {}",
        "name: Swarm",
        "name: Instances",
        "name: Deployment",
        "name: Pending",
        "scope: Namespaced",
    ] {
        assert!(
            yaml.contains(needle),
            "generated CRD lacks `{needle}`:\n{yaml}"
        );
    }
}
