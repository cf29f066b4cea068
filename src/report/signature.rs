//! The shared secrets of poolctl's HTTP edges: the one `watch --listen`'s receivers check a
//! push against, and the token `--notify` sends or signs with. HMAC-SHA256 in GitHub's form
//! (`sha256=<hex>`), checked in constant time, and a key that no `Debug`, log or error shows.

use std::io::Read as _;
use std::path::Path;
use std::sync::Arc;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The largest secret file: a token or a key, never a disk image by mistake.
const MAX_BYTES: u64 = 64 * 1024;

/// Why a secret could not be had. Names the file, never its content.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("cannot read {0}: {1}")]
    Read(String, std::io::Error),
    #[error("{0} is larger than {MAX_BYTES} bytes: not a token")]
    TooLarge(String),
    /// An empty key would sign with nothing, and let anyone in.
    #[error("{0} is empty")]
    Empty(String),
}

/// A shared secret. Cloning shares it; `Debug` says only that there is one.
#[derive(Clone)]
pub struct Secret(Arc<[u8]>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(redacted)")
    }
}

impl Secret {
    /// `bytes` less the line end and spaces a file or a variable often ends with (`echo x >
    /// file`, a Kubernetes Secret written by hand); `what` names it in the error.
    pub fn new(mut bytes: Vec<u8>, what: &str) -> Result<Self, SecretError> {
        while bytes.last().is_some_and(u8::is_ascii_whitespace) {
            bytes.pop();
        }
        if bytes.is_empty() {
            return Err(SecretError::Empty(what.to_owned()));
        }
        Ok(Self(bytes.into()))
    }

    /// The secret kept in `file` (`~` expanded).
    pub fn read(file: &Path) -> Result<Self, SecretError> {
        let path = crate::home::expand_home(&file.to_string_lossy());
        let what = format!("the secret file {}", path.display());
        let mut bytes = Vec::new();
        std::fs::File::open(&path)
            .and_then(|f| f.take(MAX_BYTES + 1).read_to_end(&mut bytes))
            .map_err(|e| SecretError::Read(what.clone(), e))?;
        if bytes.len() as u64 > MAX_BYTES {
            return Err(SecretError::TooLarge(what));
        }
        Self::new(bytes, &what)
    }

    /// The secret itself, for a header that carries it (an API token).
    pub(super) fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    fn mac(&self) -> Hmac<Sha256> {
        Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC accepts every key length")
    }

    /// `sha256=` and the hex HMAC-SHA256 of `body` under this key, as GitHub signs a webhook
    /// (`X-Hub-Signature-256`).
    pub fn sign(&self, body: &[u8]) -> String {
        let mut mac = self.mac();
        mac.update(body);
        format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
    }

    /// Whether `signature` (`sha256=<hex>`, as [`Secret::sign`] writes it) signs `body` under
    /// this key; compared in constant time, so that the answer's timing tells nothing of it.
    pub fn verify(&self, body: &[u8], signature: &[u8]) -> bool {
        let Some(hex) = signature.strip_prefix(b"sha256=") else { return false };
        let Ok(tag) = hex::decode(hex.trim_ascii()) else { return false };
        let mut mac = self.mac();
        mac.update(body);
        mac.verify_slice(&tag).is_ok()
    }

    /// Whether `token` is this secret (GitLab's `X-Gitlab-Token`): their digests compared in
    /// constant time, so that neither the bytes nor the length of the secret show in the timing.
    pub fn matches(&self, token: &[u8]) -> bool {
        Sha256::digest(token).ct_eq(&Sha256::digest(&self.0)).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> Secret {
        Secret::new(text.as_bytes().to_vec(), "test").unwrap()
    }

    #[test]
    fn a_signature_is_github_s_and_only_the_right_one_verifies() {
        // GitHub's own example (docs: "Validating webhook deliveries").
        let secret = key("It's a Secret to Everybody");
        let signed = secret.sign(b"Hello, World!");
        assert_eq!(signed, "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17");
        assert!(secret.verify(b"Hello, World!", signed.as_bytes()));
        assert!(!secret.verify(b"Hello, World?", signed.as_bytes()), "another body");
        assert!(!key("another").verify(b"Hello, World!", signed.as_bytes()), "another key");
        for bad in
            ["", "sha256=", "sha1=757107ea", "sha256=zz", &signed[..20], &signed.replace("sha256=", "")]
        {
            assert!(!secret.verify(b"Hello, World!", bad.as_bytes()), "{bad:?}");
        }
    }

    #[test]
    fn a_token_matches_only_itself_and_no_secret_is_shown_or_empty() {
        let secret = key("s3cret\n");
        assert!(secret.matches(b"s3cret"));
        assert!(!secret.matches(b"s3cre") && !secret.matches(b"s3cret ") && !secret.matches(b""));
        assert_eq!(format!("{secret:?}"), "Secret(redacted)");
        let empty = Secret::new(b" \n".to_vec(), "the variable X").unwrap_err();
        assert_eq!(empty.to_string(), "the variable X is empty");

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "s3cret\r\n").unwrap();
        assert!(Secret::read(&file).unwrap().matches(b"s3cret"));
        let missing = Secret::read(&dir.path().join("none")).unwrap_err().to_string();
        assert!(missing.starts_with("cannot read the secret file "), "{missing}");
    }
}
