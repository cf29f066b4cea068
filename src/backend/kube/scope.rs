//! Observing one pool in its cluster, at the cost of the pool and not of the cluster: its
//! Nodes by the pool label (plus a lookup by name for each of its containers whose Node has
//! not been labelled yet), the pods of those Nodes by `spec.nodeName`, and the
//! PodDisruptionBudgets of those pods' namespaces only (a budget selects pods of its own
//! namespace). A plan of a 10-Node pool sends the same requests, and reads the same bytes, in a
//! cluster of 10 pods as in one of 100,000.
//!
//! A Node that never got the pool label (an apply killed between the kubelet registering it and
//! poolctl labelling it) is found once its container is gone too by the record of joining
//! instances in the pool's Lease (see [`super::lease`]): one more get, whatever the cluster's size.

use std::collections::{BTreeSet, HashSet};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Node as K8sNode, Pod as K8sPod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;
use tokio::time::Instant;

use super::convert::{node_from, pdb_from, pod_from};
use super::{API_RETRY_WINDOW, KubeCluster};
use crate::backend::BackendError;
use crate::model::{Node, Pdb, Pod, labels};

/// Requests of one observation in flight at once: enough to hide the round trips of a pool of
/// a few dozen Nodes, few enough not to flood an API server for a pool of thousands.
const CONCURRENT_REQUESTS: usize = 8;

impl KubeCluster {
    /// The pool's Nodes: the ones with its label, and the Nodes of `names` (its containers) and
    /// of its joining instances that lack it.
    pub(super) async fn pool_nodes(&self, names: &[String]) -> Result<Vec<Node>, BackendError> {
        let deadline = Instant::now() + API_RETRY_WINDOW;
        let api = self.nodes_api();
        let selector = format!("{}={}", labels::POOL, self.pool);
        let what = "list the pool's nodes";
        // A Node that registered before poolctl could label it, whose container is gone since
        // (an apply killed in the Ready wait, the container then removed by hand), is named only
        // by the pool's record of joining instances.
        let (listed, joining) = futures::try_join!(
            self.list_scoped(|c| &c.nodes, "", |c, _| Api::all(c), (&selector, ""), what, deadline),
            self.joining_names_and_marks(),
        )?;
        let mut nodes: Vec<Node> = listed.iter().map(node_from).collect();
        let labelled: HashSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        let mut unlabelled: Vec<String> =
            names.iter().chain(&joining).filter(|n| !labelled.contains(n.as_str())).cloned().collect();
        unlabelled.sort();
        unlabelled.dedup();
        let api = &api;
        let found: Vec<Option<K8sNode>> =
            stream::iter(unlabelled)
                .map(|name: String| async move {
                    self.retrying("get node", deadline, || api.get_opt(&name)).await
                })
                .buffered(CONCURRENT_REQUESTS)
                .try_collect()
                .await?;
        nodes.extend(found.iter().flatten().map(node_from));
        Ok(nodes)
    }

    /// The pods bound to `nodes`, one request per Node, and the PodDisruptionBudgets of their
    /// namespaces, one request per namespace.
    pub(super) async fn pods_of(&self, nodes: &[String]) -> Result<(Vec<Pod>, Vec<Pdb>), BackendError> {
        let deadline = Instant::now() + API_RETRY_WINDOW;
        self.forget_scopes(|c| &c.pods, &|node| nodes.iter().any(|n| n == node));
        let lists: Vec<Vec<K8sPod>> = stream::iter(nodes.to_vec())
            .map(|node: String| async move {
                let fields = format!("spec.nodeName={node}");
                self.list_scoped(
                    |c| &c.pods,
                    &node,
                    |c, _| Api::<K8sPod>::all(c),
                    ("", &fields),
                    "list pods",
                    deadline,
                )
                .await
            })
            .buffered(CONCURRENT_REQUESTS)
            .try_collect()
            .await?;
        let listed: Vec<&K8sPod> = lists.iter().flatten().collect();
        // A pod whose DaemonSet is gone is evicted, as kubectl drain --force does: the preview
        // needs to know which.
        let daemon_sets = self.daemon_sets_of(&listed, deadline).await?;
        let pods: Vec<Pod> = listed.iter().filter_map(|p| pod_from(p, &daemon_sets)).collect();
        let namespaces: BTreeSet<String> = pods.iter().map(|p| p.namespace.clone()).collect();
        self.forget_scopes(|c| &c.pdbs, &|ns| namespaces.contains(ns));
        let budgets: Vec<Vec<Pdb>> = stream::iter(namespaces.clone())
            .map(|ns: String| async move {
                let what = "list PodDisruptionBudgets";
                let api = |c, ns: &str| Api::<PodDisruptionBudget>::namespaced(c, ns);
                let listed = self.list_scoped(|c| &c.pdbs, &ns, api, ("", ""), what, deadline).await?;
                Ok::<_, BackendError>(listed.iter().map(pdb_from).collect())
            })
            .buffered(CONCURRENT_REQUESTS)
            .try_collect()
            .await?;
        Ok((pods, budgets.into_iter().flatten().collect()))
    }
}
