//! Scored capabilities of members and the requirements plans place on them.
//!
//! # What a member offers
//!
//! A member's capabilities are grouped by *type* (`GPU`, `CPU`, …); within a
//! type each capability *name* carries a *score* (`u32`, default 0) that ranks
//! it against the other names of its type, as MRDS's catalogue does (a
//! `nvidia-v100` scoring 3 is better than a `nvidia-p100` scoring 2).
//!
//! A kubectl user declares them in one annotation on a pool (every member of
//! the pool offers the same), in this grammar:
//!
//! ```text
//! capabilities := "" | type-entry { ";" type-entry }
//! type-entry   := TYPE "=" name-entry { "," name-entry }
//! name-entry   := NAME [ ":" SCORE ]
//! ```
//!
//! e.g. `GPU=nvidia-v100:3,nvidia-p100:2;CPU=intel-xeon`. Spaces around any
//! token are ignored. `TYPE` and `NAME` are valid label values: 1–63
//! characters of ASCII letters, digits, `-`, `_` and `.`, starting and ending
//! with a letter or digit (so they print unquoted everywhere). `SCORE` is a decimal `u32`; a name
//! without a score scores 0. Types and names are case-sensitive (`GPU` and
//! `gpu` are two types). A type may appear once per annotation and a name
//! once per type. An empty (or all-space) annotation offers nothing; an empty
//! entry (`;;`, `a=x,,y`, a trailing separator) is an error, because it is
//! almost always a typo for something the user meant. Every error names the
//! offending entry.
//!
//! # The catalogue
//!
//! Scores must mean the same on every member: the [`Catalogue`] is the union
//! of all members' declarations, and a name declared with two different
//! scores is an error naming both members and both scores.
//!
//! # Requirements
//!
//! A plan's [`Requirement`] names a capability type, a [`Comparator`] and one
//! or more capability names. A member meets it when:
//!
//! * `In`: it offers at least one of the names (in that type);
//! * `NotIn`: it offers none of them (a member without the type meets it);
//! * `Gte`: it offers some capability of the type scoring **at least** the
//!   reference score, the *lowest* catalogue score among the names (so
//!   `Gte [v100, p100]` means "a p100 or anything at least as good");
//! * `Lte`: it offers some capability of the type scoring **at most** the
//!   reference score, the *highest* catalogue score among the names (so
//!   `Lte [p100]` means "something no better than a p100").
//!
//! `Gte` and `Lte` are existential ("the member has one that qualifies"), as
//! `In` is, so the four comparators compose the same way. To keep a plan off
//! better hardware altogether, add `NotIn` with the better names. A
//! requirement with no names, or a `Gte`/`Lte` naming a capability no member
//! declares (no reference score exists), is an error naming the requirement.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{UnknownName, is_label_value};
use crate::member::MemberId;

/// A member's capabilities: type → (name → score).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capabilities(BTreeMap<String, BTreeMap<String, u32>>);

/// Text that is not a valid capability annotation; each variant names the
/// offending entry as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapabilityParseError {
    /// Two separators with nothing between them, or a trailing separator.
    #[error("capabilities {text:?}: empty entry (two separators in a row or a trailing separator)")]
    EmptyEntry {
        /// The whole annotation value.
        text: String,
    },
    /// A type entry without `=`.
    #[error("capability entry {entry:?} has no \"=\": write TYPE=NAME[:SCORE],…")]
    MissingEquals {
        /// The entry.
        entry: String,
    },
    /// A type or capability name outside the allowed characters or length.
    #[error(
        "capability entry {entry:?}: {name:?} is not a valid name (1-63 of A-Z a-z 0-9 - _ ., starting with a letter or digit)"
    )]
    BadName {
        /// The type or name entry.
        entry: String,
        /// The offending name.
        name: String,
    },
    /// A score that is not a decimal `u32`.
    #[error(
        "capability entry {entry:?}: score {score:?} is not a whole number from 0 to 4294967295"
    )]
    BadScore {
        /// The name entry.
        entry: String,
        /// The offending score.
        score: String,
    },
    /// A type listed twice.
    #[error("capability type {capability_type:?} is listed more than once")]
    DuplicateType {
        /// The repeated type.
        capability_type: String,
    },
    /// A name listed twice within its type.
    #[error("capability {name:?} is listed more than once in type {capability_type:?}")]
    DuplicateName {
        /// The type.
        capability_type: String,
        /// The repeated name.
        name: String,
    },
}

