//! Where `--notify` sends a [`Notice`], and in what form, as Flux's notification providers:
//! the generic JSON webhook, the same signed (`generic-hmac+`), Slack's incoming webhook
//! (`slack+`), and a commit status on GitHub (`github://OWNER/REPO`) or GitLab
//! (`gitlab://PROJECT`), set on the commit the rollout came from. Building a request is pure;
//! [`super::webhook`] sends it.

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, Uri};
use serde_json::json;

use super::signature::Secret;
use super::webhook::Notice;
use crate::style::count;

/// The API of github.com, and of gitlab.com, when `?api=` names no other.
const GITHUB_API: &str = "https://api.github.com";
const GITLAB_API: &str = "https://gitlab.com/api/v4";

/// GitHub cuts a status's description at 140 characters; GitLab keeps more, but a status is
/// not the place for a whole error.
const DESCRIPTION_MAX: usize = 140;

/// Where notifications go, and as what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `http(s)://...`: the [`Notice`] as JSON.
    Generic(Uri),
    /// `generic-hmac+http(s)://...`: the same, signed with the token (`X-Signature`).
    GenericHmac(Uri),
    /// `slack+http(s)://...`: an incoming webhook's `{"text": ...}`.
    Slack(Uri),
    /// `github://OWNER/REPO[?api=URL]`: commit statuses.
    GitHub { api: String, owner: String, repo: String },
    /// `gitlab://PROJECT[?api=URL]`: commit statuses; the project by its path or its id.
    GitLab { api: String, project: String },
}

/// Why a `--notify` URL is refused; never the URL itself, which may hold a token.
pub(super) type Refusal = &'static str;

impl Target {
    /// Read a `--notify` URL.
    pub fn parse(url: &str) -> Result<Self, Refusal> {
        if let Some(rest) = url.strip_prefix("github://") {
            let (path, api) = split_api(rest, GITHUB_API)?;
            // A repository with a slash in it is no name: OWNER/REPO/MORE is refused.
            let (owner, repo) = path
                .split_once('/')
                .filter(|(o, r)| name(o) && name(r))
                .ok_or("github:// names OWNER/REPO")?;
            return Ok(Self::GitHub { api, owner: owner.to_owned(), repo: repo.to_owned() });
        }
        if let Some(rest) = url.strip_prefix("gitlab://") {
            let (project, api) = split_api(rest, GITLAB_API)?;
            if !project.split('/').all(name) {
                return Err("gitlab:// names a project by its path (GROUP/PROJECT) or its id");
            }
            return Ok(Self::GitLab { api, project });
        }
        if let Some(rest) = url.strip_prefix("generic-hmac+") {
            return web(rest).map(Self::GenericHmac);
        }
        if let Some(rest) = url.strip_prefix("slack+") {
            return web(rest).map(Self::Slack);
        }
        web(url).map(Self::Generic)
    }

    /// Whether this target needs `--notify-token-file`.
    pub fn needs_token(&self) -> bool {
        !matches!(self, Self::Generic(_) | Self::Slack(_))
    }

    /// Whether this target sets commit statuses, which need a commit.
    pub(super) fn sets_statuses(&self) -> bool {
        matches!(self, Self::GitHub { .. } | Self::GitLab { .. })
    }

    /// The target as logs may show it: a commit status's repository, or a webhook's scheme
    /// and host, never the path or query that carry its token.
    pub fn shown(&self) -> String {
        let host = |url: &Uri| {
            format!("{}://{}", url.scheme_str().unwrap_or("http"), url.authority().map_or("", |a| a.host()))
        };
        match self {
            Self::Generic(url) => host(url),
            Self::GenericHmac(url) => format!("generic-hmac+{}", host(url)),
            Self::Slack(url) => format!("slack+{}", host(url)),
            Self::GitHub { owner, repo, .. } => format!("github://{owner}/{repo}"),
            Self::GitLab { project, .. } => format!("gitlab://{project}"),
        }
    }

