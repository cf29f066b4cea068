//! The Docker edge: [`DockerBackend`] implements [`Containers`] with bollard, speaking whatever API
//! version the daemon offers (down to 1.41, Docker 20.10).
//!
//! Observation is one label-filtered list call whatever the pool size: health comes from the
//! list's `Status` text rather than from an inspect per container. Every request to the daemon
//! bumps a counter ([`DockerBackend::api_calls`]) so that tests and the benchmark can check that.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::{
    ContainerInspectResponse, ContainerStateStatusEnum, HealthStatusEnum, NetworkConnectRequest,
};
use bollard::query_parameters::{
    CreateContainerOptions, CreateImageOptions, DownloadFromContainerOptions, EventsOptions,
    InspectContainerOptions, InspectNetworkOptions, ListContainersOptions, ListVolumesOptions, LogsOptions,
    RemoveContainerOptions, StopContainerOptions, UploadToContainerOptions, WaitContainerOptions,
};
use futures::StreamExt;

use crate::backend::endpoints::Endpoints;
use crate::backend::{BackendError, CUT, Containers, ExecOutput, NewContainer, NewFile, Stopped};
use crate::model::{
    Container, Desired, InstanceRef, Promotion, Revision, RolloutRecord, RolloutResult, Suspension, labels,
};
use crate::spec::{Secret, TemplateFile};

mod archive;
mod convert;
mod copy;
mod create;
pub mod endpoint;
mod events;
mod history;
mod lock;
mod suspend;
mod up;

use convert::container_from_summary;
pub use copy::{CopyError, resolve_copies, resolve_copies_leniently};
pub use create::create_body;
pub use endpoint::{DockerEnv, Endpoint, EndpointError};
pub use events::{ContainerNews, DRIFT_EVENTS, container_events};
pub use suspend::{promotion_record_name, request_record_name, suspension_record_name};
pub use up::updated_record_name;

/// Where bollard (and the docker CLI) look when `DOCKER_HOST` is not set.
pub const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";

/// How much exec output and log text is kept: enough for an error message, bounded so that a
/// chatty bootstrap command cannot grow memory.
const OUTPUT_CAP: usize = 4096;

/// The largest file read out of a container: a token or a key, not a disk image.
const MAX_READ: usize = 1 << 20;

/// How many symbolic links a read follows, as a guard against a loop.
const MAX_LINKS: usize = 8;

/// How many log lines a failed `wait_up` reports.
const LOG_TAIL: &str = "20";

/// bollard's timeout covers a request until its response headers arrive. A stop answers only once
/// the container is down, so its timeout must exceed the grace period by this margin.
const STOP_MARGIN: Duration = Duration::from_secs(30);

/// How long poolctl waits for Docker, unless a step has a deadline of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// The first request (the version negotiation): a daemon that is there answers at once.
    pub connect: Duration,
    /// One whole request, its answer read to the end. bollard bounds a request only until the
    /// response headers arrive; a body that never comes would hold the call for ever.
    pub call: Duration,
    /// An image pull may take long, but not in silence: the longest wait for its next
    /// progress message.
    pub pull_stall: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            // bollard's own default, generous for a create or a remove on a loaded host.
            call: Duration::from_secs(120),
            pull_stall: Duration::from_secs(120),
        }
    }
}

/// Requests in flight to one daemon at most, from one process. Unbounded, a pool of a thousand
/// instances sent a thousand creates at once, and dockerd (fuse-overlayfs, 2 cores) hung: it
/// still listed containers but removed none until it was restarted. 32 at once is four times
/// `xargs -P8` and keeps 30 pools of 2 at about half the docker CLI's time (BENCHMARKS.md).
pub const MAX_CALLS_IN_FLIGHT: usize = 32;

/// The records the last list showed beside the containers, by pool (see
/// [`Containers::rollouts`], [`Containers::history`], [`Containers::suspensions`],
/// [`Containers::requests`], [`Containers::promotions`]).
#[derive(Debug, Default)]
struct Listed {
    rollouts: BTreeMap<String, RolloutRecord>,
    history: BTreeMap<String, Vec<Revision>>,
    suspensions: BTreeMap<String, Suspension>,
    requests: BTreeSet<String>,
    promotions: BTreeMap<String, Promotion>,
    /// The records kept as containers, by an earlier poolctl: removed with what they record.
    legacy: HashSet<String>,
}

/// A connection to one Docker daemon.
#[derive(Debug)]
pub struct DockerBackend {
    docker: Docker,
    /// Where the daemon was found, for error messages.
    host: String,
    /// The daemon's address (`unix:///var/run/docker.sock`, `tcp://...`): what a Node's
    /// reference to its container names.
    address: String,
    /// The IDs of poolctl's containers by name, as the last list and this backend's creations
    /// saw them: a stop or removal goes to the container that carried poolctl's labels, never
    /// to whatever now answers to the name.
    ours: std::sync::Mutex<HashMap<String, String>>,
    calls: AtomicU64,
    timeouts: Timeouts,
    listed: std::sync::Mutex<Listed>,
    /// One permit per request in flight (see [`MAX_CALLS_IN_FLIGHT`]).
    slots: tokio::sync::Semaphore,
}

