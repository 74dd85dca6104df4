//! Installing the `kubectl shoal` plugin as the README says: the one binary on `PATH`
//! (installed, or linked), never cargo's whole `target/debug`, where the dependency file
//! `kubectl-shoal.d` beside the binary makes `kubectl plugin list` fail.

use std::path::Path;
use std::process::Output;

fn plugin_list(path_first: &Path) -> Output {
    let path = format!(
        "{}:{}",
        path_first.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let kubectl = std::env::var("SHOAL_KUBECTL").unwrap_or_else(|_| "kubectl".to_owned());
    std::process::Command::new(kubectl)
        .args(["plugin", "list"])
        .env("PATH", path)
        .output()
        .expect("kubectl runs")
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
