//! What the commands share: reading the source, connecting to Docker and observing, writing to
//! stdout.

use std::io::{self, Write};

use anyhow::{Context, Result, bail};

use crate::backend::docker::DockerBackend;
use crate::backend::kube::{KubeCluster, KubeConnect};
use crate::cli::SourceArgs;
use crate::model::Desired;
use crate::observe::observe_and_plan;
use crate::plan::{Plan, PlanOptions};
use crate::source::{self, SourceSpec};

/// The classified `--source`/`--ref`/`--path`.
pub(super) fn source_spec(args: &SourceArgs) -> Result<SourceSpec> {
    Ok(SourceSpec::new(&args.source, args.reference.as_deref(), args.path.as_deref())?)
}

/// Read and validate the source.
pub(super) fn load_source(args: &SourceArgs) -> Result<Desired> {
    let spec = source_spec(args)?;
    match source::load(&spec) {
        Ok(desired) => Ok(desired),
        // Spec errors are the user's to fix, one per line with its place; "cannot read" would
        // send them looking for an I/O problem.
        Err(source::SourceError::Spec(errors)) => {
            let n = errors.0.len();
            let lines: Vec<String> = errors.0.iter().map(|e| format!("  {e}")).collect();
            bail!(
                "the pool spec in {} has {n} error{}:\n{}",
                args.source,
                if n == 1 { "" } else { "s" },
                lines.join("\n")
            )
        }
        Err(e) => Err(e).with_context(|| format!("cannot read the source {}", args.source)),
    }
}

/// A plan, with what it was made from and the connections the executor needs.
pub(super) struct Planned {
    pub desired: Desired,
    pub docker: DockerBackend,
    pub clusters: std::collections::BTreeMap<String, KubeCluster>,
    pub plan: Plan,
}

/// Read the source, connect to Docker, observe and plan: what plan and apply both do first.
pub(super) async fn compute(args: &SourceArgs, options: PlanOptions) -> Result<Planned> {
    let desired = load_source(args)?;
    let docker = DockerBackend::connect().await?;
    let (clusters, plan) = observe_and_plan(&desired, &docker, &KubeConnect, options).await?;
    Ok(Planned { desired, docker, clusters, plan })
}

/// Write to stdout; a closed pipe (`poolctl plan | head`) is not an error.
pub(super) fn write_stdout(f: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> Result<()> {
    let stdout = io::stdout();
    let mut lock = stdout.lock();
    match f(&mut lock).and_then(|()| lock.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to stdout"),
    }
}
