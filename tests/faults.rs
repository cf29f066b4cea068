//! Seeded, randomized faults against whole rollouts of a node pool: apply is killed (SIGKILL) or
//! interrupted (SIGINT) at a random progress line, the API server answers 5xx for a while, a
//! PodDisruptionBudget blocks, new Nodes are slow or never Ready, a container is removed by hand.
//! After each rollout, plain applies must converge; and the whole history (the fake cluster's
//! event log, Docker's event stream) must show that no budget was bypassed, no Node deleted while
//! its container ran, no container stopped while pods were still bound to its Node, and no more
//! Ready schedulable capacity lost than `maxUnavailable` and the faults themselves took.
//!
//! `POOLCTL_FAULT_ROLLOUTS` (default 30) and `POOLCTL_FAULT_SEED` (default fixed, decimal or
//! `0x` hex) steer it; a failure names the seed and the rollout, so that it reproduces. The
//! figures are printed at the end (`cargo test --test main faults -- --nocapture`) and quoted in
//! the reliability section of docs/operations.md.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::panic::AssertUnwindSafe;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bollard::query_parameters::{EventsOptions, KillContainerOptionsBuilder};
use futures::{FutureExt as _, StreamExt as _};
use serde_json::Value;
use tokio::sync::watch;

use crate::support::cli::{Run, Stream};
use crate::support::docker::{DockerEvent, IMAGE};
use crate::support::fake_kube::{Event, EventKind, FakeKubeOptions, PdbBound, ReadyPolicy};
use crate::support::rig::{LIMIT, Rig};
use crate::support::scenario::PoolYaml;

const DEFAULT_ROLLOUTS: usize = 30;
const DEFAULT_SEED: u64 = 0x5eed_f00d;
/// Rollouts run on this many pools side by side, each with its own fake cluster: the waits of a
/// rollout (a container starting, a Node turning Ready) leave the machine mostly idle.
const LANES: usize = 3;
/// Plain applies allowed to converge after a faulted one.
const CONVERGE_APPLIES: usize = 5;
/// The app whose pods the drains move, and its budget: one disruption at a time.
const APP: &str = "web";
const APP_REPLICAS: usize = 2;
const PDB: &str = "web-pdb";
/// How long the simulated kubelet takes to turn a healthy Node Ready.
const FAST_READY: Duration = Duration::from_millis(100);

// ---------------------------------------------------------------- the dice

/// xorshift64*, seeded through splitmix64: tiny, deterministic, and good enough to pick faults.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        // xorshift never leaves the zero state.
        Self((z ^ (z >> 31)) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn index(&mut self, len: usize) -> usize {
        usize::try_from(self.next() % len as u64).expect("below len")
    }
}

// ---------------------------------------------------------------- faults and rollouts

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Kill,
    Interrupt,
    ServerErrors,
    BlockingPdb,
    SlowNode,
    NeverReadyNode,
    RemovedContainer,
}

impl Kind {
    const ALL: [Self; 7] = [
        Self::Kill,
        Self::Interrupt,
        Self::ServerErrors,
        Self::BlockingPdb,
        Self::SlowNode,
        Self::NeverReadyNode,
        Self::RemovedContainer,
    ];

    fn describe(self) -> &'static str {
        match self {
            Self::Kill => "SIGKILL of apply",
            Self::Interrupt => "SIGINT of apply",
            Self::ServerErrors => "5xx window",
            Self::BlockingPdb => "blocking PDB",
            Self::SlowNode => "slow new Nodes",
            Self::NeverReadyNode => "never-Ready new Nodes",
            Self::RemovedContainer => "container removed by hand",
        }
    }

    /// Two faults of a rollout must not be the same thing twice, or cancel each other out.
    fn clashes(self, other: Self) -> bool {
        let ends = |k| matches!(k, Self::Kill | Self::Interrupt);
        let ready = |k| matches!(k, Self::SlowNode | Self::NeverReadyNode);
        self == other || (ends(self) && ends(other)) || (ready(self) && ready(other))
    }
}

/// One fault; `at` is the progress line of apply's stdout (1-based) after which it strikes.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Kill {
        at: usize,
    },
    Interrupt {
        at: usize,
    },
    ServerErrors {
        at: usize,
        status: u16,
        millis: u64,
    },
    BlockingPdb {
        at: usize,
    },
    /// Set before apply starts: new Nodes turn Ready only after this long.
    SlowNode {
        millis: u64,
    },
    NeverReadyNode,
    /// `pick` chooses among the pool's running containers at that moment.
    RemovedContainer {
        at: usize,
        pick: usize,
    },
}

