//! `--notify URL` of `watch` and `apply`: a notice when a pool's rollout starts, succeeds or
//! fails, as Flux's notification controller sends it, to the [`Target`] the URL names (a
//! generic webhook, signed or not, Slack, or a commit status). One task delivers them in order
//! from a bounded queue, retrying a failing receiver a few times: the rollout never waits for
//! a receiver, and a dead one costs a warning per notification, not memory.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::Full;
use hyper::StatusCode;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use super::providers::Target;
use super::signature::Secret;
use crate::rollout::execute::{Report, StepOutcome};

/// Notifications waiting for delivery; more than this while a receiver is down are dropped.
const QUEUE: usize = 64;
/// Tries per notification, and the deadline of each.
const ATTEMPTS: u32 = 4;
const DEADLINE: Duration = Duration::from_secs(10);

/// One notification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Notice {
    pub pool: String,
    /// The source's revision: the commit id, or a digest of a directory's pools.
    pub revision: String,
    /// The full id of the commit the rollout came from; none for a directory source.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// `started`, `succeeded` or `failed`; or, when a plan holds a pool back, `degraded` (its
    /// rollout stalled), `rolling_back`, `remediation_held` (above `maxUnhealthy`) or
    /// `canary_waiting` (its canaries up, the rest waiting for `poolctl promote`), with why in
    /// `error`; or `waiting` when a retirement begins to wait for its Node's deletion
    /// hooks or its volumes, with the instance and what holds it in `error`.
    pub result: &'static str,
    /// Steps carried out so far.
    pub steps_done: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// RFC 3339.
    pub timestamp: String,
    /// Who sent it, as Flux's events name their controller.
    pub reporting_controller: &'static str,
}

impl Notice {
    /// The result that tells a condition of [`crate::rollout::conditions`] by its reason.
    pub fn result_of(reason: &str) -> &'static str {
        match reason {
            "RollingBack" => "rolling_back",
            "RemediationHeld" => "remediation_held",
            "CanaryWaiting" => "canary_waiting",
            _ => "degraded",
        }
    }

    /// How `report`'s rollout ended for `pool`, by its own steps: `failed` (the failed step's
    /// line in `error`) or `succeeded`; `None` while a stop at a step boundary (a signal, a
    /// newer spec) left it unfinished, as the next run goes on and says how it ends.
    pub fn ended(pool: &str, revision: &str, report: &Report) -> Option<Self> {
        let failure = report.attempted.iter().find(|s| s.pool == pool && s.error.is_some());
        let unfinished = report.not_started.iter().any(|(p, ..)| p == pool);
        let result = match (failure, unfinished) {
            (Some(_), _) => "failed",
            (None, false) => "succeeded",
            (None, true) => return None,
        };
        let mut notice = Self::new(pool, revision, result);
        notice.steps_done = report.attempted.iter().filter(|s| s.pool == pool && s.error.is_none()).count();
        notice.error = failure.map(StepOutcome::failure_line);
        Some(notice)
    }

    /// The same notice, about `commit` (a Git source's full commit id).
    #[must_use]
    pub fn on_commit(mut self, commit: Option<&str>) -> Self {
        self.commit = commit.map(str::to_owned);
        self
    }

    pub fn new(pool: &str, revision: &str, result: &'static str) -> Self {
        Self {
            pool: pool.to_owned(),
            revision: revision.to_owned(),
            commit: None,
            result,
            steps_done: 0,
            error: None,
            timestamp: k8s_openapi::jiff::Timestamp::now().to_string(),
            reporting_controller: "poolctl",
        }
    }
}

/// The sending end of the queue.
#[derive(Debug, Clone)]
pub struct Notifier {
    tx: mpsc::Sender<Notice>,
    /// The delivering task, for [`Notifier::close`].
    task: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl Notifier {
    /// Start delivering to `target` from a task of its own, with `token` where the target
    /// needs one (a commit status's API token, a signature's key).
    pub fn start(target: Target, token: Option<Secret>) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        let task = tokio::spawn(deliver(target, token, rx));
        Self { tx, task: Arc::new(Mutex::new(Some(task))) }
    }

