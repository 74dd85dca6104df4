//! Objects decoded from ConfigMaps, kept between passes so that a pass decodes only what
//! changed (a revision record holds a whole assignment: at 100,000 jobs, decoding every
//! kept record on every pass costs more than the rest of the pass).
//!
//! An entry is keyed by the uid and `resourceVersion` of every ConfigMap it was decoded
//! from: the API server gives an object a new `resourceVersion` on every write and a
//! replaced object a new uid, so a changed ConfigMap misses and is decoded again, and an
//! entry can never stand for content other than its own. Whether a ConfigMap may be read
//! at all (owned, not edited by someone else) is decided before the memo is asked.
//!
//! What is kept: revision records and the replay of the one in force, the slices as read
//! (decoded and rendered) and parsed, the index text, and the `jobsFrom` texts and their
//! parsed documents, which a Swarm's `decide` reads ([`crate::swarm::decide::Parsed`]): at
//! 100,000 jobs, decoding the job list and every slice again was most of a pass. What the
//! controller itself writes is decoded from the objects the API server returned and added
//! ([`Decoded::adding`]), so that a pass reads back none of its own writes.
//!
//! Bound: entries live per scope (one Swarm); a pass keeps only the entries it used, the
//! ones of its Swarm's previous pass are dropped when it ends, and a deleted Swarm's
//! scope is forgotten. So the memo holds at most, per Swarm, what its latest pass read:
//! its kept history (`revisionHistoryLimit`, at most 1,000) plus the revisions it was
//! about to prune (one entry per record; a split record is one entry for all its parts),
//! one slice per member (at most 10,000), the index text, the replay of the record in
//! force, and one text and one document per `jobsFrom` ConfigMap (at most 1,000): in all,
//! about one more copy of the job list per record, two of the assignment in force and two
//! of the job list. Until the next pass, what the controller wrote is added: at most one
//! entry per ConfigMap written by the pass before.

use std::any::Any;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;

/// Entries of one scope: key → decoded value.
type Entries = HashMap<String, Arc<dyn Any + Send + Sync>>;

/// The memo of decoded objects, shared by every pass ([`crate::cluster::Context`] holds
/// one).
#[derive(Default)]
pub struct Decoded {
    scopes: Mutex<HashMap<String, Entries>>,
}

impl Decoded {
    /// Starts a pass over `scope` (a Swarm, by namespace, name and uid): what it decodes
    /// or reuses replaces the scope's entries when the pass is dropped.
    pub fn pass(&self, scope: String) -> Pass<'_> {
        let previous = self
            .scopes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&scope)
            .unwrap_or_default();
        Pass {
            memo: Some(self),
            scope,
            previous,
            used: Entries::new(),
            decodes: 0,
            metadata_only: false,
            missed: BTreeSet::new(),
            adds: false,
        }
    }

    /// A pass over `scope` that adds what it decodes to the scope's entries instead of
    /// replacing them, and reuses nothing: for what the controller just wrote, decoded from
    /// the objects the API server returned exactly as a pass decodes what it reads, so
    /// that the next pass finds it without reading it back. Used between the passes of
    /// its scope (a pass in progress would drop these entries when it ends).
    pub fn adding(&self, scope: String) -> Pass<'_> {
        Pass {
            memo: Some(self),
            scope,
            previous: Entries::new(),
            used: Entries::new(),
            decodes: 0,
            metadata_only: false,
            missed: BTreeSet::new(),
            adds: true,
        }
    }

    /// Drops a scope's entries (its Swarm is gone).
    pub fn forget(&self, scope: &str) {
        self.scopes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(scope);
    }

    /// How many entries the memo holds, over every scope.
    pub fn len(&self) -> usize {
        self.scopes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .map(HashMap::len)
            .sum()
    }

    /// Whether the memo holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One pass's use of the memo: [`Pass::get_or_decode`] reuses what the scope's previous
/// pass decoded from the same ConfigMaps, or decodes.
pub struct Pass<'a> {
    memo: Option<&'a Decoded>,
    scope: String,
    previous: Entries,
    used: Entries,
    /// How many values this pass decoded (rather than reused).
    pub decodes: usize,
    /// The sources are metadata only (no `data`): a value not kept cannot be decoded.
    metadata_only: bool,
    /// The names of the sources of every value asked for and not kept while
    /// [`Pass::metadata_only`] was set: what the caller reads in full before asking again.
    pub missed: BTreeSet<String>,
    /// Adds its entries to the scope's when dropped ([`Decoded::adding`]), rather than
    /// replacing them.
    adds: bool,
}

