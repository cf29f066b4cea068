//! `poolctl status`: each pool of the source as it is now, as a table or JSON; with `-w`, kept
//! up to date (observed again every `--interval` and at once on the Docker events of the
//! source's containers) until Ctrl-C. Reads only: it takes no lock and changes nothing.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::SystemTime;

use anyhow::Result;
use tokio::sync::mpsc;

use super::common::{check_pools, load_source};
use super::exit::Exit;
use crate::backend::{Cluster, Connections, DockerEndpoints, Events, Locks};
use crate::config::{Format, StatusConfig, Ui};
use crate::model::{Desired, World};
use crate::plan::{Action, Plan, PlanOptions, PoolPlan};
use crate::report::write_stdout;
use crate::rollout::observe::{observe, observe_again};
use crate::status::{Status, render_json, render_text, status};

pub(super) async fn status_command(config: &StatusConfig, ui: Ui) -> Result<Exit> {
    let desired = load_source(&config.source)?;
    check_pools(&desired, &config.pools)?;
    let options = PlanOptions { pools: config.pools.clone(), ..PlanOptions::default() };
    let connections = Connections::once();
    // A pool whose template cannot be read now (its copyFrom container stopped) is still shown.
    let (desired, docker, unread) = connections.connect_docker_leniently(desired).await?;
    let unread: BTreeMap<String, String> =
        unread.iter().map(|e| (e.pool().to_owned(), crate::backend::cause_chain(e))).collect();
    let observed = observe(&desired, &*docker, connections.clusters()).await?;
    let clusters = observed.clusters;
    let view =
        View { desired: &desired, options: &options, docker: &docker, clusters: &clusters, unread: &unread };
    let first = view.snapshot(observed.world).await;
    if !config.watch {
        return write_stdout(|out| show(&first, config, ui, false, out)).map(|()| Exit::Success);
    }

    // `-w`: a terminal is redrawn in place, as `watch` would; a pipe gets each status whose
    // facts differ from the last one's (JSON: one document per line): an uptime that grew is
    // no news.
    let terminal = std::io::stdout().is_terminal();
    let (tx, mut events) = mpsc::channel(1);
    // Every endpoint the pools live on: a change on any of them redraws.
    let follow: Vec<_> = Connections::follow_events(&desired, Events::Changes, &tx)?
        .into_iter()
        .map(|(_, task)| tokio::spawn(task))
        .collect();
    drop(tx);
    let mut tick = tokio::time::interval(config.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut shown, mut current): (Option<Status>, Option<Status>) = (None, Some(first));
    loop {
        if let Some(now) = current.take() {
            let facts = now.facts();
            if terminal || shown.as_ref() != Some(&facts) {
                write_stdout(|out| show(&now, config, ui, terminal, out))?;
            } else {
                tracing::debug!("observed again: nothing changed");
            }
            shown = Some(facts);
        }
        tokio::select! {
            _ = tick.tick() => {}
            Some(_) = events.recv() => {}
            _ = tokio::signal::ctrl_c() => break,
        }
        match observe_again(&*docker, &clusters).await {
            Ok(world) => current = Some(view.snapshot(world).await),
            Err(e) => tracing::warn!("cannot observe the pools: {e}; trying again"),
        }
    }
    follow.iter().for_each(tokio::task::JoinHandle::abort);
    Ok(Exit::Success)
}

/// What a status is made of, besides the world.
struct View<'a, K> {
    desired: &'a Desired,
    options: &'a PlanOptions,
    docker: &'a DockerEndpoints,
    clusters: &'a BTreeMap<String, K>,
    /// The pools whose template cannot be read now, and why.
    unread: &'a BTreeMap<String, String>,
}