impl Fault {
    fn kind(self) -> Kind {
        match self {
            Self::Kill { .. } => Kind::Kill,
            Self::Interrupt { .. } => Kind::Interrupt,
            Self::ServerErrors { .. } => Kind::ServerErrors,
            Self::BlockingPdb { .. } => Kind::BlockingPdb,
            Self::SlowNode { .. } => Kind::SlowNode,
            Self::NeverReadyNode => Kind::NeverReadyNode,
            Self::RemovedContainer { .. } => Kind::RemovedContainer,
        }
    }

    fn at(self) -> Option<usize> {
        match self {
            Self::Kill { at }
            | Self::Interrupt { at }
            | Self::ServerErrors { at, .. }
            | Self::BlockingPdb { at }
            | Self::RemovedContainer { at, .. } => Some(at),
            Self::SlowNode { .. } | Self::NeverReadyNode => None,
        }
    }
}

/// What one rollout does, drawn from the seed and the rollout's number alone.
#[derive(Debug, Clone)]
struct Rollout {
    index: usize,
    replicas: u32,
    max_unavailable: u32,
    drain_secs: u64,
    ready_secs: u64,
    /// The `team` node label and the `dedicated` taint's value: changed now and then, so that
    /// Node configuration converges under faults too.
    team: &'static str,
    taint: &'static str,
    faults: Vec<Fault>,
}

impl Rollout {
    fn draw(seed: u64, index: usize) -> Self {
        let mut rng = Rng::new(seed ^ (index as u64).wrapping_mul(0xd134_2543_de82_ef95));
        let replicas = u32::try_from(rng.range(2, 3)).expect("small");
        let max_unavailable = u32::try_from(rng.range(0, 1)).expect("small");
        let drain_secs = rng.range(2, 3);
        let ready_secs = rng.range(3, 5);
        let team = ["blue", "green"][rng.index(2)];
        let taint = ["batch", "web"][rng.index(2)];
        // A replaced instance prints two progress lines for each of its seven steps (create,
        // await-ready, cordon, drain, stop, delete-node, remove): a fault strikes before the end.
        let lines = 14 * replicas as usize;
        let mut faults: Vec<Fault> = Vec::new();
        let count = rng.range(1, 2);
        while (faults.len() as u64) < count {
            let kind = Kind::ALL[rng.index(Kind::ALL.len())];
            if faults.iter().any(|f| f.kind().clashes(kind)) {
                continue;
            }
            let at = 1 + rng.index(lines - 1);
            faults.push(match kind {
                Kind::Kill => Fault::Kill { at },
                Kind::Interrupt => Fault::Interrupt { at },
                Kind::ServerErrors => Fault::ServerErrors {
                    at,
                    status: [500, 502, 503][rng.index(3)],
                    millis: rng.range(300, 3000),
                },
                Kind::BlockingPdb => Fault::BlockingPdb { at },
                Kind::SlowNode => Fault::SlowNode { millis: rng.range(1000, (ready_secs + 1) * 1000) },
                Kind::NeverReadyNode => Fault::NeverReadyNode,
                Kind::RemovedContainer => Fault::RemovedContainer { at, pick: rng.index(64) },
            });
        }
        Self { index, replicas, max_unavailable, drain_secs, ready_secs, team, taint, faults }
    }
}

/// How the faulted apply ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Completed,
    Halted,
    Interrupted,
    Killed,
}

/// What one rollout showed.
#[derive(Debug, Clone)]
struct Figures {
    injected: Vec<Kind>,
    /// Drawn, but apply ended before their moment came.
    missed: Vec<Kind>,
    outcome: Outcome,
    /// Plain applies after the faulted one until `plan --detailed-exitcode` said 0.
    applies: usize,
    /// What the rollout's history showed.
    history: History,
    evictions: usize,
    refusals: usize,
}

// ---------------------------------------------------------------- Docker's side of the history

/// Docker's events for one test's containers, followed live (the daemon keeps only a short
/// backlog of past events), and a marker container whose ignored signals prove that the stream
/// has caught up.
struct DockerLog {
    events: watch::Receiver<Vec<DockerEvent>>,
    marker: String,
}

