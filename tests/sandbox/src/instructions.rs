//! What the sandbox prints once the demo converged: where the kubeconfig is
//! and the kubectl commands to try. Pure text, built from what the sandbox
//! found in the cluster.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::convergence::Converged;

/// Everything the instructions name.
#[derive(Debug, Clone)]
pub struct Tour {
    /// The kubeconfig of the emulated cluster.
    pub kubeconfig: PathBuf,
    /// The namespace of the demo.
    pub namespace: String,
    /// The converged Swarm.
    pub converged: Converged,
    /// A pool (StatefulSet) of the Swarm and its replica count.
    pub pool: String,
    /// Replicas of `pool`.
    pub replicas: u32,
    /// Slice file of each member, by pod.
    pub slice_files: Vec<(String, PathBuf)>,
    /// Output log of each member's job processes (exec mode), by pod.
    pub exec_logs: Vec<(String, PathBuf)>,
    /// Where the `kubectl-shoal` plugin is (or would be) built; `None`: not mentioned.
    pub plugin: Option<Plugin>,
    /// The deployment status endpoint; `None`: not served.
    pub status_api: Option<StatusApiAccess>,
    /// Each member's sidecar, for running an example worker against it.
    pub sidecars: Vec<Sidecar>,
}

/// The deployment status endpoint (HTTPS) and a device certificate for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusApiAccess {
    /// Where it listens.
    pub address: std::net::SocketAddr,
    /// The CA of its serving certificate and of the device's (PEM).
    pub ca: PathBuf,
    /// The device's client id (its certificate's CN).
    pub client_id: String,
    /// The device's client certificate (PEM).
    pub certificate: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// The RoleBinding letting the device report.
    pub rbac: PathBuf,
}

/// A member's sidecar, for the tour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sidecar {
    /// The member (pod name).
    pub pod: String,
    /// Its local API (`worker/openapi.yaml`).
    pub address: std::net::SocketAddr,
    /// It acknowledges each slice itself (`--ack-on-apply`); otherwise it
    /// waits for the application's `POST /v1/ack`.
    pub acknowledges_itself: bool,
}

/// The `kubectl shoal` plugin, for the tour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plugin {
    /// The directory holding (or to hold) `kubectl-shoal`: cargo's profile directory.
    pub dir: PathBuf,
    /// Whether `kubectl-shoal` is there already.
    pub built: bool,
    /// A directory holding only links to it, `kubectl-shoal` and `kubectl_complete-shoal`:
    /// what the tour puts on `PATH`. Not `dir` itself: `kubectl plugin list` exits 1 on
    /// cargo's `kubectl-shoal.d` beside the binary there.
    pub links: PathBuf,
}

/// The names the plugin is linked under: the plugin, and kubectl's completion helper.
const LINKED_NAMES: [&str; 2] = ["kubectl-shoal", "kubectl_complete-shoal"];

impl Plugin {
    /// The plugin next to `program` (the sandbox binary: same cargo profile directory),
    /// to be linked into `links`.
    pub fn beside(program: &std::path::Path, links: PathBuf) -> Option<Plugin> {
        let dir = program.parent()?.to_path_buf();
        let built = dir.join("kubectl-shoal").is_file();
        Some(Plugin { dir, built, links })
    }

    /// Makes `links` with a link per name in it to the binary in `dir` (dangling until it
    /// is built), replacing links left by an earlier run.
    pub fn link(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.links)?;
        for name in LINKED_NAMES {
            let link = self.links.join(name);
            if link.symlink_metadata().is_ok() {
                std::fs::remove_file(&link)?;
            }
            std::os::unix::fs::symlink(self.dir.join("kubectl-shoal"), link)?;
        }
        Ok(())
    }
}

/// A shell word: quoted with single quotes when it holds anything but safe characters.
fn shell_word(text: &str) -> String {
    let safe = text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-=:,+@%".contains(c));
    if safe && !text.is_empty() {
        text.to_owned()
    } else {
        shoal_worker::exec::shell_quote(text)
    }
}

