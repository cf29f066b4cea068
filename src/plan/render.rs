//! Rendering a plan: human text in the spirit of `terraform plan`, and JSON for machines.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::time::SystemTime;

use serde::Serialize;
use similar::TextDiff;

use super::saved::Provenance;
use crate::spec::escape_controls;

use super::{Action, DrainPreview, Fate, InstanceStatus, Plan, PodRef, PoolPlan, PoolStatus, Step};
use crate::model::LockHolder;
use crate::style::{Style, count};

/// The locks other actors hold on the plan's pools, by pool name, read when the plan was shown
/// (they are not part of the plan: whoever holds one may be changing the pool right now).
#[derive(Debug, Clone, Copy)]
pub struct HeldLocks<'a> {
    pub locks: &'a BTreeMap<String, LockHolder>,
    /// When they were read, for "expires in".
    pub now: SystemTime,
}

/// Write the plan as text.
pub fn render_text(plan: &Plan, out: &mut dyn Write) -> io::Result<()> {
    let held = HeldLocks { locks: &BTreeMap::new(), now: SystemTime::now() };
    render_text_styled(plan, held, Style::PLAIN, false, out)
}

/// A pool with more steps (or instances) than this shows the first [`SHOWN`] and sums up the
/// rest, unless the whole list is asked for: a plan of a thousand instances must not flood a
/// terminal, and `-o json` has every step anyway.
const LONG_LIST: usize = 40;
const SHOWN: usize = 12;

/// Write the plan as text, painted with `style`: what is created green, what is retired red,
/// as `terraform plan` does. Without `full` (`-v`), long lists of steps and instances are
/// summed up after their first lines.
pub fn render_text_styled(
    plan: &Plan,
    held: HeldLocks<'_>,
    style: Style,
    full: bool,
    out: &mut dyn Write,
) -> io::Result<()> {
    writeln!(out, "Source: {}", plan.origin)?;
    // Steps are numbered across the whole plan, so that a number names one step of the apply.
    let mut number = 0;
    for pool in &plan.pools {
        writeln!(out)?;
        writeln!(out, "{}", style.bold(&pool_header(pool)))?;
        if let Some(docker) = &pool.docker {
            writeln!(out, "  Docker: {docker}")?;
        }
        if let Some(source) = &pool.copy_from {
            writeln!(out, "  copyFrom {}", escape_controls(source))?;
        }
        if let Some(holder) = held.locks.get(&pool.name) {
            writeln!(out, "  Locked by {}", holder.describe(held.now))?;
        }
        pool_text(pool, &mut number, style, full, out)?;
    }
    writeln!(out)?;
    writeln!(out, "{}", summary_line(plan, style))
}

