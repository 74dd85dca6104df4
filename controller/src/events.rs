//! Kubernetes Events, one series per distinct message, with the timestamps
//! `kubectl get events` sorts by.
//!
//! Events are written through the core/v1 API, as client-go's recorder does:
//! only there may an Event carry `firstTimestamp`, `lastTimestamp` and
//! `count` (the events.k8s.io/v1 API refuses them on create), and without
//! them `kubectl get events --sort-by=.lastTimestamp` cannot order Shoal's
//! Events among the others. A repeat of the same message on the same object
//! within six minutes patches the existing Event (count and lastTimestamp)
//! instead of creating another; a different message is a new Event (client-go
//! keys series by message too, kubernetes/kubernetes#112365).

use std::collections::HashMap;
use std::sync::Mutex;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};
use kube::{Api, Client};

/// Distinct messages remembered before the map is cleared.
const MAX_MESSAGES: usize = 1024;
/// How long a repeat extends an Event's series rather than starting a new Event.
const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// The Event a message was last published as.
#[derive(Debug, Clone)]
struct Series {
    name: String,
    namespace: String,
    count: i32,
    first: Timestamp,
    last: Timestamp,
}

/// Publishes Events; repeats of one message on one object form a series.
pub struct EventRecorders {
    client: Client,
    reporter: Reporter,
    series: Mutex<HashMap<(String, String, String), Series>>,
}

impl EventRecorders {
    /// Recorders that report as `reporter`.
    pub fn new(client: Client, reporter: Reporter) -> EventRecorders {
        EventRecorders {
            client,
            reporter,
            series: Mutex::new(HashMap::new()),
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
        let now = Timestamp::now();
        let previous = {
            let mut series = self
                .series
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if series.len() >= MAX_MESSAGES && !series.contains_key(&key) {
                series.clear();
            }
            series
                .get(&key)
                .filter(|series| series.last + SERIES_WINDOW > now)
                .cloned()
        };
        let published = match previous {
            Some(series) => match self.repeat(&series, now).await {
                Ok(series) => series,
                // The Event expired or was deleted: start a new one.
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    self.create(event, reference, now).await?
                }
                Err(error) => return Err(error),
            },
            None => self.create(event, reference, now).await?,
        };
        self.series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key, published);
        Ok(())
    }

    async fn create(
        &self,
        event: &Event,
        reference: &ObjectReference,
        now: Timestamp,
    ) -> Result<Series, kube::Error> {
        let namespace = reference
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let name = format!(
            "{}.{:x}",
            reference.name.as_deref().unwrap_or("shoal"),
            now.as_nanosecond()
        );
        let object = CoreEvent {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            involved_object: reference.clone(),
            reason: Some(event.reason.clone()),
            message: event.note.clone(),
            type_: Some(
                match event.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_owned(),
            ),
            action: Some(event.action.clone()),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            event_time: Some(MicroTime(now)),
            count: Some(1),
            source: Some(EventSource {
                component: Some(self.reporter.controller.clone()),
                host: None,
            }),
            reporting_component: Some(self.reporter.controller.clone()),
            reporting_instance: self.reporter.instance.clone(),
            related: event.secondary.clone(),
            ..CoreEvent::default()
        };
        Api::<CoreEvent>::namespaced(self.client.clone(), &namespace)
            .create(&PostParams::default(), &object)
            .await?;
        Ok(Series {
            name,
            namespace,
            count: 1,
            first: now,
            last: now,
        })
    }

    async fn repeat(&self, series: &Series, now: Timestamp) -> Result<Series, kube::Error> {
        let count = series.count.saturating_add(1);
        let patch = serde_json::json!({
            "count": count,
            "lastTimestamp": Time(now),
        });
        Api::<CoreEvent>::namespaced(self.client.clone(), &series.namespace)
            .patch(&series.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(Series {
            count,
            last: now,
            first: series.first,
            ..series.clone()
        })
    }
}
