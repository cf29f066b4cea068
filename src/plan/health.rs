//! Health with a clock: whether an instance serves, and if not, whether to wait for it or to
//! replace it, from the world's own timestamps and the pool's `spec.health` (as Cluster API's
//! `MachineHealthCheck` decides it).
//!
//! Three words are kept apart. *Starting*: created, its coming up not yet recorded (the up
//! record the executor writes last). *Unavailable*: came up once, not serving now, for less
//! than its timeout. *Unhealthy*: unavailable or starting past its timeout, or a container that
//! exited: it is replaced. Neither of the first two counts as serving, and neither is replaced.
//! How long a condition has held is read from the world (a Node condition's
//! `lastTransitionTime`, Docker's creation, up-record and health-check times) against the
//! observation's own "now", so that every run, every replica of `watch` and a restarted
//! poolctl agree; a condition whose start the world does not say is waited for, never judged.

use serde::Serialize;

use crate::model::{Container, ContainerState, Health, Node};
use crate::spec::{HealthSpec, PoolSpec};

/// Where an instance stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Standing {
    /// Serving.
    Up,
    /// Starting or unavailable, within its timeout: waited for.
    Waiting,
    /// Past its timeout, or exited: replaced (unless too many are, see `maxUnhealthy`).
    Unhealthy,
    /// Being retired already (its Node cordoned by poolctl), or not judged (a pool no longer
    /// declared is retired whole): not serving, retired.
    Down,
}

/// Why an instance does not serve, for how long, and what the plan does about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HealthNote {
    /// `starting`, `unavailable` or `unhealthy`.
    pub state: &'static str,
    /// What is wrong: `Ready=Unknown`, `exited (1)`, `restarting`, `HEALTHCHECK unhealthy`,
    /// `no Node`, `coming up`...
    pub reason: String,
    /// For how long it has held, in seconds, when the world says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<u64>,
    /// After how long it makes the instance unhealthy; absent when it does so at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// `waiting`, `replace`, or `held` (more of the pool are unhealthy than `maxUnhealthy`).
    pub action: &'static str,
}

/// What the health settings make of one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Assessment {
    pub standing: Standing,
    /// Starting, and what is left of its coming up can be finished by a plan step (`await-ready`,
    /// which records it up): a run that created it was killed after its bootstrap and join.
    pub resumable: bool,
    /// Unhealthy, but held by `maxUnhealthy`: waited for, and not retired even as a surplus.
    pub held: bool,
    pub note: Option<HealthNote>,
    /// When a waiting instance turns unhealthy, if the world says when its condition began.
    pub deadline: Option<i64>,
}

impl Assessment {
    fn of(standing: Standing) -> Self {
        Self { standing, resumable: false, held: false, note: None, deadline: None }
    }

    /// Up or down, not judged: an instance of a pool no longer declared, or an orphan Node.
    pub(super) fn plain(up: bool) -> Self {
        Self::of(if up { Standing::Up } else { Standing::Down })
    }

    /// Count a starting instance as serving: it looks up (its Node Ready, or its container up
    /// with nothing left to run) although the world holds no record that it came up. A record
    /// can be lost (`docker container prune` deletes never-started containers), and a missing
    /// record must never let a rollout spend capacity that serves.
    pub(super) fn count_as_up(&mut self) {
        *self = Self::of(Standing::Up);
    }

    /// Keep an unhealthy instance as if it were waiting: its Node's owner asked, by `annotation`,
    /// that it be reported, not replaced.
    pub(super) fn skip_remediation(&mut self, annotation: &'static str) {
        self.hold_as(if annotation == crate::model::labels::SKIP_REMEDIATION {
            "held (poolctl.dev/skip-remediation)"
        } else {
            "held (cluster.x-k8s.io/skip-remediation)"
        });
    }

    /// Keep an unhealthy instance as it is: a disruption window holds back `remediation` now.
    pub(super) fn hold_for_window(&mut self) {
        self.hold_as("held (disruption window)");
    }

    /// Keep an unhealthy instance as it is: it runs the old template, and canaries of the new
    /// one wait for promotion, which nothing old is disrupted before.
    pub(super) fn hold_for_canaries(&mut self) {
        self.hold_as("held (canaries wait for promotion)");
    }

    /// Keep an unhealthy instance as if it were waiting: more of the pool are unhealthy than
    /// `maxUnhealthy` allows, so the fault is taken to be the cluster's.
    pub(super) fn hold(&mut self) {
        self.hold_as("held");
    }

    /// Hold it, the note's action saying why.
    fn hold_as(&mut self, action: &'static str) {
        self.standing = Standing::Waiting;
        self.held = true;
        if let Some(note) = &mut self.note {
            note.action = action;
        }
    }
}