impl Tour {
    /// `kubectl <args>`, with `-n <namespace>` unless it is the kubeconfig's default.
    fn kubectl(&self, args: &str) -> String {
        if self.namespace == "default" {
            format!("kubectl {args}")
        } else {
            format!("kubectl -n {} {args}", shell_word(&self.namespace))
        }
    }

    /// The text printed to stdout: one command per line, each followed by a
    /// `# comment` (the commands run as printed once `KUBECONFIG` is exported).
    pub fn render(&self) -> String {
        let swarm = &self.converged.swarm;
        let members = self
            .converged
            .slices
            .iter()
            .map(|(pod, slice)| format!("{pod}: {}", slice.jobs.len()))
            .collect::<Vec<_>>()
            .join(", ");
        let kubeconfig = shell_word(&self.kubeconfig.display().to_string());
        let first_member = self.converged.slices.keys().next().cloned();
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = writeln!(
            text,
            "Shoal sandbox ready: Swarm {swarm} is at revision {}, {} jobs over {} members ({members}), every member acknowledged its slice.",
            self.converged.revision,
            self.converged.job_count(),
            self.converged.slices.len()
        );
        let _ = writeln!(text);
        let _ = writeln!(text, "Kubeconfig: {}", self.kubeconfig.display());
        let _ = writeln!(text);
        let _ = writeln!(text, "  export KUBECONFIG={kubeconfig}");
        let _ = writeln!(text);
        let _ = writeln!(text, "Try:");
        let mut tries: Vec<(String, String)> = vec![
            (
                self.kubectl("get swarms"),
                "members ready, jobs, revision in force".to_owned(),
            ),
            (
                self.kubectl(&format!("describe swarm {swarm}")),
                "conditions, members and the revision each acknowledged".to_owned(),
            ),
            (
                self.kubectl("explain swarm.spec"),
                "every Swarm field, from the CRD schema".to_owned(),
            ),
            (
                self.kubectl(&format!("get cm {swarm} -o yaml")),
                "the index of every member's jobs (config.yml: workloads)".to_owned(),
            ),
        ];
        if let Some(member) = &first_member {
            tries.push((
                self.kubectl(&format!("describe cm {member}-slice")),
                format!("{member}'s slice (format v1)"),
            ));
            tries.push((
                self.kubectl(&format!("get lease {member}-member -o yaml")),
                "what the sidecar acknowledged (shoal.dev/acked-revision, acked-hash)".to_owned(),
            ));
        }
        for (pod, path) in self.slice_files.iter().take(1) {
            tries.push((
                format!("cat {}", shell_word(&path.display().to_string())),
                format!("the file {pod}'s sidecar keeps for the application"),
            ));
        }
        for (pod, path) in self.exec_logs.iter().take(1) {
            tries.push((
                format!("tail -f {}", shell_word(&path.display().to_string())),
                format!("what {pod}'s job processes print"),
            ));
        }
        tries.push((
            self.kubectl(&format!(
                "scale statefulset {} --replicas={}",
                self.pool,
                self.replicas + 1
            )),
            "a new member: moved streams are revoked first, then granted".to_owned(),
        ));
        tries.push((
            self.kubectl("get swarms -w"),
            "watch the revision roll out (Ctrl-C to stop watching)".to_owned(),
        ));
        push_aligned(&mut text, &tries);
        let _ = writeln!(text);
        let _ = writeln!(text, "Approvals:");
        let approvals = vec![
            (
                self.kubectl(&format!(
                    "patch swarm {swarm} --type merge -p '{{\"spec\":{{\"approval\":{{\"policy\":\"Manual\"}}}}}}'"
                )),
                "from now on a revision waits for you".to_owned(),
            ),
            (
                self.kubectl(&format!(
                    "scale statefulset {} --replicas={}",
                    self.pool,
                    self.replicas + 2
                )),
                "its revision is computed but only pending".to_owned(),
            ),
            (
                self.kubectl(&format!(
                    "get swarm {swarm} -o jsonpath='{{.status.pendingRevision}}{{\"\\n\"}}'"
                )),
                "what it would move".to_owned(),
            ),
            (
                self.kubectl(&format!(
                    "annotate swarm {swarm} --overwrite shoal.dev/approve=$({})",
                    self.kubectl(&format!(
                        "get swarm {swarm} -o jsonpath='{{.status.pendingRevision.approveWith}}'"
                    ))
                )),
                "approve exactly that revision".to_owned(),
            ),
        ];
        push_aligned(&mut text, &approvals);
        let _ = writeln!(text);
        if let Some(plugin) = &self.plugin {
            self.render_plugin(&mut text, plugin);
        }
        if let Some(access) = &self.status_api {
            self.render_status_api(&mut text, access);
        }
        self.render_sidecars(&mut text);
        let _ = writeln!(text, "Press Ctrl-C to stop the sandbox.");
        text
    }
}

