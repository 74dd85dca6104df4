//! The in-memory object store: JSON objects keyed by (group, resource,
//! namespace, name), one global resourceVersion, and the change history that
//! watches resume from.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::{Value, json};

use super::registry::{Registry, builtin_types};

/// Where an object is stored.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub group: String,
    pub resource: String,
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(group: &str, resource: &str, namespace: &str, name: &str) -> ObjectKey {
        ObjectKey {
            group: group.to_owned(),
            resource: resource.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }
}

/// One committed change. `new` is `None` for a deletion, in which case `old`
/// is the final state of the object carrying the deletion's resourceVersion.
#[derive(Debug)]
pub struct Change {
    pub resource_version: u64,
    pub key: ObjectKey,
    pub old: Option<Arc<Value>>,
    pub new: Option<Arc<Value>>,
}

/// The history no longer holds changes after the requested version.
#[derive(Debug, Clone, Copy)]
pub struct Compacted {
    pub requested: u64,
    pub oldest: u64,
}

/// Objects, the version counter, history and the served types.
#[derive(Debug)]
pub struct Store {
    resource_version: u64,
    objects: BTreeMap<ObjectKey, Arc<Value>>,
    history: VecDeque<Arc<Change>>,
    history_limit: usize,
    /// Changes at or below this version have been dropped from history.
    compacted: u64,
    pub registry: Registry,
    /// How long a new CRD waits before its types are served (see
    /// `ServerOptions::crd_publication_delay`).
    pub crd_publication_delay: std::time::Duration,
    /// CRDs created but not yet published, by name, with when they will be.
    pub unpublished_crds: BTreeMap<String, std::time::Instant>,
    uid_counter: u64,
    random_state: u64,
}

/// RFC 3339 UTC with seconds precision, as Kubernetes writes timestamps.
pub fn now_timestamp() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

impl Store {
    pub fn new(history_limit: usize) -> Store {
        let seed = jiff::Timestamp::now().as_nanosecond() as u64 ^ 0x9e37_79b9_7f4a_7c15;
        let mut store = Store {
            resource_version: 0,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            compacted: 0,
            registry: Registry::new(builtin_types()),
            crd_publication_delay: std::time::Duration::ZERO,
            unpublished_crds: BTreeMap::new(),
            uid_counter: 0,
            random_state: seed | 1,
        };
        for namespace in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let object = json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": namespace,
                    "uid": store.new_uid(),
                    "creationTimestamp": now_timestamp(),
                    "labels": {"kubernetes.io/metadata.name": namespace},
                },
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            });
            store.put(ObjectKey::new("", "namespaces", "", namespace), object);
        }
        store
    }

    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }

    /// The oldest version a watch may resume from.
    pub fn compacted(&self) -> u64 {
        self.compacted
    }

    pub fn next_random(&mut self) -> u64 {
        // xorshift64*: names and uids only need to be unique, not secret.
        let mut x = self.random_state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.random_state = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A fresh RFC 4122 version-4 shaped uid.
    pub fn new_uid(&mut self) -> String {
        self.uid_counter += 1;
        let high = self.next_random();
        let low = self.next_random() ^ self.uid_counter;
        let hex = format!("{high:016x}{low:016x}");
        format!(
            "{}-{}-4{}-a{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[13..16],
            &hex[17..20],
            &hex[20..32]
        )
    }

    /// Five characters of the alphabet the real server uses for generateName.
    pub fn name_suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut value = self.next_random();
        (0..5)
            .map(|_| {
                let character = ALPHABET[(value % ALPHABET.len() as u64) as usize] as char;
                value /= ALPHABET.len() as u64;
                character
            })
            .collect()
    }

    pub fn get(&self, key: &ObjectKey) -> Option<Arc<Value>> {
        self.objects.get(key).cloned()
    }

    /// Objects of one storage, in one namespace or all (`None`), by key order.
    pub fn list(
        &self,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
    ) -> impl Iterator<Item = (&ObjectKey, &Arc<Value>)> {
        let start = ObjectKey::new(group, resource, namespace.unwrap_or(""), "");
        let group = group.to_owned();
        let resource = resource.to_owned();
        let namespace = namespace.map(str::to_owned);
        self.objects.range(start..).take_while(move |(key, _)| {
            key.group == group
                && key.resource == resource
                && namespace
                    .as_ref()
                    .is_none_or(|namespace| &key.namespace == namespace)
        })
    }

    /// Every stored object (for garbage collection and namespace cleanup).
    pub fn all(&self) -> impl Iterator<Item = (&ObjectKey, &Arc<Value>)> {
        self.objects.iter()
    }

    /// Stores an object under a new resourceVersion and records the change.
    pub fn put(&mut self, key: ObjectKey, mut object: Value) -> Arc<Value> {
        self.resource_version += 1;
        object["metadata"]["resourceVersion"] = json!(self.resource_version.to_string());
        let object = Arc::new(object);
        let old = self.objects.insert(key.clone(), object.clone());
        self.record(Change {
            resource_version: self.resource_version,
            key,
            old,
            new: Some(object.clone()),
        });
        object
    }

    /// Removes an object; its final state carries the deletion's version.
    pub fn remove(&mut self, key: &ObjectKey) -> Option<Arc<Value>> {
        let removed = self.objects.remove(key)?;
        self.resource_version += 1;
        let mut last = (*removed).clone();
        last["metadata"]["resourceVersion"] = json!(self.resource_version.to_string());
        let last = Arc::new(last);
        self.record(Change {
            resource_version: self.resource_version,
            key: key.clone(),
            old: Some(last.clone()),
            new: None,
        });
        Some(last)
    }

    fn record(&mut self, change: Change) {
        self.history.push_back(Arc::new(change));
        while self.history.len() > self.history_limit {
            if let Some(dropped) = self.history.pop_front() {
                self.compacted = dropped.resource_version;
            }
        }
    }

    /// Changes after `since`, or `Compacted` when history no longer reaches back.
    pub fn changes_since(&self, since: u64) -> Result<Vec<Arc<Change>>, Compacted> {
        if since < self.compacted {
            return Err(Compacted {
                requested: since,
                oldest: self.compacted,
            });
        }
        let start = self
            .history
            .partition_point(|change| change.resource_version <= since);
        Ok(self.history.range(start..).cloned().collect())
    }
}
