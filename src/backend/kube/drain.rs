//! The drain, as `kubectl drain` does it: evict every pod that [`Pod::drain_action`] does not
//! leave alone through the policy/v1 Eviction subresource, retry PodDisruptionBudget refusals
//! until the drain timeout, and wait until each evicted pod is gone (or, on an unreachable Node,
//! left terminating past its due time: see [`super::gone`]). Pods whose owners asked for
//! `wait-completed` are not evicted but waited for until they complete or are gone. Past the
//! timeout, the pool's `timeoutAction` decides what becomes of the pods left
//! ([`super::escalate`]).

use std::time::Duration;

use std::collections::BTreeMap;

use futures::FutureExt;
use futures::future::BoxFuture;
use futures::future::join_all;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod as K8sPod;
use k8s_openapi::api::policy::v1::{Eviction, PodDisruptionBudget};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use tokio::time::{Instant, timeout_at};

use super::KubeCluster;
use super::convert::{DaemonSets, daemon_set_of, pdb_from, pod_from};
use super::errors::{Class, classify, reason};
use super::escalate::Leftover;
use super::gone::{Contact, Departures, Key};
use crate::backend::LockGuard;
use crate::backend::retry::Backoff;
use crate::backend::{BackendError, DrainEnd, DrainNews};
use crate::model::{DrainAction, Pod};
use crate::spec::{DrainRule, DrainSpec};

/// Why a pod of a drain is not known to be gone: the line that says so, and whether the pool's
/// lock stopped the drain (which no `timeoutAction` goes past).
pub(super) struct Failure {
    line: String,
    lock: bool,
}

impl Failure {
    fn lock(line: String) -> Self {
        Self { line, lock: true }
    }
}

impl From<String> for Failure {
    fn from(line: String) -> Self {
        Self { line, lock: false }
    }
}

/// The pods of a drain, sorted by what it does with them.
struct Sorted<'a> {
    /// Evicted, in the group of their order.
    evict: Vec<(&'a K8sPod, Pod, i64)>,
    /// Not evicted but waited for (`wait-completed`, and why), in the group of their order.
    completing: Vec<(&'a K8sPod, Pod, &'static str, i64)>,
}

impl<'a> Sorted<'a> {
    fn of(pods: &[&'a K8sPod], daemon_sets: &DaemonSets, rules: &[DrainRule]) -> Self {
        let mut sorted = Self { evict: Vec::new(), completing: Vec::new() };
        for (raw, pod) in pods.iter().filter_map(|p| pod_from(p, daemon_sets).map(|m| (*p, m))) {
            let decision = pod.drain_decision(rules);
            match decision.action {
                DrainAction::Skip(why) => {
                    tracing::debug!("pod {}/{}: not evicted, {why}", pod.namespace, pod.name);
                }
                DrainAction::WaitCompleted(why) => sorted.completing.push((raw, pod, why, decision.order)),
                DrainAction::Evict(warning) => {
                    if let Some(warning) = warning {
                        tracing::debug!("pod {}/{}: evicting; {warning}", pod.namespace, pod.name);
                    }
                    sorted.evict.push((raw, pod, decision.order));
                }
            }
        }
        sorted
    }

    /// The awaited pods by key, for what the timeout action does with those left.
    fn by_key(&self) -> BTreeMap<Key, (&'a K8sPod, &Pod)> {
        let evict = self.evict.iter().map(|(raw, pod, _)| (*raw, pod));
        let completing = self.completing.iter().map(|(raw, pod, ..)| (*raw, pod));
        evict
            .chain(completing)
            .map(|(raw, pod)| ((pod.namespace.clone(), pod.name.clone()), (raw, pod)))
            .collect()
    }
}

/// The pods of a drain not gone yet, for the progress line: how many, and the last refusal.
struct Left<'a> {
    node: &'a str,
    /// Where a refused eviction is told.
    news: DrainNews<'a>,
    pods: std::sync::atomic::AtomicUsize,
    /// Pods not evicted but waited for (`wait-completed`).
    completing: usize,
    /// The pods whose eviction a PodDisruptionBudget refused, to name their budgets if the
    /// timeout action goes past them.
    blocked: std::sync::Mutex<std::collections::BTreeSet<Key>>,
}