impl Pass<'static> {
    /// A pass that keeps nothing: every value is decoded (a one-off reader, such as the
    /// plugin's observe).
    pub fn uncached() -> Pass<'static> {
        Pass {
            memo: None,
            scope: String::new(),
            previous: Entries::new(),
            used: Entries::new(),
            decodes: 0,
            metadata_only: false,
            missed: BTreeSet::new(),
            adds: false,
        }
    }
}

impl Pass<'_> {
    /// Whether the sources given from now on are metadata only (listed without their
    /// data): then a value not kept is not decoded but [`Pass::missed`], and the caller
    /// reads the full objects and asks again.
    pub fn metadata_only(&mut self, metadata_only: bool) {
        self.metadata_only = metadata_only;
    }

    /// Whether this pass keeps anything (an [`Pass::uncached`] one does not).
    pub fn keeps(&self) -> bool {
        self.memo.is_some()
    }

    /// The value decoded from `sources` (the ConfigMaps it is read from, all of them)
    /// under `what` (which decoding: one key names one type), reused when the previous
    /// pass decoded it from the same uids and `resourceVersion`s, else `decode()`.
    /// `None` only when the sources are metadata only and the value was not kept
    /// ([`Pass::missed`] then names them).
    pub fn get_or_decode<T>(
        &mut self,
        what: &str,
        sources: &[&ConfigMap],
        decode: impl FnOnce() -> T,
    ) -> Option<T>
    where
        T: Any + Clone + Send + Sync,
    {
        let Some(key) = key_of(what, sources) else {
            // An object without uid or resourceVersion (not from an API server) cannot
            // be told apart from its next version: never kept.
            return self.decode(sources, decode);
        };
        let found = self
            .used
            .get(&key)
            .or_else(|| self.previous.get(&key))
            .cloned();
        if let Some(value) = found.and_then(|value| value.downcast::<T>().ok()) {
            let reused = T::clone(&value);
            self.used.insert(key, value);
            return Some(reused);
        }
        let value = self.decode(sources, decode)?;
        self.used.insert(key, Arc::new(value.clone()));
        Some(value)
    }

    fn decode<T>(&mut self, sources: &[&ConfigMap], decode: impl FnOnce() -> T) -> Option<T> {
        if self.metadata_only {
            self.missed
                .extend(sources.iter().map(|source| source.name_any()));
            return None;
        }
        self.decodes += 1;
        Some(decode())
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        let Some(memo) = self.memo else {
            return;
        };
        let mut scopes = memo.scopes.lock().unwrap_or_else(PoisonError::into_inner);
        let used = std::mem::take(&mut self.used);
        let scope = std::mem::take(&mut self.scope);
        if self.adds {
            scopes.entry(scope).or_default().extend(used);
        } else {
            scopes.insert(scope, used);
        }
    }
}

