//! How a drain learns that its evicted pods are gone: one watch of the Node's pods, started from
//! the drain's own list, rather than asking after each pod with a backoff (which saw a pod gone
//! up to a backoff step late: 100 ms, then 200, 400...).
//!
//! The watch is resumed from the last resourceVersion seen when the server ends it; when it
//! fails, or the server says that version is too old, the Node's pods are listed again and
//! watched from that list. A server that refuses the watch for good is asked with lists only,
//! with a backoff, as before. Whatever happens, every wait ends at the drain's deadline.

use std::collections::BTreeMap;
use std::sync::Mutex;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod as K8sPod;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use tokio::sync::watch;
use tokio::time::{Instant, timeout_at};

use super::errors::{Class, classify, reason};
use super::{KubeCluster, WATCH_WINDOW};
use crate::backend::retry::Backoff;

/// A pod by namespace and name.
type Key = (String, String);

/// The evicted pods of one Node that a drain waits for, and which of them are gone.
pub(super) struct Departures {
    /// Each awaited pod's UID; `None` if the server gave it none (a replacement of the same name
    /// is then indistinguishable, and only its deletion counts).
    awaited: BTreeMap<Key, Option<String>>,
    /// Whether the Node's kubelet runs: if not, an evicted pod stays Terminating until the Node
    /// object goes (nobody is left to confirm that its containers ended), so, like `kubectl
    /// drain --skip-wait-for-delete-timeout`, it counts as gone once its deletion is accepted.
    kubelet_alive: bool,
    /// The awaited pods known to be gone.
    gone: watch::Sender<Vec<Key>>,
    /// Why the server could not be asked lately, for the message of a wait that timed out.
    trouble: Mutex<Option<String>>,
    /// The API server URL, for that message.
    server: String,
}

impl Departures {
    pub(super) fn new<'a>(
        pods: impl IntoIterator<Item = &'a K8sPod>,
        kubelet_alive: bool,
        server: &str,
    ) -> Self {
        let awaited = pods.into_iter().map(|p| (key_of(p), p.metadata.uid.clone())).collect();
        let gone = watch::Sender::new(Vec::new());
        Self { awaited, kubelet_alive, gone, trouble: Mutex::default(), server: server.to_owned() }
    }

    /// Wait until the pod is gone, or `deadline`. `Err` says why it is not known to be gone.
    pub(super) async fn wait(&self, namespace: &str, name: &str, deadline: Instant) -> Result<(), String> {
        let key = (namespace.to_owned(), name.to_owned());
        let mut gone = self.gone.subscribe();
        if timeout_at(deadline, gone.wait_for(|g| g.contains(&key))).await.is_ok() {
            return Ok(());
        }
        match self.trouble.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone() {
            Some(why) => Err(format!("evicted, but {} did not say whether it is gone ({why})", self.server)),
            None => Err("evicted but still present".to_owned()),
        }
    }

    fn all_gone(&self) -> bool {
        self.gone.borrow().len() == self.awaited.len()
    }

    fn mark(&self, key: Key) {
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
        let replaced = uid.is_some() && pod.metadata.uid != *uid;
        let terminating = !self.kubelet_alive && pod.metadata.deletion_timestamp.is_some();
        if replaced || terminating {
            self.mark(key);
        }
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
        *self.trouble.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = why;
    }
}

fn key_of(pod: &K8sPod) -> Key {
    (
        pod.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
        pod.metadata.name.clone().unwrap_or_default(),
    )
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

    fn terminating(mut pod: K8sPod) -> K8sPod {
        pod.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        pod
    }

    fn gone(d: &Departures) -> Vec<String> {
        let mut names: Vec<String> = d.gone.borrow().iter().map(|(_, n)| n.clone()).collect();
        names.sort();
        names
    }

    #[test]
    fn a_pod_is_gone_when_deleted_replaced_or_missing_from_a_list() {
        let awaited = [pod("a", "1"), pod("b", "2"), pod("c", "3"), pod("d", "4")];
        let d = Departures::new(&awaited, true, "https://k");
        // Terminating is not gone while the kubelet runs; someone else's pod is no news.
        d.seen(&terminating(pod("a", "1")));
        d.deleted(&pod("other", "9"));
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
    fn without_a_kubelet_a_terminating_pod_counts_as_gone() {
        let d = Departures::new(&[pod("a", "1")], false, "https://k");
        d.listed(&[pod("a", "1")]);
        assert!(gone(&d).is_empty());
        d.seen(&terminating(pod("a", "1")));
        assert_eq!(gone(&d), ["a"]);
    }

    #[tokio::test]
    async fn a_wait_cut_by_the_deadline_says_what_is_known() {
        let d = Departures::new(&[pod("a", "1")], true, "https://k");
        let now = Instant::now();
        assert_eq!(d.wait("default", "a", now).await.unwrap_err(), "evicted but still present");
        d.trouble(Some("connection refused".into()));
        let err = d.wait("default", "a", now).await.unwrap_err();
        assert_eq!(err, "evicted, but https://k did not say whether it is gone (connection refused)");
        d.deleted(&pod("a", "1"));
        d.wait("default", "a", now).await.unwrap();
    }
}