impl Left<'_> {
    fn blocked_by_budget(&self, namespace: &str, name: &str) {
        let mut blocked = crate::locked(&self.blocked);
        blocked.insert((namespace.to_owned(), name.to_owned()));
    }

    fn note(&self, refusal: Option<&str>) {
        let n = self.pods.load(std::sync::atomic::Ordering::SeqCst);
        let pods = crate::style::count(n, "pod");
        let completing = match self.completing {
            0 => String::new(),
            n => format!(", {n} to complete (wait-completed)"),
        };
        let why = refusal.map(|r| format!("; {r}")).unwrap_or_default();
        crate::backend::waiting::note(self.node, format!("{pods} left to evict{completing}{why}"));
    }
}

impl KubeCluster {
    /// [`crate::backend::Cluster::drain`].
    pub(super) async fn drain_node(
        &self,
        node: &str,
        timeout: Duration,
        drain: &DrainSpec,
        guard: &LockGuard,
        news: DrainNews<'_>,
    ) -> Result<DrainEnd, BackendError> {
        let (rules, grace) = (drain.rules.as_slice(), drain.pod_grace_period.map(|g| g.get().as_secs()));
        let deadline = Instant::now() + timeout;
        let pods_api: Api<K8sPod> = Api::all(self.client.clone());
        let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
        let nodes_api = self.nodes_api();
        // The Node's Ready condition says whether its kubelet can still confirm that a pod
        // ended (see [`Contact`]). Both answers are awaited, so that a server that answers
        // neither is reported for the list, whichever of the two gave up first.
        let (list, found) = tokio::join!(
            self.retrying("list pods", deadline, || pods_api.list(&params)),
            self.retrying("get node", deadline, || nodes_api.get_opt(node)),
        );
        let list = list?;
        let contact = Contact::of(found?.as_ref());
        let on_node: Vec<&K8sPod> = list.items.iter().collect();
        let daemon_sets = self.daemon_sets_of(&on_node, deadline).await?;
        let sorted = Sorted::of(&on_node, &daemon_sets, rules);
        let (targets, completing) = (&sorted.evict, &sorted.completing);
        // What the progress line shows; the count is the user's, not a log's, so it is not logged
        // at the default level.
        tracing::debug!(node, pods = targets.len(), completing = completing.len(), "draining");
        let left = Left {
            node,
            news,
            pods: std::sync::atomic::AtomicUsize::new(targets.len()),
            completing: completing.len(),
            blocked: std::sync::Mutex::default(),
        };
        left.note(None);
        let awaited = targets.iter().map(|(raw, ..)| *raw).chain(completing.iter().map(|(raw, ..)| *raw));
        let departures = Departures::new(awaited, node, contact, &self.server)
            .completing(completing.iter().map(|(raw, ..)| *raw));
        // Groups by `order`, lowest first: a group starts once every pod of the one before is gone
        // (as Cluster API's drain does), so an ingress or a log shipper can go last.
        let mut groups: BTreeMap<i64, Vec<BoxFuture<'_, Result<(), Failure>>>> = BTreeMap::new();
        for (raw, pod, order) in targets {
            let eviction =
                self.evict_and_wait(raw, pod, (grace, deadline), &departures, &left, guard).boxed();
            groups.entry(*order).or_default().push(eviction);
        }
        for (_, pod, why, order) in completing {
            let departures = &departures;
            let wait = async move {
                departures
                    .wait(&pod.namespace, &pod.name, deadline)
                    .await
                    .map_err(|e| Failure::from(format!("pod {}/{} ({why}): {e}", pod.namespace, pod.name)))
            };
            groups.entry(*order).or_default().push(wait.boxed());
        }
        let several = groups.len() > 1;
        let escalates = !drain.timeout_action.is_halt();
        let evictions = async move {
            let mut failures = Vec::new();
            for (order, group) in groups {
                if several {
                    tracing::debug!(node, order, pods = group.len(), "draining a group");
                }
                failures.extend(join_all(group).await.into_iter().filter_map(Result::err));
                if !failures.is_empty() {
                    break;
                }
            }
            // A timeout action acts at the timeout, whatever stopped the drain before it (a
            // refusal for good, say): the pods may still go by themselves until then.
            if escalates && !failures.is_empty() && !failures.iter().any(|f: &Failure| f.lock) {
                tokio::time::sleep_until(deadline).await;
            }
            failures
        };
        // The watch from the list above sees every eviction's outcome, whichever comes first.
        let version = list.metadata.resource_version.clone().unwrap_or_default();
        let follow = async {
            if !targets.is_empty() || !completing.is_empty() {
                tokio::join!(
                    self.follow_departures(node, &departures, version, deadline),
                    self.follow_contact(node, &departures, deadline),
                );
            }
            std::future::pending::<std::convert::Infallible>().await
        };
        let failures = tokio::select! {
            failures = evictions => failures,
            never = follow => match never {},
        };
        if failures.is_empty() {
            return Ok(DrainEnd::Complete);
        }
        if escalates && !failures.iter().any(|f| f.lock) {
            let blocked = crate::locked(&left.blocked).clone();
            let leftover = Leftover { node, news, timeout, pods: sorted.by_key(), blocked };
            return self.escalate(&leftover, drain, &departures, guard).await;
        }
        let detail = failures.iter().map(|f| f.line.as_str()).collect::<Vec<_>>().join("; ");
        if Instant::now() >= deadline {
            Err(BackendError::Timeout {
                what: format!("drain of {node} (no PodDisruptionBudget was bypassed): {detail}"),
                after: timeout,
            })
        } else {
            Err(BackendError::Failed(format!("drain of {node}: {detail}")))
        }
    }

