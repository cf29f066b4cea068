//! What the commands share: reading the source, connecting to its Docker endpoints and making a
//! plan, reading the pools' locks, asking for confirmation, writing to stdout.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, BufRead, IsTerminal};
use std::sync::Arc;

use anyhow::{Context, Result, bail};

use crate::backend::{ClusterClient, Connections, DockerEndpoints, Locks};
use crate::config::{Notify, Source};
use crate::model::{Desired, DesiredPool, LockHolder};
use crate::plan::{Plan, PlanOptions};
use crate::report::{Notifier, Secret, source_failure, write_stdout};
use crate::rollout::lock::inspect_locks;
use crate::rollout::{Preview, preview};
use crate::source;

/// How long a command that ends waits for its last notifications to be delivered.
pub(super) const NOTIFY_FLUSH: std::time::Duration = std::time::Duration::from_secs(15);

/// Start delivering `--notify`'s notifications, with the token of `--notify-token-file`.
pub(super) fn notifier(notify: Option<&Notify>) -> Result<Option<Notifier>> {
    let Some(notify) = notify else { return Ok(None) };
    let token = notify.token_file.as_ref().map(|file| Secret::read(file).context("--notify-token-file"));
    let token = token.transpose()?;
    Ok(Some(Notifier::start(notify.target.clone(), token)))
}

/// Read and validate the source, and read the sensitive values it names.
pub(super) fn load_source(source: &Source) -> Result<Desired> {
    source::load(&source.spec).map_err(|e| source_failure(&source.given, e))
}

/// Read and validate the source offline: sensitive values are not read (`validate`).
pub(super) fn load_source_offline(source: &Source) -> Result<Desired> {
    source::load_offline(&source.spec).map_err(|e| source_failure(&source.given, e))
}

/// A plan made without the locks, with the desired state it leads to and the connections
/// a rollout of it needs.
pub(super) struct Planned {
    pub desired: Desired,
    /// Every Docker endpoint the pools live on.
    pub docker: Arc<DockerEndpoints>,
    /// The plan, and the choices it was made with.
    pub preview: Preview<ClusterClient>,
}

/// Connect to the Docker endpoints of `desired`'s pools, observe and plan: what plan and apply
/// both do first.
pub(super) async fn compute(
    connections: &Connections,
    desired: Desired,
    options: PlanOptions,
) -> Result<Planned> {
    let (desired, docker) = connections.connect_docker(desired).await?;
    let preview = preview(&desired, &*docker, connections.clusters(), options).await?;
    Ok(Planned { desired, docker, preview })
}

/// Refuse a `--pool` that names no pool of the source, listing those it has: a typo must not
/// read as "nothing to do".
pub(super) fn check_pools(desired: &Desired, pools: &BTreeSet<String>) -> Result<()> {
    check_named(desired, pools, "--pool")
}

/// Refuse a pool named by `flag` (`--pool`, `--rollback`) that the source does not declare.
pub(super) fn check_named(desired: &Desired, pools: &BTreeSet<String>, flag: &str) -> Result<()> {
    let mut declared: Vec<&str> = desired.pools.iter().map(DesiredPool::name).collect();
    declared.sort_unstable();
    for name in pools {
        if !declared.contains(&name.as_str()) {
            bail!(
                "{flag} {name}: the source {} declares no pool of that name; it declares: {}",
                desired.origin,
                declared.join(", ")
            );
        }
    }
    Ok(())
}

/// Refuse a `--replace` that names no instance of the plan's pools: a typo must not read as
/// "nothing to replace".
pub(super) fn check_replace(plan: &Plan, options: &PlanOptions) -> Result<()> {
    for name in &options.replace {
        if !plan.pools.iter().any(|p| p.instances.iter().any(|i| i.name == *name)) {
            bail!("--replace {name}: no instance of that name in the pools of {}", plan.origin);
        }
    }
    Ok(())
}

/// The locks held on `plan`'s pools, read without taking any. One that cannot be read is
/// reported and left out: showing a plan does not depend on it.
pub(super) async fn held_locks<K: Locks>(
    plan: &Plan,
    docker: &DockerEndpoints,
    clusters: &BTreeMap<String, K>,
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