impl DockerLog {
    async fn start(rig: &Rig) -> Self {
        let docker = rig.s.docker();
        let (key, case) = docker.case_label();
        let filters = HashMap::from([
            ("type".to_owned(), vec!["container".to_owned()]),
            ("label".to_owned(), vec![format!("{key}={case}")]),
        ]);
        let options = EventsOptions { filters: Some(filters), ..Default::default() };
        let mut stream = docker.backend.client().events(Some(options));
        let (tx, events) = watch::channel(Vec::new());
        tokio::spawn(async move {
            while let Some(Ok(e)) = stream.next().await {
                let name = e.actor.and_then(|a| a.attributes).and_then(|a| a.get("name").cloned());
                let nanos = u64::try_from(e.time_nano.unwrap_or_default()).unwrap_or_default();
                tx.send_modify(|v| {
                    v.push(DockerEvent {
                        action: e.action.unwrap_or_default(),
                        name: name.unwrap_or_default(),
                        at: UNIX_EPOCH + Duration::from_nanos(nanos),
                    });
                });
            }
        });
        // Not a pool container (no pool label): neither poolctl nor the kubelet sees it. Its
        // shell is PID 1 with no handler for SIGUSR1, so the signal only makes an event.
        let marker = format!("m{}", rig.pool());
        let mut run = Command::new("docker");
        run.args(["run", "-d", "--name", &marker]);
        for (k, v) in docker.labels() {
            run.args(["--label", &format!("{k}={v}")]);
        }
        let out = run.arg(IMAGE).output().expect("run the docker CLI");
        assert!(out.status.success(), "docker run marker: {}", String::from_utf8_lossy(&out.stderr));
        let mut log = Self { events, marker };
        log.sync(rig).await;
        log
    }

    /// Returns once every event up to now has arrived: once a signal sent now shows up in the
    /// stream, which delivers events in order. The signal is sent again every second, in case
    /// the stream was not subscribed yet when the first one went.
    async fn sync(&mut self, rig: &Rig) {
        let marker = self.marker.clone();
        let signals =
            |v: &Vec<DockerEvent>| v.iter().filter(|e| e.name == marker && e.action == "kill").count();
        let before = signals(&self.events.borrow());
        let deadline = Instant::now() + LIMIT;
        loop {
            let options = KillContainerOptionsBuilder::new().signal("SIGUSR1").build();
            let docker = rig.s.docker().backend.client();
            docker.kill_container(&self.marker, Some(options)).await.expect("signal the marker");
            let seen = self.events.wait_for(|v| signals(v) > before);
            match tokio::time::timeout(Duration::from_secs(1), seen).await {
                Ok(seen) => {
                    seen.expect("the event stream runs");
                    return;
                }
                Err(_) => assert!(Instant::now() < deadline, "Docker's event stream does not catch up"),
            }
        }
    }

    fn events(&self) -> Vec<DockerEvent> {
        let mut events: Vec<DockerEvent> = self
            .events
            .borrow()
            .iter()
            .filter(|e| e.name != self.marker)
            .map(|e| DockerEvent { action: e.action.clone(), name: e.name.clone(), at: e.at })
            .collect();
        events.sort_by_key(|e| e.at);
        events
    }
}

// ---------------------------------------------------------------- one lane of rollouts

/// A pool and its fake cluster, carried from one rollout to the next.
struct Lane {
    rig: Rig,
    docker: DockerLog,
    seed: u64,
    version: u32,
    replicas: u32,
    team: &'static str,
    taint: &'static str,
    /// Containers removed by hand so far, and when: what the faults, not poolctl, took down.
    removed: Vec<(String, SystemTime)>,
    /// What each poolctl run of the current rollout printed, for a failure message.
    transcript: String,
}

impl Lane {
    async fn start(seed: u64, first: &Rollout) -> Option<Self> {
        let options =
            FakeKubeOptions { reschedule_delay: Duration::from_millis(100), ..FakeKubeOptions::default() };
        let rig = Rig::with(options).await?;
        rig.fake.set_default_ready_policy(ReadyPolicy::After(FAST_READY));
        let docker = DockerLog::start(&rig).await;
        let mut lane = Self {
            rig,
            docker,
            seed,
            version: 0,
            replicas: first.replicas,
            team: first.team,
            taint: first.taint,
            removed: Vec::new(),
            transcript: String::new(),
        };
        lane.rig.write(&lane.spec(first));
        lane.converge();
        lane.rig.fake.add_app("default", APP, APP_REPLICAS);
        lane.rig.fake.put_pdb("default", PDB, APP, PdbBound::MaxUnavailable(1));
        lane.app_settles().await;
        Some(lane)
    }

    /// The pool at the lane's version, sized and timed as `r` says.
    fn spec(&self, r: &Rollout) -> PoolYaml {
        self.rig
            .s
            .pool()
            .replicas(self.replicas)
            .env("VERSION", &self.version.to_string())
            .node(&self.rig.s.path("kubeconfig"))
            .ready_timeout(&format!("{}s", r.ready_secs))
            .drain_timeout(&format!("{}s", r.drain_secs))
            .max_unavailable(r.max_unavailable)
            .stop_grace_period("1s")
            .node_label("team", self.team)
            // PreferNoSchedule: the app's pods may still land on the pool's Nodes.
            .node_taint("dedicated", self.taint, "PreferNoSchedule")
    }

