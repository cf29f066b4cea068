//! The commands: load the source, observe the world, plan, and (for apply) execute. This is
//! the CLI edge, where library errors gain context and become exit codes.

use std::collections::{BTreeMap, BTreeSet};
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
use crate::world::{ClusterRef, Container, World};

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

/// The cluster each pool's Nodes live in, by pool name: a declared pool's `node:` section, or,
/// for a pool whose spec has none (its `node:` section or its file was removed), the cluster its
/// containers were created to join (their labels). Without the latter, their Nodes would never
/// be observed and their retirement could not cordon, drain or delete them. The pools are the
/// ones the planner plans: every declared pool, and the undeclared pools of this source.
pub(crate) fn cluster_refs(
    desired: &Desired,
    containers: &[Container],
) -> Result<BTreeMap<String, ClusterRef>> {
    let mut refs = BTreeMap::new();
    let mut labelled: BTreeMap<&str, BTreeSet<&ClusterRef>> = BTreeMap::new();
    let scope = desired.origin.scope();
    for c in containers {
        let declared = desired.pools.iter().find(|p| p.name() == c.pool);
        let spec_node = declared.and_then(|p| p.pool.spec.node.as_ref());
        let planned = declared.is_some() || c.scope.as_deref() == Some(scope.as_str());
        if let (Some(cluster), None, true) = (&c.cluster, spec_node, planned) {
            labelled.entry(&c.pool).or_default().insert(cluster);
        }
    }
    for pool in &desired.pools {
        if let Some(node) = &pool.pool.spec.node {
            let cluster = ClusterRef { kubeconfig: node.kubeconfig.clone(), context: node.context.clone() };
            refs.insert(pool.name().to_owned(), cluster);
        }
    }
    for (pool, clusters) in labelled {
        let mut clusters = clusters.into_iter();
        let first = clusters.next().expect("an entry has one cluster at least");
        if let Some(second) = clusters.next() {
            bail!(
                "pool {pool}: its instances are Nodes of more than one cluster ({} and {}); retire \
                 them one cluster at a time (declare the pool again with a `node:` section naming one)",
                describe(first),
                describe(second)
            );
        }
        refs.insert(pool.to_owned(), first.clone());
    }
    Ok(refs)
}

fn describe(cluster: &ClusterRef) -> String {
    format!(
        "kubeconfig {}, context {}",
        cluster.kubeconfig.as_deref().unwrap_or("(default)"),
        cluster.context.as_deref().unwrap_or("(current)")
    )
}

/// Connect to the cluster of every pool that [`cluster_refs`] names. A cluster that cannot be
/// reached fails the plan: retiring Nodes without them would skip the drain.
pub(crate) async fn connect_clusters(
    desired: &Desired,
    containers: &[Container],
) -> Result<BTreeMap<String, KubeCluster>> {
    let mut clusters = BTreeMap::new();
    for (pool, cluster) in cluster_refs(desired, containers)? {
        let declared = desired.pools.iter().any(|p| p.name() == pool);
        let connected =
            KubeCluster::connect(cluster.kubeconfig.as_deref(), cluster.context.as_deref(), &pool)
                .await
                .with_context(|| {
                    let why = if declared { "" } else { " (no longer declared, its instances are Nodes)" };
                    format!(
                        "pool {pool}{why}: cannot connect to its Kubernetes cluster ({})",
                        describe(&cluster)
                    )
                })?;
        clusters.insert(pool, connected);
    }
    Ok(clusters)
}

/// One observation of the world: one Docker list, and per cluster one list of Nodes (plus
/// pods and PDBs of the nodes that may be drained).
pub(crate) async fn observe<C: Containers, K: Cluster>(
    containers: &C,
    clusters: &BTreeMap<String, K>,
) -> Result<World, BackendError> {
    observe_clusters(containers.list().await?, clusters).await
}

