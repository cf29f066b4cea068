//! The version-skew preflight: the kubelet of a pool's new template must be one the pool's API
//! server supports, as Kubernetes' version skew policy says
//! (<https://kubernetes.io/releases/version-skew-policy/>): not newer than the API server, and
//! up to three minor versions older (two, for a kubelet older than 1.25). Checked before anything
//! is created, since a kubelet outside the skew registers a Node that misbehaves, or none.
//!
//! The kubelet's version is read from the template's image, without running it: its
//! [`labels::KUBELET_VERSION`] label if it has one, else its tag, as kind (`kindest/node:v1.32.0`)
//! and k3d (`rancher/k3s:v1.30.4-k3s1`) name their node images. An image that says neither
//! (`busybox:latest`, a `kind build node-image` left at `latest`) is not checked, which the debug
//! log (`-v`) says: poolctl starts no throw-away container to ask the image's kubelet. The API
//! server's version is its `/version`, read only when there is a kubelet version to compare.

use std::collections::BTreeMap;

use crate::backend::{Cluster, Containers, ServerVersion};
use crate::model::labels;

use super::{Executor, PreflightError};

/// A preflight check that `--skip-preflight` turns off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PreflightCheck {
    /// The new template's kubelet against the API server's version (see [`self`]).
    VersionSkew,
}

/// A Kubernetes version, as far as the skew policy reads it (major and minor), and as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct KubeVersion {
    pub(super) major: u32,
    pub(super) minor: u32,
    /// As written where it was read (`v1.30.4-k3s1`), with a leading `v`.
    pub(super) written: String,
}

impl std::fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.written)
    }
}

impl KubeVersion {
    /// The version an image reference's tag names: `v1.MINOR[.PATCH]`, maybe followed by a
    /// pre-release or build suffix (`v1.30.4-k3s1`; an image tag cannot hold k3s's own `+`).
    /// Only a `v` and a major version of 1 are taken for a kubelet's: `nginx:1.27` is no
    /// Kubernetes version, nor minikube's `kicbase:v0.0.44`.
    pub(super) fn from_tag(image: &str) -> Option<Self> {
        let tag = tag_of(image)?;
        let (major, minor) = numbers(tag.strip_prefix('v')?)?;
        (major == 1).then(|| Self { major, minor, written: tag.to_owned() })
    }

    /// The version a [`labels::KUBELET_VERSION`] label gives: `[v]MAJOR.MINOR[.PATCH]`, maybe
    /// with a suffix.
    pub(super) fn from_label(value: &str) -> Option<Self> {
        let text = value.trim();
        let bare = text.strip_prefix('v').unwrap_or(text);
        let (major, minor) = numbers(bare)?;
        (major >= 1).then(|| Self { major, minor, written: format!("v{bare}") })
    }

    /// The API server's version: its `gitVersion` (read as a label's value is), else its `major`
    /// and `minor` (`30+` on some distributions).
    pub(super) fn of_server(version: &ServerVersion) -> Option<Self> {
        Self::from_label(&version.git_version).or_else(|| {
            let number = |s: &str| digits(s.trim().trim_end_matches('+'));
            let (major, minor) = (number(&version.major)?, number(&version.minor)?);
            (major >= 1).then(|| Self { major, minor, written: format!("v{major}.{minor}") })
        })
    }
}

/// The tag of an image reference (`kindest/node:v1.32.0@sha256:...` has `v1.32.0`); `None`
/// without one. A registry's port (`localhost:5000/node`) is no tag.
fn tag_of(image: &str) -> Option<&str> {
    let name = image.split('@').next().unwrap_or_default();
    let last = name.rsplit('/').next().unwrap_or_default();
    last.split_once(':').map(|(_, tag)| tag)
}

/// `MAJOR.MINOR[.PATCH]`, then nothing, or a `-` or `+` and a suffix: the major and the minor.
fn numbers(text: &str) -> Option<(u32, u32)> {
    let end = text.find(['-', '+']).unwrap_or(text.len());
    let (core, suffix) = text.split_at(end);
    if suffix.len() == 1 {
        return None;
    }
    let mut parts = core.split('.');
    let (major, minor) = (digits(parts.next()?)?, digits(parts.next()?)?);
    if let Some(patch) = parts.next() {
        digits(patch)?;
    }
    parts.next().is_none().then_some((major, minor))
}

