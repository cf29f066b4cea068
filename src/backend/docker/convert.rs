//! Docker's list entries reduced to the world's plain data: a pool container with its state,
//! health, template and the cluster its Node joins, all read from one list call.

use std::collections::HashMap;

use bollard::models::{ContainerSummary, ContainerSummaryStateEnum};

use crate::model::{ClusterIdentity, ClusterRef, Container, ContainerState, Health, labels};

/// Maps one list entry; entries without an id or pool label (which the filter excludes) are
/// skipped rather than invented.
pub(super) fn container_from_summary(s: ContainerSummary) -> Option<Container> {
    let labels = s.labels.unwrap_or_default();
    let pool = labels.get(labels::POOL)?.clone();
    let name = s
        .names
        .as_ref()
        .and_then(|n| n.first())
        .map(|n| n.trim_start_matches('/').to_owned())
        .unwrap_or_default();
    let state = match s.state {
        Some(ContainerSummaryStateEnum::CREATED) => ContainerState::Created,
        // A stopping container still runs (only newer daemons report it).
        Some(ContainerSummaryStateEnum::RUNNING | ContainerSummaryStateEnum::STOPPING) => {
            ContainerState::Running
        }
        Some(ContainerSummaryStateEnum::PAUSED) => ContainerState::Paused,
        Some(ContainerSummaryStateEnum::RESTARTING) => ContainerState::Restarting,
        Some(ContainerSummaryStateEnum::REMOVING) => ContainerState::Removing,
        Some(ContainerSummaryStateEnum::EXITED) => ContainerState::Exited,
        // An unknown state is treated as gone, so the planner replaces it.
        Some(ContainerSummaryStateEnum::DEAD | ContainerSummaryStateEnum::EMPTY) | None => {
            ContainerState::Dead
        }
    };
    let created = s.created.unwrap_or_default();
    Some(Container {
        id: s.id?,
        name,
        pool,
        template_hash: labels.get(labels::TEMPLATE_HASH).cloned().unwrap_or_default(),
        state,
        health: health_from_status(s.status.as_deref().unwrap_or_default()),
        created,
        created_precise: labels.get(labels::CREATED_AT).map_or(0, |t| super::up::nanos_since_epoch(t)),
        // Joined with the up records of the same list by `DockerBackend::list`; a container
        // made before poolctl kept them came up when it was created, as far as anyone knows.
        came_up: (!labels.contains_key(labels::RECORDS_UP)).then_some(created),
        since: None,
        status: s.status.unwrap_or_default(),
        template: labels.get(labels::TEMPLATE).cloned(),
        scope: labels.get(labels::SCOPE).map(|s| crate::source::scope_as_written_now(s)),
        image: s.image.unwrap_or_default(),
        cluster: cluster_from_labels(&labels),
        cluster_id: cluster_id_from_labels(&labels),
        elsewhere: None,
        // The daemon's address, which the backend that listed it knows.
        docker_host: String::new(),
    })
}

/// The cluster a container was created to join, from the labels `new_container` sets on the
/// instances of a pool with a `node:` section; an empty value stands for the default.
fn cluster_from_labels(labels: &HashMap<String, String>) -> Option<ClusterRef> {
    let (kubeconfig, context) = (labels.get(labels::KUBECONFIG), labels.get(labels::CONTEXT));
    if kubeconfig.is_none() && context.is_none() {
        return None;
    }
    let non_empty = |v: Option<&String>| v.filter(|v| !v.is_empty()).cloned();
    Some(ClusterRef { kubeconfig: non_empty(kubeconfig), context: non_empty(context) })
}

/// The cluster poolctl was connected to when it created the container, from the labels
/// `new_container` sets; absent on containers created before poolctl recorded it.
fn cluster_id_from_labels(labels: &HashMap<String, String>) -> Option<ClusterIdentity> {
    let server = labels.get(labels::CLUSTER_SERVER)?.clone();
    Some(ClusterIdentity {
        context: labels.get(labels::CLUSTER_CONTEXT).cloned().unwrap_or_default(),
        server,
        uid: labels.get(labels::CLUSTER_UID).filter(|u| !u.is_empty()).cloned(),
    })
}