    fn record(&mut self, what: &str, run: &Run) {
        let _ =
            writeln!(self.transcript, "$ poolctl {what} (exit {})\n{}{}", run.code, run.stdout, run.stderr);
    }

    /// Plain applies until `plan --detailed-exitcode` exits 0; returns how many it took and the
    /// template hash of the converged pool.
    fn converge(&mut self) -> (usize, String) {
        for applies in 0..=CONVERGE_APPLIES {
            let plan = self.rig.poolctl("plan", &["--detailed-exitcode", "-o", "json"]);
            if plan.code == 0 {
                let plan: Value = serde_json::from_str(&plan.stdout).expect("plan JSON");
                let hash = plan["pools"][0]["template_hash"].as_str().expect("a template hash");
                return (applies, hash.to_owned());
            }
            self.record("plan --detailed-exitcode -o json", &plan);
            assert_eq!(plan.code, 2, "plan failed after the faults were lifted");
            assert!(applies < CONVERGE_APPLIES, "{CONVERGE_APPLIES} plain applies did not converge");
            // A killed apply's lock lapses within its short lease: wait for it, as a user would.
            let run = self.rig.apply_after_kill();
            self.record("apply --yes --lock-timeout 1m", &run);
        }
        unreachable!("the loop returns or fails")
    }

    /// Waits until every pod of the app runs and is Ready again.
    async fn app_settles(&self) {
        let key = format!("default/{APP}");
        let settled = self.rig.fake.wait_until(|s| {
            s.events().last().is_some_and(|e| e.app_healthy.get(&key) == Some(&APP_REPLICAS))
        });
        tokio::time::timeout(LIMIT, settled).await.expect("the app's pods run again");
    }

    async fn rollout(&mut self, r: &Rollout) -> Figures {
        self.transcript.clear();
        let (since, started) = (SystemTime::now(), Instant::now());
        let from = self.rig.last_seq();
        // The capacity that must serve from each event on: (first seq, replicas - maxUnavailable).
        let mut floors = Vec::new();
        let max_unavailable = i64::from(r.max_unavailable);
        if r.replicas != self.replicas {
            // Resize first, without faults and with the same template.
            floors.push((from, i64::from(r.replicas.min(self.replicas)) - max_unavailable));
            self.replicas = r.replicas;
            self.rig.write(&self.spec(r));
            self.converge();
            self.app_settles().await;
        }
        floors.push((self.rig.last_seq(), i64::from(r.replicas) - max_unavailable));

        self.version += 1;
        (self.team, self.taint) = (r.team, r.taint);
        self.rig.write(&self.spec(r));
        let mut injected = Vec::new();
        let mut prefix = None;
        for fault in &r.faults {
            let policy = match *fault {
                Fault::SlowNode { millis } => ReadyPolicy::After(Duration::from_millis(millis)),
                Fault::NeverReadyNode => ReadyPolicy::Never,
                _ => continue,
            };
            let hash = self.rig.template_hash();
            let p = prefix.insert(format!("{}-{}", self.rig.pool(), &hash[..10]));
            self.rig.fake.set_ready_policy(p, policy);
            injected.push(fault.kind());
        }
        let (outcome, missed) = self.faulted_apply(r, &mut injected).await;

        // Lift the faults, then let plain applies converge.
        self.rig.fake.fail_for(503, Duration::ZERO);
        self.rig.fake.put_pdb("default", PDB, APP, PdbBound::MaxUnavailable(1));
        if let Some(p) = &prefix {
            self.rig.fake.set_ready_policy(p, ReadyPolicy::After(FAST_READY));
        }
        let (applies, hash) = self.converge();
        self.check_end_state(r, &hash).await;
        self.app_settles().await;
        self.docker.sync(&self.rig).await;
        let history = self.check_history(from, since, &floors);
        let evictions = self.rig.fake.evictions();
        let evictions = evictions.iter().filter(|e| e.at >= started);
        let (accepted, refused): (Vec<_>, Vec<_>) = evictions.partition(|e| e.status == 201);
        Figures {
            injected,
            missed,
            outcome,
            applies,
            history,
            evictions: accepted.len(),
            refusals: refused.iter().filter(|e| e.status == 429).count(),
        }
    }

