//! Members: the pods of the pools (labelled StatefulSets) of a Swarm.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

/// Identity of one member: its pool and its place in the pool.
///
/// A StatefulSet member is keyed by its ordinal (pod name `<pool>-<ordinal>`); a
/// Deployment member (a pod with a generated name, e.g. `web-7d9f8c6b5-x2kq9`) by its
/// pod name, which is then its `Display` and [`MemberId::pod_name`].
///
/// Ordering is by pool name (byte order), then ordinal members (numerically) before
/// generated names (byte order): the canonical member order everywhere in Shoal.
/// Serialized as `{pool, ordinal}` or `{pool, pod}`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MemberId {
    /// Name of the pool (the StatefulSet or Deployment).
    pub pool: String,
    /// The member's place within its pool.
    #[serde(flatten)]
    pub key: MemberKey,
}

/// How a member is keyed within its pool.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum MemberKey {
    /// A StatefulSet pod's ordinal.
    #[serde(rename = "ordinal")]
    Ordinal(u32),
    /// The whole generated name of a Deployment's pod.
    #[serde(rename = "pod")]
    Generated(String),
}

/// A pod name that does not belong to the given pool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemberIdError {
    /// The pod name does not start with `<pool>-`.
    #[error("pod {pod:?} is not a member of pool {pool:?}: it does not start with \"{pool}-\"")]
    WrongPool {
        /// The pod name.
        pod: String,
        /// The expected pool.
        pool: String,
    },
    /// The part after `<pool>-` is not a canonical decimal ordinal.
    #[error("pod {pod:?} of pool {pool:?} has no valid ordinal suffix")]
    BadOrdinal {
        /// The pod name.
        pod: String,
        /// The pool.
        pool: String,
    },
}

impl MemberId {
    /// A StatefulSet member id from its parts.
    pub fn new(pool: impl Into<String>, ordinal: u32) -> MemberId {
        MemberId {
            pool: pool.into(),
            key: MemberKey::Ordinal(ordinal),
        }
    }

    /// A member keyed by its generated pod name (a pod of a Deployment pool).
    pub fn generated(pool: impl Into<String>, pod: impl Into<String>) -> MemberId {
        MemberId {
            pool: pool.into(),
            key: MemberKey::Generated(pod.into()),
        }
    }

    /// The ordinal of a StatefulSet member; `None` for a generated name.
    pub fn ordinal(&self) -> Option<u32> {
        match self.key {
            MemberKey::Ordinal(ordinal) => Some(ordinal),
            MemberKey::Generated(_) => None,
        }
    }

    /// Parses a StatefulSet pod name `<pool>-<ordinal>` given its pool. The
    /// ordinal must be canonical decimal (no sign, no leading zeros).
    pub fn from_pod_name(pool: &str, pod: &str) -> Result<MemberId, MemberIdError> {
        let suffix = pod
            .strip_prefix(pool)
            .and_then(|rest| rest.strip_prefix('-'))
            .ok_or_else(|| MemberIdError::WrongPool {
                pod: pod.to_owned(),
                pool: pool.to_owned(),
            })?;
        let ordinal = canonical_ordinal(suffix).ok_or_else(|| MemberIdError::BadOrdinal {
            pod: pod.to_owned(),
            pool: pool.to_owned(),
        })?;
        Ok(MemberId::new(pool, ordinal))
    }

    /// The pod name: `<pool>-<ordinal>`, or the generated name.
    pub fn pod_name(&self) -> String {
        self.to_string()
    }
}

/// A canonical decimal ordinal (digits only, no leading zeros, fits `u32`):
/// the suffix of a pod name, and of a plan instance name.
pub(crate) fn canonical_ordinal(text: &str) -> Option<u32> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if canonical { text.parse().ok() } else { None }
}

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            MemberKey::Ordinal(ordinal) => write!(f, "{}-{ordinal}", self.pool),
            MemberKey::Generated(pod) => f.write_str(pod),
        }
    }
}

/// Amounts of named resources (e.g. `cpu-millis`, `memory-mib`, `gpu`). A
/// resource a member does not list has capacity 0; a demand of 0 always fits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources(pub BTreeMap<String, u64>);

impl Resources {
    /// No resources.
    pub fn none() -> Resources {
        Resources::default()
    }

    /// Adds (or replaces) one resource amount.
    pub fn with(mut self, name: impl Into<String>, amount: u64) -> Resources {
        self.0.insert(name.into(), amount);
        self
    }

    /// The amount of `name` (0 when absent).
    pub fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    /// Whether every amount of `demand` fits within `self`.
    pub fn fits(&self, demand: &Resources) -> bool {
        demand
            .0
            .iter()
            .all(|(name, amount)| *amount <= self.get(name))
    }

    /// Adds `amounts` (saturating at `u64::MAX`).
    pub fn add(&mut self, amounts: &Resources) {
        for (name, amount) in &amounts.0 {
            let total = self.get(name).saturating_add(*amount);
            self.0.insert(name.clone(), total);
        }
    }

    /// Subtracts `demand` (saturating at 0).
    pub fn take(&mut self, demand: &Resources) {
        for (name, amount) in &demand.0 {
            let left = self.get(name).saturating_sub(*amount);
            self.0.insert(name.clone(), left);
        }
    }
}

