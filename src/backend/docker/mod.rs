//! The Docker edge: [`DockerBackend`] implements [`Containers`] with bollard, speaking whatever API
//! version the daemon offers (down to 1.41, Docker 20.10).
//!
//! Observation is one label-filtered list call whatever the pool size: health comes from the
//! list's `Status` text rather than from an inspect per container. Every request to the daemon
//! bumps a counter ([`DockerBackend::api_calls`]) so that tests and the benchmark can check that.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::{ContainerInspectResponse, ContainerStateStatusEnum, HealthStatusEnum};
use bollard::query_parameters::{
    CreateContainerOptions, CreateImageOptions, EventsOptions, InspectContainerOptions,
    InspectNetworkOptions, ListContainersOptions, LogsOptions, RemoveContainerOptions, StopContainerOptions,
    WaitContainerOptions,
};
use futures::StreamExt;

use crate::backend::{BackendError, Containers, ExecOutput, NewContainer, Stopped};
use crate::model::{Container, labels};

mod convert;
mod create;
mod events;
mod lock;

use convert::container_from_summary;
pub use convert::health_from_status;
pub use events::{container_events, drift_events};
pub use lock::lock_name;

/// Where bollard (and the docker CLI) look when `DOCKER_HOST` is not set.
pub const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";

/// How much exec output and log text is kept: enough for an error message, bounded so that a
/// chatty bootstrap command cannot grow memory.
const OUTPUT_CAP: usize = 4096;

/// How many log lines a failed `wait_up` reports.
const LOG_TAIL: &str = "20";

/// bollard's timeout covers a request until its response headers arrive. A stop answers only once
/// the container is down, so its timeout must exceed the grace period by this margin.
const STOP_MARGIN: Duration = Duration::from_secs(30);

/// A connection to one Docker daemon.
#[derive(Debug)]
pub struct DockerBackend {
    docker: Docker,
    /// Where the daemon was found, for error messages.
    host: String,
    calls: AtomicU64,
}

impl DockerBackend {
    /// Connects to the daemon named by `DOCKER_HOST`, or to the default socket.
    pub async fn connect() -> Result<Self, BackendError> {
        Self::connect_with(None).await
    }

