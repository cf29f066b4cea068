//! The Prometheus metrics that `watch --listen` serves, kept with the Prometheus project's own
//! client (`prometheus-client`). One registry per process, installed only when they are served:
//! without `--listen`, recording a metric is one check of an unset cell and nothing more.

use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry, Unit};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcileLabels {
    pool: String,
    trigger: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InstanceLabels {
    pool: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RevisionLabels {
    revision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    pool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    commit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WaitLabels {
    pool: String,
    reason: String,
}

/// How many instances of a pool are in each state, at the last look.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InstanceCounts {
    /// `replicas`.
    pub desired: u32,
    /// Serving.
    pub up: usize,
    /// Not serving now: starting, unavailable or unhealthy.
    pub unavailable: usize,
    /// Running another template than the spec's.
    pub outdated: usize,
    /// Being retired, or to be by the plan.
    pub retiring: usize,
}

/// `poolctl_build_info`: set once, never changed.
fn register_build_info(registry: &mut Registry) {
    let build = Family::<BuildLabels, Gauge>::default();
    registry.register("build_info", "The version and commit of this poolctl (always 1)", build.clone());
    let commit = option_env!("POOLCTL_GIT_COMMIT").filter(|c| !c.is_empty()).unwrap_or("unknown");
    build
        .get_or_create(&BuildLabels {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            commit: commit.to_owned(),
        })
        .set(1);
}

/// Every metric poolctl keeps, and the registry that encodes them.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ReconcileLabels, Counter>,
    reconcile_seconds: Histogram,
    step_seconds: Family<ActionLabels, Histogram>,
    instances: Family<InstanceLabels, Gauge>,
    source: Family<RevisionLabels, Gauge>,
    last_success: Family<PoolLabels, Gauge<f64, AtomicU64>>,
    lock_held: Family<PoolLabels, Gauge>,
    degraded: Family<PoolLabels, Gauge>,
    remediation_held: Family<PoolLabels, Gauge>,
    canary_waiting: Family<PoolLabels, Gauge>,
    waiting: Family<WaitLabels, Gauge>,
    in_sync: Family<PoolLabels, Gauge>,
    evictions: Family<ResultLabels, Counter>,
    source_errors: Family<KindLabels, Counter>,
}

/// A metric registered under `name`, and the handle that records into it.
fn registered<M: Metric + Clone + Default>(registry: &mut Registry, name: &str, help: &str) -> M {
    let metric = M::default();
    registry.register(name, help, metric.clone());
    metric
}

/// Buckets from 0.1 s to about 27 min: a step is a `docker create` or a drain.
fn step_buckets() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(0.1, 2.0, 15))
}

static METRICS: OnceLock<Metrics> = OnceLock::new();

/// Start keeping metrics, for this process's life; the registry that `/metrics` encodes.
pub fn install() -> &'static Metrics {
    METRICS.get_or_init(Metrics::new)
}

/// Whether metrics are kept: work done only for them is skipped otherwise.
pub fn installed() -> bool {
    METRICS.get().is_some()
}