    /// Deliver what is queued, for at most `within`, before the process ends: an apply's last
    /// notice is sent as it exits.
    pub async fn close(self, within: Duration) {
        let task = crate::locked(&self.task).take();
        drop(self.tx);
        if let Some(task) = task
            && tokio::time::timeout(within, task).await.is_err()
        {
            warn!("notifications not delivered within {}s are dropped", within.as_secs());
        }
    }

    /// Queue `notice`; never waits.
    pub fn send(&self, notice: Notice) {
        if let Err(e) = self.tx.try_send(notice) {
            warn!("notification dropped: the receiver is not keeping up ({e})");
        }
    }
}

type Https = hyper_rustls::HttpsConnector<HttpConnector>;

fn client() -> Option<Client<Https, Full<Bytes>>> {
    let roots = hyper_rustls::HttpsConnectorBuilder::new()
        .with_native_roots()
        .inspect_err(|e| warn!("notifications are off: no TLS root certificates could be loaded: {e}"))
        .ok()?;
    let connector = roots.https_or_http().enable_http1().build();
    Some(Client::builder(TokioExecutor::new()).build(connector))
}

async fn deliver(target: Target, token: Option<Secret>, mut rx: mpsc::Receiver<Notice>) {
    let Some(client) = client() else { return };
    let to = target.shown();
    let mut said_no_commit = false;
    while let Some(notice) = rx.recv().await {
        if target.sets_statuses() && notice.commit.is_none() {
            if !std::mem::replace(&mut said_no_commit, true) {
                warn!(
                    "{to}: the source is no Git commit (a directory), so no commit status can be set; skipping them"
                );
            }
            continue;
        }
        let mut wait = Duration::from_millis(500);
        for attempt in 1..=ATTEMPTS {
            let request = match target.request(&notice, token.as_ref()) {
                Ok(Some(request)) => request,
                Ok(None) => break,
                Err(why) => {
                    warn!("cannot build a notification to {to}: {why}");
                    break;
                }
            };
            let (why, again) = match tokio::time::timeout(DEADLINE, client.request(request)).await {
                Ok(Ok(answer)) if answer.status().is_success() => {
                    debug!(pool = notice.pool, result = notice.result, "notified {to}");
                    break;
                }
                // The receiver refuses this request (a bad token, an unknown commit): the same
                // again would be refused too.
                Ok(Ok(answer)) => (format!("it answered {}", answer.status()), retried(answer.status())),
                Ok(Err(e)) => (crate::backend::cause_chain(&e), true),
                Err(_) => (format!("no answer in {}s", DEADLINE.as_secs()), true),
            };
            if attempt == ATTEMPTS || !again {
                warn!(
                    "notification of pool {} ({}) not delivered to {to}: {why}",
                    notice.pool, notice.result
                );
                break;
            }
            debug!("notification to {to} failed ({why}); retrying in {wait:?}");
            tokio::time::sleep(wait).await;
            wait *= 2;
        }
    }
}

/// Whether an answer with `status` is worth another try: the server's trouble, or its asking
/// to wait, not a refusal of the request itself.
fn retried(status: StatusCode) -> bool {
    status.is_server_error()
        || status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notice_is_a_flux_like_document_and_the_url_is_shown_without_its_token() {
        let mut notice = Notice::new("workers", "0123456789ab", "failed");
        notice.steps_done = 3;
        notice.error = Some("step drain w-1 failed".into());
        let doc = serde_json::to_value(&notice).unwrap();
        assert_eq!(doc["pool"], "workers");
        assert_eq!(doc["revision"], "0123456789ab");
        assert_eq!(doc["result"], "failed");
        assert_eq!(doc["stepsDone"], 3);
        assert_eq!(doc["error"], "step drain w-1 failed");
        assert_eq!(doc["reportingController"], "poolctl");
        let url = Target::parse("https://hooks.example:8443/services/T0/s3cret?token=x").unwrap();
        assert_eq!(url.shown(), "https://hooks.example");
        assert!(retried(StatusCode::BAD_GATEWAY) && retried(StatusCode::TOO_MANY_REQUESTS));
        assert!(!retried(StatusCode::UNAUTHORIZED) && !retried(StatusCode::UNPROCESSABLE_ENTITY));
    }
}
