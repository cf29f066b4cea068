//! The labels and annotations poolctl puts on every container (and Node) it manages: the
//! names by which the world is read back, since there is no state file.

/// The pool's name.
pub const POOL: &str = "poolctl.dev/pool";
/// The template hash the container was created from.
pub const TEMPLATE_HASH: &str = "poolctl.dev/template-hash";
/// The canonical template JSON, so that a later plan can diff old against new.
pub const TEMPLATE: &str = "poolctl.dev/template";
/// The source scope (see `Origin::scope`), for `--prune`.
pub const SCOPE: &str = "poolctl.dev/scope";
/// Where the spec came from, human-readable (file, or repo and path).
pub const SOURCE: &str = "poolctl.dev/source";
/// The Git commit the spec came from.
pub const COMMIT: &str = "poolctl.dev/commit";
/// On a container created as a Node: the pool's kubeconfig as written (`""` for the default),
/// so that it is still cordoned, drained and deleted as a Node once the pool's `node:`
/// section or file is gone.
pub const KUBECONFIG: &str = "poolctl.dev/kubeconfig";
/// On a container created as a Node: the kubeconfig context (`""` for the current one).
pub const CONTEXT: &str = "poolctl.dev/context";
/// Annotation on a Node that poolctl cordoned for retirement.
pub const RETIRING: &str = "poolctl.dev/retiring";
/// On a container created as a Node: the context poolctl resolved and was connected to.
pub const CLUSTER_CONTEXT: &str = "poolctl.dev/cluster-context";
/// On a container created as a Node: the API server URL it was connected to.
pub const CLUSTER_SERVER: &str = "poolctl.dev/cluster-server";
/// On a container created as a Node: the UID of that cluster's `kube-system` Namespace.
pub const CLUSTER_UID: &str = "poolctl.dev/cluster-uid";
/// Annotation on a Node: the label keys and taints (`key:effect`) poolctl set on it, comma
/// separated, so that those the spec drops can be removed and nobody else's are.
pub const MANAGED: &str = "poolctl.dev/managed";
/// On a pool's lock container (see `backend::docker`): the pool it locks. The lock carries the
/// [`POOL`] label too (for a clean-up by label); this one keeps it from being taken for an
/// instance.
pub const LOCK: &str = "poolctl.dev/lock";
/// On a lock container: who holds it.
pub const LOCK_HOLDER: &str = "poolctl.dev/lock-holder";
/// On a lock container: when its holder took it (RFC 3339).
pub const LOCK_SINCE: &str = "poolctl.dev/lock-since";
/// On a lock container: how long it holds after each renewal, in seconds (as a Lease's
/// `leaseDurationSeconds`): how long a standby must see it unchanged before taking it over.
pub const LOCK_LEASE: &str = "poolctl.dev/lock-lease-seconds";
/// Prefix of the annotations on a node pool's Lease that record the instances created and not
/// yet labelled (`joining.poolctl.dev/<instance>: <RFC 3339 time>`): an instance name is a DNS
/// label, so it fits an annotation key's name part.
pub const JOINING_PREFIX: &str = "joining.poolctl.dev/";
/// On an instance container: its coming up is recorded by an up record (see [`UP_OF`]); until
/// that record exists the instance is starting, not serving. Containers made before poolctl
/// kept the record lack the label.
pub const RECORDS_UP: &str = "poolctl.dev/records-up";
/// On an up record: the ID of the instance container whose coming up it records. An up record
/// is a Docker volume named `poolctl-up-<instance>`, written as the last step of coming up (see
/// `backend::docker::up`); earlier poolctl versions kept it as a never-started container.
pub const UP_OF: &str = "poolctl.dev/up-of";
/// On an update record: the ID of the instance container that was updated in place to the
/// template the record carries in [`TEMPLATE_HASH`] and [`TEMPLATE`]. A container's own labels
/// cannot change, so the record, a Docker volume named `poolctl-updated-<instance>` (as an up
/// record is), says what it runs since (see `backend::docker::up`).
pub const UPDATED_OF: &str = "poolctl.dev/updated-of";
/// On a pool's rollout record (`poolctl-rollout-<pool>`, a Docker volume, as an up record is):
/// the template hash its last rollout was to; the record's creation time is when that rollout
/// began.
pub const ROLLOUT_OF: &str = "poolctl.dev/rollout-of";
/// On an instance container: when poolctl made it, to the nanosecond (RFC 3339). Docker's list
/// says when to the second only: this orders the containers of a pool made within the same
/// second (a batch side by side) for `deletePolicy`, without an inspect each.
pub const CREATED_AT: &str = "poolctl.dev/created-at";
/// On a pool's progress record (`poolctl-progress-<pool>`, a Docker volume): the pool. The
/// record's creation time is when its rollout last stepped forward (a Node cordoned or drained,
/// an instance stopped or removed), written again at each such step.
pub const PROGRESS_OF: &str = "poolctl.dev/progress-of";
/// On a pool's suspension record (`poolctl-suspend-<pool>`, a Docker volume): the pool. The
/// record's creation time is when `poolctl suspend` suspended it.
pub const SUSPENDED: &str = "poolctl.dev/suspended";
/// On a suspension record: who suspended the pool (`user@host`, or the Pod).
pub const SUSPENDED_BY: &str = "poolctl.dev/suspended-by";
/// On a suspension record: why, as `--reason` gave it.
pub const SUSPEND_REASON: &str = "poolctl.dev/suspend-reason";
/// Annotation on a node pool's Lease, beside [`SUSPENDED_BY`] and [`SUSPEND_REASON`] (the
/// annotations that suspend a node pool): when, by the API server's clock (RFC 3339). A
/// Lease has no creation time of the suspension's own, as a Docker volume has.
pub const SUSPENDED_AT: &str = "poolctl.dev/suspended-at";
/// Annotation on a node pool's Lease: a reconcile request, as Flux's
/// `reconcile.fluxcd.io/requestedAt`; its value (when it was asked, RFC 3339) tells one request
/// from the next, so that the replica that acts on it clears only the one it saw.
pub const RECONCILE_REQUESTED_AT: &str = "reconcile.poolctl.dev/requestedAt";
/// On a pool's reconcile request (`poolctl-reconcile-<pool>`, a Docker volume): the pool, which
/// `watch` reconciles at once and then removes the request (Flux's
/// `reconcile.fluxcd.io/requestedAt`); its creation time is when it was asked for.
pub const RECONCILE_REQUESTED: &str = "poolctl.dev/reconcile-requested";
/// On a pool's promotion record (`poolctl-promote-<pool>`, a Docker volume): the pool, whose
/// canaries `poolctl promote` lets the rest of the rollout follow. The record's creation time
/// is when.
pub const PROMOTED: &str = "poolctl.dev/promoted";
/// On a promotion record: the template hash it promotes; a record of another is not read.
pub const PROMOTED_TEMPLATE: &str = "poolctl.dev/promoted-template";
/// On a promotion record: who promoted (`user@host`, or the Pod).
pub const PROMOTED_BY: &str = "poolctl.dev/promoted-by";
/// Annotation on a Node: its retirement skips the drain (the owner's explicit choice).
pub const EXCLUDE_DRAINING: &str = "poolctl.dev/exclude-node-draining";
/// Annotation on a Node: its retirement does not wait for its volumes to detach.
pub const EXCLUDE_VOLUME_DETACH: &str = "poolctl.dev/exclude-wait-for-node-volume-detach";
/// On a Node, `"true"`: the owner's choice that it is not disrupted by a rollout or a scale-down
/// while it serves (a long job runs on it), as Karpenter's own annotation, which poolctl reads
/// too ([`KARPENTER_DO_NOT_DISRUPT`]).
pub const DO_NOT_DISRUPT: &str = "poolctl.dev/do-not-disrupt";
pub const KARPENTER_DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// On a Node: an unhealthy instance is reported, not replaced, as Cluster API's
/// [`CAPI_SKIP_REMEDIATION`] on a Machine, which poolctl reads on a Node too.
pub const SKIP_REMEDIATION: &str = "poolctl.dev/skip-remediation";
pub const CAPI_SKIP_REMEDIATION: &str = "cluster.x-k8s.io/skip-remediation";
/// The suffix of a deletion hook's annotation prefix: `pre-drain.delete.hook.poolctl.dev/` or
/// `pre-terminate.delete.hook.poolctl.dev/`.
pub const HOOK_SUFFIX: &str = ".delete.hook.poolctl.dev/";
/// On a Node, set by hand or by another tool: `true` replaces the instance although it is
/// current, surge first, as `--replace` does.
pub const REPLACE: &str = "poolctl.dev/replace";
/// Annotation on a Node, written by poolctl with its labels: the ID of the container that runs
/// its kubelet. With [`DOCKER_HOST`], poolctl's proof that the Node is one of its instances (as
/// Cluster API matches a Node to its Machine by `spec.providerID`), and where to look for the
/// container: a Node without it is never deleted, and its absence from a listed daemon is what
/// proves the container gone.
pub const CONTAINER_ID: &str = "poolctl.dev/container-id";
/// Annotation on a Node: the address of the Docker daemon its container lives on.
pub const DOCKER_HOST: &str = "poolctl.dev/docker-host";
/// On a rollout record of a rollback: the template whose rollout stalled.
pub const ROLLED_BACK_FROM: &str = "poolctl.dev/rolled-back-from";
/// On a revision record (`poolctl-rev-<pool>-<n>`, a Docker volume, as an up record is) and on
/// its end record (`poolctl-rev-<pool>-<n>-end`): the revision's number. A revision record
/// carries the template it rolled out in [`TEMPLATE_HASH`] and [`TEMPLATE`], where it came from
/// in [`SOURCE`] and [`COMMIT`], and, for a rollback, [`ROLLED_BACK_FROM`]; its creation time is
/// when that rollout began.
pub const REVISION: &str = "poolctl.dev/revision";
/// On a revision's end record: how its rollout ended (`Complete`, `Degraded`, `RolledBack`);
/// the record's creation time is when.
pub const REVISION_RESULT: &str = "poolctl.dev/revision-result";
/// On an image, set by whoever builds it (poolctl never writes it): the version of the kubelet
/// the image runs (`v1.30.2`). The version-skew preflight reads it before the image's tag.
pub const KUBELET_VERSION: &str = "poolctl.dev/kubelet-version";
/// The taint (`NoSchedule`) every new Node of a pool registers with, beside the pool's own: no
/// pod lands on it before poolctl has configured it. poolctl removes it, in the update that
/// sets the Node's labels, once the Node is Ready; a Node that never gets there never takes
/// pods. As Cluster API's `node.cluster.x-k8s.io/uninitialized`.
pub const UNINITIALIZED: &str = "poolctl.dev/uninitialized";

