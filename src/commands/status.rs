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
use crate::backend::{Connections, DockerEndpoints, Events, Locks};
use crate::config::{Format, StatusConfig, Ui};
use crate::model::{Desired, World};
use crate::plan::PlanOptions;
use crate::report::write_stdout;
use crate::rollout::observe::{observe, observe_again};
use crate::status::{Status, render_json, render_text, status};

pub(super) async fn status_command(config: &StatusConfig, ui: Ui) -> Result<Exit> {
    let desired = load_source(&config.source)?;
    check_pools(&desired, &config.pools)?;
    let options = PlanOptions { pools: config.pools.clone(), ..PlanOptions::default() };
    let connections = Connections::once();
    let (desired, docker) = connections.connect_docker(desired).await?;
    let observed = observe(&desired, &*docker, connections.clusters()).await?;
    let clusters = observed.clusters;
    let first = snapshot(&desired, &options, &docker, &clusters, observed.world).await;
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
            Ok(world) => current = Some(snapshot(&desired, &options, &docker, &clusters, world).await),
            Err(e) => tracing::warn!("cannot observe the pools: {e}; trying again"),
        }
    }
    follow.iter().for_each(tokio::task::JoinHandle::abort);
    Ok(Exit::Success)
}

/// The status of `world`, with the locks held now (which also say whether an instance that has
/// not finished coming up is in the making).
async fn snapshot<K: Locks>(
    desired: &Desired,
    options: &PlanOptions,
    docker: &DockerEndpoints,
    clusters: &BTreeMap<String, K>,
    world: World,
) -> Status {
    let (world, locks, plan) = crate::rollout::view(desired, world, docker, clusters, options.clone()).await;
    status(&plan, &world, &locks)
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
