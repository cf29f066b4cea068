//! Rendering a plan: human text in the spirit of `terraform plan`, and JSON for machines.

use std::io::{self, Write};

use super::Plan;

/// Write the plan as text.
pub fn render_text(plan: &Plan, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "Source: {}", plan.origin)
}

/// Write the plan as JSON.
pub fn render_json(plan: &Plan, out: &mut dyn Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, plan)?;
    writeln!(out)
}
