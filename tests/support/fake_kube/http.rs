//! The HTTP face of the fake API server: routing, lists, watches, patches and the eviction
//! subresource, plus the request log and fault injection around every request.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::body::{Body, Bytes};
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Status};
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use super::select::{FieldQuery, LabelQuery, merge_patch};
use super::store::{Change, ChangeKind, RequestRecord, Resource, Store, not_found, status};
use super::switches::{Silence, Switches};

/// What the handlers share: the store, the fault switches, the TLS configuration and the signals
/// that end open watches.
pub struct Shared {
    pub store: Mutex<Store>,
    pub switches: Switches,
    /// What a new connection's TLS handshake uses: tests swap the server certificate.
    pub tls: Mutex<Arc<rustls::ServerConfig>>,
    /// The only bearer token the server takes, when it takes tokens (see `FakeKubeOptions`).
    pub bearer_token: Option<String>,
    pub shutdown: watch::Receiver<bool>,
    /// True while a test has taken the API down (the listener is closed).
    pub down: watch::Sender<bool>,
    /// Whether the listener is open; `set_api_down` waits on it so that tests need no sleeps.
    pub listening: (Mutex<bool>, std::sync::Condvar),
}

impl Shared {
    pub fn set_listening(&self, value: bool) {
        *self.listening.0.lock().expect("listening lock") = value;
        self.listening.1.notify_all();
    }

    /// Panics if the server does not get there: a failed re-bind must not hang the test.
    pub fn wait_listening(&self, value: bool) {
        let guard = self.listening.0.lock().expect("listening lock");
        let (_guard, timeout) = self
            .listening
            .1
            .wait_timeout_while(guard, std::time::Duration::from_secs(10), |l| *l != value)
            .expect("listening lock");
        assert!(!timeout.timed_out(), "the fake API server did not reach listening={value}");
    }
}

pub type AppState = Arc<Shared>;

pub fn router(state: AppState) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(state)
}

enum Reply {
    Json(u16, Value),
    Watch(Response),
}

fn json_status(code: u16, st: &Status) -> Reply {
    let mut v = serde_json::to_value(st).expect("a Status serializes");
    v["kind"] = json!("Status");
    v["apiVersion"] = json!("v1");
    Reply::Json(code, v)
}

fn bad_request(msg: impl Into<String>) -> Reply {
    json_status(400, &status(400, "BadRequest", msg))
}

async fn handle(State(state): State<AppState>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, 16 << 20).await.unwrap_or_default();
    let body_json: Option<Value> = if bytes.is_empty() { None } else { serde_json::from_slice(&bytes).ok() };
    let path = parts.uri.path().to_owned();
    let query_string = parts.uri.query().map(str::to_owned);
    let query: HashMap<String, String> =
        Query::try_from_uri(&parts.uri).map(|Query(q)| q).unwrap_or_default();
    let at = Instant::now();
    let wall = SystemTime::now();

    let record = |status: u16| RequestRecord {
        seq: 0,
        at,
        wall,
        method: parts.method.to_string(),
        path: path.clone(),
        query: query_string.clone(),
        authorization: parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        content_type: parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        body: body_json.clone(),
        status,
        response_bytes: 0,
    };
    if state.switches.silence() == Silence::AfterRequest {
        // Logged with status 0: read, never answered. The connection is held until the server
        // is taken down or stopped, or the client gives up.
        state.store.lock().expect("store lock").record_request(record(0));
        let (mut shutdown, mut down) = (state.shutdown.clone(), state.down.subscribe());
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => {}
            _ = down.wait_for(|d| *d) => {}
        }
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }

    let fault = state.store.lock().expect("store lock").take_fault(parts.method.as_str(), &path);
    let unauthorized = state.bearer_token.as_ref().is_some_and(|token| {
        parts.headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok())
            != Some(format!("Bearer {token}").as_str())
    });
    let reply = match fault.or_else(|| state.switches.failing()) {
        Some(code) => json_status(code, &status(code, "ServiceUnavailable", "injected fault")),
        None if unauthorized => json_status(401, &status(401, "Unauthorized", "Unauthorized")),
        None if state.switches.watches_refused()
            && query.get("watch").is_some_and(|w| w == "true" || w == "1") =>
        {
            json_status(403, &status(403, "Forbidden", "watch is forbidden to these credentials"))
        }
        None if state.switches.nodes_hidden()
            && (path == "/api/v1/nodes" || path.starts_with("/api/v1/nodes/")) =>
        {
            hidden_nodes(&state, &path, &query)
        }
        None => route(&state, &parts.method, &path, &query, &parts.headers, body_json.as_ref()),
    };
    let (code, response_bytes, response) = match reply {
        Reply::Json(code, v) => {
            let sc = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let text = v.to_string();
            (code, text.len(), (sc, [(header::CONTENT_TYPE, "application/json")], text).into_response())
        }
        Reply::Watch(r) => (r.status().as_u16(), 0, r),
    };
    state.store.lock().expect("store lock").record_request(RequestRecord { response_bytes, ..record(code) });
    response
}

