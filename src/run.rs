//! The commands: load the source, observe the world, plan, and (for apply) execute. This is
//! the CLI edge, where library errors gain context and become exit codes.

use std::collections::BTreeMap;
use std::io::{self, BufRead, IsTerminal, Write};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, bail};

use crate::apply::{Executor, Interrupt, Report};
use crate::backend::{BackendError, Cluster, Containers};
use crate::cli::{ApplyArgs, Command, OutputFormat, PlanArgs, SourceArgs};
use crate::docker::DockerBackend;
use crate::kube::KubeCluster;
use crate::plan::{Plan, PlanOptions, plan, render_json, render_text};
use crate::source::SourceSpec;
use crate::source::{self, Desired};
use crate::world::World;

/// How the process should exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Success,
    /// `plan --detailed-exitcode` found changes.
    Changes,
}

/// Run one command.
pub async fn run(command: Command) -> Result<Exit> {
    match command {
        Command::Plan(args) => plan_command(args).await,
        Command::Apply(args) => apply_command(args).await,
        Command::Validate(args) => validate_command(&args),
        Command::Watch(args) => crate::watch::watch_command(args).await,
        Command::Schema => {
            let schema = serde_json::to_string_pretty(&crate::spec::json_schema())?;
            write_stdout(|out| writeln!(out, "{schema}"))?;
            Ok(Exit::Success)
        }
    }
}

/// The classified `--source`/`--ref`/`--path`.
pub(crate) fn source_spec(args: &SourceArgs) -> Result<SourceSpec> {
    Ok(SourceSpec::new(&args.source, args.reference.as_deref(), args.path.as_deref())?)
}

