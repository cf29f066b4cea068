//! The Kubernetes Events sink: what a rollout tells its cluster's users ([`Event::Kube`]),
//! handed to the cluster of its pool in the order told. It is sent beside the rollout, so that
//! no step waits for an API server to take an Event; the command that chose the sink waits for
//! the last ones before it ends.

use std::collections::BTreeMap;
use std::sync::Mutex;

use tokio::sync::mpsc;

use crate::backend::Cluster;
use crate::locked;
use crate::rollout::event::{About, Event, Sink};

/// How many Events may wait to be sent; more are dropped (an Event is a courtesy), never
/// piled up without bound behind a slow API server.
const QUEUE: usize = 256;

/// One Event to send.
struct Told {
    pool: String,
    node: Option<String>,
    reason: &'static str,
    note: String,
    warning: bool,
}

/// Queues each [`Event::Kube`] for [`KubeEvents::beside`] to send. One rollout's: once its
/// Events are sent, it takes no more.
pub struct KubeEvents {
    sender: Mutex<Option<mpsc::Sender<Told>>>,
    receiver: Mutex<Option<mpsc::Receiver<Told>>>,
}

impl Default for KubeEvents {
    fn default() -> Self {
        let (sender, receiver) = mpsc::channel(QUEUE);
        Self { sender: Mutex::new(Some(sender)), receiver: Mutex::new(Some(receiver)) }
    }
}

impl KubeEvents {
    /// Carry `work` out while what it tells is sent to the cluster of each pool in `clusters`,
    /// and return once the last of it is sent too.
    pub async fn beside<K: Cluster, T>(
        &self,
        clusters: &BTreeMap<String, K>,
        work: impl Future<Output = T>,
    ) -> T {
        let work = async {
            let out = work.await;
            locked(&self.sender).take();
            out
        };
        let (out, ()) = tokio::join!(work, self.send(clusters));
        out
    }

    /// Send what is told until the sender is dropped and the queue is empty.
    async fn send<K: Cluster>(&self, clusters: &BTreeMap<String, K>) {
        let Some(mut queue) = locked(&self.receiver).take() else { return };
        while let Some(told) = queue.recv().await {
            if let Some(cluster) = clusters.get(&told.pool) {
                cluster.tell(told.node.as_deref(), told.reason, told.note, told.warning).await;
            }
        }
    }
}

/// Send at once what `say` tells the clusters of `clusters`' pools: for what is told outside a
/// rollout (the conditions a plan finds).
pub async fn tell_now<K: Cluster>(clusters: &BTreeMap<String, K>, say: impl FnOnce(&dyn Sink)) {
    let events = KubeEvents::default();
    events.beside(clusters, async { say(&events) }).await;
}

impl Sink for KubeEvents {
    fn event(&self, event: &Event<'_>) {
        let Event::Kube { about, reason, note, warning } = *event else { return };
        let node = match about {
            About::Node { node, .. } => Some(node.to_owned()),
            About::Pool(_) => None,
        };
        let told = Told { pool: about.pool().to_owned(), node, reason, note: note.to_owned(), warning };
        let sender = locked(&self.sender);
        let Some(sender) = sender.as_ref() else { return };
        if sender.try_send(told).is_err() {
            tracing::debug!("{reason}: not sent as a Kubernetes Event, {QUEUE} wait to be sent already");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::backend::Connect;
    use crate::model::ClusterRef;
    use crate::testing::fake::FakeWorld;

    fn node_event<'a>(pool: &'a str, node: &'a str, reason: &'static str) -> Event<'a> {
        Event::Kube { about: About::Node { pool, node }, reason, note: "n", warning: false }
    }

    #[tokio::test]
    async fn events_go_to_their_pools_cluster_in_order_and_a_full_queue_drops_rather_than_grows() {
        let fake = FakeWorld::default();
        let cluster = ClusterRef { kubeconfig: None, context: None };
        let clusters = BTreeMap::from([("k".to_owned(), fake.connect(&cluster, "k").await.unwrap())]);
        let events = KubeEvents::default();
        // Told before anything is sent: the queue holds what it can, the rest is dropped.
        for _ in 0..QUEUE + 10 {
            events.event(&node_event("k", "k-a", "Cordoned"));
        }
        events
            .beside(&clusters, async {
                events.event(&Event::Message("not an Event"));
                events.event(&node_event("other", "o-a", "Cordoned"));
            })
            .await;
        let told = fake.told();
        assert_eq!(told.len(), QUEUE, "{} told", told.len());
        assert!(told.iter().all(|t| t == "k-a Cordoned"), "{told:?}");
        // Once sent, the sink takes no more.
        events.event(&node_event("k", "k-a", "Drained"));
        events.beside(&clusters, async {}).await;
        assert_eq!(fake.told().len(), QUEUE);

        let events = KubeEvents::default();
        let tell = events.beside(&clusters, async {
            events.event(&node_event("k", "k-a", "Draining"));
            events.event(&Event::Kube {
                about: About::Pool("k"),
                reason: "RolloutFailed",
                note: "x",
                warning: true,
            });
        });
        tell.await;
        assert_eq!(fake.told()[QUEUE..], ["k-a Draining", "lease/k RolloutFailed"]);
    }
}