impl<K: Locks + Cluster> View<'_, K> {
    /// The status of `world`, with the locks held now (which also say whether an instance that
    /// has not finished coming up is in the making).
    async fn snapshot(&self, world: World) -> Status {
        let mut desired = Desired::clone(self.desired);
        let mut against = BTreeMap::new();
        for pool in desired.pools.iter_mut().filter(|p| self.unread.contains_key(p.name())) {
            if let Some((hash, what)) = last_known_template(pool.name(), &world) {
                pool.template_hash = hash;
                against.insert(pool.name().to_owned(), what);
            }
        }
        let options = self.options.clone();
        let (world, locks, plan) =
            crate::rollout::view(&desired, world, self.docker, self.clusters, options).await;
        let mut status = status(&plan, &world, &locks);
        for pool in &mut status.pools {
            if let Some(why) = self.unread.get(&pool.name) {
                let shown = against.get(&pool.name).map_or("as its file writes it", String::as_str);
                pool.template_unread = Some(format!("its template cannot be read: {why}; shown {shown}"));
            }
        }
        self.volume_waits(&mut status, &plan, &world).await;
        self.turn_waits(&mut status, &plan);
        status
    }

    /// What the plan cannot show either: a retirement that waits for its cluster's drain turn,
    /// which another Node of that cluster holds (poolctl's cordon on it, pods still to evict),
    /// since drains go one Node at a time per cluster, whichever pool. Said only of a pool a
    /// rollout holds the lock of: only a rollout takes turns.
    fn turn_waits(&self, status: &mut Status, plan: &Plan) {
        let of = |pool: &str| {
            let cluster = self.clusters.get(pool)?.identity().key().to_owned();
            Some((cluster, plan.pools.iter().find(|p| p.name == pool)?))
        };
        let mut draining: BTreeMap<String, String> = BTreeMap::new();
        for pool in &status.pools {
            let Some((cluster, planned)) = of(&pool.name) else { continue };
            let drains = pool
                .instances
                .iter()
                .find(|i| i.retiring && i.container == "running" && still_evicts(planned, &i.name));
            if let Some(instance) = drains {
                draining.entry(cluster).or_insert_with(|| instance.name.clone());
            }
        }
        for pool in status.pools.iter_mut().filter(|p| p.lock.is_some()) {
            let Some((cluster, planned)) = of(&pool.name) else { continue };
            let Some(holder) = draining.get(&cluster) else { continue };
            for instance in pool.instances.iter_mut().filter(|i| !i.cordoned && i.waits.is_none()) {
                let cordons = planned
                    .all_steps()
                    .any(|s| *s.instance == *instance.name && matches!(s.action, Action::Cordon));
                if cordons && instance.name != *holder {
                    instance.waits = Some(format!(
                        "its retirement waits for its cluster's drain turn: {holder} drains first (one Node at a time)"
                    ));
                }
            }
        }
    }

    /// What the plan cannot show a retirement under way waits for: the volumes of a Node its
    /// drain is done with, still attached (asked of the cluster only then, one Node at a
    /// time), as the retirement waits for them before the container stops. Not for a Node
    /// whose wait is skipped (unreachable, or annotated so).
    async fn volume_waits(&self, status: &mut Status, plan: &Plan, world: &World) {
        for pool in &mut status.pools {
            let Some(cluster) = self.clusters.get(&pool.name) else { continue };
            let Some(planned) = plan.pools.iter().find(|p| p.name == pool.name) else { continue };
            for instance in pool.instances.iter_mut().filter(|i| i.retiring && i.container == "running") {
                let node = world.nodes.iter().find(|n| n.name == instance.name);
                let skipped = node.is_none_or(|n| n.is_unreachable() || n.retirement.exclude_volume_detach);
                if skipped || still_evicts(planned, &instance.name) {
                    continue;
                }
                match cluster.attached_volumes(&instance.name).await {
                    Ok(held) if !held.is_empty() => {
                        let volumes = format!("its volumes to detach ({})", held.join(", "));
                        instance.waits = Some(match instance.waits.take() {
                            Some(waits) => format!("{waits}; {volumes}"),
                            None => format!("its retirement waits for {volumes}"),
                        });
                    }
                    Ok(_) => {}
                    Err(e) => tracing::debug!("cannot read the volumes of {}: {e}", instance.name),
                }
            }
        }
    }
}

/// Whether the plan still has pods to evict from `instance`'s Node.
fn still_evicts(pool: &PoolPlan, instance: &str) -> bool {
    pool.all_steps()
        .filter(|s| *s.instance == *instance)
        .any(|s| matches!(&s.action, Action::Drain(d) if !d.evict.is_empty()))
}

/// The template `pool`'s instances were last rolled out to (its rollout record's), else the one
/// most of them run: what they are shown against while the pool's own cannot be read.
fn last_known_template(pool: &str, world: &World) -> Option<(String, String)> {
    if let Some(record) = world.rollouts.get(pool) {
        let hash = record.template_hash.clone();
        return Some((hash.clone(), format!("against the template last rolled out, {hash}")));
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for c in world.containers.iter().filter(|c| c.pool == pool) {
        *counts.entry(c.template_hash.as_str()).or_default() += 1;
    }
    let (hash, _) = counts.into_iter().max_by_key(|(_, n)| *n)?;
    Some((hash.to_owned(), format!("against the template most of its instances run, {hash}")))
}

/// Print one status; `redraw`: clear the terminal first and say how it is kept up to date.
fn show(
    status: &Status,
    config: &StatusConfig,
    ui: Ui,
    redraw: bool,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    match config.format {
        Format::Json => render_json(status, !config.watch, out),
        Format::Text => {
            let style = ui.color.stdout();
            if redraw {
                let every = crate::spec::Duration::from(config.interval);
                write!(out, "\x1b[H\x1b[2J")?;
                writeln!(
                    out,
                    "{}",
                    style.dim(&format!("Every {every} and on Docker events. Ctrl-C to stop."))
                )?;
            } else if config.watch {
                writeln!(out, "--- {}", crate::model::timestamp(SystemTime::now()))?;
            }
            render_text(status, SystemTime::now(), style, out)
        }
    }
}