/// Record into the metrics, if they are kept.
pub fn record(f: impl FnOnce(&Metrics)) {
    if let Some(metrics) = METRICS.get() {
        f(metrics);
    }
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("poolctl");
        let reconciles = registered(
            &mut registry,
            "reconcile",
            "Reconciles of watch, by pool, what started them and how they ended",
        );
        let reconcile_seconds = step_buckets();
        registry.register_with_unit(
            "reconcile_duration",
            "How long a reconcile took, its rollout included",
            Unit::Seconds,
            reconcile_seconds.clone(),
        );
        let step_seconds = Family::<ActionLabels, Histogram>::new_with_constructor(step_buckets as fn() -> _);
        registry.register_with_unit(
            "step_duration",
            "How long each step of a rollout took, by action",
            Unit::Seconds,
            step_seconds.clone(),
        );
        let instances = registered(
            &mut registry,
            "pool_instances",
            "Instances of each pool at the last look: desired, up, unavailable, outdated, retiring",
        );
        let source =
            registered(&mut registry, "source_info", "The revision of the source last read (always 1)");
        let last_success = Family::<PoolLabels, Gauge<f64, AtomicU64>>::default();
        registry.register_with_unit(
            "last_successful_reconcile_timestamp",
            "When a reconcile of the pool last ended in sync, in seconds since the Unix epoch",
            Unit::Seconds,
            last_success.clone(),
        );
        let lock_held =
            registered(&mut registry, "lock_held", "1 while this process holds the pool's lock, 0 otherwise");
        let degraded = registered(
            &mut registry,
            "pool_degraded",
            "1 while the pool's rollout has stalled past its progressDeadline (Degraded), 0 otherwise",
        );
        let remediation_held = registered(
            &mut registry,
            "pool_remediation_held",
            "1 while more of the pool's instances are unhealthy than maxUnhealthy allows, so that none is \
             replaced (the cluster, not the instances, looks at fault), 0 otherwise",
        );
        let canary_waiting = registered(
            &mut registry,
            "pool_canary_waiting",
            "1 while the pool's canaries serve and the rest of its rollout waits for their promotion \
             (poolctl promote, or autoPromote), 0 otherwise",
        );
        let waiting = registered(
            &mut registry,
            "retirements_waiting",
            "Retirements waiting for what another controller holds, by reason: hooks (the Node's \
             deletion hooks) or volumes (its volumes to detach)",
        );
        let in_sync = registered(
            &mut registry,
            "pool_in_sync",
            "1 when the pool's last reconcile ended with it as its spec asks, 0 when it did not",
        );
        let evictions = registered(
            &mut registry,
            "evictions",
            "Pod evictions asked for in drains, by result: evicted, refused (a PodDisruptionBudget), failed",
        );
        let source_errors = registered(
            &mut registry,
            "source_errors",
            "Looks at the source that found no good desired state, by kind: invalid (the pool files have \
             errors; the last good state is kept) or unreachable (it could not be read or fetched)",
        );
        register_build_info(&mut registry);
        Self {
            registry,
            reconciles,
            reconcile_seconds,
            step_seconds,
            instances,
            source,
            last_success,
            lock_held,
            degraded,
            remediation_held,
            canary_waiting,
            waiting,
            in_sync,
            evictions,
            source_errors,
        }
    }

    /// The metrics in the `OpenMetrics` text format, which Prometheus scrapes.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String fails only on a label value that cannot be written, and every
        // value here is a plain string.
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            tracing::warn!("cannot encode the metrics");
        }
        out
    }

    /// A reconcile of `pool` ended with `result`, started by `trigger`.
    pub fn reconciled(&self, pool: &str, trigger: &str, result: &str) {
        let labels =
            ReconcileLabels { pool: pool.to_owned(), trigger: trigger.to_owned(), result: result.to_owned() };
        self.reconciles.get_or_create(&labels).inc();
        let labels = PoolLabels { pool: pool.to_owned() };
        // A Degraded pool never succeeds: the stalled-rollout alert on this timestamp fires.
        let in_sync = matches!(result, "in_sync" | "applied");
        if in_sync {
            let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
            self.last_success.get_or_create(&labels).set(now.as_secs_f64());
        }
        // A pool another replica holds is that replica's to say.
        if result != "locked" {
            self.in_sync.get_or_create(&labels).set(i64::from(in_sync));
        }
    }

    pub fn reconcile_took(&self, took: Duration) {
        self.reconcile_seconds.observe(took.as_secs_f64());
    }

    pub fn step_took(&self, action: &str, took: Duration) {
        self.step_seconds
            .get_or_create(&ActionLabels { action: action.to_owned() })
            .observe(took.as_secs_f64());
    }

    pub fn instances(&self, pool: &str, counts: InstanceCounts) {
        let states = [
            ("desired", i64::from(counts.desired)),
            ("up", gauge(counts.up)),
            ("unavailable", gauge(counts.unavailable)),
            ("outdated", gauge(counts.outdated)),
            ("retiring", gauge(counts.retiring)),
        ];
        for (state, n) in states {
            let labels = InstanceLabels { pool: pool.to_owned(), state: state.to_owned() };
            self.instances.get_or_create(&labels).set(n);
        }
    }

    /// Whether the pool is Degraded (its rollout stalled past its `progressDeadline`).
    pub fn degraded(&self, pool: &str, degraded: bool) {
        self.degraded.get_or_create(&PoolLabels { pool: pool.to_owned() }).set(i64::from(degraded));
    }

    /// Whether `maxUnhealthy` holds the pool's remediation (more instances unhealthy than it
    /// allows: none is replaced).
    pub fn remediation_held(&self, pool: &str, held: bool) {
        self.remediation_held.get_or_create(&PoolLabels { pool: pool.to_owned() }).set(i64::from(held));
    }

    /// Whether the pool's canaries serve and wait for their promotion.
    pub fn canary_waiting(&self, pool: &str, waiting: bool) {
        self.canary_waiting.get_or_create(&PoolLabels { pool: pool.to_owned() }).set(i64::from(waiting));
    }

    /// A retirement of `pool` began (`waiting`) or ended waiting for `reason` (`hooks`,
    /// `volumes`).
    pub fn retirement_waits(&self, pool: &str, reason: &str, waiting: bool) {
        let gauge =
            self.waiting.get_or_create(&WaitLabels { pool: pool.to_owned(), reason: reason.to_owned() });
        if waiting {
            gauge.inc();
        } else {
            gauge.dec();
        }
    }

    /// The source now reads at `revision`: the only one the info metric shows.
    pub fn source(&self, revision: &str) {
        self.source.clear();
        self.source.get_or_create(&RevisionLabels { revision: revision.to_owned() }).set(1);
    }

    pub fn lock_held(&self, pool: &str, held: bool) {
        self.lock_held.get_or_create(&PoolLabels { pool: pool.to_owned() }).set(i64::from(held));
    }

    /// A look at the source found no good desired state: `invalid` or `unreachable`.
    pub fn source_error(&self, kind: &str) {
        self.source_errors.get_or_create(&KindLabels { kind: kind.to_owned() }).inc();
    }

    /// An eviction asked for ended `evicted`, `refused` or `failed`.
    pub fn evictions(&self, result: &str, count: u64) {
        self.evictions.get_or_create(&ResultLabels { result: result.to_owned() }).inc_by(count);
    }
}

