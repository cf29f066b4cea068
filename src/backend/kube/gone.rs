//! How a drain learns that its evicted pods are gone: one watch of the Node's pods, started from
//! the drain's own list, rather than asking after each pod with a backoff (which saw a pod gone
//! up to a backoff step late: 100 ms, then 200, 400...).
//!
//! The watch is resumed from the last resourceVersion seen when the server ends it; when it
//! fails, or the server says that version is too old, the Node's pods are listed again and
//! watched from that list. A server that refuses the watch for good is asked with lists only,
//! with a backoff, as before. Whatever happens, every wait ends at the drain's deadline.
//!
//! On an unreachable Node (its Ready condition Unknown: the kubelet stopped posting its status)
//! nobody is left to confirm that an evicted pod's containers ended, and the pod stays
//! Terminating until the Node object goes. So, like `kubectl drain
//! --skip-wait-for-delete-timeout` and Cluster API, the drain stops waiting for such a pod once
//! its deletionTimestamp is more than [`LEFT_TERMINATING_AFTER`] old, and says so. The Node is
//! read again while pods are terminating on it, so that a kubelet that dies during the drain
//! (or comes back) is noticed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node as K8sNode, Pod as K8sPod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until, timeout_at};

use super::errors::{Class, classify, reason};
use super::{KubeCluster, WATCH_WINDOW};
use crate::backend::retry::Backoff;

/// A pod by namespace and name.
pub(super) type Key = (String, String);

/// How long past its deletionTimestamp a pod on an unreachable Node is still waited for.
///
/// The API server sets a pod's deletionTimestamp to the time of the delete plus its grace
/// period, so the grace period is waited out in any case; this is only slack, for a kubelet
/// that comes back just in time and for clock skew (the timestamp is the server's, "now" is
/// poolctl's, as in kubectl). kubectl's `--skip-wait-for-delete-timeout` is this number (off by
/// default, `shouldSkipPod` in `k8s.io/kubectl/pkg/drain`); Cluster API sets it to 1 s for a
/// Node whose Ready condition is Unknown (`drainNode` in
/// `internal/controllers/machine/machine_controller.go`), and since it truncates to whole
/// seconds, skips pods 2 s past due.
/// It runs next to the API server; poolctl runs on a workstation whose clock may be a few
/// seconds off the server's, hence a little more.
pub(super) const LEFT_TERMINATING_AFTER: SignedDuration = SignedDuration::from_secs(5);

/// How often the Node is read again while an evicted pod is terminating on it. The node
/// controller marks a silent kubelet's Node Unknown only after its grace period (40 s by
/// default), so reading more often would tell nothing sooner.
const NODE_RECHECK: Duration = Duration::from_secs(5);

/// Whether anyone can confirm that a pod of the Node ended, as the Node object says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Contact {
    /// The kubelet posts the Node's status, Ready or not: it ends the pods and reports it.
    Kubelet,
    /// The Node's Ready condition is Unknown (since this time, if the server says): the node
    /// controller has heard nothing from the kubelet for its grace period (Cluster API's
    /// `IsNodeUnreachable`).
    Unreachable(Option<Timestamp>),
    /// There is no Node object: no kubelet is registered to report anything, and the pod
    /// garbage collector, not a kubelet, removes what is bound to it.
    NoNode,
}

impl Contact {
    pub(super) fn of(node: Option<&K8sNode>) -> Self {
        let Some(node) = node else { return Self::NoNode };
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
        match ready {
            Some(c) if c.status == "Unknown" => {
                Self::Unreachable(c.last_transition_time.as_ref().map(|t| t.0))
            }
            _ => Self::Kubelet,
        }
    }

    /// Why a pod of `node` has nobody to confirm its end, for the line that says it was left.
    fn why(self, node: &str) -> String {
        match self {
            Self::Kubelet => format!("Node {node}"),
            Self::Unreachable(Some(since)) => {
                format!("unreachable Node {node} (Ready=Unknown since {since})")
            }
            Self::Unreachable(None) => format!("unreachable Node {node} (Ready=Unknown)"),
            Self::NoNode => format!("Node {node}, which no longer exists"),
        }
    }
}