impl Tour {
    /// Each member's sidecar address, and how to run an example worker
    /// against one.
    fn render_sidecars(&self, text: &mut String) {
        let Some(first) = self.sidecars.first() else {
            return;
        };
        let _ = writeln!(
            text,
            "The members' sidecars (local API: worker/openapi.yaml):"
        );
        let lines: Vec<(String, String)> = self
            .sidecars
            .iter()
            .map(|sidecar| {
                let how = if sidecar.acknowledges_itself {
                    format!(
                        "acknowledges by itself; --app-ack {} lets your application do it",
                        sidecar.pod
                    )
                } else {
                    "waits for your application's POST /v1/ack".to_owned()
                };
                (format!("{}  http://{}", sidecar.pod, sidecar.address), how)
            })
            .collect();
        push_aligned(text, &lines);
        let example = self
            .sidecars
            .iter()
            .find(|sidecar| !sidecar.acknowledges_itself)
            .unwrap_or(first);
        let run = [(
            format!(
                "SHOAL_API=http://{} python3 examples/python/worker.py",
                example.address
            ),
            format!(
                "follow {}'s slice (examples/node/worker.js likewise)",
                example.pod
            ),
        )];
        push_aligned(text, &run);
        let _ = writeln!(text);
    }

    /// How to read a deployment's status document over HTTPS as a caller
    /// bound to the reader role, and report on the demo plan as the device.
    fn render_status_api(&self, text: &mut String, access: &StatusApiAccess) {
        let namespace = if self.namespace == "default" {
            String::new()
        } else {
            format!(" -n {}", shell_word(&self.namespace))
        };
        let address = access.address;
        let ca = shell_word(&access.ca.to_string_lossy());
        let _ = writeln!(
            text,
            "The deployment status endpoint: https://{address} (CA {ca})"
        );
        let lines = [
            (
                format!("kubectl{namespace} create serviceaccount status-reader"),
                "a caller".to_owned(),
            ),
            (
                format!(
                    "kubectl{namespace} create rolebinding status-reader --clusterrole=shoal-deployment-status-reader --serviceaccount={}:status-reader",
                    shell_word(&self.namespace)
                ),
                "allowed to read deployment status".to_owned(),
            ),
            (
                format!(
                    "curl --cacert {ca} -H \"Authorization: Bearer $(kubectl{namespace} create token status-reader)\" https://{address}/api/v1/deployments/<deploymentId>/status"
                ),
                "a plan's `status.deploymentStatus[].deploymentId`".to_owned(),
            ),
        ];
        push_aligned(text, &lines);
        let _ = writeln!(
            text,
            "Report as device {} (its certificate; RoleBinding {}), once plans/50-deploymentplan.yaml is applied:",
            access.client_id,
            shell_word(&access.rbac.to_string_lossy())
        );
        let _ = writeln!(text, "  {}", self.device_report_command(access));
        let _ = writeln!(text, "  kubectl shoal reports web{namespace}");
        let _ = writeln!(text);
    }