    /// Runs apply and lets the timed faults strike at their progress lines.
    async fn faulted_apply(&mut self, r: &Rollout, injected: &mut Vec<Kind>) -> (Outcome, Vec<Kind>) {
        let mut timed: Vec<Fault> = r.faults.iter().copied().filter(|f| f.at().is_some()).collect();
        timed.sort_by_key(|f| f.at());
        let mut apply = self.rig.spawn_apply_to_kill();
        let mut lines = 0;
        let mut missed = Vec::new();
        let mut ended = None;
        for fault in timed {
            let at = fault.at().expect("timed");
            while ended.is_none() && lines < at {
                match apply.next_line() {
                    Some((Stream::Stdout, line)) if line.starts_with('[') => lines += 1,
                    Some(_) => {}
                    None => ended = Some(apply.wait()),
                }
            }
            if ended.is_some() {
                missed.push(fault.kind());
                continue;
            }
            injected.push(fault.kind());
            match fault {
                Fault::Kill { .. } => {
                    apply.kill();
                    let _ = writeln!(
                        self.transcript,
                        "$ poolctl apply --yes (SIGKILL)\n{}",
                        apply.seen.join("\n")
                    );
                    return (Outcome::Killed, missed);
                }
                Fault::Interrupt { .. } => {
                    let status = apply.signal("INT");
                    let _ = writeln!(
                        self.transcript,
                        "$ poolctl apply --yes (SIGINT, {status})\n{}",
                        apply.seen.join("\n")
                    );
                    return (Outcome::Interrupted, missed);
                }
                Fault::ServerErrors { status, millis, .. } => {
                    self.rig.fake.fail_for(status, Duration::from_millis(millis));
                }
                Fault::BlockingPdb { .. } => {
                    let all = i32::try_from(APP_REPLICAS).expect("small");
                    self.rig.fake.put_pdb("default", PDB, APP, PdbBound::MinAvailable(all));
                }
                Fault::RemovedContainer { pick, .. } => {
                    let running: Vec<String> = self
                        .rig
                        .containers()
                        .await
                        .into_iter()
                        .filter(|(_, c)| c.0)
                        .map(|(n, _)| n)
                        .collect();
                    if let Some(name) = running.get(pick % running.len().max(1)) {
                        self.removed.push((name.clone(), SystemTime::now()));
                        self.rig.s.docker().remove(name).await;
                    }
                }
                Fault::SlowNode { .. } | Fault::NeverReadyNode => unreachable!("not timed"),
            }
        }
        let status = ended.unwrap_or_else(|| apply.wait());
        let _ = writeln!(self.transcript, "$ poolctl apply --yes ({status})\n{}", apply.seen.join("\n"));
        (if status.success() { Outcome::Completed } else { Outcome::Halted }, missed)
    }

    /// The converged pool: the right count, all current and running, each a Ready Node that is
    /// labelled and tainted as the spec says, none cordoned or marked by poolctl, no orphan.
    async fn check_end_state(&self, r: &Rollout, hash: &str) {
        let containers = self.rig.containers().await;
        assert_eq!(containers.len(), r.replicas as usize, "containers: {containers:?}");
        for (name, (running, h)) in &containers {
            assert!(*running, "{name} is not running");
            assert_eq!(h, hash, "{name} is not current");
        }
        let pool = self.rig.pool();
        let nodes: BTreeSet<String> = self
            .rig
            .fake
            .node_names()
            .into_iter()
            .filter(|n| {
                self.rig.is_pool_node(n)
                    || self.rig.fake.node(n).and_then(|n| n.metadata.labels).is_some_and(|l| {
                        l.get(poolctl::model::labels::POOL).map(String::as_str) == Some(pool)
                    })
            })
            .collect();
        assert_eq!(
            nodes.iter().collect::<Vec<_>>(),
            containers.keys().collect::<Vec<_>>(),
            "Nodes = containers"
        );
        for (name, &(ready, unschedulable, retiring)) in &self.rig.nodes() {
            assert!(
                ready && !unschedulable && !retiring,
                "{name}: ready {ready}, cordoned {unschedulable}, retiring {retiring}"
            );
            let node = self.rig.fake.node(name).expect("listed");
            let labels = node.metadata.labels.unwrap_or_default();
            assert_eq!(labels.get(poolctl::model::labels::POOL).map(String::as_str), Some(pool), "{name}");
            assert_eq!(labels.get("team").map(String::as_str), Some(r.team), "{name}");
            let taints: Vec<String> = node
                .spec
                .and_then(|s| s.taints)
                .unwrap_or_default()
                .iter()
                .map(|t| format!("{}={}:{}", t.key, t.value.clone().unwrap_or_default(), t.effect))
                .collect();
            assert_eq!(taints, [format!("dedicated={}:PreferNoSchedule", r.taint)], "{name}");
        }
    }