/// Whether a drain stops waiting, at `now`, for a pod of an unreachable Node whose deletion was
/// due at `deletion` (its deletionTimestamp).
fn overdue(deletion: Timestamp, now: Timestamp) -> bool {
    now.duration_since(deletion) > LEFT_TERMINATING_AFTER
}

/// The evicted pods of one Node that a drain waits for, and which of them are gone.
pub(super) struct Departures {
    /// Each awaited pod's UID; `None` if the server gave it none (a replacement of the same name
    /// is then indistinguishable, and only its deletion counts).
    awaited: BTreeMap<Key, Option<String>>,
    /// The Node, for the line that says a pod was left terminating on it.
    node: String,
    /// Whether the Node's kubelet still reports, as last read.
    contact: Mutex<Contact>,
    /// The deletionTimestamp of each awaited pod seen terminating and not gone yet. Its changes
    /// wake [`KubeCluster::follow_contact`], which decides when an unreachable Node's pod is
    /// left.
    terminating: watch::Sender<BTreeMap<Key, Timestamp>>,
    /// The awaited pods known to be gone, or left terminating on an unreachable Node.
    gone: watch::Sender<Vec<Key>>,
    /// Why the server could not be asked lately, for the message of a wait that timed out.
    trouble: Mutex<Option<String>>,
    /// The API server URL, for that message.
    server: String,
    /// The awaited pods the drain does not evict but waits for (`wait-completed`): for them, a
    /// phase of Succeeded or Failed counts as gone, since their containers no longer run.
    completing: BTreeSet<Key>,
}

