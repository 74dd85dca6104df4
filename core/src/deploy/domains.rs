//! The order in which a rollout visits update domains.
//!
//! A rollout updates one update domain at a time, so that members disrupted
//! together are never disrupted alongside another domain. The order is:
//!
//! * with a user-given order: the listed domains that exist, as listed, then
//!   every existing domain the list does not name, in byte order (a domain
//!   added later is never skipped; it simply goes last). Listed domains that
//!   have no members now are skipped. A list naming a domain twice, or an
//!   empty name, is refused naming it.
//! * otherwise: every existing domain in byte order.
//!
//! [`next_domain`] gives the first domain of the order not yet done.

use std::collections::BTreeSet;

/// A user-given domain order that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DomainOrderError {
    /// A domain listed twice.
    #[error("update domain {domain:?} is listed more than once in the rollout order")]
    Duplicate {
        /// The repeated domain.
        domain: String,
    },
    /// An empty domain name.
    #[error("the rollout order lists an empty update domain name at position {position}")]
    Empty {
        /// Its position (0-based) in the list.
        position: usize,
    },
}

/// The rollout order of the `existing` domains (see the module docs);
/// `user_order` empty means byte order.
pub fn rollout_order<'a>(
    existing: impl IntoIterator<Item = &'a str>,
    user_order: &[String],
) -> Result<Vec<String>, DomainOrderError> {
    let mut unlisted: BTreeSet<&str> = existing.into_iter().collect();
    let mut listed = BTreeSet::new();
    let mut order = Vec::new();
    for (position, domain) in user_order.iter().enumerate() {
        if domain.is_empty() {
            return Err(DomainOrderError::Empty { position });
        }
        if !listed.insert(domain.as_str()) {
            return Err(DomainOrderError::Duplicate {
                domain: domain.clone(),
            });
        }
        if unlisted.remove(domain.as_str()) {
            order.push(domain.clone());
        }
    }
    order.extend(unlisted.into_iter().map(str::to_owned));
    Ok(order)
}

/// The first domain of `order` not in `done`, or `None` when all are done.
pub fn next_domain<'a>(order: &'a [String], done: &BTreeSet<String>) -> Option<&'a str> {
    order
        .iter()
        .find(|domain| !done.contains(*domain))
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn domains_roll_out_in_the_users_order_then_unlisted_ones_in_byte_order() {
        let existing = ["ud-3", "ud-1", "ud-2", "ud-10"];
        // (user order, expected order)
        let table: [(&[&str], &[&str]); 4] = [
            (&[], &["ud-1", "ud-10", "ud-2", "ud-3"]),
            (&["ud-3", "ud-1"], &["ud-3", "ud-1", "ud-10", "ud-2"]),
            (&["gone", "ud-2"], &["ud-2", "ud-1", "ud-10", "ud-3"]),
            (
                &["ud-10", "ud-3", "ud-2", "ud-1"],
                &["ud-10", "ud-3", "ud-2", "ud-1"],
            ),
        ];
        for (user, expected) in table {
            assert_eq!(
                rollout_order(existing, &names(user)),
                Ok(names(expected)),
                "user order {user:?}"
            );
        }
        assert_eq!(rollout_order(["b", "a", "b"], &[]), Ok(names(&["a", "b"])));
    }

    #[test]
    fn an_order_naming_a_domain_twice_or_an_empty_name_is_refused() {
        assert_eq!(
            rollout_order(["a"], &names(&["a", "b", "a"])),
            Err(DomainOrderError::Duplicate {
                domain: "a".to_owned()
            })
        );
        assert_eq!(
            rollout_order(["a"], &names(&["a", ""]))
                .unwrap_err()
                .to_string(),
            "the rollout order lists an empty update domain name at position 1"
        );
    }

    #[test]
    fn the_next_domain_is_the_first_not_done() {
        let order = names(&["ud-2", "ud-1", "ud-3"]);
        let done = |list: &[&str]| list.iter().map(|d| (*d).to_owned()).collect();
        let table: [(&[&str], Option<&str>); 5] = [
            (&[], Some("ud-2")),
            (&["ud-2"], Some("ud-1")),
            (&["ud-1"], Some("ud-2")),
            (&["ud-2", "ud-1"], Some("ud-3")),
            (&["ud-1", "ud-2", "ud-3", "other"], None),
        ];
        for (finished, expected) in table {
            assert_eq!(
                next_domain(&order, &done(finished)),
                expected,
                "{finished:?}"
            );
        }
    }
}