    /// Checks the safety rules over the rollout's part of the history; panics naming each
    /// breach.
    fn check_history(&self, from: u64, since: SystemTime, floors: &[(u64, i64)]) -> History {
        let events = self.rig.fake.events();
        let docker = self.docker.events();
        let mut check = Check { lane: self, from, since, breaches: Vec::new(), history: History::default() };
        check.capacity(&events, floors);
        check.pods_stops_and_deletions(&events, &docker);
        let Check { breaches, history, .. } = check;
        let shown: Vec<&str> = breaches.iter().take(20).map(String::as_str).collect();
        assert!(breaches.is_empty(), "{} safety rules broken:\n  {}", breaches.len(), shown.join("\n  "));
        history
    }

    /// Whether a fault (a removal by hand) took `node`'s container down at or before `at`.
    fn taken_down(&self, node: &str, at: SystemTime) -> bool {
        self.removed.iter().any(|(n, t)| n == node && *t <= at)
    }
}

/// The safety rules, checked over one rollout's part of the history.
struct Check<'a> {
    lane: &'a Lane,
    /// The rollout's first event comes after this sequence number of the fake's log...
    from: u64,
    /// ...and its first Docker event at or after this time.
    since: SystemTime,
    breaches: Vec<String>,
    history: History,
}

impl Check<'_> {
    /// At every moment, the pool's Ready schedulable Nodes, plus the serving ones that faults
    /// took down, are at least the floor of that moment (`replicas - maxUnavailable`).
    fn capacity(&mut self, events: &[Event], floors: &[(u64, i64)]) {
        let taken: Vec<SystemTime> = self
            .lane
            .removed
            .iter()
            .filter(|(_, t)| *t >= self.since)
            .filter(|(n, t)| {
                events.iter().rev().find(|e| e.wall < *t).is_some_and(|e| e.ready_schedulable.contains(n))
            })
            .map(|(_, t)| *t)
            .collect();
        self.history.capacity_margin = i64::MAX;
        self.history.capacity_margin_raw = i64::MAX;
        for e in events.iter().filter(|e| e.seq > self.from) {
            let floor = floors.iter().rev().find(|(seq, _)| *seq < e.seq).map_or(floors[0].1, |f| f.1);
            let taken = taken.iter().filter(|t| **t <= e.wall).count();
            let serving = e.ready_schedulable.iter().filter(|n| self.lane.rig.is_pool_node(n)).count();
            let margin = i64::try_from(serving + taken).expect("small") - floor;
            self.history.capacity_margin = self.history.capacity_margin.min(margin);
            let raw = margin - i64::try_from(taken).expect("small");
            self.history.capacity_margin_raw = self.history.capacity_margin_raw.min(raw);
            if margin < 0 {
                self.breaches.push(format!(
                    "after {:?}: {serving} Ready schedulable pool Nodes ({taken} taken by faults), below {floor}",
                    e.kind
                ));
            }
        }
    }

    /// Replays the pods from the start of the log, and checks against them: each healthy pod
    /// of the app loses its health only through an accepted eviction or a fault; the app keeps
    /// what its budget needs; no container begins to stop while a pod is bound to its Node; no
    /// Node is deleted while its container runs.
    fn pods_stops_and_deletions(&mut self, events: &[Event], docker: &[DockerEvent]) {
        let mut pods = Pods::default();
        let mut lost_to_faults = 0;
        self.history.min_healthy = usize::MAX;
        self.history.min_healthy_counted = usize::MAX;
        let app = format!("default/{APP}");
        let (lane, since) = (self.lane, self.since);
        let stops = stop_starts(docker);
        let mut stops = stops
            .iter()
            .filter(|(name, at)| *at >= since && lane.rig.is_pool_node(name) && !lane.taken_down(name, *at))
            .peekable();
        for e in events {
            while let Some((name, _)) = stops.next_if(|(_, at)| *at < e.wall) {
                self.stop(&pods, name);
            }
            let lost = pods.apply(&e.kind);
            if e.seq <= self.from {
                continue;
            }
            if let Some(node) = lost {
                if lane.taken_down(&node, e.wall) {
                    lost_to_faults += 1;
                } else {
                    self.breaches
                        .push(format!("a pod on {node} lost its health without an eviction: {:?}", e.kind));
                }
            }
            let healthy = e.app_healthy.get(&app).copied().unwrap_or(0);
            self.history.min_healthy = self.history.min_healthy.min(healthy);
            self.history.min_healthy_counted = self.history.min_healthy_counted.min(healthy + lost_to_faults);
            if healthy + lost_to_faults < APP_REPLICAS - 1 {
                self.breaches.push(format!(
                    "after {:?}: {healthy} healthy pods of {app} ({lost_to_faults} lost to faults); its budget needs {}",
                    e.kind,
                    APP_REPLICAS - 1
                ));
            }
            if let EventKind::NodeDeleted { node } = &e.kind {
                self.history.deletions += 1;
                if running_at(docker, node, e.wall) {
                    self.breaches.push(format!("Node {node} deleted while its container ran"));
                }
            }
        }
        for (name, _) in stops {
            self.stop(&pods, name);
        }
    }

    /// A container began to stop: no pod may still be bound to its Node.
    fn stop(&mut self, pods: &Pods, name: &str) {
        self.history.stops += 1;
        let bound = pods.bound_to(name);
        if !bound.is_empty() {
            self.breaches.push(format!("{name} began to stop with pods still bound to its Node: {bound:?}"));
        }
    }
}

