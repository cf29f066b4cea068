//! What a failed Kubernetes call means, and the one line that says so.
//!
//! A call is worth another try only when the server did not answer (connection refused or
//! reset, a timeout) or answered that it could not serve now (5xx, 429). A TLS failure (a
//! certificate the kubeconfig does not trust, expired, for another name, or a client
//! certificate the server refuses), refused credentials (401) and every other 4xx are final:
//! retrying them only delays the error.
//!
//! hyper-util's errors print as `client error (Connect)`, with the cause in `source()`; and an
//! `io::Error` hides the error it wraps from `source()` (it skips to that error's own source).
//! [`cause_chain`] walks both, so the line names the real cause, once: the rustls error behind
//! a failed handshake, the OS error behind a refused connection.

use std::error::Error as StdError;
use std::io;

use rustls::{AlertDescription, CertificateError};

/// What retrying a failed call can change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
    /// No answer, or an answer that says to try again: retried within the step's deadline.
    Transient,
    /// The connection or the credentials were refused (TLS, 401): final, and about the
    /// kubeconfig rather than about the call.
    Rejected,
    /// A refusal of this call (4xx), or an answer that made no sense: final.
    Final,
}

pub(super) fn classify(e: &kube::Error) -> Class {
    match e {
        kube::Error::Api(s) if s.code == 401 => Class::Rejected,
        kube::Error::Api(s) if s.code == 429 || (500..600).contains(&s.code) => Class::Transient,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
            if tls_error(e).is_some() { Class::Rejected } else { Class::Transient }
        }
        // Any other answer (4xx), and what is not about the connection: a body that does not
        // decode, a request that cannot be built, credentials that cannot be had.
        _ => Class::Final,
    }
}

/// Whether the server's host refused the connection: nothing listens at its address (a kind
/// cluster that is stopped). Worth retrying in the middle of a rollout (an API server
/// restarting), not at the first contact, where it is the answer the user needs at once.
pub(super) fn refused(e: &kube::Error) -> bool {
    chain(e).into_iter().any(|c| {
        c.downcast_ref::<io::Error>().is_some_and(|io| io.kind() == io::ErrorKind::ConnectionRefused)
    })
}

/// Whether a failed first contact with a cluster is worth another try: a transient failure,
/// unless the connection was refused (see [`refused`]).
pub(super) fn retry_first_contact(e: &kube::Error) -> bool {
    classify(e) == Class::Transient && !refused(e)
}

/// Why the call failed, on one line: the server's own message for an API answer, the TLS
/// problem in words for a failed handshake, else the cause chain without its repetitions.
pub(super) fn reason(e: &kube::Error) -> String {
    if let kube::Error::Api(s) = e {
        let said = format!("{} ({} {})", s.message, s.code, s.reason);
        if s.code == 401 {
            return format!("the server refused the kubeconfig's credentials: {said}");
        }
        return said;
    }
    if let Some(tls) = tls_error(e) {
        return format!("TLS: {} ({tls})", tls_words(tls));
    }
    match e {
        // kube's own wrapper only repeats its source's text behind a prefix.
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
            e.source().map_or_else(|| e.to_string(), cause_chain)
        }
        other => cause_chain(other),
    }
}

/// `text` without the value of a `KUBERNETES_EXEC_INFO` it quotes: kube-rs quotes the command of
/// a failed credential plugin with its environment, which holds the cluster's whole CA, a line
/// of thousands of characters that hides the plugin's own words.
pub(crate) fn without_exec_info(text: &str) -> String {
    const VAR: &str = "KUBERNETES_EXEC_INFO=";
    let Some(start) = text.find(VAR).map(|i| i + VAR.len()) else { return text.to_owned() };
    // The value is a quoted JSON object, its own quotes escaped: it ends at the first `}"`.
    let end = text[start..].find("}\"").map_or(text.len(), |i| start + i + 2);
    format!("{}...{}", &text[..start], without_exec_info(&text[end..]))
}

