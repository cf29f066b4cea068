//! Connections that last as long as a `watch`: each pool's cluster client is built once and
//! kept, with its watch-backed lists, for as long as the kubeconfig says the same thing.
//!
//! Every reconcile still reads the kubeconfig (a local file) and the cluster's identity (one GET
//! of the `kube-system` Namespace), so that a `kubectl config use-context` or a cluster rebuilt
//! behind the same URL is noticed exactly as by a one-shot `apply`; only the client, its
//! connections and its lists are reused.

use std::collections::HashMap;
use std::sync::Mutex;

use super::{KubeCluster, kubeconfig};
use crate::backend::{BackendError, Connect};
use crate::model::ClusterRef;

/// A [`Connect`] that keeps what it connected, for `watch`.
#[derive(Default)]
pub struct KeptConnect {
    kept: Mutex<HashMap<(ClusterRef, String), Kept>>,
}

struct Kept {
    /// The kubeconfig the client was built from, as loaded (every file of `$KUBECONFIG`).
    kubeconfig: String,
    context: String,
    cluster: KubeCluster,
}

impl KeptConnect {
    /// Drop every kept client: the next reconcile connects afresh (after a failure, say).
    pub fn forget(&self) {
        self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
    }
}

impl Connect for KeptConnect {
    type Cluster = KubeCluster;

    async fn connect(&self, cluster: &ClusterRef, pool: &str) -> Result<KubeCluster, BackendError> {
        let mut kc = kubeconfig::load(cluster.kubeconfig.as_deref())?;
        let context = cluster.context.clone().or_else(|| kc.current_context.clone()).unwrap_or_default();
        kubeconfig::resolve_credentials(&mut kc, &context)?;
        let kubeconfig = serde_json::to_string(&kc).unwrap_or_default();
        let key = (cluster.clone(), pool.to_owned());
        let kept = {
            let kept = self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            kept.get(&key)
                .filter(|k| k.kubeconfig == kubeconfig && k.context == context)
                .map(|k| k.cluster.clone())
        };
        let client = match kept {
            Some(client) => client,
            None => KubeCluster::from_kubeconfig(kc, cluster.context.as_deref(), pool).await?.with_cache(),
        };
        let connected = client.identified(&context).await?;
        let kept = Kept { kubeconfig, context, cluster: connected.clone() };
        self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(key, kept);
        Ok(connected)
    }
}
