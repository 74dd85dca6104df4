//! Kubernetes Events, one per distinct message.
//!
//! kube's `Recorder` folds every Event with the same type, reason and action
//! on the same object into one series for six minutes and keeps the first
//! note: a second `RevisionPending` would be shown as "x2" with the first
//! revision's summary. client-go keys its series by the note too
//! (kubernetes/kubernetes#112365); [`EventRecorders`] does the same by giving
//! each distinct (object, reason, note) its own `Recorder`, so exact repeats
//! still fold into a series and a new message is a new Event.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, Recorder, Reporter};

/// Distinct messages kept before the map is cleared: each holds one small
/// `Recorder`, and a series older than six minutes is not extended anyway.
const MAX_MESSAGES: usize = 1024;

/// Publishes Events; repeats of one message on one object form a series.
pub struct EventRecorders {
    client: Client,
    reporter: Reporter,
    by_message: Mutex<HashMap<(String, String, String), Recorder>>,
}

impl EventRecorders {
    /// Recorders that report as `reporter`.
    pub fn new(client: Client, reporter: Reporter) -> EventRecorders {
        EventRecorders {
            client,
            reporter,
            by_message: Mutex::new(HashMap::new()),
        }
    }

    /// Publishes `event` regarding `reference`.
    pub async fn publish(
        &self,
        event: &Event,
        reference: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let object = format!(
            "{}/{}/{}/{}",
            reference.kind.as_deref().unwrap_or_default(),
            reference.namespace.as_deref().unwrap_or_default(),
            reference.name.as_deref().unwrap_or_default(),
            reference.uid.as_deref().unwrap_or_default(),
        );
        let key = (
            object,
            event.reason.clone(),
            event.note.clone().unwrap_or_default(),
        );
        let recorder = {
            // A poisoned lock only means another publish panicked; the map is still usable.
            let mut by_message = self
                .by_message
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if by_message.len() >= MAX_MESSAGES && !by_message.contains_key(&key) {
                by_message.clear();
            }
            by_message
                .entry(key)
                .or_insert_with(|| Recorder::new(self.client.clone(), self.reporter.clone()))
                .clone()
        };
        recorder.publish(event, reference).await
    }
}
