//! What a pool declares for plan placement, and each member's update domain.
//!
//! A kubectl user describes the members of a pool with annotations on the
//! pool's StatefulSet (every member of the pool gets the same):
//!
//! * [`ANNOTATION_CAPABILITIES`] (`shoal.dev/capabilities`): scored
//!   capabilities in the grammar of [`super::capability`], e.g.
//!   `GPU=nvidia-v100:3;CPU=intel-xeon`.
//! * [`ANNOTATION_CAPACITY`] (`shoal.dev/capacity`): what *each* member can
//!   give to plan instances, `NAME=AMOUNT{,NAME=AMOUNT}`, e.g.
//!   `cores=60,memory=480`. Names are 1–63 lowercase letters, digits and `-`
//!   (starting and ending with a letter or digit) and must match the names
//!   plans use for their demands; amounts are decimal `u64` in the unit the
//!   plans use. Spaces around tokens are ignored; a name may appear once.
//! * [`ANNOTATION_RESERVED`] (`shoal.dev/reserved`): what each member keeps
//!   for itself (MRDS's "system reserved"), in the same grammar and units as
//!   the capacity, e.g. `cores=4,memory=32`. Placement gives plans the
//!   capacity less this ([`PoolDeclaration::usable`], at least 0 per resource).
//! * [`ANNOTATION_UPDATE_DOMAIN`] (`shoal.dev/update-domain`): the update
//!   domain of every member of the pool (a label value: 1–63 of letters,
//!   digits, `-`, `_`, `.`, starting and ending with a letter or digit).
//!
//! A missing annotation means no capabilities, no capacity, or no declared
//! domain. A member's update domain ([`member_update_domain`]) is the pool's
//! declared domain; else the zone of the member's node (the
//! [`NODE_ZONE_LABEL`] label, so members in one zone are disrupted together);
//! else the pool's name (each pool its own domain).

use std::collections::BTreeMap;

use super::capability::{Capabilities, CapabilityParseError};
use super::is_label_value;
use super::placement::DeployMember;
use crate::member::{MemberId, Resources};

pub use crate::names::{
    ANNOTATION_CAPABILITIES, ANNOTATION_CAPACITY, ANNOTATION_RESERVED, ANNOTATION_UPDATE_DOMAIN,
};
/// The well-known node label holding a node's zone.
pub const NODE_ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// What one pool declares for its members.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolDeclaration {
    /// Capabilities of every member.
    pub capabilities: Capabilities,
    /// What each member has, before what it keeps for itself.
    pub capacity: Resources,
    /// What each member keeps for itself (not for plan instances).
    pub reserved: Resources,
    /// The declared update domain, if any.
    pub update_domain: Option<String>,
}

/// A pool annotation that cannot be read; names the pool, the annotation
/// and the offending entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolDeclarationError {
    /// The capabilities annotation is malformed.
    #[error("pool {pool:?}, annotation {ANNOTATION_CAPABILITIES}: {problem}")]
    Capabilities {
        /// The pool.
        pool: String,
        /// What is wrong.
        problem: CapabilityParseError,
    },
    /// The capacity or reserved annotation is malformed.
    #[error("pool {pool:?}, annotation {annotation}: entry {entry:?} {problem}")]
    Capacity {
        /// The pool.
        pool: String,
        /// [`ANNOTATION_CAPACITY`] or [`ANNOTATION_RESERVED`].
        annotation: &'static str,
        /// The offending `NAME=AMOUNT` entry as written.
        entry: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The update-domain annotation is not a valid name.
    #[error(
        "pool {pool:?}, annotation {ANNOTATION_UPDATE_DOMAIN}: {value:?} is not a valid update domain (1-63 of A-Z a-z 0-9 - _ ., starting and ending with a letter or digit)"
    )]
    UpdateDomain {
        /// The pool.
        pool: String,
        /// The value.
        value: String,
    },
}

