//! How a run ended, as its user reads it: the closing summary of `apply` and of each `watch`
//! rollout, and the last JSON event of `apply -o json`.

use std::io::Write;

use crate::rollout::cancel::StopReason;
use crate::rollout::execute::Report;
use crate::style::count;

/// Write the closing summary of a run: what was done, what failed and why, what was left.
pub fn write_summary(report: &Report, out: &mut dyn Write) -> std::io::Result<()> {
    let done = count(report.attempted.iter().filter(|o| o.error.is_none()).count(), "step");
    if report.complete() {
        return writeln!(out, "Apply complete: {done} done.");
    }
    writeln!(out)?;
    if report.stop_reason == Some(StopReason::Superseded) {
        return writeln!(
            out,
            "Apply superseded by a newer desired state: {done} done, {} not started; re-planning.",
            report.not_started.len()
        );
    }
    if report.interrupted() {
        writeln!(out, "Apply interrupted: {done} done, {} not started.", report.not_started.len())?;
    } else if report.stop_reason == Some(StopReason::LockLost) {
        let left = report.not_started.len();
        writeln!(out, "Apply stopped, the lock was lost: {done} done, {left} not started.")?;
    } else {
        writeln!(out, "Apply halted: {done} done, {} not started.", report.not_started.len())?;
    }
    // Pools run side by side and a failure stops only its own: say how each ended.
    let pools: std::collections::BTreeSet<&str> = report
        .attempted
        .iter()
        .map(|o| o.pool.as_str())
        .chain(report.not_started.iter().map(|(p, ..)| p.as_str()))
        .collect();
    if pools.len() > 1 {
        for pool in pools {
            let state = if report.attempted.iter().any(|o| o.pool == pool && o.error.is_some()) {
                "failed"
            } else if report.not_started.iter().any(|(p, ..)| p == pool) {
                "not finished"
            } else {
                "done"
            };
            writeln!(out, "  pool {pool}: {state}")?;
        }
    }
    // What was done, by instance, in order: the progress lines above have the details.
    let mut done_by_instance: Vec<(&str, Vec<&str>)> = Vec::new();
    for o in report.attempted.iter().filter(|o| o.error.is_none()) {
        match done_by_instance.iter_mut().find(|(name, _)| *name == o.instance) {
            Some((_, verbs)) => verbs.push(o.verb),
            None => done_by_instance.push((&o.instance, vec![o.verb])),
        }
    }
    for (instance, verbs) in done_by_instance {
        writeln!(out, "  done: {instance} ({})", verbs.join(", "))?;
    }
    for (o, e) in report.attempted.iter().filter_map(|o| Some((o, o.error.as_ref()?))) {
        writeln!(out, "  failed: {} {} ({}): {e}", o.verb, o.instance, o.pool)?;
    }
    for (pool, instance, verb) in &report.not_started {
        writeln!(out, "  not started: {verb} {instance} ({pool})")?;
    }
    writeln!(
        out,
        "Instances not yet retired keep running. Run apply again to continue; the next plan \
         replaces any instance that failed."
    )
}

/// The last JSON event of `apply -o json`: how the rollout ended.
pub fn end_event(report: &Report) -> serde_json::Value {
    let failed: Vec<serde_json::Value> = report
        .attempted
        .iter()
        .filter_map(|o| {
            let e = o.error.as_ref()?;
            Some(serde_json::json!({"pool": o.pool, "instance": o.instance, "action": o.verb, "error": e.to_string()}))
        })
        .collect();
    serde_json::json!({
        "event": "end",
        "complete": report.complete(),
        "done": report.attempted.iter().filter(|o| o.error.is_none()).count(),
        "failed": failed,
        "not_started": report.not_started.len(),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::rollout::execute::StepOutcome;

    #[test]
    fn one_step_is_one_step() {
        let done = |n| {
            let verb = "stop";
            let attempted = (0..n)
                .map(|i| StepOutcome {
                    pool: "w".into(),
                    instance: format!("w-{i}"),
                    verb,
                    error: None,
                    elapsed: Duration::ZERO,
                })
                .collect();
            let mut out = Vec::new();
            write_summary(&Report { attempted, ..Report::default() }, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        assert_eq!(done(1), "Apply complete: 1 step done.\n");
        assert_eq!(done(2), "Apply complete: 2 steps done.\n");
    }
}
