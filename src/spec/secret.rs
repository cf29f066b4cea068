//! Sensitive values: environment values read from a file or poolctl's own environment
//! (`valueFrom`), and the [`Secret`] that holds such a value, or a join token, in memory.
//!
//! A secret is never printed, logged, stored in a label or hashed in clear: its `Debug` and
//! `Serialize` say `(sensitive)`, and the template hash and the `poolctl.dev/template` label
//! carry only a digest of it, so that a changed secret still replaces the pool's instances (as
//! Terraform plans a change of a sensitive value without showing it).

use std::fmt;

use schemars::JsonSchema;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

use super::locate::FieldPath;
use super::{Document, SpecErrors};

/// What a sensitive value shows wherever a value would be shown.
pub const SENSITIVE: &str = "(sensitive)";

/// Hex digits of a secret's digest in the canonical template: enough to tell two values apart,
/// too few to be worth more than the value's own entropy to anyone guessing.
const DIGEST_LEN: usize = 16;

/// A sensitive value, held in memory only. It can be read with [`Secret::expose`], and nothing
/// else shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself: only for the one place that must hand it on (the container's
    /// environment, a file in the container).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// A digest of the value, for the canonical template: `sha256:` and [`DIGEST_LEN`] hex
    /// digits, of the value behind a fixed prefix (so that it is no plain SHA-256 of the value
    /// that a table could look up).
    pub fn digest(&self) -> String {
        let mut hasher = Sha256::new();
        hasher.update(b"poolctl.dev/secret\0");
        hasher.update(self.0.as_bytes());
        format!("sha256:{}", super::hash::hex_prefix(&hasher.finalize(), DIGEST_LEN))
    }
}

/// `text` with every occurrence of every one of `secrets` replaced by `(sensitive)`: for the
/// output of a command that may echo a value it was handed. Occurrences that overlap (one value
/// inside or across another) are replaced as one, so that no part of either shows. With `cut`,
/// `text` is the end of a longer output, and a value cut short where it starts (its last bytes,
/// however few) is replaced too.
pub fn redact_all(secrets: &[&Secret], text: &str, cut: bool) -> String {
    // The byte ranges to hide, then merged: replacing one value at a time would break up an
    // overlapping one, which would then show in part.
    let mut hidden: Vec<(usize, usize)> = Vec::new();
    for secret in secrets.iter().map(|s| s.expose()).filter(|s| !s.is_empty()) {
        let mut from = 0;
        while let Some(at) = text[from..].find(secret) {
            let start = from + at;
            hidden.push((start, start + secret.len()));
            // The next one may overlap this one: look again from its next character.
            from = start + text[start..].chars().next().map_or(1, char::len_utf8);
        }
        if cut {
            let tail = secret.char_indices().skip(1).map(|(i, _)| &secret[i..]).find(|t| text.starts_with(t));
            if let Some(tail) = tail {
                hidden.push((0, tail.len()));
            }
        }
    }
    if hidden.is_empty() {
        return text.to_owned();
    }
    hidden.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut shown = 0;
    let mut ranges = hidden.into_iter().peekable();
    while let Some((start, mut end)) = ranges.next() {
        while let Some(&(next, next_end)) = ranges.peek()
            && next <= end
        {
            end = end.max(next_end);
            ranges.next();
        }
        out.push_str(&text[shown..start]);
        out.push_str(SENSITIVE);
        shown = end;
    }
    out.push_str(&text[shown..]);
    out
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret{SENSITIVE}")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(SENSITIVE)
    }
}

/// One environment value of the template: written in the pool file, or read from elsewhere.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum EnvValue {
    /// The value as written (and shown, and stored in the template label).
    Plain(String),
    /// `{valueFrom: ...}`: a value that never appears in the plan, logs or labels.
    Secret(SecretEnv),
}

impl EnvValue {
    pub fn plain(value: impl Into<String>) -> Self {
        Self::Plain(value.into())
    }

    /// A `valueFrom` whose value has not been read.
    pub fn is_unread(&self) -> bool {
        matches!(self, Self::Secret(SecretEnv { value: None, .. }))
    }

