//! The simulated kubelet and the simulated controllers' clock.
//!
//! The kubelet polls Docker (a real kubelet also reports on a period) for running containers
//! that carry `poolctl.dev/pool` and this test run's label, and registers, readies and
//! un-readies their Nodes through the store. The controller loop wakes on state changes or
//! when a timer (termination, rescheduling) falls due; it does not poll.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::query_parameters::ListContainersOptions;

use super::http::Shared;

/// The label every pool container carries.
pub const POOL_LABEL: &str = "poolctl.dev/pool";

pub async fn connect_docker() -> Result<Docker, bollard::errors::Error> {
    Docker::connect_with_defaults()?.negotiate_version().await
}

async fn running_containers(docker: &Docker, run_label: &str) -> Option<BTreeSet<String>> {
    let filters = HashMap::from([
        ("label".to_owned(), vec![POOL_LABEL.to_owned(), run_label.to_owned()]),
        ("status".to_owned(), vec!["running".to_owned()]),
    ]);
    let opts = ListContainersOptions { all: false, filters: Some(filters), ..Default::default() };
    match docker.list_containers(Some(opts)).await {
        Ok(list) => Some(
            list.into_iter()
                .filter_map(|c| c.names?.into_iter().next())
                .map(|n| n.trim_start_matches('/').to_owned())
                .collect(),
        ),
        Err(e) => {
            eprintln!("fake kubelet: listing containers failed: {e}");
            None
        }
    }
}

pub async fn kubelet_loop(shared: Arc<Shared>, docker: Docker, run_label: String, interval: Duration) {
    let mut shutdown = shared.shutdown.clone();
    loop {
        // A failed list leaves the Nodes as they are, like a kubelet that cannot reach its runtime
        // and keeps its last status for a while.
        if let Some(running) = running_containers(&docker, &run_label).await {
            shared.store.lock().expect("store lock").kubelet_sync(&running, Instant::now());
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => return,
        }
    }
}

pub async fn controller_loop(shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown.clone();
    let mut version = shared.store.lock().expect("store lock").version_rx();
    loop {
        let next = {
            let mut store = shared.store.lock().expect("store lock");
            let next = store.tick(Instant::now());
            // Our own tick may have bumped the version: mark it seen under the lock, so that
            // it does not wake us again and no other change can slip in unseen.
            version.borrow_and_update();
            next
        };
        let sleep = match next {
            Some(t) => tokio::time::sleep_until(t.into()),
            None => tokio::time::sleep(Duration::from_secs(3600)),
        };
        tokio::select! {
            () = sleep => {}
            r = version.changed() => if r.is_err() { return },
            _ = shutdown.changed() => return,
        }
    }
}