impl Departures {
    /// The pods are those of the drain's own list, before any eviction: some may be terminating
    /// already.
    pub(super) fn new<'a>(
        pods: impl IntoIterator<Item = &'a K8sPod>,
        node: &str,
        contact: Contact,
        server: &str,
    ) -> Self {
        let pods: Vec<&K8sPod> = pods.into_iter().collect();
        let awaited = pods.iter().map(|p| (key_of(p), p.metadata.uid.clone())).collect();
        let departures = Self {
            awaited,
            node: node.to_owned(),
            contact: Mutex::new(contact),
            terminating: watch::Sender::new(BTreeMap::new()),
            gone: watch::Sender::new(Vec::new()),
            trouble: Mutex::default(),
            server: server.to_owned(),
            completing: BTreeSet::new(),
        };
        for pod in pods {
            departures.seen(pod);
        }
        departures
    }

    /// Of the awaited `pods`, those that are waited for to complete rather than evicted.
    pub(super) fn completing<'a>(mut self, pods: impl IntoIterator<Item = &'a K8sPod>) -> Self {
        for pod in pods {
            self.completing.insert(key_of(pod));
            self.seen(pod);
        }
        self
    }

    /// Wait until the pod is gone, or `deadline`. `Err` says why it is not known to be gone.
    pub(super) async fn wait(&self, namespace: &str, name: &str, deadline: Instant) -> Result<(), String> {
        let key = (namespace.to_owned(), name.to_owned());
        let mut gone = self.gone.subscribe();
        if timeout_at(deadline, gone.wait_for(|g| g.contains(&key))).await.is_ok() {
            return Ok(());
        }
        let trouble = crate::locked(&self.trouble).clone();
        match (self.completing.contains(&key), trouble) {
            (false, Some(why)) => {
                Err(format!("evicted, but {} did not say whether it is gone ({why})", self.server))
            }
            (false, None) => Err("evicted but still present".to_owned()),
            (true, Some(why)) => Err(format!(
                "not evicted (wait-completed), and {} did not say whether it completed ({why})",
                self.server
            )),
            (true, None) => Err("not evicted (wait-completed), and still running".to_owned()),
        }
    }

    /// The awaited pods not known to be gone, in order.
    pub(super) fn left(&self) -> Vec<Key> {
        let gone = self.gone.borrow();
        self.awaited.keys().filter(|k| !gone.contains(k)).cloned().collect()
    }

    fn all_gone(&self) -> bool {
        self.gone.borrow().len() == self.awaited.len()
    }

    fn mark(&self, key: Key) {
        self.terminating.send_if_modified(|t| t.remove(&key).is_some());
        self.gone.send_if_modified(|gone| {
            let new = !gone.contains(&key);
            if new {
                gone.push(key);
            }
            new
        });
    }

    /// What a pod object, seen present in a list or a watch event, says about the awaited pod
    /// of its name.
    fn seen(&self, pod: &K8sPod) {
        let key = key_of(pod);
        let Some(uid) = self.awaited.get(&key) else { return };
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if uid.is_some() && pod.metadata.uid != *uid
            || self.completing.contains(&key) && matches!(phase, Some("Succeeded" | "Failed"))
        {
            self.mark(key);
        } else if let Some(deletion) = &pod.metadata.deletion_timestamp
            && !self.gone.borrow().contains(&key)
        {
            self.terminating.send_if_modified(|t| t.insert(key, deletion.0) != Some(deletion.0));
        }
    }

    fn set_contact(&self, contact: Contact) {
        let mut current = crate::locked(&self.contact);
        if *current != contact {
            tracing::debug!(
                node = self.node,
                ?contact,
                "the Node's kubelet contact changed during the drain"
            );
            *current = contact;
        }
    }

    fn contact(&self) -> Contact {
        *crate::locked(&self.contact)
    }

    /// Stop waiting for the terminating pods that an unreachable Node left past their due time
    /// at `now`, saying so for each; the pods left.
    fn leave_overdue(&self, now: Timestamp) -> Vec<Key> {
        let contact = self.contact();
        if contact == Contact::Kubelet {
            return Vec::new();
        }
        let overdue: Vec<(Key, Timestamp)> = self
            .terminating
            .borrow()
            .iter()
            .filter(|(_, deletion)| overdue(**deletion, now))
            .map(|(key, deletion)| (key.clone(), *deletion))
            .collect();
        for ((namespace, name), deletion) in &overdue {
            // A warning, not a debug line: the pod may still run on a machine that only lost
            // its network, and the user should know which pods were not seen to end.
            tracing::warn!(
                "pod {namespace}/{name} left terminating on {}: no kubelet can confirm that it \
                 ended, and its deletion was due at {deletion}, more than {}s ago; not waiting \
                 for it (as `kubectl drain --skip-wait-for-delete-timeout` does)",
                contact.why(&self.node),
                LEFT_TERMINATING_AFTER.as_secs(),
            );
        }
        overdue
            .into_iter()
            .map(|(key, _)| {
                self.mark(key.clone());
                key
            })
            .collect()
    }

    /// How long from `now` until the next wake of [`KubeCluster::follow_contact`] is due for a
    /// terminating pod: the next overdue time on an unreachable Node, else the next read of
    /// the Node; `None` when no awaited pod is terminating, and there is nothing to decide.
    fn next_due(&self, now: Timestamp) -> Option<Duration> {
        let terminating = self.terminating.borrow();
        if terminating.is_empty() {
            return None;
        }
        if self.contact() == Contact::Kubelet {
            return Some(NODE_RECHECK);
        }
        let first = terminating.values().min()?;
        let until = first.duration_since(now).saturating_add(LEFT_TERMINATING_AFTER);
        // Just past the instant, so that the pod is overdue when the wake comes.
        let until = Duration::try_from(until).unwrap_or_default() + Duration::from_millis(1);
        Some(until.min(NODE_RECHECK))
    }

    /// A pod deleted for good: the awaited one of its name, or a replacement of it (which only
    /// exists once the awaited one is gone).
    fn deleted(&self, pod: &K8sPod) {
        let key = key_of(pod);
        if self.awaited.contains_key(&key) {
            self.mark(key);
        }
    }

    /// A list of the Node's pods: an awaited pod that is not in it is gone.
    fn listed(&self, pods: &[K8sPod]) {
        for key in self.awaited.keys() {
            if !pods.iter().any(|p| key_of(p) == *key) {
                self.mark(key.clone());
            }
        }
        for pod in pods {
            self.seen(pod);
        }
    }

    fn trouble(&self, why: Option<String>) {
        *crate::locked(&self.trouble) = why;
    }
}

fn key_of(pod: &K8sPod) -> Key {
    (super::convert::namespace_of(pod), pod.metadata.name.clone().unwrap_or_default())
}

/// How a watch of the Node's pods ended.
enum WatchEnd {
    /// The server closed it (its window ran out): resume from the last version seen.
    Closed,
    /// It broke, the server said the version is too old, or closed it at once with nothing
    /// said (again and again, that would spin): list again after a pause.
    Broken,
    /// The server refuses to watch (403, say): list with a backoff from now on.
    Refused,
}