/// One member as the strategies see it.
///
/// Job strategies use `id` and `available` (plan instances are placed on
/// [`crate::deploy::DeployMember`]s); adding further eligibility rules means
/// filtering the member list, never changing a strategy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Pool and ordinal (or generated pod name).
    pub id: MemberId,
    /// Whether the member may own work now (pod exists, ready, not fenced,
    /// not being failed over). Unavailable members keep their place in the
    /// ordinal space so their work returns to them when they come back.
    pub available: bool,
    /// Capabilities this member offers (e.g. `gpu`, `arch=arm64`).
    #[serde(default)]
    pub capabilities: BTreeSet<String>,
    /// Resources this member can give to placed plan instances.
    #[serde(default)]
    pub capacity: Resources,
}

impl Member {
    /// An available member with no capabilities and no capacity.
    pub fn new(pool: impl Into<String>, ordinal: u32) -> Member {
        Member::of(MemberId::new(pool, ordinal))
    }

    /// An available member of this identity, with no capabilities and no capacity.
    pub fn of(id: MemberId) -> Member {
        Member {
            id,
            available: true,
            capabilities: BTreeSet::new(),
            capacity: Resources::none(),
        }
    }

    /// The same member with availability set.
    pub fn with_available(mut self, available: bool) -> Member {
        self.available = available;
        self
    }

    /// The same member with one more capability.
    pub fn with_capability(mut self, capability: impl Into<String>) -> Member {
        self.capabilities.insert(capability.into());
        self
    }

    /// The same member with one resource capacity set.
    pub fn with_capacity(mut self, resource: impl Into<String>, amount: u64) -> Member {
        self.capacity = self.capacity.with(resource, amount);
        self
    }
}

/// `n` available members `<pool>-0 … <pool>-(n-1)`: the common single-pool case.
pub fn pool_members(pool: &str, n: u32) -> Vec<Member> {
    (0..n).map(|ordinal| Member::new(pool, ordinal)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_name_parses_into_pool_and_ordinal() {
        assert_eq!(
            MemberId::from_pod_name("swarm-worker", "swarm-worker-12"),
            Ok(MemberId::new("swarm-worker", 12))
        );
        assert_eq!(
            MemberId::new("swarm-worker", 3).to_string(),
            "swarm-worker-3"
        );
    }

    #[test]
    fn pod_names_of_other_pools_or_with_bad_ordinals_are_rejected() {
        assert_eq!(
            MemberId::from_pod_name("web", "api-0")
                .unwrap_err()
                .to_string(),
            "pod \"api-0\" is not a member of pool \"web\": it does not start with \"web-\""
        );
        for pod in ["web-", "web-01", "web-x", "web--1", "web-99999999999"] {
            assert_eq!(
                MemberId::from_pod_name("web", pod).unwrap_err().to_string(),
                format!("pod {pod:?} of pool \"web\" has no valid ordinal suffix")
            );
        }
    }

    #[test]
    fn a_generated_member_is_named_by_its_pod_and_has_no_ordinal() {
        let id = MemberId::generated("web", "web-7d9f8c6b5-x2kq9");
        assert_eq!(id.pod_name(), "web-7d9f8c6b5-x2kq9");
        assert_eq!(id.to_string(), "web-7d9f8c6b5-x2kq9");
        assert_eq!(id.ordinal(), None);
        assert_eq!(MemberId::new("web", 4).ordinal(), Some(4));
    }

    #[test]
    fn members_serialize_with_their_ordinal_or_their_pod_name() {
        let ordinal = serde_json::to_value(MemberId::new("web", 2)).expect("serializes");
        assert_eq!(ordinal, serde_json::json!({"pool": "web", "ordinal": 2}));
        let generated =
            serde_json::to_value(MemberId::generated("api", "api-5c-zq7xw")).expect("serializes");
        assert_eq!(
            generated,
            serde_json::json!({"pool": "api", "pod": "api-5c-zq7xw"})
        );
        let back: MemberId = serde_json::from_value(generated).expect("parses");
        assert_eq!(back, MemberId::generated("api", "api-5c-zq7xw"));
    }

    #[test]
    fn members_order_by_pool_then_ordinals_then_generated_names() {
        let mut ids = vec![
            MemberId::generated("a", "a-x-bbbbb"),
            MemberId::new("b", 0),
            MemberId::generated("a", "a-x-aaaaa"),
            MemberId::new("a", 10),
            MemberId::new("a", 2),
        ];
        ids.sort();
        assert_eq!(
            ids,
            vec![
                MemberId::new("a", 2),
                MemberId::new("a", 10),
                MemberId::generated("a", "a-x-aaaaa"),
                MemberId::generated("a", "a-x-bbbbb"),
                MemberId::new("b", 0)
            ]
        );
    }

    #[test]
    fn members_order_by_pool_then_numeric_ordinal() {
        let mut ids = vec![
            MemberId::new("b", 0),
            MemberId::new("a", 10),
            MemberId::new("a", 2),
        ];
        ids.sort();
        assert_eq!(
            ids,
            vec![
                MemberId::new("a", 2),
                MemberId::new("a", 10),
                MemberId::new("b", 0)
            ]
        );
    }
}
