//! Executor tests against in-memory backends that record every call.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use super::*;
use crate::backend::ExecOutput;
use crate::plan::{DrainPreview, PoolStatus, Summary};
use crate::spec::{BootstrapStep, Metadata, Pool, PoolSpec, Rollout, Template};
use crate::world::{Container, Node, Pdb, Pod};

/// Records calls; fails the ones named in `fail` (as `verb name`).
#[derive(Default)]
struct Fake {
    calls: Mutex<Vec<String>>,
    fail: BTreeSet<String>,
    /// Calls in flight at once, at most, to see that creations overlap.
    in_flight: Mutex<(usize, usize)>,
    exit_code: i64,
    interrupt_after: Option<(String, &'static Interrupt)>,
}

impl Fake {
    async fn call(&self, what: String) -> Result<(), BackendError> {
        {
            let mut f = self.in_flight.lock().unwrap();
            f.0 += 1;
            f.1 = f.1.max(f.0);
        }
        // Yield so that concurrent calls can overlap.
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        self.in_flight.lock().unwrap().0 -= 1;
        self.calls.lock().unwrap().push(what.clone());
        if let Some((after, interrupt)) = &self.interrupt_after
            && *after == what
        {
            interrupt.trigger();
        }
        if self.fail.contains(&what) { Err(BackendError::Failed(format!("{what} refused"))) } else { Ok(()) }
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

impl Containers for Fake {
    async fn list(&self) -> Result<Vec<Container>, BackendError> {
        Ok(Vec::new())
    }
    async fn ensure_image(&self, image: &str) -> Result<bool, BackendError> {
        self.call(format!("image {image}")).await.map(|()| false)
    }
    async fn network_exists(&self, name: &str) -> Result<bool, BackendError> {
        Ok(name != "missing")
    }
    async fn create(&self, spec: &NewContainer) -> Result<(), BackendError> {
        self.call(format!("create {}", spec.name)).await
    }
    async fn exec(&self, name: &str, _: &[String], _: Duration) -> Result<ExecOutput, BackendError> {
        self.call(format!("exec {name}")).await?;
        Ok(ExecOutput { exit_code: self.exit_code, output: "join failed\n".into() })
    }
    async fn wait_up(&self, name: &str, _: Duration) -> Result<(), BackendError> {
        self.call(format!("wait-up {name}")).await
    }
    async fn stop(&self, name: &str, _: Duration) -> Result<(), BackendError> {
        self.call(format!("stop {name}")).await
    }
    async fn remove(&self, name: &str) -> Result<(), BackendError> {
        self.call(format!("remove {name}")).await
    }
}

impl Cluster for Fake {
    async fn nodes(&self, _: &[String]) -> Result<Vec<Node>, BackendError> {
        Ok(Vec::new())
    }
    async fn pods_and_pdbs(&self, _: &[String]) -> Result<(Vec<Pod>, Vec<Pdb>), BackendError> {
        Ok((Vec::new(), Vec::new()))
    }
    async fn await_ready(&self, node: &str, _: Duration) -> Result<(), BackendError> {
        self.call(format!("node-ready {node}")).await
    }
    async fn configure(
        &self,
        node: &str,
        _: &BTreeMap<String, String>,
        _: &[crate::spec::Taint],
    ) -> Result<(), BackendError> {
        self.call(format!("configure {node}")).await
    }
    async fn cordon(&self, node: &str) -> Result<(), BackendError> {
        self.call(format!("cordon {node}")).await
    }
    async fn drain(&self, node: &str, _: Duration) -> Result<(), BackendError> {
        self.call(format!("drain {node}")).await
    }
    async fn delete_node(&self, node: &str) -> Result<(), BackendError> {
        self.call(format!("delete-node {node}")).await
    }
}

fn desired(bootstrap: usize, network: Option<&str>) -> Desired {
    let pool = Pool {
        api_version: crate::spec::API_VERSION.into(),
        kind: crate::spec::KIND_POOL.into(),
        metadata: Metadata { name: "w".into() },
        spec: PoolSpec {
            replicas: 2,
            template: Template {
                image: "img:1".into(),
                command: None,
                entrypoint: None,
                env: BTreeMap::new(),
                labels: BTreeMap::new(),
                network: network.map(str::to_owned),
                privileged: false,
                volumes: Vec::new(),
                tmpfs: Vec::new(),
            },
            bootstrap: (0..bootstrap)
                .map(|_| BootstrapStep {
                    exec: vec!["true".into()],
                    timeout: crate::spec::Duration::from_secs(1),
                })
                .collect(),
            node: None,
            rollout: Rollout::default(),
        },
    };
    Desired {
        origin: Origin::Path { path: "/pools".into() },
        pools: vec![DesiredPool { pool, file: "w.yaml".into(), template_hash: "new".into() }],
    }
}

fn step(batch: u32, instance: &str, action: Action) -> Step {
    Step { batch, instance: instance.into(), action }
}

/// Two new instances, then two old ones retired, in one batch, plus a second batch.
fn rolling_plan() -> Plan {
    let create = || Action::Create { image: "img:1".into(), template_hash: "new".into() };
    let ready = || Action::AwaitReady { node: false };
    let steps = vec![
        step(0, "n1", create()),
        step(0, "n2", create()),
        step(0, "n1", ready()),
        step(0, "n2", ready()),
        step(0, "o1", Action::Stop),
        step(0, "o1", Action::Remove),
        step(0, "o2", Action::Stop),
        step(0, "o2", Action::Remove),
        step(1, "n3", create()),
        step(1, "n3", ready()),
        step(1, "o3", Action::Stop),
        step(1, "o3", Action::Remove),
    ];
    Plan {
        origin: Origin::Path { path: "/pools".into() },
        pools: vec![PoolPlan {
            managed_by: None,
            name: "w".into(),
            status: PoolStatus::Existing,
            template_hash: Some("new".into()),
            replicas: 3,
            template_change: None,
            instances: Vec::new(),
            steps,
        }],
        summary: Summary::default(),
    }
}

async fn run(fake: &Fake, desired: &Desired, plan: &Plan, interrupt: &Interrupt) -> (Report, String) {
    let clusters: BTreeMap<String, Fake> = BTreeMap::new();
    let buffer = std::sync::Arc::new(Mutex::new(Vec::new()));
    let progress: Mutex<Box<dyn Write + Send>> = Mutex::new(Box::new(SharedBuf(buffer.clone())));
    let executor =
        Executor { desired, containers: fake, clusters: &clusters, progress: &progress, interrupt };
    let report = executor.run(plan).await;
    let text = String::from_utf8(buffer.lock().unwrap().clone()).unwrap();
    (report, text)
}

struct SharedBuf(std::sync::Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn runs_every_step_in_plan_order_with_progress() {
    let fake = Fake::default();
    let (report, text) = run(&fake, &desired(0, None), &rolling_plan(), &Interrupt::default()).await;
    assert!(report.complete(), "{report:?}");
    let calls = fake.calls();
    let pos =
        |c: &str| calls.iter().position(|x| x == c).unwrap_or_else(|| panic!("{c} not called: {calls:?}"));
    // Every retirement of a batch comes after every creation of that batch.
    for created in ["wait-up n1", "wait-up n2"] {
        assert!(pos(created) < pos("stop o1"));
    }
    assert!(pos("stop o1") < pos("remove o1"));
    assert!(pos("remove o2") < pos("create n3"));
    assert!(pos("wait-up n3") < pos("stop o3"));
    assert_eq!(calls.len(), 12);
    assert!(text.contains("[1/12] create n1 ..."), "{text}");
    assert!(text.contains("[12/12] remove o3 done ("), "{text}");
}

#[tokio::test]
async fn creations_of_a_batch_overlap() {
    let fake = Fake::default();
    let (report, _) = run(&fake, &desired(0, None), &rolling_plan(), &Interrupt::default()).await;
    assert!(report.complete());
    assert_eq!(fake.in_flight.lock().unwrap().1, 2, "the two creations of batch 0 should run at once");
}

#[tokio::test]
async fn a_failed_creation_halts_before_any_retirement() {
    let fake = Fake { fail: ["wait-up n2".to_owned()].into(), ..Fake::default() };
    let (report, text) = run(&fake, &desired(0, None), &rolling_plan(), &Interrupt::default()).await;
    assert!(!report.complete());
    let failure = report.failure().expect("a failure");
    assert_eq!((failure.verb, failure.instance.as_str()), ("await-ready", "n2"));
    let calls = fake.calls();
    // No old instance was touched; the new one that never came up was stopped, and only it.
    let stops: Vec<&String> =
        calls.iter().filter(|c| c.starts_with("stop") || c.starts_with("remove")).collect();
    assert_eq!(stops, ["stop n2"], "{calls:?}");
    assert!(text.contains("stopped n2: it never served; the next plan replaces it"), "{text}");
    // The other creation of the batch still finished; everything after was never started.
    assert!(calls.contains(&"wait-up n1".to_owned()));
    assert_eq!(report.not_started.len(), 8);
    assert!(text.contains("await-ready n2 FAILED"), "{text}");
    let mut summary = Vec::new();
    report.write_summary(&mut summary).unwrap();
    let summary = String::from_utf8(summary).unwrap();
    assert!(summary.contains("Apply halted: 3 steps done, 8 not started."), "{summary}");
    assert!(summary.contains("failed: await-ready n2 (w): wait-up n2 refused"), "{summary}");
    assert!(summary.contains("not started: stop o1 (w)"), "{summary}");
    assert!(summary.contains("done: n1 (create, await-ready)"), "{summary}");
    assert!(summary.contains("done: n2 (create)"), "{summary}");
}

#[tokio::test]
async fn a_failed_bootstrap_halts_with_its_exit_code_and_output() {
    let fake = Fake { exit_code: 3, ..Fake::default() };
    let mut plan = rolling_plan();
    plan.pools[0].steps.insert(2, step(0, "n1", Action::Bootstrap { commands: 1 }));
    let (report, _) = run(&fake, &desired(1, None), &plan, &Interrupt::default()).await;
    let failure = report.failure().expect("a failure");
    assert_eq!(failure.verb, "bootstrap");
    let message = failure.error.as_ref().unwrap().to_string();
    assert_eq!(message, "bootstrap command [\"true\"] exited with code 3: join failed");
    // The container whose bootstrap failed is stopped, so the next plan replaces it instead of
    // keeping an instance that was never bootstrapped; the old ones are untouched.
    let stops: Vec<String> = fake.calls().into_iter().filter(|c| c.starts_with("stop")).collect();
    assert_eq!(stops, ["stop n1"]);
}

#[tokio::test]
async fn a_failed_retirement_step_stops_the_rest() {
    let fake = Fake { fail: ["stop o1".to_owned()].into(), ..Fake::default() };
    let (report, _) = run(&fake, &desired(0, None), &rolling_plan(), &Interrupt::default()).await;
    assert_eq!(report.failure().unwrap().instance, "o1");
    assert!(!fake.calls().contains(&"remove o1".to_owned()), "a container that did not stop is not removed");
    assert!(!fake.calls().contains(&"stop o2".to_owned()));
}

#[tokio::test]
async fn an_interrupt_stops_at_the_next_step_boundary() {
    static INTERRUPT: std::sync::OnceLock<Interrupt> = std::sync::OnceLock::new();
    let interrupt = INTERRUPT.get_or_init(Interrupt::default);
    let fake = Fake { interrupt_after: Some(("stop o1".into(), interrupt)), ..Fake::default() };
    let (report, _) = run(&fake, &desired(0, None), &rolling_plan(), interrupt).await;
    assert!(report.interrupted());
    assert!(report.failure().is_none());
    assert_eq!(fake.calls().last().unwrap(), "stop o1", "nothing runs after the interrupted step");
    assert_eq!(report.not_started.len(), 7);
}

#[tokio::test]
async fn a_newer_desired_state_stops_at_the_next_boundary_without_a_failure() {
    static INTERRUPT: std::sync::OnceLock<Interrupt> = std::sync::OnceLock::new();
    let interrupt = INTERRUPT.get_or_init(Interrupt::default);
    interrupt.stop(StopReason::Superseded);
    let fake = Fake::default();
    let (report, text) = run(&fake, &desired(0, None), &rolling_plan(), interrupt).await;
    assert_eq!(report.stop_reason, Some(StopReason::Superseded));
    assert!(report.failure().is_none());
    assert!(fake.calls().is_empty(), "{:?}", fake.calls());
    let mut summary = Vec::new();
    report.write_summary(&mut summary).unwrap();
    assert!(String::from_utf8(summary).unwrap().contains("superseded"), "{text}");
    // A signal outranks a supersede, and a supersede never hides a signal.
    interrupt.trigger();
    interrupt.stop(StopReason::Superseded);
    assert_eq!(interrupt.reason(), Some(StopReason::Signal));
}

#[tokio::test]
async fn node_steps_without_a_cluster_fail_clearly() {
    let fake = Fake::default();
    let mut plan = rolling_plan();
    plan.pools[0].steps =
        vec![step(0, "o1", Action::Cordon), step(0, "o1", Action::Drain(DrainPreview::default()))];
    let (report, _) = run(&fake, &desired(0, None), &plan, &Interrupt::default()).await;
    assert_eq!(
        report.failure().unwrap().error.as_ref().unwrap().to_string(),
        "pool w: this step acts on a Kubernetes Node, but no cluster is configured for the pool"
    );
    assert_eq!(report.not_started, vec![("w".to_owned(), "o1".to_owned(), "drain")]);
}

#[tokio::test]
async fn preflight_checks_images_and_networks_before_anything_changes() {
    let fake = Fake::default();
    let clusters: BTreeMap<String, Fake> = BTreeMap::new();
    let progress: Mutex<Box<dyn Write + Send>> = Mutex::new(Box::new(std::io::sink()));
    let interrupt = Interrupt::default();
    let desired = desired(0, Some("missing"));
    let executor = Executor {
        desired: &desired,
        containers: &fake,
        clusters: &clusters,
        progress: &progress,
        interrupt: &interrupt,
    };
    let err = executor.preflight(&rolling_plan()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "network missing does not exist (create it first, e.g. `docker network create missing`)"
    );
    assert_eq!(fake.calls(), vec!["image img:1"], "the image is checked once, and nothing is created");
}

#[test]
fn new_containers_carry_the_pool_labels() {
    let d = desired(0, Some("kind"));
    let c = new_container(&d.pools[0], &d.origin, "w-new-abcde");
    assert_eq!(c.labels[labels::POOL], "w");
    assert_eq!(c.labels[labels::TEMPLATE_HASH], "new");
    assert_eq!(c.labels[labels::SCOPE], "path:/pools");
    assert!(c.labels[labels::TEMPLATE].contains("\"image\":\"img:1\""));
    assert_eq!(c.network.as_deref(), Some("kind"));
    assert!(!c.labels.contains_key(labels::COMMIT));
    assert!(!c.labels.contains_key(labels::KUBECONFIG), "not a Node");
}

#[test]
fn new_nodes_record_their_cluster() {
    let mut d = desired(0, None);
    d.pools[0].pool.spec.node = Some(crate::spec::NodeSpec {
        kubeconfig: None,
        context: Some("kind-a".into()),
        ready_timeout: crate::spec::Duration::from_secs(1),
        labels: BTreeMap::new(),
        taints: Vec::new(),
    });
    let c = new_container(&d.pools[0], &d.origin, "w-new-abcde");
    assert_eq!(c.labels[labels::KUBECONFIG], "", "the default kubeconfig");
    assert_eq!(c.labels[labels::CONTEXT], "kind-a");
}

#[tokio::test]
async fn an_interrupt_inside_a_creation_chain_stops_the_unfinished_containers() {
    static INTERRUPT: std::sync::OnceLock<Interrupt> = std::sync::OnceLock::new();
    let interrupt = INTERRUPT.get_or_init(Interrupt::default);
    let fake = Fake { interrupt_after: Some(("create n1".into(), interrupt)), ..Fake::default() };
    let (report, _) = run(&fake, &desired(0, None), &rolling_plan(), interrupt).await;
    assert!(report.interrupted(), "{report:?}");
    assert!(report.failure().is_none());
    let calls = fake.calls();
    // Both creations were under way; neither reached await-ready, so both containers are
    // stopped, and no old instance is touched.
    let mut stops: Vec<&String> = calls.iter().filter(|c| c.starts_with("stop")).collect();
    stops.sort();
    assert_eq!(stops, ["stop n1", "stop n2"], "{calls:?}");
    assert!(!calls.iter().any(|c| c.starts_with("wait-up") || c.contains(" o")), "{calls:?}");
}
