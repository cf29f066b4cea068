//! `watch` as a service: its endpoints (`--listen`: `/metrics`, `/healthz`, `/readyz`), the
//! Kubernetes Events it leaves on the Nodes it retires and on the pool's Lease, and its
//! notifications (`--notify`), all from the real binary against the fake API server.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::e2e_kube::{docker_when, node_event, when};
use crate::support::cli::{Process, Run, Stream};
use crate::support::fake_kube::{PdbBound, Store};
use crate::support::rig::{LIMIT, Rig};

/// `GET path` from `addr`: the status code and the body.
pub(crate) async fn get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect to --listen");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("read");
    let code = answer.split_whitespace().nth(1).and_then(|c| c.parse().ok()).expect("a status line");
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (code, body)
}

/// `POST path` to `addr` with `headers` and `body`: the status code and the body.
pub(crate) async fn post(addr: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect to --listen");
    let fields: Vec<String> = headers.iter().map(|(name, value)| format!("{name}: {value}\r\n")).collect();
    let fields = fields.concat();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{fields}Content-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("send");
    stream.write_all(body).await.expect("send the body");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("read");
    let code = answer.split_whitespace().nth(1).and_then(|c| c.parse().ok()).expect("a status line");
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (code, body)
}

/// `sha256=` and the hex HMAC-SHA256 of `body` under `key`, as GitHub signs a delivery.
pub(crate) fn hub_signature(key: &str, body: &[u8]) -> String {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes()).expect("any key");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The samples of a scrape by metric name and labels, as a Prometheus text parser reads them.
pub(crate) fn scrape(text: &str) -> BTreeMap<(String, BTreeMap<String, String>), f64> {
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("the Prometheus text format");
    scrape
        .samples
        .into_iter()
        .filter_map(|s| {
            let (prometheus_parse::Value::Counter(value)
            | prometheus_parse::Value::Gauge(value)
            | prometheus_parse::Value::Untyped(value)) = s.value
            else {
                return None;
            };
            let labels = s.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            Some(((s.metric, labels), value))
        })
        .collect()
}

pub(crate) fn sample(
    samples: &BTreeMap<(String, BTreeMap<String, String>), f64>,
    name: &str,
    labels: &[(&str, &str)],
) -> f64 {
    let labels: BTreeMap<String, String> =
        labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    *samples.get(&(name.to_owned(), labels.clone())).unwrap_or_else(|| {
        panic!("no {name}{labels:?} in {:#?}", samples.keys().filter(|(n, _)| n == name).collect::<Vec<_>>())
    })
}

/// A sample that counts something: a whole number.
pub(crate) fn whole(
    samples: &BTreeMap<(String, BTreeMap<String, String>), f64>,
    name: &str,
    labels: &[(&str, &str)],
) -> u64 {
    let v = sample(samples, name, labels);
    v.to_string().parse().unwrap_or_else(|_| panic!("{name}{labels:?} = {v}: not a count"))
}

/// A webhook receiver that refuses its first request (so that poolctl must retry) and keeps
/// the documents of the others; its URL carries a token, as a real webhook's does.
pub(crate) async fn receiver() -> (String, Arc<Mutex<Vec<Value>>>) {
    type Seen = (Arc<Mutex<Vec<Value>>>, Arc<Mutex<u32>>);
    async fn hook(State((docs, calls)): State<Seen>, Json(doc): Json<Value>) -> StatusCode {
        let mut calls = calls.lock().unwrap();
        *calls += 1;
        if *calls == 1 {
            return StatusCode::SERVICE_UNAVAILABLE;
        }
        docs.lock().unwrap().push(doc);
        StatusCode::OK
    }
    let docs = Arc::new(Mutex::new(Vec::new()));
    let app = axum::Router::new()
        .route("/hooks/s3cret-token", axum::routing::post(hook))
        .with_state((Arc::clone(&docs), Arc::new(Mutex::new(0))));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/hooks/s3cret-token", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, docs)
}

fn reasons(events: &[k8s_openapi::api::events::v1::Event]) -> Vec<&str> {
    events.iter().map(|e| e.reason.as_deref().unwrap_or_default()).collect()
}

