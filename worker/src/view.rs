//! What the sidecar hands to the application: the slice as delivered, and a
//! Rust API to follow it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use shoal_core::slice::SliceInstance;
use tokio::sync::watch;

/// The slice hash of an empty job set: `sha256:` + SHA-256 of no bytes. A
/// fenced member is handed its slice with no jobs and this hash.
pub const EMPTY_JOBS_HASH: &str =
    "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// One member's slice as the application sees it (also the JSON of `GET /v1/slice`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliceView {
    /// The Swarm this slice belongs to.
    pub swarm: String,
    /// The member (pod name) owning these jobs.
    pub member: String,
    /// The revision at which this member's slice last changed.
    pub revision: u64,
    /// `sha256:<hex>` over the jobs (see slice format v1).
    pub hash: String,
    /// The jobs this member owns, sorted by byte order.
    pub jobs: Vec<String>,
    /// The plan instances placed on this member, sorted by name (slice format
    /// v1 `instances`; empty when none).
    #[serde(default)]
    pub instances: Vec<SliceInstance>,
}

impl SliceView {
    /// The (revision, hash) pair that acknowledges this slice.
    pub fn ack_target(&self) -> AckTarget {
        AckTarget {
            revision: self.revision,
            hash: self.hash.clone(),
        }
    }

    /// The same slice with every job and instance taken away (what a fenced
    /// member runs).
    pub fn without_jobs(&self) -> SliceView {
        SliceView {
            jobs: Vec::new(),
            instances: Vec::new(),
            hash: EMPTY_JOBS_HASH.to_string(),
            ..self.clone()
        }
    }
}

/// A revision and slice hash: what the application confirms with
/// `POST /v1/ack` and what the sidecar writes on its Lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckTarget {
    /// The acknowledged revision.
    pub revision: u64,
    /// The acknowledged slice hash.
    pub hash: String,
}

/// What is delivered right now: the slice in force (with no jobs while
/// fenced) and whether the sidecar is fenced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Delivered {
    /// `None` until the first slice arrived.
    pub slice: Option<Arc<SliceView>>,
    /// The Lease could not be renewed in time: run nothing until it is.
    pub fenced: bool,
}

impl Delivered {
    /// The jobs the application should run now (none while fenced).
    pub fn jobs(&self) -> &[String] {
        match &self.slice {
            Some(slice) => &slice.jobs,
            None => &[],
        }
    }

    /// The plan instances the member should run now (none while fenced).
    pub fn instances(&self) -> &[SliceInstance] {
        match &self.slice {
            Some(slice) => &slice.instances,
            None => &[],
        }
    }
}

/// A subscription to slice changes, for applications written in Rust that
/// embed the sidecar (see [`crate::Worker::slices`]).
#[derive(Debug, Clone)]
pub struct SliceWatch {
    receiver: watch::Receiver<Delivered>,
}

impl SliceWatch {
    pub(crate) fn new(receiver: watch::Receiver<Delivered>) -> SliceWatch {
        SliceWatch { receiver }
    }

    /// The slice delivered right now.
    pub fn current(&self) -> Delivered {
        self.receiver.borrow().clone()
    }

    /// Waits for the next change and returns it; `None` once the sidecar stopped.
    pub async fn changed(&mut self) -> Option<Delivered> {
        self.receiver.changed().await.ok()?;
        Some(self.receiver.borrow_and_update().clone())
    }

    /// Waits until the delivered state satisfies `condition` (checked at once
    /// first); `None` once the sidecar stopped.
    pub async fn wait_for(
        &mut self,
        mut condition: impl FnMut(&Delivered) -> bool,
    ) -> Option<Delivered> {
        self.receiver
            .wait_for(|delivered| condition(delivered))
            .await
            .ok()
            .map(|found| found.clone())
    }
}