/// The last line: what the plan does, what it holds back, and what differs from the source
/// that it leaves alone.
fn summary_line(plan: &Plan, style: Style) -> String {
    let s = plan.summary;
    let mut alone = Vec::new();
    let pools = |n: usize| if n == 1 { ("1 pool".to_owned(), "it") } else { (format!("{n} pools"), "them") };
    if s.undeclared > 0 {
        let (pools, them) = pools(s.undeclared);
        alone.push(format!("{pools} no longer declared (--prune retires {them})"));
    }
    if s.foreign > 0 {
        let (pools, them) = pools(s.foreign);
        alone.push(format!("{pools} of another source (--adopt takes {them} over)"));
    }
    let alone = alone.join(", ");
    let paused = match s.held {
        0 => String::new(),
        1 => " 1 step is held back: its pool is paused.".to_owned(),
        n => format!(" {n} steps are held back: their pools are paused."),
    };
    let configure = if s.configure > 0 { format!(", {} to configure", s.configure) } else { String::new() };
    let in_place = if s.update_in_place > 0 {
        format!(", {} to update in place", s.update_in_place)
    } else {
        String::new()
    };
    let configure = format!("{configure}{in_place}");
    let mut health: Vec<String> = [
        (s.unavailable, "waited for (not serving, within their timeout)"),
        (s.unremediated, "unhealthy held, not replaced"),
        (s.outdated_kept, "outdated kept, not replaced"),
        (s.window_held, "held by disruption windows"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    if s.canary_waiting > 0 {
        health.push(match s.canary_waiting {
            1 => "1 pool waits for canary promotion (poolctl promote)".to_owned(),
            n => format!("{n} pools wait for canary promotion (poolctl promote)"),
        });
    }
    if s.degraded > 0 {
        health.push(format!("{} degraded (past progressDeadline)", count(s.degraded, "pool")));
    }
    let health =
        if health.is_empty() { String::new() } else { format!(" Instances: {}.", health.join(", ")) };
    let waiting = match s.waiting_for_pools {
        0 => String::new(),
        1 => " 1 step waits for the pools its pool depends on (dependsOn).".to_owned(),
        n => format!(" {n} steps wait for the pools their pools depend on (dependsOn)."),
    };
    let paused = format!("{paused}{waiting}{health}");
    let counts = format!(
        "{} {} to create, {} to retire{configure}, {} unchanged",
        style.bold("Plan:"),
        s.create,
        s.retire,
        s.unchanged
    );
    match (plan.has_changes(), alone.is_empty()) {
        (true, true) => format!("{counts}.{paused}"),
        (true, false) => format!("{counts}; left alone: {alone}.{paused}"),
        (false, true) if s.held + s.waiting_for_pools > 0 || !health.is_empty() => {
            format!("No changes will be made.{paused}")
        }
        (false, true) => "No changes. The world matches the source.".to_owned(),
        (false, false) => {
            format!("No changes planned, but the world differs from the source; left alone: {alone}.{paused}")
        }
    }
}

/// Write the plan as JSON.
pub fn render_json(plan: &Plan, out: &mut dyn Write) -> io::Result<()> {
    render_json_saved(plan, &BTreeMap::new(), None, out)
}

/// Write the plan as JSON, with a `lock` in each pool that is locked and, given its
/// provenance, the fields that make it a saved plan `apply FILE` carries out (`revision`,
/// `options`, `observed`).
pub fn render_json_saved(
    plan: &Plan,
    locks: &BTreeMap<String, LockHolder>,
    provenance: Option<&Provenance>,
    out: &mut dyn Write,
) -> io::Result<()> {
    /// The plan with a version of its JSON shape in front, so that consumers can tell when it
    /// changes incompatibly.
    #[derive(Serialize)]
    struct Versioned<'a> {
        format_version: u32,
        origin: &'a crate::model::Origin,
        pools: Vec<PoolRow<'a>>,
        summary: &'a super::Summary,
        #[serde(flatten, skip_serializing_if = "Option::is_none")]
        provenance: Option<&'a Provenance>,
    }
    #[derive(Serialize)]
    struct PoolRow<'a> {
        #[serde(flatten)]
        pool: &'a PoolPlan,
        #[serde(skip_serializing_if = "Option::is_none")]
        lock: Option<&'a LockHolder>,
    }
    // Destructured in full, so that a field added to the plan cannot be left out here.
    let Plan { origin, pools, summary, .. } = plan;
    let pools = pools.iter().map(|pool| PoolRow { pool, lock: locks.get(&pool.name) }).collect();
    let versioned = Versioned { format_version: JSON_FORMAT_VERSION, origin, pools, summary, provenance };
    serde_json::to_writer_pretty(&mut *out, &versioned)?;
    writeln!(out)
}

/// The version of the `-o json` shape (documented in the README), saved plans included.
pub const JSON_FORMAT_VERSION: u32 = 1;

/// The template's diff (the whole template for a new pool `copyFrom` made), as `diff -u`.
fn template_diff(change: &crate::plan::TemplateChange, style: Style, out: &mut dyn Write) -> io::Result<()> {
    let diff = TextDiff::from_lines(&change.old, &change.new);
    let diff = diff
        .unified_diff()
        .header(
            &if change.from_hash.is_empty() {
                "template (none)".to_owned()
            } else {
                format!("template {}", change.from_hash)
            },
            &format!("template {}", change.to_hash),
        )
        .to_string();
    for line in diff.lines() {
        let painted = match line.as_bytes().first() {
            Some(b'+') => style.green(line),
            Some(b'-') => style.red(line),
            Some(b'@') => style.cyan(line),
            _ => line.to_owned(),
        };
        writeln!(out, "  {painted}")?;
    }
    if let Some(moved) = &change.image_moved {
        writeln!(out, "  {}", style.yellow(moved))?;
    }
    // Said before the steps, as Cluster API users asked to know beforehand what replaces.
    if !change.replaced_by.is_empty() {
        let fields = change.replaced_by.join(", ");
        let it = if change.replaced_by.len() == 1 { "it" } else { "them" };
        writeln!(
            out,
            "  {}",
            style.yellow(&format!("replaced: {fields} changed (docker update cannot change {it})"))
        )?;
    }
    Ok(())
}

