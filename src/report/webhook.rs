//! `watch --notify URL`: a JSON document, sent by POST when a pool's rollout starts, succeeds
//! or fails, as Flux's notification controller posts to a generic webhook. One task delivers them
//! in order from a bounded queue, retrying a failing receiver a few times: the watch never
//! waits for a receiver, and a dead one costs a warning per notification, not memory.

use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use tokio::sync::mpsc;
use tracing::{debug, warn};

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
    /// The source's revision: the commit id, or the digest of a directory's files.
    pub revision: String,
    /// `started`, `succeeded` or `failed`; or, when a plan holds a pool back, `degraded` (its
    /// rollout stalled), `rolling_back` or `remediation_held` (above `maxUnhealthy`), with
    /// why in `error`; or `waiting` when a retirement begins to wait for its Node's deletion
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
            _ => "degraded",
        }
    }

    pub fn new(pool: &str, revision: &str, result: &'static str) -> Self {
        Self {
            pool: pool.to_owned(),
            revision: revision.to_owned(),
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
}

impl Notifier {
    /// Start delivering to `url` from a task of its own.
    pub fn start(url: Uri) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(deliver(url, rx));
        Self { tx }
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
    let roots = match hyper_rustls::HttpsConnectorBuilder::new().with_native_roots() {
        Ok(roots) => roots,
        Err(e) => {
            warn!("notifications are off: no TLS root certificates could be loaded: {e}");
            return None;
        }
    };
    let connector = roots.https_or_http().enable_http1().build();
    Some(Client::builder(TokioExecutor::new()).build(connector))
}

/// Where notifications go, as logs may show it: scheme and host, never the path or query that
/// carry a webhook's token.
fn shown(url: &Uri) -> String {
    format!("{}://{}", url.scheme_str().unwrap_or("http"), url.authority().map_or("", |a| a.host()))
}

async fn deliver(url: Uri, mut rx: mpsc::Receiver<Notice>) {
    let Some(client) = client() else { return };
    let to = shown(&url);
    while let Some(notice) = rx.recv().await {
        let body = match serde_json::to_vec(&notice) {
            Ok(body) => Bytes::from(body),
            Err(e) => {
                warn!("cannot encode a notification: {e}");
                continue;
            }
        };
        let mut wait = Duration::from_millis(500);
        for attempt in 1..=ATTEMPTS {
            let request = Request::post(url.clone())
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .header(hyper::header::USER_AGENT, concat!("poolctl/", env!("CARGO_PKG_VERSION")))
                .body(Full::new(body.clone()));
            let request = match request {
                Ok(request) => request,
                Err(e) => {
                    warn!("cannot build a notification to {to}: {e}");
                    break;
                }
            };
            let why = match tokio::time::timeout(DEADLINE, client.request(request)).await {
                Ok(Ok(answer)) if answer.status().is_success() => {
                    debug!(pool = notice.pool, result = notice.result, "notified {to}");
                    break;
                }
                Ok(Ok(answer)) => format!("it answered {}", answer.status()),
                Ok(Err(e)) => crate::backend::cause_chain(&e),
                Err(_) => format!("no answer in {}s", DEADLINE.as_secs()),
            };
            if attempt == ATTEMPTS {
                warn!(
                    "notification of pool {} ({}) not delivered to {to}: {why}",
                    notice.pool, notice.result
                );
            } else {
                debug!("notification to {to} failed ({why}); retrying in {wait:?}");
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
        }
    }
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
        let url: Uri = "https://hooks.example:8443/services/T0/s3cret?token=x".parse().unwrap();
        assert_eq!(shown(&url), "https://hooks.example");
    }
}
