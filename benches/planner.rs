//! Planner benchmark: how long the pure planner takes, and how much memory it needs, for pools
//! of 10 to 10,000 instances. Run through `bench/run`, which prints these figures beside the
//! Docker API call counts.
//!
//! Each (scenario, size) runs in a child process of its own, so that one measurement's heap
//! cannot hide or inflate another's peak. Memory is read from `/proc/self/status` rather than
//! counted by a global allocator: the crate forbids `unsafe_code` for every target, and a
//! `forbid` cannot be lifted by an `allow` in one file. The child builds its inputs, resets the
//! kernel's peak-RSS mark (`5` into `/proc/self/clear_refs`), plans once, and reports how far
//! the peak rose above the RSS it had before planning: the memory the planner really touched.
//! That is less than a heap profiler's peak (valgrind's massif), which also counts the capacity a
//! vector reserved but never wrote, and both the old and the new buffer of every reallocation
//! (glibc can move a large one with `mremap`, without a copy); BENCHMARKS.md has both figures.
//!
//! Usage: `planner` (the whole table), or `planner <scenario> <size> [runs]` (one child's line;
//! with `runs`, a fixed number of timed runs, for `perf stat`).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::process::Command;
use std::time::{Duration, Instant};

use poolctl::model::{
    ClusterRef, Container, ContainerState, Health, LabelSelector, Node, NodeCondition, NodeConfig, Pdb, Pod,
    World, labels,
};
use poolctl::model::{Desired, DesiredPool, Origin};
use poolctl::plan::{PlanOptions, plan};
use poolctl::spec::{
    API_VERSION, EnvValue, KIND_POOL, Metadata, NodeSpec, Pool, PoolSpec, RolloutSpec, Template,
    canonical_template, template_hash,
};

const SIZES: [usize; 4] = [10, 100, 1_000, 10_000];

/// The targets, at 10,000 instances: a container-only pool planned in under 50 ms (issue 2), a
/// node pool's rolling replacement in under 20 ms (issue 12).
const TARGET_SIZE: usize = 10_000;

/// Timing stops after this many runs or once this much time has been spent, whichever comes
/// first (but never before `MIN_RUNS`), so that small sizes get many samples and the large ones
/// still finish quickly on a busy machine.
const MAX_RUNS: usize = 51;
const MIN_RUNS: usize = 7;
const TIME_BUDGET: Duration = Duration::from_secs(2);

/// The worlds a planner meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    /// A new pool: every instance is created.
    Create,
    /// A template change: every instance is outdated and replaced, one at a time (maxSurge 1,
    /// maxUnavailable 0), the longest plan a container-only pool of that size can have.
    Rolling,
    /// Nothing to do: every instance is current and up.
    Converged,
    /// The rolling replacement of a node pool: every instance is also a Ready Node with pods
    /// (two of a ReplicaSet, one of a DaemonSet) under a handful of PDBs, so every retirement
    /// carries a drain preview.
    RollingNodes,
}

impl Scenario {
    const ALL: [Self; 4] = [Self::Create, Self::Rolling, Self::Converged, Self::RollingNodes];

    fn name(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Rolling => "rolling",
            Self::Converged => "converged",
            Self::RollingNodes => "rolling-nodes",
        }
    }

    /// The median a plan of `TARGET_SIZE` instances must stay under.
    fn target(self) -> Duration {
        match self {
            Self::RollingNodes => Duration::from_millis(20),
            Self::Create | Self::Rolling | Self::Converged => Duration::from_millis(50),
        }
    }

    fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

const POOL: &str = "workers";
const PDBS: usize = 8;

fn template(image: &str) -> Template {
    Template {
        image: image.to_owned(),
        command: Some(vec!["sleep".to_owned(), "infinity".to_owned()]),
        entrypoint: None,
        env: BTreeMap::from([("ROLE".to_owned(), EnvValue::plain("worker"))]),
        labels: BTreeMap::from([("team".to_owned(), "platform".to_owned())]),
        network: Some("kind".to_owned()),
        privileged: true,
        volumes: vec!["/lib/modules:/lib/modules:ro".to_owned()],
        tmpfs: vec!["/run".to_owned(), "/tmp".to_owned()],
        ..Template::default()
    }
}