/// After one rollout of a one-instance pool that a budget held up: every metric is there, as
/// Prometheus parses it. Returns the revision the source info names.
async fn check_metrics(addr: &str, pool: &str) -> String {
    // The metrics, as Prometheus parses them, scraped until the reconcile that rolled out has
    // recorded its end (it prints its summary first).
    let recorded = async {
        loop {
            let (code, text) = get(addr, "/metrics").await;
            assert_eq!(code, 200, "{text}");
            if text.contains(r#"trigger="source_changed",result="applied""#) {
                return scrape(&text);
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    let m = tokio::time::timeout(LIMIT, recorded).await.expect("the rollout's reconcile is recorded");
    let p = pool;
    assert!(
        sample(
            &m,
            "poolctl_reconcile_total",
            &[("pool", p), ("trigger", "source_changed"), ("result", "applied")]
        ) >= 1.0
    );
    assert!(
        sample(&m, "poolctl_reconcile_total", &[("pool", p), ("trigger", "start"), ("result", "in_sync")])
            >= 1.0
    );
    for action in ["create", "await-ready", "cordon", "drain", "stop", "delete-node", "remove"] {
        assert_eq!(whole(&m, "poolctl_step_duration_seconds_count", &[("action", action)]), 1, "{action}");
    }
    assert!(sample(&m, "poolctl_reconcile_duration_seconds_count", &[]) >= 2.0);
    assert_eq!(whole(&m, "poolctl_pool_instances", &[("pool", p), ("state", "desired")]), 1);
    assert_eq!(whole(&m, "poolctl_pool_instances", &[("pool", p), ("state", "up")]), 1);
    assert_eq!(whole(&m, "poolctl_pool_instances", &[("pool", p), ("state", "outdated")]), 0);
    assert_eq!(whole(&m, "poolctl_pool_instances", &[("pool", p), ("state", "retiring")]), 0);
    assert_eq!(whole(&m, "poolctl_lock_held", &[("pool", p)]), 0, "released after the rollout");
    assert!(sample(&m, "poolctl_evictions_total", &[("result", "refused")]) >= 2.0);
    assert_eq!(whole(&m, "poolctl_evictions_total", &[("result", "evicted")]), 1);
    assert!(sample(&m, "poolctl_last_successful_reconcile_timestamp_seconds", &[("pool", p)]) > 1.7e9);
    let revisions: Vec<_> = m.keys().filter(|(n, _)| n == "poolctl_source_info").collect();
    assert_eq!(revisions.len(), 1, "only the current revision: {revisions:?}");
    assert!(revisions[0].1["revision"].starts_with("sha256:"), "{revisions:?}");

    revisions[0].1["revision"].clone()
}

#[tokio::test]
async fn watch_serves_metrics_and_health_leaves_events_on_each_retired_node_and_notifies() {
    let Some(rig) = Rig::new().await else { return };
    let v1 = rig.spec().replicas(1);
    let old = rig.start(&v1).await.remove(0);
    let pool = rig.pool().to_owned();
    // A budget at its minimum: the drain is refused until it is relaxed.
    rig.fake.add_app("default", "web", 1);
    rig.fake.put_pdb("default", "web-pdb", "web", PdbBound::MinAvailable(1));
    let (url, docs) = receiver().await;

    let mut watch = rig.s.spawn("watch", &["--listen", "127.0.0.1:0", "--notify", &url]);
    let line = watch.wait_for(Stream::Stderr, "serving /metrics, /healthz and /readyz on http://");
    let addr = line.rsplit("http://").next().expect("an address").trim().to_owned();
    // Ready once the first reconcile has ended: asked as a kubelet's probe asks, again and
    // again, since nothing else says when the loop has taken note of it.
    let ready = async {
        loop {
            let (code, body) = get(&addr, "/readyz").await;
            if code == 200 {
                return body;
            }
            assert_eq!(code, 503, "{body}");
            assert!(body.contains("source") || body.contains("reconcile"), "a reason: {body}");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    assert_eq!(tokio::time::timeout(LIMIT, ready).await.expect("ready"), "ok\n");
    assert_eq!(get(&addr, "/healthz").await, (200, "ok\n".to_owned()));
    assert_eq!(get(&addr, "/nothing").await.0, 404);

    // A new template: the old Node is cordoned, its drain refused by the budget (twice: the
    // second refusal counts in the same Event), then let through.
    rig.write(&v1.clone().env("VERSION", "2"));
    let refused_twice = |s: &Store| {
        let blocked = s.k8s_events().about("Node", &old);
        blocked.iter().any(|e| {
            e.reason.as_deref() == Some("DrainBlocked") && e.series.as_ref().is_some_and(|x| x.count >= 2)
        })
    };
    tokio::time::timeout(LIMIT, rig.fake.wait_until(refused_twice))
        .await
        .expect("the drain is refused twice");
    rig.fake.put_pdb("default", "web-pdb", "web", PdbBound::MaxUnavailable(1));
    watch.applied();
    let gone = |s: &Store| {
        let told = s.k8s_events().about("Node", &old);
        s.node(&old).is_none() && told.iter().any(|e| e.reason.as_deref() == Some("NodeDeleted"))
    };
    tokio::time::timeout(LIMIT, rig.fake.wait_until(gone)).await.expect("the old Node is deleted, and told");

    // `kubectl describe node` tells the retirement, step by step; a repeated refusal is one
    // Event counted as a series, naming the budget.
    let events = rig.fake.events_about("Node", &old);
    assert_eq!(
        reasons(&events),
        ["Cordoned", "Draining", "DrainBlocked", "Drained", "NodeDeleted"],
        "{events:#?}"
    );
    let blocked = &events[2];
    assert!(blocked.note.as_deref().is_some_and(|n| n.contains("web-pdb")), "{blocked:?}");
    assert_eq!(blocked.type_.as_deref(), Some("Warning"));
    assert!(
        events.iter().all(|e| e.reporting_controller.as_deref() == Some("poolctl.dev/poolctl")),
        "{events:#?}"
    );
    let rollout = rig.fake.events_about("Lease", &format!("poolctl-{pool}"));
    // The apply that created the pool told its rollout too.
    let told = ["RolloutStarted", "RolloutSucceeded", "RolloutStarted", "RolloutSucceeded"];
    assert_eq!(reasons(&rollout), told, "{rollout:#?}");

    let revision = check_metrics(&addr, &pool).await;

    // The receiver heard the rollout start (once its first refusal was retried) and succeed.
    let delivered = |want: usize| {
        let docs = Arc::clone(&docs);
        async move {
            while docs.lock().unwrap().len() < want {
                tokio::task::yield_now().await;
            }
        }
    };
    tokio::time::timeout(LIMIT, delivered(2)).await.expect("two notifications");
    let docs = docs.lock().unwrap().clone();
    let results: Vec<&str> = docs.iter().map(|d| d["result"].as_str().unwrap_or_default()).collect();
    assert_eq!(results, ["started", "succeeded"], "{docs:#?}");
    assert!(
        docs.iter().all(|d| d["pool"] == pool.as_str() && d["revision"] == revision.as_str()),
        "{docs:#?}"
    );
    assert_eq!(docs[1]["stepsDone"], 7, "{docs:#?}");

    assert!(watch.signal("TERM").success());
    let said = watch.output(Stream::Stderr) + &watch.output(Stream::Stdout);
    assert!(!said.contains("s3cret-token"), "the webhook's token is never printed:\n{said}");
}

#[tokio::test]
async fn a_cluster_that_refuses_events_costs_one_warning_and_no_step() {
    let Some(rig) = Rig::new().await else { return };
    let v1 = rig.spec().replicas(1);
    let old = rig.start(&v1).await.remove(0);
    let before = rig.fake.store().k8s_events().all().len();
    rig.fake.store().events_api().forbidden = true;
    rig.write(&v1.clone().env("VERSION", "2"));
    let run = rig.apply().expect_code(0);
    assert!(run.stdout.contains("Apply complete"), "{}", run.stdout);
    assert!(rig.fake.node(&old).is_none());
    let warnings = run.stderr.matches("cannot record Kubernetes Events").count();
    assert_eq!(warnings, 1, "{}", run.stderr);
    assert!(run.stderr.contains("forbidden"), "{}", run.stderr);
    assert_eq!(rig.fake.store().k8s_events().all().len(), before, "none recorded since");
}

#[tokio::test]
async fn two_watches_one_killed_mid_rollout_the_other_takes_over_and_finishes_it_safely() {
    let Some(rig) = Rig::new().await else { return };
    let v1 = rig.spec();
    let old = rig.start(&v1).await;
    // Three app pods under a budget of two: a drain may evict one at a time only.
    rig.fake.add_app("default", "web", 3);
    rig.fake.put_pdb("default", "web-pdb", "web", PdbBound::MinAvailable(2));
    let healthy = |s: &Store| s.events().last().is_some_and(|e| e.app_healthy.get("default/web") == Some(&3));
    tokio::time::timeout(LIMIT, rig.fake.wait_until(healthy)).await.expect("the app runs");

    // Two replicas of the same watch, with short leases so that a dead one's lapses soon.
    let replica = || {
        let mut command = rig.s.command("watch", &[]);
        command.env("POOLCTL_LOCK_LEASE", "3s");
        let mut watch = Process::spawn(command);
        watch.wait_for(Stream::Stderr, "in sync");
        watch
    };
    let (mut first, mut second) = (replica(), replica());
    let (from, since) = (rig.last_seq(), std::time::SystemTime::now());
    rig.write(&v1.clone().env("VERSION", "2"));

    // Whoever took the pool's lock is killed outright in the middle of its first drain.
    let draining = |s: &Store| s.evictions().iter().any(|e| e.status == 201);
    tokio::time::timeout(LIMIT, rig.fake.wait_until(draining)).await.expect("a drain starts");
    let lease = format!("poolctl-{}", rig.pool());
    let holder =
        rig.fake.lease("kube-system", &lease).and_then(|l| l.spec?.holder_identity).expect("a holder");
    let (killed, survivor) = if holder.contains(&format!("pid {} ", first.pid())) {
        (&mut first, &mut second)
    } else {
        (&mut second, &mut first)
    };
    assert!(holder.contains(&format!("pid {} ", killed.pid())), "{holder}");
    killed.kill();
    survivor.wait_for(Stream::Stderr, "standing by");
    survivor.applied();

    // The survivor took the lock only once the dead one's had lapsed: never two at once.
    let writes = rig.fake.lease_writes();
    let lease = lease.as_str();
    let by = |pid: u32| {
        move |w: &&crate::support::fake_kube::LeaseWrite| {
            w.name == lease && w.holder.as_deref().is_some_and(|h| h.contains(&format!("pid {pid} ")))
        }
    };
    let last_of_killed = writes.iter().rev().find(by(killed.pid())).expect("the killed one held it").at;
    let first_of_survivor = writes.iter().find(by(survivor.pid())).expect("the survivor took it").at;
    assert!(
        first_of_survivor.duration_since(last_of_killed) >= std::time::Duration::from_millis(2500),
        "taken {:?} after the last renewal of a 3s lease",
        first_of_survivor.duration_since(last_of_killed)
    );

    // Finished: every old Node cordoned once, drained before its container stopped, deleted
    // once; three new instances created, no more; the budget held at every moment.
    let events = rig.events_after(from);
    let docker_events = rig.docker_events(since);
    for name in &old {
        let cordons = events.iter().filter(|e| node_event(e) == Some(("cordon", name.as_str()))).count();
        assert_eq!(cordons, 1, "{name} cordoned once");
        let deletes = events.iter().filter(|e| node_event(e) == Some(("delete", name.as_str()))).count();
        assert_eq!(deletes, 1, "{name}'s Node deleted once");
        let last_eviction = when(&events, "evict", name, true).expect("evicted");
        let stop = docker_when(&docker_events, &["kill", "die", "stop"], name).expect("stopped");
        assert!(last_eviction < stop, "{name}: drained before its container stopped");
    }
    for e in &events {
        let up = e.app_healthy.get("default/web").copied().unwrap_or_default();
        assert!(up >= 2, "the budget was violated: {up} web pods after {:?}", e.kind);
    }
    let containers = rig.containers().await;
    assert_eq!(containers.len(), 3);
    assert!(containers.keys().all(|n| !old.contains(n)) && containers.values().all(|(running, _)| *running));
    let mut started = docker_events.iter().filter(|e| e.action == "start").map(|e| &e.name);
    assert!(started.all(|n| containers.contains_key(n)), "no instance created twice: {docker_events:#?}");
    assert_eq!(rig.poolctl("plan", &["--detailed-exitcode"]).code, 0, "nothing left to do");
    assert!(survivor.signal("TERM").success());
}

/// A commit with errors is kept out, and said where a supervisor looks: `/readyz` fails with
/// the errors and their places, a metric counts it, and the next good revision clears both.
/// The build and each pool's sync are gauges to alert on.
#[tokio::test]
async fn a_broken_spec_makes_readyz_fail_with_its_errors_until_a_good_one() {
    let Some(s) = crate::support::scenario::Scenario::with_docker().await else { return };
    let pool = s.pool().replicas(1);
    s.write_pool(&pool);
    let mut watch = s.spawn("watch", &["--listen", "127.0.0.1:0"]);
    let line = watch.wait_for(Stream::Stderr, "serving /metrics, /healthz and /readyz on http://");
    let addr = line.rsplit("http://").next().expect("an address").trim().to_owned();
    watch.applied();
    let readyz = |want: u16| {
        let addr = addr.clone();
        async move {
            loop {
                let (code, body) = get(&addr, "/readyz").await;
                if code == want {
                    return body;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    };
    tokio::time::timeout(LIMIT, readyz(200)).await.expect("ready once applied");
    let m = scrape(&get(&addr, "/metrics").await.1);
    assert_eq!(whole(&m, "poolctl_pool_in_sync", &[("pool", s.pool_name())]), 1);
    let version = env!("CARGO_PKG_VERSION");
    let build = m.keys().find(|(n, _)| n == "poolctl_build_info").expect("poolctl_build_info");
    assert_eq!(build.1["version"], version, "{build:?}");

    s.write(
        "pool.yaml",
        "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: a\nspec:\n  replicas: x\n",
    );
    let why = tokio::time::timeout(LIMIT, readyz(503)).await.expect("not ready with a broken spec");
    assert!(why.contains("has errors; keeping the last good state"), "{why}");
    assert!(why.contains("pool.yaml:6:"), "the place of the error: {why}");
    let m = scrape(&get(&addr, "/metrics").await.1);
    assert!(sample(&m, "poolctl_source_errors_total", &[("kind", "invalid")]) >= 1.0);
    assert_eq!(get(&addr, "/healthz").await.0, 200, "alive all the same");

    s.write_pool(&pool);
    tokio::time::timeout(LIMIT, readyz(200)).await.expect("ready again with a good spec");
    assert!(watch.signal("TERM").success());
}

/// Each pool of a rollout is told its own outcome: the pool whose new template fails its
/// bootstrap is reported failed, and the other, which goes on to the end, succeeded.
#[tokio::test]
async fn a_two_pool_rollout_where_one_fails_reports_success_for_the_other() {
    let Some(s) = crate::support::scenario::Scenario::with_docker().await else { return };
    let good = s.pool().replicas(1).env("V", "1");
    let other = format!("{}-b", s.pool_name());
    let bad = s.pool().named(&other).replicas(1).env("V", "1");
    s.write_pool(&good);
    s.write("b.yaml", &bad.to_string());
    let (url, docs) = receiver().await;
    let mut watch = s.spawn("watch", &["--notify", &url]);
    watch.applied();

    s.write("b.yaml", &bad.clone().env("V", "2").bootstrap(&["sh", "-c", "exit 3"], None).to_string());
    s.write_pool(&good.clone().env("V", "2"));
    let last = |pool: &str| {
        let docs = docs.lock().unwrap();
        docs.iter()
            .rev()
            .find(|d| d["pool"] == pool)
            .map(|d| d["result"].as_str().unwrap_or_default().to_owned())
    };
    let told = async {
        loop {
            if last(&other).as_deref() == Some("failed")
                && last(s.pool_name()).as_deref() == Some("succeeded")
            {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    let heard = tokio::time::timeout(LIMIT, told).await;
    assert!(watch.signal("TERM").success());
    let docs = docs.lock().unwrap().clone();
    assert!(heard.is_ok(), "each pool its own outcome: {docs:#?}");
    let failed_good = docs.iter().any(|d| d["pool"] == s.pool_name() && d["result"] == "failed");
    assert!(!failed_good, "the other pool's failure is not this one's: {docs:#?}");
}

/// A retirement that waits for its Node's deletion hook is seen from outside while it waits: a
/// gauge counts it by pool and reason, and `--notify` hears once which instance waits for what;
/// the gauge falls back once the hook is removed and the retirement goes on.
#[tokio::test]
async fn a_retirement_waiting_for_a_hook_is_counted_and_notified_once() {
    let Some(rig) = Rig::new().await else { return };
    let v1 = rig.spec().replicas(1);
    let old = rig.start(&v1).await.remove(0);
    let pool = rig.pool().to_owned();
    let hook = "pre-drain.delete.hook.poolctl.dev/backup";
    rig.fake.store().update_node(&old, |n| {
        n.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(hook.into(), "my-operator".into());
    });
    let (url, docs) = receiver().await;
    rig.write(&v1.clone().env("VERSION", "2"));
    let mut watch = rig.s.spawn("watch", &["--listen", "127.0.0.1:0", "--notify", &url]);
    let line = watch.wait_for(Stream::Stderr, "serving /metrics, /healthz and /readyz on http://");
    let addr = line.rsplit("http://").next().expect("an address").trim().to_owned();
    watch.wait_for(Stream::Stdout, &format!("{old}: waiting for its pre-drain hooks: backup (my-operator)"));

    let waiting = |value: f64| {
        let (addr, pool) = (addr.clone(), pool.clone());
        async move {
            let labels =
                BTreeMap::from([("pool".to_owned(), pool), ("reason".to_owned(), "hooks".to_owned())]);
            let key = ("poolctl_retirements_waiting".to_owned(), labels);
            while scrape(&get(&addr, "/metrics").await.1).get(&key) != Some(&value) {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    };
    tokio::time::timeout(LIMIT, waiting(1.0)).await.expect("the wait is counted");
    let heard = || {
        let docs = docs.lock().unwrap().clone();
        docs.into_iter().filter(|d| d["result"] == "waiting").collect::<Vec<_>>()
    };
    let told = async {
        while heard().is_empty() {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(LIMIT, told).await.expect("the wait is notified");
    let notice = &heard()[0];
    assert_eq!(notice["pool"], pool.as_str(), "{notice:#?}");
    let error = notice["error"].as_str().unwrap_or_default();
    assert!(error.contains(&old) && error.contains("backup (my-operator)"), "{notice:#?}");

    rig.fake.store().update_node(&old, |n| {
        n.metadata.annotations.get_or_insert_with(BTreeMap::new).remove(hook);
    });
    watch.applied();
    tokio::time::timeout(LIMIT, waiting(0.0)).await.expect("the wait's end is counted");
    assert_eq!(heard().len(), 1, "one notice per wait: {:#?}", heard());
    assert!(watch.signal("TERM").success());
}

/// A GitHub push to `POST /hooks/github` makes watch fetch and plan the new commit at once,
/// though its fetch interval is an hour; a delivery with a wrong signature is refused with 401
/// and makes it fetch nothing, and the secret is never said.
#[tokio::test]
async fn a_signed_github_push_makes_watch_fetch_at_once_and_a_wrong_one_nothing() {
    let Some(mut s) = crate::support::scenario::Scenario::with_docker().await else { return };
    s.init_git();
    let v1 = s.pool().replicas(1).env("V", "1");
    s.write_pool(&v1);
    s.commit("first");
    // `file://localhost/`: a repository watch cannot watch the refs of, as a remote one.
    let url = format!("file://localhost{}", s.dir().display());
    s.set_source(&["--source", &url, "--ref", "main"]);
    let secret = s.path("hook-secret");
    std::fs::write(&secret, "s3cret-hook\n").unwrap();
    let args = ["--interval", "1h", "--resync", "1h", "--listen", "127.0.0.1:0", "--hook-secret"];
    let mut watch = s.spawn("watch", &[&args[..], &[secret.to_str().unwrap()]].concat());
    let line = watch.wait_for(Stream::Stderr, "/hooks/ on http://");
    let addr = line.rsplit("http://").next().expect("an address").trim().to_owned();
    watch.applied();

    s.write_pool(&v1.clone().env("V", "2"));
    let commit = s.commit("bump")[..7].to_owned();
    let push = br#"{"ref":"refs/heads/main"}"#;
    let forged = hub_signature("guess", push);
    let headers = [("X-GitHub-Event", "push"), ("X-Hub-Signature-256", forged.as_str())];
    let (code, body) = post(&addr, "/hooks/github", &headers, push).await;
    assert_eq!((code, body.as_str()), (401, "unauthorized\n"));
    assert_eq!(post(&addr, "/hooks/github", &[("X-GitHub-Event", "push")], push).await.0, 401, "unsigned");
    watch.wait_for(Stream::Stderr, "receiver github: refused");

    let signed = hub_signature("s3cret-hook", push);
    let headers = [("X-GitHub-Event", "push"), ("X-Hub-Signature-256", signed.as_str())];
    assert_eq!(post(&addr, "/hooks/github", &headers, push).await.0, 202);
    watch.wait_for(Stream::Stdout, &format!("({commit})"));
    watch.applied();
    // Counted once the reconcile has ended, a moment after its summary: scraped until then.
    let counted = async {
        loop {
            let (_, text) = get(&addr, "/metrics").await;
            if text.contains(r#"trigger="receiver",result="applied""#) {
                return scrape(&text);
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    let m = tokio::time::timeout(LIMIT, counted).await.expect("the receiver's reconcile is counted");
    let labels = [("pool", s.pool_name()), ("trigger", "receiver"), ("result", "applied")];
    assert_eq!(whole(&m, "poolctl_reconcile_total", &labels), 1);

    assert!(watch.signal("TERM").success());
    let said = watch.output(Stream::Stderr) + &watch.output(Stream::Stdout);
    assert_eq!(
        said.matches("a push; looking at the source now").count(),
        1,
        "only the signed push looked:\n{said}"
    );
    assert!(!said.contains("s3cret-hook"), "the secret is never printed:\n{said}");
}

/// What a fake GitHub API heard: per request, the commit, the token it was given, and the
/// status document.
type Statuses = Arc<Mutex<Vec<(String, String, Value)>>>;

/// A fake GitHub API that takes commit statuses of `acme/fleet`, as `POST
/// /repos/acme/fleet/statuses/{sha}` does (201); its base URL and what it heard.
async fn fake_github() -> (String, Statuses) {
    async fn status(
        State(seen): State<Statuses>,
        axum::extract::Path(sha): axum::extract::Path<String>,
        headers: axum::http::HeaderMap,
        Json(doc): Json<Value>,
    ) -> StatusCode {
        let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
        seen.lock().unwrap().push((sha, auth.to_owned(), doc));
        StatusCode::CREATED
    }
    let seen = Statuses::default();
    let app = axum::Router::new()
        .route("/api/v3/repos/acme/fleet/statuses/{sha}", axum::routing::post(status))
        .with_state(Arc::clone(&seen));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/api/v3", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

/// `--notify github://OWNER/REPO`: each pool's rollout of a commit sets its own status on
/// that commit, `pending` then `success`, or `failure` for the pool whose new template fails,
/// with the token of `--notify-token-file`, which is never printed.
#[tokio::test(flavor = "multi_thread")]
async fn commit_statuses_are_set_per_pool_on_the_commit_rolled_out() {
    let Some(mut s) = crate::support::scenario::Scenario::with_docker().await else { return };
    s.init_git();
    let good = s.pool().replicas(1).env("V", "1");
    let other = format!("{}-b", s.pool_name());
    let bad = s.pool().named(&other).replicas(1).env("V", "1");
    s.write_pool(&good);
    s.write("b.yaml", &bad.to_string());
    s.commit("first");
    let source = s.dir().display().to_string();
    s.set_source(&["--source", &source, "--ref", "main"]);
    let (api, seen) = fake_github().await;
    let token = s.path("github-token");
    std::fs::write(&token, "ghp_s3cretToken\n").unwrap();
    let notify = format!("github://acme/fleet?api={api}");
    let args = ["--notify", &notify, "--notify-token-file", token.to_str().unwrap()];
    let mut watch = s.spawn("watch", &args);
    watch.applied();

    s.write("b.yaml", &bad.clone().env("V", "2").bootstrap(&["sh", "-c", "exit 3"], None).to_string());
    s.write_pool(&good.clone().env("V", "2"));
    let sha = s.commit("second");
    let states = |pool: &str| -> Vec<String> {
        let seen = seen.lock().unwrap();
        seen.iter()
            .filter(|(at, _, doc)| *at == sha && doc["context"] == format!("poolctl/{pool}"))
            .map(|(_, _, doc)| doc["state"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let told = async {
        while states(s.pool_name()).len() < 2 || states(&other).len() < 2 {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    let heard = tokio::time::timeout(LIMIT, told).await;
    assert!(watch.signal("TERM").success());
    let all = seen.lock().unwrap().clone();
    assert!(heard.is_ok(), "two statuses of each pool on {sha}: {all:#?}");
    assert_eq!(states(s.pool_name()), ["pending", "success"], "{all:#?}");
    assert_eq!(states(&other), ["pending", "failure"], "{all:#?}");
    assert!(all.iter().all(|(_, auth, _)| auth == "Bearer ghp_s3cretToken"), "{all:#?}");
    let failure = all.iter().find(|(at, _, d)| *at == sha && d["state"] == "failure").unwrap();
    assert!(failure.2["description"].as_str().unwrap().contains("bootstrap"), "{failure:#?}");
    let said = watch.output(Stream::Stderr) + &watch.output(Stream::Stdout);
    assert!(!said.contains("ghp_s3cret"), "the token is never printed:\n{said}");
}

/// `apply --notify generic-hmac+URL`: the rollout's notices are signed with the key of
/// `--notify-token-file` (`X-Signature`, checked here by the receiver), and delivered before
/// apply exits.
#[tokio::test(flavor = "multi_thread")]
async fn apply_signs_its_notifications_and_delivers_them_before_it_exits() {
    type Signed = Arc<Mutex<Vec<(bool, Value)>>>;
    async fn hook(
        State(seen): State<Signed>,
        headers: axum::http::HeaderMap,
        body: axum::body::Bytes,
    ) -> StatusCode {
        let signature = headers.get("x-signature").and_then(|v| v.to_str().ok()).unwrap_or_default();
        let valid = signature == hub_signature("k3y-s3cret", &body);
        let doc = serde_json::from_slice(&body).unwrap_or(Value::Null);
        seen.lock().unwrap().push((valid, doc));
        StatusCode::OK
    }
    let Some(s) = crate::support::scenario::Scenario::with_docker().await else { return };
    s.write_pool(&s.pool().replicas(1));
    let seen = Signed::default();
    let app = axum::Router::new().route("/hook", axum::routing::post(hook)).with_state(Arc::clone(&seen));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("generic-hmac+http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let key = s.path("hmac-key");
    std::fs::write(&key, "k3y-s3cret\n").unwrap();

    let mut apply =
        s.command("apply", &["--yes", "--notify", &url, "--notify-token-file", key.to_str().unwrap()]);
    let run = tokio::task::spawn_blocking(move || Run::of(&mut apply)).await.unwrap();
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let seen = seen.lock().unwrap().clone();
    let results: Vec<&str> = seen.iter().map(|(_, d)| d["result"].as_str().unwrap_or_default()).collect();
    assert_eq!(results, ["started", "succeeded"], "{seen:#?}");
    assert!(seen.iter().all(|(valid, d)| *valid && d["pool"] == s.pool_name()), "{seen:#?}");
    assert!(seen[1].1["stepsDone"].as_u64() > Some(0), "the steps it carried out: {seen:#?}");
    assert!(!(run.stdout + &run.stderr).contains("k3y-s3cret"));

    // `watch` names the same revision of the same files as apply did (its source info).
    let mut watch = s.spawn("watch", &["--listen", "127.0.0.1:0"]);
    let line = watch.wait_for(Stream::Stderr, "serving /metrics, /healthz and /readyz on http://");
    let addr = line.rsplit("http://").next().expect("an address").trim().to_owned();
    let named = async {
        loop {
            let (_, text) = get(&addr, "/metrics").await;
            let info = scrape(&text).into_keys().find(|(name, _)| name == "poolctl_source_info");
            if let Some((_, labels)) = info {
                return labels["revision"].clone();
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    let named = tokio::time::timeout(LIMIT, named).await.expect("watch names the source's revision");
    assert!(seen.iter().all(|(_, d)| d["revision"] == named.as_str()), "watch: {named}; apply: {seen:#?}");
    assert!(watch.signal("TERM").success());
}