/// The pool's body, under its header.
fn pool_text(
    pool: &PoolPlan,
    number: &mut usize,
    style: Style,
    full: bool,
    out: &mut dyn Write,
) -> io::Result<()> {
    let held = pool.paused.as_ref().map_or(&[][..], |h| h.steps.as_slice());
    let waiting = pool.waits_for.as_ref().map_or(&[][..], |w| w.steps.as_slice());
    let troubled: Vec<&InstanceStatus> = pool.instances.iter().filter(|i| i.health.is_some()).collect();
    let left: Vec<&InstanceStatus> = pool.instances.iter().filter(|i| i.left.is_some()).collect();
    // An up-to-date pool takes one line; an undeclared one always lists what it leaves running,
    // and any pool says which instances do not serve and which it leaves alone.
    if pool.steps.is_empty()
        && held.is_empty()
        && waiting.is_empty()
        && troubled.is_empty()
        && left.is_empty()
        && pool.degraded.is_none()
        && pool.outdated_kept == 0
        && pool.windows.is_empty()
        && pool.suspended.is_none()
        && pool.canary.is_none()
        && !matches!(pool.status, PoolStatus::Undeclared | PoolStatus::Foreign)
    {
        return Ok(());
    }
    if let Some(suspension) = &pool.suspended {
        let resume = format!("poolctl resume {}", pool.name);
        writeln!(out, "  {} (held back until `{resume}`)", style.yellow(&suspension.describe()))?;
    }
    if let Some(change) = &pool.template_change {
        template_diff(change, style, out)?;
    }
    if let Some(canary) = &pool.canary {
        let said = if canary.holds() { style.yellow(&canary.message) } else { style.green(&canary.message) };
        writeln!(out, "  {said}")?;
    }
    instances_text(pool, style, full, out)?;
    for instance in pool.instances.iter().filter(|i| i.fate == Fate::Retire) {
        if instance.drain_excluded {
            let why =
                "not drained: its Node carries poolctl.dev/exclude-node-draining (its pods go down with it)";
            writeln!(out, "    {}: {}", instance.name, style.yellow(why))?;
        }
        if let Some(why) = instance.refused {
            writeln!(out, "    {}: {}", instance.name, style.red(&format!("not retired: {why}")))?;
        }
        if !instance.hooks.is_empty() {
            let hooks = format!("retirement waits for its hooks: {}", instance.hooks.join(", "));
            writeln!(out, "    {}: {}", instance.name, style.yellow(&hooks))?;
        }
    }
    for (instance, by) in pool.instances.iter().filter_map(|i| Some((i, i.replace?))) {
        let why = format!("replaced although current ({by})");
        writeln!(out, "    {}: {}", instance.name, style.yellow(&why))?;
    }
    write_kept(pool, style, out)?;
    for hold in &pool.windows {
        writeln!(out, "  {}", style.yellow(&window_note(hold)))?;
    }
    for instance in left {
        let why = format!("left alone: {}", instance.left.as_deref().unwrap_or_default());
        writeln!(out, "    {}: {}", instance.name, style.yellow(&why))?;
    }
    for instance in troubled {
        let note = instance.health.as_ref().map(super::describe_health).unwrap_or_default();
        let note = if note.starts_with("unhealthy") { style.red(&note) } else { style.yellow(&note) };
        writeln!(out, "    {}: {note}", instance.name)?;
    }
    if let Some(why) = &pool.unhealthy_held {
        writeln!(out, "  {}", style.yellow(why))?;
    }
    if let Some(why) = &pool.degraded {
        writeln!(out, "  {}", style.red(why))?;
    }
    if let Some(escalation) = &pool.drain_timeout_action {
        let said = escalation.describe();
        let said = if escalation.action == crate::spec::DrainTimeoutAction::Force {
            style.red(&said)
        } else {
            style.yellow(&said)
        };
        writeln!(out, "  {said}")?;
    }
    if !pool.steps.is_empty() {
        writeln!(out, "  Steps:")?;
        let shown = if full || pool.steps.len() <= LONG_LIST { pool.steps.len() } else { SHOWN };
        for step in &pool.steps[..shown] {
            *number += 1;
            step_text(&format!("{:>2}.", *number), step, style, out)?;
        }
        if let Some(rest) = pool.steps.get(shown..).filter(|r| !r.is_empty()) {
            writeln!(
                out,
                "    {}-{}. {} (plan -v lists every step; -o json has them all)",
                *number + 1,
                *number + rest.len(),
                count_verbs(rest)
            )?;
            *number += rest.len();
        }
    }
    held_text(pool, style, out)
}