    /// The request that tells `notice`, or `None` when this target has nothing to say of it
    /// (a commit status of something that is no commit's outcome, or of no commit).
    pub(super) fn request(
        &self,
        notice: &Notice,
        token: Option<&Secret>,
    ) -> Result<Option<Request<Full<Bytes>>>, Refusal> {
        let (url, body, headers): (String, Vec<u8>, Vec<(HeaderName, HeaderValue)>) = match self {
            Self::Generic(url) => (url.to_string(), to_json(notice)?, Vec::new()),
            Self::GenericHmac(url) => {
                let body = to_json(notice)?;
                let key = token.ok_or("no token to sign with")?;
                let signature = HeaderValue::try_from(key.sign(&body)).map_err(|_| "unreachable")?;
                (url.to_string(), body, vec![(HeaderName::from_static("x-signature"), signature)])
            }
            Self::Slack(url) => {
                (url.to_string(), to_json(&json!({ "text": slack_text(notice) }))?, Vec::new())
            }
            Self::GitHub { api, owner, repo } => {
                let (Some(sha), Some(state)) = (&notice.commit, github_state(notice.result)) else {
                    return Ok(None);
                };
                let body = json!({
                    "state": state,
                    "context": format!("poolctl/{}", notice.pool),
                    "description": description(notice),
                });
                let headers = vec![
                    (hyper::header::AUTHORIZATION, secret_header(b"Bearer ", token)?),
                    (hyper::header::ACCEPT, HeaderValue::from_static("application/vnd.github+json")),
                    (HeaderName::from_static("x-github-api-version"), HeaderValue::from_static("2022-11-28")),
                ];
                (format!("{api}/repos/{owner}/{repo}/statuses/{sha}"), to_json(&body)?, headers)
            }
            Self::GitLab { api, project } => {
                let (Some(sha), Some(state)) = (&notice.commit, gitlab_state(notice.result)) else {
                    return Ok(None);
                };
                let body = json!({
                    "state": state,
                    "name": format!("poolctl/{}", notice.pool),
                    "description": description(notice),
                });
                let headers = vec![(HeaderName::from_static("private-token"), secret_header(b"", token)?)];
                // A project's path is one segment of the API's path: its slashes encoded.
                let id = project.replace('/', "%2F");
                (format!("{api}/projects/{id}/statuses/{sha}"), to_json(&body)?, headers)
            }
        };
        let mut request = Request::post(url)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::USER_AGENT, concat!("poolctl/", env!("CARGO_PKG_VERSION")));
        for (name, value) in headers {
            request = request.header(name, value);
        }
        request.body(Full::new(Bytes::from(body))).map(Some).map_err(|_| "not a valid request URL")
    }
}

/// `PATH?api=URL` -> the path and the API's base URL (without a trailing `/`).
fn split_api(rest: &str, default: &str) -> Result<(String, String), Refusal> {
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let mut api = default.to_owned();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("api", url)) => {
                web(url)?;
                url.trim_end_matches('/').clone_into(&mut api);
            }
            _ => return Err("the only query it takes is ?api=URL"),
        }
    }
    Ok((path.trim_matches('/').to_owned(), api))
}

/// A name GitHub and GitLab accept in a path: an owner, a repository, a group, a project.
fn name(part: &str) -> bool {
    !part.is_empty()
        && part != "."
        && part != ".."
        && part.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// An `http://` or `https://` URL with a host.
fn web(url: &str) -> Result<Uri, Refusal> {
    let uri: Uri = url.parse().map_err(|_| "it does not parse")?;
    match uri.scheme_str() {
        Some("http" | "https") if uri.host().is_some() => Ok(uri),
        Some("http" | "https") => Err("no host"),
        _ => Err("the scheme is none of http, https, slack+https, generic-hmac+https, github, gitlab"),
    }
}

fn to_json(value: &impl serde::Serialize) -> Result<Vec<u8>, Refusal> {
    serde_json::to_vec(value).map_err(|_| "cannot encode the notification")
}

/// `scheme` and the token as a header value that logs of the HTTP stack do not show.
fn secret_header(scheme: &[u8], token: Option<&Secret>) -> Result<HeaderValue, Refusal> {
    let token = token.ok_or("no token (--notify-token-file)")?;
    let mut value = HeaderValue::from_bytes(&[scheme, token.as_bytes()].concat())
        .map_err(|_| "the token is not a header value")?;
    value.set_sensitive(true);
    Ok(value)
}

/// A commit status of GitHub's for a result; `None` for what is no outcome of the commit's
/// rollout (remediation held back concerns the instances' health).
fn github_state(result: &str) -> Option<&'static str> {
    match result {
        "started" | "canary_waiting" => Some("pending"),
        "succeeded" => Some("success"),
        "failed" | "degraded" | "rolling_back" => Some("failure"),
        _ => None,
    }
}