impl PoolDeclaration {
    /// Reads the pool's annotations (see the module docs).
    pub fn from_annotations(
        pool: &str,
        annotations: &BTreeMap<String, String>,
    ) -> Result<PoolDeclaration, PoolDeclarationError> {
        let text = |key: &str| annotations.get(key).map(String::as_str);
        let capabilities = Capabilities::parse(text(ANNOTATION_CAPABILITIES).unwrap_or(""))
            .map_err(|problem| PoolDeclarationError::Capabilities {
                pool: pool.to_owned(),
                problem,
            })?;
        let amounts = |annotation: &'static str| {
            parse_capacity(text(annotation).unwrap_or("")).map_err(|(entry, problem)| {
                PoolDeclarationError::Capacity {
                    pool: pool.to_owned(),
                    annotation,
                    entry,
                    problem,
                }
            })
        };
        let capacity = amounts(ANNOTATION_CAPACITY)?;
        let reserved = amounts(ANNOTATION_RESERVED)?;
        let update_domain = match text(ANNOTATION_UPDATE_DOMAIN).map(str::trim) {
            None => None,
            Some(value) if is_label_value(value) => Some(value.to_owned()),
            Some(value) => {
                return Err(PoolDeclarationError::UpdateDomain {
                    pool: pool.to_owned(),
                    value: value.to_owned(),
                });
            }
        };
        Ok(PoolDeclaration {
            capabilities,
            capacity,
            reserved,
            update_domain,
        })
    }

    /// What each member gives to plan instances: its capacity less what it reserves.
    pub fn usable(&self) -> Resources {
        let mut usable = self.capacity.clone();
        usable.take(&self.reserved);
        usable
    }
}

impl PoolDeclaration {
    /// One member of the pool as placement sees it: the pool's capabilities
    /// and usable capacity ([`PoolDeclaration::usable`]), its own availability
    /// and update domain (see [`member_update_domain`]).
    pub fn member(&self, id: MemberId, available: bool, update_domain: String) -> DeployMember {
        DeployMember {
            id,
            available,
            capabilities: self.capabilities.clone(),
            capacity: self.usable(),
            update_domain,
            cordoned: false,
        }
    }
}

/// Parses `NAME=AMOUNT{,NAME=AMOUNT}`; an error gives the entry and the problem.
fn parse_capacity(text: &str) -> Result<Resources, (String, &'static str)> {
    let mut capacity = Resources::none();
    if text.trim().is_empty() {
        return Ok(capacity);
    }
    for entry in text.split(',').map(str::trim) {
        let fail = |problem| Err((entry.to_owned(), problem));
        let Some((name, amount)) = entry.split_once('=') else {
            return fail("has no \"=\": write NAME=AMOUNT");
        };
        let (name, amount) = (name.trim(), amount.trim());
        if !is_resource_name(name) {
            return fail("has an invalid resource name (1-63 of a-z 0-9 -)");
        }
        let Some(amount) = amount
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| amount.parse::<u64>().ok())
            .flatten()
        else {
            return fail("has an amount that is not a whole number");
        };
        if capacity.0.insert(name.to_owned(), amount).is_some() {
            return fail("names a resource listed before");
        }
    }
    Ok(capacity)
}

