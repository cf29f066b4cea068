//! Events (`events.k8s.io/v1`) in the fake API server, validated as the real one validates them
//! (the fields a create must carry, `type` Normal or Warning, a note of at most 1 kB, a series
//! counted from 2), created once by name and then patched as a series, as kube-runtime's
//! recorder and client-go's do. While `forbidden`, every request is 403, as for credentials
//! without the right to write Events.

use std::collections::BTreeMap;

use axum::http::Method;
use k8s_openapi::api::events::v1::Event;
use serde_json::{Value, json};

use super::FakeKube;
use super::lease::Answer;
use super::select::merge_patch;
use super::store::{Store, not_found, status};

/// The Events of the fake cluster, by namespace and name.
#[derive(Debug, Default)]
pub struct Events {
    items: BTreeMap<(String, String), Event>,
    version: u64,
    pub forbidden: bool,
}

fn error(code: u16, reason: &str, message: String) -> Answer {
    let mut v = serde_json::to_value(status(code, reason, message)).expect("a Status serializes");
    v["kind"] = json!("Status");
    v["apiVersion"] = json!("v1");
    (code, v)
}

/// What the real API server's validation of an `events.k8s.io/v1` Event refuses.
fn invalid(e: &Event) -> Option<String> {
    let missing = [
        ("eventTime", e.event_time.is_none()),
        ("reportingController", e.reporting_controller.as_deref().is_none_or(str::is_empty)),
        ("reportingInstance", e.reporting_instance.as_deref().is_none_or(str::is_empty)),
        ("action", e.action.as_deref().is_none_or(str::is_empty)),
        ("reason", e.reason.as_deref().is_none_or(str::is_empty)),
        ("regarding", e.regarding.is_none()),
    ];
    if let Some((field, _)) = missing.iter().find(|(_, m)| *m) {
        return Some(format!("{field}: Required value"));
    }
    if !matches!(e.type_.as_deref(), Some("Normal" | "Warning")) {
        return Some(format!("type: Unsupported value: {:?}", e.type_));
    }
    if e.note.as_ref().is_some_and(|n| n.len() > 1024) {
        return Some("note: Too long: must have at most 1024 bytes".into());
    }
    if e.series.as_ref().is_some_and(|s| s.count < 2) {
        return Some("series.count: Invalid value: should be at least 2".into());
    }
    None
}

impl Events {
    /// Serve one request under `/apis/events.k8s.io/v1/namespaces/{ns}/events[/{name}]`.
    pub fn serve(&mut self, method: &Method, ns: &str, name: Option<&str>, body: Option<&Value>) -> Answer {
        if self.forbidden {
            let message = format!(
                "events.events.k8s.io is forbidden: User \"poolctl\" cannot {} resource \"events\" in API group \"events.k8s.io\" in the namespace \"{ns}\"",
                if *method == Method::POST { "create" } else { "patch" }
            );
            return error(403, "Forbidden", message);
        }
        match (method, name) {
            (&Method::POST, None) => {
                let Some(Ok(mut event)) = body.cloned().map(serde_json::from_value::<Event>) else {
                    return error(400, "BadRequest", "not an Event".into());
                };
                if let Some(why) = invalid(&event) {
                    return error(422, "Invalid", format!("Event.events.k8s.io is invalid: {why}"));
                }
                let name = event.metadata.name.clone().unwrap_or_default();
                let key = (ns.to_owned(), name.clone());
                if self.items.contains_key(&key) {
                    return error(
                        409,
                        "AlreadyExists",
                        format!("events.events.k8s.io \"{name}\" already exists"),
                    );
                }
                self.version += 1;
                event.metadata.namespace = Some(ns.to_owned());
                event.metadata.resource_version = Some(format!("event-{}", self.version));
                self.items.insert(key, event.clone());
                (201, serde_json::to_value(&event).expect("an Event serializes"))
            }
            (&Method::PATCH, Some(name)) => {
                let key = (ns.to_owned(), name.to_owned());
                let Some(current) = self.items.get(&key) else {
                    return (
                        404,
                        serde_json::to_value(not_found("events", name)).expect("a Status serializes"),
                    );
                };
                let mut value = serde_json::to_value(current).expect("an Event serializes");
                merge_patch(&mut value, body.unwrap_or(&Value::Null));
                let Ok(mut event) = serde_json::from_value::<Event>(value) else {
                    return error(400, "BadRequest", "the patched Event does not decode".into());
                };
                if let Some(why) = invalid(&event) {
                    return error(422, "Invalid", format!("Event.events.k8s.io is invalid: {why}"));
                }
                self.version += 1;
                event.metadata.resource_version = Some(format!("event-{}", self.version));
                self.items.insert(key, event.clone());
                (200, serde_json::to_value(&event).expect("an Event serializes"))
            }
            _ => error(405, "MethodNotAllowed", format!("the fake API server does not {method} events")),
        }
    }
}

impl Events {
    /// Every Event recorded so far, oldest first.
    pub fn all(&self) -> Vec<Event> {
        let mut events: Vec<Event> = self.items.values().cloned().collect();
        events.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
        events
    }

    /// The Events about `kind` `name`, oldest first, as `kubectl describe` shows them.
    pub fn about(&self, kind: &str, name: &str) -> Vec<Event> {
        let regards = |e: &Event| {
            e.regarding
                .as_ref()
                .is_some_and(|r| r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name))
        };
        self.all().into_iter().filter(regards).collect()
    }
}

impl Store {
    pub fn events_api(&mut self) -> &mut Events {
        &mut self.k8s_events
    }

    pub fn k8s_events(&self) -> &Events {
        &self.k8s_events
    }
}

impl FakeKube {
    /// The Events about `kind` `name`, oldest first.
    pub fn events_about(&self, kind: &str, name: &str) -> Vec<Event> {
        self.store().k8s_events().about(kind, name)
    }
}