fn checked_name(entry: &str, name: &str) -> Result<String, CapabilityParseError> {
    if is_label_value(name) {
        Ok(name.to_owned())
    } else {
        Err(CapabilityParseError::BadName {
            entry: entry.to_owned(),
            name: name.to_owned(),
        })
    }
}

/// Parses one `NAME[:SCORE]`.
fn parse_name_entry(entry: &str) -> Result<(String, u32), CapabilityParseError> {
    let (name, score) = match entry.split_once(':') {
        Some((name, score)) => (name.trim(), Some(score.trim())),
        None => (entry, None),
    };
    let name = checked_name(entry, name)?;
    let score = match score {
        None => 0,
        // `u32::from_str` accepts a leading `+`; a score is digits only.
        Some(text) if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => {
            text.parse().map_err(|_| bad_score(entry, text))?
        }
        Some(text) => return Err(bad_score(entry, text)),
    };
    Ok((name, score))
}

fn bad_score(entry: &str, score: &str) -> CapabilityParseError {
    CapabilityParseError::BadScore {
        entry: entry.to_owned(),
        score: score.to_owned(),
    }
}

impl Capabilities {
    /// No capabilities.
    pub fn none() -> Capabilities {
        Capabilities::default()
    }

    /// Parses the annotation grammar of the module docs.
    pub fn parse(text: &str) -> Result<Capabilities, CapabilityParseError> {
        let mut capabilities = Capabilities::none();
        if text.trim().is_empty() {
            return Ok(capabilities);
        }
        let empty = || CapabilityParseError::EmptyEntry {
            text: text.to_owned(),
        };
        for type_entry in text.split(';').map(str::trim) {
            if type_entry.is_empty() {
                return Err(empty());
            }
            let (capability_type, names) =
                type_entry
                    .split_once('=')
                    .ok_or_else(|| CapabilityParseError::MissingEquals {
                        entry: type_entry.to_owned(),
                    })?;
            let capability_type = checked_name(type_entry, capability_type.trim())?;
            if capabilities.0.contains_key(&capability_type) {
                return Err(CapabilityParseError::DuplicateType { capability_type });
            }
            let mut scores = BTreeMap::new();
            for name_entry in names.split(',').map(str::trim) {
                if name_entry.is_empty() {
                    return Err(empty());
                }
                let (name, score) = parse_name_entry(name_entry)?;
                if scores.insert(name.clone(), score).is_some() {
                    return Err(CapabilityParseError::DuplicateName {
                        capability_type,
                        name,
                    });
                }
            }
            capabilities.0.insert(capability_type, scores);
        }
        Ok(capabilities)
    }

    /// The same capabilities with one more name (replacing its score).
    pub fn with(
        mut self,
        capability_type: impl Into<String>,
        name: impl Into<String>,
        score: u32,
    ) -> Capabilities {
        self.0
            .entry(capability_type.into())
            .or_default()
            .insert(name.into(), score);
        self
    }

    /// Whether `name` of `capability_type` is offered.
    pub fn offers(&self, capability_type: &str, name: &str) -> bool {
        self.score(capability_type, name).is_some()
    }

    /// The declared score of `name` in `capability_type`, if offered.
    pub fn score(&self, capability_type: &str, name: &str) -> Option<u32> {
        self.0.get(capability_type)?.get(name).copied()
    }

    /// Every (type, name, score), in type then name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, u32)> {
        self.0.iter().flat_map(|(capability_type, names)| {
            names
                .iter()
                .map(move |(name, score)| (capability_type.as_str(), name.as_str(), *score))
        })
    }

    /// The scores this member offers in one type (empty when it has none).
    fn scores_in(&self, capability_type: &str) -> impl Iterator<Item = u32> + '_ {
        self.0
            .get(capability_type)
            .into_iter()
            .flat_map(|names| names.values().copied())
    }
}

