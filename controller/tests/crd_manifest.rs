//! `manifests/crd.yaml` must be exactly what the Swarm types generate.

#[test]
fn the_committed_crd_manifest_matches_the_generated_one() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/crd.yaml");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = shoal_controller::api::swarm::crd_yaml();
    assert!(
        committed == generated,
        "{} is out of date with controller/src/api/swarm.rs; regenerate it with \
         `cargo run -p shoal-controller -- crd > manifests/crd.yaml`",
        path.display()
    );
}

#[test]
fn the_crd_declares_short_name_status_subresource_and_printer_columns() {
    let yaml = shoal_controller::api::swarm::crd_yaml();
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
    let generated = shoal_controller::api::deployment_plan::crd_yaml();
    assert!(
        committed == generated,
        "{} is out of date with controller/src/api/deployment_plan.rs; regenerate it with \
         `cargo run -p shoal-controller -- crd deploymentplan > manifests/crd-deploymentplan.yaml`",
        path.display()
    );
}

#[test]
fn the_deployment_plan_crd_declares_short_name_status_and_printer_columns() {
    let yaml = shoal_controller::api::deployment_plan::crd_yaml();
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

/// What the README's `cargo run -p shoal-controller -- crd [deploymentplan]` prints: the
/// binary's own output, read back as a CustomResourceDefinition, equal to the committed file.
fn crd_command_output(args: &[&str]) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_shoal-controller"))
        .args(args)
        .output()
        .expect("shoal-controller runs");
    assert!(
        output.status.success(),
        "shoal-controller {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("the CRD is UTF-8")
}

#[test]
fn the_crd_command_prints_each_crd_as_a_valid_custom_resource_definition() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let manifests = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests");
    for (args, name, kind, committed) in [
        (&["crd"][..], "swarms.shoal.dev", "Swarm", "crd.yaml"),
        (
            &["crd", "deploymentplan"][..],
            "deploymentplans.shoal.dev",
            "DeploymentPlan",
            "crd-deploymentplan.yaml",
        ),
    ] {
        let printed = crd_command_output(args);
        let crd: CustomResourceDefinition = serde_saphyr::from_str(&printed)
            .unwrap_or_else(|error| panic!("`shoal-controller {args:?}` is not a CRD: {error}"));
        assert_eq!(crd.metadata.name.as_deref(), Some(name));
        assert_eq!(crd.spec.names.kind, kind);
        let served: Vec<_> = crd.spec.versions.iter().filter(|v| v.served).collect();
        assert!(
            served.iter().all(|version| version
                .schema
                .as_ref()
                .is_some_and(|schema| schema.open_api_v3_schema.is_some())),
            "{name}: a served version without a schema"
        );
        assert!(!served.is_empty(), "{name} serves no version");
        let on_disk = std::fs::read_to_string(manifests.join(committed)).unwrap_or_default();
        assert!(
            printed == on_disk,
            "`shoal-controller {}` differs from manifests/{committed}",
            args.join(" ")
        );
    }
}

/// `cargo run -p shoal-controller -- crd` needs a default binary: the package has two
/// (`shoal-controller` and the `kubectl-shoal` plugin).
#[test]
fn cargo_run_without_bin_runs_the_controller_binary() {
    let manifest = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"),
    )
    .expect("controller/Cargo.toml");
    assert!(
        manifest
            .lines()
            .any(|line| line.replace(' ', "") == "default-run=\"shoal-controller\""),
        "controller/Cargo.toml lacks default-run = \"shoal-controller\""
    );
}