impl KubeCluster {
    /// Keep `departures` up to date with the pods of `node` from `version` (a list of them made
    /// before the first eviction) until every awaited pod is gone or `deadline` passes.
    pub(super) async fn follow_departures(
        &self,
        node: &str,
        departures: &Departures,
        mut version: String,
        deadline: Instant,
    ) {
        let api: Api<K8sPod> = Api::all(self.client.clone());
        let fields = format!("spec.nodeName={node}");
        let pause = || Backoff::capped(std::time::Duration::from_secs(1));
        let mut backoff = pause();
        let mut watching = true;
        while !departures.all_gone() && Instant::now() < deadline {
            if version.is_empty() || !watching {
                let params = ListParams::default().fields(&fields);
                match timeout_at(deadline, api.list(&params)).await {
                    Ok(Ok(list)) => {
                        departures.trouble(None);
                        if watching {
                            backoff = pause();
                        }
                        departures.listed(&list.items);
                        version = list.metadata.resource_version.unwrap_or_default();
                    }
                    Ok(Err(e)) => {
                        departures.trouble(Some(reason(&e)));
                        backoff.wait_until(deadline).await;
                        continue;
                    }
                    Err(_) => return,
                }
                if departures.all_gone() {
                    return;
                }
                if !watching {
                    backoff.wait_until(deadline).await;
                    continue;
                }
            }
            match self.watch_departures(&api, &fields, departures, &mut version, deadline).await {
                WatchEnd::Closed => backoff = pause(),
                WatchEnd::Broken => {
                    version.clear();
                    backoff.wait_until(deadline).await;
                }
                WatchEnd::Refused => watching = false,
            }
        }
    }

