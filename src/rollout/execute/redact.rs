//! Output of a command run in a container, as it may be shown. A pool's secrets are handed to
//! its containers (`valueFrom` env, a join's token), so a bootstrap or join command may print
//! them, and what it printed goes on to progress, errors, logs, Kubernetes Events and webhooks:
//! every secret value the run knows is replaced by `(sensitive)` here, before the output reaches
//! any of them.

use super::join;
use crate::backend::CUT;
use crate::spec::{SENSITIVE, Secret, redact_all};

/// `output` (an [`crate::backend::ExecOutput::output`]) with each of `secrets`, and anything
/// shaped like a kubeadm bootstrap token, replaced by `(sensitive)`. Where the output was cut
/// to its end, a value cut short at its start is replaced too.
pub(super) fn output(secrets: &[&Secret], output: &str) -> String {
    let (cut, text) = output.strip_prefix(CUT).map_or(("", output), |rest| (CUT, rest));
    let text = redact_all(secrets, text, !cut.is_empty());
    format!("{cut}{}", bootstrap_tokens(&text))
}

/// `text` with everything shaped like a bootstrap token (not inside a longer word) replaced by
/// `(sensitive)`: for output that may quote a token poolctl did not hand out itself.
fn bootstrap_tokens(text: &str) -> String {
    const LEN: usize = 6 + 1 + 16;
    let bytes = text.as_bytes();
    let alnum = |i: usize| bytes.get(i).is_some_and(u8::is_ascii_alphanumeric);
    let mut out = String::with_capacity(text.len());
    let (mut copied, mut i) = (0, 0);
    while i + LEN <= bytes.len() {
        let starts_word = i == 0 || !alnum(i - 1);
        // All ASCII when it matches, so `i` and `i + LEN` are then character boundaries.
        if starts_word && !alnum(i + LEN) && join::is_bootstrap_token(&bytes[i..i + LEN]) {
            out.push_str(&text[copied..i]);
            out.push_str(SENSITIVE);
            i += LEN;
            copied = i;
        } else {
            i += 1;
        }
    }
    out.push_str(&text[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_secret_and_token_is_redacted_even_where_the_output_was_cut() {
        let (a, b) = (Secret::new("s3cret-value"), Secret::new("other"));
        let secrets = [&a, &b];
        assert_eq!(
            output(&secrets, "got s3cret-value and other, token abcdef.0123456789abcdef\n"),
            "got (sensitive) and (sensitive), token (sensitive)\n"
        );
        // Cut inside a value: the part of it left is hidden, the marker stays.
        assert_eq!(output(&secrets, &format!("{CUT}ret-value failed")), format!("{CUT}(sensitive) failed"));
        // Not cut: text that happens to end a value is nothing to hide.
        assert_eq!(output(&secrets, "ret-value failed"), "ret-value failed");
        assert_eq!(output(&[], "plain"), "plain");
    }

    #[test]
    fn tokens_in_output_are_redacted() {
        assert_eq!(
            bootstrap_tokens("using token abcdef.0123456789abcdef, host a.b.c, id abcdef"),
            "using token (sensitive), host a.b.c, id abcdef"
        );
        assert_eq!(bootstrap_tokens("x.abcdef.0123456789abcdef\n"), "x.(sensitive)\n");
        assert_eq!(bootstrap_tokens("xabcdef.0123456789abcdef"), "xabcdef.0123456789abcdef");
        assert_eq!(bootstrap_tokens("é abcdef.0123456789abcdefé"), "é (sensitive)é");
        assert_eq!(bootstrap_tokens(""), "");
    }
}
