//! `poolctl suspend`, `resume`, `reconcile` and `promote`: record in the world, beside the
//! pool's instances, that a pool is suspended, resumed, asked to reconcile now or its canaries
//! promoted, for every run and every `watch` replica to read (see [`crate::model::Suspension`],
//! [`crate::model::Promotion`]).

use std::collections::BTreeSet;

use anyhow::{Context, Result, bail};

use super::common::{check_named, compute, load_source};
use super::exit::Exit;
use crate::backend::{Connections, Containers};
use crate::config::{Mark, MarkConfig};
use crate::plan::PlanOptions;
use crate::report::write_stdout;

pub(super) async fn mark_command(config: &MarkConfig) -> Result<Exit> {
    let desired = load_source(&config.source)?;
    if config.mark == Mark::Promote {
        return promote(desired, &config.pools).await;
    }
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
            Mark::Promote => unreachable!("promoted above"),
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

/// Promote the canaries of each of `pools`: what the plan shows of them decides, so that the
/// template promoted is the one the plan rolls out (its `copyFrom` and image digest resolved)
/// and a pool with no canaries waiting is said, not marked. The promotion is recorded for that
/// template, and a reconcile requested, so that `watch` goes on at once.
async fn promote(desired: crate::model::Desired, pools: &[String]) -> Result<Exit> {
    let named: BTreeSet<String> = pools.iter().cloned().collect();
    check_named(&desired, &named, "promote")?;
    let options = PlanOptions { pools: named, ..PlanOptions::default() };
    let planned = compute(&Connections::once(), desired, options).await?;
    let docker = &*planned.docker;
    for pool in &planned.preview.plan.pools {
        let (name, hash) = (&pool.name, pool.template_hash.as_deref().unwrap_or_default());
        let Some(canary) = &pool.canary else {
            bail!(
                "pool {name} has no canaries to promote: no rollout to a new template is led by canaries \
                 (spec.rollout.canary) now"
            );
        };
        if canary.promoted {
            write_stdout(|out| writeln!(out, "Pool {name}: {}.", canary.message))?;
            continue;
        }
        let promotion = docker
            .promote(name, hash, &who_am_i())
            .await
            .with_context(|| format!("cannot promote the canaries of pool {name}"))?;
        docker
            .request_reconcile(name)
            .await
            .with_context(|| format!("cannot request a reconcile of pool {name}"))?;
        write_stdout(|out| {
            writeln!(
                out,
                "Pool {name}: canaries of template {hash} promoted by {}; the rest of its {} replicas rolls.",
                promotion.by, canary.of
            )
        })?;
    }
    Ok(Exit::Success)
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