impl DockerBackend {
    /// Connects to a resolved endpoint (see [`endpoint`]), waiting as `timeouts` say. Talks to
    /// the daemon once, negotiating the API version, so that an endpoint that does not answer
    /// is reported here, by its name, rather than halfway through a plan.
    pub async fn connect(endpoint: &Endpoint, timeouts: Timeouts) -> Result<Self, BackendError> {
        let at = endpoint.name.clone();
        let unreachable =
            |reason: String| BackendError::Unreachable { what: "Docker", at: at.clone(), reason };
        let docker =
            client_for(endpoint).map_err(|e| unreachable(connect_reason(&e)))?.with_timeout(timeouts.connect);
        // negotiate_version is itself a request (GET /version), so it doubles as the ping.
        let docker = tokio::time::timeout(timeouts.connect, docker.negotiate_version())
            .await
            .unwrap_or(Err(DockerError::RequestTimeoutError))
            .map_err(|e| unreachable(connect_reason(&e)))?
            .with_timeout(timeouts.call);
        Ok(Self {
            docker,
            host: at,
            address: endpoint.host.clone(),
            ours: std::sync::Mutex::default(),
            calls: AtomicU64::new(1),
            timeouts,
            listed: std::sync::Mutex::default(),
            slots: tokio::sync::Semaphore::new(MAX_CALLS_IN_FLIGHT),
        })
    }

    /// How many requests this backend has sent to the daemon (the version negotiation included).
    pub fn api_calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// The bollard client, for callers (tests, the simulated kubelet) that need more than the
    /// trait offers. Requests made through it are not counted.
    pub fn client(&self) -> &Docker {
        &self.docker
    }

    fn count(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    /// One request to the daemon, counted, and bounded as a whole by the call timeout; at most
    /// [`MAX_CALLS_IN_FLIGHT`] at once.
    async fn call<T>(&self, request: impl Future<Output = Result<T, DockerError>>) -> Result<T, DockerError> {
        // The timeout counts from when the request goes out, not from the wait for a slot.
        let _slot = self.slots.acquire().await;
        self.count();
        tokio::time::timeout(self.timeouts.call, request)
            .await
            .unwrap_or(Err(DockerError::RequestTimeoutError))
    }

    /// Turns a bollard error into the backend's: transport failures become `Unreachable`, the
    /// daemon's own refusals keep its message, prefixed with what was being done.
    fn error(&self, doing: &str, e: DockerError) -> BackendError {
        match e {
            DockerError::DockerResponseServerError { message, .. }
            | DockerError::DockerStreamError { error: message } => {
                BackendError::Failed(format!("{doing}: {}", one_line(&message)))
            }
            DockerError::HyperLegacyError { .. }
            | DockerError::IOError { .. }
            | DockerError::HyperResponseError { .. }
            | DockerError::SocketNotFoundError(_)
            | DockerError::RequestTimeoutError => BackendError::Unreachable {
                what: "Docker",
                at: self.host.clone(),
                reason: format!("{doing}: {}", connect_reason(&e)),
            },
            other => BackendError::Failed(format!("{doing}: {}", connect_reason(&other))),
        }
    }

    async fn inspect(&self, name: &str) -> Result<Option<ContainerInspectResponse>, BackendError> {
        match self.call(self.docker.inspect_container(name, None::<InspectContainerOptions>)).await {
            Ok(c) => Ok(Some(c)),
            Err(e) if status_of(&e) == Some(404) => Ok(None),
            Err(e) => Err(self.error(&format!("inspect container {name}"), e)),
        }
    }

    fn ours(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        crate::locked(&self.ours)
    }

    fn listed(&self) -> std::sync::MutexGuard<'_, Listed> {
        crate::locked(&self.listed)
    }

    /// The ID of poolctl's container `name`, to stop or remove it by: the one the last list or
    /// this backend's creation saw (its labels cannot have changed since), else whatever the
    /// name answers to now, if it carries poolctl's pool label; `None` when nothing does.
    async fn owned_id(&self, name: &str) -> Result<Option<String>, BackendError> {
        if let Some(id) = self.ours().get(name).cloned() {
            return Ok(Some(id));
        }
        match self.inspect(name).await? {
            None => Ok(None),
            Some(inspect) if is_ours(&inspect) => Ok(inspect.id),
            Some(_) => Err(BackendError::NotOurs(name.to_owned())),
        }
    }

    /// The last lines the container wrote, stdout and stderr interleaved; empty if the logs cannot
    /// be read (they only decorate another error).
    async fn tail_logs(&self, name: &str) -> String {
        self.count();
        let options =
            LogsOptions { stdout: true, stderr: true, tail: LOG_TAIL.to_owned(), ..Default::default() };
        let mut logs = self.docker.logs(name, Some(options));
        let mut out = Tail::default();
        let read = async {
            while let Some(Ok(chunk)) = logs.next().await {
                out.push(&chunk.into_bytes());
            }
        };
        // What came in time is enough to decorate the error.
        let _ = tokio::time::timeout(self.timeouts.call, read).await;
        out.into_string()
    }

    /// An error for a container that will not come up, with its last log lines.
    async fn not_up(&self, name: &str, why: &str) -> BackendError {
        let logs = self.tail_logs(name).await;
        let logs = logs.trim_end();
        if logs.is_empty() {
            BackendError::Failed(format!("container {name} {why} (no log output)"))
        } else {
            BackendError::Failed(format!("container {name} {why}; its last log lines:\n{logs}"))
        }
    }