/// A number of ASCII digits only (`u32`'s parse also takes a `+`); `None` past `u32::MAX`.
fn digits(text: &str) -> Option<u32> {
    text.bytes().all(|b| b.is_ascii_digit()).then(|| text.parse().ok()).flatten()
}

/// How a kubelet's version is outside what its API server supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Skew {
    /// Newer than the API server.
    Newer,
    /// Older than the API server supports.
    TooOld,
}

/// How many minor versions older than the API server a kubelet may be: three, or two for a
/// kubelet older than 1.25 (the policy's exception since 1.28 widened it).
fn max_older(kubelet_minor: u32) -> u32 {
    if kubelet_minor < 25 { 2 } else { 3 }
}

/// Kubernetes' version skew policy for a kubelet: `None` when the API server supports it.
/// Patch versions do not count.
pub(super) fn kubelet_skew(kubelet: &KubeVersion, server: &KubeVersion) -> Option<Skew> {
    if (kubelet.major, kubelet.minor) > (server.major, server.minor) {
        return Some(Skew::Newer);
    }
    if kubelet.major < server.major || server.minor - kubelet.minor > max_older(kubelet.minor) {
        return Some(Skew::TooOld);
    }
    None
}

/// The oldest minor release a kubelet of `server`'s cluster may run (`v1.27` for `v1.30`).
fn oldest_supported(server: &KubeVersion) -> String {
    let oldest = (server.minor.saturating_sub(3)..=server.minor)
        .find(|&m| server.minor - m <= max_older(m))
        .unwrap_or(server.minor);
    format!("v{}.{oldest}", server.major)
}

/// The kubelet version `image` (named `name`) says, with its labels `labels`, and where it says
/// it: the label first (whoever built the image wrote it on purpose), else the tag.
fn kubelet_of(name: &str, labels: &BTreeMap<String, String>) -> Option<(KubeVersion, String)> {
    if let Some(value) = labels.get(labels::KUBELET_VERSION) {
        if let Some(version) = KubeVersion::from_label(value) {
            return Some((version, format!("from the label {} of image {name}", labels::KUBELET_VERSION)));
        }
        tracing::warn!(
            image = name,
            "the label {}={value:?} is no Kubernetes version; the version skew is judged by the image's tag",
            labels::KUBELET_VERSION
        );
    }
    KubeVersion::from_tag(name).map(|version| (version, format!("from the image tag {name}")))
}