/// The steps a pool holds back, unnumbered: a number names a step that apply carries out.
fn held_text(pool: &PoolPlan, style: Style, out: &mut dyn Write) -> io::Result<()> {
    if let Some(held) = pool.paused.as_ref().filter(|h| !h.steps.is_empty()) {
        writeln!(out, "  Steps held back (the pool is paused; apply and watch leave it as it is):")?;
        for step in &held.steps {
            step_text("  -", step, style, out)?;
        }
    }
    if let Some(wait) = pool.waits_for.as_ref().filter(|w| !w.steps.is_empty()) {
        writeln!(
            out,
            "  Steps held back until {} in sync and serving (dependsOn); the rollout goes on then:",
            pools_named(&wait.pools)
        )?;
        for step in &wait.steps {
            step_text("  -", step, style, out)?;
        }
    }
    Ok(())
}

/// The pool's instances as a table, summed up after the first [`SHOWN`] unless `full`.
fn instances_text(pool: &PoolPlan, style: Style, full: bool, out: &mut dyn Write) -> io::Result<()> {
    if pool.instances.is_empty() {
        return Ok(());
    }
    writeln!(out, "  Instances:")?;
    let with_nodes = pool.instances.iter().any(|i| i.node.is_some());
    let mut header = vec!["NAME", "CONTAINER"];
    if with_nodes {
        header.push("NODE");
    }
    header.extend(["TEMPLATE", "FATE"]);
    let fate = header.len() - 1;
    let mut rows = vec![header.into_iter().map(str::to_owned).collect()];
    let shown = if full || pool.instances.len() <= LONG_LIST { pool.instances.len() } else { SHOWN };
    rows.extend(pool.instances[..shown].iter().map(|i| instance_row(i, with_nodes)));
    let paint = |row: usize, column: usize, cell: &str| match (row, column) {
        (0, _) => style.bold(cell),
        (_, c) if c == fate && cell == "retire" => style.red(cell),
        _ => cell.to_owned(),
    };
    table(&rows, "    ", &paint, out)?;
    if let Some(rest) = pool.instances.get(shown..).filter(|r| !r.is_empty()) {
        let retired = rest.iter().filter(|i| i.fate == Fate::Retire).count();
        let fates = match (rest.len() - retired, retired) {
            (kept, 0) => format!("{kept} kept"),
            (0, retired) => format!("{retired} retired"),
            (kept, retired) => format!("{kept} kept, {retired} retired"),
        };
        writeln!(out, "    ... and {} more instances: {fates} (plan -v lists them all)", rest.len())?;
    }
    Ok(())
}

/// `996 steps like these: 249 create, 249 await-ready, ...`, verbs in the order they first come.
fn count_verbs(steps: &[Step]) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for step in steps {
        let verb = step.action.verb();
        match counts.iter_mut().find(|(v, _)| *v == verb) {
            Some((_, n)) => *n += 1,
            None => counts.push((verb, 1)),
        }
    }
    let counts: Vec<String> = counts.iter().map(|(verb, n)| format!("{n} {verb}")).collect();
    format!("{} more steps like these: {}", steps.len(), counts.join(", "))
}

fn pool_header(pool: &PoolPlan) -> String {
    let name = &pool.name;
    let gone = "no longer declared by the source";
    match pool.status {
        PoolStatus::Undeclared => format!("Pool {name}: {gone}; not removed: pass --prune to retire it"),
        PoolStatus::Pruned => format!("Pool {name}: {gone}; --prune retires it"),
        PoolStatus::Foreign => format!(
            "Pool {name}: its containers were created from another source ({}); not touched: pass \
             --adopt to manage them from this one",
            escape_controls(pool.managed_by.as_deref().unwrap_or("unknown"))
        ),
        PoolStatus::New | PoolStatus::Existing => {
            let new = if pool.status == PoolStatus::New { " (new)" } else { "" };
            let replicas = count(pool.replicas as usize, "replica");
            let hash = pool.template_hash.as_deref().unwrap_or_default();
            let was = pool
                .template_change
                .as_ref()
                .filter(|c| !c.from_hash.is_empty())
                .map(|c| format!(" (was {})", c.from_hash));
            let state = match &pool.paused {
                Some(held) if pool.suspended.is_some() && held.steps.is_empty() => ", up to date, suspended",
                Some(_) if pool.suspended.is_some() => ", suspended",
                Some(held) if held.steps.is_empty() => ", up to date, paused",
                Some(_) => ", paused",
                None if pool.degraded.is_some() => ", degraded",
                None if pool.waits_for.is_some() => ", waiting for the pools it depends on",
                None if pool.steps.is_empty() && pool.instances.iter().any(|i| i.health.is_some()) => {
                    ", waiting"
                }
                None if pool.steps.is_empty() && pool.windows.iter().any(|w| !w.ignored) => {
                    ", held by disruption windows"
                }
                None if pool.steps.is_empty()
                    && pool.canary.as_ref().is_some_and(super::CanaryState::holds) =>
                {
                    ", canaries waiting for promotion"
                }
                None if pool.steps.is_empty() && pool.outdated_kept > 0 => ", outdated instances kept",
                None if pool.steps.is_empty() => ", up to date",
                None => "",
            };
            format!("Pool {name}{new}: {replicas}, template {hash}{}{state}", was.unwrap_or_default())
        }
    }
}

