//! Kubernetes objects reduced to the world's plain data: a Node's readiness, conditions and
//! poolctl's marks, a Pod's owner and what a drain needs to know, a PDB's selector and budget.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Node as K8sNode, Pod as K8sPod, Taint as K8sTaint};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as K8sSelector;

use crate::model::{
    InstanceRef, LabelSelector, Node, NodeCondition, NodeConfig, Pdb, Pod, RetirementMarks, labels,
};
use crate::spec::Taint;

/// `DaemonSet` objects by namespace and name.
pub(super) type DaemonSets = BTreeSet<(String, String)>;

pub(super) fn node_from(n: &K8sNode) -> Node {
    let conditions: Vec<NodeCondition> = n
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .map(|c| NodeCondition {
            kind: c.type_.clone(),
            status: c.status.clone(),
            since: c.last_transition_time.as_ref().map(|t| t.0.as_second()),
        })
        .collect();
    let ready = conditions.iter().any(|c| c.kind == "Ready" && c.status == "True");
    let annotations = n.metadata.annotations.as_ref();
    Node {
        name: n.metadata.name.clone().unwrap_or_default(),
        pool: n.metadata.labels.as_ref().and_then(|l| l.get(labels::POOL).cloned()),
        ready,
        unschedulable: n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false),
        cordoned_by_poolctl: annotations.is_some_and(|a| a.contains_key(labels::RETIRING)),
        config: NodeConfig {
            labels: n.metadata.labels.clone().unwrap_or_default(),
            taints: n.spec.iter().flat_map(|s| s.taints.iter().flatten()).map(taint_from).collect(),
            managed: annotations
                .and_then(|a| a.get(labels::MANAGED))
                .map(|m| m.split(',').filter(|e| !e.is_empty()).map(str::to_owned).collect())
                .unwrap_or_default(),
        },
        conditions,
        retirement: retirement_marks(annotations),
        reference: reference_from(annotations),
    }
}

/// poolctl's reference to the Node's container, when both of its annotations are there.
fn reference_from(annotations: Option<&std::collections::BTreeMap<String, String>>) -> Option<InstanceRef> {
    let annotations = annotations?;
    let container_id = annotations.get(labels::CONTAINER_ID).filter(|v| !v.is_empty())?;
    let docker_host = annotations.get(labels::DOCKER_HOST).filter(|v| !v.is_empty())?;
    Some(InstanceRef { container_id: container_id.clone(), docker_host: docker_host.clone() })
}

/// The deletion hooks and exclusions a Node's annotations set.
fn retirement_marks(annotations: Option<&std::collections::BTreeMap<String, String>>) -> RetirementMarks {
    let Some(annotations) = annotations else { return RetirementMarks::default() };
    let hooks = annotations
        .iter()
        .filter(|(k, _)| k.starts_with("pre-drain") || k.starts_with("pre-terminate"))
        .filter(|(k, _)| k.contains(labels::HOOK_SUFFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    RetirementMarks {
        hooks,
        exclude_draining: annotations.contains_key(labels::EXCLUDE_DRAINING),
        exclude_volume_detach: annotations.contains_key(labels::EXCLUDE_VOLUME_DETACH),
        do_not_disrupt: [labels::DO_NOT_DISRUPT, labels::KARPENTER_DO_NOT_DISRUPT]
            .into_iter()
            .find(|key| annotations.get(*key).is_some_and(|v| v == "true")),
        // Cluster API reads its annotation by its presence, whatever its value.
        skip_remediation: [labels::SKIP_REMEDIATION, labels::CAPI_SKIP_REMEDIATION]
            .into_iter()
            .find(|key| annotations.contains_key(*key)),
    }
}

/// The namespace and name of the DaemonSet that controls the pod, if one does.
pub(super) fn daemon_set_of(p: &K8sPod) -> Option<(String, String)> {
    let owner = p.metadata.owner_references.as_ref()?.iter().find(|o| o.controller == Some(true))?;
    (owner.kind == "DaemonSet").then(|| (namespace_of(p), owner.name.clone()))
}

pub(super) fn namespace_of(p: &K8sPod) -> String {
    p.metadata.namespace.clone().unwrap_or_else(|| "default".into())
}

/// The pod as the world sees it. `daemon_sets` holds the `DaemonSet` objects that exist among
/// those that control pods (see [`daemon_set_of`]), so that an orphan can be told apart.
pub(super) fn pod_from(p: &K8sPod, daemon_sets: &DaemonSets) -> Option<Pod> {
    let spec = p.spec.as_ref()?;
    let owner_kind = p
        .metadata
        .owner_references
        .as_ref()
        .and_then(|os| os.iter().find(|o| o.controller == Some(true)).map(|o| o.kind.clone()));
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("");
    let annotations = p.metadata.annotations.as_ref();
    Some(Pod {
        namespace: namespace_of(p),
        name: p.metadata.name.clone().unwrap_or_default(),
        uid: p.metadata.uid.clone().unwrap_or_default(),
        node: spec.node_name.clone().unwrap_or_default(),
        labels: p.metadata.labels.clone().unwrap_or_default(),
        owner_kind,
        mirror: annotations.is_some_and(|a| a.contains_key("kubernetes.io/config.mirror")),
        finished: matches!(phase, "Succeeded" | "Failed"),
        empty_dir: spec.volumes.iter().flatten().any(|v| v.empty_dir.is_some()),
        orphaned: daemon_set_of(p).is_some_and(|ds| !daemon_sets.contains(&ds)),
        do_not_disrupt: annotations
            .and_then(|a| a.get("karpenter.sh/do-not-disrupt"))
            .is_some_and(|v| v == "true"),
    })
}

pub(super) fn pdb_from(p: &PodDisruptionBudget) -> Pdb {
    Pdb {
        namespace: p.metadata.namespace.clone().unwrap_or_default(),
        name: p.metadata.name.clone().unwrap_or_default(),
        selector: p.spec.as_ref().and_then(|s| s.selector.as_ref()).and_then(selector_from),
        disruptions_allowed: p.status.as_ref().and_then(|s| s.disruptions_allowed).unwrap_or(0),
    }
}

fn taint_from(t: &K8sTaint) -> Taint {
    Taint { key: t.key.clone(), value: t.value.clone(), effect: t.effect.clone() }
}

/// The API's form of a taint.
pub(super) fn taint_to(t: &Taint) -> K8sTaint {
    K8sTaint { key: t.key.clone(), value: t.value.clone(), effect: t.effect.clone(), time_added: None }
}

fn selector_from(s: &K8sSelector) -> Option<LabelSelector> {
    let expressions = s
        .match_expressions
        .iter()
        .flatten()
        .map(|e| (e.key.as_str(), e.operator.as_str(), e.values.as_deref().unwrap_or_default()));
    LabelSelector::from_parts(s.match_labels.iter().flatten(), expressions)
}
