//! MRDS deployment plans read as written, for `kubectl shoal import-mrds`.
//!
//! An MRDS plan document (as the MRDS README shows it, YAML or JSON) is
//! either one plan or `plans: [<plan>, …]`. Each plan has `name`,
//! `namespace`, `serviceName`, `matchingComputeCapabilities` and
//! `applications`; each application `payloadName`, `resources` (`cores`,
//! `memory` in GiB), `ports` and `persistentVolumes`. [`parse`] turns it into
//! [`MrdsPlan`]s in Shoal's terms:
//!
//! * `matchingComputeCapabilities[]` become [`Requirement`]s: the comparator
//!   in any case, with or without MRDS's `Comparator_` prefix (`gte`, `GTE`,
//!   `Comparator_GTE`, `not_in`, `NotIn`); `eq` is an `In` of its one name (an
//!   `eq` naming several is refused).
//! * `payloadName` is the application's name (a DNS label, as the
//!   DeploymentPlan requires).
//! * `resources.cores` is the `cores` demand; `resources.memory` (GiB) the
//!   `memory` demand in the [`MemoryUnit`] the pools' `shoal.dev/capacity`
//!   annotations use: Shoal's amounts are unit-less whole numbers that every
//!   pool and plan of a Swarm must agree on, so the importer is told the unit
//!   and converts exactly (a fraction that is no whole number in that unit is
//!   refused).
//! * `ports[]` keep protocol (`TCP`/`UDP`, any case, default `TCP`) and port.
//! * `serviceName` is carried as it is (the plan's `spec.serviceName`).
//! * `persistentVolumes` is refused when it lists any volume: a plan does not
//!   create the member pods its instances run on, so it cannot give them
//!   volumes (mount them on the pool's StatefulSet instead). With
//!   [`Options::skip_persistent_volumes`] (the user's explicit choice) they are
//!   left out, and each one left out is listed in [`MrdsPlan::skipped`].
//!
//! Nothing is dropped silently: a field this module does not know is an error
//! naming it and its path (`plans[0].applications[1].replicas`), as is a
//! value of the wrong type.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::capability::{Comparator, Requirement};
use super::is_label_value;

/// The resource name MRDS's `resources.cores` becomes.
pub const RESOURCE_CORES: &str = "cores";
/// The resource name MRDS's `resources.memory` becomes.
pub const RESOURCE_MEMORY: &str = "memory";

/// The unit the pools' `shoal.dev/capacity` annotations give `memory` in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemoryUnit {
    /// GiB, as MRDS writes it: amounts are kept.
    #[default]
    Gi,
    /// MiB: amounts are multiplied by 1024.
    Mi,
}

impl MemoryUnit {
    /// How many of this unit make one GiB.
    fn per_gib(self) -> f64 {
        match self {
            MemoryUnit::Gi => 1.0,
            MemoryUnit::Mi => 1024.0,
        }
    }

    /// `GiB` or `MiB`.
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryUnit::Gi => "GiB",
            MemoryUnit::Mi => "MiB",
        }
    }
}

/// How [`parse`] reads a document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Options {
    /// The unit of `memory` in the Swarm's pools.
    pub memory: MemoryUnit,
    /// Leave `persistentVolumes` out (listing them in [`MrdsPlan::skipped`]) instead of
    /// refusing the document.
    pub skip_persistent_volumes: bool,
}

/// One MRDS plan in Shoal's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MrdsPlan {
    /// `name`: the DeploymentPlan's name.
    pub name: String,
    /// `namespace`, if given.
    pub namespace: Option<String>,
    /// `serviceName`, if given.
    pub service_name: Option<String>,
    /// `matchingComputeCapabilities`, in document order.
    pub requirements: Vec<Requirement>,
    /// `applications`, in document order.
    pub applications: Vec<MrdsApplication>,
    /// What was left out at the user's request, one entry per field:
    /// `plans[0].applications[0].persistentVolumes (2 volumes)`.
    pub skipped: Vec<String>,
}