/// Node requests while Nodes are hidden: answered as if no Node existed. A watch sends nothing
/// and ends when the Nodes are shown again, so that the client lists again and finds them.
fn hidden_nodes(state: &AppState, path: &str, q: &HashMap<String, String>) -> Reply {
    let name = path.strip_prefix("/api/v1/nodes/").unwrap_or_default();
    if !name.is_empty() {
        return json_status(404, &not_found("nodes", name));
    }
    if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        let timeout: u64 = q.get("timeoutSeconds").and_then(|t| t.parse().ok()).unwrap_or(1800);
        let (shown, mut shutdown, mut down) =
            (state.switches.nodes_shown(), state.shutdown.clone(), state.down.subscribe());
        let end = async move {
            tokio::select! {
                () = shown => {}
                () = tokio::time::sleep(Duration::from_secs(timeout)) => {}
                _ = shutdown.wait_for(|s| *s) => {}
                _ = down.wait_for(|d| *d) => {}
            }
        };
        let body = futures::stream::once(end).filter_map(|()| async { None::<Result<Bytes, Infallible>> });
        let response = Response::builder()
            .status(200)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from_stream(body))
            .expect("a watch response builds");
        return Reply::Watch(response);
    }
    let rv = state.store.lock().expect("store lock").resource_version();
    Reply::Json(
        200,
        json!({"apiVersion": "v1", "kind": "NodeList", "metadata": {"resourceVersion": rv.to_string()}, "items": []}),
    )
}