    /// Connects to `host` (a `unix://`, `tcp://` or `http://` address), or to what `DOCKER_HOST`
    /// or the default socket names when `None`. Talks to the daemon once, negotiating the API
    /// version, so that an unreachable daemon is reported here rather than halfway through a plan.
    pub async fn connect_with(host: Option<&str>) -> Result<Self, BackendError> {
        let host = match host {
            Some(h) => h.to_owned(),
            None => std::env::var("DOCKER_HOST")
                .ok()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| DEFAULT_HOST.to_owned()),
        };
        let unreachable =
            |reason: String| BackendError::Unreachable { what: "Docker", at: host.clone(), reason };
        let docker = Docker::connect_with_host(&host).map_err(|e| unreachable(connect_reason(&e)))?;
        // negotiate_version is itself a request (GET /version), so it doubles as the ping.
        let docker = docker.negotiate_version().await.map_err(|e| unreachable(connect_reason(&e)))?;
        Ok(Self { docker, host, calls: AtomicU64::new(1) })
    }

    /// How many requests this backend has sent to the daemon (the version negotiation included).
    pub fn api_calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// The daemon address in use.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The bollard client, for callers (tests, the simulated kubelet) that need more than the
    /// trait offers. Requests made through it are not counted.
    pub fn client(&self) -> &Docker {
        &self.docker
    }

    fn count(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Turns a bollard error into the backend's: transport failures become `Unreachable`, the
    /// daemon's own refusals keep its message, prefixed with what was being done.
    fn error(&self, doing: &str, e: DockerError) -> BackendError {
        match e {
            DockerError::DockerResponseServerError { message, .. } => {
                BackendError::Failed(format!("{doing}: {}", one_line(&message)))
            }
            DockerError::DockerStreamError { error } => {
                BackendError::Failed(format!("{doing}: {}", one_line(&error)))
            }
            DockerError::HyperLegacyError { .. }
            | DockerError::IOError { .. }
            | DockerError::HyperResponseError { .. }
            | DockerError::SocketNotFoundError(_)
            | DockerError::RequestTimeoutError => BackendError::Unreachable {
                what: "Docker",
                at: self.host.clone(),
                reason: connect_reason(&e),
            },
            other => BackendError::Failed(format!("{doing}: {}", connect_reason(&other))),
        }
    }

    async fn inspect(&self, name: &str) -> Result<Option<ContainerInspectResponse>, BackendError> {
        self.count();
        match self.docker.inspect_container(name, None::<InspectContainerOptions>).await {
            Ok(c) => Ok(Some(c)),
            Err(e) if status_of(&e) == Some(404) => Ok(None),
            Err(e) => Err(self.error(&format!("inspect container {name}"), e)),
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
        while let Some(Ok(chunk)) = logs.next().await {
            out.push(&chunk.into_bytes());
        }
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
                let health = state.health.as_ref().and_then(|h| h.status);
                match health {
                    None
                    | Some(HealthStatusEnum::NONE | HealthStatusEnum::EMPTY | HealthStatusEnum::HEALTHY) => {
                        Judgement::Up
                    }
                    Some(HealthStatusEnum::STARTING) => Judgement::Waiting("health: starting".to_owned()),
                    Some(HealthStatusEnum::UNHEALTHY) => {
                        let last = state
                            .health
                            .as_ref()
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
        self.count();
        let exec = self.docker.create_exec(name, config).await.map_err(|e| {
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
            self.count();
            let inspect = self.docker.inspect_exec(&exec.id).await.map_err(|e| self.error(&doing(), e))?;
            if inspect.running != Some(true)
                && let Some(code) = inspect.exit_code
            {
                return Ok(code);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// What one inspect says about a container that should be coming up.
enum Judgement {
    Up,
    Waiting(String),
    Failed(String),
}

impl Containers for DockerBackend {
    async fn list(&self) -> Result<Vec<Container>, BackendError> {
        let options = ListContainersOptions {
            all: true,
            filters: Some(HashMap::from([("label".to_owned(), vec![labels::POOL.to_owned()])])),
            ..Default::default()
        };
        self.count();
        let summaries =
            self.docker.list_containers(Some(options)).await.map_err(|e| self.error("list containers", e))?;
        Ok(summaries.into_iter().filter_map(container_from_summary).collect())
    }

    async fn ensure_image(&self, image: &str) -> Result<bool, BackendError> {
        self.count();
        match self.docker.inspect_image(image).await {
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
        while let Some(info) = pull.next().await {
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

    async fn network_exists(&self, name: &str) -> Result<bool, BackendError> {
        self.count();
        match self.docker.inspect_network(name, None::<InspectNetworkOptions>).await {
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
        self.count();
        self.docker
            .create_container(Some(options), body)
            .await
            .map_err(|e| self.error(&format!("create container {name}"), e))?;
        // A container that fails to start is left in place on purpose: the next plan sees it as
        // not running and replaces it, and meanwhile `docker logs` and inspect can explain why.
        self.count();
        self.docker
            .start_container(name, None)
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
        self.count();
        match docker.stop_container(name, Some(options)).await {
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
        self.count();
        match self.docker.remove_container(name, Some(options)).await {
            Ok(()) => Ok(()),
            Err(e) if status_of(&e) == Some(404) => Ok(()),
            Err(e) => Err(self.error(&format!("remove container {name}"), e)),
        }
    }
}

/// The HTTP status of a daemon refusal.
fn status_of(e: &DockerError) -> Option<u16> {
    match e {
        DockerError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
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
        if self.dropped { format!("[...]{text}") } else { text.into_owned() }
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
