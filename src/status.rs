//! What `poolctl status` shows: each pool of the source as it is now (its instances, their
//! template, container, uptime and Node, the pool's lock, whether it is in sync), built from an
//! observed world and the plan made from it, with no I/O; rendered as a table or as JSON.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::time::SystemTime;

use serde::Serialize;

use crate::model::{LockHolder, Origin, World};
use crate::plan::{Plan, PoolPlan, PoolStatus, is_up};
use crate::style::{Style, count};

/// The version of the `status -o json` shape.
pub const STATUS_FORMAT_VERSION: u32 = 1;

/// Every pool of the source, as observed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Status {
    pub format_version: u32,
    pub origin: Origin,
    pub pools: Vec<PoolView>,
}

/// One pool, as observed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolView {
    pub name: String,
    /// As in the plan: `new`, `existing`, `undeclared`, `pruned`, `foreign`.
    pub status: PoolStatus,
    /// The spec's template hash (`None` for a pool the source does not declare).
    pub template_hash: Option<String>,
    pub replicas: u32,
    /// Instances that serve: container up and, for a pool of Nodes, Node Ready and not being
    /// retired.
    pub up: usize,
    /// The plan for this pool has no steps: the world matches the source.
    pub in_sync: bool,
    /// How many steps an apply would take now (held back ones of a paused pool included).
    pub pending_steps: usize,
    /// `spec.paused`: apply and watch leave the pool as it is.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Set when `poolctl suspend` suspended the pool: "suspended by WHO at WHEN: REASON".
    /// Apply and watch leave it as it is until `poolctl resume`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suspended: Option<String>,
    /// The suspension as recorded: who, when (seconds since the Unix epoch) and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suspension: Option<crate::model::Suspension>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock: Option<LockHolder>,
    /// Whether the pool's instances are Nodes (the NODE and CORDONED columns).
    pub nodes: bool,
    pub instances: Vec<InstanceView>,
    /// Set when more instances are unhealthy than `maxUnhealthy` allows: why none is replaced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unhealthy_held: Option<String>,
    /// Set when the pool's rollout passed its `progressDeadline`: why nothing is created.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub degraded: Option<String>,
    /// Set when `strategy: OnDelete` keeps outdated instances: how many, and how to replace one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_delete: Option<String>,
    /// What the pool's disruption windows hold back now, and until when.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<String>,
    /// Set while canaries lead a rollout (`spec.rollout.canary`): how many, and whether they
    /// are promoted; until they are, the pool is not in sync.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canary: Option<crate::plan::CanaryState>,
    /// Set when the pool's template cannot be read now (its `copyFrom` container stopped, say):
    /// why, and what its instances are shown against.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template_unread: Option<String>,
}

/// One instance, as observed.
// Each flag is a column of its own, read independently.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstanceView {
    pub name: String,
    /// Empty for a Node without a container.
    pub template_hash: String,
    /// The instance runs the spec's template (`false` for any other, or for a pool the source
    /// does not declare).
    pub current: bool,
    /// Docker's state (`running`, `exited`, ...) or `missing`.
    pub container: String,
    /// Docker's status text with the uptime (`Up 5 minutes (healthy)`), empty when missing.
    pub docker_status: String,
    /// `ready`, `not-ready` or `missing`; absent for a container-only pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub cordoned: bool,
    /// The cordon is poolctl's: the instance is being retired.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub retiring: bool,
    pub up: bool,
    /// Why it does not serve, for how long, and what a plan does about it (as in the plan).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<crate::plan::HealthNote>,
    /// While it is being retired: what the world shows its retirement waits for (deletion hooks
    /// on its Node, a PodDisruptionBudget that allows no disruption of a pod to evict).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waits: Option<String>,
    /// Kept although outdated or one too many: its Node's owner holds it, by this annotation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub do_not_disrupt: Option<String>,
}

impl Status {
    /// This status without what changes by itself as time passes: the uptime in Docker's status
    /// text (`Up 5 seconds`), how long a health state has held, a lock's renewed expiry. Two
    /// statuses with the same facts say the same thing (`status -w` in a pipe prints only a new
    /// one).
    #[must_use]
    pub fn facts(&self) -> Self {
        let mut facts = self.clone();
        for pool in &mut facts.pools {
            if let Some(lock) = &mut pool.lock {
                lock.expires = SystemTime::UNIX_EPOCH;
            }
            for instance in &mut pool.instances {
                instance.docker_status = steady(&instance.docker_status);
                if let Some(health) = &mut instance.health {
                    health.seconds = None;
                }
            }
        }
        facts
    }
}