/// What the history of one rollout showed.
#[derive(Debug, Clone, Default)]
struct History {
    /// The least Ready schedulable pool Nodes, plus the serving ones that faults took down,
    /// minus `replicas - maxUnavailable`: never below zero.
    capacity_margin: i64,
    /// The same without adding back what faults took.
    capacity_margin_raw: i64,
    /// The fewest healthy pods of the app at any moment; and the same, counting the pods that
    /// faults took down as healthy (what the budget is held to).
    min_healthy: usize,
    min_healthy_counted: usize,
    /// Container stops and Node deletions checked.
    stops: usize,
    deletions: usize,
}

/// A pod of the fake cluster as replayed from its event log.
#[derive(Debug, Clone, Default)]
struct PodState {
    node: Option<String>,
    healthy: bool,
    evicted: bool,
}

/// The fake cluster's pods, by UID, as replayed from its event log.
#[derive(Debug, Default)]
struct Pods(HashMap<String, PodState>);

impl Pods {
    /// Replays one event; returns the Node of a healthy pod that lost its health other than
    /// through an accepted eviction.
    fn apply(&mut self, kind: &EventKind) -> Option<String> {
        match kind {
            EventKind::PodCreated { uid, node, .. } => {
                self.0.insert(uid.clone(), PodState { node: node.clone(), healthy: false, evicted: false });
                None
            }
            EventKind::PodScheduled { uid, node, .. } => {
                let p = self.0.entry(uid.clone()).or_default();
                p.node = Some(node.clone());
                p.healthy = true;
                None
            }
            EventKind::PodReadyChanged { uid, ready, .. } => {
                let p = self.0.entry(uid.clone()).or_default();
                let lost = (p.healthy && !ready).then(|| p.node.clone().unwrap_or_default());
                p.healthy = *ready && p.node.is_some();
                lost
            }
            EventKind::PodEvicted { uid, .. } => {
                let p = self.0.entry(uid.clone()).or_default();
                p.evicted = true;
                p.healthy = false;
                None
            }
            EventKind::PodDeleted { uid, .. } => {
                self.0.remove(uid).filter(|p| p.healthy && !p.evicted).map(|p| p.node.unwrap_or_default())
            }
            _ => None,
        }
    }

    /// The UIDs of the pods bound to `node`.
    fn bound_to(&self, node: &str) -> Vec<&String> {
        self.0.iter().filter(|(_, p)| p.node.as_deref() == Some(node)).map(|(uid, _)| uid).collect()
    }
}

/// When each container began to stop (its first kill or die after a start), in time order.
fn stop_starts(docker: &[DockerEvent]) -> Vec<(String, SystemTime)> {
    let mut running: BTreeMap<&str, bool> = BTreeMap::new();
    let mut out = Vec::new();
    for e in docker {
        let state = running.entry(&e.name).or_default();
        match e.action.as_str() {
            "start" => *state = true,
            "kill" | "die" if *state => {
                *state = false;
                out.push((e.name.clone(), e.at));
            }
            _ => {}
        }
    }
    out
}

/// Whether Docker's events say the container ran at `at`: started, and not yet exited.
fn running_at(docker: &[DockerEvent], name: &str, at: SystemTime) -> bool {
    docker
        .iter()
        .rev()
        .find(|e| e.name == name && e.at <= at && matches!(e.action.as_str(), "start" | "die"))
        .is_some_and(|e| e.action == "start")
}

/// `POOLCTL_FAULT_SEED`: decimal, or hex with `0x`.
fn seed_from_env() -> u64 {
    let Ok(text) = std::env::var("POOLCTL_FAULT_SEED") else { return DEFAULT_SEED };
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.unwrap_or_else(|e| panic!("POOLCTL_FAULT_SEED={text:?}: {e}"))
}

fn rollouts_from_env() -> usize {
    std::env::var("POOLCTL_FAULT_ROLLOUTS").map_or(DEFAULT_ROLLOUTS, |n| {
        n.parse().unwrap_or_else(|e| panic!("POOLCTL_FAULT_ROLLOUTS={n:?}: {e}"))
    })
}