    /// The shell command the device reports with: the plan `web`'s deployment
    /// id from kubectl, then curl with the device's certificate.
    pub fn device_report_command(&self, access: &StatusApiAccess) -> String {
        let namespace = if self.namespace == "default" {
            String::new()
        } else {
            format!(" -n {}", shell_word(&self.namespace))
        };
        let client = &access.client_id;
        let body = r#"{"apiVersion":"deployment.margo.org/v1alpha1","kind":"DeploymentStatusManifest","deploymentId":"'$ID'","status":{"state":"installed"},"components":[{"name":"nginx","state":"installed"},{"name":"exporter","state":"installed"}]}"#;
        format!(
            "ID=$(kubectl{namespace} get dplan web -o jsonpath='{{.status.deploymentStatus[-1].deploymentId}}') && curl --cacert {} --cert {} --key {} -H 'Content-Type: application/json' --data-binary '{body}' https://{}/api/v1/clients/{client}/deployments/$ID/status",
            shell_word(&access.ca.to_string_lossy()),
            shell_word(&access.certificate.to_string_lossy()),
            shell_word(&access.key.to_string_lossy()),
            access.address,
        )
    }

    /// The `kubectl shoal` lines (kubectl wants a plugin's flags after its name).
    fn render_plugin(&self, text: &mut String, plugin: &Plugin) {
        let swarm = &self.converged.swarm;
        let namespace = if self.namespace == "default" {
            String::new()
        } else {
            format!(" -n {}", shell_word(&self.namespace))
        };
        let _ = writeln!(text, "The kubectl plugin:");
        let mut lines = Vec::new();
        if !plugin.built {
            lines.push((
                "cargo build -p shoal-controller --bin kubectl-shoal".to_owned(),
                "build it first".to_owned(),
            ));
        }
        lines.push((
            format!(
                "export PATH={}:\"$PATH\"",
                shell_word(&plugin.links.display().to_string())
            ),
            "holds only links to kubectl-shoal: `kubectl plugin list` accepts it".to_owned(),
        ));
        lines.push((
            "cargo install --locked --path controller --bin kubectl-shoal".to_owned(),
            "or install it for good (on cargo's bin directory)".to_owned(),
        ));
        lines.push((
            format!("kubectl shoal status {swarm}{namespace}"),
            "pools, members, revisions, pending approval, Events".to_owned(),
        ));
        lines.push((
            format!(
                "kubectl shoal diff {swarm} --replicas={}{namespace}",
                self.replicas + 3
            ),
            "what a scale would move, without doing it".to_owned(),
        ));
        lines.push((
            format!("kubectl shoal approve {swarm}{namespace}"),
            "approve the pending revision".to_owned(),
        ));
        lines.push((
            format!("kubectl shoal history {swarm}{namespace}"),
            "the recorded revisions".to_owned(),
        ));
        push_aligned(text, &lines);
        let _ = writeln!(text);
    }
}