fn is_resource_name(name: &str) -> bool {
    name.len() <= super::MAX_LABEL_VALUE_LEN
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// A member's update domain: the pool's declared domain, else its node's
/// zone (when it is a valid name), else the pool's name.
pub fn member_update_domain(declared: Option<&str>, node_zone: Option<&str>, pool: &str) -> String {
    declared
        .or(node_zone.filter(|zone| is_label_value(zone)))
        .unwrap_or(pool)
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect()
    }

    #[test]
    fn a_pool_declares_capabilities_capacity_and_domain_in_three_annotations() {
        let declared = PoolDeclaration::from_annotations(
            "gpu",
            &annotations(&[
                (ANNOTATION_CAPABILITIES, "GPU=nvidia-v100:3;CPU=intel-xeon"),
                (ANNOTATION_CAPACITY, " cores = 60 , memory=480"),
                (ANNOTATION_UPDATE_DOMAIN, "ud-1"),
                ("unrelated", "x"),
            ]),
        )
        .unwrap();
        assert_eq!(declared.capabilities.score("GPU", "nvidia-v100"), Some(3));
        assert_eq!(
            declared.capacity,
            Resources::none().with("cores", 60).with("memory", 480)
        );
        assert_eq!(declared.update_domain.as_deref(), Some("ud-1"));
        let member = declared.member(MemberId::new("gpu", 2), true, "ud-1".to_owned());
        assert_eq!(member.capacity.get("cores"), 60);
        assert!(member.capabilities.offers("CPU", "intel-xeon"));
        assert_eq!(
            (member.id.to_string(), member.available),
            ("gpu-2".to_owned(), true)
        );
        assert_eq!(
            PoolDeclaration::from_annotations("plain", &BTreeMap::new()),
            Ok(PoolDeclaration::default())
        );
    }

    #[test]
    fn what_a_pool_reserves_is_taken_from_what_each_member_gives_plans() {
        let declared = PoolDeclaration::from_annotations(
            "gpu",
            &annotations(&[
                (ANNOTATION_CAPACITY, "cores=64,memory=512"),
                (ANNOTATION_RESERVED, "cores=4,memory=32,disk=1"),
            ]),
        )
        .unwrap();
        assert_eq!(
            declared.reserved,
            Resources::none()
                .with("cores", 4)
                .with("memory", 32)
                .with("disk", 1)
        );
        let member = declared.member(MemberId::new("gpu", 0), true, "ud".to_owned());
        assert_eq!(member.capacity.get("cores"), 60);
        assert_eq!(member.capacity.get("memory"), 480);
        assert_eq!(member.capacity.get("disk"), 0);
        assert_eq!(
            PoolDeclaration::from_annotations(
                "gpu",
                &annotations(&[(ANNOTATION_RESERVED, "cores")])
            )
            .unwrap_err()
            .to_string(),
            "pool \"gpu\", annotation shoal.dev/reserved: entry \"cores\" has no \"=\": write NAME=AMOUNT"
        );
    }

    #[test]
    fn a_bad_pool_annotation_is_refused_naming_pool_annotation_and_entry() {
        let refused = |key: &str, value: &str| {
            PoolDeclaration::from_annotations("gpu", &annotations(&[(key, value)]))
                .unwrap_err()
                .to_string()
        };
        let table = [
            (
                ANNOTATION_CAPACITY,
                "cores=4,memory",
                "pool \"gpu\", annotation shoal.dev/capacity: entry \"memory\" has no \"=\": write NAME=AMOUNT",
            ),
            (
                ANNOTATION_CAPACITY,
                "Cores=4",
                "pool \"gpu\", annotation shoal.dev/capacity: entry \"Cores=4\" has an invalid resource name (1-63 of a-z 0-9 -)",
            ),
            (
                ANNOTATION_CAPACITY,
                "cores=-4",
                "pool \"gpu\", annotation shoal.dev/capacity: entry \"cores=-4\" has an amount that is not a whole number",
            ),
            (
                ANNOTATION_CAPACITY,
                "cores=4,cores=5",
                "pool \"gpu\", annotation shoal.dev/capacity: entry \"cores=5\" names a resource listed before",
            ),
            (
                ANNOTATION_CAPACITY,
                "cores=4,",
                "pool \"gpu\", annotation shoal.dev/capacity: entry \"\" has no \"=\": write NAME=AMOUNT",
            ),
            (
                ANNOTATION_CAPABILITIES,
                "GPU",
                "pool \"gpu\", annotation shoal.dev/capabilities: capability entry \"GPU\" has no \"=\": write TYPE=NAME[:SCORE],…",
            ),
            (
                ANNOTATION_UPDATE_DOMAIN,
                "zone a",
                "pool \"gpu\", annotation shoal.dev/update-domain: \"zone a\" is not a valid update domain (1-63 of A-Z a-z 0-9 - _ ., starting and ending with a letter or digit)",
            ),
        ];
        for (key, value, message) in table {
            assert_eq!(refused(key, value), message, "{key}: {value:?}");
        }
    }

    #[test]
    fn a_members_domain_is_the_declared_one_else_its_zone_else_its_pool() {
        let table = [
            (Some("ud-1"), Some("zone-a"), "ud-1"),
            (None, Some("zone-a"), "zone-a"),
            (None, Some("not a zone"), "web"),
            (None, None, "web"),
        ];
        for (declared, zone, expected) in table {
            assert_eq!(member_update_domain(declared, zone, "web"), expected);
        }
    }
}