fn route(
    state: &AppState,
    method: &Method,
    path: &str,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    body: Option<&Value>,
) -> Reply {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method, segs.as_slice()) {
        (&Method::GET, ["version"]) => {
            let git_version = state.store.lock().expect("store lock").git_version.clone();
            Reply::Json(200, version_info(&git_version))
        }
        (&Method::GET, ["api", "v1", "namespaces", "kube-system"]) => {
            let uid = state.store.lock().expect("store lock").cluster_uid.clone();
            Reply::Json(
                200,
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system", "uid": uid}}),
            )
        }
        (&Method::GET, ["api", "v1", "nodes"]) => list_or_watch(state, Resource::Nodes, None, q),
        (&Method::GET, ["api", "v1", "nodes", name]) => {
            let store = state.store.lock().expect("store lock");
            match store.node(name) {
                Some(n) => Reply::Json(200, to_json(n)),
                None => json_status(404, &not_found("nodes", name)),
            }
        }
        (&Method::PATCH, ["api", "v1", "nodes", name]) => patch_node(state, name, headers, body),
        (&Method::DELETE, ["api", "v1", "nodes", name]) => {
            let mut store = state.store.lock().expect("store lock");
            let Some(node) = store.node(name) else {
                return json_status(404, &not_found("nodes", name));
            };
            if let Some(r) = precondition_failed(body, node.metadata.uid.as_deref()) {
                return r;
            }
            match store.delete_node(name) {
                Some(n) => Reply::Json(200, to_json(&n)),
                None => json_status(404, &not_found("nodes", name)),
            }
        }
        (&Method::GET, ["api", "v1", "pods"]) => list_or_watch(state, Resource::Pods, None, q),
        (&Method::GET, ["api", "v1", "namespaces", ns, "pods"]) => {
            list_or_watch(state, Resource::Pods, Some(ns), q)
        }
        (&Method::GET, ["api", "v1", "namespaces", ns, "pods", name]) => {
            let store = state.store.lock().expect("store lock");
            match store.pod(ns, name) {
                Some(p) => Reply::Json(200, to_json(p)),
                None => json_status(404, &not_found("pods", name)),
            }
        }
        (&Method::DELETE, ["api", "v1", "namespaces", ns, "pods", name]) => {
            let mut store = state.store.lock().expect("store lock");
            let Some(pod) = store.pod(ns, name) else {
                return json_status(404, &not_found("pods", name));
            };
            if let Some(r) = precondition_failed(body, pod.metadata.uid.as_deref()) {
                return r;
            }
            let grace = body.and_then(|b| b.get("gracePeriodSeconds")).and_then(Value::as_i64);
            match store.delete_pod(&((*ns).to_owned(), (*name).to_owned()), grace) {
                Some(p) => Reply::Json(200, to_json(&p)),
                None => json_status(404, &not_found("pods", name)),
            }
        }
        (&Method::POST, ["api", "v1", "namespaces", ns, "pods", name, "eviction"]) => {
            let (code, st) = state.store.lock().expect("store lock").evict(ns, name, body);
            json_status(code, &st)
        }
        (_, ["apis", group @ ..]) => {
            route_apis(state, method, group, q, body).unwrap_or_else(|| not_served(method, path))
        }
        _ => not_served(method, path),
    }
}

