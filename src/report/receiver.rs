//! `watch --listen`'s receivers, as Flux's notification-controller serves them: `POST
//! /hooks/github` (`X-Hub-Signature-256`), `/hooks/gitlab` (`X-Gitlab-Token`) and
//! `/hooks/generic` (`X-Signature: sha256=<hex HMAC of the body>`). A request that proves it
//! knows the secret makes the watch look at its source at once instead of at the next fetch;
//! any other is refused, and never makes it fetch. Without a secret there are no receivers.

use std::time::Duration;

use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Body, Bytes};
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::serve::text;
use super::signature::Secret;

/// The largest body read: a push event of GitHub's is a few tens of kB; more is refused (413)
/// before it costs memory.
pub const MAX_BODY: usize = 1 << 20;

/// How long a client may take to send its body: a slow one holds a connection slot, not more.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// The kinds of receiver, by the last part of their path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Receiver {
    GitHub,
    GitLab,
    Generic,
}

impl Receiver {
    fn named(name: &str) -> Option<Self> {
        [Self::GitHub, Self::GitLab, Self::Generic].into_iter().find(|r| r.name() == name)
    }

    /// As the path and the log name it.
    pub fn name(self) -> &'static str {
        match self {
            Self::GitHub => "github",
            Self::GitLab => "gitlab",
            Self::Generic => "generic",
        }
    }
}

impl std::fmt::Display for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The receivers of one watch: the secret they check, and where a valid push goes (the watch
/// loop, which looks at the source).
#[derive(Debug, Clone)]
pub struct Receivers {
    secret: Option<Secret>,
    pushes: mpsc::Sender<Receiver>,
}

impl Receivers {
    /// Receivers that check `secret` (none at all without one) and tell `pushes` of each valid
    /// push. A push that finds one already waiting there is the same news: it is not queued.
    pub fn new(secret: Option<Secret>, pushes: mpsc::Sender<Receiver>) -> Self {
        Self { secret, pushes }
    }

    /// Answer a request to `/hooks/<name>`.
    pub(super) async fn receive<B>(&self, name: &str, request: Request<B>) -> Response<Full<Bytes>>
    where
        B: Body<Data = Bytes>,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let Some(receiver) = Receiver::named(name) else {
            return text(
                StatusCode::NOT_FOUND,
                "no such receiver: try /hooks/github, /hooks/gitlab or /hooks/generic\n",
            );
        };
        // Said the same whatever the method, so that a probe learns nothing more than a 404.
        let Some(secret) = &self.secret else {
            return text(StatusCode::NOT_FOUND, "no receivers: watch runs without --hook-secret\n");
        };
        if request.method() != Method::POST {
            let mut answer = text(StatusCode::METHOD_NOT_ALLOWED, "only POST\n");
            answer
                .headers_mut()
                .insert(hyper::header::ALLOW, hyper::header::HeaderValue::from_static("POST"));
            return answer;
        }
        let (head, body) = request.into_parts();
        let declared = head.headers.get(hyper::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok());
        if declared.and_then(|v| v.parse::<u64>().ok()).is_some_and(|n| n > MAX_BODY as u64) {
            return too_large();
        }
        let verdict = match receiver {
            // The token is a header: checked before a byte of the body is read.
            Receiver::GitLab => {
                Verdict::of(header(&head.headers, "x-gitlab-token").is_some_and(|t| secret.matches(t)))
            }
            Receiver::GitHub | Receiver::Generic => {
                let body = match read(body).await {
                    Ok(body) => body,
                    Err(answer) => return answer,
                };
                let name = if receiver == Receiver::GitHub { "x-hub-signature-256" } else { "x-signature" };
                let signed = header(&head.headers, name).is_some_and(|s| secret.verify(&body, s));
                let ping = receiver == Receiver::GitHub
                    && header(&head.headers, "x-github-event") == Some(b"ping".as_slice());
                match (signed, ping) {
                    (true, true) => Verdict::Ping,
                    (signed, _) => Verdict::of(signed),
                }
            }
        };
        match verdict {
            Verdict::Refused => {
                warn!("receiver {receiver}: refused a request that does not prove it knows the secret");
                text(StatusCode::UNAUTHORIZED, "unauthorized\n")
            }
            // GitHub's test delivery when a webhook is made: it proves the secret, and asks
            // for nothing.
            Verdict::Ping => text(StatusCode::OK, "pong\n"),
            Verdict::Push => self.push(receiver),
        }
    }

    fn push(&self, receiver: Receiver) -> Response<Full<Bytes>> {
        match self.pushes.try_send(receiver) {
            Ok(()) => {}
            // A look is already asked for: it will see this push too.
            Err(mpsc::error::TrySendError::Full(_)) => {
                debug!("receiver {receiver}: a look is already asked for");
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                return text(StatusCode::SERVICE_UNAVAILABLE, "watch is stopping\n");
            }
        }
        text(StatusCode::ACCEPTED, "accepted: looking at the source\n")
    }
}

/// What a request proved.
enum Verdict {
    Refused,
    Ping,
    Push,
}

