//! Where desired state comes from: a file, a directory, or a commit of a Git repository.
//!
//! A source yields the raw pool files; [`crate::spec`] parses and validates them. Nothing here
//! talks to Docker or Kubernetes.
//!
//! [`SourceSpec::new`] classifies `--source`/`--ref`/`--path`; [`read_files`] yields the files
//! (`dir` reads the disk, `git` a commit's tree through a cached bare clone); [`load`] turns them
//! into a validated [`Desired`]; [`resolve`] is the cheap "has anything changed?" for `watch`.
//! File paths are relative to the source root (the `--source` directory or the repository root,
//! so they include `--path`), which is how spec errors name them.

mod dir;
mod git;

use std::fmt::Write as _;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

use crate::model::{Desired, DesiredPool, Origin};
use crate::spec::{self, SpecErrors};

/// How to find the source: what `--source`, `--ref` and `--path` asked for, classified, plus the
/// directory where Git sources are cached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceSpec {
    pub location: Location,
    /// Where bare clones of Git sources are kept (see [`default_cache_dir`]). An explicit field
    /// rather than an environment lookup at read time, so tests can each use their own.
    pub cache_dir: PathBuf,
}

/// The classified `--source`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A file or a directory on disk, read as it is now (working tree included).
    Path {
        /// The path as given.
        root: PathBuf,
        /// `--path`: a folder or file below `root` (`""` for `root` itself).
        path: String,
    },
    /// A Git repository, read from one commit.
    Git {
        /// The URL to fetch from. A local repository path is canonicalized, so that every way of
        /// spelling it shares one cache and one prune scope; a password in an URL is dropped, so
        /// that it never reaches the plan output or container labels.
        url: String,
        /// The URL as given, credentials included: used to fetch, and nowhere else.
        fetch_url: String,
        /// `--ref`; `None` means the remote's HEAD.
        reference: Option<String>,
        /// `--path` inside the repository (`""` for the root).
        path: String,
    },
}

/// One file of a source, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    /// Relative to the source root (the `--source` directory or the repository root), with `/`
    /// separators; for a single-file source, its file name.
    pub path_relative: String,
    pub text: String,
}

/// What identifies one state of a source, cheaply, so that `watch` can tell whether anything
/// changed since it last loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revision {
    /// The full commit id a Git source's ref resolves to (after a fetch).
    Commit(String),
    /// The SHA-256 of the names and contents of a file or directory source's pool files.
    Content(String),
}

/// Why a source could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The arguments do not describe a source.
    #[error("invalid source: {0}")]
    Invalid(String),
    /// A file or directory source, or its `--path`, does not exist.
    #[error("source not found: {}", path.display())]
    NotFound { path: PathBuf },
    /// A file or directory exists but could not be read.
    #[error("cannot read {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A pool file is not UTF-8 text.
    #[error("{file} is not UTF-8 text")]
    NotUtf8 { file: String },
    /// A local path given with `--ref` does not exist.
    #[error("Git repository not found: {}", path.display())]
    RepoNotFound { path: PathBuf },
    /// The local cache of Git sources could not be created or opened.
    #[error("cannot open the Git cache at {}", path.display())]
    Cache {
        path: PathBuf,
        #[source]
        source: GitError,
    },
    /// Fetching a Git source failed (unreachable, not a repository, authentication...).
    #[error("cannot fetch {url}")]
    Fetch {
        url: String,
        #[source]
        source: GitError,
    },
    /// `--ref` names no branch, tag or fetched commit.
    #[error("{url} has no branch, tag or commit `{reference}`")]
    RefNotFound { url: String, reference: String },
    /// `--path` does not exist in the commit that was read.
    #[error("path `{path}` not found in {url} at commit {commit}")]
    PathNotFound { url: String, commit: String, path: String },
    /// Any other failure while reading a Git source.
    #[error("cannot read {url}")]
    Git {
        url: String,
        #[source]
        source: GitError,
    },
    /// The files were read but their pools are invalid.
    #[error(transparent)]
    Spec(#[from] SpecErrors),
}

/// A libgit2 failure, shown by its message alone: git2's own `Display` appends the error's class
/// and code, which mean nothing to a user.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.message())]
pub struct GitError(pub git2::Error);

// Not `#[from]`: that would also make the git2 error this one's source, printing it twice.
impl From<git2::Error> for GitError {
    fn from(error: git2::Error) -> Self {
        Self(error)
    }
}

/// The cache directory for Git sources: `$POOLCTL_CACHE_DIR`, else `$XDG_CACHE_HOME/poolctl`,
/// else `$HOME/.cache/poolctl`, else (no home at all) `poolctl-cache` in the temp directory.
pub fn default_cache_dir() -> PathBuf {
    cache_dir_from(|name| std::env::var_os(name))
}