/// Runs the rollouts numbered `indices` on one pool; `None` when Docker is missing (skipped).
/// A failure sets `failed`, which ends the other lanes after their current rollout.
async fn lane(seed: u64, indices: Vec<usize>, failed: Arc<AtomicBool>) -> Option<Vec<Figures>> {
    let rollouts: Vec<Rollout> = indices.iter().map(|&i| Rollout::draw(seed, i)).collect();
    let mut lane = Lane::start(seed, rollouts.first()?).await?;
    let mut figures = Vec::new();
    for r in &rollouts {
        // Another lane failed: end soon, so that its failure is reported.
        if failed.load(Ordering::Relaxed) {
            break;
        }
        match AssertUnwindSafe(lane.rollout(r)).catch_unwind().await {
            Ok(f) => figures.push(f),
            Err(panic) => {
                failed.store(true, Ordering::Relaxed);
                let message = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("(no message)");
                panic!(
                    "rollout {} failed: {message}\n\nreproduce with POOLCTL_FAULT_SEED={:#x} (rollout {}: {r:?})\n\n{}",
                    r.index, lane.seed, r.index, lane.transcript
                );
            }
        }
    }
    Some(figures)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_faults_never_break_the_safety_rules_and_plain_applies_converge() {
    let (seed, rollouts) = (seed_from_env(), rollouts_from_env());
    let started = Instant::now();
    let lanes = LANES.min(rollouts).max(1);
    let failed = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..lanes)
        .map(|l| {
            let indices: Vec<usize> = (l..rollouts).step_by(lanes).collect();
            let (runtime, failed) = (tokio::runtime::Handle::current(), Arc::clone(&failed));
            // A lane blocks its thread on poolctl's output: give each one a thread of its own.
            tokio::task::spawn_blocking(move || runtime.block_on(lane(seed, indices, failed)))
        })
        .collect();
    let mut figures = Vec::new();
    let mut panic = None;
    for handle in handles {
        match handle.await {
            Ok(Some(f)) => figures.extend(f),
            Ok(None) => return,
            Err(e) => panic = panic.or(Some(e.into_panic())),
        }
    }
    if let Some(panic) = panic {
        std::panic::resume_unwind(panic);
    }
    print_figures(seed, lanes, started.elapsed(), &figures);
}

fn print_figures(seed: u64, lanes: usize, elapsed: Duration, figures: &[Figures]) {
    let count = |kinds: &dyn Fn(&Figures) -> &Vec<Kind>, kind: Kind| {
        figures.iter().map(|f| kinds(f).iter().filter(|k| **k == kind).count()).sum::<usize>()
    };
    println!(
        "fault test: {} rollouts, seed {seed:#x}, {lanes} pools side by side, {:.0}s",
        figures.len(),
        elapsed.as_secs_f64()
    );
    println!("  faults injected (drawn but not reached before apply ended):");
    for kind in Kind::ALL {
        println!(
            "    {:<28} {:>3} ({})",
            kind.describe(),
            count(&|f| &f.injected, kind),
            count(&|f| &f.missed, kind)
        );
    }
    let outcomes: BTreeMap<Outcome, usize> = figures.iter().fold(BTreeMap::new(), |mut m, f| {
        *m.entry(f.outcome).or_default() += 1;
        m
    });
    println!("  faulted applies: {outcomes:?}");
    let applies: BTreeMap<usize, usize> = figures.iter().fold(BTreeMap::new(), |mut m, f| {
        *m.entry(f.applies).or_default() += 1;
        m
    });
    println!("  plain applies needed to converge (applies: rollouts): {applies:?}");
    let margin = figures.iter().map(|f| f.history.capacity_margin).min().unwrap_or_default();
    let raw = figures.iter().map(|f| f.history.capacity_margin_raw).min().unwrap_or_default();
    println!(
        "  least Ready schedulable pool Nodes at any moment, over replicas - maxUnavailable: {raw:+}; \
         {margin:+} adding back the Nodes that faults took down"
    );
    let healthy = figures.iter().map(|f| f.history.min_healthy).min().unwrap_or_default();
    let counted = figures.iter().map(|f| f.history.min_healthy_counted).min().unwrap_or_default();
    println!(
        "  fewest healthy app pods at any moment: {healthy} of {APP_REPLICAS}; {counted} counting the pods \
         that faults took down (the budget needs {})",
        APP_REPLICAS - 1
    );
    let sum = |f: fn(&Figures) -> usize| figures.iter().map(f).sum::<usize>();
    println!(
        "  checked: {} container stops (no pod still bound), {} Node deletions (container not running), \
         {} evictions accepted, {} refused by the budget",
        sum(|f| f.history.stops),
        sum(|f| f.history.deletions),
        sum(|f| f.evictions),
        sum(|f| f.refusals)
    );
}
