//! The real `kubectl`, pointed at the sandbox's kubeconfig.

use std::path::{Path, PathBuf};
use std::process::Stdio;

/// Why a kubectl call did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum KubectlError {
    /// The program could not be started at all.
    #[error("cannot run {program}: {source}; install kubectl (v1.32) or pass --kubectl")]
    Missing {
        /// The program tried.
        program: String,
        /// Why it did not start.
        #[source]
        source: std::io::Error,
    },
    /// kubectl ran and exited non-zero.
    #[error("kubectl {args} exited with {code:?}: {stderr}")]
    Failed {
        /// The arguments.
        args: String,
        /// Exit code (`None` when killed by a signal).
        code: Option<i32>,
        /// What kubectl printed on stderr.
        stderr: String,
    },
}

/// A kubectl bound to one kubeconfig and, optionally, a namespace.
#[derive(Debug, Clone)]
pub struct Kubectl {
    program: String,
    kubeconfig: PathBuf,
    namespace: Option<String>,
}

impl Kubectl {
    /// `program` (usually `kubectl`) with `--kubeconfig <kubeconfig>`, in the
    /// kubeconfig's namespace.
    pub fn new(program: impl Into<String>, kubeconfig: &Path) -> Kubectl {
        Kubectl {
            program: program.into(),
            kubeconfig: kubeconfig.to_path_buf(),
            namespace: None,
        }
    }

    /// The same kubectl with `--namespace <namespace>`.
    pub fn in_namespace(&self, namespace: &str) -> Kubectl {
        Kubectl {
            namespace: Some(namespace.to_owned()),
            ..self.clone()
        }
    }

    /// Runs kubectl with `args`; its stdout on success, an error carrying stderr otherwise.
    pub async fn run(&self, args: &[&str]) -> Result<String, KubectlError> {
        let mut command = tokio::process::Command::new(&self.program);
        command.arg("--kubeconfig").arg(&self.kubeconfig);
        if let Some(namespace) = &self.namespace {
            command.arg("--namespace").arg(namespace);
        }
        let output = command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|source| KubectlError::Missing {
                program: self.program.clone(),
                source,
            })?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(KubectlError::Failed {
                args: args.join(" "),
                code: output.status.code(),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            })
        }
    }
}

/// Runs `kubectl shoal <args>` in-process (the plugin binary's own entry
/// point) with `kubeconfig`, in `namespace`; what it printed, or its error.
pub async fn kubectl_shoal(
    kubeconfig: &Path,
    namespace: &str,
    args: &[&str],
) -> Result<String, String> {
    let mut full = vec![
        "kubectl-shoal".to_owned(),
        "--kubeconfig".to_owned(),
        kubeconfig.display().to_string(),
        "-n".to_owned(),
        namespace.to_owned(),
    ];
    full.extend(args.iter().map(|arg| (*arg).to_owned()));
    let cli = <shoal_controller::plugin::Cli as clap::Parser>::try_parse_from(full)
        .map_err(|error| error.to_string())?;
    shoal_controller::plugin::run(&cli)
        .await
        .map_err(|error| error.to_string())
}

/// Runs `check` until it answers `Ok` (every 200 ms), and returns that; panics
/// after `timeout` with `what` and the last `Err`. For tests, which wait on
/// the cluster as a user would.
pub async fn eventually<T, F, Fut>(what: &str, timeout: std::time::Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let started = std::time::Instant::now();
    loop {
        match check().await {
            Ok(value) => return value,
            Err(last) if started.elapsed() > timeout => {
                panic!("timed out waiting for {what}; last: {last}")
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
        }
    }
}