fn origin() -> Origin {
    Origin::Path { path: "pools/".to_owned() }
}

/// A pool spec of `template` with no bootstrap, join or Nodes.
fn spec(template: Template) -> PoolSpec {
    PoolSpec {
        replicas: 0,
        template,
        bootstrap: Vec::new(),
        join: None,
        node: None,
        docker: None,
        rollout: RolloutSpec::default(),
        health: poolctl::spec::HealthSpec::default(),
        drain: poolctl::spec::DrainSpec::default(),
        disruption: poolctl::spec::DisruptionSpec::default(),
        paused: false,
        depends_on: Vec::new(),
    }
}

fn desired(replicas: usize, nodes: bool) -> Desired {
    let mut spec = spec(template("kindest/node:v1.31.0"));
    let hash = template_hash(&spec);
    spec.node = nodes.then(|| NodeSpec {
        kubeconfig: None,
        context: None,
        ready_timeout: poolctl::spec::Duration::from_secs(300),
        labels: BTreeMap::new(),
        taints: Vec::new(),
    });
    spec.replicas = i64::try_from(replicas).expect("a small size");
    let pool = Pool {
        api_version: API_VERSION.to_owned(),
        kind: KIND_POOL.to_owned(),
        metadata: Metadata { name: POOL.to_owned() },
        spec,
    };
    Desired {
        origin: origin(),
        pools: vec![DesiredPool {
            pool,
            file: "workers.yaml".to_owned(),
            template_hash: hash,
            copied_from: None,
        }],
    }
}

/// `size` running containers of the pool, created from `template`, each carrying the canonical
/// template label as real ones do; with `nodes`, their Ready Nodes, pods and the PDBs over them.
/// The one daemon the benchmark's world was listed from.
const HOST: &str = "unix:///var/run/docker.sock";

fn world(size: usize, spec: &PoolSpec, nodes: bool) -> World {
    let json = canonical_template(spec);
    let hash = template_hash(spec);
    let scope = origin().scope();
    // Every vector is allocated at its final size: a vector that grew by doubling would leave
    // freed pages behind that the planner could reuse unseen by the peak-RSS mark.
    let nodes_len = if nodes { size } else { 0 };
    let mut world = World {
        now: 1_700_000_000 + 3600,
        containers: Vec::with_capacity(size),
        nodes: Vec::with_capacity(nodes_len),
        pods: Vec::with_capacity(nodes_len * 3),
        pdbs: Vec::with_capacity(if nodes { PDBS } else { 0 }),
        locked: std::collections::BTreeSet::new(),
        rollouts: BTreeMap::new(),
        history: BTreeMap::new(),
        suspended: BTreeMap::new(),
        promoted: BTreeMap::new(),
        listed: std::collections::BTreeSet::from([HOST.to_owned()]),
    };
    for i in 0..size {
        let name = format!("{POOL}-{hash}-{i:05}");
        world.containers.push(Container {
            id: format!("{i:064x}"),
            name: name.clone(),
            pool: POOL.to_owned(),
            template_hash: hash.clone(),
            state: ContainerState::Running,
            health: Health::None,
            created: 1_700_000_000 + i64::try_from(i).expect("a small size"),
            created_precise: 0,
            came_up: Some(1_700_000_000 + i64::try_from(i).expect("a small size")),
            since: None,
            status: "Up 2 hours".to_owned(),
            template: Some(json.clone()),
            scope: Some(scope.clone()),
            image: spec.template.image.clone(),
            cluster: nodes.then_some(ClusterRef { kubeconfig: None, context: None }),
            cluster_id: None,
            elsewhere: None,
            docker_host: HOST.to_owned(),
        });
        if nodes {
            world.nodes.push(Node {
                name: name.clone(),
                pool: Some(POOL.to_owned()),
                ready: true,
                unschedulable: false,
                cordoned_by_poolctl: false,
                config: NodeConfig {
                    labels: BTreeMap::from([(labels::POOL.to_owned(), POOL.to_owned())]),
                    ..NodeConfig::default()
                },
                conditions: vec![NodeCondition::ready("True", 1_700_000_000)],
                retirement: poolctl::model::RetirementMarks::default(),
                reference: Some(poolctl::model::InstanceRef {
                    container_id: format!("{i:064x}"),
                    docker_host: HOST.to_owned(),
                }),
            });
            for (app, owner) in [("web", "ReplicaSet"), ("api", "ReplicaSet"), ("proxy", "DaemonSet")] {
                world.pods.push(Pod {
                    namespace: "default".to_owned(),
                    name: format!("{app}-{i:05}"),
                    uid: format!("uid-{app}-{i}"),
                    node: name.clone(),
                    labels: BTreeMap::from([("app".to_owned(), app.to_owned())]),
                    owner_kind: Some(owner.to_owned()),
                    mirror: false,
                    finished: false,
                    empty_dir: false,
                    orphaned: false,
                    do_not_disrupt: false,
                });
            }
        }
    }
    if nodes {
        for i in 0..PDBS {
            let app = if i == 0 { "web" } else { "batch" };
            world.pdbs.push(Pdb {
                namespace: "default".to_owned(),
                name: format!("pdb-{i}"),
                selector: LabelSelector::from_parts(
                    &BTreeMap::from([("app".to_owned(), app.to_owned())]),
                    [],
                ),
                disruptions_allowed: 1,
            });
        }
    }
    world
}