/// One MRDS application in Shoal's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MrdsApplication {
    /// `payloadName`.
    pub name: String,
    /// `resources`: `cores` and `memory` (in the [`MemoryUnit`] asked for).
    pub resources: BTreeMap<String, u64>,
    /// `ports`.
    pub ports: Vec<MrdsPort>,
}

/// One port of an MRDS application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MrdsPort {
    /// `TCP` or `UDP`.
    pub protocol: String,
    /// 1–65535.
    pub port: u16,
}

/// Why an MRDS document cannot be imported; every variant names the path of
/// the offending field (`plans[0].applications[0].ports[1].port`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MrdsError {
    /// The text is neither YAML nor JSON.
    #[error("not a YAML or JSON document: {0}")]
    Syntax(String),
    /// A field this importer does not know.
    #[error("{path}: unknown field {field:?} (known here: {known}); nothing is dropped silently")]
    UnknownField {
        /// Where the field is.
        path: String,
        /// The field.
        field: String,
        /// The fields known at that place.
        known: &'static str,
    },
    /// A field that has no meaning in Shoal.
    #[error("{path}: {why}")]
    NoMeaning {
        /// The field.
        path: String,
        /// Why Shoal cannot honour it, and what to do instead.
        why: &'static str,
    },
    /// A required field that is missing.
    #[error("{path}: missing (an MRDS plan needs it)")]
    Missing {
        /// The field.
        path: String,
    },
    /// A value Shoal cannot take.
    #[error("{path}: {problem}")]
    Invalid {
        /// The field.
        path: String,
        /// What is wrong with its value.
        problem: String,
    },
}

/// Reads an MRDS plan document (YAML or JSON): one plan, or `plans: [...]`.
pub fn parse(text: &str, options: Options) -> Result<Vec<MrdsPlan>, MrdsError> {
    // JSON is YAML: one reader takes both.
    let document: Value =
        serde_saphyr::from_str(text).map_err(|error| MrdsError::Syntax(error.to_string()))?;
    let Value::Object(top) = &document else {
        return Err(invalid(
            "(document)",
            "must be a mapping: a plan or `plans: [...]`",
        ));
    };
    if top.contains_key("plans") {
        let fields = Fields::new(&document, "", "plans")?;
        let plans = fields.list("plans")?.ok_or_else(|| MrdsError::Missing {
            path: "plans".to_owned(),
        })?;
        if plans.is_empty() {
            return Err(invalid("plans", "lists no plan"));
        }
        let parsed = plans
            .iter()
            .enumerate()
            .map(|(index, plan)| parse_plan(plan, &format!("plans[{index}]"), options))
            .collect::<Result<Vec<_>, _>>()?;
        let mut names = BTreeSet::new();
        for (index, plan) in parsed.iter().enumerate() {
            if !names.insert(plan.name.as_str()) {
                return Err(invalid(
                    &format!("plans[{index}].name"),
                    format!("{:?} names a plan listed before", plan.name),
                ));
            }
        }
        Ok(parsed)
    } else {
        Ok(vec![parse_plan(&document, "", options)?])
    }
}

const PLAN_FIELDS: &str = "name, namespace, serviceName, matchingComputeCapabilities, applications";
const CAPABILITY_FIELDS: &str = "capabilityType, comparator, capabilityNames";
const APPLICATION_FIELDS: &str = "payloadName, resources, ports, persistentVolumes";
const RESOURCE_FIELDS: &str = "cores, memory";
const PORT_FIELDS: &str = "protocol, port";