/// Commands with their comments aligned in one column.
fn push_aligned(text: &mut String, lines: &[(String, String)]) {
    let width = lines
        .iter()
        .map(|(command, _)| command.len())
        .filter(|len| *len <= 72)
        .max()
        .unwrap_or(0);
    for (command, comment) in lines {
        let _ = writeln!(text, "  {command:<width$}  # {comment}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_worker::SliceView;
    use std::collections::BTreeMap;

    fn tour(namespace: &str) -> Tour {
        let slices: BTreeMap<String, SliceView> = [
            (
                "swarm-worker-0".to_owned(),
                SliceView::new("demo", "swarm-worker-0", 1, ["a", "b"]).expect("valid"),
            ),
            (
                "swarm-worker-1".to_owned(),
                SliceView::new("demo", "swarm-worker-1", 1, ["c"]).expect("valid"),
            ),
        ]
        .into();
        Tour {
            kubeconfig: PathBuf::from("/tmp/sand box/kubeconfig"),
            namespace: namespace.to_owned(),
            converged: Converged {
                swarm: "demo".to_owned(),
                revision: 1,
                slices,
            },
            pool: "swarm-worker".to_owned(),
            replicas: 2,
            slice_files: vec![(
                "swarm-worker-0".to_owned(),
                PathBuf::from("/tmp/sand box/members/swarm-worker-0/slice.yaml"),
            )],
            exec_logs: Vec::new(),
            plugin: None,
            status_api: None,
            sidecars: Vec::new(),
        }
    }

    #[test]
    fn the_tour_names_each_sidecars_address_and_runs_the_example_against_the_one_left_to_it() {
        let mut shown = tour("default");
        assert!(
            !shown.render().contains("sidecars"),
            "none listed, none shown"
        );
        shown.sidecars = vec![
            Sidecar {
                pod: "swarm-worker-0".to_owned(),
                address: "127.0.0.1:4100".parse().expect("an address"),
                acknowledges_itself: true,
            },
            Sidecar {
                pod: "swarm-worker-1".to_owned(),
                address: "127.0.0.1:4101".parse().expect("an address"),
                acknowledges_itself: false,
            },
        ];
        let text = shown.render();
        assert!(
            text.contains("swarm-worker-0  http://127.0.0.1:4100")
                && text.contains("--app-ack swarm-worker-0 lets your application do it"),
            "{text}"
        );
        assert!(
            text.contains("swarm-worker-1  http://127.0.0.1:4101")
                && text.contains("waits for your application's POST /v1/ack"),
            "{text}"
        );
        assert!(
            text.contains("SHOAL_API=http://127.0.0.1:4101 python3 examples/python/worker.py"),
            "{text}"
        );
    }

    #[test]
    fn the_tour_names_the_kubeconfig_the_members_and_the_commands_to_try() {
        let text = tour("default").render();
        assert!(
            text.contains("export KUBECONFIG='/tmp/sand box/kubeconfig'"),
            "{text}"
        );
        assert!(text.contains("3 jobs over 2 members (swarm-worker-0: 2, swarm-worker-1: 1)"));
        assert!(text.contains("\n  kubectl get swarms "), "{text}");
        assert!(text.contains("kubectl describe swarm demo "));
        assert!(text.contains("kubectl explain swarm.spec "));
        assert!(text.contains("kubectl describe cm swarm-worker-0-slice "));
        assert!(text.contains("cat '/tmp/sand box/members/swarm-worker-0/slice.yaml' "));
        assert!(text.contains("kubectl scale statefulset swarm-worker --replicas=3 "));
        assert!(text.contains(
            "kubectl annotate swarm demo --overwrite shoal.dev/approve=$(kubectl get swarm demo -o jsonpath='{.status.pendingRevision.approveWith}')"
        ));
        assert!(text.contains(r#"-p '{"spec":{"approval":{"policy":"Manual"}}}'"#));
        assert!(!text.contains("tail -f"), "no exec log without exec mode");
        let mut exec = tour("default");
        exec.exec_logs = vec![(
            "swarm-worker-0".to_owned(),
            PathBuf::from("/tmp/s/members/swarm-worker-0/exec.log"),
        )];
        assert!(
            exec.render()
                .contains("tail -f /tmp/s/members/swarm-worker-0/exec.log ")
        );
    }

    #[test]
    fn the_status_endpoint_is_shown_with_a_reader_token_only_when_it_is_served() {
        let mut served = tour("shop");
        assert!(!served.render().contains("deployment status endpoint"));
        served.status_api = Some(StatusApiAccess {
            address: "127.0.0.1:8443".parse().expect("an address"),
            ca: PathBuf::from("/tmp/s/status-api/ca.crt"),
            client_id: "edge-1".to_owned(),
            certificate: PathBuf::from("/tmp/s/status-api/edge-1.crt"),
            key: PathBuf::from("/tmp/s/status-api/edge-1.key"),
            rbac: PathBuf::from("/tmp/s/status-api/device-rbac.yaml"),
        });
        let text = served.render();
        assert!(
            text.contains("The deployment status endpoint: https://127.0.0.1:8443 (CA /tmp/s/status-api/ca.crt)"),
            "{text}"
        );
        assert!(
            text.contains("curl --cacert /tmp/s/status-api/ca.crt --cert /tmp/s/status-api/edge-1.crt --key /tmp/s/status-api/edge-1.key "),
            "{text}"
        );
        assert!(
            text.contains("https://127.0.0.1:8443/api/v1/clients/edge-1/deployments/$ID/status"),
            "{text}"
        );
        assert!(text.contains("kubectl shoal reports web -n shop"), "{text}");
        assert!(
            text.contains(
                "--clusterrole=shoal-deployment-status-reader --serviceaccount=shop:status-reader"
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"curl --cacert /tmp/s/status-api/ca.crt -H "Authorization: Bearer $(kubectl -n shop create token status-reader)" https://127.0.0.1:8443/api/v1/deployments/<deploymentId>/status"#),
            "{text}"
        );
    }

    #[test]
    fn the_plugin_is_offered_with_a_build_step_only_when_it_is_missing() {
        let mut missing = tour("swarm");
        missing.plugin = Some(Plugin {
            dir: PathBuf::from("/repo/target/debug"),
            built: false,
            links: PathBuf::from("/tmp/s/bin"),
        });
        let text = missing.render();
        assert!(text.contains("cargo build -p shoal-controller --bin kubectl-shoal"));
        assert!(text.contains(r#"export PATH=/tmp/s/bin:"$PATH""#), "{text}");
        assert!(!text.contains("target/debug:"), "{text}");
        assert!(
            text.contains("cargo install --locked --path controller --bin kubectl-shoal"),
            "{text}"
        );
        assert!(
            text.contains("kubectl shoal status demo -n swarm "),
            "{text}"
        );
        let mut built = missing.clone();
        built.plugin = Some(Plugin {
            dir: PathBuf::from("/repo/target/debug"),
            built: true,
            links: PathBuf::from("/tmp/s/bin"),
        });
        let text = built.render();
        assert!(!text.contains("cargo build"), "{text}");
        assert!(!tour("default").render().contains("kubectl shoal"));
    }

    /// `kubectl plugin list` with `first` ahead of the `PATH`; `None` without kubectl.
    fn plugin_list(first: &std::path::Path) -> Option<std::process::Output> {
        let path = format!(
            "{}:{}",
            first.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let kubectl = std::env::var("SHOAL_KUBECTL").unwrap_or_else(|_| "kubectl".to_owned());
        std::process::Command::new(kubectl)
            .args(["plugin", "list"])
            .env("PATH", path)
            .output()
            .ok()
    }

    #[test]
    fn kubectl_plugin_list_accepts_the_path_the_tour_prints_and_not_cargos_directory() {
        use std::os::unix::fs::PermissionsExt;
        // Cargo's profile directory: the binary and its dependency file beside it.
        let profile = tempfile::tempdir().expect("a directory");
        let binary = profile.path().join("kubectl-shoal");
        std::fs::write(&binary, "#!/bin/sh\necho shoal\n").expect("write");
        std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::write(profile.path().join("kubectl-shoal.d"), "deps\n").expect("write");
        let sandbox = tempfile::tempdir().expect("a directory");
        let plugin = Plugin::beside(
            &profile.path().join("shoal-sandbox"),
            sandbox.path().join("bin"),
        )
        .expect("a plugin");
        plugin.link().expect("links");
        plugin.link().expect("links again, over the first");
        let Some(listed) = plugin_list(&plugin.links) else {
            eprintln!("skipped: no kubectl on PATH");
            return;
        };
        let stdout = String::from_utf8_lossy(&listed.stdout);
        assert!(
            listed.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&listed.stderr)
        );
        assert!(
            stdout.contains(&format!("{}/kubectl-shoal", plugin.links.display())),
            "{stdout}"
        );
        let old_advice = plugin_list(profile.path()).expect("kubectl ran once");
        assert!(
            !old_advice.status.success(),
            "kubectl plugin list accepts kubectl-shoal.d now"
        );
    }

    #[test]
    fn a_namespace_other_than_default_is_named_in_every_kubectl_command() {
        let text = tour("swarm").render();
        for line in text
            .lines()
            .filter(|line| line.contains("kubectl ") && !line.contains("kubectl shoal"))
        {
            let commands = line.matches("kubectl ").count();
            assert_eq!(
                line.matches("kubectl -n swarm ").count(),
                commands,
                "{line}"
            );
        }
    }
}
