//! Naming objects as kubectl does: `swarm/demo`, `dplan/web`, and the CRDs' other
//! names (`swarms/`, `sw/`, `deploymentplan/`, `deploymentplans/`, each also with
//! `.shoal.dev`; `plan/` as earlier releases took it). A bare name keeps its meaning
//! per command: a Swarm for the Swarm commands, a DeploymentPlan for the plan ones;
//! `pause`, `resume` and `rollout-status` take either and refuse a bare name both
//! kinds carry ([`super::swarm_rollout::resolve`]).

/// The kinds the plugin names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `Swarm`.
    Swarm,
    /// `DeploymentPlan`.
    Plan,
}

impl Kind {
    /// The kind as kubectl prints it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Swarm => "Swarm",
            Kind::Plan => "DeploymentPlan",
        }
    }

    /// The short form to give it with, `swarm/<name>` or `dplan/<name>`.
    pub fn prefix(self) -> &'static str {
        match self {
            Kind::Swarm => "swarm",
            Kind::Plan => "dplan",
        }
    }

    fn of(word: &str) -> Option<Kind> {
        let word = word.to_ascii_lowercase();
        let word = word.strip_suffix(".shoal.dev").unwrap_or(&word);
        match word {
            "swarm" | "swarms" | "sw" => Some(Kind::Swarm),
            "dplan" | "deploymentplan" | "deploymentplans" | "plan" => Some(Kind::Plan),
            _ => None,
        }
    }
}

/// Splits `kind/name` or a bare `name` (kind `None`); refuses an unknown kind or no name.
pub fn split(text: &str) -> Result<(Option<Kind>, String), String> {
    let Some((word, name)) = text.split_once('/') else {
        return named(None, text);
    };
    let kind = Kind::of(word).ok_or_else(|| {
        format!(
            "{word:?} is not a kind Shoal knows: give swarm/<name> (also swarms, sw) or dplan/<name> (also deploymentplan, deploymentplans)"
        )
    })?;
    named(Some(kind), name)
}

fn named(kind: Option<Kind>, name: &str) -> Result<(Option<Kind>, String), String> {
    if name.is_empty() || name.contains('/') {
        return Err(format!(
            "{name:?} is no object name: give <name> or <kind>/<name>"
        ));
    }
    Ok((kind, name.to_owned()))
}

/// The argument of a command that takes `want`: a bare name or `<kind>/<name>` of that kind.
fn of_kind(text: &str, want: Kind) -> Result<String, String> {
    match split(text)? {
        (Some(kind), _) if kind != want => Err(format!(
            "{text} is a {}, and this command takes a {} ({}/<name> or <name>)",
            kind.name(),
            want.name(),
            want.prefix()
        )),
        (_, name) => Ok(name),
    }
}

/// Command-line parser of a Swarm argument: `<name>` or `swarm/<name>`.
pub fn swarm(text: &str) -> Result<String, String> {
    of_kind(text, Kind::Swarm)
}

/// Command-line parser of a DeploymentPlan argument: `<name>` or `dplan/<name>`.
pub fn plan(text: &str) -> Result<String, String> {
    of_kind(text, Kind::Plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_the_crds_carry_picks_its_kind() {
        for word in ["swarm", "swarms", "sw", "Swarm", "swarms.shoal.dev"] {
            assert_eq!(
                swarm(&format!("{word}/demo")),
                Ok("demo".to_owned()),
                "{word}"
            );
        }
        for word in [
            "dplan",
            "deploymentplan",
            "deploymentplans",
            "plan",
            "dplan.shoal.dev",
        ] {
            assert_eq!(plan(&format!("{word}/web")), Ok("web".to_owned()), "{word}");
        }
        assert_eq!(swarm("demo"), Ok("demo".to_owned()));
        assert_eq!(plan("web"), Ok("web".to_owned()));
    }

    #[test]
    fn a_name_of_the_other_kind_or_of_no_kind_is_refused_saying_what_to_give() {
        let refused = swarm("dplan/web").expect_err("a plan is no Swarm");
        assert!(
            refused.contains("is a DeploymentPlan, and this command takes a Swarm"),
            "{refused}"
        );
        let refused = plan("deployment/web").expect_err("no Shoal kind");
        assert!(refused.contains("swarm/<name>"), "{refused}");
        assert!(swarm("swarm/").is_err());
        assert!(swarm("swarm/a/b").is_err());
    }
}
