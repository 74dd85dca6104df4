//! Plan instances on the member: their environment in exec mode, the states
//! the sidecar reports on its Lease (annotation `shoal.dev/instance-states`),
//! and how states follow acknowledgements when the sidecar does not run the
//! instances itself.
//!
//! States (`shoal_core::slice::InstanceState`):
//!
//! - with `--exec-instance`: `pending` when scheduled, `installing` once its
//!   process started, `installed` after `--instance-settle` of running (or
//!   when it exits 0 earlier: an installer-style command that finished),
//!   `failed` when it exits non-zero (`ExitCode<n>`/`Signal<n>`, message with
//!   the last stderr line) or cannot start (`SpawnFailed`,
//!   `EnvironmentCollision`). A failed instance is **not restarted**: it stays
//!   failed until its deployment or coordinates change (a new attempt) or it
//!   is removed; the controller decides what comes next. `removing` while its
//!   process stops, `removed` once gone (also when fencing stopped it).
//! - without it (file/HTTP mode, or `--exec` for jobs only): `pending` once
//!   delivered, `installed` once the slice holding it is acknowledged
//!   (`--ack-on-apply`, `POST /v1/ack`, or the job supervisor); a dropped
//!   instance is `removing` until the slice without it is acknowledged, then
//!   `removed`.
//!
//! A `removed` entry is written once and then dropped from the annotation.

use std::collections::BTreeMap;

use shoal_core::deploy::port::render_ports;
use shoal_core::slice::{InstanceReport, InstanceState, SliceInstance};
use tokio::sync::watch;

use crate::exec::shell_quote;
use crate::view::{AckTarget, Delivered};

/// Instance name → its latest report.
pub type InstanceReports = BTreeMap<String, InstanceReport>;

/// Largest annotation value written; beyond it, messages are left out.
pub const MAX_REPORTS_BYTES: usize = 64 * 1024;

/// The environment variable of one coordinate: `SHOAL_<APPLICATION>_<KEY>`,
/// upper-cased, every character but ASCII letters and digits turned into `_`.
pub fn coordinate_variable(application: &str, key: &str) -> String {
    let part = |text: &str| -> String {
        text.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_uppercase()
                } else {
                    '_'
                }
            })
            .collect()
    };
    format!("SHOAL_{}_{}", part(application), part(key))
}

/// Two coordinates that would land in the same environment variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "coordinates {first_application}.{first_key} and {second_application}.{second_key} both map to environment variable {variable}; rename one of them"
)]
pub struct EnvironmentCollision {
    /// The variable both map to.
    pub variable: String,
    /// The first coordinate's application.
    pub first_application: String,
    /// The first coordinate's key.
    pub first_key: String,
    /// The second coordinate's application.
    pub second_application: String,
    /// The second coordinate's key.
    pub second_key: String,
}

/// The environment of an instance's process: `SHOAL_INSTANCE`, `SHOAL_PLAN`,
/// `SHOAL_DEPLOYMENT`, `SHOAL_MEMBER`, `SHOAL_PORTS` (the ports of all its
/// applications, `TCP/80,UDP/53`, sorted: TCP first, then by number; empty
/// when none) and one variable per coordinate (see [`coordinate_variable`]).
/// Two coordinates mapping to the same variable are refused rather than one
/// silently winning (the instance is then `failed`, code
/// `EnvironmentCollision`). They cannot hit the fixed names: a coordinate
/// variable always has two parts after `SHOAL_`.
pub fn instance_environment(
    instance: &SliceInstance,
    member: &str,
) -> Result<Vec<(String, String)>, EnvironmentCollision> {
    let mut environment = vec![
        ("SHOAL_INSTANCE".to_owned(), instance.name.clone()),
        ("SHOAL_PLAN".to_owned(), instance.plan.clone()),
        (
            "SHOAL_DEPLOYMENT".to_owned(),
            instance.deployment.to_string(),
        ),
        ("SHOAL_MEMBER".to_owned(), member.to_owned()),
        ("SHOAL_PORTS".to_owned(), instance_ports(instance)),
    ];
    let mut origins: BTreeMap<String, (&str, &str)> = BTreeMap::new();
    for application in &instance.applications {
        for (key, value) in &application.coordinates {
            let variable = coordinate_variable(&application.name, key);
            if let Some((first_application, first_key)) =
                origins.insert(variable.clone(), (&application.name, key))
            {
                return Err(EnvironmentCollision {
                    variable,
                    first_application: first_application.to_owned(),
                    first_key: first_key.to_owned(),
                    second_application: application.name.clone(),
                    second_key: key.clone(),
                });
            }
            environment.push((variable, value.clone()));
        }
    }
    Ok(environment)
}