/// [`default_cache_dir`] over any environment, so that tests need not change the process's.
fn cache_dir_from(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> PathBuf {
    let var = |name| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = var("POOLCTL_CACHE_DIR") {
        return dir;
    }
    if let Some(xdg) = var("XDG_CACHE_HOME") {
        return xdg.join("poolctl");
    }
    if let Some(home) = var("HOME") {
        return home.join(".cache").join("poolctl");
    }
    std::env::temp_dir().join("poolctl-cache")
}

impl SourceSpec {
    /// Classify `--source`, `--ref` and `--path`, with [`default_cache_dir`] as the cache.
    ///
    /// A URL (`file://`, `https://`, `http://`, `ssh://`, `git://`, or scp-like `user@host:path`),
    /// or any path given with `--ref`, is a Git source. A plain path without `--ref` is a file or
    /// directory, read as it is on disk; `--path` then names a folder or file below that
    /// directory (so `--source repo --path pools` reads the working tree of `repo/pools`).
    ///
    /// Only a local Git repository is looked at here (to canonicalize it); everything else is
    /// checked when the source is read, so that a missing directory is reported by every read.
    pub fn new(source: &str, reference: Option<&str>, path: Option<&str>) -> Result<Self, SourceError> {
        if source.is_empty() {
            return Err(SourceError::Invalid("--source is empty".into()));
        }
        if reference.is_some_and(str::is_empty) {
            return Err(SourceError::Invalid("--ref is empty".into()));
        }
        let path = normalize_subpath(path.unwrap_or(""))?;
        let reference = reference.map(str::to_owned);
        let location = if is_url(source) {
            Location::Git { url: redact_url(source), fetch_url: source.to_owned(), reference, path }
        } else if reference.is_some() {
            let canonical = std::fs::canonicalize(source)
                .map_err(|_| SourceError::RepoNotFound { path: PathBuf::from(source) })?;
            let url = canonical.to_string_lossy().into_owned();
            Location::Git { fetch_url: url.clone(), url, reference, path }
        } else {
            Location::Path { root: PathBuf::from(source), path }
        };
        Ok(Self { location, cache_dir: default_cache_dir() })
    }

    /// The same source, cached in `cache_dir` instead.
    #[must_use]
    pub fn with_cache_dir(mut self, cache_dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = cache_dir.into();
        self
    }

    /// The file or directory to watch for changes, for sources on disk.
    pub fn local_path(&self) -> Option<PathBuf> {
        match &self.location {
            Location::Path { root, path } if path.is_empty() => Some(root.clone()),
            Location::Path { root, path } => Some(root.join(path)),
            Location::Git { .. } => None,
        }
    }
}

/// Read the raw pool files of a source: for a directory, every `*.yaml` and `*.yml` below it,
/// sorted by relative path, skipping hidden files and directories; for a file, that file; for
/// Git, the same from the tree of the resolved commit, after fetching.
pub fn read_files(spec: &SourceSpec) -> Result<(Origin, Vec<SourceFile>), SourceError> {
    match &spec.location {
        Location::Path { root, path } => dir::read(root, path),
        Location::Git { url, fetch_url, reference, path } => {
            git::read(&spec.cache_dir, &git::Remote { url, fetch_url }, reference.as_deref(), path)
        }
    }
}

/// Read, parse and validate a source. Every error of every file is reported, not just the first.
pub fn load(spec: &SourceSpec) -> Result<Desired, SourceError> {
    let (origin, files) = read_files(spec)?;
    desired_from_files(origin, &files)
}

/// Parse and validate files that were already read (see [`read_files`]).
pub fn desired_from_files(origin: Origin, files: &[SourceFile]) -> Result<Desired, SourceError> {
    let documents = spec::load_files(files.iter().map(|f| (f.path_relative.as_str(), f.text.as_str())))?;
    let pools = documents
        .into_iter()
        .map(|doc| DesiredPool {
            template_hash: spec::template_hash(&doc.pool.spec.template, &doc.pool.spec.bootstrap),
            file: doc.file,
            pool: doc.pool,
        })
        .collect();
    Ok(Desired { origin, pools })
}

/// What the source currently is, as cheaply as possible: for Git, a fetch and the commit id the
/// ref resolves to; on disk, a hash of the pool files.
pub fn resolve(spec: &SourceSpec) -> Result<Revision, SourceError> {
    match &spec.location {
        Location::Path { root, path } => Ok(content_revision(&dir::read(root, path)?.1)),
        Location::Git { url, fetch_url, reference, .. } => {
            git::resolve(&spec.cache_dir, &git::Remote { url, fetch_url }, reference.as_deref())
                .map(Revision::Commit)
        }
    }
}

/// One look at a source, fetching (or reading) it once: `None` when it is still `seen`, else
/// its revision and its raw pool files (see [`read_files`]), for [`desired_from_files`].
pub fn look(
    spec: &SourceSpec,
    seen: Option<&Revision>,
) -> Result<Option<(Revision, Origin, Vec<SourceFile>)>, SourceError> {
    match &spec.location {
        Location::Path { root, path } => {
            let (origin, files) = dir::read(root, path)?;
            let revision = content_revision(&files);
            Ok((seen != Some(&revision)).then_some((revision, origin, files)))
        }
        Location::Git { url, fetch_url, reference, path } => {
            let seen = match seen {
                Some(Revision::Commit(c)) => Some(c.as_str()),
                _ => None,
            };
            let remote = git::Remote { url, fetch_url };
            let read = git::look(&spec.cache_dir, &remote, reference.as_deref(), path, seen)?;
            Ok(read.map(|(origin, files)| {
                let commit = origin.commit().unwrap_or_default().to_owned();
                (Revision::Commit(commit), origin, files)
            }))
        }
    }
}

/// The revision of files on disk: a hash of their names and contents.
fn content_revision(files: &[SourceFile]) -> Revision {
    let mut hasher = Sha256::new();
    for file in files {
        // Lengths delimit the fields, so that moving bytes between a name and a text cannot
        // give the same hash.
        for field in [&file.path_relative, &file.text] {
            hasher.update((field.len() as u64).to_le_bytes());
            hasher.update(field.as_bytes());
        }
    }
    let hex = hasher.finalize().iter().fold(String::new(), |mut hex, b| {
        let _ = write!(hex, "{b:02x}");
        hex
    });
    Revision::Content(hex)
}

/// Whether `source` is a Git URL rather than a path.
fn is_url(source: &str) -> bool {
    const SCHEMES: [&str; 7] =
        ["file://", "https://", "http://", "ssh://", "git://", "git+ssh://", "ssh+git://"];
    if SCHEMES.iter().any(|s| source.starts_with(s)) {
        return true;
    }
    // scp-like syntax, as git reads it: `user@host:path`, with no `/` before the colon (which
    // tells it apart from a relative path such as `./a:b`).
    match source.split_once(':') {
        Some((host, rest)) => {
            !rest.is_empty()
                && !host.contains('/')
                && host.split_once('@').is_some_and(|(user, h)| !user.is_empty() && !h.is_empty())
        }
        None => false,
    }
}

/// Drop the password of an `scheme://user:password@host/...` URL: the URL is shown in plans and
/// stored in container labels.
fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) if userinfo.contains(':') => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            format!("{scheme}://{user}@{host}{tail}")
        }
        _ => url.to_owned(),
    }
}