/// Docker's status text without its times: the state word and what it says in parentheses
/// (`Up 5 minutes (healthy)` -> `Up (healthy)`, `Exited (137) 2 minutes ago` -> `Exited (137)`).
fn steady(text: &str) -> String {
    let mut kept: Vec<&str> = text.split_whitespace().take(1).collect();
    let mut rest = text;
    while let Some(open) = rest.find('(') {
        let Some(close) = rest[open..].find(')') else { break };
        kept.push(&rest[open..=open + close]);
        rest = &rest[open + close + 1..];
    }
    kept.join(" ")
}

/// The status of every pool `plan` covers, with the details the plan leaves out read from
/// `world`, and the locks held on them.
pub fn status(plan: &Plan, world: &World, locks: &BTreeMap<String, LockHolder>) -> Status {
    let pools = plan.pools.iter().map(|pool| pool_view(pool, world, locks.get(&pool.name))).collect();
    Status { format_version: STATUS_FORMAT_VERSION, origin: plan.origin.clone(), pools }
}

fn pool_view(pool: &PoolPlan, world: &World, lock: Option<&LockHolder>) -> PoolView {
    let nodes = pool.instances.iter().any(|i| i.node.is_some());
    let instances: Vec<InstanceView> = pool
        .instances
        .iter()
        .map(|i| {
            let container = world.containers.iter().find(|c| c.name == *i.name);
            let node = world.nodes.iter().find(|n| n.name == *i.name);
            InstanceView {
                name: i.name.to_string(),
                template_hash: i.template_hash.clone(),
                current: pool.template_hash.as_deref().is_some_and(|h| h == i.template_hash),
                container: i.container.to_owned(),
                docker_status: container.map(|c| c.status.clone()).unwrap_or_default(),
                node: i.node.map(str::to_owned),
                cordoned: i.cordoned,
                retiring: i.retiring,
                up: container.is_some_and(|c| is_up(c, node, nodes, false)),
                health: i.health.clone(),
                waits: i.retiring.then(|| retirement_waits(pool, i)).flatten(),
                do_not_disrupt: i.do_not_disrupt.map(str::to_owned),
            }
        })
        .collect();
    let held = pool.paused.as_ref().map_or(0, |p| p.steps.len());
    let waited = instances.iter().any(|i| i.health.is_some());
    PoolView {
        name: pool.name.clone(),
        status: pool.status,
        template_hash: pool.template_hash.clone(),
        replicas: pool.replicas,
        up: instances.iter().filter(|i| i.up).count(),
        in_sync: pool.steps.is_empty()
            && held == 0
            && !waited
            && pool.degraded.is_none()
            && pool.windows.iter().all(|w| w.ignored)
            && !pool.canary.as_ref().is_some_and(crate::plan::CanaryState::holds),
        pending_steps: pool.steps.len() + held,
        paused: pool.paused.is_some() && pool.suspended.is_none(),
        suspended: pool.suspended.as_ref().map(crate::model::Suspension::describe),
        suspension: pool.suspended.clone(),
        lock: lock.cloned(),
        nodes,
        instances,
        unhealthy_held: pool.unhealthy_held.clone(),
        on_delete: crate::plan::on_delete_note(pool),
        windows: pool.windows.iter().filter(|w| !w.ignored).map(crate::plan::window_note).collect(),
        template_unread: None,
        degraded: pool.degraded.clone(),
        canary: pool.canary.clone(),
    }
}

/// What the world shows the retirement of `instance` waits for: the deletion hooks on its Node,
/// and the budgets that allow no disruption of a pod its drain evicts. `None` when nothing does.
fn retirement_waits(pool: &PoolPlan, instance: &crate::plan::InstanceStatus) -> Option<String> {
    let mut waits = Vec::new();
    if !instance.hooks.is_empty() {
        waits.push(format!("its hooks ({})", instance.hooks.join(", ")));
    }
    let steps = pool.all_steps();
    for step in steps.filter(|s| s.instance == instance.name) {
        if let crate::plan::Action::Drain(preview) = &step.action {
            waits.extend(
                preview.blocking_pdbs.iter().map(|pdb| format!("PDB {pdb}, which allows 0 disruptions")),
            );
        }
    }
    (!waits.is_empty()).then(|| format!("its retirement waits for {}", waits.join("; ")))
}

