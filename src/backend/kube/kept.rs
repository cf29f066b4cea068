//! Connections that last as long as a `watch`: each pool's cluster client is built once and
//! kept, with its watch-backed lists, for as long as the kubeconfig says the same thing.
//!
//! Every reconcile still reads the kubeconfig (a local file; in a Pod, its service account) and
//! the cluster's identity (one GET of the `kube-system` Namespace), so that a `kubectl config
//! use-context` or a cluster rebuilt behind the same URL is noticed exactly as by a one-shot
//! `apply`; only the client, its connections and its lists are reused.

use std::collections::HashMap;
use std::sync::Mutex;

use super::{KubeCluster, incluster, kubeconfig};
use crate::backend::{BackendError, Connect};
use crate::model::ClusterRef;
use crate::spec::IN_CLUSTER;

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

/// What a client would be built from, if none is kept that fits.
enum Fresh {
    Kubeconfig(Box<kube::config::Kubeconfig>),
    InCluster(Box<kube::Config>),
}

impl KeptConnect {
    /// Drop every kept client: the next reconcile connects afresh (after a failure, say).
    pub fn forget(&self) {
        crate::locked(&self.kept).clear();
    }
}

impl Connect for KeptConnect {
    type Cluster = KubeCluster;

    async fn connect(&self, cluster: &ClusterRef, pool: &str) -> Result<KubeCluster, BackendError> {
        // What the client is built from, and what tells whether a kept client still fits it:
        // the kubeconfig as loaded, or the Pod's API server (its token and CA files are re-read
        // by the client itself as the kubelet rotates them).
        let around = incluster::Surroundings::of_process();
        let (fresh, kubeconfig, context) = if incluster::chosen(cluster, around) {
            let config = incluster::config(around)?;
            let fingerprint = format!("{IN_CLUSTER} {}", config.cluster_url);
            (Fresh::InCluster(Box::new(config)), fingerprint, IN_CLUSTER.to_owned())
        } else {
            let mut kc = kubeconfig::load(cluster.kubeconfig.as_deref())?;
            let context = cluster.context.clone().or_else(|| kc.current_context.clone()).unwrap_or_default();
            kubeconfig::resolve_credentials(&mut kc, &context)?;
            let fingerprint = serde_json::to_string(&kc).unwrap_or_default();
            (Fresh::Kubeconfig(Box::new(kc)), fingerprint, context)
        };
        let key = (cluster.clone(), pool.to_owned());
        let kept = {
            let kept = crate::locked(&self.kept);
            kept.get(&key)
                .filter(|k| k.kubeconfig == kubeconfig && k.context == context)
                .map(|k| k.cluster.clone())
        };
        let client = match kept {
            Some(client) => client,
            None => match fresh {
                Fresh::Kubeconfig(kc) => {
                    KubeCluster::from_kubeconfig(*kc, cluster.context.as_deref(), pool).await?
                }
                Fresh::InCluster(config) => KubeCluster::from_config(*config, pool)?,
            }
            .with_cache()?,
        };
        let connected = client.identified(&context).await?;
        let kept = Kept { kubeconfig, context, cluster: connected.clone() };
        crate::locked(&self.kept).insert(key, kept);
        Ok(connected)
    }
}