impl Verdict {
    fn of(proved: bool) -> Self {
        if proved { Self::Push } else { Self::Refused }
    }
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h [u8]> {
    headers.get(name).map(hyper::header::HeaderValue::as_bytes)
}

/// The body, at most [`MAX_BODY`] bytes of it within [`BODY_TIMEOUT`]; else the answer that
/// says why not.
async fn read<B>(body: B) -> Result<Bytes, Response<Full<Bytes>>>
where
    B: Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    match tokio::time::timeout(BODY_TIMEOUT, Limited::new(body, MAX_BODY).collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
        Ok(Err(e)) => {
            debug!("receiver: the body could not be read: {e}");
            Err(text(StatusCode::BAD_REQUEST, "the body could not be read\n"))
        }
        Err(_) => Err(text(StatusCode::REQUEST_TIMEOUT, "the body took too long\n")),
    }
}

fn too_large() -> Response<Full<Bytes>> {
    text(StatusCode::PAYLOAD_TOO_LARGE, "the body is larger than 1 MiB\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receivers(secret: Option<&str>) -> (Receivers, mpsc::Receiver<Receiver>) {
        let (tx, rx) = mpsc::channel(1);
        let secret = secret.map(|s| Secret::new(s.as_bytes().to_vec(), "test").unwrap());
        (Receivers::new(secret, tx), rx)
    }

    fn post(headers: &[(&str, &str)], body: &'static [u8]) -> Request<Full<Bytes>> {
        let mut request = Request::post("/hooks/x").body(Full::new(Bytes::from_static(body))).unwrap();
        for (name, value) in headers {
            request.headers_mut().insert(
                hyper::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        request
    }

    async fn answer(r: &Receivers, name: &str, request: Request<Full<Bytes>>) -> (u16, String) {
        let answer = r.receive(name, request).await;
        let status = answer.status().as_u16();
        let body = answer.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn a_signed_push_is_accepted_and_asks_for_one_look() {
        let (r, mut looks) = receivers(Some("s3cret"));
        let key = Secret::new(b"s3cret".to_vec(), "test").unwrap();
        let body = b"{\"ref\":\"refs/heads/main\"}";
        let github = post(&[("X-Hub-Signature-256", &key.sign(body))], body);
        assert_eq!(answer(&r, "github", github).await.0, 202);
        assert_eq!(looks.try_recv(), Ok(Receiver::GitHub));
        let generic = post(&[("X-Signature", &key.sign(body))], body);
        assert_eq!(answer(&r, "generic", generic).await.0, 202);
        // A second push before the loop took the first asks for nothing more.
        let gitlab = || post(&[("X-Gitlab-Token", "s3cret")], b"{}");
        assert_eq!(answer(&r, "gitlab", gitlab()).await.0, 202);
        assert_eq!(looks.try_recv(), Ok(Receiver::Generic));
        assert!(looks.try_recv().is_err());
        let ping = post(&[("X-Hub-Signature-256", &key.sign(b"{}")), ("X-GitHub-Event", "ping")], b"{}");
        assert_eq!(answer(&r, "github", ping).await, (200, "pong\n".to_owned()));
        assert!(looks.try_recv().is_err(), "a ping asks for no look");
    }

    #[tokio::test]
    async fn anything_unproven_is_refused_without_a_look_or_the_secret() {
        let (r, mut looks) = receivers(Some("s3cret"));
        let key = Secret::new(b"s3cret".to_vec(), "test").unwrap();
        let other = Secret::new(b"guess".to_vec(), "test").unwrap();
        let refused = [
            ("github", post(&[], b"{}")),
            ("github", post(&[("X-Hub-Signature-256", &other.sign(b"{}"))], b"{}")),
            ("github", post(&[("X-Hub-Signature-256", &key.sign(b"{}"))], b"{\"x\":1}")),
            // GitHub's header is not the generic one's, nor its old SHA-1 one.
            ("generic", post(&[("X-Hub-Signature-256", &key.sign(b"{}"))], b"{}")),
            ("github", post(&[("X-Hub-Signature", &key.sign(b"{}"))], b"{}")),
            ("gitlab", post(&[("X-Gitlab-Token", "s3cre")], b"{}")),
            ("gitlab", post(&[("X-Gitlab-Token", &key.sign(b"{}"))], b"{}")),
        ];
        for (name, request) in refused {
            let (status, body) = answer(&r, name, request).await;
            assert_eq!(status, 401, "{name}");
            assert!(!body.contains("s3cret"), "{body}");
        }
        assert!(looks.try_recv().is_err());

        let get = Request::get("/hooks/github").body(Full::new(Bytes::new())).unwrap();
        assert_eq!(answer(&r, "github", get).await.0, 405);
        assert_eq!(answer(&r, "bitbucket", post(&[], b"{}")).await.0, 404);
        let big = post(&[("Content-Length", "2000000")], b"{}");
        assert_eq!(answer(&r, "github", big).await.0, 413, "refused by its declared length");
        let huge: &'static [u8] = Vec::leak(vec![b' '; MAX_BODY + 1]);
        assert_eq!(answer(&r, "generic", post(&[], huge)).await.0, 413, "refused once past the bound");

        // No secret: no receivers at all, whatever is sent.
        let (none, mut looks) = receivers(None);
        let signed = post(&[("X-Hub-Signature-256", &key.sign(b"{}"))], b"{}");
        assert_eq!(answer(&none, "github", signed).await.0, 404);
        assert!(looks.try_recv().is_err());
    }
}