/// One row of the instance table; `with_nodes`: the table has a NODE column (some instance of
/// the pool is a Node), where an instance without a Node shows `-`.
fn instance_row(instance: &InstanceStatus, with_nodes: bool) -> Vec<String> {
    let mut row = vec![instance.name.to_string(), instance.container.to_owned()];
    if with_nodes {
        let cordoned = match (instance.cordoned, instance.retiring) {
            (true, true) => ", cordoned by poolctl (retiring)",
            (true, false) => ", cordoned (not by poolctl: left as is)",
            (false, _) => "",
        };
        row.push(instance.node.as_ref().map_or_else(|| "-".to_owned(), |node| format!("{node}{cordoned}")));
    }
    // An orphan Node has no container, hence no template hash.
    let hash = if instance.template_hash.is_empty() { "-" } else { &instance.template_hash };
    row.push(hash.to_owned());
    row.push(match instance.fate {
        Fate::Keep if instance.left.is_some() => "leave".to_owned(),
        Fate::Keep => "keep".to_owned(),
        Fate::Retire => "retire".to_owned(),
    });
    if let Some(endpoint) = &instance.elsewhere {
        row.push(format!("(on {endpoint}: the pool moved)"));
    }
    row
}

/// How a table cell is painted: `(row, column, text) -> text`, row 0 the header. Widths are
/// taken before painting, so colour codes never shift a column.
pub(crate) type Paint<'a> = &'a dyn Fn(usize, usize, &str) -> String;