    /// Decides, from one inspect, whether the container is up, still coming up (and why), or
    /// will never be up.
    fn judge(inspect: Option<&ContainerInspectResponse>) -> Judgement {
        let Some(inspect) = inspect else {
            return Judgement::Failed("no longer exists".to_owned());
        };
        let Some(state) = inspect.state.as_ref() else {
            return Judgement::Waiting("no state reported yet".to_owned());
        };
        match state.status {
            Some(ContainerStateStatusEnum::RUNNING) => {
                let health = state.health.as_ref();
                match health.and_then(|h| h.status) {
                    None
                    | Some(HealthStatusEnum::NONE | HealthStatusEnum::EMPTY | HealthStatusEnum::HEALTHY) => {
                        Judgement::Up
                    }
                    Some(HealthStatusEnum::STARTING) => Judgement::Waiting("health: starting".to_owned()),
                    Some(HealthStatusEnum::UNHEALTHY) => {
                        let last = health
                            .and_then(|h| h.log.as_ref())
                            .and_then(|log| log.last())
                            .and_then(|r| r.output.as_deref())
                            .map(str::trim)
                            .filter(|o| !o.is_empty());
                        Judgement::Failed(match last {
                            Some(out) => format!("turned unhealthy (last check said: {out})"),
                            None => "turned unhealthy".to_owned(),
                        })
                    }
                }
            }
            // A start that failed leaves the container "created", with the reason in Error.
            Some(ContainerStateStatusEnum::CREATED) => {
                match state.error.as_deref().map(str::trim).filter(|e| !e.is_empty()) {
                    Some(error) => Judgement::Failed(format!("could not start: {error}")),
                    None => Judgement::Waiting("created, not started".to_owned()),
                }
            }
            Some(ContainerStateStatusEnum::RESTARTING) => Judgement::Waiting("restarting".to_owned()),
            Some(ContainerStateStatusEnum::EXITED | ContainerStateStatusEnum::DEAD) => {
                let code = state.exit_code.unwrap_or(-1);
                let error = state.error.as_deref().map(str::trim).filter(|e| !e.is_empty());
                Judgement::Failed(match error {
                    Some(error) => format!("exited with code {code}: {error}"),
                    None => format!("exited with code {code}"),
                })
            }
            Some(ContainerStateStatusEnum::PAUSED) => Judgement::Failed("is paused".to_owned()),
            Some(ContainerStateStatusEnum::REMOVING) => Judgement::Failed("is being removed".to_owned()),
            Some(ContainerStateStatusEnum::STOPPING) => Judgement::Failed("is stopping".to_owned()),
            Some(ContainerStateStatusEnum::EMPTY) | None => {
                Judgement::Waiting("no state reported yet".to_owned())
            }
        }
    }

    /// Waits for `wait_up`'s verdict without a time limit; `last` keeps the latest reason for
    /// waiting, so that a timeout can say what the container was doing.
    async fn wait_up_inner(&self, name: &str, last: &mut String) -> Result<(), BackendError> {
        let inspect = self.inspect(name).await?;
        let Some(id) = inspect.as_ref().map(|i| i.id.clone().unwrap_or_else(|| name.to_owned())) else {
            return Err(BackendError::NotFound(format!("container {name}")));
        };
        match Self::judge(inspect.as_ref()) {
            Judgement::Up => return Ok(()),
            Judgement::Failed(why) => return Err(self.not_up(name, &why).await),
            Judgement::Waiting(why) => {
                crate::backend::waiting::note(name, format!("the container: {why}"));
                *last = why;
            }
        }
        // Docker has no "wait until healthy". Its event stream, replayed from the daemon's buffer
        // (`since` = the epoch; the filter keeps this container's few events), cannot miss a
        // change that happened after the inspect above; each event only wakes us, and a fresh
        // inspect decides. `since` takes Unix time only, so the creation date cannot be used.
        let filters = HashMap::from([
            ("type".to_owned(), vec!["container".to_owned()]),
            ("container".to_owned(), vec![id]),
            (
                "event".to_owned(),
                ["start", "die", "health_status", "pause", "destroy"].map(String::from).to_vec(),
            ),
        ]);
        self.count();
        let mut events = self.docker.events(Some(EventsOptions {
            since: Some("0".to_owned()),
            until: None,
            filters: Some(filters),
        }));
        while let Some(event) = events.next().await {
            event.map_err(|e| self.error(&format!("watch events of {name}"), e))?;
            match Self::judge(self.inspect(name).await?.as_ref()) {
                Judgement::Up => return Ok(()),
                Judgement::Failed(why) => return Err(self.not_up(name, &why).await),
                Judgement::Waiting(why) => {
                    crate::backend::waiting::note(name, format!("the container: {why}"));
                    *last = why;
                }
            }
        }
        Err(BackendError::Failed(format!("watch events of {name}: the daemon closed the stream")))
    }