/// The canonical annotation text: types and names in byte order, every score
/// written out; [`Capabilities::parse`] reads it back unchanged.
impl fmt::Display for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (type_index, (capability_type, names)) in self.0.iter().enumerate() {
            if type_index > 0 {
                f.write_str(";")?;
            }
            write!(f, "{capability_type}=")?;
            for (name_index, (name, score)) in names.iter().enumerate() {
                if name_index > 0 {
                    f.write_str(",")?;
                }
                write!(f, "{name}:{score}")?;
            }
        }
        Ok(())
    }
}

/// The reference score of every declared capability, and who declared it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalogue {
    /// (type, name) → (score, first member declaring it in member order).
    scores: BTreeMap<(String, String), (u32, MemberId)>,
}

/// Two members declaring one capability with different scores.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "capability {capability_type}={name} scores {first_score} on member {first} but {second_score} on member {second}; a capability must score the same everywhere"
)]
pub struct CatalogueConflict {
    /// The capability type.
    pub capability_type: String,
    /// The capability name.
    pub name: String,
    /// The first member (in member order) declaring it.
    pub first: MemberId,
    /// Its score there.
    pub first_score: u32,
    /// The member declaring another score.
    pub second: MemberId,
    /// That score.
    pub second_score: u32,
}

impl Catalogue {
    /// The union of the members' declarations. Members are read in member
    /// order whatever the input order, so the conflict reported is the same
    /// every time.
    pub fn build<'a>(
        members: impl IntoIterator<Item = (&'a MemberId, &'a Capabilities)>,
    ) -> Result<Catalogue, CatalogueConflict> {
        let mut sorted: Vec<(&MemberId, &Capabilities)> = members.into_iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(b.0));
        let mut catalogue = Catalogue::default();
        for (member, capabilities) in sorted {
            for (capability_type, name, score) in capabilities.iter() {
                catalogue.declare(member, capability_type, name, score)?;
            }
        }
        Ok(catalogue)
    }

    fn declare(
        &mut self,
        member: &MemberId,
        capability_type: &str,
        name: &str,
        score: u32,
    ) -> Result<(), CatalogueConflict> {
        let key = (capability_type.to_owned(), name.to_owned());
        match self.scores.get(&key) {
            Some((known, _)) if *known == score => Ok(()),
            Some((known, first)) => Err(CatalogueConflict {
                capability_type: key.0,
                name: key.1,
                first: first.clone(),
                first_score: *known,
                second: member.clone(),
                second_score: score,
            }),
            None => {
                self.scores.insert(key, (score, member.clone()));
                Ok(())
            }
        }
    }

    /// The reference score of a declared capability.
    pub fn score(&self, capability_type: &str, name: &str) -> Option<u32> {
        self.scores
            .get(&(capability_type.to_owned(), name.to_owned()))
            .map(|(score, _)| *score)
    }
}

/// How a [`Requirement`] compares a member's capabilities with its names.
/// Written `In`, `NotIn`, `Gte`, `Lte` (in a plan and in serde).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Comparator {
    /// The member offers one of the names.
    In,
    /// The member offers none of the names.
    NotIn,
    /// The member offers a capability scoring at least the lowest named score.
    Gte,
    /// The member offers a capability scoring at most the highest named score.
    Lte,
}

impl Comparator {
    /// Every comparator, in declaration order.
    pub const ALL: [Comparator; 4] = [
        Comparator::In,
        Comparator::NotIn,
        Comparator::Gte,
        Comparator::Lte,
    ];

    /// `In`, `NotIn`, `Gte` or `Lte`.
    pub fn as_str(self) -> &'static str {
        match self {
            Comparator::In => "In",
            Comparator::NotIn => "NotIn",
            Comparator::Gte => "Gte",
            Comparator::Lte => "Lte",
        }
    }
}

impl fmt::Display for Comparator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parses the exact spelling of [`Comparator::as_str`].
impl FromStr for Comparator {
    type Err = UnknownName;

    fn from_str(text: &str) -> Result<Comparator, UnknownName> {
        Comparator::ALL
            .into_iter()
            .find(|comparator| comparator.as_str() == text)
            .ok_or_else(|| UnknownName {
                what: "comparator",
                text: text.to_owned(),
                expected: "In, NotIn, Gte, Lte",
            })
    }
}

