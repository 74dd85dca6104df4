//! Installing the `kubectl shoal` plugin as the README says: the one binary on `PATH`
//! (installed, or linked), never cargo's whole `target/debug`, where the dependency file
//! `kubectl-shoal.d` beside the binary makes `kubectl plugin list` fail.

use std::path::Path;
use std::process::Output;

/// Runs `kubectl <args>` with `path_first` ahead of the `PATH`.
fn kubectl(path_first: &Path, args: &[&str]) -> Output {
    let path = format!(
        "{}:{}",
        path_first.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let kubectl = std::env::var("SHOAL_KUBECTL").unwrap_or_else(|_| "kubectl".to_owned());
    std::process::Command::new(kubectl)
        .args(args)
        .env("PATH", path)
        .output()
        .expect("kubectl runs")
}

fn plugin_list(path_first: &Path) -> Output {
    kubectl(path_first, &["plugin", "list"])
}

#[test]
fn kubectl_plugin_list_finds_the_linked_plugin_but_fails_on_cargos_target_directory() {
    let binary = env!("CARGO_BIN_EXE_kubectl-shoal");
    let linked = tempfile::tempdir().expect("a directory");
    std::os::unix::fs::symlink(binary, linked.path().join("kubectl-shoal")).expect("link");
    let listed = plugin_list(linked.path());
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert!(
        stdout.contains(&format!("{}/kubectl-shoal", linked.path().display())),
        "the linked plugin is not listed: {stdout}{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    assert!(
        !String::from_utf8_lossy(&listed.stderr).contains("kubectl-shoal"),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );

    // What the README no longer advises: cargo's output directory, with its `.d` file.
    let target_like = tempfile::tempdir().expect("a directory");
    std::os::unix::fs::symlink(binary, target_like.path().join("kubectl-shoal")).expect("link");
    std::fs::write(target_like.path().join("kubectl-shoal.d"), "deps\n").expect("write");
    let listed = plugin_list(target_like.path());
    assert!(
        !listed.status.success()
            && String::from_utf8_lossy(&listed.stderr).contains("kubectl-shoal.d"),
        "kubectl plugin list no longer trips on kubectl-shoal.d; the README's warning can go"
    );
}

fn plugin(args: &[&str]) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-shoal"))
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("kubectl-shoal runs");
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn completion_scripts_for_bash_zsh_and_fish_name_every_command_without_a_cluster() {
    let bash = plugin(&["completion", "bash"]);
    for command in [
        "status",
        "approve-op",
        "rollout-status",
        "plan-undo",
        "completion",
    ] {
        assert!(bash.contains(command), "the bash script lacks {command}");
    }
    assert!(bash.contains("complete -F _kubectl-shoal"), "{bash}");
    // The script completes in a real bash: `kubectl-shoal st<TAB>`.
    let completed = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "{bash}\nCOMP_WORDS=(kubectl-shoal st); COMP_CWORD=1; _kubectl-shoal kubectl-shoal st kubectl-shoal; echo \"${{COMPREPLY[@]}}\""
        ))
        .output()
        .expect("bash runs");
    let words = String::from_utf8_lossy(&completed.stdout);
    assert_eq!(
        words.trim(),
        "status stop start",
        "{}",
        String::from_utf8_lossy(&completed.stderr)
    );
    assert!(plugin(&["completion", "zsh"]).contains("#compdef kubectl-shoal"));
    assert!(plugin(&["completion", "fish"]).contains("complete -c kubectl-shoal"));
}

#[test]
fn kubectl_completes_kubectl_shoal_through_the_kubectl_complete_shoal_link() {
    let binary = env!("CARGO_BIN_EXE_kubectl-shoal");
    let linked = tempfile::tempdir().expect("a directory");
    for name in ["kubectl-shoal", "kubectl_complete-shoal"] {
        std::os::unix::fs::symlink(binary, linked.path().join(name)).expect("link");
    }
    let complete = |words: &[&str]| {
        let args: Vec<&str> = ["__complete", "shoal"]
            .iter()
            .chain(words)
            .copied()
            .collect();
        String::from_utf8_lossy(&kubectl(linked.path(), &args).stdout).into_owned()
    };
    assert_eq!(complete(&["st"]), "status\nstop\nstart\n:4\n");
    assert_eq!(complete(&["status", "demo", "-o", "j"]), "json\n:4\n");
}