fn load_source(args: &SourceArgs) -> Result<Desired> {
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

fn validate_command(args: &SourceArgs) -> Result<Exit> {
    let desired = load_source(args)?;
    let n = desired.pools.len();
    write_stdout(|out| {
        writeln!(out, "{}: {n} pool{} valid.", desired.origin, if n == 1 { "" } else { "s" })?;
        for p in &desired.pools {
            writeln!(
                out,
                "  {} ({}, {} replicas, template {})",
                p.name(),
                p.file,
                p.pool.spec.replicas,
                p.template_hash
            )?;
        }
        Ok(())
    })?;
    Ok(Exit::Success)
}

/// The Kubernetes clusters of the pools that have a `node:` section, by pool name.
pub(crate) async fn connect_clusters(desired: &Desired) -> Result<BTreeMap<String, KubeCluster>> {
    let mut clusters = BTreeMap::new();
    for pool in &desired.pools {
        if let Some(node) = &pool.pool.spec.node {
            let cluster =
                KubeCluster::connect(node.kubeconfig.as_deref(), node.context.as_deref(), pool.name())
                    .await
                    .with_context(|| {
                        format!("pool {}: cannot connect to its Kubernetes cluster", pool.name())
                    })?;
            clusters.insert(pool.name().to_owned(), cluster);
        }
    }
    Ok(clusters)
}

/// One observation of the world: one Docker list, and per cluster one list of Nodes (plus
/// pods and PDBs of the nodes that may be drained).
pub(crate) async fn observe<C: Containers, K: Cluster>(
    containers: &C,
    clusters: &BTreeMap<String, K>,
) -> Result<World, BackendError> {
    let mut world = World { containers: containers.list().await?, ..World::default() };
    for (pool, cluster) in clusters {
        let names: Vec<String> =
            world.containers.iter().filter(|c| &c.pool == pool).map(|c| c.name.clone()).collect();
        let nodes = cluster.nodes(&names).await?;
        let node_names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
        let (pods, pdbs) = cluster.pods_and_pdbs(&node_names).await?;
        world.nodes.extend(nodes);
        world.pods.extend(pods);
        for pdb in pdbs {
            if !world.pdbs.contains(&pdb) {
                world.pdbs.push(pdb);
            }
        }
    }
    Ok(world)
}

struct Planned {
    desired: Desired,
    docker: DockerBackend,
    clusters: BTreeMap<String, KubeCluster>,
    plan: Plan,
}

async fn compute(args: &SourceArgs, prune: bool) -> Result<Planned> {
    let desired = load_source(args)?;
    let docker = DockerBackend::connect().await?;
    let clusters = connect_clusters(&desired).await?;
    let plan = observe_and_plan(&desired, &docker, &clusters, prune).await?;
    Ok(Planned { desired, docker, clusters, plan })
}

/// Observe the world once and plan towards `desired`: the step that plan, apply and every
/// reconcile of watch share.
pub(crate) async fn observe_and_plan<C: Containers, K: Cluster>(
    desired: &Desired,
    containers: &C,
    clusters: &BTreeMap<String, K>,
    prune: bool,
) -> Result<Plan> {
    let world = observe(containers, clusters).await.context("cannot observe the world")?;
    Ok(plan(desired, &world, PlanOptions { prune }))
}

/// Carry a plan out after its preflight: what apply does after confirmation, and what watch does
/// on every reconcile. Progress goes to stdout; the report says how it ended.
pub(crate) async fn execute<C: Containers, K: Cluster>(
    desired: &Desired,
    containers: &C,
    clusters: &BTreeMap<String, K>,
    plan: &Plan,
    interrupt: &Interrupt,
) -> Result<Report> {
    let progress: Mutex<Box<dyn Write + Send>> = Mutex::new(Box::new(io::stdout()));
    let executor = Executor { desired, containers, clusters, progress: &progress, interrupt };
    executor.preflight(plan).await.context("preflight failed, nothing was changed")?;
    Ok(executor.run(plan).await)
}

async fn plan_command(args: PlanArgs) -> Result<Exit> {
    let Planned { plan, .. } = compute(&args.source, args.prune).await?;
    write_stdout(|out| match args.output {
        OutputFormat::Text => render_text(&plan, out),
        OutputFormat::Json => render_json(&plan, out),
    })?;
    Ok(if args.detailed_exitcode && plan.has_changes() { Exit::Changes } else { Exit::Success })
}

async fn apply_command(args: ApplyArgs) -> Result<Exit> {
    let Planned { desired, docker, clusters, plan } = compute(&args.source, args.prune).await?;
    write_stdout(|out| render_text(&plan, out))?;
    if !plan.has_changes() {
        return Ok(Exit::Success);
    }
    if !args.yes && !confirm()? {
        bail!("apply cancelled: nothing was changed");
    }

    let interrupt = Arc::new(Interrupt::default());
    spawn_interrupt_handler(Arc::clone(&interrupt));
    let report = execute(&desired, &docker, &clusters, &plan, &interrupt).await?;
    write_stdout(|out| report.write_summary(out))?;
    if report.complete() {
        Ok(Exit::Success)
    } else if report.interrupted() {
        bail!("apply was interrupted; run it again to continue")
    } else {
        bail!("apply halted at a failed step; see above")
    }
}

/// Ask on the terminal. Without a terminal there is nobody to ask: refuse rather than guess.
fn confirm() -> Result<bool> {
    if !io::stdin().is_terminal() {
        bail!("refusing to apply without confirmation: stdin is not a terminal (pass --yes)");
    }
    write_stdout(|out| {
        write!(out, "\nDo you want to perform these actions? Only 'yes' will be accepted: ")?;
        out.flush()
    })?;
    let mut answer = String::new();
    io::stdin().lock().read_line(&mut answer)?;
    Ok(answer.trim() == "yes")
}

/// The first Ctrl-C or SIGTERM stops at the next step boundary; a second one exits at once
/// (the world shows how far it got, and the next apply resumes from there).
fn spawn_interrupt_handler(interrupt: Arc<Interrupt>) {
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let mut next = async || {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                () = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
            }
        };
        next().await;
        eprintln!("interrupt: stopping at the next step boundary (interrupt again to exit at once)");
        interrupt.trigger();
        next().await;
        eprintln!("interrupt: exiting now; run apply again to continue");
        std::process::exit(130);
    });
}

/// Write to stdout; a closed pipe (`poolctl plan | head`) is not an error.
pub(crate) fn write_stdout(f: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> Result<()> {
    let stdout = io::stdout();
    let mut lock = stdout.lock();
    match f(&mut lock).and_then(|()| lock.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to stdout"),
    }
}