/// Every message of the chain, joined with ": ", skipping one that an earlier message already
/// contains (an `io::Error` prints the error it wraps, for one), and without the value of a
/// `KUBERNETES_EXEC_INFO` (see [`without_exec_info`]).
pub(crate) fn cause_chain(e: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in chain(e) {
        let text = cause.to_string();
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    without_exec_info(&parts.join(": ").split_whitespace().collect::<Vec<_>>().join(" "))
}

/// The error and its causes, including the error inside an `io::Error`.
fn chain<'a>(e: &'a (dyn StdError + 'static)) -> Vec<&'a (dyn StdError + 'static)> {
    let mut out = Vec::new();
    let mut next = Some(e);
    while let Some(cause) = next {
        out.push(cause);
        next = match cause.downcast_ref::<io::Error>().and_then(io::Error::get_ref) {
            Some(inner) => Some(inner as &(dyn StdError + 'static)),
            None => cause.source(),
        };
        // A cycle would be a bug elsewhere; do not let it hang an error message.
        if out.len() > 32 {
            break;
        }
    }
    out
}

fn tls_error(e: &kube::Error) -> Option<&rustls::Error> {
    chain(e).into_iter().find_map(|c| c.downcast_ref::<rustls::Error>())
}

/// A failed handshake in the words of a kubeconfig's fields.
fn tls_words(e: &rustls::Error) -> &'static str {
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer => {
                "the server's certificate is not signed by the kubeconfig's certificate authority \
                 (certificate-authority-data)"
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "the server's certificate has expired"
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "the server's certificate is not valid yet"
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                "the server's certificate is not valid for the server address in the kubeconfig"
            }
            CertificateError::Revoked => "the server's certificate has been revoked",
            _ => "the server's certificate is not acceptable",
        },
        rustls::Error::AlertReceived(alert) => match alert {
            AlertDescription::BadCertificate
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRevoked
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateRequired
            | AlertDescription::AccessDenied => {
                "the server refused the client certificate (client-certificate-data)"
            }
            _ => "the server ended the handshake",
        },
        rustls::Error::NoCertificatesPresented => "the server presented no certificate",
        rustls::Error::InvalidMessage(_) => "the server does not speak TLS at that address",
        _ => "the handshake failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(inner: io::Error) -> kube::Error {
        kube::Error::Service(Box::new(inner))
    }

    fn api(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status::failure("nope", reason).with_code(code)))
    }

    #[test]
    fn answers_are_classified_by_status() {
        assert_eq!(classify(&api(429, "TooManyRequests")), Class::Transient);
        for code in [500, 502, 503, 504] {
            assert_eq!(classify(&api(code, "x")), Class::Transient, "{code}");
        }
        assert_eq!(classify(&api(401, "Unauthorized")), Class::Rejected);
        for code in [400, 403, 404, 409, 422] {
            assert_eq!(classify(&api(code, "x")), Class::Final, "{code}");
        }
    }

    #[test]
    fn no_answer_is_transient_and_tls_is_not() {
        let refused = service(io::Error::from(io::ErrorKind::ConnectionRefused));
        assert_eq!(classify(&refused), Class::Transient);
        let timed_out = kube::Error::ReadEvents(io::Error::from(io::ErrorKind::TimedOut));
        assert_eq!(classify(&timed_out), Class::Transient);

        let unknown_ca = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        let e = service(io::Error::new(io::ErrorKind::InvalidData, unknown_ca));
        assert_eq!(classify(&e), Class::Rejected);
        assert_eq!(
            reason(&e),
            "TLS: the server's certificate is not signed by the kubeconfig's certificate authority \
             (certificate-authority-data) (invalid peer certificate: UnknownIssuer)"
        );
        let alert = rustls::Error::AlertReceived(AlertDescription::UnknownCA);
        let e = service(io::Error::new(io::ErrorKind::InvalidData, alert));
        assert_eq!(classify(&e), Class::Rejected);
        assert!(reason(&e).contains("refused the client certificate"), "{}", reason(&e));
    }

    #[test]
    fn the_exec_info_a_failed_plugin_is_quoted_with_is_cut() {
        let ca = "Q".repeat(2000);
        let text = format!(
            "auth exec command 'KUBERNETES_EXEC_INFO=\"{{\\\"kind\\\":\\\"ExecCredential\\\",\\\"ca\\\":\\\"{ca}\\\"}}\" \"/bin/login\"' failed: token expired"
        );
        let cut = without_exec_info(&text);
        assert_eq!(cut, "auth exec command 'KUBERNETES_EXEC_INFO=... \"/bin/login\"' failed: token expired");
        assert_eq!(without_exec_info("no plugin here"), "no plugin here");
    }

    #[test]
    fn a_refused_connection_is_not_retried_at_first_contact_only() {
        let refused = service(io::Error::other(Outer(io::Error::from(io::ErrorKind::ConnectionRefused))));
        assert_eq!(classify(&refused), Class::Transient, "retried in the middle of a rollout");
        assert!(!retry_first_contact(&refused), "not at the first contact");
        let reset = service(io::Error::from(io::ErrorKind::ConnectionReset));
        assert!(retry_first_contact(&reset), "a connection that went away is worth another try");
        assert!(retry_first_contact(&api(503, "ServiceUnavailable")));
        assert!(!retry_first_contact(&api(403, "Forbidden")));
    }

    #[derive(Debug, thiserror::Error)]
    #[error("client error (Connect)")]
    struct Outer(#[source] io::Error);

    #[test]
    fn the_chain_is_printed_once_with_the_error_inside_an_io_error() {
        let inner = io::Error::new(io::ErrorKind::InvalidData, "deep cause");
        let e = service(io::Error::other(Outer(inner)));
        // io::Error prints its inner error, which would otherwise come twice.
        assert_eq!(reason(&e), "client error (Connect): deep cause");
    }
}
