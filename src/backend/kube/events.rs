//! Sending Kubernetes Events, where `kubectl describe node` and `kubectl get events` look: on
//! the Node for each step of its retirement, on the pool's Lease for its rollouts. What to tell
//! is the rollout's to say and `crate::report::KubeEvents`' to hand on; this is the transport,
//! kube-runtime's recorder (`events.k8s.io/v1`, reporting controller `poolctl.dev/poolctl`),
//! which counts a repeated Event as a series instead of creating it again. An Event is a
//! courtesy: a cluster that refuses them (RBAC) or does not answer costs one warning, never a
//! step.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use super::KubeCluster;
use super::errors::reason;
use super::lease::{LEASE_NAMESPACE, lease_name};

/// The `reportingController` of poolctl's Events.
const REPORTING_CONTROLLER: &str = "poolctl.dev/poolctl";

/// The longest one Event may take to be sent.
const DEADLINE: Duration = Duration::from_secs(5);

/// The API server caps a note at 1 kB.
const MAX_NOTE: usize = 1024;

/// What one cluster connection tells through Events, shared by its clones.
#[derive(Clone)]
pub(super) struct Teller {
    recorder: Recorder,
    /// Set once an Event was refused: said once, then Events are no longer sent.
    off: Arc<AtomicBool>,
}

impl Teller {
    pub(super) fn new(client: kube::Client) -> Self {
        // The instance is the host (in a Pod: the Pod's name), as client-go's recorders say.
        let reporter = Reporter::from(REPORTING_CONTROLLER);
        Self { recorder: Recorder::new(client, reporter), off: Arc::default() }
    }
}

/// A reference to Node `name` as the kubelet makes it for its own Events: with the name as UID,
/// which is what `kubectl describe node` looks for besides the Node's own UID.
fn node_ref(name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(name.into()),
        uid: Some(name.into()),
        ..ObjectReference::default()
    }
}

fn lease_ref(pool: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("coordination.k8s.io/v1".into()),
        kind: Some("Lease".into()),
        name: Some(lease_name(pool)),
        namespace: Some(LEASE_NAMESPACE.into()),
        ..ObjectReference::default()
    }
}

/// `note` within the API server's limit, cut at a character boundary.
fn capped(note: String) -> String {
    if note.len() <= MAX_NOTE {
        return note;
    }
    let mut end = MAX_NOTE - 3;
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &note[..end])
}

impl KubeCluster {
    /// Publish an Event about Node `node` or, without one, about the pool's rollout (on its
    /// Lease).
    pub(super) async fn publish(&self, node: Option<&str>, why: &str, text: String, warning: bool) {
        let regarding = node.map_or_else(|| lease_ref(&self.pool), node_ref);
        let teller = &self.teller;
        if teller.off.load(Ordering::Relaxed) {
            return;
        }
        let event = Event {
            type_: if warning { EventType::Warning } else { EventType::Normal },
            reason: why.to_owned(),
            note: Some(capped(text)),
            action: why.to_owned(),
            secondary: None,
        };
        let failure = match tokio::time::timeout(DEADLINE, teller.recorder.publish(&event, &regarding)).await
        {
            Ok(Ok(())) => return,
            Ok(Err(e)) => reason(&e),
            Err(_) => format!("no answer within {}s", DEADLINE.as_secs()),
        };
        if !teller.off.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "cannot record Kubernetes Events at {} ({failure}); going on without them",
                self.server
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_note_is_cut_within_the_api_servers_limit() {
        let note = "é".repeat(1000);
        let cut = capped(note);
        assert!(cut.len() <= MAX_NOTE, "{}", cut.len());
        assert!(cut.ends_with("..."));
        assert_eq!(capped("short".into()), "short");
    }
}
