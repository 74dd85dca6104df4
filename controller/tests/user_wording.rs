//! What a user reads speaks of Shoal's own concepts: no names of the documents Shoal was
//! designed from (`kubectl explain swarm.spec` shows the CRD's descriptions verbatim).
//! Users read the README, the book outside its contributing chapter, the CRDs, the help
//! texts and the shipped manifests.

use std::path::Path;
use std::process::Command;

use crate::documents;

/// Words that only make sense inside the project's history. MRDS is not among them: since
/// `kubectl shoal import-mrds` and the "Coming from MRDS" guide, it is a plan format users
/// bring and a tool they come from, named where they meet it.
const INTERNAL_WORDS: [&str; 3] = ["seed 0", "k8s-swarm", "seed-compatible"];

/// The internal words found in `text` (case-insensitive), each with its line.
fn internal_words(text: &str) -> Vec<String> {
    text.lines()
        .filter(|line| {
            let lower = line.to_lowercase();
            INTERNAL_WORDS.iter().any(|word| lower.contains(word))
        })
        .map(str::to_owned)
        .collect()
}

/// Fails naming each text and line that holds an internal word.
fn assert_no_internal_words(texts: &[(String, String)]) {
    let found: Vec<String> = texts
        .iter()
        .flat_map(|(origin, text)| {
            internal_words(text)
                .into_iter()
                .map(move |line| format!("{origin}: {line}"))
        })
        .collect();
    assert!(found.is_empty(), "{}", found.join("\n"));
}

fn help(binary: &str, args: &[&str]) -> String {
    let output = Command::new(binary)
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("running {binary} {args:?}: {error}"));
    assert!(output.status.success(), "{binary} {args:?} failed");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The subcommands listed under `Commands:` in a clap help text.
fn subcommands(help_text: &str) -> Vec<String> {
    help_text
        .split("Commands:\n")
        .nth(1)
        .unwrap_or_default()
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// Every help text of a binary: the top level and each subcommand's.
fn all_help(binary: &str) -> Vec<(String, String)> {
    let top = help(binary, &["--help"]);
    let names = subcommands(&top);
    assert!(
        !names.is_empty(),
        "{binary} --help lists no commands:\n{top}"
    );
    let mut texts = vec![(format!("{binary} --help"), top)];
    for name in names {
        let text = help(binary, &[&name, "--help"]);
        texts.push((format!("{binary} {name} --help"), text));
    }
    texts
}

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("reading {relative}: {error}"))
}

#[test]
fn the_internal_word_check_finds_what_it_looks_for() {
    assert_eq!(
        internal_words("fine\nthe format of k8s-swarm\nas in seed 000\nimported from MRDS\n").len(),
        2
    );
}

#[test]
fn crds_and_help_texts_use_no_internal_names() {
    let mut texts = vec![
        (
            "the Swarm CRD".to_owned(),
            shoal_controller::api::swarm::crd_yaml(),
        ),
        (
            "the DeploymentPlan CRD".to_owned(),
            shoal_controller::api::deployment_plan::crd_yaml(),
        ),
    ];
    texts.extend(all_help(env!("CARGO_BIN_EXE_shoal-controller")));
    texts.extend(all_help(env!("CARGO_BIN_EXE_kubectl-shoal")));
    assert_no_internal_words(&texts);
}

#[test]
fn the_sidecar_help_uses_no_internal_names() {
    use clap::CommandFactory;
    let help = shoal_worker::Settings::command()
        .render_long_help()
        .to_string();
    assert!(
        help.contains("--pod-name"),
        "not the sidecar's help:\n{help}"
    );
    assert_no_internal_words(&[("shoal-worker --help".to_owned(), help)]);
}

#[test]
fn the_user_documents_leave_out_only_the_contributing_chapter() {
    let users: Vec<std::path::PathBuf> = documents::user_documents();
    assert!(users.iter().any(|page| page.ends_with("README.md")));
    assert!(
        users
            .iter()
            .any(|page| page.ends_with("docs/src/how-to/troubleshooting.md"))
    );
    assert!(
        !users
            .iter()
            .any(|page| page.starts_with("docs/src/contributing"))
    );
    assert!(
        documents::documents()
            .iter()
            .any(|page| page.ends_with("docs/src/contributing/tests.md")),
        "the contributing chapter is a document too"
    );
}

#[test]
fn the_readme_the_book_for_users_and_shipped_manifests_use_no_internal_names() {
    let mut texts: Vec<(String, String)> = documents::user_documents()
        .into_iter()
        .map(|page| (page.display().to_string(), documents::read(&page)))
        .collect();
    for file in [
        "manifests/kustomization.yaml",
        "manifests/example/jobs.yaml",
        "manifests/example/statefulset.yaml",
        "manifests/example/swarm.yaml",
        "manifests/example/deploymentplan.yaml",
        "manifests/example/namespace.yaml",
        "tests/sandbox/demo/10-jobs.yaml",
        "tests/sandbox/demo/20-swarm.yaml",
        "tests/sandbox/demo/30-pool.yaml",
        "tests/sandbox/plans/40-gpu-pools.yaml",
        "tests/sandbox/plans/50-deploymentplan.yaml",
    ] {
        texts.push((file.to_owned(), read(file)));
    }
    assert_no_internal_words(&texts);
}