impl<C: Containers, K: Cluster> Executor<'_, C, K> {
    /// Check that the kubelet of `pool`'s new instances is one its API server supports (see
    /// [`self`]); a pool of no cluster, or whose image says no kubelet version, passes.
    pub(super) async fn check_version_skew(&self, pool: &str) -> Result<(), PreflightError> {
        let Some(cluster) = self.clusters.get(pool) else { return Ok(()) };
        if self.skipped.contains(&PreflightCheck::VersionSkew) {
            tracing::debug!(pool, "version skew not checked: --skip-preflight version-skew");
            return Ok(());
        }
        let Ok(declared) = self.pool(pool) else { return Ok(()) };
        let template = &declared.pool.spec.template;
        let image = template.image.as_str();
        let labels = self
            .containers
            .image_labels(pool, template.image_ref())
            .await
            .map_err(|source| PreflightError::ImageLabels { image: image.into(), source })?;
        let Some((kubelet, from)) = kubelet_of(image, &labels) else {
            tracing::debug!(
                pool,
                image,
                "version skew not checked: the image names no kubelet version (no v1.MINOR tag, no {} label)",
                labels::KUBELET_VERSION
            );
            return Ok(());
        };
        let answer =
            cluster.server_version().await.map_err(|source| PreflightError::ServerVersionUnknown {
                pool: pool.into(),
                kubelet: kubelet.to_string(),
                from: from.clone(),
                source,
            })?;
        let Some(server) = KubeVersion::of_server(&answer) else {
            tracing::debug!(
                pool,
                "version skew not checked: the API server's version {answer:?} does not parse"
            );
            return Ok(());
        };
        let (pool, kubelet_text, server_text) = (pool.to_owned(), kubelet.to_string(), server.to_string());
        match kubelet_skew(&kubelet, &server) {
            None => {
                tracing::debug!(
                    pool,
                    "the kubelet {kubelet} ({from}) is within the skew of the API server {server}"
                );
                Ok(())
            }
            Some(Skew::Newer) => Err(PreflightError::KubeletNewer {
                pool,
                kubelet: kubelet_text,
                from,
                server: server_text,
                newest: format!("v{}.{}", server.major, server.minor),
            }),
            Some(Skew::TooOld) => Err(PreflightError::KubeletTooOld {
                pool,
                kubelet: kubelet_text,
                from,
                server: server_text,
                oldest: oldest_supported(&server),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minor(tag: &str) -> Option<(u32, u32)> {
        KubeVersion::from_tag(tag).map(|v| (v.major, v.minor))
    }

    fn v(text: &str) -> KubeVersion {
        KubeVersion::from_label(text).unwrap()
    }

    #[test]
    fn kind_and_k3s_tags_name_the_kubelet() {
        assert_eq!(minor("kindest/node:v1.32.0"), Some((1, 32)));
        assert_eq!(KubeVersion::from_tag("kindest/node:v1.32.0").unwrap().to_string(), "v1.32.0");
        let sha = "a".repeat(64);
        assert_eq!(minor(&format!("kindest/node:v1.31.2@sha256:{sha}")), Some((1, 31)));
        assert_eq!(minor("rancher/k3s:v1.30.4-k3s1"), Some((1, 30)));
        assert_eq!(minor("docker.io/rancher/k3s:v1.29.9-rc1-k3s1"), Some((1, 29)));
        assert_eq!(minor("localhost:5000/team/node:v1.28"), Some((1, 28)));
        assert_eq!(minor("poolctl-test-node-1-2:v1.29.7"), Some((1, 29)));
    }

    #[test]
    fn tags_without_a_kubelet_version_name_none() {
        for image in [
            "busybox:latest",
            "busybox",
            "poolctl-test-busybox:latest",
            "localhost:5000/node",
            "kindest/node",
            "nginx:1.27.0",
            "ubuntu:24.04",
            "gcr.io/k8s-minikube/kicbase:v0.0.44",
            "node:v2.0.0",
            "node:v1",
            "node:v1.",
            "node:v1.30.",
            "node:v1.30.1.2",
            "node:v1.30-",
            "node:v1.x.0",
            "node:v1.+30",
            "node:v1.-30",
            "node:v1.99999999999999999999",
            "node:V1.30.0",
            "node:",
            ":",
            "@",
            "",
            "node:v1.30.0\u{e9}",
        ] {
            assert_eq!(KubeVersion::from_tag(image), None, "{image}");
        }
        // Nothing panics, whatever the text.
        for text in ["v", "vv1.2", "1..2", "\u{0}", ":::@@@///", "v1.2+", "v1.2-+", "\u{1F600}:v1.30"] {
            let _ = KubeVersion::from_tag(text);
            let _ = KubeVersion::from_label(text);
        }
    }

    #[test]
    fn a_label_may_leave_the_v_out_and_is_shown_with_it() {
        assert_eq!(v("1.30.2").to_string(), "v1.30.2");
        assert_eq!(v(" v1.30.4+k3s1 ").to_string(), "v1.30.4+k3s1");
        assert_eq!((v("v1.30.4+k3s1").major, v("v1.30.4+k3s1").minor), (1, 30));
        assert_eq!(KubeVersion::from_label("latest"), None);
        assert_eq!(KubeVersion::from_label("0.0.44"), None);
    }

    #[test]
    fn the_servers_version_is_its_git_version_or_its_major_and_minor() {
        let server = |git: &str, major: &str, minor: &str| {
            KubeVersion::of_server(&ServerVersion {
                git_version: git.into(),
                major: major.into(),
                minor: minor.into(),
            })
        };
        assert_eq!(server("v1.30.2", "1", "30").unwrap().to_string(), "v1.30.2");
        assert_eq!(server("v1.30.2-eks-1234567", "1", "30+").unwrap().minor, 30);
        assert_eq!(server("", "1", "30+").unwrap().to_string(), "v1.30");
        assert_eq!(server("weird", "1", "29").unwrap().minor, 29);
        assert_eq!(server("", "", ""), None);
        assert_eq!(server("", "1", "x"), None);
    }

    #[test]
    fn a_kubelet_may_be_as_new_as_the_api_server_and_up_to_three_minors_older() {
        let server = v("v1.30.2");
        assert_eq!(kubelet_skew(&v("1.32.0"), &server), Some(Skew::Newer));
        assert_eq!(kubelet_skew(&v("1.31.0"), &server), Some(Skew::Newer));
        // Patch versions do not count: a kubelet of a newer patch is the same minor.
        assert_eq!(kubelet_skew(&v("1.30.9"), &server), None);
        assert_eq!(kubelet_skew(&v("1.30.0"), &server), None);
        assert_eq!(kubelet_skew(&v("1.29.7"), &server), None);
        assert_eq!(kubelet_skew(&v("1.27.0"), &server), None, "three minors older");
        assert_eq!(kubelet_skew(&v("1.26.0"), &server), Some(Skew::TooOld), "four minors older");
        assert_eq!(kubelet_skew(&v("2.0.0"), &server), Some(Skew::Newer));
        assert_eq!(kubelet_skew(&v("1.40.0"), &v("2.0.0")), Some(Skew::TooOld));
    }

    #[test]
    fn a_kubelet_older_than_1_25_may_be_only_two_minors_older() {
        assert_eq!(kubelet_skew(&v("1.25.0"), &v("1.28.0")), None);
        assert_eq!(kubelet_skew(&v("1.24.0"), &v("1.27.0")), Some(Skew::TooOld));
        assert_eq!(kubelet_skew(&v("1.24.0"), &v("1.26.0")), None);
        assert_eq!(kubelet_skew(&v("1.22.0"), &v("1.24.0")), None);
        assert_eq!(kubelet_skew(&v("1.21.0"), &v("1.24.0")), Some(Skew::TooOld));
    }

    #[test]
    fn the_way_out_names_the_oldest_supported_minor() {
        assert_eq!(oldest_supported(&v("1.30.2")), "v1.27");
        assert_eq!(oldest_supported(&v("1.28.0")), "v1.25");
        assert_eq!(oldest_supported(&v("1.27.0")), "v1.25");
        assert_eq!(oldest_supported(&v("1.26.0")), "v1.24");
        assert_eq!(oldest_supported(&v("1.1.0")), "v1.0");
    }

    #[test]
    fn the_label_comes_before_the_tag() {
        let label = |value: &str| BTreeMap::from([(labels::KUBELET_VERSION.to_owned(), value.to_owned())]);
        let (version, from) = kubelet_of("my/node:v1.32.0", &label("v1.29.1")).unwrap();
        assert_eq!(version.to_string(), "v1.29.1");
        assert_eq!(from, "from the label poolctl.dev/kubelet-version of image my/node:v1.32.0");
        let (version, from) = kubelet_of("my/node:v1.32.0", &BTreeMap::new()).unwrap();
        assert_eq!(
            (version.to_string(), from.as_str()),
            ("v1.32.0".to_owned(), "from the image tag my/node:v1.32.0")
        );
        // A label that is no version leaves the tag to say.
        assert_eq!(kubelet_of("my/node:v1.32.0", &label("soon")).unwrap().0.minor, 32);
        assert_eq!(kubelet_of("my/node:latest", &label("soon")), None);
        assert_eq!(kubelet_of("my/node:latest", &BTreeMap::new()), None);
    }
}
