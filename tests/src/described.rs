//! The Events `kubectl describe` shows for an object: core `v1` Events selected by
//! `involvedObject` kind, namespace, name and uid — as kubectl asks for them — whoever wrote
//! them through `events.k8s.io/v1`.

use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};

use crate::wait::wait_for;

/// The object an Event is about, as `kubectl describe` names it.
#[derive(Clone, Debug)]
pub struct Described<'a> {
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
}

impl Described<'_> {
    /// Every Event on the object, oldest first.
    pub async fn events(&self, client: &kube::Client) -> Vec<Event> {
        let selector = format!(
            "involvedObject.kind={},involvedObject.namespace={},involvedObject.name={},involvedObject.uid={}",
            self.kind, self.namespace, self.name, self.uid
        );
        let mut items = Api::<Event>::namespaced(client.clone(), self.namespace)
            .list(&ListParams::default().fields(&selector))
            .await
            .expect("list events")
            .items;
        items.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
        items
    }

    /// The Events of reason `reason` on the object.
    pub async fn with_reason(&self, client: &kube::Client, reason: &str) -> Vec<Event> {
        self.events(client)
            .await
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .collect()
    }

    /// Waits (up to 30 s) for an Event of reason `reason` that `pred` accepts.
    pub async fn wait(
        &self,
        client: &kube::Client,
        reason: &str,
        pred: impl Fn(&Event) -> bool,
    ) -> Event {
        wait_for(
            &format!("a {reason} Event on {} {}", self.kind, self.name),
            Duration::from_secs(30),
            || async {
                self.with_reason(client, reason)
                    .await
                    .into_iter()
                    .find(|e| pred(e))
            },
        )
        .await
    }
}

/// How many times an Event was seen: its series' count, or 1.
pub fn occurrences(e: &Event) -> i32 {
    e.series.as_ref().and_then(|s| s.count).unwrap_or(1)
}

/// The Event's note (`message` in core `v1`).
pub fn note(e: &Event) -> &str {
    e.message.as_deref().unwrap_or_default()
}