fn inputs(scenario: Scenario, size: usize) -> (Desired, World) {
    let nodes = scenario == Scenario::RollingNodes;
    let desired = desired(size, nodes);
    let world = match scenario {
        Scenario::Create => World::default(),
        Scenario::Converged => world(size, &desired.pools[0].pool.spec, false),
        Scenario::Rolling | Scenario::RollingNodes => {
            world(size, &spec(template("kindest/node:v1.30.0")), nodes)
        }
    };
    (desired, world)
}

/// A field of `/proc/self/status`, in KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status (Linux only)");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

/// One child: measure one scenario at one size and print one line of `key=value` fields.
/// `runs` fixes the number of timed runs (for `perf stat`, whose counts should not depend on
/// how busy the machine is); `None` uses the time budget.
fn child(scenario: Scenario, size: usize, runs: Option<usize>) {
    let (desired, world) = inputs(scenario, size);
    let options = PlanOptions::default();

    // Memory first, on a fresh heap. Without a writable clear_refs the peak is the process's
    // whole life so far (inputs included), which the parent reports as such.
    let rss_before = status_kib("VmRSS");
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let hwm_before = status_kib("VmHWM");
    let first = plan(&desired, &world, options.clone());
    let hwm_after = status_kib("VmHWM");
    let steps = first.pools.iter().map(|p| p.steps.len()).sum::<usize>();
    drop(first);

    let mut times = Vec::new();
    let started = Instant::now();
    let more = |done: usize| match runs {
        Some(n) => done < n,
        None => done < MAX_RUNS && (done < MIN_RUNS || started.elapsed() < TIME_BUDGET),
    };
    while more(times.len()) {
        let t = Instant::now();
        let plan = black_box(plan(black_box(&desired), black_box(&world), options.clone()));
        times.push(t.elapsed());
        drop(plan);
    }
    times.sort();
    let median = times[times.len() / 2];
    let base = if reset { rss_before } else { hwm_before };
    println!(
        "scenario={} size={size} steps={steps} runs={} median_us={} min_us={} max_us={} \
         plan_kib={} peak_kib={} reset={reset}",
        scenario.name(),
        times.len(),
        median.as_micros(),
        times[0].as_micros(),
        times[times.len() - 1].as_micros(),
        hwm_after.saturating_sub(base),
        hwm_after,
    );
}