/// The rest of an observation once Docker's list is in: per cluster, its list of Nodes.
async fn observe_clusters<K: Cluster>(
    containers: Vec<Container>,
    clusters: &BTreeMap<String, K>,
) -> Result<World, BackendError> {
    let mut world = World { containers, ..World::default() };
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

async fn compute(args: &SourceArgs, options: PlanOptions) -> Result<Planned> {
    let desired = load_source(args)?;
    let docker = DockerBackend::connect().await?;
    let (clusters, plan) = observe_and_plan(&desired, &docker, options).await?;
    Ok(Planned { desired, docker, clusters, plan })
}

/// Observe the world once and plan towards `desired`: the step that plan, apply and every
/// reconcile of watch share. Docker is listed first, because which clusters to observe also
/// depends on the containers (see [`cluster_refs`]); the clusters are returned for the
/// executor.
pub(crate) async fn observe_and_plan<C: Containers>(
    desired: &Desired,
    containers: &C,
    options: PlanOptions,
) -> Result<(BTreeMap<String, KubeCluster>, Plan)> {
    let listed = containers.list().await.context("cannot observe the world")?;
    let clusters = connect_clusters(desired, &listed).await?;
    let world = observe_clusters(listed, &clusters).await.context("cannot observe the world")?;
    Ok((clusters, plan(desired, &world, options)))
}

/// Carry a plan out after its preflight: what apply does after confirmation, and what watch does
/// on every reconcile. Progress goes to stdout; the report says how it ended.
///
/// The plan runs one batch at a time. Between batches the world is observed again and the rest
/// re-planned from it: a new instance that died after it came up, or an instance someone
/// removed, changes what the next batch may safely retire, and a plan made before the first
/// batch cannot know that.
pub(crate) async fn execute<C: Containers, K: Cluster>(
    desired: &Desired,
    containers: &C,
    clusters: &BTreeMap<String, K>,
    plan: &Plan,
    options: PlanOptions,
    interrupt: &Interrupt,
) -> Result<Report> {
    let progress: Mutex<Box<dyn Write + Send>> = Mutex::new(Box::new(io::stdout()));
    let executor = Executor { desired, containers, clusters, progress: &progress, interrupt };
    executor.preflight(plan).await.context("preflight failed, nothing was changed")?;
    // Every round finishes at least one step, so a plan that keeps changing under our feet
    // (an image that crashes right after it comes up, say) ends instead of looping.
    let max_rounds = plan.steps().count();
    let mut report = Report::default();
    let mut current = plan.clone();
    for round in 1.. {
        let (batch, rest) = current.split_first_batch();
        let done = executor.run(&batch).await;
        let complete = done.complete();
        report.attempted.extend(done.attempted);
        report.not_started.extend(done.not_started);
        report.stop_reason = done.stop_reason;
        if !complete {
            report
                .not_started
                .extend(rest.steps().map(|(p, s)| (p.name.clone(), s.instance.clone(), s.action.verb())));
            break;
        }
        if !rest.has_changes() {
            break;
        }
        let world =
            observe(containers, clusters).await.context("cannot observe the world between batches")?;
        current = crate::plan::plan(desired, &world, options.reseeded());
        if !current.has_changes() {
            break;
        }
        if round >= max_rounds {
            bail!(
                "the world keeps changing under the rollout: still {} steps to go after {round} batches; see the plan above",
                current.steps().count()
            );
        }
        let _ = writeln!(
            progress.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
            "-- looked at the world again: {} steps to go",
            current.steps().count()
        );
    }
    Ok(report)
}

async fn plan_command(args: PlanArgs) -> Result<Exit> {
    let Planned { plan, .. } = compute(&args.source, args.planning.options()).await?;
    write_stdout(|out| match args.output {
        OutputFormat::Text => render_text(&plan, out),
        OutputFormat::Json => render_json(&plan, out),
    })?;
    Ok(if args.detailed_exitcode && plan.has_changes() { Exit::Changes } else { Exit::Success })
}

async fn apply_command(args: ApplyArgs) -> Result<Exit> {
    let Planned { desired, docker, clusters, plan } = compute(&args.source, args.planning.options()).await?;
    write_stdout(|out| render_text(&plan, out))?;
    if !plan.has_changes() {
        return Ok(Exit::Success);
    }
    if !args.yes && !confirm()? {
        bail!("apply cancelled: nothing was changed");
    }

    let interrupt = Arc::new(Interrupt::default());
    spawn_interrupt_handler(Arc::clone(&interrupt));
    let report = execute(&desired, &docker, &clusters, &plan, args.planning.options(), &interrupt).await?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{DesiredPool, Origin};
    use crate::spec::{Metadata, NodeSpec, Pool, PoolSpec, Rollout, Template};
    use crate::world::{ContainerState, Health};
    use std::time::Duration;

    fn pool(name: &str, node: Option<NodeSpec>) -> DesiredPool {
        let template = Template {
            image: "img".into(),
            command: None,
            entrypoint: None,
            env: BTreeMap::new(),
            labels: BTreeMap::new(),
            network: None,
            privileged: false,
            volumes: Vec::new(),
            tmpfs: Vec::new(),
        };
        DesiredPool {
            pool: Pool {
                api_version: crate::spec::API_VERSION.into(),
                kind: crate::spec::KIND_POOL.into(),
                metadata: Metadata { name: name.into() },
                spec: PoolSpec {
                    replicas: 1,
                    template,
                    bootstrap: Vec::new(),
                    node,
                    rollout: Rollout::default(),
                },
            },
            file: format!("{name}.yaml"),
            template_hash: "h".into(),
        }
    }

    fn node_spec(context: &str) -> NodeSpec {
        NodeSpec {
            kubeconfig: Some("/k".into()),
            context: Some(context.into()),
            ready_timeout: crate::spec::Duration::from_secs(1),
            labels: BTreeMap::new(),
            taints: Vec::new(),
        }
    }

    fn container(name: &str, pool: &str, scope: &str, context: Option<&str>) -> Container {
        Container {
            id: name.into(),
            name: name.into(),
            pool: pool.into(),
            template_hash: "old".into(),
            state: ContainerState::Running,
            health: Health::None,
            created: 1,
            template: None,
            scope: Some(scope.into()),
            image: "img".into(),
            cluster: context.map(|c| ClusterRef { kubeconfig: None, context: Some(c.into()) }),
        }
    }

    fn cluster(kubeconfig: Option<&str>, context: &str) -> ClusterRef {
        ClusterRef { kubeconfig: kubeconfig.map(str::to_owned), context: Some(context.into()) }
    }

    #[test]
    fn clusters_come_from_the_spec_else_from_the_containers_labels() {
        let origin = Origin::Path { path: "/pools".into() };
        let scope = origin.scope();
        let desired = Desired {
            origin,
            pools: vec![pool("spec", Some(node_spec("from-spec"))), pool("lost", None), pool("plain", None)],
        };
        let containers = [
            // The spec wins over the labels of older instances.
            container("spec-a", "spec", &scope, Some("from-label")),
            // `node:` was deleted from the spec; the labels remember the cluster.
            container("lost-a", "lost", &scope, Some("lost-ctx")),
            container("plain-a", "plain", &scope, None),
            // The file was deleted.
            container("gone-a", "gone", &scope, Some("gone-ctx")),
            // Another source's pool is none of this plan's business.
            container("theirs-a", "theirs", "path:/elsewhere", Some("theirs-ctx")),
        ];
        let refs = cluster_refs(&desired, &containers).unwrap();
        assert_eq!(
            refs,
            BTreeMap::from([
                ("gone".to_owned(), cluster(None, "gone-ctx")),
                ("lost".to_owned(), cluster(None, "lost-ctx")),
                ("spec".to_owned(), cluster(Some("/k"), "from-spec")),
            ])
        );
    }

    #[test]
    fn instances_of_two_clusters_without_a_spec_to_choose_are_refused() {
        let origin = Origin::Path { path: "/pools".into() };
        let scope = origin.scope();
        let desired = Desired { origin, pools: Vec::new() };
        let containers = [
            container("gone-a", "gone", &scope, Some("one")),
            container("gone-b", "gone", &scope, Some("two")),
        ];
        let err = cluster_refs(&desired, &containers).unwrap_err().to_string();
        assert!(err.contains("pool gone: its instances are Nodes of more than one cluster"), "{err}");
    }

    /// Docker as a world in memory: creates run, stops exit, removes remove. `die_after`
    /// makes one container exit when a given call has happened, the way an instance can die
    /// after it came up.
    struct World1 {
        containers: Mutex<Vec<Container>>,
        calls: Mutex<Vec<String>>,
        die_after: (String, String),
    }

    impl World1 {
        fn record(&self, call: String) {
            if call == self.die_after.0 {
                let mut all = self.containers.lock().unwrap();
                if let Some(c) = all.iter_mut().find(|c| c.name == self.die_after.1) {
                    c.state = ContainerState::Exited;
                }
            }
            self.calls.lock().unwrap().push(call);
        }
        fn running(&self) -> usize {
            self.containers.lock().unwrap().iter().filter(|c| c.state == ContainerState::Running).count()
        }
    }

    impl Containers for World1 {
        async fn list(&self) -> Result<Vec<Container>, BackendError> {
            Ok(self.containers.lock().unwrap().clone())
        }
        async fn ensure_image(&self, _: &str) -> Result<bool, BackendError> {
            Ok(false)
        }
        async fn network_exists(&self, _: &str) -> Result<bool, BackendError> {
            Ok(true)
        }
        async fn create(&self, spec: &crate::backend::NewContainer) -> Result<(), BackendError> {
            let mut c = container(&spec.name, "w", &spec.labels[crate::plan::labels::SCOPE], None);
            c.template_hash.clone_from(&spec.labels[crate::plan::labels::TEMPLATE_HASH]);
            c.created = i64::try_from(self.calls.lock().unwrap().len()).unwrap() + 10;
            self.containers.lock().unwrap().push(c);
            self.record(format!("create {}", spec.name));
            Ok(())
        }
        async fn exec(
            &self,
            _: &str,
            _: &[String],
            _: Duration,
        ) -> Result<crate::backend::ExecOutput, BackendError> {
            unreachable!("no bootstrap in this pool")
        }
        async fn wait_up(&self, name: &str, _: Duration) -> Result<(), BackendError> {
            self.record(format!("wait-up {name}"));
            Ok(())
        }
        async fn stop(&self, name: &str, _: Duration) -> Result<(), BackendError> {
            // The capacity check: an up instance is stopped only while enough others run.
            assert!(self.running() > 2, "stopping {name} would leave fewer than 2 running");
            if let Some(c) = self.containers.lock().unwrap().iter_mut().find(|c| c.name == name) {
                c.state = ContainerState::Exited;
            }
            self.record(format!("stop {name}"));
            Ok(())
        }
        async fn remove(&self, name: &str) -> Result<(), BackendError> {
            self.containers.lock().unwrap().retain(|c| c.name != name);
            self.record(format!("remove {name}"));
            Ok(())
        }
    }

    #[tokio::test]
    async fn the_world_is_observed_again_between_batches() {
        let origin = Origin::Path { path: "/pools".into() };
        let scope = origin.scope();
        let mut w = pool("w", None);
        w.pool.spec.replicas = 2;
        w.template_hash = "new".into();
        let desired = Desired { origin, pools: vec![w] };
        let old = vec![container("w-old-1", "w", &scope, None), container("w-old-2", "w", &scope, None)];
        let plan = crate::plan::plan(
            &desired,
            &World { containers: old.clone(), ..World::default() },
            PlanOptions::default(),
        );
        let first_new = plan.pools[0].steps[0].instance.clone();
        // The first new instance dies once the first old one is gone. A plan carried out
        // blindly would go on to stop w-old-2 with one instance up (the stop assertion).
        let docker = World1 {
            containers: Mutex::new(old),
            calls: Mutex::new(Vec::new()),
            die_after: ("remove w-old-1".into(), first_new.clone()),
        };
        let clusters: BTreeMap<String, KubeCluster> = BTreeMap::new();
        let interrupt = Interrupt::default();
        let report =
            execute(&desired, &docker, &clusters, &plan, PlanOptions::default(), &interrupt).await.unwrap();
        assert!(report.complete(), "{report:?}");
        let calls = docker.calls.lock().unwrap().clone();
        assert!(calls.contains(&format!("remove {first_new}")), "the dead instance was replaced: {calls:?}");
        let left = docker.containers.lock().unwrap().clone();
        assert_eq!(left.len(), 2, "{left:?}");
        assert!(
            left.iter().all(|c| c.state == ContainerState::Running && c.template_hash == "new"),
            "{left:?}"
        );
    }
}