/// What `/version` answers for `git_version` (`v1.30.2`): a `version.Info` as kube-apiserver
/// writes it, its `major` and `minor` read from the `gitVersion`.
fn version_info(git_version: &str) -> Value {
    let mut numbers = git_version.trim_start_matches('v').split(['.', '-', '+']);
    let (major, minor) = (numbers.next().unwrap_or_default(), numbers.next().unwrap_or_default());
    json!({
        "major": major,
        "minor": minor,
        "gitVersion": git_version,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2024-06-11T20:20:00Z",
        "goVersion": "go1.22.4",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// The `/apis/...` routes (named API groups), `group` being the path after `/apis`.
fn route_apis(
    state: &AppState,
    method: &Method,
    group: &[&str],
    q: &HashMap<String, String>,
    body: Option<&Value>,
) -> Option<Reply> {
    Some(match (method, group) {
        (&Method::GET, ["policy", "v1", "poddisruptionbudgets"]) => {
            list_or_watch(state, Resource::PodDisruptionBudgets, None, q)
        }
        (&Method::GET, ["policy", "v1", "namespaces", ns, "poddisruptionbudgets"]) => {
            list_or_watch(state, Resource::PodDisruptionBudgets, Some(ns), q)
        }
        (&Method::GET, ["policy", "v1", "namespaces", ns, "poddisruptionbudgets", name]) => {
            let store = state.store.lock().expect("store lock");
            match store.pdb_value(&((*ns).to_owned(), (*name).to_owned())) {
                Value::Null => json_status(404, &not_found("poddisruptionbudgets", name)),
                v => Reply::Json(200, v),
            }
        }
        (&Method::GET, ["apps", "v1", "daemonsets"]) => list_or_watch(state, Resource::DaemonSets, None, q),
        (&Method::GET, ["apps", "v1", "namespaces", ns, "daemonsets"]) => {
            list_or_watch(state, Resource::DaemonSets, Some(ns), q)
        }
        (&Method::GET, ["apps", "v1", "namespaces", ns, "daemonsets", name]) => {
            let store = state.store.lock().expect("store lock");
            match store.daemon_set(ns, name) {
                Some(ds) => Reply::Json(200, to_json(ds)),
                None => json_status(404, &not_found("daemonsets.apps", name)),
            }
        }
        (&Method::GET, ["storage.k8s.io", "v1", "volumeattachments"]) => {
            let store = state.store.lock().expect("store lock");
            if store.volume_attachments_forbidden {
                let message = "volumeattachments.storage.k8s.io is forbidden: User \"poolctl\" cannot list \
                               resource \"volumeattachments\" in API group \"storage.k8s.io\" at the cluster scope";
                return Some(json_status(403, &status(403, "Forbidden", message.to_owned())));
            }
            let items: Vec<Value> = store
                .volume_attachments
                .iter()
                .map(|(name, node)| {
                    json!({
                        "apiVersion": "storage.k8s.io/v1",
                        "kind": "VolumeAttachment",
                        "metadata": {"name": name, "resourceVersion": "1"},
                        "spec": {"attacher": "csi.fake", "nodeName": node, "source": {"persistentVolumeName": name}},
                    })
                })
                .collect();
            Reply::Json(
                200,
                json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachmentList", "metadata": {"resourceVersion": "1"}, "items": items}),
            )
        }
        (_, ["events.k8s.io", "v1", "namespaces", ns, "events", rest @ ..]) if rest.len() <= 1 => {
            let mut store = state.store.lock().expect("store lock");
            let (code, v) = store.events_api().serve(method, ns, rest.first().copied(), body);
            store.wake();
            Reply::Json(code, v)
        }
        (&Method::GET, ["coordination.k8s.io", "v1", "namespaces", ns, "leases"]) => {
            list_or_watch(state, Resource::Leases, Some(ns), q)
        }
        (_, ["coordination.k8s.io", "v1", "namespaces", ns, "leases", rest @ ..]) if rest.len() <= 1 => {
            let mut store = state.store.lock().expect("store lock");
            let (code, v) = store.serve_lease(method, ns, rest.first().copied(), body);
            Reply::Json(code, v)
        }
        _ => return None,
    })
}

fn not_served(method: &Method, path: &str) -> Reply {
    json_status(404, &status(404, "NotFound", format!("the fake API server does not serve {method} {path}")))
}

fn to_json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("a k8s object serializes")
}

/// `DeleteOptions` preconditions: a stale UID is a 409, as in the real API.
fn precondition_failed(body: Option<&Value>, uid: Option<&str>) -> Option<Reply> {
    let want = body?.pointer("/preconditions/uid")?.as_str()?;
    (Some(want) != uid).then(|| {
        json_status(
            409,
            &status(409, "Conflict", format!("Precondition failed: UID in precondition: {want}")),
        )
    })
}

fn patch_node(state: &AppState, name: &str, headers: &HeaderMap, body: Option<&Value>) -> Reply {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    // Server-side apply bodies are merged too: close enough for labels, taints and cordons.
    let supported = [
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
        "application/apply-patch+yaml",
    ];
    if !supported.iter().any(|s| ct.starts_with(s)) {
        return json_status(
            415,
            &status(415, "UnsupportedMediaType", format!("the fake API server does not accept {ct}")),
        );
    }
    let Some(patch) = body else {
        return bad_request("the patch body is not JSON");
    };
    let mut store = state.store.lock().expect("store lock");
    let Some(node) = store.node(name) else {
        return json_status(404, &not_found("nodes", name));
    };
    if let Some(want) = patch.pointer("/metadata/resourceVersion").and_then(Value::as_str)
        && Some(want) != node.metadata.resource_version.as_deref()
    {
        return json_status(
            409,
            &status(
                409,
                "Conflict",
                format!("Operation cannot be fulfilled on nodes \"{name}\": the object has been modified"),
            ),
        );
    }
    let mut value = to_json(node);
    merge_patch(&mut value, patch);
    let mut new: Node = match serde_json::from_value(value) {
        Ok(n) => n,
        Err(e) => return bad_request(format!("the patched Node does not decode: {e}")),
    };
    new.metadata.name = Some(name.to_owned());
    match store.replace_node(new) {
        Some(n) => Reply::Json(200, to_json(&n)),
        None => json_status(404, &not_found("nodes", name)),
    }
}

struct Filter {
    resource: Resource,
    namespace: Option<String>,
    labels: LabelQuery,
    fields: FieldQuery,
}

impl Filter {
    fn matches(&self, ns: Option<&str>, obj: &Value) -> bool {
        (self.namespace.is_none() || self.namespace.as_deref() == ns)
            && self.labels.matches(obj)
            && self.fields.matches(obj)
    }
}

fn kind_names(r: Resource) -> (&'static str, &'static str) {
    match r {
        Resource::Nodes => ("v1", "NodeList"),
        Resource::Pods => ("v1", "PodList"),
        Resource::PodDisruptionBudgets => ("policy/v1", "PodDisruptionBudgetList"),
        Resource::DaemonSets => ("apps/v1", "DaemonSetList"),
        Resource::Leases => ("coordination.k8s.io/v1", "LeaseList"),
    }
}

fn current_objects(store: &Store, f: &Filter) -> Vec<Value> {
    // Labels and the Node of a pod are matched on the typed objects first, so that a list
    // scoped by them costs what it returns (the real API server serves such lists from its
    // watch cache); the JSON match below still decides.
    let no_labels = BTreeMap::new();
    let labelled = |meta: &ObjectMeta| f.labels.matches_labels(meta.labels.as_ref().unwrap_or(&no_labels));
    let objs: Vec<(Option<String>, Value)> = match f.resource {
        Resource::Nodes => {
            store.nodes().filter(|n| labelled(&n.metadata)).map(|n| (None, to_json(n))).collect()
        }
        Resource::DaemonSets => {
            store.daemon_sets().map(|d| (d.metadata.namespace.clone(), to_json(d))).collect()
        }
        Resource::Leases => store.leases().all().map(|(ns, l)| (Some(ns.to_owned()), to_json(l))).collect(),
        Resource::Pods => {
            let pods: Box<dyn Iterator<Item = &Pod>> = match f.fields.required("spec.nodeName") {
                Some(node) => Box::new(store.pods_on(node)),
                None => Box::new(store.pods()),
            };
            pods.filter(|p| labelled(&p.metadata))
                .filter(|p| f.namespace.is_none() || p.metadata.namespace == f.namespace)
                .map(|p| (p.metadata.namespace.clone(), to_json(p)))
                .collect()
        }
        Resource::PodDisruptionBudgets => store
            .pdb_keys()
            .into_iter()
            .filter(|k| f.namespace.as_ref().is_none_or(|ns| *ns == k.0))
            .map(|k| (Some(k.0.clone()), store.pdb_value(&k)))
            .collect(),
    };
    objs.into_iter().filter(|(ns, v)| f.matches(ns.as_deref(), v)).map(|(_, v)| v).collect()
}

fn list_or_watch(
    state: &AppState,
    resource: Resource,
    namespace: Option<&str>,
    q: &HashMap<String, String>,
) -> Reply {
    let labels = match LabelQuery::parse(q.get("labelSelector").map_or("", String::as_str)) {
        Ok(l) => l,
        Err(e) => return bad_request(e),
    };
    let allowed: &[&str] = match resource {
        Resource::Nodes => &["metadata.name", "spec.unschedulable"],
        Resource::Pods => &[
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "status.phase",
            "spec.schedulerName",
            "spec.restartPolicy",
        ],
        Resource::PodDisruptionBudgets | Resource::DaemonSets | Resource::Leases => {
            &["metadata.name", "metadata.namespace"]
        }
    };
    let fields = match FieldQuery::parse(q.get("fieldSelector").map_or("", String::as_str), allowed) {
        Ok(f) => f,
        Err(e) => return bad_request(e),
    };
    let filter = Filter { resource, namespace: namespace.map(str::to_owned), labels, fields };
    if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        return watch(state, filter, q);
    }
    let store = state.store.lock().expect("store lock");
    let (api_version, kind) = kind_names(resource);
    Reply::Json(
        200,
        json!({
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"resourceVersion": store.resource_version().to_string()},
            "items": current_objects(&store, &filter),
        }),
    )
}

fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = json!({"type": kind, "object": object}).to_string();
    line.push('\n');
    Bytes::from(line)
}

fn bookmark(resource: Resource, rv: u64, initial_end: bool) -> Bytes {
    let (api_version, list_kind) = kind_names(resource);
    let kind = list_kind.trim_end_matches("List");
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    event_line("BOOKMARK", &json!({"apiVersion": api_version, "kind": kind, "metadata": meta}))
}

/// The event a watcher with this filter gets for a change, if any: an object that starts
/// matching is ADDED and one that stops matching is DELETED for it.
fn watch_line(filter: &Filter, c: &Change) -> Option<Bytes> {
    let ns = c.namespace.as_deref();
    let now = filter.matches(ns, &c.object);
    let before = c.previous.as_ref().map(|p| filter.matches(ns, p));
    let kind = match (c.kind, before, now) {
        (ChangeKind::Modified, Some(false), true) => ChangeKind::Added,
        (ChangeKind::Modified, Some(true), false) => ChangeKind::Deleted,
        (_, _, true) => c.kind,
        _ => return None,
    };
    Some(event_line(kind.as_str(), &c.object))
}

struct WatchStream {
    backlog: VecDeque<Bytes>,
    rx: broadcast::Receiver<Arc<Change>>,
    filter: Filter,
    deadline: tokio::time::Instant,
    shutdown: watch::Receiver<bool>,
    down: watch::Receiver<bool>,
}

