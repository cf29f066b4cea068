//! The simulated kubelet and the simulated controllers' clock.
//!
//! The kubelet polls Docker (a real kubelet also reports on a period) for running containers
//! that carry `poolctl.dev/pool` and this test run's label, and registers, readies and
//! un-readies their Nodes through the store; a prompt one also looks at once when Docker
//! reports such a container started or died, and when a Node is due to turn Ready. The controller loop wakes on state changes or
//! when a timer (termination, rescheduling) falls due; it does not poll.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bollard::Docker;
use bollard::query_parameters::{EventsOptions, ListContainersOptions};
use futures::StreamExt;

use super::KubeletOptions;
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

pub async fn kubelet_loop(shared: Arc<Shared>, docker: Docker, options: KubeletOptions) {
    let mut shutdown = shared.shutdown.clone();
    let extra: Vec<Docker> = options
        .extra_hosts
        .iter()
        .map(|h| {
            Docker::connect_with_unix(h, 120, bollard::API_DEFAULT_VERSION)
                .expect("the extra daemon's address")
        })
        .collect();
    let mut started_or_died = options.prompt.then(|| container_events(&docker, &options.run_label));
    // A container Docker just reported dead: a list made at once may still show it running
    // (Docker 20.10 reports `die` before its list sees the exit), and the report is the truth.
    let mut died: Option<String> = None;
    loop {
        // A failed list leaves the Nodes as they are, like a kubelet that cannot reach its runtime
        // and keeps its last status for a while.
        let listed_at = Instant::now();
        let mut listed = running_containers(&docker, &options.run_label).await;
        for extra in &extra {
            // A failed list of any daemon leaves every Node as it is.
            match (listed.as_mut(), running_containers(extra, &options.run_label).await) {
                (Some(all), Some(more)) => all.extend(more),
                _ => listed = None,
            }
        }
        if let Some(running) = &mut listed {
            if let Some(name) = died.take() {
                running.remove(&name);
            }
            read_registrations(&shared, running, std::iter::once(&docker).chain(&extra)).await;
            shared.store.lock().expect("store lock").kubelet_sync(running, listed_at, Instant::now());
        }
        let mut wait = options.poll_interval;
        // After a failed list, the next try waits the whole interval, not a Node's due time.
        if options.prompt
            && listed.is_some()
            && let Some(due) = shared.store.lock().expect("store lock").kubelet_next_ready()
        {
            wait = wait.min(due.saturating_duration_since(Instant::now()));
        }
        let event = async {
            match started_or_died.as_mut() {
                Some(events) => events.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            event = event => match event {
                Some(Ok(e)) if e.action.as_deref() == Some("die") => {
                    died = e.actor.and_then(|a| a.attributes?.remove("name"));
                }
                Some(Ok(_)) => {}
                // The event stream broke: poll on, as the default kubelet does.
                _ => started_or_died = None,
            },
            _ = shutdown.changed() => return,
        }
    }
}

/// The flags each new container's kubelet registers with, from its `KUBELET_EXTRA_ARGS`, as a
/// kubelet started in it would read them; once per container, asked of whichever daemon has it.
async fn read_registrations<'d>(
    shared: &Shared,
    running: &BTreeSet<String>,
    daemons: impl Iterator<Item = &'d Docker> + Clone,
) {
    for name in running {
        if shared.store.lock().expect("store lock").knows_registration(name) {
            continue;
        }
        for docker in daemons.clone() {
            let Ok(inspect) = docker.inspect_container(name, None).await else { continue };
            let env = inspect.config.and_then(|c| c.env).unwrap_or_default();
            let args = env.iter().find_map(|e| e.strip_prefix("KUBELET_EXTRA_ARGS=")).unwrap_or_default();
            let registration = super::store::Registration::from_args(args);
            shared.store.lock().expect("store lock").set_registration(name, registration);
            break;
        }
    }
}

/// Docker's reports of this test's pool containers starting or dying, from now on. The stream
/// asks the daemon only when first polled; `since` has it replay what happened in between.
fn container_events(
    docker: &Docker,
    run_label: &str,
) -> futures::stream::BoxStream<'static, Result<bollard::models::EventMessage, bollard::errors::Error>> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let filters = HashMap::from([
        ("type".to_owned(), vec!["container".to_owned()]),
        ("label".to_owned(), vec![POOL_LABEL.to_owned(), run_label.to_owned()]),
        ("event".to_owned(), vec!["start".to_owned(), "die".to_owned()]),
    ]);
    let since = Some(format!("{}.{:09}", now.as_secs(), now.subsec_nanos()));
    docker.events(Some(EventsOptions { since, until: None, filters: Some(filters) })).boxed()
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