/// One capability requirement of a plan.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Requirement {
    /// The capability type compared (e.g. `GPU`).
    pub capability_type: String,
    /// How the member's capabilities are compared with `names`.
    pub comparator: Comparator,
    /// The capability names compared against.
    pub names: BTreeSet<String>,
}

/// `GPU Gte [nvidia-p100, nvidia-v100]`.
impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.names.iter().map(String::as_str).collect();
        write!(
            f,
            "{} {} [{}]",
            self.capability_type,
            self.comparator,
            names.join(", ")
        )
    }
}

/// A requirement that cannot be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    /// The requirement lists no names.
    #[error("requirement \"{requirement}\" names no capability")]
    NoNames {
        /// The requirement.
        requirement: Requirement,
    },
    /// A `Gte`/`Lte` names a capability no member declares, so it has no score.
    #[error(
        "requirement \"{requirement}\": no member declares {}={name}, so it has no score to compare with",
        .requirement.capability_type
    )]
    UnknownReference {
        /// The requirement.
        requirement: Requirement,
        /// The undeclared name.
        name: String,
    },
}

impl Requirement {
    /// A requirement from its parts.
    pub fn new<N: Into<String>>(
        capability_type: impl Into<String>,
        comparator: Comparator,
        names: impl IntoIterator<Item = N>,
    ) -> Requirement {
        Requirement {
            capability_type: capability_type.into(),
            comparator,
            names: names.into_iter().map(Into::into).collect(),
        }
    }

    /// Checks the requirement against the catalogue and fixes its reference
    /// score (for `Gte`/`Lte`).
    pub fn resolve(&self, catalogue: &Catalogue) -> Result<ResolvedRequirement, RequirementError> {
        if self.names.is_empty() {
            return Err(RequirementError::NoNames {
                requirement: self.clone(),
            });
        }
        let reference = match self.comparator {
            Comparator::In | Comparator::NotIn => 0,
            Comparator::Gte => self.named_scores(catalogue)?.into_iter().min().unwrap_or(0),
            Comparator::Lte => self.named_scores(catalogue)?.into_iter().max().unwrap_or(0),
        };
        Ok(ResolvedRequirement {
            requirement: self.clone(),
            reference,
        })
    }

    fn named_scores(&self, catalogue: &Catalogue) -> Result<Vec<u32>, RequirementError> {
        self.names
            .iter()
            .map(|name| {
                catalogue.score(&self.capability_type, name).ok_or_else(|| {
                    RequirementError::UnknownReference {
                        requirement: self.clone(),
                        name: name.clone(),
                    }
                })
            })
            .collect()
    }
}

/// A requirement checked against a catalogue, ready to test members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedRequirement {
    /// The requirement as written.
    pub requirement: Requirement,
    /// The reference score (`Gte`: lowest named, `Lte`: highest named; 0
    /// and unused for `In`/`NotIn`).
    pub reference: u32,
}

impl ResolvedRequirement {
    /// Whether a member offering `capabilities` meets the requirement.
    pub fn is_met_by(&self, capabilities: &Capabilities) -> bool {
        let requirement = &self.requirement;
        let capability_type = requirement.capability_type.as_str();
        let offers_a_name = || {
            requirement
                .names
                .iter()
                .any(|name| capabilities.offers(capability_type, name))
        };
        match requirement.comparator {
            Comparator::In => offers_a_name(),
            Comparator::NotIn => !offers_a_name(),
            Comparator::Gte => capabilities
                .scores_in(capability_type)
                .any(|score| score >= self.reference),
            Comparator::Lte => capabilities
                .scores_in(capability_type)
                .any(|score| score <= self.reference),
        }
    }
}

/// Resolves every requirement, in canonical order (sorted, duplicates
/// dropped) so that reports do not depend on the order a user wrote them.
pub fn resolve_all(
    requirements: &[Requirement],
    catalogue: &Catalogue,
) -> Result<Vec<ResolvedRequirement>, RequirementError> {
    let canonical: BTreeSet<&Requirement> = requirements.iter().collect();
    canonical
        .into_iter()
        .map(|requirement| requirement.resolve(catalogue))
        .collect()
}