fn gauge(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_prometheus_conventions() {
        let metrics = Metrics::new();
        metrics.reconciled("w", "start", "applied");
        metrics.reconcile_took(Duration::from_millis(1500));
        metrics.step_took("drain", Duration::from_secs(3));
        metrics.instances(
            "w",
            InstanceCounts { desired: 3, up: 2, unavailable: 1, ..InstanceCounts::default() },
        );
        metrics.source("main@0123456789ab");
        metrics.source("main@fedcba987654");
        metrics.lock_held("w", true);
        metrics.degraded("w", true);
        metrics.remediation_held("w", true);
        metrics.canary_waiting("w", true);
        metrics.evictions("refused", 1);
        metrics.reconciled("x", "drift", "failed");
        metrics.reconciled("y", "resync", "in_sync");
        metrics.reconciled("y", "resync", "locked");
        metrics.source_error("invalid");
        let text = metrics.encode();
        for line in [
            r#"poolctl_reconcile_total{pool="w",trigger="start",result="applied"} 1"#,
            "poolctl_reconcile_duration_seconds_count 1",
            r#"poolctl_step_duration_seconds_count{action="drain"} 1"#,
            r#"poolctl_pool_instances{pool="w",state="desired"} 3"#,
            r#"poolctl_pool_instances{pool="w",state="unavailable"} 1"#,
            r#"poolctl_source_info{revision="main@fedcba987654"} 1"#,
            r#"poolctl_lock_held{pool="w"} 1"#,
            r#"poolctl_pool_degraded{pool="w"} 1"#,
            r#"poolctl_pool_remediation_held{pool="w"} 1"#,
            r#"poolctl_pool_canary_waiting{pool="w"} 1"#,
            r#"poolctl_evictions_total{result="refused"} 1"#,
            r#"poolctl_pool_in_sync{pool="w"} 1"#,
            r#"poolctl_pool_in_sync{pool="x"} 0"#,
            r#"poolctl_pool_in_sync{pool="y"} 1"#,
            r#"poolctl_source_errors_total{kind="invalid"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "no {line} in:\n{text}");
        }
        assert!(!text.contains("0123456789ab"), "only the last revision is shown:\n{text}");
        let version = env!("CARGO_PKG_VERSION");
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!(r#"poolctl_build_info{{version="{version}",commit=""#))),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with(r#"poolctl_last_successful_reconcile_timestamp_seconds{pool="w"} "#)),
            "{text}"
        );
    }
}
