//! Signalling the application after each slice change (optional).

use std::path::{Path, PathBuf};

use rustix::process::{Pid, Signal};

/// Whom to signal.
#[derive(Debug, Clone)]
pub enum SignalTarget {
    /// The pid written in this file (read at each change: the app may restart).
    PidFile(PathBuf),
    /// Every process whose `/proc/<pid>/comm` equals this name; needs a shared
    /// process namespace in the pod.
    ProcessName(String),
}

/// Why a signal could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    /// The pid file could not be read.
    #[error("cannot read pid file {path}: {source}")]
    ReadPidFile {
        /// The pid file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The pid file does not hold a positive pid.
    #[error("pid file {path} holds {content:?}, not a pid")]
    BadPid {
        /// The pid file.
        path: PathBuf,
        /// What it holds.
        content: String,
    },
    /// No process has the name.
    #[error("no process named {0:?} is visible (is shareProcessNamespace on?)")]
    NoSuchProcess(String),
    /// `kill` failed.
    #[error("cannot signal pid {pid}: {source}")]
    Kill {
        /// The target.
        pid: i32,
        /// The errno.
        source: rustix::io::Errno,
    },
}

/// The signal for a name accepted by [`crate::settings::parse_signal_name`].
pub fn signal_named(name: &str) -> Signal {
    match name {
        "USR1" => Signal::USR1,
        "USR2" => Signal::USR2,
        "INT" => Signal::INT,
        "TERM" => Signal::TERM,
        _ => Signal::HUP,
    }
}

/// Sends `signal` to the target; returns how many processes got it.
pub fn send(target: &SignalTarget, signal: Signal) -> Result<usize, SignalError> {
    let pids = match target {
        SignalTarget::PidFile(path) => vec![read_pid_file(path)?],
        SignalTarget::ProcessName(name) => {
            let pids = pids_named(name);
            if pids.is_empty() {
                return Err(SignalError::NoSuchProcess(name.clone()));
            }
            pids
        }
    };
    for &pid in &pids {
        let target = Pid::from_raw(pid).ok_or(SignalError::Kill {
            pid,
            source: rustix::io::Errno::INVAL,
        })?;
        rustix::process::kill_process(target, signal)
            .map_err(|source| SignalError::Kill { pid, source })?;
    }
    Ok(pids.len())
}

fn read_pid_file(path: &Path) -> Result<i32, SignalError> {
    let content = std::fs::read_to_string(path).map_err(|source| SignalError::ReadPidFile {
        path: path.to_path_buf(),
        source,
    })?;
    match content.trim().parse::<i32>() {
        Ok(pid) if pid > 0 => Ok(pid),
        _ => Err(SignalError::BadPid {
            path: path.to_path_buf(),
            content: content.trim().to_string(),
        }),
    }
}

/// Pids whose `comm` is `name`, except this process.
fn pids_named(name: &str) -> Vec<i32> {
    let own = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<i32> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != own)
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim_end() == name)
        })
        .collect();
    pids.sort_unstable();
    pids
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_process_named_in_a_pid_file_gets_the_signal() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("got-usr1");
        let ready = dir.path().join("trap-set");
        // USR1 rather than HUP: a shell cannot trap a signal that was ignored when it
        // started, and HUP is ignored under nohup, which would make this test hang.
        // The script says when its trap is in place, so the signal never comes first.
        let script = format!(
            "trap 'echo usr1 > {}; exit 0' USR1; touch {}; while true; do sleep 0.05; done",
            marker.display(),
            ready.display()
        );
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let pid_file = dir.path().join("app.pid");
        std::fs::write(&pid_file, format!("{}\n", child.id().unwrap())).unwrap();
        let waited = std::time::Instant::now();
        while !ready.exists() {
            assert!(
                waited.elapsed() < Duration::from_secs(10),
                "the script never set its trap"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }

        let sent = send(&SignalTarget::PidFile(pid_file), Signal::USR1).unwrap();

        assert_eq!(sent, 1);
        let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .expect("the process exits after the signal")
            .unwrap();
        assert!(status.success(), "{status}");
        assert_eq!(std::fs::read_to_string(marker).unwrap(), "usr1\n");
    }

    #[test]
    fn a_pid_file_without_a_pid_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("app.pid");
        std::fs::write(&pid_file, "not-a-pid").unwrap();
        let error = send(&SignalTarget::PidFile(pid_file), Signal::HUP).unwrap_err();
        assert!(error.to_string().contains("not a pid"), "{error}");
    }

    #[test]
    fn an_unknown_process_name_is_a_clear_error() {
        let error = send(
            &SignalTarget::ProcessName("no-such-shoal-app".into()),
            Signal::HUP,
        )
        .unwrap_err();
        assert!(error.to_string().contains("no-such-shoal-app"), "{error}");
    }
}
