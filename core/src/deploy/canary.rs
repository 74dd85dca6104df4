//! Which instances take a new deployment first in a canary rollout.
//!
//! [`choose_canaries`] picks `count` of the instances that still run an
//! earlier deployment, spread over update domains: the domains are visited
//! round-robin in byte order, each giving its lowest-ordinal instance not yet
//! chosen, until `count` are chosen or none is left. So the canaries of a
//! plan spread over as many domains as they can, no domain gives two before
//! every domain with candidates gave one, and the choice depends on the
//! candidates only (never on their order).

use std::collections::{BTreeMap, BTreeSet};

use super::placement::InstanceId;

/// `count` canaries of `candidates` (instance → its update domain), see the
/// module docs. Fewer when there are fewer candidates.
pub fn choose_canaries(
    candidates: &BTreeMap<InstanceId, String>,
    count: usize,
) -> BTreeSet<InstanceId> {
    let mut by_domain: BTreeMap<&str, Vec<&InstanceId>> = BTreeMap::new();
    for (instance, domain) in candidates {
        // Candidates are visited in instance order, so each list is by ordinal.
        by_domain.entry(domain.as_str()).or_default().push(instance);
    }
    let mut chosen = BTreeSet::new();
    let mut round = 0;
    while chosen.len() < count.min(candidates.len()) {
        for instances in by_domain.values() {
            if chosen.len() == count {
                break;
            }
            if let Some(instance) = instances.get(round) {
                chosen.insert((*instance).clone());
            }
        }
        round += 1;
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn candidates(domains: &[(u32, &str)]) -> BTreeMap<InstanceId, String> {
        domains
            .iter()
            .map(|(ordinal, domain)| (InstanceId::new("web", *ordinal), (*domain).to_owned()))
            .collect()
    }

    #[test]
    fn canaries_take_one_instance_per_domain_lowest_ordinal_first() {
        let chosen = choose_canaries(&candidates(&[(0, "a"), (1, "a"), (2, "b"), (3, "c")]), 2);
        assert_eq!(
            chosen,
            BTreeSet::from([InstanceId::new("web", 0), InstanceId::new("web", 2)])
        );
        let all = choose_canaries(&candidates(&[(0, "a"), (1, "a"), (2, "b")]), 5);
        assert_eq!(all.len(), 3, "never more than the candidates");
        assert!(choose_canaries(&candidates(&[(0, "a")]), 0).is_empty());
    }

    proptest! {
        #[test]
        fn canaries_are_as_many_as_asked_spread_over_domains(
            domains in proptest::collection::btree_map(0u32..40, 0u8..4, 0..30),
            count in 0usize..12,
        ) {
            let candidates: BTreeMap<InstanceId, String> = domains
                .iter()
                .map(|(ordinal, domain)| (InstanceId::new("web", *ordinal), format!("d{domain}")))
                .collect();
            let chosen = choose_canaries(&candidates, count);
            prop_assert_eq!(chosen.len(), count.min(candidates.len()));
            prop_assert!(chosen.iter().all(|instance| candidates.contains_key(instance)));
            // Spread: a domain has two more canaries than another only when that
            // other domain has no candidate left.
            let mut per_domain: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
            for (instance, domain) in &candidates {
                let counts = per_domain.entry(domain.as_str()).or_default();
                counts.1 += 1;
                if chosen.contains(instance) {
                    counts.0 += 1;
                }
            }
            for (chosen_a, _) in per_domain.values() {
                for (chosen_b, total_b) in per_domain.values() {
                    prop_assert!(chosen_a <= &(chosen_b + 1) || chosen_b == total_b);
                }
            }
            // Deterministic whatever the order the candidates were gathered in.
            let reversed: BTreeMap<InstanceId, String> =
                candidates.clone().into_iter().rev().collect();
            prop_assert_eq!(choose_canaries(&reversed, count), chosen);
        }
    }
}