/// `SHOAL_PORTS`: every port of the instance's applications, sorted, once each.
fn instance_ports(instance: &SliceInstance) -> String {
    let ports: std::collections::BTreeSet<_> = instance
        .applications
        .iter()
        .flat_map(|application| &application.ports)
        .collect();
    render_ports(ports)
}

/// The shell command of an instance: `{instance}`, `{plan}` and `{member}`
/// replaced by single-quoted values (no shell injection through names).
pub fn instance_command(template: &str, instance: &SliceInstance, member: &str) -> String {
    template
        .replace("{instance}", &shell_quote(&instance.name))
        .replace("{plan}", &shell_quote(&instance.plan))
        .replace("{member}", &shell_quote(member))
}

/// The failure code of a finished process: `ExitCode<n>` or `Signal<n>`.
pub fn exit_code(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("ExitCode{code}"),
        (None, Some(signal)) => format!("Signal{signal}"),
        (None, None) => "ExitCodeUnknown".to_owned(),
    }
}

/// The annotation value: compact JSON, instance → report, sorted by name.
/// Messages are each at most 256 bytes already; if the whole would still
/// exceed [`MAX_REPORTS_BYTES`], the messages are left out (states and codes stay).
pub fn render_reports(reports: &InstanceReports) -> String {
    let rendered = serde_json::to_string(reports).unwrap_or_else(|_| "{}".to_owned());
    if rendered.len() <= MAX_REPORTS_BYTES {
        return rendered;
    }
    let brief: InstanceReports = reports
        .iter()
        .map(|(name, report)| {
            let mut report = report.clone();
            report.message = None;
            (name.clone(), report)
        })
        .collect();
    serde_json::to_string(&brief).unwrap_or_else(|_| "{}".to_owned())
}

/// States when the application, not the sidecar, runs the instances: those in
/// the delivered slice are `installed` once it is acknowledged (and stay so
/// while their deployment is unchanged), `pending` before; those no longer
/// delivered are `removing` until the slice without them is acknowledged,
/// then `removed`.
pub fn acknowledged_states(
    previous: &InstanceReports,
    delivered: &[SliceInstance],
    acknowledged: bool,
) -> InstanceReports {
    let mut next = InstanceReports::new();
    for instance in delivered {
        let kept = previous.get(&instance.name).is_some_and(|report| {
            report.state == InstanceState::Installed && report.deployment == instance.deployment
        });
        let state = if acknowledged || kept {
            InstanceState::Installed
        } else {
            InstanceState::Pending
        };
        next.insert(
            instance.name.clone(),
            InstanceReport::new(state, instance.deployment),
        );
    }
    for (name, report) in previous {
        if next.contains_key(name) {
            continue;
        }
        let state = if report.state == InstanceState::Removed || acknowledged {
            InstanceState::Removed
        } else {
            InstanceState::Removing
        };
        next.insert(name.clone(), InstanceReport::new(state, report.deployment));
    }
    next
}