fn parse_plan(value: &Value, path: &str, options: Options) -> Result<MrdsPlan, MrdsError> {
    let fields = Fields::new(value, path, PLAN_FIELDS)?;
    let name = fields.required_string("name")?;
    if !is_dns_subdomain(&name) {
        return Err(invalid(
            &fields.path("name"),
            format!(
                "{name:?} is not a Kubernetes object name (lowercase a-z 0-9 - ., at most 253)"
            ),
        ));
    }
    let requirements = fields
        .list("matchingComputeCapabilities")?
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(index, capability)| {
            parse_capability(
                capability,
                &fields.path(&format!("matchingComputeCapabilities[{index}]")),
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let applications = fields
        .list("applications")?
        .ok_or_else(|| MrdsError::Missing {
            path: fields.path("applications"),
        })?;
    if applications.is_empty() {
        return Err(invalid(
            &fields.path("applications"),
            "lists no application",
        ));
    }
    let mut skipped = Vec::new();
    let applications = applications
        .iter()
        .enumerate()
        .map(|(index, application)| {
            parse_application(
                application,
                &fields.path(&format!("applications[{index}]")),
                options,
                &mut skipped,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut seen = BTreeSet::new();
    for (index, application) in applications.iter().enumerate() {
        if !seen.insert(application.name.as_str()) {
            return Err(invalid(
                &fields.path(&format!("applications[{index}].payloadName")),
                format!("{:?} names an application listed before", application.name),
            ));
        }
    }
    Ok(MrdsPlan {
        name,
        namespace: fields.string("namespace")?,
        service_name: fields.string("serviceName")?,
        requirements,
        applications,
        skipped,
    })
}

fn parse_capability(value: &Value, path: &str) -> Result<Requirement, MrdsError> {
    let fields = Fields::new(value, path, CAPABILITY_FIELDS)?;
    let capability_type = fields.required_string("capabilityType")?;
    if !is_label_value(&capability_type) {
        return Err(invalid(
            &fields.path("capabilityType"),
            format!(
                "{capability_type:?} is not a capability type (1-63 of A-Z a-z 0-9 - _ ., starting and ending with a letter or digit)"
            ),
        ));
    }
    let names_path = fields.path("capabilityNames");
    let names = fields
        .list("capabilityNames")?
        .ok_or_else(|| MrdsError::Missing {
            path: names_path.clone(),
        })?
        .iter()
        .enumerate()
        .map(|(index, name)| {
            let path = format!("{names_path}[{index}]");
            match name.as_str() {
                Some(name) if is_label_value(name) => Ok(name.to_owned()),
                Some(name) => Err(invalid(
                    &path,
                    format!("{name:?} is not a capability name (1-63 of A-Z a-z 0-9 - _ ., starting and ending with a letter or digit)"),
                )),
                None => Err(invalid(&path, "must be a string")),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    if names.is_empty() {
        return Err(invalid(&names_path, "lists no capability name"));
    }
    let comparator_text = fields.required_string("comparator")?;
    let comparator = match comparator(&comparator_text) {
        Some(Some(comparator)) => comparator,
        Some(None) if names.len() == 1 => Comparator::In,
        Some(None) => {
            return Err(invalid(
                &fields.path("comparator"),
                format!(
                    "{comparator_text:?} compares with exactly one name, but capabilityNames lists {}; use `in` for any of several",
                    names.len()
                ),
            ));
        }
        None => {
            return Err(invalid(
                &fields.path("comparator"),
                format!(
                    "{comparator_text:?} is not a comparator; expected one of: in, notIn, gte, lte, eq (any case)"
                ),
            ));
        }
    };
    Ok(Requirement {
        capability_type,
        comparator,
        names: names.into_iter().collect(),
    })
}

/// A comparator in any case, with or without `Comparator_` and `_`:
/// `Some(Some(c))` for Shoal's four, `Some(None)` for `eq`, `None` otherwise.
fn comparator(text: &str) -> Option<Option<Comparator>> {
    let trimmed = text.trim();
    let bare = trimmed
        .get(..11)
        .filter(|prefix| prefix.eq_ignore_ascii_case("comparator_"))
        .map_or(trimmed, |_| &trimmed[11..]);
    let bare: String = bare.chars().filter(|c| *c != '_').collect();
    if bare.eq_ignore_ascii_case("eq") {
        return Some(None);
    }
    Comparator::ALL
        .into_iter()
        .find(|comparator| comparator.as_str().eq_ignore_ascii_case(&bare))
        .map(Some)
}

fn parse_application(
    value: &Value,
    path: &str,
    options: Options,
    skipped: &mut Vec<String>,
) -> Result<MrdsApplication, MrdsError> {
    let memory = options.memory;
    let fields = Fields::new(value, path, APPLICATION_FIELDS)?;
    let name = fields.required_string("payloadName")?;
    if !is_dns_label(&name) {
        return Err(invalid(
            &fields.path("payloadName"),
            format!(
                "{name:?} is not an application name: a DeploymentPlan needs a DNS label (1-63 of lowercase a-z 0-9 -, starting and ending with a letter or digit)"
            ),
        ));
    }
    let volumes = fields.list("persistentVolumes")?.unwrap_or_default();
    if !volumes.is_empty() {
        if !options.skip_persistent_volumes {
            return Err(MrdsError::NoMeaning {
                path: fields.path("persistentVolumes"),
                why: "persistent volumes have no meaning here: a DeploymentPlan does not create the pods its instances run on (the Swarm's pool StatefulSets do); mount volumes through the pool's volumeClaimTemplates, and remove persistentVolumes or pass --skip-persistent-volumes",
            });
        }
        skipped.push(format!(
            "{} ({} volume{})",
            fields.path("persistentVolumes"),
            volumes.len(),
            if volumes.len() == 1 { "" } else { "s" }
        ));
    }
    let mut resources = BTreeMap::new();
    if let Some(value) = fields.get("resources") {
        let resource_fields = Fields::new(value, &fields.path("resources"), RESOURCE_FIELDS)?;
        if let Some(cores) = resource_fields.get("cores") {
            resources.insert(
                RESOURCE_CORES.to_owned(),
                whole(cores, &resource_fields.path("cores"), 1.0, "cores")?,
            );
        }
        if let Some(amount) = resource_fields.get("memory") {
            resources.insert(
                RESOURCE_MEMORY.to_owned(),
                whole(
                    amount,
                    &resource_fields.path("memory"),
                    memory.per_gib(),
                    memory.as_str(),
                )?,
            );
        }
    }
    let ports = fields
        .list("ports")?
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(index, port)| parse_port(port, &fields.path(&format!("ports[{index}]"))))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(MrdsApplication {
        name,
        resources,
        ports,
    })
}

fn parse_port(value: &Value, path: &str) -> Result<MrdsPort, MrdsError> {
    let fields = Fields::new(value, path, PORT_FIELDS)?;
    let protocol = match fields.string("protocol")? {
        None => "TCP".to_owned(),
        Some(text) if text.eq_ignore_ascii_case("tcp") => "TCP".to_owned(),
        Some(text) if text.eq_ignore_ascii_case("udp") => "UDP".to_owned(),
        Some(text) => {
            return Err(invalid(
                &fields.path("protocol"),
                format!("{text:?} is not a protocol; expected TCP or UDP"),
            ));
        }
    };
    let port_path = fields.path("port");
    let port = fields
        .get("port")
        .ok_or_else(|| MrdsError::Missing {
            path: port_path.clone(),
        })?
        .as_u64()
        .and_then(|port| u16::try_from(port).ok())
        .filter(|port| *port > 0)
        .ok_or_else(|| invalid(&port_path, "must be a whole number from 1 to 65535"))?;
    Ok(MrdsPort { protocol, port })
}

/// `value × factor` as a whole number; an error names the path and unit.
fn whole(value: &Value, path: &str, factor: f64, unit: &str) -> Result<u64, MrdsError> {
    if let Some(amount) = value.as_u64() {
        return amount
            .checked_mul(factor as u64)
            .ok_or_else(|| invalid(path, "is too large"));
    }
    let Some(amount) = value.as_f64().filter(|amount| *amount >= 0.0) else {
        return Err(invalid(path, "must be a number at least 0"));
    };
    let scaled = amount * factor;
    if scaled.fract() != 0.0 || scaled > u64::MAX as f64 {
        return Err(invalid(
            path,
            format!(
                "{amount} is not a whole number of {unit}, and Shoal's amounts are whole numbers (for memory, pass a smaller unit with --memory-unit)"
            ),
        ));
    }
    Ok(scaled as u64)
}

fn invalid(path: &str, problem: impl Into<String>) -> MrdsError {
    MrdsError::Invalid {
        path: path.to_owned(),
        problem: problem.into(),
    }
}

/// A mapping whose keys were all checked against the known ones.
struct Fields<'a> {
    map: &'a serde_json::Map<String, Value>,
    path: String,
}

impl<'a> Fields<'a> {
    /// `value` as a mapping of only `known` fields (comma-separated).
    fn new(value: &'a Value, path: &str, known: &'static str) -> Result<Fields<'a>, MrdsError> {
        let Value::Object(map) = value else {
            return Err(invalid(
                if path.is_empty() { "(document)" } else { path },
                "must be a mapping",
            ));
        };
        let fields = Fields {
            map,
            path: path.to_owned(),
        };
        if let Some(field) = map
            .keys()
            .find(|key| !known.split(", ").any(|known| known == key.as_str()))
        {
            return Err(MrdsError::UnknownField {
                path: fields.path(field),
                field: field.clone(),
                known,
            });
        }
        Ok(fields)
    }

    fn path(&self, field: &str) -> String {
        if self.path.is_empty() {
            field.to_owned()
        } else {
            format!("{}.{field}", self.path)
        }
    }

    /// A field that is present and not null.
    fn get(&self, field: &str) -> Option<&'a Value> {
        self.map.get(field).filter(|value| !value.is_null())
    }

    fn string(&self, field: &str) -> Result<Option<String>, MrdsError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text.clone())),
            Some(_) => Err(invalid(&self.path(field), "must be a string")),
        }
    }

    fn required_string(&self, field: &str) -> Result<String, MrdsError> {
        self.string(field)?.ok_or_else(|| MrdsError::Missing {
            path: self.path(field),
        })
    }

    fn list(&self, field: &str) -> Result<Option<&'a [Value]>, MrdsError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items.as_slice())),
            Some(_) => Err(invalid(&self.path(field), "must be a list")),
        }
    }
}