/// Something wrong with an instance, and the rule that judges it.
struct Trouble {
    state: &'static str,
    reason: String,
    /// When it began, if the world says; `None` waits for ever.
    since: Option<i64>,
    /// After how long it is unhealthy; `None` at once.
    timeout: Option<u64>,
}

/// Judge an instance of a declared pool with `spec`: its container and, for a pool of Nodes,
/// its Node, at `now` (seconds since the Unix epoch). `locked`: another run held the pool's
/// lock when the world was observed.
pub(super) fn assess(
    spec: &PoolSpec,
    c: &Container,
    node: Option<&Node>,
    now: i64,
    locked: bool,
) -> Assessment {
    if node.is_some_and(|n| n.cordoned_by_poolctl) {
        // A retirement an earlier run began: it is finished, not judged.
        return Assessment::of(Standing::Down);
    }
    let Some(trouble) = trouble(spec, c, node) else { return Assessment::of(Standing::Up) };
    if trouble.state == "starting" && resumable(spec, c, node) {
        let resumed = HealthNote {
            state: "starting",
            reason: trouble.reason,
            seconds: trouble.since.map(|since| u64::try_from(now.saturating_sub(since)).unwrap_or(0)),
            timeout: None,
            action: "resume",
        };
        return Assessment { resumable: true, note: Some(resumed), ..Assessment::of(Standing::Waiting) };
    }
    // Coming up with nobody making it: the run that created it was killed (every run holds the
    // pool's lock while it creates). It never served, and nothing will finish it.
    let trouble = if trouble.state == "starting" && !locked {
        let reason = if c.state == ContainerState::Created {
            "created, never started"
        } else {
            "coming up, abandoned"
        };
        Trouble { state: "unhealthy", reason: reason.to_owned(), timeout: None, ..trouble }
    } else {
        trouble
    };
    let elapsed = trouble.since.map(|since| u64::try_from(now.saturating_sub(since)).unwrap_or(0));
    let unhealthy = match (trouble.timeout, elapsed) {
        (None, _) => true,
        (Some(timeout), Some(elapsed)) => elapsed >= timeout,
        (Some(_), None) => false,
    };
    let deadline = match (trouble.since, trouble.timeout) {
        (Some(since), Some(timeout)) if !unhealthy => {
            Some(since.saturating_add(i64::try_from(timeout).unwrap_or(i64::MAX)))
        }
        _ => None,
    };
    let judged = HealthNote {
        state: if unhealthy { "unhealthy" } else { trouble.state },
        reason: trouble.reason,
        seconds: elapsed,
        timeout: trouble.timeout,
        action: if unhealthy { "replace" } else { "waiting" },
    };
    let standing = if unhealthy { Standing::Unhealthy } else { Standing::Waiting };
    Assessment { note: Some(judged), deadline, ..Assessment::of(standing) }
}

/// Whether what is left of a starting instance's coming up is only the Ready wait, so that a
/// plan can finish it rather than wait for it to time out: its Node registered and is Ready
/// (which its kubelet does only once the bootstrap and join are done), or, for a container-only
/// pool without bootstrap commands or join, its container is up. A bootstrap cut short cannot be
/// told from one that finished, so such an instance is left to its timeout.
fn resumable(spec: &PoolSpec, c: &Container, node: Option<&Node>) -> bool {
    if !c.is_up() {
        return false;
    }
    if spec.node.is_some() {
        node.is_some_and(|n| n.ready)
    } else {
        spec.bootstrap.is_empty() && spec.join.is_none()
    }
}

