//! `poolctl suspend`, `resume`, `reconcile` and `promote`: record in the world that a pool is
//! suspended, resumed, asked to reconcile now or its canaries promoted, for every run and every
//! `watch` replica to read (see [`crate::model::Suspension`], [`crate::model::Promotion`]): a
//! suspension and a request on a node pool's Lease, and beside a pool of containers' instances
//! (Docker volumes) for the others; a promotion beside the pool's instances.

use std::collections::BTreeSet;

use anyhow::{Context, Result, bail};
use futures::future::OptionFuture;

use super::common::{check_named, compute, load_source};
use super::exit::Exit;
use crate::backend::{Cluster, Connect, Connections, Containers};
use crate::config::{Mark, MarkConfig};
use crate::model::{DesiredPool, Suspension};
use crate::plan::PlanOptions;
use crate::report::write_stdout;

pub(super) async fn mark_command(config: &MarkConfig) -> Result<Exit> {
    let desired = load_source(&config.source)?;
    // Only a declared pool: the source says on which Docker endpoint (or in which cluster) it
    // lives, and a name mistyped must not leave a record that nothing reads.
    let named: BTreeSet<String> = config.pools.iter().cloned().collect();
    check_named(&desired, &named, config.mark.command())?;
    if config.mark == Mark::Promote {
        return promote(desired, named).await;
    }
    let pools: Vec<String> = if named.is_empty() {
        desired.pools.iter().map(|p| p.name().to_owned()).collect()
    } else {
        config.pools.clone()
    };
    let connections = Connections::once();
    let docker = connections.docker(&desired).await?;
    docker.list().await.context("cannot list the pools' records")?;
    for pool in &pools {
        // A node pool's records live on its Lease, which every replica of its cluster reads.
        let declared = desired.pools.iter().find(|d| d.name() == pool.as_str());
        let clusters = connections.clusters();
        let connect = declared.and_then(DesiredPool::cluster);
        let connect = connect.map(|cluster| async move { clusters.connect(&cluster, pool).await });
        let cluster = OptionFuture::from(connect).await.transpose();
        let cluster = cluster.with_context(|| format!("cannot connect to the cluster of pool {pool}"))?;
        let records = Records { docker: &*docker, cluster: cluster.as_ref() };
        match &config.mark {
            Mark::Suspend { reason } => records.suspend(pool, reason.as_deref()).await?,
            Mark::Resume => records.resume(pool).await?,
            Mark::Promote => unreachable!("promoted above"),
            Mark::Reconcile => {
                records.request(pool).await?;
                write_stdout(|out| writeln!(out, "Reconcile of pool {pool} requested."))?;
            }
        }
    }
    Ok(Exit::Success)
}

/// Where a pool's records are: Docker volumes beside its containers, and, for a node pool, its
/// Lease too. A suspension on either counts (a pool that became a node pool keeps its Docker
/// one); a new one, or a request, goes on the Lease of a node pool.
struct Records<'a, C, K> {
    docker: &'a C,
    cluster: Option<&'a K>,
}

impl<C: Containers, K: Cluster> Records<'_, C, K> {
    /// The suspension on each record: Docker's (as the last list showed it), the Lease's.
    async fn suspensions(&self, pool: &str) -> Result<(Option<Suspension>, Option<Suspension>)> {
        let docker = self.docker.suspensions().remove(pool);
        let lease = OptionFuture::from(self.cluster.map(Cluster::suspension)).await.transpose();
        let lease = lease.with_context(|| format!("cannot read pool {pool}'s Lease"))?.flatten();
        Ok((docker, lease))
    }

    async fn suspend(&self, pool: &str, reason: Option<&str>) -> Result<()> {
        let (docker, lease) = self.suspensions(pool).await?;
        let standing = match (docker.or(lease), self.cluster) {
            (Some(standing), _) => {
                write_stdout(|out| writeln!(out, "Pool {pool} was already {}.", standing.describe()))?;
                return Ok(());
            }
            (None, Some(cluster)) => cluster.suspend(&who_am_i(), reason).await,
            (None, None) => self.docker.suspend(pool, &who_am_i(), reason).await,
        };
        let standing = standing.with_context(|| format!("cannot suspend pool {pool}"))?;
        write_stdout(|out| writeln!(out, "Pool {pool} {}.", standing.describe()))?;
        Ok(())
    }

    async fn resume(&self, pool: &str) -> Result<()> {
        let (docker, lease) = self.suspensions(pool).await?;
        let Some(suspension) = docker.clone().or_else(|| lease.clone()) else {
            write_stdout(|out| writeln!(out, "Pool {pool} is not suspended."))?;
            return Ok(());
        };
        if docker.is_some() {
            self.docker.resume(pool).await.with_context(|| format!("cannot resume pool {pool}"))?;
        }
        if let (Some(cluster), Some(_)) = (self.cluster, lease) {
            cluster.resume().await.with_context(|| format!("cannot resume pool {pool}"))?;
        }
        // As `flux resume` does: the pool is reconciled at once, not at watch's next resync.
        self.request(pool).await?;
        write_stdout(|out| writeln!(out, "Pool {pool} resumed (it was {}).", suspension.describe()))?;
        Ok(())
    }

    async fn request(&self, pool: &str) -> Result<()> {
        match self.cluster {
            Some(cluster) => cluster.request_reconcile().await,
            None => self.docker.request_reconcile(pool).await,
        }
        .with_context(|| format!("cannot request a reconcile of pool {pool}"))
    }
}

/// Promote the canaries of each of `pools` (`--all`: of every pool whose canaries wait, when
/// none is named): what the plan shows of them decides, so that the template promoted is the
/// one the plan rolls out (its `copyFrom` and image digest resolved) and a pool named with no
/// canaries waiting is said, not marked. The promotion is recorded for that template, and a
/// reconcile requested, so that `watch` goes on at once.
async fn promote(desired: crate::model::Desired, named: BTreeSet<String>) -> Result<Exit> {
    let all = named.is_empty();
    let options = PlanOptions { pools: named, ..PlanOptions::default() };
    let planned = compute(&Connections::once(), desired, options).await?;
    let docker = &*planned.docker;
    let pools: Vec<_> = planned.preview.plan.pools.iter().filter(|p| !all || p.canary.is_some()).collect();
    if pools.is_empty() {
        bail!(
            "no pool of {} has canaries to promote: no rollout is led by canaries (spec.rollout.canary) now",
            planned.desired.origin
        );
    }
    for pool in pools {
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
        Records { docker, cluster: planned.preview.clusters.get(name) }.request(name).await?;
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