fn is_dns_label(name: &str) -> bool {
    name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The MRDS README's plan, as its walkthrough writes it.
    const SEED_PLAN: &str = r#"plans:
  - name: "nginx-deployment-plan"
    namespace: "nginx-namespace"
    serviceName: "nginx-service"
    matchingComputeCapabilities:
      - capabilityType: "GPU"
        comparator: "gte"
        capabilityNames:
          - "nvidia-v100"
          - "nvidia-p100"
      - capabilityType: "CPU"
        comparator: "eq"
        capabilityNames:
          - "intel-xeon"
    applications:
      - payloadName: "nginx-payload"
        resources:
          cores: 4
          memory: 64
        ports:
          - protocol: "TCP"
            port: 80
          - protocol: "UDP"
            port: 53
"#;

    fn requirement(capability_type: &str, comparator: Comparator, names: &[&str]) -> Requirement {
        Requirement {
            capability_type: capability_type.to_owned(),
            comparator,
            names: names.iter().map(|name| (*name).to_owned()).collect(),
        }
    }

    fn error(text: &str) -> String {
        parse(text, Options::default()).unwrap_err().to_string()
    }

    #[test]
    fn the_readme_plan_without_volumes_converts_field_by_field() {
        let plans = parse(SEED_PLAN, Options::default()).unwrap();
        assert_eq!(
            plans,
            vec![MrdsPlan {
                name: "nginx-deployment-plan".to_owned(),
                namespace: Some("nginx-namespace".to_owned()),
                service_name: Some("nginx-service".to_owned()),
                requirements: vec![
                    requirement("GPU", Comparator::Gte, &["nvidia-v100", "nvidia-p100"]),
                    requirement("CPU", Comparator::In, &["intel-xeon"]),
                ],
                applications: vec![MrdsApplication {
                    name: "nginx-payload".to_owned(),
                    resources: BTreeMap::from([("cores".to_owned(), 4), ("memory".to_owned(), 64)]),
                    ports: vec![
                        MrdsPort {
                            protocol: "TCP".to_owned(),
                            port: 80
                        },
                        MrdsPort {
                            protocol: "UDP".to_owned(),
                            port: 53
                        },
                    ],
                }],
                skipped: Vec::new(),
            }]
        );
    }

    #[test]
    fn one_plan_without_the_plans_list_and_json_read_the_same() {
        let yaml = parse(SEED_PLAN, Options::default()).unwrap();
        let document: Value = serde_saphyr::from_str(SEED_PLAN).unwrap();
        let single = serde_json::to_string(&document["plans"][0]).unwrap();
        assert_eq!(parse(&single, Options::default()).unwrap(), yaml);
        let whole = serde_json::to_string_pretty(&document).unwrap();
        assert_eq!(parse(&whole, Options::default()).unwrap(), yaml);
    }

    #[test]
    fn comparators_are_read_in_any_case_and_eq_is_an_in_of_one_name() {
        let table = [
            ("gte", Some(Some(Comparator::Gte))),
            ("GTE", Some(Some(Comparator::Gte))),
            ("Gte", Some(Some(Comparator::Gte))),
            ("Comparator_GTE", Some(Some(Comparator::Gte))),
            ("lte", Some(Some(Comparator::Lte))),
            ("in", Some(Some(Comparator::In))),
            ("Comparator_IN", Some(Some(Comparator::In))),
            ("not_in", Some(Some(Comparator::NotIn))),
            ("NotIn", Some(Some(Comparator::NotIn))),
            ("EQ", Some(None)),
            ("eq", Some(None)),
            ("gt", None),
            ("", None),
        ];
        for (text, expected) in table {
            assert_eq!(comparator(text), expected, "{text:?}");
        }
        assert!(
            error(&SEED_PLAN.replace(r#""gte""#, r#""eq""#)).starts_with(
                "plans[0].matchingComputeCapabilities[0].comparator: \"eq\" compares with exactly one name, but capabilityNames lists 2"
            )
        );
        assert!(
            error(&SEED_PLAN.replace(r#""gte""#, r#""gt""#)).starts_with(
                "plans[0].matchingComputeCapabilities[0].comparator: \"gt\" is not a comparator"
            )
        );
    }

    #[test]
    fn memory_in_gib_is_converted_exactly_to_the_pools_unit() {
        let memory = |text: &str, unit| {
            let options = Options {
                memory: unit,
                ..Options::default()
            };
            parse(&SEED_PLAN.replace("memory: 64", text), options).map(|plans| {
                plans[0].applications[0]
                    .resources
                    .get(RESOURCE_MEMORY)
                    .copied()
            })
        };
        assert_eq!(memory("memory: 64", MemoryUnit::Mi), Ok(Some(65536)));
        assert_eq!(memory("memory: 0.5", MemoryUnit::Mi), Ok(Some(512)));
        assert_eq!(memory("memory: 2", MemoryUnit::Gi), Ok(Some(2)));
        assert_eq!(memory("memory: null", MemoryUnit::Gi), Ok(None));
        assert_eq!(
            memory("memory: 0.5", MemoryUnit::Gi)
                .unwrap_err()
                .to_string(),
            "plans[0].applications[0].resources.memory: 0.5 is not a whole number of GiB, and Shoal's amounts are whole numbers (for memory, pass a smaller unit with --memory-unit)"
        );
        assert_eq!(
            memory("memory: -1", MemoryUnit::Gi)
                .unwrap_err()
                .to_string(),
            "plans[0].applications[0].resources.memory: must be a number at least 0"
        );
    }

    #[test]
    fn persistent_volumes_on_pods_the_plan_does_not_create_are_refused_naming_the_field_unless_skipped_by_choice()
     {
        let with_volumes = format!(
            "{SEED_PLAN}        persistentVolumes:\n          - storageClass: standard\n            capacity: 100\n            mountPath: /data\n"
        );
        let message = error(&with_volumes);
        assert!(
            message.starts_with("plans[0].applications[0].persistentVolumes: persistent volumes have no meaning here"),
            "{message}"
        );
        let empty = format!("{SEED_PLAN}        persistentVolumes: []\n");
        assert!(parse(&empty, Options::default()).is_ok());
        let skipping = Options {
            skip_persistent_volumes: true,
            ..Options::default()
        };
        let plans = parse(&with_volumes, skipping).unwrap();
        assert_eq!(
            plans[0].skipped,
            vec!["plans[0].applications[0].persistentVolumes (1 volume)".to_owned()]
        );
        assert_eq!(
            plans[0].applications,
            parse(SEED_PLAN, Options::default()).unwrap()[0].applications
        );
    }

    #[test]
    fn an_unknown_field_is_an_error_naming_it_and_its_path() {
        let table = [
            (
                SEED_PLAN.replace("serviceName", "serviceNam"),
                "plans[0].serviceNam: unknown field \"serviceNam\"",
            ),
            (
                SEED_PLAN.replace("cores: 4", "cores: 4\n          disk: 10"),
                "plans[0].applications[0].resources.disk: unknown field \"disk\"",
            ),
            (
                SEED_PLAN.replace("port: 53", "port: 53\n            hostPort: 53"),
                "plans[0].applications[0].ports[1].hostPort: unknown field \"hostPort\"",
            ),
            (
                format!("{SEED_PLAN}deployments: []\n"),
                "deployments: unknown field \"deployments\"",
            ),
        ];
        for (text, expected) in table {
            let message = error(&text);
            assert!(message.starts_with(expected), "{message}");
        }
    }

    #[test]
    fn values_shoal_cannot_take_are_refused_naming_the_path() {
        let table = [
            (
                SEED_PLAN.replace("nginx-payload", "Nginx_Payload"),
                "plans[0].applications[0].payloadName: \"Nginx_Payload\" is not an application name",
            ),
            (
                SEED_PLAN.replace("port: 53", "port: 70000"),
                "plans[0].applications[0].ports[1].port: must be a whole number from 1 to 65535",
            ),
            (
                SEED_PLAN.replace("\"UDP\"", "\"SCTP\""),
                "plans[0].applications[0].ports[1].protocol: \"SCTP\" is not a protocol",
            ),
            (
                SEED_PLAN.replace("cores: 4", "cores: 1.5"),
                "plans[0].applications[0].resources.cores: 1.5 is not a whole number of cores",
            ),
            (
                SEED_PLAN.replace("name: \"nginx-deployment-plan\"\n    ", ""),
                "plans[0].name: missing",
            ),
            ("plans: []\n".to_owned(), "plans: lists no plan"),
            ("- a\n".to_owned(), "(document): must be a mapping"),
            (
                SEED_PLAN.replace("\"intel-xeon\"", "\"intel xeon\""),
                "plans[0].matchingComputeCapabilities[1].capabilityNames[0]: \"intel xeon\" is not a capability name",
            ),
        ];
        for (text, expected) in table {
            let message = error(&text);
            assert!(message.starts_with(expected), "{message}");
        }
    }
}