/// One measured child, as parsed from its line.
struct Row {
    fields: BTreeMap<String, String>,
}

impl Row {
    fn get(&self, key: &str) -> &str {
        self.fields.get(key).map_or("?", String::as_str)
    }

    fn num(&self, key: &str) -> u64 {
        self.get(key).parse().unwrap_or(0)
    }
}

fn run_child(scenario: Scenario, size: usize) -> Row {
    let exe = std::env::current_exe().expect("the benchmark's own path");
    let out = Command::new(exe)
        .args([scenario.name(), &size.to_string()])
        .output()
        .expect("the benchmark can run itself");
    assert!(
        out.status.success(),
        "{} {size} failed: {}",
        scenario.name(),
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout);
    let fields = line
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    Row { fields }
}

/// Microseconds as milliseconds with three decimals, in integer arithmetic (no float rounding).
fn ms(us: u64) -> String {
    format!("{}.{:03}", us / 1000, us % 1000)
}

/// KiB as MiB with one decimal, rounded down.
fn mib(kib: u64) -> String {
    format!("{}.{}", kib / 1024, kib % 1024 * 10 / 1024)
}

/// Prints the table; returns whether the target was met. An unoptimized build (`cargo test
/// --all-targets` runs this program too) only smoke-tests the small sizes: its times say
/// nothing about the target.
fn table() -> bool {
    let optimized = !cfg!(debug_assertions);
    let sizes = if optimized { &SIZES[..] } else { &SIZES[..2] };
    println!(
        "{:<14} {:>9} {:>8} {:>5} {:>11} {:>9} {:>9} {:>13} {:>13}",
        "scenario",
        "instances",
        "steps",
        "runs",
        "median ms",
        "min ms",
        "max ms",
        "plan mem MiB",
        "peak RSS MiB"
    );
    let mut met = true;
    let mut no_reset = false;
    for scenario in Scenario::ALL {
        for &size in sizes {
            let row = run_child(scenario, size);
            println!(
                "{:<14} {:>9} {:>8} {:>5} {:>11} {:>9} {:>9} {:>13} {:>13}",
                scenario.name(),
                size,
                row.get("steps"),
                row.get("runs"),
                ms(row.num("median_us")),
                ms(row.num("min_us")),
                ms(row.num("max_us")),
                mib(row.num("plan_kib")),
                mib(row.num("peak_kib")),
            );
            no_reset |= row.get("reset") != "true";
            if size == TARGET_SIZE && Duration::from_micros(row.num("median_us")) >= scenario.target() {
                met = false;
            }
        }
    }
    println!();
    println!("plan mem: how far the peak RSS rose while planning once (the pages the planner touched);");
    println!("peak RSS: the whole child process's peak (inputs included).");
    if no_reset {
        println!("note: /proc/self/clear_refs was not writable, so plan mem includes building the inputs.");
    }
    if !optimized {
        println!(
            "unoptimized build: a smoke run of the small sizes only; bench/run measures a release build."
        );
        return true;
    }
    let verdict = if met { "met" } else { "MISSED" };
    println!(
        "target: {TARGET_SIZE} instances planned in under {} ms (median of create, rolling, converged) \
         and a node pool's rollout in under {} ms: {verdict}",
        Scenario::Create.target().as_millis(),
        Scenario::RollingNodes.target().as_millis()
    );
    met
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    match args.as_slice() {
        [] => {
            if !table() {
                std::process::exit(1);
            }
        }
        [scenario, size, rest @ ..] if rest.len() <= 1 => {
            let scenario = Scenario::parse(scenario).unwrap_or_else(|| panic!("unknown scenario {scenario}"));
            let runs = rest.first().map(|r| r.parse::<usize>().expect("a number of runs").max(1));
            child(scenario, size.parse().expect("a size"), runs);
        }
        _ => {
            eprintln!("usage: planner [SCENARIO SIZE [RUNS]]");
            std::process::exit(2);
        }
    }
}