    /// The value to put in the canonical template (hash and label): the plain value, or a
    /// marker with the secret's digest (`(sensitive)` alone while it has not been read).
    pub fn canonical(&self) -> String {
        match self {
            Self::Plain(value) => value.clone(),
            Self::Secret(SecretEnv { value: Some(secret), .. }) => {
                format!("(sensitive {})", secret.digest())
            }
            Self::Secret(SecretEnv { value: None, .. }) => SENSITIVE.to_owned(),
        }
    }
}

/// A sensitive environment value: where to read it, and, once read, the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretEnv {
    pub value_from: ValueFrom,
    /// Read by the source when it loads the pool (never by `poolctl validate`, which stays
    /// offline).
    #[serde(skip)]
    #[schemars(skip)]
    pub value: Option<Secret>,
}

/// Where a sensitive value comes from: exactly one of the two.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("minProperties" = 1, "maxProperties" = 1))]
pub struct ValueFrom {
    /// A file on the machine that runs poolctl (`~/` is the home directory; a relative path is
    /// relative to poolctl's working directory, never to the pool file, whose repository must
    /// not hold the secret). One trailing newline is dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// An environment variable of poolctl's own process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
}

/// Give every `valueFrom` of `docs` its value, read by `read` (which does the I/O: the spec
/// does none). Every failure is reported, with its place in the pool file; a reason must not
/// quote the value.
pub fn read_secrets(
    docs: &mut [Document],
    read: impl Fn(&ValueFrom) -> Result<Secret, String>,
) -> Result<(), SpecErrors> {
    let mut errors = Vec::new();
    for doc in docs.iter_mut() {
        let mut failed = Vec::new();
        for (key, value) in &mut doc.pool.spec.template.env {
            if let EnvValue::Secret(secret) = value {
                match read(&secret.value_from) {
                    Ok(v) => secret.value = Some(v),
                    Err(why) => failed.push((key.clone(), why)),
                }
            }
        }
        for (key, why) in failed {
            let at = FieldPath::of("spec.template.env").key(&key).key("valueFrom");
            errors.push(doc.error_at(&at, why));
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(SpecErrors(errors)) }
}

/// Give every relative `node.kubeconfig` of `docs` the path `resolve` finds for it, from the
/// pool file's name (relative to the source root) and the path as written; `resolve` does the
/// I/O (the spec does none). A `~/`, `$HOME/` or absolute path is left as it is, and so is the
/// keyword `in-cluster`. Every failure is reported with its place in the pool file.
pub fn resolve_kubeconfigs(
    docs: &mut [Document],
    resolve: impl Fn(&str, &str) -> Result<String, String>,
) -> Result<(), SpecErrors> {
    let mut errors = Vec::new();
    for doc in docs.iter_mut() {
        let Some(node) = doc.pool.spec.node.as_mut() else { continue };
        // `in-cluster` is the keyword for the Pod's service account, not a file.
        let Some(written) = node.kubeconfig.as_deref().filter(|k| is_relative(k) && *k != super::IN_CLUSTER)
        else {
            continue;
        };
        match resolve(&doc.file, written) {
            Ok(path) => node.kubeconfig = Some(path),
            Err(why) => errors.push(doc.error_at(&FieldPath::of("spec.node.kubeconfig"), why)),
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(SpecErrors(errors)) }
}

/// Whether a path in a pool file is relative to the pool file: not absolute, not from home.
fn is_relative(path: &str) -> bool {
    !["/", "~", "$HOME", "${HOME}"].iter().any(|p| path.starts_with(p)) && !path.is_empty()
}

impl<'de> Deserialize<'de> for EnvValue {
    /// Read as a string first, so that a scalar keeps the text it was written with (`1.10`
    /// stays `1.10`); a mapping is a `valueFrom`.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EnvValueVisitor;

        impl<'de> Visitor<'de> for EnvValueVisitor {
            type Value = EnvValue;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, or {valueFrom: {file: PATH}} or {valueFrom: {env: NAME}}")
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<EnvValue, E> {
                Ok(EnvValue::plain(value))
            }

            fn visit_bool<E: de::Error>(self, value: bool) -> Result<EnvValue, E> {
                Ok(EnvValue::plain(value.to_string()))
            }

            fn visit_i64<E: de::Error>(self, value: i64) -> Result<EnvValue, E> {
                Ok(EnvValue::plain(value.to_string()))
            }

            fn visit_u64<E: de::Error>(self, value: u64) -> Result<EnvValue, E> {
                Ok(EnvValue::plain(value.to_string()))
            }

            fn visit_f64<E: de::Error>(self, value: f64) -> Result<EnvValue, E> {
                Ok(EnvValue::plain(value.to_string()))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<EnvValue, A::Error> {
                SecretEnv::deserialize(de::value::MapAccessDeserializer::new(map)).map(EnvValue::Secret)
            }
        }

        deserializer.deserialize_str(EnvValueVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_shows_nowhere() {
        let secret = Secret::new("hunter2");
        assert_eq!(format!("{secret:?}"), "Secret(sensitive)");
        assert_eq!(serde_json::to_string(&secret).unwrap(), "\"(sensitive)\"");
        assert!(!secret.digest().contains("hunter2"));
    }

    #[test]
    fn every_value_is_redacted_from_text_and_none_shows_in_part() {
        let (a, b, empty) = (Secret::new("hunter2"), Secret::new("ter2-and-more"), Secret::new(""));
        let redact = |text: &str| redact_all(&[&a, &b, &empty], text, false);
        assert_eq!(redact("pass=hunter2; again hunter2"), "pass=(sensitive); again (sensitive)");
        // Overlapping values go as one: neither shows in part.
        assert_eq!(redact("x hunter2-and-more y"), "x (sensitive) y");
        assert_eq!(redact("hunhunter2"), "hun(sensitive)");
        assert_eq!(redact("text"), "text");
        assert_eq!(redact(""), "");
        let aa = Secret::new("aa");
        assert_eq!(redact_all(&[&aa], "aaa b", false), "(sensitive) b");
        assert_eq!(redact_all(&[&Secret::new("é2")], "é2é2 ü", false), "(sensitive) ü");
        // The end of a longer output may start inside a value: its last bytes go too, but only
        // at the start, and only when the text was cut.
        assert_eq!(redact_all(&[&a], "nter2 failed", true), "(sensitive) failed");
        assert_eq!(redact_all(&[&a], "2 failed", true), "(sensitive) failed");
        assert_eq!(redact_all(&[&a], "nter2 failed", false), "nter2 failed");
        assert_eq!(redact_all(&[&a], "failed nter2", true), "failed nter2");
        assert_eq!(redact_all(&[&a], "hunter2 failed", true), "(sensitive) failed");
    }

    #[test]
    fn the_digest_tells_values_apart_and_stays_put() {
        let a = Secret::new("a");
        assert_eq!(a.digest(), Secret::new("a").digest());
        assert_ne!(a.digest(), Secret::new("b").digest());
        assert!(a.digest().starts_with("sha256:"));
        assert_eq!(a.digest().len(), "sha256:".len() + DIGEST_LEN);
    }

    #[test]
    fn env_values_read_plain_or_from_elsewhere() {
        let text = "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata: {name: p}\nspec:\n  replicas: 1\n  \
                    template:\n    image: i\n    env:\n      A: 1.10\n      B: {valueFrom: {file: /run/token}}\n      \
                    C: {valueFrom: {env: TOKEN}}\n";
        let docs = crate::spec::load_documents("p.yaml", text).unwrap();
        let env = &docs[0].pool.spec.template.env;
        // A scalar keeps the text it was written with.
        assert_eq!(env["A"], EnvValue::plain("1.10"));
        let from = |file: Option<&str>, env: Option<&str>| {
            EnvValue::Secret(SecretEnv {
                value_from: ValueFrom { file: file.map(str::to_owned), env: env.map(str::to_owned) },
                value: None,
            })
        };
        assert_eq!(env["B"], from(Some("/run/token"), None));
        assert_eq!(env["C"], from(None, Some("TOKEN")));
        // Written back, the value is not there to write.
        assert_eq!(serde_json::to_string(&env["C"]).unwrap(), r#"{"valueFrom":{"env":"TOKEN"}}"#);
        let mut read = env["C"].clone();
        if let EnvValue::Secret(s) = &mut read {
            s.value = Some(Secret::new("v"));
        }
        assert_eq!(serde_json::to_string(&read).unwrap(), r#"{"valueFrom":{"env":"TOKEN"}}"#);
        assert!(read.canonical().starts_with("(sensitive sha256:"), "{}", read.canonical());
        assert_eq!(env["C"].canonical(), SENSITIVE);
    }
}
