//! What a drain does with the pods still on its Node once `drainTimeout` has passed, as the
//! pool's `spec.drain.timeoutAction` says. `Proceed` leaves them, as Cluster API's
//! `nodeDrainTimeout` does; `Force` deletes them, as Karpenter's `terminationGracePeriod` does:
//! a DELETE, which no PodDisruptionBudget refuses, not an eviction, and then waits until they
//! are gone. Either way a Warning Event on the Node names each pod, and the budget that held it
//! where one did. Both are the pool owner's explicit choice, which the plan shows beforehand.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod as K8sPod;
use kube::api::{Api, DeleteParams, Preconditions};
use tokio::time::{Instant, timeout_at};

use super::errors::{Class, classify, reason};
use super::gone::{Departures, Key};
use super::{API_RETRY_WINDOW, KubeCluster};
use crate::backend::retry::Backoff;
use crate::backend::{BackendError, DrainEnd, DrainNews, LockGuard};
use crate::model::Pod;
use crate::spec::{DrainSpec, DrainTimeoutAction};
use crate::style::count;

/// How long the budgets of the pods left may take to be read, for the Event that names them.
const BUDGETS_READ: Duration = Duration::from_secs(5);

/// A pod's grace period when neither it nor the pool sets one: Kubernetes' default.
const DEFAULT_GRACE: u64 = 30;

/// A drain that reached its timeout with pods left.
pub(super) struct Leftover<'a> {
    pub(super) node: &'a str,
    /// Where what the timeout action did is told.
    pub(super) news: DrainNews<'a>,
    /// `drainTimeout`.
    pub(super) timeout: Duration,
    /// Every pod the drain evicts or waits for, by key.
    pub(super) pods: BTreeMap<Key, (&'a K8sPod, &'a Pod)>,
    /// The pods whose eviction a PodDisruptionBudget refused.
    pub(super) blocked: BTreeSet<Key>,
}

impl KubeCluster {
    /// Carry out `drain.timeout_action` on the pods `departures` does not know gone.
    pub(super) async fn escalate(
        &self,
        leftover: &Leftover<'_>,
        drain: &DrainSpec,
        departures: &Departures,
        guard: &LockGuard,
    ) -> Result<DrainEnd, BackendError> {
        let left: Vec<Key> =
            departures.left().into_iter().filter(|k| leftover.pods.contains_key(k)).collect();
        // They went by themselves at the last moment.
        if left.is_empty() {
            return Ok(DrainEnd::Complete);
        }
        let (node, after) = (leftover.node, crate::spec::Duration::from(leftover.timeout));
        let named = self.named(leftover, &left).await;
        match drain.timeout_action {
            DrainTimeoutAction::Proceed => {
                let said = format!(
                    "drainTimeout ({after}) passed with {} left; they stay on the Node and its container is \
                     stopped (timeoutAction: Proceed): {named}",
                    count(left.len(), "pod")
                );
                tracing::debug!(node, "{said}");
                (leftover.news)("DrainAbandoned", said);
                Ok(DrainEnd::Abandoned(left.iter().map(|(ns, name)| format!("{ns}/{name}")).collect()))
            }
            DrainTimeoutAction::Force => self.force(leftover, &left, &named, drain, departures, guard).await,
            // Not asked to go on: the caller fails the drain instead, as without an action.
            DrainTimeoutAction::Halt => Err(BackendError::Timeout {
                what: format!("drain of {node} (no PodDisruptionBudget was bypassed): {named} left"),
                after: leftover.timeout,
            }),
        }
    }

