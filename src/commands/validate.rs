//! `poolctl validate`: read and check a source offline, for a GitOps repository's own CI.

use anyhow::Result;

use super::common::{load_source, write_stdout};
use super::exit::Exit;
use crate::cli::SourceArgs;
use crate::spec::escape_controls;

pub(super) fn validate_command(args: &SourceArgs) -> Result<Exit> {
    let desired = load_source(args)?;
    let n = desired.pools.len();
    write_stdout(|out| {
        writeln!(out, "{}: {n} pool{} valid.", desired.origin, if n == 1 { "" } else { "s" })?;
        for p in &desired.pools {
            writeln!(
                out,
                "  {} ({}, {} replicas, template {})",
                p.name(),
                escape_controls(&p.file),
                p.pool.spec.replicas,
                p.template_hash
            )?;
        }
        Ok(())
    })?;
    Ok(Exit::Success)
}