    /// While an awaited pod is terminating, read the Node again now and then, and stop waiting
    /// for the pods that an unreachable Node leaves overdue (see [`LEFT_TERMINATING_AFTER`]),
    /// until every awaited pod is gone or `deadline` passes. The Node as read when the drain
    /// started is in `departures` already.
    pub(super) async fn follow_contact(&self, node: &str, departures: &Departures, deadline: Instant) {
        let api = self.nodes_api();
        let mut deletions = departures.terminating.subscribe();
        loop {
            departures.leave_overdue(Timestamp::now());
            if departures.all_gone() || Instant::now() >= deadline {
                return;
            }
            // Nothing terminating: nothing to decide until a pod's deletion is seen.
            let wake = departures
                .next_due(Timestamp::now())
                .map_or(deadline, |d| (Instant::now() + d).min(deadline));
            tokio::select! {
                changed = deletions.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    continue;
                }
                () = sleep_until(wake) => {}
            }
            if Instant::now() >= deadline {
                return;
            }
            // A pod is left on the latest look at the Node; a look that cannot be had keeps the
            // one before, which the next look may correct.
            let read_by = (Instant::now() + NODE_RECHECK).min(deadline);
            match timeout_at(read_by, api.get_opt(node)).await {
                Ok(Ok(found)) => departures.set_contact(Contact::of(found.as_ref())),
                Ok(Err(e)) => {
                    tracing::debug!("cannot read Node {node} again during its drain: {}", reason(&e));
                }
                Err(_) => tracing::debug!("no answer when reading Node {node} again during its drain"),
            }
        }
    }

    /// One watch of the Node's pods from `version`, which it moves on as events arrive.
    async fn watch_departures(
        &self,
        api: &Api<K8sPod>,
        fields: &str,
        departures: &Departures,
        version: &mut String,
        deadline: Instant,
    ) -> WatchEnd {
        let remaining = deadline.saturating_duration_since(Instant::now()).as_secs();
        let window = u32::try_from(remaining).unwrap_or(WATCH_WINDOW).clamp(1, WATCH_WINDOW);
        let params = WatchParams::default().fields(fields).timeout(window);
        let started = Instant::now();
        let mut events = 0usize;
        let watched = timeout_at(deadline, async {
            let mut stream = match api.watch(&params, version).await {
                Ok(stream) => stream.boxed(),
                Err(e) => {
                    let class = classify(&e);
                    tracing::debug!("watch of the pods being evicted failed: {}", reason(&e));
                    departures.trouble(Some(reason(&e)));
                    return if class == Class::Transient { WatchEnd::Broken } else { WatchEnd::Refused };
                }
            };
            while let Some(event) = stream.next().await {
                events += 1;
                let pod = match event {
                    Ok(WatchEvent::Added(pod) | WatchEvent::Modified(pod)) => {
                        departures.seen(&pod);
                        pod
                    }
                    Ok(WatchEvent::Deleted(pod)) => {
                        departures.deleted(&pod);
                        pod
                    }
                    Ok(WatchEvent::Bookmark(b)) => {
                        *version = b.metadata.resource_version;
                        continue;
                    }
                    // 410 Gone: the version is too old to resume from.
                    Ok(WatchEvent::Error(e)) => {
                        tracing::debug!("watch of the pods being evicted ended: {e}");
                        return WatchEnd::Broken;
                    }
                    Err(e) => {
                        tracing::debug!("watch of the pods being evicted broke: {}", reason(&e));
                        departures.trouble(Some(reason(&e)));
                        return WatchEnd::Broken;
                    }
                };
                departures.trouble(None);
                if let Some(v) = pod.metadata.resource_version {
                    *version = v;
                }
                if departures.all_gone() {
                    return WatchEnd::Closed;
                }
            }
            if events == 0 && started.elapsed() < std::time::Duration::from_secs(1) {
                WatchEnd::Broken
            } else {
                WatchEnd::Closed
            }
        })
        .await;
        watched.unwrap_or(WatchEnd::Closed)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;

    fn pod(name: &str, uid: &str) -> K8sPod {
        K8sPod {
            metadata: ObjectMeta {
                namespace: Some("default".into()),
                name: Some(name.into()),
                uid: Some(uid.into()),
                ..ObjectMeta::default()
            },
            ..K8sPod::default()
        }
    }

    /// A clock for the tests: `secs` after an arbitrary moment.
    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn terminating(mut pod: K8sPod) -> K8sPod {
        pod.metadata.deletion_timestamp = Some(Time(at(0)));
        pod
    }

    fn gone(d: &Departures) -> Vec<String> {
        let mut names: Vec<String> = d.gone.borrow().iter().map(|(_, n)| n.clone()).collect();
        names.sort();
        names
    }

    fn names(keys: &[Key]) -> Vec<&str> {
        keys.iter().map(|(_, n)| n.as_str()).collect()
    }

    fn node(ready: Option<&str>) -> K8sNode {
        let conditions = ready.map(|status| {
            vec![NodeCondition {
                type_: "Ready".into(),
                status: status.into(),
                last_transition_time: Some(Time(at(-60))),
                ..NodeCondition::default()
            }]
        });
        K8sNode { status: Some(NodeStatus { conditions, ..NodeStatus::default() }), ..K8sNode::default() }
    }

    const LOST: Contact = Contact::Unreachable(None);

    #[test]
    fn a_pod_is_gone_when_deleted_replaced_or_missing_from_a_list() {
        let awaited = [pod("a", "1"), pod("b", "2"), pod("c", "3"), pod("d", "4")];
        let d = Departures::new(&awaited, "n", Contact::Kubelet, "https://k");
        // Terminating is not gone while the kubelet reports, however long it has been;
        // someone else's pod is no news.
        d.seen(&terminating(pod("a", "1")));
        d.deleted(&pod("other", "9"));
        assert!(d.leave_overdue(at(3600)).is_empty());
        assert!(gone(&d).is_empty());
        d.deleted(&pod("a", "1"));
        d.seen(&pod("b", "22"));
        d.listed(&[pod("b", "22"), pod("d", "4")]);
        assert_eq!(gone(&d), ["a", "b", "c"]);
        assert!(!d.all_gone());
        d.deleted(&pod("d", "4"));
        assert!(d.all_gone());
    }

    #[test]
    fn a_pod_waited_for_is_gone_once_it_completed_and_an_evicted_one_only_once_deleted() {
        let phase = |mut pod: K8sPod, phase: &str| {
            pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            });
            pod
        };
        let (evicted, job, batch) = (pod("evicted", "1"), pod("job", "2"), pod("batch", "3"));
        let d = Departures::new([&evicted, &job, &batch], "n", Contact::Kubelet, "https://k")
            .completing([&job, &batch]);
        d.seen(&phase(pod("job", "2"), "Running"));
        d.seen(&phase(pod("evicted", "1"), "Succeeded"));
        assert!(gone(&d).is_empty(), "running, or evicted and not deleted yet");
        d.seen(&phase(pod("job", "2"), "Succeeded"));
        d.seen(&phase(pod("batch", "3"), "Failed"));
        assert_eq!(gone(&d), ["batch", "job"]);
    }

    #[test]
    fn the_ready_condition_tells_whether_a_kubelet_can_confirm_a_pods_end() {
        assert_eq!(Contact::of(None), Contact::NoNode);
        assert_eq!(Contact::of(Some(&node(Some("Unknown")))), Contact::Unreachable(Some(at(-60))));
        // NotReady is the kubelet speaking: it still ends pods and says so.
        for kubelet in [Some("True"), Some("False"), None] {
            assert_eq!(Contact::of(Some(&node(kubelet))), Contact::Kubelet, "{kubelet:?}");
        }
    }

    #[test]
    fn a_pod_is_overdue_only_more_than_a_few_seconds_after_its_deletion_was_due() {
        let due = at(0);
        assert!(!overdue(due, at(-30)), "still in its grace period");
        assert!(!overdue(due, at(LEFT_TERMINATING_AFTER.as_secs())));
        assert!(overdue(due, at(LEFT_TERMINATING_AFTER.as_secs()) + SignedDuration::from_millis(1)));
    }

    #[test]
    fn on_an_unreachable_node_an_overdue_terminating_pod_is_left() {
        let d = Departures::new(&[pod("a", "1"), pod("b", "2")], "n", LOST, "https://k");
        d.listed(&[pod("a", "1"), pod("b", "2")]);
        assert!(d.leave_overdue(at(3600)).is_empty(), "not deleted: waited for");
        d.seen(&terminating(pod("a", "1")));
        assert!(d.leave_overdue(at(5)).is_empty(), "not overdue yet");
        assert_eq!(names(&d.leave_overdue(at(6))), ["a"]);
        assert_eq!(gone(&d), ["a"]);
        // Once left, it is not seen terminating again.
        d.seen(&terminating(pod("a", "1")));
        assert!(d.terminating.borrow().is_empty());
        assert!(!d.all_gone());
    }

    #[test]
    fn what_decides_is_the_node_as_last_read() {
        // Already terminating when the drain listed it, on a Node that still reported.
        let d = Departures::new(&[terminating(pod("a", "1"))], "n", Contact::Kubelet, "https://k");
        assert!(d.leave_overdue(at(60)).is_empty());
        d.set_contact(Contact::NoNode);
        assert_eq!(names(&d.leave_overdue(at(60))), ["a"]);

        let d = Departures::new(&[terminating(pod("a", "1"))], "n", LOST, "https://k");
        d.set_contact(Contact::Kubelet);
        assert!(d.leave_overdue(at(60)).is_empty(), "the kubelet came back");
    }

    #[test]
    fn the_next_wake_is_the_next_overdue_time_or_the_next_look_at_the_node() {
        let d = Departures::new(&[pod("a", "1")], "n", LOST, "https://k");
        assert_eq!(d.next_due(at(0)), None, "nothing terminating, nothing to decide");
        d.seen(&terminating(pod("a", "1")));
        let just_after = |secs| Some(Duration::from_secs(secs) + Duration::from_millis(1));
        assert_eq!(d.next_due(at(2)), just_after(3));
        assert_eq!(d.next_due(at(7)), just_after(0), "overdue already: at once");
        assert_eq!(d.next_due(at(-60)), Some(NODE_RECHECK), "the Node is read again meanwhile");
        d.set_contact(Contact::Kubelet);
        assert_eq!(d.next_due(at(7)), Some(NODE_RECHECK));
    }

    #[tokio::test]
    async fn a_wait_cut_by_the_deadline_says_what_is_known() {
        let d = Departures::new(&[pod("a", "1")], "n", Contact::Kubelet, "https://k");
        let now = Instant::now();
        assert_eq!(d.wait("default", "a", now).await.unwrap_err(), "evicted but still present");
        d.trouble(Some("connection refused".into()));
        let err = d.wait("default", "a", now).await.unwrap_err();
        assert_eq!(err, "evicted, but https://k did not say whether it is gone (connection refused)");
        d.deleted(&pod("a", "1"));
        d.wait("default", "a", now).await.unwrap();
    }
}
