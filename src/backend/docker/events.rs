//! Docker's event stream as drift signals for `watch` (the die, stop and destroy events of one
//! source's containers on one endpoint) and as redraw signals for `status -w` (their starts and
//! creations too), debounced into one-line descriptions, re-subscribed with backoff whenever the
//! daemon goes away. Watch follows each endpoint its pools live on.

use std::time::{Duration, SystemTime};

use bollard::models::EventMessageTypeEnum;
use bollard::query_parameters::EventsOptions;
use futures::StreamExt;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::{DockerBackend, Endpoint};
use crate::backend::retry;
use crate::model::labels;

/// `docker rm -f` sends kill, die and destroy: let the burst end before reporting it.
const DRIFT_DEBOUNCE: Duration = Duration::from_millis(250);

/// The longest wait before subscribing again.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The events that mean a container stopped serving.
pub const DRIFT_EVENTS: &[&str] = &["die", "stop", "destroy"];

/// What Docker said of a source's containers: a burst of events, told as one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerNews {
    /// The containers the events were about.
    pub names: std::collections::BTreeSet<String>,
    /// Their pools, by their pool label: the reconciles the news concerns.
    pub pools: std::collections::BTreeSet<String>,
    /// The first event, and how many more came with it, for the log.
    pub what: String,
    /// The pools whose reconcile was requested (`poolctl reconcile`): not drift.
    pub requested: std::collections::BTreeSet<String>,
}

/// Forward the `actions` (`die`, `start`...) on `endpoint` of the containers whose scope label
/// is `scope` to `tx`, from `since` on, until `tx` is closed.
///
/// The daemon replays what happened since then: an event that comes between the caller's look at
/// the world and the moment the subscription reaches the daemon (a connection away, longer on a
/// loaded host) is not lost. A subscription made again after a failure replays from the failure.
pub async fn container_events(
    endpoint: Endpoint,
    scope: String,
    actions: &'static [&'static str],
    tx: mpsc::Sender<ContainerNews>,
    mut since: SystemTime,
) {
    let mut failures = 0;
    loop {
        let subscribed = subscribe(&endpoint, &scope, actions, &tx, since).await;
        since = SystemTime::now();
        match subscribed {
            Ok(()) => failures = 0,
            Err(e) => {
                failures += 1;
                let after = retry::delay(failures, Duration::from_secs(1), MAX_BACKOFF);
                warn!("Docker events: {e}; backing off, re-subscribing in {}s", after.as_secs());
                tokio::time::sleep(after).await;
            }
        }
        if tx.is_closed() {
            return;
        }
    }
}

async fn subscribe(
    endpoint: &Endpoint,
    scope: &str,
    actions: &[&str],
    tx: &mpsc::Sender<ContainerNews>,
    since: SystemTime,
) -> Result<(), String> {
    let docker =
        DockerBackend::connect(endpoint, super::Timeouts::default()).await.map_err(|e| e.to_string())?;
    let filters = [
        ("type", vec!["container".to_owned()]),
        ("event", actions.iter().map(|&a| a.to_owned()).collect()),
        ("label", vec![format!("{}={scope}", labels::SCOPE)]),
    ];
    let since = since.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let since = format!("{}.{:09}", since.as_secs(), since.subsec_nanos());
    let options = |filters: Vec<(&str, Vec<String>)>| EventsOptions {
        since: Some(since.clone()),
        until: None,
        filters: Some(filters.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()),
    };
    let containers = docker.client().events(Some(options(filters.to_vec())));
    // Watch follows reconcile requests too (`poolctl reconcile`): the create of a request
    // record. A volume's event carries no labels, so its name says whose request it is; a
    // record's create is never drift, and a container's create is not followed at all.
    let requests = options(vec![("type", vec!["volume".to_owned()]), ("event", vec!["create".to_owned()])]);
    let requests = if actions == DRIFT_EVENTS {
        docker.client().events(Some(requests)).boxed()
    } else {
        futures::stream::empty().boxed()
    };
    let mut events = futures::stream::select(containers, requests);
    debug!("following Docker events of {scope} on {}", endpoint.name);
    while let Some(event) = events.next().await {
        let event = event.map_err(|e| format!("the event stream failed: {e}"))?;
        let mut news = ContainerNews::default();
        let mut note = |event: bollard::models::EventMessage| {
            let actor = event.actor.unwrap_or_default();
            if event.typ == Some(EventMessageTypeEnum::VOLUME) {
                let name = actor.id.unwrap_or_default();
                let pool = name.strip_prefix("poolctl-reconcile-").filter(|p| !p.is_empty());
                news.requested.extend(pool.map(str::to_owned));
                return format!("volume {name}");
            }
            let mut attributes = actor.attributes.unwrap_or_default();
            let name = attributes.remove("name").unwrap_or_default();
            news.pools.extend(attributes.remove(labels::POOL));
            news.names.insert(name.clone());
            format!("container {name}")
        };
        let action = event.action.clone().unwrap_or_default();
        let what = format!("{} {action}", note(event));
        // Let the burst end: the loop observes once for all of it.
        let mut more = 0;
        while let Ok(Some(Ok(event))) = tokio::time::timeout(DRIFT_DEBOUNCE, events.next()).await {
            more += 1;
            note(event);
        }
        news.what = if more == 0 { what } else { format!("{what} (+{more} more events)") };
        if news.names.is_empty() && news.requested.is_empty() {
            // Another volume's creation.
            continue;
        }
        if tx.send(news).await.is_err() {
            return Ok(());
        }
    }
    Err("the daemon closed the event stream".into())
}