/// Keeps `reports` following [`acknowledged_states`] (modes without `--exec-instance`).
pub(crate) async fn follow_acknowledgements(
    mut delivered: watch::Receiver<Delivered>,
    mut ack_target: watch::Receiver<Option<AckTarget>>,
    reports: std::sync::Arc<watch::Sender<InstanceReports>>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let current = delivered.borrow_and_update().clone();
        let target = ack_target.borrow_and_update().clone();
        let acknowledged = !current.fenced
            && current
                .slice
                .as_ref()
                .is_some_and(|slice| target.as_ref() == Some(&slice.ack_target()));
        reports.send_if_modified(|reports| {
            let next = acknowledged_states(reports, current.instances(), acknowledged);
            let changed = next != *reports;
            *reports = next;
            changed
        });
        tokio::select! {
            changed = delivered.changed() => if changed.is_err() { return },
            changed = ack_target.changed() => if changed.is_err() { return },
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_core::slice::InstanceApplication;

    fn instance(name: &str, deployment: u64, coordinates: &[(&str, &str, &str)]) -> SliceInstance {
        let mut applications: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (application, key, value) in coordinates {
            applications
                .entry(application.to_string())
                .or_default()
                .insert(key.to_string(), value.to_string());
        }
        SliceInstance {
            name: name.to_owned(),
            plan: name
                .rsplit_once('-')
                .map_or(name, |(plan, _)| plan)
                .to_owned(),
            deployment,
            applications: applications
                .into_iter()
                .map(|(name, coordinates)| InstanceApplication::new(name, coordinates))
                .collect(),
        }
    }

    #[test]
    fn coordinates_become_upper_cased_variables_with_underscores() {
        assert_eq!(coordinate_variable("nginx", "image"), "SHOAL_NGINX_IMAGE");
        assert_eq!(
            coordinate_variable("php-fpm", "config.path"),
            "SHOAL_PHP_FPM_CONFIG_PATH"
        );
        assert_eq!(coordinate_variable("é", "k"), "SHOAL___K");
    }

    #[test]
    fn the_environment_names_the_instance_and_every_coordinate() {
        let web = instance(
            "web-0",
            4,
            &[("nginx", "image", "nginx:1.27"), ("php", "version", "8.3")],
        );
        let environment = instance_environment(&web, "pool-1").unwrap();
        assert_eq!(
            environment,
            [
                ("SHOAL_INSTANCE", "web-0"),
                ("SHOAL_PLAN", "web"),
                ("SHOAL_DEPLOYMENT", "4"),
                ("SHOAL_MEMBER", "pool-1"),
                ("SHOAL_PORTS", ""),
                ("SHOAL_NGINX_IMAGE", "nginx:1.27"),
                ("SHOAL_PHP_VERSION", "8.3"),
            ]
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
        );
    }

    #[test]
    fn the_environment_lists_every_port_of_the_instance_sorted() {
        use shoal_core::deploy::Port;
        let mut web = instance("web-0", 4, &[("nginx", "image", "n"), ("dns", "zone", "z")]);
        web.applications[0].ports = vec![Port::udp(53), Port::tcp(5353)];
        web.applications[1].ports = vec![Port::tcp(80)];
        let environment = instance_environment(&web, "pool-1").unwrap();
        assert!(
            environment.contains(&(
                "SHOAL_PORTS".to_owned(),
                "TCP/80,TCP/5353,UDP/53".to_owned()
            )),
            "{environment:?}"
        );
    }

    #[test]
    fn colliding_coordinates_are_refused_naming_both() {
        let web = instance("web-0", 1, &[("a-b", "c", "1"), ("a", "b-c", "2")]);
        let collision = instance_environment(&web, "pool-0").unwrap_err();
        assert_eq!(collision.variable, "SHOAL_A_B_C");
        let text = collision.to_string();
        assert!(text.contains("a.b-c") && text.contains("a-b.c"), "{text}");
    }

    #[test]
    fn instance_names_are_quoted_in_the_command() {
        let mut odd = instance("web-0", 1, &[]);
        odd.plan = "x'; rm -rf /; '".into();
        assert_eq!(
            instance_command("run {instance} {plan} {member}", &odd, "m-0"),
            r"run 'web-0' 'x'\''; rm -rf /; '\''' 'm-0'"
        );
    }

    #[test]
    fn reports_render_as_compact_json_and_stay_bounded() {
        let mut reports = InstanceReports::new();
        reports.insert(
            "web-0".into(),
            InstanceReport::new(InstanceState::Installed, 4),
        );
        reports.insert(
            "web-1".into(),
            InstanceReport::failed(4, "ExitCode3", &"x".repeat(1000)),
        );
        let rendered = render_reports(&reports);
        let message = "x".repeat(253) + "…";
        assert_eq!(
            rendered,
            format!(
                r#"{{"web-0":{{"state":"installed","deployment":4}},"web-1":{{"state":"failed","deployment":4,"code":"ExitCode3","message":"{message}"}}}}"#
            )
        );
        for n in 0..400 {
            reports.insert(
                format!("big-{n}"),
                InstanceReport::failed(1, "ExitCode1", &"y".repeat(300)),
            );
        }
        let bounded = render_reports(&reports);
        assert!(bounded.len() <= MAX_REPORTS_BYTES, "{}", bounded.len());
        assert!(bounded.contains(r#""code":"ExitCode1""#));
    }

    #[test]
    fn without_exec_an_instance_is_pending_until_acknowledged_then_removed_once_dropped() {
        let web = [instance("web-0", 1, &[])];
        let pending = acknowledged_states(&InstanceReports::new(), &web, false);
        assert_eq!(pending["web-0"].state, InstanceState::Pending);
        let installed = acknowledged_states(&pending, &web, true);
        assert_eq!(installed["web-0"].state, InstanceState::Installed);
        // A later slice (other jobs) not yet acknowledged keeps it installed…
        assert_eq!(
            acknowledged_states(&installed, &web, false)["web-0"].state,
            InstanceState::Installed
        );
        // …but a new deployment is pending again.
        let moved = [instance("web-0", 2, &[])];
        assert_eq!(
            acknowledged_states(&installed, &moved, false)["web-0"],
            InstanceReport::new(InstanceState::Pending, 2)
        );
        let removing = acknowledged_states(&installed, &[], false);
        assert_eq!(removing["web-0"].state, InstanceState::Removing);
        let removed = acknowledged_states(&removing, &[], true);
        assert_eq!(
            removed["web-0"],
            InstanceReport::new(InstanceState::Removed, 1)
        );
    }
}