/// `--path` as a clean relative path with `/` separators: `""` for the root; absolute paths and
/// `..` are refused, as they would leave the source.
fn normalize_subpath(path: &str) -> Result<String, SourceError> {
    if path.starts_with('/') {
        return Err(SourceError::Invalid(format!("--path `{path}` must be relative to the source root")));
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                return Err(SourceError::Invalid(format!(
                    "--path `{path}` must stay inside the source (no `..`)"
                )));
            }
            _ => parts.push(part),
        }
    }
    Ok(parts.join("/"))
}

/// Whether a file name is a pool file by its extension.
// Exactly `.yaml` and `.yml`, as `kubectl apply -f <dir>` reads a directory: a `.YAML` file is
// not picked up by either.
#[allow(clippy::case_sensitive_file_extension_comparisons)]
fn is_pool_file(name: &str) -> bool {
    name.ends_with(".yaml") || name.ends_with(".yml")
}

/// Hidden files and directories (`.git`, editors' `.#x.yaml` lock files) are never read.
fn is_hidden(name: &str) -> bool {
    name.starts_with('.')
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::path::Path;

    use super::*;

    fn cache_dir(vars: &[(&str, &str)]) -> PathBuf {
        cache_dir_from(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| OsString::from(v)))
    }

    #[test]
    fn cache_dir_prefers_poolctl_then_xdg_then_home() {
        let all = [("POOLCTL_CACHE_DIR", "/p"), ("XDG_CACHE_HOME", "/x"), ("HOME", "/h")];
        assert_eq!(cache_dir(&all), Path::new("/p"));
        assert_eq!(cache_dir(&all[1..]), Path::new("/x/poolctl"));
        assert_eq!(cache_dir(&all[2..]), Path::new("/h/.cache/poolctl"));
        // An empty variable counts as unset, as in the shell's `${VAR:-...}`.
        assert_eq!(cache_dir(&[("XDG_CACHE_HOME", ""), ("HOME", "/h")]), Path::new("/h/.cache/poolctl"));
        assert_eq!(cache_dir(&[]), std::env::temp_dir().join("poolctl-cache"));
    }

    #[test]
    fn each_url_has_its_own_clone_in_the_cache() {
        let a = git::cache_path(Path::new("/c"), "https://h/a.git");
        let b = git::cache_path(Path::new("/c"), "https://h/b.git");
        assert_ne!(a, b);
        assert!(a.starts_with("/c/git"));
        assert_eq!(a, git::cache_path(Path::new("/c"), "https://h/a.git"));
    }

    #[test]
    fn redact_url_drops_only_a_password() {
        assert_eq!(redact_url("https://u:p@h/r"), "https://u@h/r");
        assert_eq!(redact_url("https://u:p@h"), "https://u@h");
        assert_eq!(redact_url("https://u@h/r@x:y"), "https://u@h/r@x:y");
        assert_eq!(redact_url("ssh://git@h:22/r"), "ssh://git@h:22/r");
        assert_eq!(redact_url("git@h:r"), "git@h:r");
    }
}
