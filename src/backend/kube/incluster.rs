//! The credentials of the Pod poolctl runs in: a pool whose `node:` section names no kubeconfig
//! (or names `in-cluster`) reaches its cluster with the Pod's service account, as a controller
//! built on client-go or controller-runtime does, so that `watch` deployed in the cluster needs
//! no kubeconfig. Outside a Pod, the kubeconfig rule stands.
//!
//! In a Pod is what client-go's `rest.InClusterConfig` calls it: `KUBERNETES_SERVICE_HOST` and
//! `KUBERNETES_SERVICE_PORT` are set and the service account's token is mounted. As in
//! controller-runtime, a `$KUBECONFIG` set in the Pod wins over its service account, and a
//! `node.context` names a kubeconfig's context, so it keeps the kubeconfig rule too.

use std::path::Path;

use kube::Config;

use crate::backend::BackendError;
use crate::model::ClusterRef;
use crate::spec::IN_CLUSTER;

/// Where the kubelet mounts a Pod's service account (kube-rs and client-go read it there).
const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// What the process sees of its surroundings that decides where credentials come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Surroundings {
    /// `$KUBECONFIG` is set (and not empty).
    kubeconfig_env: bool,
    /// `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT` are both set.
    service_env: bool,
    /// The service account's token file exists.
    token: bool,
}

impl Surroundings {
    /// This process's surroundings.
    pub(super) fn of_process() -> Self {
        let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
        Self {
            kubeconfig_env: set("KUBECONFIG"),
            service_env: set("KUBERNETES_SERVICE_HOST") && set("KUBERNETES_SERVICE_PORT"),
            token: Path::new(SERVICE_ACCOUNT).join("token").is_file(),
        }
    }

    /// Why these surroundings are not a Pod with a service account, if they are not.
    fn not_in_pod(self) -> Option<String> {
        if !self.service_env {
            return Some(
                "poolctl does not run in a Pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set"
                    .to_owned(),
            );
        }
        if !self.token {
            return Some(format!(
                "the Pod has no service account token at {SERVICE_ACCOUNT}/token \
                 (automountServiceAccountToken: false?)"
            ));
        }
        None
    }
}

/// Whether `cluster` is reached with the Pod's service account rather than a kubeconfig.
pub(super) fn chosen(cluster: &ClusterRef, around: Surroundings) -> bool {
    match (cluster.kubeconfig.as_deref(), cluster.context.as_deref()) {
        (Some(kubeconfig), _) => kubeconfig == IN_CLUSTER,
        (None, Some(_)) => false,
        (None, None) => !around.kubeconfig_env && around.not_in_pod().is_none(),
    }
}

/// The kube `Config` of the Pod's service account: the API server from the environment, the
/// cluster's CA and the token as mounted (kube re-reads both as the kubelet rotates them).
pub(super) fn config(around: Surroundings) -> Result<Config, BackendError> {
    let failed = |why: String| {
        BackendError::Failed(format!(
            "cannot use the Pod's service account (node.kubeconfig: {IN_CLUSTER}): {why}"
        ))
    };
    if let Some(why) = around.not_in_pod() {
        return Err(failed(why));
    }
    Config::incluster().map_err(|e| failed(format!("{e} (in {SERVICE_ACCOUNT})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(kubeconfig: Option<&str>, context: Option<&str>) -> ClusterRef {
        ClusterRef { kubeconfig: kubeconfig.map(str::to_owned), context: context.map(str::to_owned) }
    }

    const POD: Surroundings = Surroundings { kubeconfig_env: false, service_env: true, token: true };
    const LAPTOP: Surroundings = Surroundings { kubeconfig_env: false, service_env: false, token: false };

    #[test]
    fn a_pool_without_a_kubeconfig_uses_the_pods_service_account_only_in_a_pod() {
        let default = cluster(None, None);
        assert!(chosen(&default, POD));
        assert!(!chosen(&default, LAPTOP), "outside a Pod: ~/.kube/config, as before");
        let no_token = Surroundings { token: false, ..POD };
        assert!(!chosen(&default, no_token), "a Pod without a token falls back to the kubeconfig");
        let with_env = Surroundings { kubeconfig_env: true, ..POD };
        assert!(!chosen(&default, with_env), "$KUBECONFIG set in the Pod wins");
        assert!(!chosen(&cluster(None, Some("kind-a")), POD), "a context names a kubeconfig's");
        assert!(!chosen(&cluster(Some("/k"), None), POD));
    }

    #[test]
    fn in_cluster_asks_for_the_pods_service_account_and_says_why_it_cannot_have_it() {
        let asked = cluster(Some(IN_CLUSTER), None);
        assert!(chosen(&asked, POD));
        assert!(chosen(&asked, LAPTOP), "asked for by name: an error, never another cluster");
        let err = config(LAPTOP).unwrap_err().to_string();
        assert!(err.contains("poolctl does not run in a Pod: KUBERNETES_SERVICE_HOST"), "{err}");
        let err = config(Surroundings { token: false, ..POD }).unwrap_err().to_string();
        assert!(
            err.contains("no service account token at /var/run/secrets/kubernetes.io/serviceaccount/token"),
            "{err}"
        );
    }
}