/// `what`, then the uid and `resourceVersion` of each source in order; `None` when one
/// lacks either.
fn key_of(what: &str, sources: &[&ConfigMap]) -> Option<String> {
    let mut key = what.to_owned();
    for cm in sources {
        let uid = cm.uid()?;
        let version = cm.resource_version()?;
        key.push_str(&format!(" {uid}@{version}"));
    }
    Some(key)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn config_map(uid: &str, version: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("demo-rev-1".to_owned()),
                uid: Some(uid.to_owned()),
                resource_version: Some(version.to_owned()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    #[test]
    fn a_pass_reuses_what_the_previous_pass_decoded_from_the_same_version() {
        let memo = Decoded::default();
        let cm = config_map("u1", "7");
        let mut first = memo.pass("demo".to_owned());
        assert_eq!(first.get_or_decode("n", &[&cm], || 1u32), Some(1));
        assert_eq!(first.decodes, 1);
        drop(first);
        let mut second = memo.pass("demo".to_owned());
        assert_eq!(second.get_or_decode("n", &[&cm], || 2u32), Some(1));
        assert_eq!(second.decodes, 0);
    }

    #[test]
    fn a_new_version_or_a_replaced_object_is_decoded_again() {
        let memo = Decoded::default();
        let mut first = memo.pass("demo".to_owned());
        first.get_or_decode("n", &[&config_map("u1", "7")], || 1u32);
        drop(first);
        let mut second = memo.pass("demo".to_owned());
        assert_eq!(
            second.get_or_decode("n", &[&config_map("u1", "8")], || 2u32),
            Some(2)
        );
        assert_eq!(
            second.get_or_decode("n", &[&config_map("u2", "7")], || 3u32),
            Some(3)
        );
        assert_eq!(second.decodes, 2);
    }

    #[test]
    fn entries_a_pass_did_not_use_are_dropped_and_a_forgotten_scope_holds_nothing() {
        let memo = Decoded::default();
        let mut first = memo.pass("demo".to_owned());
        first.get_or_decode("n", &[&config_map("u1", "7")], || 1u32);
        first.get_or_decode("n", &[&config_map("u2", "7")], || 2u32);
        drop(first);
        assert_eq!(memo.len(), 2);
        let mut second = memo.pass("demo".to_owned());
        second.get_or_decode("n", &[&config_map("u2", "7")], || 2u32);
        drop(second);
        assert_eq!(memo.len(), 1);
        memo.forget("demo");
        assert!(memo.is_empty());
    }

    #[test]
    fn a_metadata_only_pass_reuses_what_was_kept_and_says_what_it_missed() {
        let memo = Decoded::default();
        let mut first = memo.pass("demo".to_owned());
        first.get_or_decode("n", &[&config_map("u1", "7")], || 1u32);
        drop(first);
        let mut second = memo.pass("demo".to_owned());
        second.metadata_only(true);
        let kept = second.get_or_decode("n", &[&config_map("u1", "7")], || 9u32);
        assert_eq!(kept, Some(1));
        assert!(second.missed.is_empty());
        let new = second.get_or_decode("n", &[&config_map("u1", "8")], || 9u32);
        assert_eq!((new, second.decodes), (None, 0));
        assert_eq!(
            second.missed,
            BTreeSet::from(["demo-rev-1".to_owned()]),
            "the missed value's source is named, to be read in full"
        );
        // Read again in full: decoded, and the entry kept meanwhile still counts.
        second.metadata_only(false);
        assert_eq!(
            second.get_or_decode("n", &[&config_map("u1", "8")], || 2u32),
            Some(2)
        );
        assert_eq!(
            second.get_or_decode("n", &[&config_map("u1", "7")], || 9u32),
            Some(1)
        );
    }

    #[test]
    fn an_object_without_a_resource_version_is_never_kept() {
        let memo = Decoded::default();
        let mut cm = config_map("u1", "7");
        cm.metadata.resource_version = None;
        let mut pass = memo.pass("demo".to_owned());
        pass.get_or_decode("n", &[&cm], || 1u32);
        pass.get_or_decode("n", &[&cm], || 1u32);
        assert_eq!(pass.decodes, 2);
        drop(pass);
        assert!(memo.is_empty());
    }

    #[test]
    fn what_an_adding_pass_decodes_is_found_by_the_next_pass_and_nothing_else_is_dropped() {
        let memo = Decoded::default();
        let mut first = memo.pass("demo".to_owned());
        first.get_or_decode("n", &[&config_map("u1", "7")], || 1u32);
        drop(first);
        let written = config_map("u2", "9");
        let mut adding = memo.adding("demo".to_owned());
        assert_eq!(adding.get_or_decode("n", &[&written], || 5u32), Some(5));
        drop(adding);
        let mut next = memo.pass("demo".to_owned());
        next.metadata_only(true);
        assert_eq!(next.get_or_decode("n", &[&written], || 0u32), Some(5));
        assert_eq!(
            next.get_or_decode("n", &[&config_map("u1", "7")], || 0u32),
            Some(1)
        );
        assert_eq!(next.decodes, 0);
        assert!(next.missed.is_empty());
        // A later version (someone wrote after the controller) is not the one kept.
        assert_eq!(
            next.get_or_decode("n", &[&config_map("u2", "10")], || 0u32),
            None
        );
        drop(next);
        // Another scope does not see it.
        let mut other = memo.pass("other".to_owned());
        other.metadata_only(true);
        assert_eq!(other.get_or_decode("n", &[&written], || 0u32), None);
    }
}
