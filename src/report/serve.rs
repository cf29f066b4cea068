//! `watch --listen`: the endpoints that a supervisor and Prometheus read. `/metrics` (the
//! `OpenMetrics` text of [`crate::metrics`]), `/healthz` (the loop is alive) and `/readyz` (the
//! source was read and the first reconcile ended), as every Kubernetes controller serves them;
//! and the receivers of [`super::receiver`] under `/hooks/`.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tracing::debug;

use super::receiver::Receivers;

/// How long a client may take over one request: a scraper that never finishes holds nothing.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections served at once; more wait to be accepted, so that a flood of them costs a queue
/// in the kernel, not memory here.
const MAX_CONNECTIONS: usize = 32;

/// What `/healthz` and `/readyz` answer from: the loop's heartbeat and its progress.
#[derive(Debug)]
pub struct Probes {
    started: Instant,
    /// Milliseconds from `started` to the loop's last wake-up.
    beat: AtomicU64,
    /// `/healthz` fails once the loop has not woken up for this long.
    stale_after: Duration,
    /// Why watch is not ready yet; `None` once it is.
    not_ready: Mutex<Option<&'static str>>,
    /// Why the source's newest revision was not taken (its errors), while it is the newest.
    source_broken: Mutex<Option<String>>,
}

impl Probes {
    /// The loop wakes up at least every `resync`; it is taken as dead after three missed ones.
    pub fn new(resync: Duration) -> Self {
        Self {
            started: Instant::now(),
            beat: AtomicU64::new(0),
            stale_after: resync * 3,
            not_ready: Mutex::new(Some("the source has not been read yet")),
            source_broken: Mutex::new(None),
        }
    }

    /// The loop woke up (a reconcile ended, a tick, an event).
    pub fn beat(&self) {
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.beat.store(now, Ordering::Relaxed);
    }

    pub fn not_ready(&self, why: &'static str) {
        *crate::locked(&self.not_ready) = Some(why);
    }

    pub fn ready(&self) {
        *crate::locked(&self.not_ready) = None;
    }

    fn liveness(&self) -> Result<(), String> {
        let beat = Duration::from_millis(self.beat.load(Ordering::Relaxed));
        let quiet = self.started.elapsed().saturating_sub(beat);
        if quiet > self.stale_after {
            return Err(format!("the watch loop has not woken up for {}s", quiet.as_secs()));
        }
        Ok(())
    }

    /// The source's newest revision has errors (why), or `None`: a good one replaced it.
    pub fn source_broken(&self, why: Option<String>) {
        *crate::locked(&self.source_broken) = why;
    }

    fn readiness(&self) -> Result<(), String> {
        if let Some(why) = &*crate::locked(&self.source_broken) {
            return Err(why.clone());
        }
        match *crate::locked(&self.not_ready) {
            Some(why) => Err(why.to_owned()),
            None => Ok(()),
        }
    }
}

/// Serve the endpoints on `listener` until the process ends.
pub async fn serve(listener: TcpListener, probes: Arc<Probes>, receivers: Receivers) {
    let receivers = Arc::new(receivers);
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else { return };
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors, say: a moment, then go on.
                debug!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let probes = Arc::clone(&probes);
        let receivers = Arc::clone(&receivers);
        tokio::spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let probes = Arc::clone(&probes);
                let receivers = Arc::clone(&receivers);
                async move {
                    let hook = request.uri().path().strip_prefix("/hooks/").map(str::to_owned);
                    let answer = match hook {
                        Some(name) => receivers.receive(&name, request).await,
                        None => answer(&request, &probes),
                    };
                    Ok::<_, Infallible>(answer)
                }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(REQUEST_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(REQUEST_TIMEOUT * 6, connection).await {
                Ok(Err(e)) => debug!("connection from {peer}: {e}"),
                Err(_) => debug!("connection from {peer}: closed after {:?}", REQUEST_TIMEOUT * 6),
                Ok(Ok(())) => {}
            }
        });
    }
}

fn answer(request: &Request<Incoming>, probes: &Probes) -> Response<Full<Bytes>> {
    if request.method() != hyper::Method::GET && request.method() != hyper::Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
    }
    match request.uri().path() {
        "/metrics" => typed(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            crate::metrics::install().encode(),
        ),
        "/healthz" => probe(probes.liveness()),
        "/readyz" => probe(probes.readiness()),
        _ => text(StatusCode::NOT_FOUND, "not found: try /metrics, /healthz or /readyz\n"),
    }
}

fn probe(result: Result<(), String>) -> Response<Full<Bytes>> {
    match result {
        Ok(()) => text(StatusCode::OK, "ok\n"),
        Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

pub(super) fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    typed(status, "text/plain; charset=utf-8", body)
}

fn typed(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    let content_type = hyper::header::HeaderValue::from_static(content_type);
    response.headers_mut().insert(hyper::header::CONTENT_TYPE, content_type);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn healthz_fails_after_three_missed_wakeups_and_readyz_says_why() {
        let probes = Probes::new(Duration::from_secs(60));
        probes.beat();
        assert!(probes.liveness().is_ok());
        tokio::time::advance(Duration::from_secs(179)).await;
        assert!(probes.liveness().is_ok());
        tokio::time::advance(Duration::from_secs(2)).await;
        let dead = probes.liveness().unwrap_err();
        assert!(dead.contains("181s"), "{dead}");
        probes.beat();
        assert!(probes.liveness().is_ok());

        assert_eq!(probes.readiness().unwrap_err(), "the source has not been read yet");
        probes.not_ready("the first reconcile has not ended");
        assert_eq!(probes.readiness().unwrap_err(), "the first reconcile has not ended");
        probes.ready();
        assert!(probes.readiness().is_ok());
        probes.source_broken(Some("pools/w.yaml:3:12: replicas: not a number".into()));
        assert_eq!(probes.readiness().unwrap_err(), "pools/w.yaml:3:12: replicas: not a number");
        probes.source_broken(None);
        assert!(probes.readiness().is_ok(), "a good revision makes it ready again");
    }
}