    /// The `DaemonSet` objects that control any of `pods` and still exist, asked one by one as
    /// kubectl does (a node runs few of them); no request when no pod has a `DaemonSet` controller.
    pub(super) async fn daemon_sets_of(
        &self,
        pods: &[&K8sPod],
        deadline: Instant,
    ) -> Result<DaemonSets, BackendError> {
        let wanted: DaemonSets = pods.iter().filter_map(|p| daemon_set_of(p)).collect();
        let lookups = wanted.into_iter().map(|(ns, name)| async move {
            let api: Api<DaemonSet> = Api::namespaced(self.client.clone(), &ns);
            let found =
                self.retrying(&format!("get DaemonSet {ns}/{name}"), deadline, || api.get_opt(&name)).await?;
            Ok(found.map(|_| (ns, name)))
        });
        join_all(lookups).await.into_iter().filter_map(Result::transpose).collect()
    }

    /// Evict one pod through the policy/v1 Eviction subresource, retrying PDB refusals (429)
    /// until `deadline`, then wait until `departures` sees it gone. Errors are returned as a line
    /// naming the pod and, for refusals, the budget's own message.
    async fn evict_and_wait(
        &self,
        pod: &K8sPod,
        seen: &Pod,
        // The pod's grace period, if the pool sets one, and when the drain gives up.
        (grace, deadline): (Option<u64>, Instant),
        departures: &Departures,
        left: &Left<'_>,
        guard: &LockGuard,
    ) -> Result<(), Failure> {
        let ns = super::convert::namespace_of(pod);
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone();
        let id = format!("pod {ns}/{name}");
        let api: Api<K8sPod> = Api::namespaced(self.client.clone(), &ns);
        // kube's `Api::evict` sends its options in a shape the server ignores, so post a
        // complete policy/v1 Eviction, with a UID precondition so a replacement pod of the
        // same name is never evicted by mistake.
        let eviction = Eviction {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(ns.clone()),
                ..ObjectMeta::default()
            },
            delete_options: uid.as_ref().map(|uid| {
                k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions {
                    preconditions: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    }),
                    grace_period_seconds: grace.and_then(|g| i64::try_from(g).ok()),
                    ..Default::default()
                }
            }),
        };
        let body = json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": eviction.metadata,
            "deleteOptions": eviction.delete_options,
        });
        let mut backoff = Backoff::capped(Duration::from_secs(2));
        let mut last_refusal = None;
        loop {
            if Instant::now() >= deadline {
                return Err(Failure::from(last_refusal.map_or_else(
                    || format!("{id}: not evicted in time"),
                    |m| format!("{id} not evicted: {m}"),
                )));
            }
            // Every try, since a PDB refusal may be retried for long: no eviction without the lock.
            guard.check(&self.pool).map_err(|e| Failure::lock(format!("{id}: not evicted: {e}")))?;
            let params = PostParams::default();
            let post = api.create_subresource("eviction", &name, &params, &body);
            let Ok(answer): Result<Result<serde_json::Value, kube::Error>, _> =
                timeout_at(deadline, post).await
            else {
                let last = last_refusal.map_or_else(String::new, |m| format!(" (before that: {m})"));
                return Err(format!("{id}: no answer from {} to the eviction{last}", self.server).into());
            };
            match answer {
                // A 2xx can still carry a Failure status (a pod under several budgets, on
                // some API server versions): that is not an eviction.
                Ok(v) if v.get("status").and_then(|s| s.as_str()) == Some("Failure") => {
                    crate::backend::waiting::evicted(left.node, "failed");
                    let message = v.get("message").and_then(|m| m.as_str()).unwrap_or("no message");
                    return Err(format!("{id}: {}", self.refused(seen, message, deadline).await).into());
                }
                Ok(_) => {
                    crate::backend::waiting::evicted(left.node, "evicted");
                    break;
                }
                // 404: gone already. 409: the UID precondition failed, so the pod of that name
                // is a replacement and the one we meant to evict is gone.
                Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => return Ok(()),
                Err(kube::Error::Api(status)) if status.code == 429 => {
                    crate::backend::waiting::evicted(left.node, "refused");
                    let message = refusal_message(&status);
                    tracing::warn!("{id}: eviction refused, will retry: {message}");
                    left.blocked_by_budget(&ns, &name);
                    left.note(Some(&format!("{id} refused: {message}")));
                    (left.news)("DrainBlocked", format!("eviction of {id} refused: {message}"));
                    last_refusal = Some(message);
                    backoff.wait_until(deadline).await;
                }
                // A 4xx refuses this eviction for good; so does the one 500 that the eviction
                // subresource answers for a pod under more than one budget. Any other 500 is
                // the server's trouble, retried below.
                Err(kube::Error::Api(status))
                    if (400..500).contains(&status.code)
                        || (status.code == 500
                            && status.message.contains("more than one PodDisruptionBudget")) =>
                {
                    crate::backend::waiting::evicted(left.node, "failed");
                    return Err(
                        format!("{id}: {}", self.refused(seen, &status.message, deadline).await).into()
                    );
                }
                Err(e) if classify(&e) == Class::Transient => {
                    let why = reason(&e);
                    tracing::warn!("{id}: eviction request failed, will retry: {why}");
                    last_refusal = Some(why);
                    backoff.wait_until(deadline).await;
                }
                Err(e) => {
                    crate::backend::waiting::evicted(left.node, "failed");
                    return Err(format!("{id}: eviction failed: {}", reason(&e)).into());
                }
            }
        }
        tracing::debug!("{id}: evicted");
        departures.wait(&ns, &name, deadline).await.map_err(|why| format!("{id}: {why}").into())
    }

    /// Why the API server refused an eviction for good. Its message for a pod under several
    /// budgets names none of them, so they are looked up (with the selector rule the preview
    /// uses) and named, with what to do.
    async fn refused(&self, pod: &Pod, message: &str, deadline: Instant) -> String {
        let covering = self.covering(pod, deadline).await;
        if covering.len() > 1 {
            format!(
                "not evicted: {} PodDisruptionBudgets cover it ({}), and the API server evicts no pod \
                 under more than one; narrow or delete all but one (the server said: {message})",
                covering.len(),
                covering.join(", ")
            )
        } else {
            format!("eviction failed: {message}")
        }
    }

    /// The PodDisruptionBudgets (`namespace/name`) that cover `pod` now, by the selector rule
    /// the preview uses; none when they cannot be read by `deadline` (said in a warning).
    pub(super) async fn covering(&self, pod: &Pod, deadline: Instant) -> Vec<String> {
        let api: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), &pod.namespace);
        let params = ListParams::default();
        match self.retrying("list PodDisruptionBudgets", deadline, || api.list(&params)).await {
            Ok(list) => list.items.iter().map(pdb_from).filter(|b| b.covers(pod)).map(|b| b.id()).collect(),
            Err(e) => {
                tracing::warn!("cannot tell which PodDisruptionBudgets cover {}: {e}", pod.name);
                Vec::new()
            }
        }
    }
}

/// The PodDisruptionBudget's words from a 429, e.g. "The disruption budget web needs 2
/// healthy pods and has 2 currently".
fn refusal_message(status: &kube::core::Status) -> String {
    let causes: Vec<&str> = status
        .details
        .iter()
        .flat_map(|d| d.causes.iter())
        .filter(|c| c.reason == "DisruptionBudget")
        .map(|c| c.message.as_str())
        .collect();
    if causes.is_empty() {
        status.message.clone()
    } else {
        format!("{} ({})", status.message, causes.join("; "))
    }
}