/// GitLab's word for the same.
fn gitlab_state(result: &str) -> Option<&'static str> {
    github_state(result).map(|state| match state {
        "failure" => "failed",
        other => other,
    })
}

/// A status's one line: what happened, and why when it failed.
fn description(notice: &Notice) -> String {
    let text = match (notice.result, &notice.error) {
        ("started", _) => "rolling out".to_owned(),
        ("succeeded", _) => format!("rolled out ({})", count(notice.steps_done, "step")),
        ("degraded", Some(why)) => format!("Degraded: {why}"),
        ("rolling_back", Some(why)) => format!("rolling back: {why}"),
        (_, Some(why)) => why.clone(),
        (result, None) => result.replace('_', " "),
    };
    if text.chars().count() <= DESCRIPTION_MAX {
        return text;
    }
    let cut: String = text.chars().take(DESCRIPTION_MAX - 1).collect();
    format!("{cut}…")
}

/// A chat line: the pool, what happened, the revision, and why.
fn slack_text(notice: &Notice) -> String {
    let what = match notice.result {
        "started" => "rollout started".to_owned(),
        "succeeded" => format!("rollout succeeded ({})", count(notice.steps_done, "step")),
        "failed" => "rollout failed".to_owned(),
        "degraded" => "is Degraded".to_owned(),
        "rolling_back" => "is rolling back".to_owned(),
        "remediation_held" => "holds back remediation".to_owned(),
        "canary_waiting" => "waits for its canaries' promotion".to_owned(),
        other => other.to_owned(),
    };
    let why = notice.error.as_deref().map_or_else(String::new, |e| format!(": {e}"));
    format!("poolctl: pool {} {what} at {}{why}", notice.pool, notice.revision)
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    fn notice(result: &'static str, commit: Option<&str>) -> Notice {
        let mut notice = Notice::new("workers", "0123456789ab", result);
        notice.commit = commit.map(str::to_owned);
        notice
    }

    async fn body(request: Request<Full<Bytes>>) -> serde_json::Value {
        serde_json::from_slice(&request.into_body().collect().await.unwrap().to_bytes()).unwrap()
    }

    #[test]
    fn every_provider_is_read_from_its_url_and_shown_without_its_token() {
        let github = Target::parse("github://acme/fleet").unwrap();
        let api = GITHUB_API.to_owned();
        assert_eq!(github, Target::GitHub { api, owner: "acme".into(), repo: "fleet".into() });
        let ghe = Target::parse("github://acme/fleet?api=https://ghe.example/api/v3/").unwrap();
        assert!(matches!(&ghe, Target::GitHub { api, .. } if api == "https://ghe.example/api/v3"));
        let gitlab = Target::parse("gitlab://group/sub/project?api=http://gitlab.local/api/v4").unwrap();
        assert_eq!(gitlab.shown(), "gitlab://group/sub/project");
        let slack = Target::parse("slack+https://hooks.slack.com/services/T0/B0/s3cret").unwrap();
        assert_eq!(slack.shown(), "slack+https://hooks.slack.com");
        let hmac = Target::parse("generic-hmac+http://127.0.0.1:9/s3cret").unwrap();
        assert_eq!(hmac.shown(), "generic-hmac+http://127.0.0.1");
        assert!(hmac.needs_token() && github.needs_token() && !slack.needs_token());
        for bad in [
            "github://acme",
            "github://acme/fleet/x",
            "github://acme/../x",
            "github://acme/fleet?token=s3cret",
            "github://acme/fleet?api=ftp://x",
            "gitlab://",
            "slack+ftp://hooks/s3cret",
            "s3cret",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_commit_status_is_set_on_the_full_commit_per_pool_with_the_token() {
        let target = Target::parse("github://acme/fleet?api=http://127.0.0.1:1").unwrap();
        let token = Secret::new(b"ghp_s3cret".to_vec(), "test").unwrap();
        let sha = "0123456789abcdef0123456789abcdef01234567";
        let request = target.request(&notice("started", Some(sha)), Some(&token)).unwrap().unwrap();
        assert_eq!(request.uri().to_string(), format!("http://127.0.0.1:1/repos/acme/fleet/statuses/{sha}"));
        let auth = request.headers().get("authorization").unwrap();
        assert!(auth.is_sensitive() && auth == "Bearer ghp_s3cret");
        let doc = body(request).await;
        assert_eq!(doc["state"], "pending");
        assert_eq!(doc["context"], "poolctl/workers");

        let mut failed = notice("failed", Some(sha));
        failed.error = Some("x".repeat(300));
        let doc = body(target.request(&failed, Some(&token)).unwrap().unwrap()).await;
        assert_eq!(doc["state"], "failure");
        assert_eq!(doc["description"].as_str().unwrap().chars().count(), DESCRIPTION_MAX);
        assert!(target.request(&notice("started", None), Some(&token)).unwrap().is_none(), "no commit");
        let held = notice("remediation_held", Some(sha));
        assert!(target.request(&held, Some(&token)).unwrap().is_none(), "not the commit's outcome");
        let mut canary = notice("canary_waiting", Some(sha));
        canary.error = Some("canary 1 of 3: waiting for promotion (`poolctl promote workers`)".into());
        let doc = body(target.request(&canary, Some(&token)).unwrap().unwrap()).await;
        assert_eq!(doc["state"], "pending", "the rollout is under way, held at its canaries");
        assert_eq!(doc["description"], "canary 1 of 3: waiting for promotion (`poolctl promote workers`)");

        let gitlab = Target::parse("gitlab://group/project").unwrap();
        let request = gitlab.request(&failed, Some(&token)).unwrap().unwrap();
        let url = format!("https://gitlab.com/api/v4/projects/group%2Fproject/statuses/{sha}");
        assert_eq!(request.uri().to_string(), url);
        assert_eq!(request.headers().get("private-token").unwrap(), "ghp_s3cret");
        let doc = body(request).await;
        assert_eq!((doc["state"].as_str(), doc["name"].as_str()), (Some("failed"), Some("poolctl/workers")));
    }

    #[tokio::test]
    async fn chat_gets_a_line_and_a_signed_webhook_its_signature() {
        let slack = Target::parse("slack+https://hooks.slack.com/services/T0").unwrap();
        let mut failed = notice("failed", None);
        failed.error = Some("step drain w-1 of pool workers failed".into());
        let doc = body(slack.request(&failed, None).unwrap().unwrap()).await;
        assert_eq!(
            doc["text"],
            "poolctl: pool workers rollout failed at 0123456789ab: step drain w-1 of pool workers failed"
        );

        let hmac = Target::parse("generic-hmac+https://hooks.example/x").unwrap();
        let key = Secret::new(b"k3y".to_vec(), "test").unwrap();
        let request = hmac.request(&failed, Some(&key)).unwrap().unwrap();
        let signature = request.headers().get("x-signature").unwrap().as_bytes().to_vec();
        let sent = request.into_body().collect().await.unwrap().to_bytes();
        assert!(key.verify(&sent, &signature));
        assert_eq!(serde_json::from_slice::<serde_json::Value>(&sent).unwrap()["result"], "failed");
    }
}