/// A watch: past events after the given resourceVersion (or synthetic ADDED events for "" and
/// "0", as the real server sends), then live ones until timeoutSeconds or shutdown.
fn watch(state: &AppState, filter: Filter, q: &HashMap<String, String>) -> Reply {
    let timeout: u64 = q.get("timeoutSeconds").and_then(|t| t.parse().ok()).unwrap_or(1800);
    let rv_param = q.get("resourceVersion").cloned().unwrap_or_default();
    let send_initial = q.get("sendInitialEvents").is_some_and(|v| v == "true");
    let store = state.store.lock().expect("store lock");
    let mut backlog = VecDeque::new();
    if rv_param.is_empty() || rv_param == "0" || send_initial {
        for obj in current_objects(&store, &filter) {
            backlog.push_back(event_line("ADDED", &obj));
        }
        if send_initial {
            backlog.push_back(bookmark(filter.resource, store.resource_version(), true));
        }
    } else {
        let Ok(rv) = rv_param.parse::<u64>() else {
            return bad_request(format!("invalid resourceVersion {rv_param:?}"));
        };
        if let Some(changes) = store.history_since(rv, filter.resource) {
            backlog.extend(changes.iter().filter_map(|c| watch_line(&filter, c)));
        } else {
            let st = status(410, "Expired", format!("too old resource version: {rv}"));
            backlog.push_back(event_line("ERROR", &to_json(&st)));
        }
    }
    // Subscribing under the lock means no change falls between the backlog and the live feed.
    let rx = store.subscribe();
    drop(store);
    let stream = WatchStream {
        backlog,
        rx,
        filter,
        deadline: tokio::time::Instant::now() + Duration::from_secs(timeout),
        shutdown: state.shutdown.clone(),
        down: state.down.subscribe(),
    };
    let body = futures::stream::unfold(stream, |mut s| async move {
        loop {
            if let Some(line) = s.backlog.pop_front() {
                return Some((Ok::<_, Infallible>(line), s));
            }
            if *s.shutdown.borrow() || *s.down.borrow() {
                return None;
            }
            tokio::select! {
                change = s.rx.recv() => match change {
                    Ok(c) if c.resource == s.filter.resource => {
                        if let Some(line) = watch_line(&s.filter, &c) {
                            s.backlog.push_back(line);
                        }
                    }
                    Ok(_) => {}
                    // A lagging watcher is cut off, as the real server does; the client
                    // re-watches from its last resourceVersion.
                    Err(_) => return None,
                },
                () = tokio::time::sleep_until(s.deadline) => return None,
                _ = s.shutdown.changed() => return None,
                _ = s.down.changed() => return None,
            }
        }
    });
    let response = Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(body))
        .expect("a watch response builds");
    Reply::Watch(response)
}