/// What keeps the instance from serving, if anything: the container first, then whether it
/// finished coming up, then its Node.
fn trouble(spec: &PoolSpec, c: &Container, node: Option<&Node>) -> Option<Trouble> {
    let health = &spec.health;
    let container_timeout = Some(health.container_timeout.get().as_secs());
    let startup = Some(startup_timeout(spec));
    let unavailable = |reason: &str, since, timeout| {
        Some(Trouble { state: "unavailable", reason: reason.to_owned(), since, timeout })
    };
    let starting = |reason: &str| {
        Some(Trouble {
            state: "starting",
            reason: reason.to_owned(),
            since: Some(c.created),
            timeout: startup,
        })
    };
    match c.state {
        // Docker will not start it again: no blip, whatever the restart policy says.
        ContainerState::Exited | ContainerState::Dead | ContainerState::Removing => {
            return Some(Trouble { state: "unhealthy", reason: exit_reason(c), since: None, timeout: None });
        }
        // The run that holds the pool's lock starts it next; one killed between creating and
        // starting it left it, and nobody starts it (see `assess`).
        ContainerState::Created => return starting("created, not started yet"),
        ContainerState::Paused => return unavailable("paused", None, container_timeout),
        ContainerState::Restarting => return unavailable("restarting", c.since, container_timeout),
        ContainerState::Running => {}
    }
    if c.came_up.is_none() {
        return starting("coming up");
    }
    match c.health {
        Health::Unhealthy => return unavailable("HEALTHCHECK unhealthy", c.since, container_timeout),
        Health::Starting => return unavailable("HEALTHCHECK starting", c.since, container_timeout),
        Health::None | Health::Healthy => {}
    }
    // A container-only pool serves once its container does.
    spec.node.as_ref()?;
    let startup_timeout = Some(health.node_startup_timeout.get().as_secs());
    let Some(node) = node else { return unavailable("no Node", c.came_up, startup_timeout) };
    // The condition that turns the instance unhealthy first, of those that hold.
    let held = health
        .unhealthy_conditions
        .iter()
        .filter_map(|rule| {
            let cond = node.conditions.iter().find(|n| n.kind == rule.kind && n.status == rule.status)?;
            let timeout = rule.timeout.get().as_secs();
            let deadline = cond.since.map(|s| s.saturating_add(i64::try_from(timeout).unwrap_or(i64::MAX)));
            Some((
                deadline.unwrap_or(i64::MAX),
                format!("{}={}", cond.kind, cond.status),
                cond.since,
                timeout,
            ))
        })
        .min_by(|a, b| a.0.cmp(&b.0));
    if let Some((_, reason, since, timeout)) = held {
        return unavailable(&reason, since, Some(timeout));
    }
    if node.ready {
        None
    } else {
        // Not Ready in a way no rule names (no Ready condition yet): waited for, never judged.
        unavailable("NotReady", None, None).map(|t| Trouble { timeout: startup_timeout, ..t })
    }
}

/// How long the Node's kubelet has been silent past the pool's timeout, if it has: its Ready
/// condition is one of `unhealthyConditions` (`Ready=Unknown`, `Ready=False` by default) and has
/// held longer than that rule's timeout, by the world's clock. What makes a Node whose container
/// is out of view count as gone.
pub(super) fn silent_for(health: &HealthSpec, node: &Node, now: i64) -> Option<String> {
    let ready = node.conditions.iter().find(|c| c.kind == "Ready" && c.status != "True")?;
    let since = ready.since?;
    let rule =
        health.unhealthy_conditions.iter().find(|r| r.kind == ready.kind && r.status == ready.status)?;
    let timeout = i64::try_from(rule.timeout.get().as_secs()).unwrap_or(i64::MAX);
    let elapsed = now.saturating_sub(since);
    (elapsed >= timeout).then(|| {
        let time = |secs: i64| crate::spec::Duration::from_secs(secs.unsigned_abs()).to_string();
        format!("Ready={} for {} (timeout {})", ready.status, time(elapsed), time(timeout))
    })
}

/// How long a new instance may take to come up: `nodeStartupTimeout` for a pool of Nodes; for
/// a container-only pool, its bootstrap commands' own timeouts plus `containerTimeout`.
pub(super) fn startup_timeout(spec: &PoolSpec) -> u64 {
    if spec.node.is_some() {
        spec.health.node_startup_timeout.get().as_secs()
    } else {
        let bootstrap: u64 = spec.bootstrap.iter().map(|b| b.timeout.get().as_secs()).sum();
        bootstrap.saturating_add(spec.health.container_timeout.get().as_secs())
    }
}

/// `exited (1)` from Docker's status text `Exited (1) 3 minutes ago`; the state otherwise.
fn exit_reason(c: &Container) -> String {
    let code = c.status.strip_prefix("Exited (").and_then(|rest| rest.split_once(')')).map(|(code, _)| code);
    match code {
        Some(code) => format!("exited ({code})"),
        None => c.state.as_str().to_owned(),
    }
}

/// `for 25s of 5m: waiting`: how a note reads after its reason, in plan and status text.
pub fn describe(note: &HealthNote) -> String {
    let time = |secs: u64| crate::spec::Duration::from_secs(secs).to_string();
    let reason = match note.reason.split_once('=') {
        Some(("Ready", _)) if note.state != "unhealthy" => format!("NotReady ({})", note.reason),
        _ => note.reason.clone(),
    };
    match (note.state, note.seconds, note.timeout) {
        ("unhealthy", Some(s), Some(t)) => {
            format!("unhealthy: {reason} for {} (timeout {}): {}", time(s), time(t), note.action)
        }
        ("unhealthy", _, _) => format!("unhealthy: {reason}: {}", note.action),
        (state, Some(s), _) if note.action == "resume" => {
            format!("{state}: {reason} for {}: finishing it (await-ready)", time(s))
        }
        (state, Some(s), _) if note.action == "replace" => {
            format!("{state}: {reason} for {}: outdated, replace", time(s))
        }
        (state, Some(s), Some(t)) => {
            format!("{state}: {reason} for {} of {}: {}", time(s), time(t), note.action)
        }
        (state, _, _) => format!("{state}: {reason}: {}", note.action),
    }
}
