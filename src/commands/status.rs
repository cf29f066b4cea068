//! `poolctl status`: each pool of the source as it is now, as a table or JSON; with `-w`, kept
//! up to date (observed again every `--interval` and at once on the Docker events of the
//! source's containers) until Ctrl-C. Reads only: it takes no lock and changes nothing.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::SystemTime;

use anyhow::Result;
use tokio::sync::mpsc;

use super::Ui;
use super::common::{held_locks_of, load_source, write_stdout};
use super::exit::Exit;
use crate::backend::docker::{
    DockerBackend, DockerEnv, connect_endpoints, container_events, resolve_endpoints,
};
use crate::backend::endpoints::Endpoints;
use crate::backend::kube::{KubeCluster, KubeConnect};
use crate::cli::{OutputFormat, StatusArgs};
use crate::model::Desired;
use crate::observe::{observe, observe_again};
use crate::plan::PlanOptions;
use crate::status::{Status, render_json, render_text, status};

/// The Docker events that change what status shows.
const REDRAW_ON: &[&str] =
    &["create", "start", "die", "stop", "destroy", "health_status", "pause", "unpause"];

pub(super) async fn status_command(args: StatusArgs, ui: Ui) -> Result<Exit> {
    let desired = load_source(&args.source)?;
    let docker = connect_endpoints(&desired, &DockerEnv::from_process()).await?;
    let observed = observe(&desired, &docker, &KubeConnect).await?;
    let clusters = observed.clusters;
    let first = snapshot(&desired, &docker, &clusters, observed.world).await;
    if !args.watch {
        return write_stdout(|out| show(&first, &args, ui, false, out)).map(|()| Exit::Success);
    }

    // `-w`: a terminal is redrawn in place, as `watch` would; a pipe gets each status that
    // differs from the last one (JSON: one document per line).
    let terminal = std::io::stdout().is_terminal();
    let (tx, mut events) = mpsc::channel(1);
    // Every endpoint the pools live on: a change on any of them redraws.
    let (endpoints, _) = resolve_endpoints(&desired, &DockerEnv::from_process())?;
    let follow: Vec<_> = endpoints
        .into_iter()
        .map(|e| tokio::spawn(container_events(e, desired.origin.scope(), REDRAW_ON, tx.clone())))
        .collect();
    drop(tx);
    let mut tick = tokio::time::interval(args.interval.get().max(std::time::Duration::from_millis(100)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut shown, mut current): (Option<Status>, Option<Status>) = (None, Some(first));
    loop {
        if let Some(now) = current.take() {
            if terminal || shown.as_ref() != Some(&now) {
                write_stdout(|out| show(&now, &args, ui, terminal, out))?;
            }
            shown = Some(now);
        }
        tokio::select! {
            _ = tick.tick() => {}
            Some(_) = events.recv() => {}
            _ = tokio::signal::ctrl_c() => break,
        }
        match observe_again(&docker, &clusters).await {
            Ok(world) => current = Some(snapshot(&desired, &docker, &clusters, world).await),
            Err(e) => tracing::warn!("cannot observe the pools: {e}; trying again"),
        }
    }
    follow.iter().for_each(tokio::task::JoinHandle::abort);
    Ok(Exit::Success)
}

/// The status of `world`, with the locks held now.
async fn snapshot(
    desired: &Desired,
    docker: &Endpoints<DockerBackend>,
    clusters: &BTreeMap<String, KubeCluster>,
    world: crate::model::World,
) -> Status {
    let plan = crate::plan::plan(desired, &world, PlanOptions::default());
    let locks = held_locks_of(&plan, docker, clusters).await;
    status(&plan, &world, &locks)
}

/// Print one status; `redraw`: clear the terminal first and say how it is kept up to date.
fn show(
    status: &Status,
    args: &StatusArgs,
    ui: Ui,
    redraw: bool,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    match args.output {
        OutputFormat::Json => render_json(status, !args.watch, out),
        OutputFormat::Text => {
            let style = ui.color.stdout();
            if redraw {
                let every = args.interval;
                write!(out, "\x1b[H\x1b[2J")?;
                writeln!(
                    out,
                    "{}",
                    style.dim(&format!("Every {every} and on Docker events. Ctrl-C to stop."))
                )?;
            } else if args.watch {
                writeln!(out, "--- {}", crate::model::timestamp(SystemTime::now()))?;
            }
            render_text(status, SystemTime::now(), style, out)
        }
    }
}