/// Write the status as tables, one per pool, each under a line that sums the pool up.
pub fn render_text(status: &Status, now: SystemTime, style: Style, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "Source: {}", status.origin)?;
    for pool in &status.pools {
        writeln!(out)?;
        writeln!(out, "{}", style.bold(&pool_line(pool)))?;
        if let Some(lock) = &pool.lock {
            writeln!(out, "  Locked by {}", lock.describe(now))?;
        }
        if let Some(why) = &pool.template_unread {
            writeln!(out, "  {}", style.red(why))?;
        }
        if pool.instances.is_empty() {
            writeln!(out, "  No instances.")?;
            continue;
        }
        let mut header = vec!["NAME", "TEMPLATE", "CONTAINER", "STATUS"];
        if pool.nodes {
            header.extend(["NODE", "CORDONED"]);
        }
        let mut rows: Vec<Vec<String>> = vec![header.into_iter().map(str::to_owned).collect()];
        rows.extend(pool.instances.iter().map(|i| instance_row(pool, i)));
        let paint = |row: usize, column: usize, cell: &str| match (row, column) {
            (0, _) => style.bold(cell),
            (_, 1) if cell.contains("outdated") => style.yellow(cell),
            (_, 2 | 4) if cell == "running" || cell == "Ready" => style.green(cell),
            (_, 2 | 4) => style.red(cell),
            _ => cell.to_owned(),
        };
        crate::plan::table(&rows, "  ", &paint, out)?;
        for instance in &pool.instances {
            if let Some(note) = &instance.health {
                let note = crate::plan::describe_health(note);
                let note = if note.starts_with("unhealthy") { style.red(&note) } else { style.yellow(&note) };
                writeln!(out, "  {}: {note}", instance.name)?;
            }
            if let Some(waits) = &instance.waits {
                writeln!(out, "  {}: {}", instance.name, style.yellow(waits))?;
            }
            if let Some(annotation) = &instance.do_not_disrupt {
                let why = crate::plan::do_not_disrupt_note(annotation);
                writeln!(out, "  {}: {}", instance.name, style.yellow(&why))?;
            }
        }
        let canary = pool.canary.as_ref().map(|c| &c.message);
        for why in pool.unhealthy_held.iter().chain(&pool.on_delete).chain(canary).chain(&pool.windows) {
            writeln!(out, "  {}", style.yellow(why))?;
        }
        if let Some(why) = &pool.degraded {
            writeln!(out, "  {}", style.red(why))?;
        }
    }
    Ok(())
}

/// `Pool web: 2/3 up, template 3e94937dc7, not in sync (4 steps pending)`.
fn pool_line(pool: &PoolView) -> String {
    let name = &pool.name;
    let state = match pool.status {
        PoolStatus::Undeclared => {
            return format!("Pool {name}: no longer declared by the source (not managed)");
        }
        PoolStatus::Foreign => return format!("Pool {name}: created from another source (not managed)"),
        PoolStatus::Pruned => "no longer declared, retired with --prune".to_owned(),
        PoolStatus::New | PoolStatus::Existing if pool.degraded.is_some() => "Degraded".to_owned(),
        PoolStatus::New | PoolStatus::Existing if pool.in_sync => "in sync".to_owned(),
        PoolStatus::New | PoolStatus::Existing
            if pool.pending_steps == 0
                && pool.canary.as_ref().is_some_and(crate::plan::CanaryState::holds) =>
        {
            "not in sync (canaries waiting for promotion)".to_owned()
        }
        PoolStatus::New | PoolStatus::Existing if pool.pending_steps == 0 => {
            let n = pool.instances.iter().filter(|i| i.health.is_some()).count();
            format!("not in sync ({} not serving, see below)", count(n, "instance"))
        }
        PoolStatus::New | PoolStatus::Existing => {
            format!("not in sync ({} pending)", count(pool.pending_steps, "step"))
        }
    };
    let paused = match &pool.suspended {
        Some(suspended) => format!(", {suspended}"),
        None if pool.paused => ", paused".to_owned(),
        None => String::new(),
    };
    let hash = pool.template_hash.as_deref().unwrap_or("-");
    format!("Pool {name}: {}/{} up, template {hash}, {state}{paused}", pool.up, pool.replicas)
}

fn instance_row(pool: &PoolView, i: &InstanceView) -> Vec<String> {
    let template = match (i.template_hash.as_str(), i.current) {
        ("", _) => "-".to_owned(),
        (hash, true) => format!("{hash} (current)"),
        (hash, false) => format!("{hash} (outdated)"),
    };
    let docker = if i.docker_status.is_empty() { "-" } else { &i.docker_status };
    let mut row = vec![i.name.clone(), template, i.container.clone(), docker.to_owned()];
    if pool.nodes {
        let node = match i.node.as_deref() {
            Some("ready") => "Ready",
            Some("not-ready") => "NotReady",
            Some(_) | None => "missing",
        };
        let cordoned = match (i.cordoned, i.retiring) {
            (false, _) => "no",
            (true, true) => "yes (poolctl: retiring)",
            (true, false) => "yes",
        };
        row.extend([node.to_owned(), cordoned.to_owned()]);
    }
    row
}

/// Write the status as one JSON document (`pretty`: indented; otherwise one line, for `-w`).
pub fn render_json(status: &Status, pretty: bool, out: &mut dyn Write) -> io::Result<()> {
    if pretty {
        serde_json::to_writer_pretty(&mut *out, status)?;
    } else {
        serde_json::to_writer(&mut *out, status)?;
    }
    writeln!(out)
}

#[cfg(test)]
mod tests;