/// Reads the health out of the list's status text ("Up 3 seconds (healthy)"): API 1.41 has no
/// health field in the list, and an inspect per container would make observation O(n).
fn health_from_status(status: &str) -> Health {
    if status.contains("(healthy)") {
        Health::Healthy
    } else if status.contains("(unhealthy)") {
        Health::Unhealthy
    } else if status.contains("(health: starting)") {
        Health::Starting
    } else {
        Health::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_is_read_from_the_status_text() {
        assert_eq!(health_from_status("Up 3 seconds (healthy)"), Health::Healthy);
        assert_eq!(health_from_status("Up 1 second (health: starting)"), Health::Starting);
        assert_eq!(health_from_status("Up 2 minutes (unhealthy)"), Health::Unhealthy);
        assert_eq!(health_from_status("Up 2 minutes"), Health::None);
        assert_eq!(health_from_status("Exited (0) 3 seconds ago"), Health::None);
        assert_eq!(health_from_status(""), Health::None);
    }

    #[test]
    fn a_list_entry_maps_to_a_pool_container() {
        let labels = HashMap::from([
            (labels::POOL.to_owned(), "workers".to_owned()),
            (labels::TEMPLATE_HASH.to_owned(), "abc123".to_owned()),
            (labels::SCOPE.to_owned(), "dir:/x".to_owned()),
        ]);
        let summary = ContainerSummary {
            id: Some("f00".to_owned()),
            names: Some(vec!["/workers-abc-1".to_owned()]),
            image: Some("img:1".to_owned()),
            created: Some(1_700_000_000),
            labels: Some(labels.clone()),
            state: Some(ContainerSummaryStateEnum::RUNNING),
            status: Some("Up 5 minutes (unhealthy)".to_owned()),
            ..Default::default()
        };
        let c = container_from_summary(summary.clone()).expect("a pool container");
        assert_eq!(
            c,
            Container {
                id: "f00".to_owned(),
                name: "workers-abc-1".to_owned(),
                pool: "workers".to_owned(),
                template_hash: "abc123".to_owned(),
                state: ContainerState::Running,
                health: Health::Unhealthy,
                created: 1_700_000_000,
                created_precise: 0,
                came_up: Some(1_700_000_000),
                since: None,
                status: "Up 5 minutes (unhealthy)".to_owned(),
                template: None,
                scope: Some("dir:/x".to_owned()),
                image: "img:1".to_owned(),
                cluster: None,
                cluster_id: None,
                elsewhere: None,
                docker_host: String::new(),
            }
        );

        let mut node_labels = labels.clone();
        node_labels.insert(labels::KUBECONFIG.to_owned(), String::new());
        node_labels.insert(labels::CONTEXT.to_owned(), "kind-a".to_owned());
        let node = ContainerSummary { labels: Some(node_labels), ..summary.clone() };
        let c = container_from_summary(node).expect("a pool container");
        assert_eq!(c.cluster, Some(ClusterRef { kubeconfig: None, context: Some("kind-a".to_owned()) }));

        let exited = ContainerSummary {
            state: Some(ContainerSummaryStateEnum::EXITED),
            status: Some("Exited (137) 2 seconds ago".to_owned()),
            ..summary.clone()
        };
        let c = container_from_summary(exited).expect("a pool container");
        assert_eq!((c.state, c.health), (ContainerState::Exited, Health::None));

        let foreign = ContainerSummary { labels: None, ..summary };
        assert_eq!(container_from_summary(foreign), None);
    }

    #[test]
    fn a_scope_an_earlier_poolctl_wrote_with_a_git_user_name_reads_without_it() {
        let scope = |label: &str| {
            let labels = HashMap::from([
                (labels::POOL.to_owned(), "workers".to_owned()),
                (labels::SCOPE.to_owned(), label.to_owned()),
            ]);
            let summary =
                ContainerSummary { id: Some("f00".to_owned()), labels: Some(labels), ..Default::default() };
            container_from_summary(summary).expect("a pool container").scope.expect("a scope")
        };
        assert_eq!(scope("git:https://ghp_TOKEN@h/o/r.git//pools"), "git:https://h/o/r.git//pools");
        assert_eq!(scope("git:git@h:o/r.git//"), "git:h:o/r.git//");
        assert_eq!(scope("git:https://h/o/r.git//pools"), "git:https://h/o/r.git//pools");
    }
}