    /// `Force`: delete the pods left, whatever their budgets, and wait until they are gone: for
    /// their grace period and `drainTimeout` once more.
    async fn force(
        &self,
        leftover: &Leftover<'_>,
        left: &[Key],
        named: &str,
        drain: &DrainSpec,
        departures: &Departures,
        guard: &LockGuard,
    ) -> Result<DrainEnd, BackendError> {
        let (node, after) = (leftover.node, crate::spec::Duration::from(leftover.timeout));
        let pods: Vec<&K8sPod> =
            left.iter().filter_map(|k| leftover.pods.get(k)).map(|(raw, _)| *raw).collect();
        crate::backend::waiting::note(
            node,
            format!("drainTimeout passed: deleting {} (timeoutAction: Force)", count(pods.len(), "pod")),
        );
        let grace = drain.pod_grace_period.map(|g| g.get().as_secs());
        let deleted = join_all(pods.iter().map(|pod| self.delete_pod(pod, grace, guard))).await;
        let failures: Vec<&str> =
            deleted.iter().filter_map(|r| r.as_ref().err()).map(String::as_str).collect();
        if deleted.iter().any(Result::is_ok) {
            let said = format!(
                "drainTimeout ({after}) passed with {} left; deleting {} whatever their PodDisruptionBudgets, \
                 then stopping its container (timeoutAction: Force): {named}",
                count(left.len(), "pod"),
                if left.len() == 1 { "it" } else { "them" }
            );
            (leftover.news)("DrainForced", said);
        }
        if !failures.is_empty() {
            return Err(BackendError::Failed(format!(
                "drain of {node}, past drainTimeout ({after}) with timeoutAction Force: {}",
                failures.join("; ")
            )));
        }
        let longest = grace.unwrap_or_else(|| {
            let own = |p: &&K8sPod| p.spec.as_ref().and_then(|s| s.termination_grace_period_seconds);
            pods.iter().filter_map(own).filter_map(|g| u64::try_from(g).ok()).max().unwrap_or(DEFAULT_GRACE)
        });
        let patience = Duration::from_secs(longest) + leftover.timeout;
        let deadline = Instant::now() + patience;
        let waits = join_all(left.iter().map(|(ns, name)| async move {
            departures
                .wait(ns, name, deadline)
                .await
                .map_err(|why| format!("pod {ns}/{name}: deleted, {why}"))
        }));
        // The drain's own watch ended at its timeout: a new one, from a new list.
        let follow = async {
            tokio::join!(
                self.follow_departures(node, departures, String::new(), deadline),
                self.follow_contact(node, departures, deadline),
            );
            std::future::pending::<std::convert::Infallible>().await
        };
        let waited = tokio::select! {
            waited = waits => waited,
            never = follow => match never {},
        };
        let still: Vec<String> = waited.into_iter().filter_map(Result::err).collect();
        if !still.is_empty() {
            return Err(BackendError::Timeout {
                what: format!(
                    "drain of {node}: pods deleted past drainTimeout (timeoutAction: Force) not gone: {}",
                    still.join("; ")
                ),
                after: patience,
            });
        }
        Ok(DrainEnd::Forced(left.iter().map(|(ns, name)| format!("{ns}/{name}")).collect()))
    }

    /// Delete one pod (not evict it), with `grace` if the pool sets one and a UID precondition,
    /// so that a replacement of the same name is never deleted by mistake; only while `guard`
    /// says the pool's lock is known to be held. A pod gone already is no failure.
    async fn delete_pod(&self, pod: &K8sPod, grace: Option<u64>, guard: &LockGuard) -> Result<(), String> {
        let ns = super::convert::namespace_of(pod);
        let name = pod.metadata.name.clone().unwrap_or_default();
        let api: Api<K8sPod> = Api::namespaced(self.client.clone(), &ns);
        let params = DeleteParams {
            grace_period_seconds: grace.and_then(|g| u32::try_from(g).ok()),
            preconditions: pod
                .metadata
                .uid
                .clone()
                .map(|uid| Preconditions { uid: Some(uid), resource_version: None }),
            ..DeleteParams::default()
        };
        let deadline = Instant::now() + API_RETRY_WINDOW;
        let mut backoff = Backoff::api();
        loop {
            guard.check(&self.pool).map_err(|e| format!("pod {ns}/{name}: not deleted: {e}"))?;
            match timeout_at(deadline, api.delete(&name, &params)).await {
                Ok(Ok(_)) => return Ok(()),
                // 404: gone already; 409: the UID precondition failed, so the pod of that name
                // is a replacement and the one left is gone.
                Ok(Err(kube::Error::Api(s))) if s.code == 404 || s.code == 409 => return Ok(()),
                Ok(Err(e)) if classify(&e) == Class::Transient && Instant::now() < deadline => {
                    tracing::warn!("pod {ns}/{name}: delete failed, will retry: {}", reason(&e));
                    backoff.wait_until(deadline).await;
                }
                Ok(Err(e)) => return Err(format!("pod {ns}/{name}: not deleted: {}", reason(&e))),
                Err(_) => {
                    return Err(format!("pod {ns}/{name}: no answer from {} to the delete", self.server));
                }
            }
        }
    }

    /// The pods `left`, each with the budgets that cover it where one refused its eviction:
    /// `default/web-1 (PodDisruptionBudget default/web)`.
    async fn named(&self, leftover: &Leftover<'_>, left: &[Key]) -> String {
        let deadline = Instant::now() + BUDGETS_READ;
        let mut named = Vec::new();
        for key in left {
            let (ns, name) = key;
            let budgets = match leftover.pods.get(key) {
                Some((_, pod)) if leftover.blocked.contains(key) => self.covering(pod, deadline).await,
                _ => Vec::new(),
            };
            named.push(match budgets.as_slice() {
                [] => format!("{ns}/{name}"),
                [one] => format!("{ns}/{name} (PodDisruptionBudget {one})"),
                more => format!("{ns}/{name} (PodDisruptionBudgets {})", more.join(", ")),
            });
        }
        named.join(", ")
    }
}
