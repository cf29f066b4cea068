//! Rendering a plan: human text in the spirit of `terraform plan`, and JSON for machines.

use std::io::{self, Write};

use similar::TextDiff;

use super::{Action, DrainPreview, Fate, InstanceStatus, Plan, PodRef, PoolPlan, PoolStatus, Step};

/// Write the plan as text.
pub fn render_text(plan: &Plan, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "Source: {}", plan.origin)?;
    // Steps are numbered across the whole plan, so that a number names one step of the apply.
    let mut number = 0;
    for pool in &plan.pools {
        writeln!(out)?;
        pool_text(pool, &mut number, out)?;
    }
    writeln!(out)?;
    if plan.has_changes() {
        let s = plan.summary;
        let configure =
            if s.configure > 0 { format!(", {} to configure", s.configure) } else { String::new() };
        writeln!(
            out,
            "Plan: {} to create, {} to retire{configure}, {} unchanged.",
            s.create, s.retire, s.unchanged
        )
    } else {
        writeln!(out, "No changes. The world matches the source.")
    }
}

/// Write the plan as JSON.
pub fn render_json(plan: &Plan, out: &mut dyn Write) -> io::Result<()> {
    /// The plan with a version of its JSON shape in front, so that consumers can tell when it
    /// changes incompatibly.
    #[derive(serde::Serialize)]
    struct Versioned<'a> {
        format_version: u32,
        #[serde(flatten)]
        plan: &'a Plan,
    }
    serde_json::to_writer_pretty(&mut *out, &Versioned { format_version: JSON_FORMAT_VERSION, plan })?;
    writeln!(out)
}

/// The version of the `-o json` shape (documented in the README).
const JSON_FORMAT_VERSION: u32 = 1;

fn pool_text(pool: &PoolPlan, number: &mut usize, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "{}", pool_header(pool))?;
    // An up-to-date pool takes one line; an undeclared one always lists what it leaves running.
    if pool.steps.is_empty() && !matches!(pool.status, PoolStatus::Undeclared | PoolStatus::Foreign) {
        return Ok(());
    }
    if let Some(change) = &pool.template_change {
        let diff = TextDiff::from_lines(&change.old, &change.new);
        let diff = diff
            .unified_diff()
            .header(&format!("template {}", change.from_hash), &format!("template {}", change.to_hash))
            .to_string();
        for line in diff.lines() {
            writeln!(out, "  {line}")?;
        }
    }
    if !pool.instances.is_empty() {
        writeln!(out, "  Instances:")?;
        let rows: Vec<Vec<String>> = pool.instances.iter().map(instance_row).collect();
        table(&rows, "    ", out)?;
    }
    if !pool.steps.is_empty() {
        writeln!(out, "  Steps:")?;
        for step in &pool.steps {
            *number += 1;
            step_text(*number, step, out)?;
        }
    }
    Ok(())
}

fn pool_header(pool: &PoolPlan) -> String {
    let name = &pool.name;
    let gone = "no longer declared by the source";
    match pool.status {
        PoolStatus::Undeclared => {
            format!("Pool {name}: {gone}; not removed: pass --prune to retire it")
        }
        PoolStatus::Pruned => {
            format!("Pool {name}: {gone}; --prune retires it")
        }
        PoolStatus::Foreign => format!(
            "Pool {name}: its containers were created from another source ({}); not touched: pass \
             --adopt to manage them from this one",
            pool.managed_by.as_deref().unwrap_or("unknown")
        ),
        PoolStatus::New | PoolStatus::Existing => {
            let new = if pool.status == PoolStatus::New { " (new)" } else { "" };
            let replicas = match pool.replicas {
                1 => "1 replica".to_owned(),
                n => format!("{n} replicas"),
            };
            let hash = pool.template_hash.as_deref().unwrap_or_default();
            let was = pool.template_change.as_ref().map(|c| format!(" (was {})", c.from_hash));
            let up_to_date = if pool.steps.is_empty() { ", up to date" } else { "" };
            format!("Pool {name}{new}: {replicas}, template {hash}{}{up_to_date}", was.unwrap_or_default())
        }
    }
}

fn instance_row(instance: &InstanceStatus) -> Vec<String> {
    let mut row = vec![instance.name.to_string(), instance.container.to_owned()];
    if let Some(node) = &instance.node {
        let cordoned = match (instance.cordoned, instance.retiring) {
            (true, true) => ", cordoned by poolctl (retiring)",
            (true, false) => ", cordoned (not by poolctl: left as is)",
            (false, _) => "",
        };
        row.push(format!("node {node}{cordoned}"));
    }
    // An orphan Node has no container, hence no template hash.
    let hash = if instance.template_hash.is_empty() { "-" } else { &instance.template_hash };
    row.push(hash.to_owned());
    row.push(match instance.fate {
        Fate::Keep => "keep".to_owned(),
        Fate::Retire => "retire".to_owned(),
    });
    row
}

/// Rows as left-aligned columns, two spaces apart.
fn table(rows: &[Vec<String>], indent: &str, out: &mut dyn Write) -> io::Result<()> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| rows.iter().filter_map(|r| r.get(i)).map(String::len).max().unwrap_or(0))
        .collect();
    for row in rows {
        let cells: Vec<String> = row.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        writeln!(out, "{indent}{}", cells.join("  ").trim_end())?;
    }
    Ok(())
}

fn step_text(number: usize, step: &Step, out: &mut dyn Write) -> io::Result<()> {
    let detail = match &step.action {
        Action::Create { image, .. } => format!("  (image {image})"),
        Action::Bootstrap { commands: 1 } => "  (1 command)".to_owned(),
        Action::Bootstrap { commands } => format!("  ({commands} commands)"),
        Action::AwaitReady { node: true } => "  (container up, Node Ready)".to_owned(),
        Action::AwaitReady { node: false } => "  (container up)".to_owned(),
        Action::Configure(preview) => format!("  ({})", preview.changes.join(", ")),
        Action::Drain(preview) if preview.evict.is_empty() && preview.skip.is_empty() => {
            "  (no pods)".to_owned()
        }
        _ => String::new(),
    };
    writeln!(out, "    {:>2}. {:<11} {}{detail}", number, step.action.verb(), step.instance)?;
    if let Action::Drain(preview) = &step.action {
        drain_text(preview, out)?;
    }
    Ok(())
}

fn drain_text(preview: &DrainPreview, out: &mut dyn Write) -> io::Result<()> {
    const INDENT: &str = "          ";
    let pod = |verb: &str, p: &PodRef| {
        let mut about: Vec<&str> = p.owner.iter().chain(&p.note).map(String::as_str).collect();
        about.dedup(); // a DaemonSet pod is skipped because of its owner: say it once
        let about = if about.is_empty() { String::new() } else { format!("  ({})", about.join("; ")) };
        format!("{INDENT}{verb} {}{about}", p.pod)
    };
    for p in &preview.evict {
        writeln!(out, "{}", pod("evict", p))?;
    }
    for p in &preview.skip {
        writeln!(out, "{}", pod("skip ", p))?;
    }
    for pdb in &preview.blocking_pdbs {
        writeln!(out, "{INDENT}drain will wait: PDB {pdb} allows 0 disruptions")?;
    }
    Ok(())
}
