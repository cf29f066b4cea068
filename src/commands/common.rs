//! What the commands share: reading the source, connecting to its Docker endpoints and observing, reading
//! the pools' locks, asking for confirmation, writing to stdout.

use std::collections::BTreeMap;
use std::io::{self, BufRead, IsTerminal, Write};

use anyhow::{Context, Result, bail};

use crate::backend::docker::{DockerBackend, DockerEnv, connect_endpoints};
use crate::backend::endpoints::Endpoints;
use crate::backend::kube::{KubeCluster, KubeConnect};
use crate::cli::SourceArgs;
use crate::lock::inspect_locks;
use crate::model::{Desired, LockHolder};
use crate::observe::{Planned as ObservedPlan, observe_plan};
use crate::plan::saved::Provenance;
use crate::plan::{Plan, PlanOptions};
use crate::source::{self, SourceSpec};

/// The classified `--source`/`--ref`/`--path`.
pub(super) fn source_spec(args: &SourceArgs) -> Result<SourceSpec> {
    Ok(SourceSpec::new(source_name(args), args.reference.as_deref(), args.path.as_deref())?
        .allowing_empty(args.allow_empty))
}

/// `--source` (clap requires it wherever it cannot be left out).
pub(super) fn source_name(args: &SourceArgs) -> &str {
    args.source.as_deref().unwrap_or_default()
}

/// Read and validate the source, and read the sensitive values it names.
pub(super) fn load_source(args: &SourceArgs) -> Result<Desired> {
    load_with(args, source::load)
}

/// Read and validate the source offline: sensitive values are not read (`validate`).
pub(super) fn load_source_offline(args: &SourceArgs) -> Result<Desired> {
    load_with(args, source::load_offline)
}

fn load_with(
    args: &SourceArgs,
    load: fn(&SourceSpec) -> Result<Desired, source::SourceError>,
) -> Result<Desired> {
    let spec = source_spec(args)?;
    load(&spec).map_err(|e| source_failure(source_name(args), e))
}

/// Why the source `source` (as given, or a label of it) gave no desired state, as one error.
pub(super) fn source_failure(source: &str, error: source::SourceError) -> anyhow::Error {
    match error {
        // Spec errors are the user's to fix, one per line with its place; "cannot read" would
        // send them looking for an I/O problem.
        source::SourceError::Spec(errors) => {
            let n = errors.0.len();
            let lines: Vec<String> = errors.0.iter().map(|e| format!("  {e}")).collect();
            anyhow::anyhow!(
                "the pool spec in {} has {n} error{}:\n{}",
                source::shown(source),
                if n == 1 { "" } else { "s" },
                lines.join("\n")
            )
        }
        // Says what it is about already, and the source would only repeat it.
        e @ source::SourceError::NoPools { .. } => e.into(),
        e => anyhow::Error::from(e).context(format!("cannot read the source {}", source::shown(source))),
    }
}

/// A plan, with what it was made from and the connections the executor needs.
pub(super) struct Planned {
    pub desired: Desired,
    /// Every Docker endpoint the pools live on.
    pub docker: Endpoints<DockerBackend>,
    pub clusters: std::collections::BTreeMap<String, KubeCluster>,
    pub plan: Plan,
    /// The revision and observation it was made from (what a saved plan records).
    pub provenance: Provenance,
    /// The options it was made with, the seed of its instance names included.
    pub options: PlanOptions,
}

/// Read the source, connect to the Docker endpoints of its pools, observe and plan: what plan
/// and apply both do first.
pub(super) async fn compute(args: &SourceArgs, options: PlanOptions) -> Result<Planned> {
    let desired = load_source(args)?;
    compute_for(desired, options).await
}

/// Connect to Docker, observe and plan towards `desired`.
pub(super) async fn compute_for(desired: Desired, options: PlanOptions) -> Result<Planned> {
    let docker = connect_endpoints(&desired, &DockerEnv::from_process()).await?;
    let observed = observe_plan(&desired, &docker, &KubeConnect, options).await?;
    let ObservedPlan { clusters, plan, provenance, options } = observed;
    Ok(Planned { desired, docker, clusters, plan, provenance, options })
}

/// The locks held on the plan's pools, read without taking any. One that cannot be read is
/// reported and left out: showing a plan does not depend on it.
pub(super) async fn held_locks(planned: &Planned) -> BTreeMap<String, LockHolder> {
    held_locks_of(&planned.plan, &planned.docker, &planned.clusters).await
}

/// The locks held on `plan`'s pools, as [`held_locks`].
pub(super) async fn held_locks_of(
    plan: &Plan,
    docker: &impl crate::backend::Locks,
    clusters: &BTreeMap<String, KubeCluster>,
) -> BTreeMap<String, LockHolder> {
    let pools = plan.pools.iter().map(|p| p.name.as_str());
    let (held, unreadable) = inspect_locks(docker, clusters, pools).await;
    for (pool, e) in unreadable {
        tracing::warn!("cannot read the lock of pool {pool}: {e}");
    }
    held
}

/// Ask `question` on the terminal; only `yes` is a yes. Without a terminal there is nobody to
/// ask: refuse rather than guess (`what` says what would have been done).
pub(super) fn confirm(question: &str, what: &str) -> Result<bool> {
    if !io::stdin().is_terminal() {
        bail!("refusing to {what} without confirmation: stdin is not a terminal (pass --yes)");
    }
    write_stdout(|out| {
        write!(out, "\n{question} Only 'yes' will be accepted: ")?;
        out.flush()
    })?;
    let mut answer = String::new();
    io::stdin().lock().read_line(&mut answer)?;
    Ok(answer.trim() == "yes")
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