/// Whether a kubelet may set the label `key` on its own Node when it registers (`--node-labels`):
/// any key outside the `kubernetes.io` and `k8s.io` namespaces, and within them only those of
/// `kubelet.kubernetes.io` and `node.kubernetes.io` and a few well-known ones, as kubelet's own
/// check (`IsKubeletLabel`) and the `NodeRestriction` admission plugin allow. The rest (a
/// `node-role.kubernetes.io/...` role, say) poolctl sets once the Node is Ready.
pub fn kubelet_may_set(key: &str) -> bool {
    const WELL_KNOWN: [&str; 11] = [
        "kubernetes.io/hostname",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
    ];
    let Some((namespace, _)) = key.split_once('/') else { return true };
    let within = |domain: &str, ns: &str| ns == domain || ns.ends_with(&format!(".{domain}"));
    if !within("kubernetes.io", namespace) && !within("k8s.io", namespace) {
        return true;
    }
    WELL_KNOWN.contains(&key)
        || within("kubelet.kubernetes.io", namespace)
        || within("node.kubernetes.io", namespace)
}

#[cfg(test)]
mod tests {
    use super::kubelet_may_set;

    #[test]
    fn a_kubelet_may_set_labels_outside_the_kubernetes_namespaces_and_a_few_within() {
        for key in ["team", "example.com/gpu", "kubernetes.io.example.com/x", "topology.kubernetes.io/zone"] {
            assert!(kubelet_may_set(key), "{key}");
        }
        for key in ["node.kubernetes.io/exclude-from-external-load-balancers", "kubelet.kubernetes.io/x"] {
            assert!(kubelet_may_set(key), "{key}");
        }
        for key in [
            "node-role.kubernetes.io/worker",
            "kubernetes.io/role",
            "node-restriction.kubernetes.io/pool",
            "example.k8s.io/x",
        ] {
            assert!(!kubelet_may_set(key), "{key}");
        }
    }
}