/// Rows as left-aligned columns, two spaces apart.
pub(crate) fn table(
    rows: &[Vec<String>],
    indent: &str,
    paint: Paint<'_>,
    out: &mut dyn Write,
) -> io::Result<()> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width = |cell: &String| cell.chars().count();
    let widths: Vec<usize> =
        (0..columns).map(|i| rows.iter().filter_map(|r| r.get(i)).map(width).max().unwrap_or(0)).collect();
    for (r, row) in rows.iter().enumerate() {
        let mut line = indent.to_owned();
        for (c, (cell, w)) in row.iter().zip(&widths).enumerate() {
            if c > 0 {
                line.push_str("  ");
            }
            line.push_str(&paint(r, c, cell));
            if c + 1 < row.len() {
                line.push_str(&" ".repeat(w - width(cell)));
            }
        }
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// One step, after its `marker` (its number, or a dash for a step held back).
fn step_text(marker: &str, step: &Step, style: Style, out: &mut dyn Write) -> io::Result<()> {
    let detail = match &step.action {
        Action::Create { image, k3s_server: None, .. } => format!("  (image {image})"),
        Action::Create { image, k3s_server: Some(server), .. } => {
            format!("  (image {image}, with the node token of k3s server {server})")
        }
        Action::Join { control_plane } => format!("  (kubeadm, a new bootstrap token from {control_plane})"),
        Action::Bootstrap { commands: 1 } => "  (1 command)".to_owned(),
        Action::Bootstrap { commands } => format!("  ({commands} commands)"),
        Action::AwaitReady { node: true } => "  (container up, Node Ready)".to_owned(),
        Action::AwaitReady { node: false } => "  (container up)".to_owned(),
        Action::Configure(preview) => format!("  ({})", preview.changes.join(", ")),
        Action::UpdateInPlace { fields, .. } => format!("  ({}; same container)", fields.join(", ")),
        Action::Drain(preview) if preview.evict.is_empty() && preview.skip.is_empty() => {
            "  (no pods)".to_owned()
        }
        _ => String::new(),
    };
    let verb = format!("{:<11}", step.action.verb());
    let verb = match step.action {
        Action::Create { .. } => style.green(&verb),
        _ if step.action.is_retirement() => style.red(&verb),
        _ => verb,
    };
    writeln!(out, "    {marker} {verb} {}{detail}", step.instance)?;
    if let Action::Drain(preview) = &step.action {
        drain_text(preview, out)?;
    }
    Ok(())
}

fn drain_text(preview: &DrainPreview, out: &mut dyn Write) -> io::Result<()> {
    const INDENT: &str = "          ";
    let pod = |verb: &str, p: &PodRef| {
        let group = (p.order != 0).then(|| format!("group {}", p.order));
        let mut about: Vec<&str> =
            p.owner.iter().chain(&p.note).chain(&p.rule).chain(&group).map(String::as_str).collect();
        about.dedup(); // a DaemonSet pod is skipped because of its owner: say it once
        let about = if about.is_empty() { String::new() } else { format!("  ({})", about.join("; ")) };
        format!("{INDENT}{verb} {}{about}", p.pod)
    };
    for (verb, pods) in [("evict", &preview.evict), ("wait ", &preview.wait), ("skip ", &preview.skip)] {
        for p in pods {
            writeln!(out, "{}", pod(verb, p))?;
        }
    }
    for pdb in &preview.blocking_pdbs {
        writeln!(out, "{INDENT}drain will wait: PDB {pdb} allows 0 disruptions")?;
    }
    Ok(())
}

/// The outdated instances the plan keeps, and why: a Node's `do-not-disrupt`, or the pool's
/// `strategy: OnDelete`.
fn write_kept(pool: &PoolPlan, style: Style, out: &mut dyn Write) -> io::Result<()> {
    for (instance, annotation) in pool.instances.iter().filter_map(|i| Some((i, i.do_not_disrupt?))) {
        writeln!(out, "    {}: {}", instance.name, style.yellow(&do_not_disrupt_note(annotation)))?;
    }
    if let Some(why) = on_delete_note(pool) {
        writeln!(out, "  {}", style.yellow(&why))?;
    }
    Ok(())
}

/// `rollout blocked by window ... until ... (zone): keeps w-a, w-b`, as plan and status say it.
pub fn window_note(hold: &super::WindowHold) -> String {
    let names: Vec<&str> = hold.instances.iter().map(super::InstanceName::as_str).collect();
    let shown = if names.len() > SHOWN {
        format!("{} and {} more", names[..SHOWN].join(", "), names.len() - SHOWN)
    } else {
        names.join(", ")
    };
    let reason = hold.reason.as_str();
    if hold.ignored {
        format!("--ignore-windows: {reason} goes ahead although {}; disrupting {shown}", hold.message)
    } else {
        format!("{reason} {}: keeps {shown}", hold.message)
    }
}

/// Why an instance its Node's owner holds is kept, as plan and status say it.
pub fn do_not_disrupt_note(annotation: &str) -> String {
    format!("held: its Node carries {annotation}=true; not disrupted until it goes")
}

/// What `strategy: OnDelete` leaves as it is, and the way to replace it, when it leaves any.
pub fn on_delete_note(pool: &PoolPlan) -> Option<String> {
    let hash = pool.template_hash.as_deref().unwrap_or_default();
    // Kept by their Node's owner, or by a window: not what OnDelete keeps.
    let marked_by_owner = pool
        .instances
        .iter()
        .filter(|i| i.do_not_disrupt.is_some() || (i.held_by_window.is_some() && i.template_hash != hash))
        .count();
    let kept = pool.outdated_kept.saturating_sub(marked_by_owner);
    (kept > 0).then(|| {
        let n = if kept == 1 {
            "1 outdated instance keeps".to_owned()
        } else {
            format!("{kept} outdated instances keep")
        };
        format!(
            "strategy OnDelete: {n} running; each is replaced when marked (`poolctl apply --replace NAME`, \
             the label poolctl.dev/replace=true) or gone"
        )
    })
}

/// `pool a is`, `pools a and b are`, `pools a, b and c are`.
fn pools_named(pools: &[String]) -> String {
    match pools {
        [one] => format!("pool {one} is"),
        [rest @ .., last] => format!("pools {} and {last} are", rest.join(", ")),
        [] => "the pools it depends on are".to_owned(),
    }
}
