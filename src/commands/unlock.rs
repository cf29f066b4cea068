//! `poolctl unlock POOL`: break the lock a run left behind (killed outright, on a machine that
//! is gone), after showing who holds it and asking.

use std::collections::BTreeMap;
use std::time::SystemTime;

use anyhow::{Context, Result, bail};

use super::common::{confirm, load_source};
use super::exit::Exit;
use crate::backend::{Connect, Connections, Containers, LockError};
use crate::config::UnlockConfig;
use crate::report::write_stdout;
use crate::rollout::lock::{break_lock, inspect_lock};
use crate::rollout::observe::cluster_refs;

pub(super) async fn unlock_command(config: &UnlockConfig) -> Result<Exit> {
    let pool = config.pool.as_str();
    let desired = load_source(&config.source)?;
    let connections = Connections::once();
    let docker = connections.docker(&desired).await?;
    // A pool of Nodes keeps its lock in its cluster: the one its spec or its containers name.
    let containers = docker.list().await.context("cannot list the pool containers")?;
    let mut clusters = BTreeMap::new();
    if let Some(cluster) = cluster_refs(&desired, &containers)?.get(pool) {
        let connected = connections.clusters().connect(cluster, pool).await;
        let connected =
            connected.with_context(|| format!("pool {pool}: cannot connect to its Kubernetes cluster"))?;
        clusters.insert(pool.to_owned(), connected);
    }
    let Some(seen) = inspect_lock(&*docker, &clusters, pool).await? else {
        write_stdout(|out| writeln!(out, "Pool {pool} is not locked."))?;
        return Ok(Exit::Success);
    };
    let now = SystemTime::now();
    write_stdout(|out| {
        writeln!(out, "Pool {pool} is locked by {}.", seen.holder.describe(now))?;
        if !seen.holder.expired(now) {
            writeln!(
                out,
                "Its holder may still be running: if it is, breaking its lock lets another run change \
                 the pool beside it (it stops at its next step boundary once it notices)."
            )?;
        }
        Ok(())
    })?;
    if !config.yes && !confirm("Break this lock?", "unlock")? {
        bail!("unlock cancelled: the lock is left as it is");
    }
    match break_lock(&*docker, &clusters, pool, &seen).await {
        Ok(()) => {
            write_stdout(|out| writeln!(out, "Lock of pool {pool} broken."))?;
            Ok(Exit::Success)
        }
        Err(LockError::Lost { why, .. }) => {
            bail!(
                "the lock of pool {pool} changed since it was shown ({why}): nothing was broken; run unlock again"
            )
        }
        Err(e) => Err(e).with_context(|| format!("cannot break the lock of pool {pool}")),
    }
}
