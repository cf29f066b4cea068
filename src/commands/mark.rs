//! `poolctl suspend`, `resume` and `reconcile`: record in the world, beside the pool's
//! instances, that a pool is suspended, resumed or asked to reconcile now, for every run and
//! every `watch` replica to read (see [`crate::model::Suspension`]).

use anyhow::{Context, Result, bail};

use super::common::load_source;
use super::exit::Exit;
use crate::backend::{Connections, Containers};
use crate::config::{Mark, MarkConfig};
use crate::report::write_stdout;

pub(super) async fn mark_command(config: &MarkConfig) -> Result<Exit> {
    let desired = load_source(&config.source)?;
    let pools: Vec<String> = if config.pools.is_empty() {
        desired.pools.iter().map(|p| p.name().to_owned()).collect()
    } else {
        config.pools.clone()
    };
    // Only a declared pool: the source says on which Docker endpoint it lives, and a name
    // mistyped must not leave a record that nothing reads.
    if let Some(unknown) = pools.iter().find(|p| !desired.pools.iter().any(|d| d.name() == p.as_str())) {
        bail!("the source declares no pool {unknown}");
    }
    let connections = Connections::once();
    let docker = connections.docker(&desired).await?;
    docker.list().await.context("cannot list the pools' records")?;
    for pool in &pools {
        match &config.mark {
            Mark::Suspend { reason } => suspend(&*docker, pool, reason.as_deref()).await?,
            Mark::Resume => resume(&*docker, pool).await?,
            Mark::Reconcile => {
                docker
                    .request_reconcile(pool)
                    .await
                    .with_context(|| format!("cannot request a reconcile of pool {pool}"))?;
                write_stdout(|out| writeln!(out, "Reconcile of pool {pool} requested."))?;
            }
        }
    }
    Ok(Exit::Success)
}

async fn suspend(docker: &impl Containers, pool: &str, reason: Option<&str>) -> Result<()> {
    let already = docker.suspensions().contains_key(pool);
    let standing = docker
        .suspend(pool, &who_am_i(), reason)
        .await
        .with_context(|| format!("cannot suspend pool {pool}"))?;
    write_stdout(|out| {
        if already {
            writeln!(out, "Pool {pool} was already {}.", standing.describe())
        } else {
            writeln!(out, "Pool {pool} {}.", standing.describe())
        }
    })?;
    Ok(())
}

async fn resume(docker: &impl Containers, pool: &str) -> Result<()> {
    let Some(suspension) = docker.suspensions().remove(pool) else {
        write_stdout(|out| writeln!(out, "Pool {pool} is not suspended."))?;
        return Ok(());
    };
    docker.resume(pool).await.with_context(|| format!("cannot resume pool {pool}"))?;
    // As `flux resume` does: the pool is reconciled at once, not at watch's next resync.
    docker
        .request_reconcile(pool)
        .await
        .with_context(|| format!("cannot request a reconcile of pool {pool}"))?;
    write_stdout(|out| writeln!(out, "Pool {pool} resumed (it was {}).", suspension.describe()))?;
    Ok(())
}

/// Who suspends: `user@host` on a workstation, `pod NAME` in a cluster (where the host name is
/// the Pod's name and the user says nothing).
fn who_am_i() -> String {
    let host = ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|path| {
            std::fs::read_to_string(path).ok().map(|h| h.trim().to_owned()).filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "an unknown host".to_owned());
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        return format!("pod {host}");
    }
    let user = ["USER", "LOGNAME"].iter().find_map(|v| std::env::var(v).ok().filter(|u| !u.is_empty()));
    format!("{}@{host}", user.as_deref().unwrap_or("someone"))
}