    async fn exec_inner(&self, name: &str, argv: &[String], output: &mut Tail) -> Result<i64, BackendError> {
        let doing = || format!("exec {argv:?} in {name}");
        let config = CreateExecOptions::<String> {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(argv.to_vec()),
            ..Default::default()
        };
        let exec = self.call(self.docker.create_exec(name, config)).await.map_err(|e| {
            if status_of(&e) == Some(404) {
                BackendError::NotFound(format!("container {name}"))
            } else {
                self.error(&doing(), e)
            }
        })?;
        self.count();
        match self.docker.start_exec(&exec.id, None).await.map_err(|e| self.error(&doing(), e))? {
            StartExecResults::Attached { output: mut stream, .. } => {
                while let Some(chunk) = stream.next().await {
                    output.push(&chunk.map_err(|e| self.error(&doing(), e))?.into_bytes());
                }
            }
            StartExecResults::Detached => {}
        }
        // The attach stream can close a moment before the daemon records the exit code, so ask
        // until it has one; the caller's timeout bounds this.
        loop {
            let inspect =
                self.call(self.docker.inspect_exec(&exec.id)).await.map_err(|e| self.error(&doing(), e))?;
            if inspect.running != Some(true)
                && let Some(code) = inspect.exit_code
            {
                return Ok(code);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl DockerBackend {
    /// The first entry of the archive of `path` in the container, at most [`MAX_READ`] bytes.
    async fn download(&self, name: &str, path: &str) -> Result<archive::Entry, BackendError> {
        let doing = || format!("read {path} in container {name}");
        let options = DownloadFromContainerOptions { path: path.to_owned() };
        let read = async {
            let mut stream = self.docker.download_from_container(name, Some(options));
            let mut archive = Vec::new();
            while let Some(chunk) = stream.next().await {
                archive.extend_from_slice(&chunk?);
                if archive.len() > MAX_READ + 4 * 512 {
                    return Ok(None);
                }
            }
            Ok(Some(archive))
        };
        // The daemon's own words tell a missing container from a missing file.
        match self.call(read).await.map_err(|e| self.error(&doing(), e))? {
            Some(archive) => archive::first_entry(&archive)
                .map_err(|why| BackendError::Failed(format!("{}: {why}", doing()))),
            None => Err(BackendError::Failed(format!("{}: larger than {MAX_READ} bytes", doing()))),
        }
    }
}

impl DockerBackend {
    /// Write a template's `files` into the container, in one upload.
    async fn write_template_files(&self, name: &str, files: &[TemplateFile]) -> Result<(), BackendError> {
        let doing = || format!("write the template's files in container {name}");
        let entries: Vec<(&str, &[u8], u32)> = files
            .iter()
            .map(|f| (f.path.as_str(), f.content.as_bytes(), f.mode_bits().unwrap_or(0o644)))
            .collect();
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let archive = archive::files_at_root(&entries, now)
            .map_err(|why| BackendError::Failed(format!("{}: {why}", doing())))?;
        let options = UploadToContainerOptions { path: "/".to_owned(), ..Default::default() };
        self.call(self.docker.upload_to_container(name, Some(options), bollard::body_full(archive.into())))
            .await
            .map_err(|e| self.error(&doing(), e))
    }
}

/// What one inspect says about a container that should be coming up.
enum Judgement {
    Up,
    Waiting(String),
    Failed(String),
}

impl Containers for DockerBackend {
    fn hosts(&self) -> Vec<String> {
        vec![self.address.clone()]
    }

    async fn clock(&self) -> Option<i64> {
        let info = self.call(self.docker.info()).await.ok()?;
        up::time(info.system_time.as_deref())
    }

    fn instance_ref(&self, name: &str) -> Option<InstanceRef> {
        let id = self.ours().get(name).cloned()?;
        Some(InstanceRef { container_id: id, docker_host: self.address.clone() })
    }

    async fn list(&self) -> Result<Vec<Container>, BackendError> {
        let options = ListContainersOptions {
            all: true,
            filters: Some(HashMap::from([("label".to_owned(), vec![labels::POOL.to_owned()])])),
            ..Default::default()
        };
        // The records are volumes, which `docker container prune` and `docker system prune`
        // leave alone: one more list call, whatever the pool size, asked beside the first.
        let record_options = ListVolumesOptions {
            filters: Some(HashMap::from([("label".to_owned(), vec![labels::POOL.to_owned()])])),
        };
        let (summaries, volumes) = tokio::join!(
            self.call(self.docker.list_containers(Some(options))),
            self.call(self.docker.list_volumes(Some(record_options)))
        );
        let summaries = summaries.map_err(|e| self.error("list containers", e))?;
        let volumes = volumes.map_err(|e| self.error("list volumes", e))?;
        let mut records = HashMap::new();
        let mut listed = Listed::default();
        let mut history = Vec::new();
        let mut containers = Vec::with_capacity(summaries.len());
        for summary in summaries {
            let name =
                summary.names.as_ref().and_then(|n| n.first()).map_or("", |n| n.trim_start_matches('/'));
            let no_labels = HashMap::new();
            let labels = summary.labels.as_ref().unwrap_or(&no_labels);
            let created = summary.created.unwrap_or_default();
            if labels.contains_key(labels::LOCK) {
                // A pool's lock, read by name where it matters (see `lock`).
            } else if let Some((instance, record)) = up::up_record_from(name, labels, created) {
                // Records kept as containers by an earlier poolctl: read, and removed with what
                // they record.
                listed.legacy.insert(up::up_record_name(&instance));
                records.insert(instance, record);
            } else if let Some((pool, record)) = up::rollout_record_from(name, labels, created) {
                listed.legacy.insert(up::rollout_record_name(&pool));
                listed.rollouts.insert(pool, record);
            } else {
                containers.extend(container_from_summary(summary));
            }
        }
        let mut progressed = Vec::new();
        let mut updated = HashMap::new();
        for volume in volumes.volumes.iter().flatten() {
            let (name, labels, created) = (&volume.name, &volume.labels, up::volume_created(volume));
            if let Some((pool, suspension)) = suspend::suspension_from(name, labels, created) {
                listed.suspensions.insert(pool, suspension);
            } else if let Some(pool) = suspend::request_of(name, labels) {
                listed.requests.insert(pool);
            } else if let Some((pool, promotion)) = suspend::promotion_from(name, labels, created) {
                listed.promotions.insert(pool, promotion);
            } else if let Some((instance, record)) = up::up_record_from(name, labels, created) {
                records.insert(instance, record);
            } else if let Some((pool, record)) = up::rollout_record_from(name, labels, created) {
                listed.rollouts.insert(pool, record);
            } else if let Some((instance, record)) = up::updated_record_from(name, labels) {
                updated.insert(instance, record);
            } else if let Some(pool) = up::progress_record_of(name, labels) {
                progressed.push((pool, created));
            } else if let Some(record) = history::history_record_from(name, labels, created) {
                history.push(record);
            }
        }
        for (pool, at) in progressed {
            if let Some(record) = listed.rollouts.get_mut(&pool) {
                record.progressed = Some(at);
            }
        }
        listed.history = history::assemble(history);
        *self.listed() = listed;
        up::join_up_records(&mut containers, &records);
        up::join_updated_records(&mut containers, &updated);
        for c in &mut containers {
            c.docker_host.clone_from(&self.address);
        }
        *self.ours() = containers.iter().map(|c| (c.name.clone(), c.id.clone())).collect();
        // Only for the few that restart or fail their HEALTHCHECK: since when, which the list
        // does not say. A container gone in between is judged by the next look.
        for c in containers.iter_mut().filter(|c| up::needs_since(c)) {
            if let Some(inspect) = self.inspect(&c.id).await? {
                c.since = up::since(&inspect);
            }
        }
        Ok(containers)
    }

    async fn ensure_image(&self, _pool: &str, image: &str) -> Result<bool, BackendError> {
        match self.call(self.docker.inspect_image(image)).await {
            Ok(_) => return Ok(false),
            Err(e) if status_of(&e) == Some(404) => {}
            Err(e) => return Err(self.error(&format!("inspect image {image}"), e)),
        }
        tracing::info!(image, "image not present locally, pulling");
        let (from_image, tag) = split_reference(image);
        let options = CreateImageOptions {
            from_image: Some(from_image.to_owned()),
            tag: tag.map(str::to_owned),
            ..Default::default()
        };
        self.count();
        let mut pull = self.docker.create_image(Some(options), None, None);
        // Progress arrives many times per second per layer; one line per layer and status is
        // what a person wants to read.
        let mut seen = HashSet::new();
        loop {
            let Ok(next) = tokio::time::timeout(self.timeouts.pull_stall, pull.next()).await else {
                return Err(BackendError::Timeout {
                    what: format!("pull image {image}: no progress from Docker at {}", self.host),
                    after: self.timeouts.pull_stall,
                });
            };
            let Some(info) = next else { break };
            let info = info.map_err(|e| self.error(&format!("pull image {image}"), e))?;
            let status = info.status.unwrap_or_default();
            let layer = info.id.unwrap_or_default();
            if !status.is_empty() && seen.insert((layer.clone(), status.clone())) {
                if layer.is_empty() {
                    tracing::info!(image, "{status}");
                } else {
                    tracing::info!(image, layer, "{status}");
                }
            }
        }
        Ok(true)
    }

    async fn image_labels(&self, _pool: &str, image: &str) -> Result<BTreeMap<String, String>, BackendError> {
        let inspected = self
            .call(self.docker.inspect_image(image))
            .await
            .map_err(|e| self.error(&format!("inspect image {image}"), e))?;
        Ok(inspected.config.and_then(|c| c.labels).unwrap_or_default().into_iter().collect())
    }

    async fn network_exists(&self, _pool: &str, name: &str) -> Result<bool, BackendError> {
        match self.call(self.docker.inspect_network(name, None::<InspectNetworkOptions>)).await {
            Ok(_) => Ok(true),
            Err(e) if status_of(&e) == Some(404) => Ok(false),
            Err(e) => Err(self.error(&format!("inspect network {name}"), e)),
        }
    }

    async fn create(&self, spec: &NewContainer) -> Result<(), BackendError> {
        let name = &spec.name;
        let body = create::create_body(spec)
            .map_err(|why| BackendError::Failed(format!("create container {name}: {why}")))?;
        let options = CreateContainerOptions { name: Some(name.clone()), ..Default::default() };
        let created = self
            .call(self.docker.create_container(Some(options), body))
            .await
            .map_err(|e| self.error(&format!("create container {name}"), e))?;
        if spec.labels.contains_key(labels::POOL) {
            self.ours().insert(name.clone(), created.id);
        }
        // Before the start, as `docker run --network a --network b` connects them.
        for network in &spec.extra_networks {
            let connect = NetworkConnectRequest { container: name.clone(), endpoint_config: None };
            self.call(self.docker.connect_network(network, connect))
                .await
                .map_err(|e| self.error(&format!("connect container {name} to network {network}"), e))?;
        }
        // Before the start, so that what the entrypoint reads at once is there.
        for file in &spec.files {
            self.write_file(name, file).await?;
        }
        if !spec.template_files.is_empty() {
            self.write_template_files(name, &spec.template_files).await?;
        }
        // A container that fails to start is left in place on purpose: the next plan sees it as
        // not running and replaces it, and meanwhile `docker logs` and inspect can explain why.
        self.call(self.docker.start_container(name, None))
            .await
            .map_err(|e| self.error(&format!("start container {name}"), e))
    }

    async fn exec(&self, name: &str, argv: &[String], timeout: Duration) -> Result<ExecOutput, BackendError> {
        let mut output = Tail::default();
        match tokio::time::timeout(timeout, self.exec_inner(name, argv, &mut output)).await {
            Ok(result) => Ok(ExecOutput { exit_code: result?, output: output.into_string() }),
            // Docker cannot kill an exec; the process may run on inside the container, but the
            // caller stops waiting for it.
            Err(_) => Err(BackendError::Timeout { what: format!("exec {argv:?} in {name}"), after: timeout }),
        }
    }

    async fn read_file(&self, name: &str, path: &str) -> Result<Secret, BackendError> {
        let mut path = path.to_owned();
        for _ in 0..=MAX_LINKS {
            match self.download(name, &path).await? {
                archive::Entry::File(bytes, _) => {
                    return String::from_utf8(bytes).map(Secret::new).map_err(|_| {
                        BackendError::Failed(format!("read {path} in {name}: it is not UTF-8 text"))
                    });
                }
                // Docker archives a link as a link; `docker cp -L` follows it on the client side.
                archive::Entry::Symlink(target) if target.starts_with('/') => path = target,
                archive::Entry::Symlink(target) => {
                    let dir = path.rsplit_once('/').map_or("", |(dir, _)| dir);
                    path = format!("{dir}/{target}");
                }
            }
        }
        Err(BackendError::Failed(format!("read {path} in {name}: more than {MAX_LINKS} symbolic links")))
    }

    async fn write_file(&self, name: &str, file: &NewFile) -> Result<(), BackendError> {
        let doing = || format!("write {} in container {name}", file.path);
        let (dir, base) = file.path.rsplit_once('/').unwrap_or(("", &file.path));
        let (parent, dir_name) = dir.rsplit_once('/').unwrap_or(("", dir));
        if dir_name.is_empty() || base.is_empty() {
            return Err(BackendError::Failed(format!("{}: needs a path /PARENT/DIR/FILE", doing())));
        }
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let archive = archive::single_file(dir_name, base, file.content.expose().as_bytes(), now)
            .map_err(|why| BackendError::Failed(format!("{}: {why}", doing())))?;
        let parent = if parent.is_empty() { "/" } else { parent };
        let options = UploadToContainerOptions { path: parent.to_owned(), ..Default::default() };
        self.call(self.docker.upload_to_container(name, Some(options), bollard::body_full(archive.into())))
            .await
            .map_err(|e| self.error(&doing(), e))
    }

    async fn may_run(&self, name: &str) -> Result<bool, BackendError> {
        let Some(inspect) = self.inspect(name).await? else { return Ok(false) };
        let state = inspect.state.as_ref();
        let runs = state.is_some_and(|s| [s.running, s.paused, s.restarting].contains(&Some(true)));
        // Asked before a stop: a container that runs under the name but is not poolctl's is
        // not one poolctl may stop, whatever Node names it.
        if runs && !is_ours(&inspect) {
            return Err(BackendError::NotOurs(name.to_owned()));
        }
        Ok(runs)
    }

    async fn up_now(&self, name: &str) -> Result<Option<String>, BackendError> {
        Ok(match Self::judge(self.inspect(name).await?.as_ref()) {
            Judgement::Up => None,
            Judgement::Waiting(why) | Judgement::Failed(why) => Some(why),
        })
    }

    async fn wait_up(&self, name: &str, timeout: Duration) -> Result<(), BackendError> {
        let mut last = String::from("not inspected yet");
        match tokio::time::timeout(timeout, self.wait_up_inner(name, &mut last)).await {
            Ok(result) => result,
            Err(_) => Err(BackendError::Timeout {
                what: format!("waiting for container {name} to be up ({last})"),
                after: timeout,
            }),
        }
    }

    async fn wait_stopped(&self, name: &str) -> Result<Stopped, BackendError> {
        // The daemon sends the response headers at once and the body when the container stops,
        // so bollard's request timeout (until the headers) does not cut a long wait short.
        let options = WaitContainerOptions { condition: "not-running".to_owned() };
        self.count();
        let mut wait = self.docker.wait_container(name, Some(options));
        let code = match wait.next().await {
            Some(Ok(answer)) => answer.status_code,
            // bollard turns a non-zero exit code into an error.
            Some(Err(DockerError::DockerContainerWaitError { code, .. })) => code,
            Some(Err(e)) if status_of(&e) == Some(404) => return Ok(Stopped::Removed),
            Some(Err(e)) => return Err(self.error(&format!("wait for container {name}"), e)),
            None => {
                return Err(BackendError::Failed(format!(
                    "wait for container {name}: the daemon closed the stream"
                )));
            }
        };
        // `docker rm -f` kills before it removes: say which of the two happened.
        Ok(if self.inspect(name).await?.is_some() { Stopped::Exited(code) } else { Stopped::Removed })
    }

    async fn stop(&self, name: &str, grace: Duration) -> Result<(), BackendError> {
        let Some(id) = self.owned_id(name).await? else { return Ok(()) };
        let options = StopContainerOptions {
            t: Some(i32::try_from(grace.as_secs()).unwrap_or(i32::MAX)),
            ..Default::default()
        };
        let docker = self.docker.clone().with_timeout(grace + STOP_MARGIN);
        let signal = "SIGTERM (or the image's stop signal)";
        crate::backend::waiting::note(
            name,
            format!("the container to stop: {signal}, SIGKILL after {}s", grace.as_secs()),
        );
        let _slot = self.slots.acquire().await;
        self.count();
        match docker.stop_container(&id, Some(options)).await {
            // bollard passes 304 (already stopped) as success.
            Ok(()) => Ok(()),
            Err(e) if status_of(&e) == Some(404) => Ok(()),
            Err(e) => Err(self.error(&format!("stop container {name}"), e)),
        }
    }

    async fn remove(&self, name: &str) -> Result<(), BackendError> {
        // Anonymous volumes die with the container, as with `docker rm -v`; not forced, so that a
        // container that still runs (a stop that did not happen) is an error, not a kill.
        let options = RemoveContainerOptions { v: true, force: false, link: false };
        let container = async {
            let Some(id) = self.owned_id(name).await? else { return Ok(()) };
            match self.call(self.docker.remove_container(&id, Some(options))).await {
                Ok(()) => {
                    self.ours().remove(name);
                    Ok(())
                }
                Err(e) if status_of(&e) == Some(404) => Ok(()),
                Err(e) => Err(self.error(&format!("remove container {name}"), e)),
            }
        };
        // Its up record goes with it, at the same time. Should the container still run (the
        // remove is not forced, so it stays), it has lost its record: the next plan counts it
        // as not up, the cautious side.
        let updated_record = up::updated_record_name(name);
        let (container, record, updated) =
            tokio::join!(container, self.remove_up_record(name), self.remove_volume(&updated_record));
        container.and(record).and(updated)
    }

    async fn update_in_place(
        &self,
        name: &str,
        update: &crate::backend::LiveUpdate,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), BackendError> {
        let id =
            self.owned_id(name).await?.ok_or_else(|| BackendError::NotFound(format!("container {name}")))?;
        let body =
            create::update_body(update).map_err(|e| BackendError::Failed(format!("update {name}: {e}")))?;
        self.call(self.docker.update_container(&id, body))
            .await
            .map_err(|e| self.error(&format!("update container {name}"), e))?;
        // Last: the record says the update is done, never before it is.
        self.write_updated_record(name, &id, update, labels).await
    }

    async fn forget_pool(&self, pool: &str) -> Result<(), BackendError> {
        self.remove_history(pool).await?;
        self.remove_rollout_record(pool).await
    }

    async fn record_up(&self, name: &str, labels: &BTreeMap<String, String>) -> Result<(), BackendError> {
        self.write_up_record(name, labels).await
    }

    async fn record_progress(
        &self,
        pool: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), BackendError> {
        self.write_progress_record(pool, labels).await
    }

    fn rollouts(&self) -> BTreeMap<String, RolloutRecord> {
        self.listed().rollouts.clone()
    }

    async fn record_rollout(
        &self,
        pool: &str,
        template_hash: &str,
        rolled_back_from: Option<&str>,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), BackendError> {
        self.write_rollout_record(pool, template_hash, rolled_back_from, labels).await
    }

    fn suspensions(&self) -> BTreeMap<String, Suspension> {
        self.listed().suspensions.clone()
    }

    fn requests(&self) -> BTreeSet<String> {
        self.listed().requests.clone()
    }

    async fn suspend(&self, pool: &str, by: &str, reason: Option<&str>) -> Result<Suspension, BackendError> {
        self.write_suspension(pool, by, reason).await
    }

    async fn resume(&self, pool: &str) -> Result<(), BackendError> {
        self.remove_volume(&suspension_record_name(pool)).await
    }

    async fn request_reconcile(&self, pool: &str) -> Result<(), BackendError> {
        self.write_request(pool).await
    }

    async fn consume_request(&self, pool: &str) -> Result<(), BackendError> {
        self.remove_volume(&request_record_name(pool)).await
    }

    fn promotions(&self) -> BTreeMap<String, Promotion> {
        self.listed().promotions.clone()
    }

    async fn promote(&self, pool: &str, template_hash: &str, by: &str) -> Result<Promotion, BackendError> {
        self.write_promotion(pool, template_hash, by).await
    }

    async fn tidy_promotion(&self, pool: &str) -> Result<(), BackendError> {
        self.remove_volume(&promotion_record_name(pool)).await
    }

    fn history(&self) -> BTreeMap<String, Vec<Revision>> {
        self.listed().history.clone()
    }

    async fn record_revision(
        &self,
        pool: &str,
        revision: &Revision,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), BackendError> {
        self.write_revision(pool, revision, labels).await
    }

    async fn record_revision_end(
        &self,
        pool: &str,
        number: u64,
        result: RolloutResult,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), BackendError> {
        self.write_revision_end(pool, number, result, labels).await
    }
}

/// Whether the container carries poolctl's pool label: the proof that poolctl created it.
fn is_ours(inspect: &ContainerInspectResponse) -> bool {
    let labels = inspect.config.as_ref().and_then(|c| c.labels.as_ref());
    labels
        .is_some_and(|l| l.get(labels::POOL).is_some_and(|p| !p.is_empty()) && !l.contains_key(labels::LOCK))
}

/// The HTTP status of a daemon refusal.
fn status_of(e: &DockerError) -> Option<u16> {
    match e {
        DockerError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// Why the Docker endpoints of a run cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum EndpointsError {
    /// A pool's `docker:` section (or the docker CLI's configuration) names no usable endpoint.
    #[error("{}: cannot resolve the Docker endpoint", whose(pools))]
    Resolve {
        pools: Vec<String>,
        #[source]
        source: EndpointError,
    },
    /// An endpoint does not answer. Never replaced by another one: the pools live there.
    #[error("{}: the Docker endpoint does not answer", whose(pools))]
    Connect {
        pools: Vec<String>,
        #[source]
        source: BackendError,
    },
}

fn whose(pools: &[String]) -> String {
    match pools {
        [] => "the docker CLI's current endpoint".to_owned(),
        [one] => format!("pool {one}"),
        many => format!("pools {}", many.join(", ")),
    }
}

/// The endpoints the declared pools name, resolved, each once (by address), and the index of
/// each pool's; the current endpoint alone when no pool is declared (a source that declares
/// nothing still prunes there).
pub fn resolve_endpoints(
    desired: &Desired,
    env: &DockerEnv,
) -> Result<(Vec<Endpoint>, BTreeMap<String, usize>), EndpointsError> {
    let mut endpoints: Vec<Endpoint> = Vec::new();
    let mut pools = BTreeMap::new();
    let mut current: Option<Endpoint> = None;
    let mut add = |endpoint: Endpoint| {
        endpoints.iter().position(|e| e.host == endpoint.host).unwrap_or_else(|| {
            endpoints.push(endpoint);
            endpoints.len() - 1
        })
    };
    for pool in &desired.pools {
        let resolve_error = |source| EndpointsError::Resolve { pools: vec![pool.name().to_owned()], source };
        let endpoint = match (&pool.pool.spec.docker, &current) {
            (Some(spec), _) => endpoint::resolve(Some(spec), env).map_err(resolve_error)?,
            // Resolved once: every pool without `docker:` is on the same endpoint.
            (None, Some(current)) => current.clone(),
            (None, None) => current.insert(endpoint::current(env).map_err(resolve_error)?).clone(),
        };
        pools.insert(pool.name().to_owned(), add(endpoint));
    }
    if endpoints.is_empty() {
        let e =
            endpoint::current(env).map_err(|source| EndpointsError::Resolve { pools: Vec::new(), source })?;
        endpoints.push(e);
    }
    Ok((endpoints, pools))
}

/// Connect to every endpoint the declared pools name (see [`resolve_endpoints`]). An endpoint
/// that does not answer fails the run, naming it and its pools.
pub async fn connect_endpoints(
    desired: &Desired,
    env: &DockerEnv,
) -> Result<Endpoints<DockerBackend>, EndpointsError> {
    let (endpoints, pools) = resolve_endpoints(desired, env)?;
    let mut places = Vec::new();
    for (i, endpoint) in endpoints.iter().enumerate() {
        let backend = DockerBackend::connect(endpoint, Timeouts::default()).await.map_err(|source| {
            let pools = pools.iter().filter(|(_, at)| **at == i).map(|(p, _)| p.clone()).collect();
            EndpointsError::Connect { pools, source }
        })?;
        places.push((endpoint.name.clone(), backend));
    }
    // A daemon a pool moved away from is reached by its address alone, as its Nodes record it.
    let connect: crate::backend::endpoints::Connector<DockerBackend> = Arc::new(|host: String| {
        Box::pin(async move {
            let endpoint = Endpoint::at(&host);
            let backend = DockerBackend::connect(&endpoint, Timeouts::default()).await?;
            Ok((endpoint.name, backend))
        })
    });
    Ok(Endpoints::new(places, pools).with_connector(connect))
}

/// The bollard client for an endpoint: over TLS when it has TLS material. A missing `ca.pem`
/// leaves the system's roots alone to verify the daemon (bollard reads the CA file always, and
/// an empty one adds nothing); a missing client certificate or key offers none.
fn client_for(endpoint: &Endpoint) -> Result<Docker, DockerError> {
    const TIMEOUT_SECS: u64 = 120;
    let version = bollard::API_DEFAULT_VERSION;
    let Some(tls) = &endpoint.tls else {
        // Not `connect_with_host`: it reads DOCKER_TLS_VERIFY itself, and the endpoint already
        // says whether TLS is wanted (a context's own settings win over the environment's).
        return if endpoint.host.starts_with("unix://") {
            Docker::connect_with_unix(&endpoint.host, TIMEOUT_SECS, version)
        } else {
            Docker::connect_with_http(&endpoint.host, TIMEOUT_SECS, version)
        };
    };
    let none = std::path::Path::new("/dev/null");
    let missing = std::path::Path::new("/nonexistent/poolctl/no-client-certificate.pem");
    Docker::connect_with_ssl(
        &endpoint.host,
        tls.key.as_deref().unwrap_or(missing),
        tls.cert.as_deref().unwrap_or(missing),
        tls.ca.as_deref().unwrap_or(none),
        TIMEOUT_SECS,
        version,
    )
}

/// The most specific message in an error's chain ("Connection refused (os error 111)" rather
/// than hyper's "client error (Connect)"), on one line.
fn connect_reason(e: &DockerError) -> String {
    let reason = match e {
        DockerError::SocketNotFoundError(path) => format!("no socket at {path}"),
        DockerError::RequestTimeoutError => "no answer in time".to_owned(),
        _ => {
            let mut deepest: &dyn std::error::Error = e;
            while let Some(source) = deepest.source() {
                deepest = source;
            }
            deepest.to_string()
        }
    };
    one_line(&reason)
}

/// Daemon messages sometimes span lines; an error here is one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Splits an image reference into what the pull API wants: without a tag the daemon would pull
/// every tag of the repository, so a missing tag means `latest`; a digest stays in the name.
fn split_reference(image: &str) -> (&str, Option<&str>) {
    if image.contains('@') {
        return (image, None);
    }
    let last_slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[last_slash..].rfind(':') {
        Some(i) => (&image[..last_slash + i], Some(&image[last_slash + i + 1..])),
        None => (image, Some("latest")),
    }
}

/// Keeps the last [`OUTPUT_CAP`] bytes of a stream: the end of a failing command's output is
/// where its error is.
#[derive(Default)]
struct Tail {
    bytes: Vec<u8>,
    dropped: bool,
}

impl Tail {
    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        // Trim in bulk, not per chunk, so a long stream costs linear time.
        if self.bytes.len() > 2 * OUTPUT_CAP {
            let excess = self.bytes.len() - OUTPUT_CAP;
            self.bytes.drain(..excess);
            self.dropped = true;
        }
    }

    fn into_string(mut self) -> String {
        if self.bytes.len() > OUTPUT_CAP {
            let excess = self.bytes.len() - OUTPUT_CAP;
            self.bytes.drain(..excess);
            self.dropped = true;
        }
        let text = String::from_utf8_lossy(&self.bytes);
        if self.dropped { format!("{CUT}{text}") } else { text.into_owned() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_without_a_tag_pull_latest() {
        assert_eq!(split_reference("busybox"), ("busybox", Some("latest")));
        assert_eq!(split_reference("kindest/node:v1.31.0"), ("kindest/node", Some("v1.31.0")));
        assert_eq!(split_reference("localhost:5000/x"), ("localhost:5000/x", Some("latest")));
        assert_eq!(split_reference("localhost:5000/x:1"), ("localhost:5000/x", Some("1")));
        assert_eq!(split_reference("x@sha256:abc"), ("x@sha256:abc", None));
    }

    #[test]
    fn tail_keeps_the_end_of_long_output() {
        let mut tail = Tail::default();
        for i in 0..10_000 {
            tail.push(format!("line {i}\n").as_bytes());
        }
        let text = tail.into_string();
        assert!(text.starts_with("[...]"));
        assert!(text.ends_with("line 9999\n"));
        assert!(text.len() <= OUTPUT_CAP + 5);

        let mut short = Tail::default();
        short.push(b"hello\n");
        assert_eq!(short.into_string(), "hello\n");
    }
}
