//! `poolctl validate`: read and check a source offline, for a GitOps repository's own CI.

use anyhow::Result;

use super::common::load_source_offline;
use super::exit::Exit;
use crate::config::Source;
use crate::report::write_stdout;
use crate::spec::escape_controls;

pub(super) fn validate_command(source: &Source) -> Result<Exit> {
    // Offline: the secrets a pool reads are not where a repository's CI runs.
    let desired = load_source_offline(source)?;
    let n = desired.pools.len();
    write_stdout(|out| {
        writeln!(out, "{}: {} valid.", desired.origin, crate::style::count(n, "pool"))?;
        for p in &desired.pools {
            // The hash covers the secrets' values, which only a plan reads.
            let copy = p.pool.spec.template.copy_from.as_ref();
            let template = match p.reads_secrets() {
                // So does a copy's: it covers what a plan reads from the container.
                _ if copy.is_some() => format!(
                    "template hash set at plan time: it covers the settings copied from {}",
                    escape_controls(copy.map(|c| c.container.as_str()).unwrap_or_default())
                ),
                0 => format!("template {}", p.template_hash),
                1 => "template hash set at plan time: it covers 1 sensitive value".to_owned(),
                n => format!("template hash set at plan time: it covers {n} sensitive values"),
            };
            let file = escape_controls(&p.file);
            writeln!(out, "  {} ({file}, {} replicas, {template})", p.name(), p.pool.spec.replicas)?;
        }
        Ok(())
    })?;
    Ok(Exit::Success)
}
