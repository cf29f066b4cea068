//! Where desired state comes from: a file, a directory, or a commit of a Git repository.
//!
//! A source yields the raw pool files; [`crate::spec`] parses and validates them. Nothing here
//! talks to Docker or Kubernetes.
//!
//! [`SourceSpec::new`] classifies `--source`/`--ref`/`--path`; [`read_files`] yields the files
//! (`dir` reads the disk, `git` a commit's tree through a cached bare clone); [`load`] turns them
//! into a validated [`Desired`]; [`look`] is the cheap "has anything changed?" for `watch`.
//! File paths are relative to the source root (the `--source` directory or the repository root,
//! so they include `--path`), which is how spec errors name them.

mod dir;
mod git;
mod secret;

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::model::{Desired, DesiredPool, Origin};
use crate::spec::{self, SpecErrors};

/// How to find the source: what `--source`, `--ref` and `--path` asked for, classified, plus the
/// directory where Git sources are cached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceSpec {
    pub location: Location,
    /// `--allow-empty`: a source with no pool document is a valid, empty desired state rather
    /// than an error.
    pub allow_empty: bool,
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
        /// spelling it shares one cache and one prune scope; a URL's user info (user name and
        /// password, either of which may be a token) is dropped (see [`redact`]), so that it
        /// never reaches the plan, a message, an Event or a container label.
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

/// Why a source could not be read. Every path, URL and name in a message is shown with a URL's
/// user info dropped and its control characters escaped (see [`shown`]): they come from the
/// command line or from a repository.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The arguments do not describe a source.
    #[error("invalid source: {}", shown(.0))]
    Invalid(String),
    /// A file or directory source, or its `--path`, does not exist.
    #[error("source not found: {}", shown_path(path))]
    NotFound { path: PathBuf },
    /// The source is neither a regular file nor a directory (a FIFO, a device, a socket): it is
    /// refused without being opened, since reading a FIFO would wait for a writer for ever.
    #[error("{} is {kind}, not a pool file or a directory", shown_path(path))]
    NotAFile { path: PathBuf, kind: &'static str },
    /// A pool file is larger than a pool file may be.
    #[error(
        "{} is {bytes} bytes long; pool files may have at most {} bytes",
        shown_path(path),
        spec::MAX_FILE_BYTES
    )]
    TooLarge { path: PathBuf, bytes: u64 },
    /// A file or directory exists but could not be read.
    #[error("cannot read {}", shown_path(path))]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A pool file is not UTF-8 text.
    #[error(
        "{} is not UTF-8 text: line {line}, byte {column} (byte {offset} of the file) is 0x{byte:02x}; save it as UTF-8",
        shown(file)
    )]
    NotUtf8 {
        file: String,
        /// 1-based.
        line: usize,
        /// 1-based, counted in bytes from the start of the line.
        column: usize,
        /// 0-based, from the start of the file.
        offset: usize,
        /// The first byte that is not UTF-8.
        byte: u8,
    },
    /// A local path given with `--ref` does not exist.
    #[error("Git repository not found: {}", shown_path(path))]
    RepoNotFound { path: PathBuf },
    /// The local cache of Git sources could not be created or opened.
    #[error("cannot open the Git cache at {}", shown_path(path))]
    Cache {
        path: PathBuf,
        #[source]
        source: GitError,
    },
    /// Fetching a Git source failed (unreachable, not a repository, authentication...).
    #[error("cannot fetch {}", shown(url))]
    Fetch {
        url: String,
        #[source]
        source: GitError,
    },
    /// `--ref` names no branch, tag or fetched commit.
    #[error("{} has no branch, tag or commit `{}`", shown(url), shown(reference))]
    RefNotFound { url: String, reference: String },
    /// No `--ref` was given and the repository's HEAD names no commit: the repository is empty,
    /// or its HEAD names a branch that does not exist.
    #[error("no ref could be resolved in {}: {}", shown(url), no_head_advice(branches))]
    NoHead {
        url: String,
        /// The branches the repository has (empty for an empty repository).
        branches: Vec<String>,
    },
    /// `--path` does not exist in the commit that was read.
    #[error("path `{}` not found in {} at commit {commit}", shown(path), shown(url))]
    PathNotFound { url: String, commit: String, path: String },
    /// Any other failure while reading a Git source.
    #[error("cannot read {}", shown(url))]
    Git {
        url: String,
        #[source]
        source: GitError,
    },
    /// The source was read, and holds no pool document. Refused unless `--allow-empty`: a typo
    /// in `--path` or the wrong folder must not read as "nothing to do", nor let `--prune`
    /// retire every pool.
    #[error(
        "no pool found in {}: {}; check --source and --path, or pass --allow-empty if the source \
         is empty on purpose",
        shown(origin),
        what_was_read(*files)
    )]
    NoPools { origin: String, files: usize },
    /// The files were read but their pools are invalid.
    #[error(transparent)]
    Spec(#[from] SpecErrors),
}

fn what_was_read(files: usize) -> String {
    let pool = format!("`apiVersion: {}` and `kind: {}`", spec::API_VERSION, spec::KIND_POOL);
    match files {
        0 => "it has no .yaml or .yml file".to_owned(),
        1 => format!("its one YAML file has no document with {pool}"),
        n => format!("none of its {n} YAML files has a document with {pool}"),
    }
}

fn no_head_advice(branches: &[String]) -> String {
    if branches.is_empty() {
        "the repository is empty (it has no branch); pass --ref once it has a commit".to_owned()
    } else {
        let shown: Vec<String> = branches.iter().take(10).map(|b| shown(b)).collect();
        let more = if branches.len() > 10 { ", ..." } else { "" };
        format!(
            "its HEAD names no commit (a branch that does not exist); pass --ref with one of its branches \
             ({}{more}), a tag or a commit",
            shown.join(", ")
        )
    }
}

/// Text from the command line or a repository as it may be printed: a URL's user info dropped
/// (see [`redact`]), control characters escaped.
pub fn shown(text: &str) -> String {
    spec::escape_controls(&redact(text)).into_owned()
}

fn shown_path(path: &std::path::Path) -> String {
    shown(&path.to_string_lossy())
}

/// A libgit2 failure, shown by its message alone: git2's own `Display` appends the error's class
/// and code, which mean nothing to a user. libgit2 may quote the URL it was given, credentials
/// included, so the message is shown through [`shown`].
#[derive(Debug, thiserror::Error)]
#[error("{}", shown(.0.message()))]
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
    var("POOLCTL_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|xdg| xdg.join("poolctl")))
        .or_else(|| var("HOME").map(|home| home.join(".cache").join("poolctl")))
        .unwrap_or_else(|| std::env::temp_dir().join("poolctl-cache"))
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
            Location::Git { url: redact(source).into_owned(), fetch_url: source.to_owned(), reference, path }
        } else if reference.is_some() {
            let canonical = std::fs::canonicalize(source)
                .map_err(|_| SourceError::RepoNotFound { path: PathBuf::from(source) })?;
            let url = canonical.to_string_lossy().into_owned();
            Location::Git { fetch_url: url.clone(), url, reference, path }
        } else {
            Location::Path { root: PathBuf::from(source), path }
        };
        Ok(Self { location, allow_empty: false, cache_dir: default_cache_dir() })
    }

    /// The Git source an [`Origin::Git`] names (a saved plan's), read again from its URL as
    /// shown: with no user info, so the credential helper or the SSH agent (as the user `git`)
    /// must give what a credential in the URL gave. Not classified as `--source` is: an
    /// scp-like URL without its user (`host:path`) would read as a path.
    pub fn git(url: &str, reference: &str, path: &str) -> Result<Self, SourceError> {
        if reference.is_empty() {
            return Err(SourceError::Invalid("--ref is empty".into()));
        }
        let location = Location::Git {
            url: redact(url).into_owned(),
            fetch_url: url.to_owned(),
            reference: Some(reference.to_owned()),
            path: normalize_subpath(path)?,
        };
        Ok(Self { location, allow_empty: false, cache_dir: default_cache_dir() })
    }

    /// The same source, cached in `cache_dir` instead.
    #[must_use]
    pub fn with_cache_dir(mut self, cache_dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = cache_dir.into();
        self
    }

    /// The same source, with `--allow-empty` as given.
    #[must_use]
    pub fn allowing_empty(mut self, allow_empty: bool) -> Self {
        self.allow_empty = allow_empty;
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

/// Read, parse and validate a source, and read the sensitive values (`valueFrom`) its pools
/// name. Every error of every file is reported, not just the first. A source without any pool
/// is refused unless [`SourceSpec::allow_empty`].
pub fn load(spec: &SourceSpec) -> Result<Desired, SourceError> {
    let (origin, files) = read_files(spec)?;
    not_empty(spec, desired_from_files(spec, origin, &files)?, files.len())
}

/// Refuse a source without any pool (the wrong folder, a typo in `--path`), unless allowed.
pub fn not_empty(spec: &SourceSpec, desired: Desired, files: usize) -> Result<Desired, SourceError> {
    if desired.pools.is_empty() && !spec.allow_empty {
        return Err(SourceError::NoPools { origin: desired.origin.to_string(), files });
    }
    Ok(desired)
}

/// [`load`] without reading the sensitive values, for `poolctl validate`, which runs where they
/// are not (a repository's CI). The template hash of a pool with some is then not the one a plan
/// computes ([`DesiredPool::reads_secrets`] says which).
pub fn load_offline(spec: &SourceSpec) -> Result<Desired, SourceError> {
    let (origin, files) = read_files(spec)?;
    not_empty(spec, desired(spec, origin, &files, false)?, files.len())
}

/// Parse and validate files of `spec` that were already read (see [`read_files`]), read their
/// sensitive values, and find their relative kubeconfigs.
pub fn desired_from_files(
    spec: &SourceSpec,
    origin: Origin,
    files: &[SourceFile],
) -> Result<Desired, SourceError> {
    desired(spec, origin, files, true)
}

/// `online`: read what lives outside the pool files (sensitive values, kubeconfigs in a Git
/// source); [`load_offline`] does not.
fn desired(
    spec: &SourceSpec,
    origin: Origin,
    files: &[SourceFile],
    online: bool,
) -> Result<Desired, SourceError> {
    let mut documents = spec::load_files(files.iter().map(|f| (f.path_relative.as_str(), f.text.as_str())))?;
    spec::resolve_kubeconfigs(&mut documents, |file, written| {
        kubeconfig_path(spec, &origin, file, written, online)
    })?;
    if online {
        spec::read_secrets(&mut documents, secret::read)?;
    }
    let pools = documents
        .into_iter()
        .map(|doc| DesiredPool {
            template_hash: spec::template_hash(&doc.pool.spec),
            file: doc.file,
            pool: doc.pool,
            copied_from: None,
        })
        .collect();
    Ok(Desired { origin, pools })
}

/// Where the relative `node.kubeconfig` `written` of the pool file `file` (relative to the source
/// root) is: beside the pool file, as kustomize resolves paths, never the working directory (in
/// a GitOps repository the pool file's directory is the one stable place). In a Git source it is
/// read from the same commit and kept in the cache, by content. Offline, a Git source's is left
/// as written, and a directory's is not checked.
fn kubeconfig_path(
    spec: &SourceSpec,
    origin: &Origin,
    file: &str,
    written: &str,
    online: bool,
) -> Result<String, String> {
    const RELATIVE: &str = "a relative kubeconfig is read from the pool file's directory";
    match &spec.location {
        Location::Path { root, .. } => {
            let root = std::path::absolute(root).map_err(|e| format!("cannot resolve {written}: {e}"))?;
            // A single-file source is its own root; a directory's files are named from it.
            let pool_file = if root.is_file() { root } else { root.join(file) };
            let path = lexical(&pool_file.parent().unwrap_or(Path::new("/")).join(written));
            if online && !path.exists() {
                return Err(format!("{} does not exist ({RELATIVE})", path.display()));
            }
            Ok(path.display().to_string())
        }
        Location::Git { .. } if !online => Ok(written.to_owned()),
        Location::Git { url, .. } => {
            let commit = origin.commit().unwrap_or_default();
            let short = commit.get(..7).unwrap_or(commit);
            // Named from the repository root, as the pool file is.
            let joined = Path::new(file).parent().unwrap_or(Path::new("")).join(written);
            if escapes(&joined) {
                return Err(format!("{written} points outside the repository ({RELATIVE})"));
            }
            let in_repo = lexical(&joined).to_string_lossy().into_owned();
            git::file_at(&spec.cache_dir, url, commit, &in_repo)
                .map(|path| path.display().to_string())
                .map_err(|why| format!("{in_repo} {why} in commit {short} ({RELATIVE}, in the repository)"))
        }
    }
}

/// `path` with its `.` and `..` components resolved by name, as kustomize does: no symlink is
/// followed, and nothing goes above the root.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Whether a relative `path` climbs above where it starts.
fn escapes(path: &Path) -> bool {
    let mut depth = 0i32;
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => depth -= 1,
            std::path::Component::Normal(_) => depth += 1,
            _ => {}
        }
        if depth < 0 {
            return true;
        }
    }
    false
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
    Revision::Content(hex::encode(hasher.finalize()))
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
    source.split_once(':').is_some_and(|(host, rest)| {
        !rest.is_empty()
            && !host.contains('/')
            && host.split_once('@').is_some_and(|(user, h)| !user.is_empty() && !h.is_empty())
    })
}

/// `text` with the user info of every URL in it dropped, user name and password alike, as git
/// drops it from the URLs it prints (`transport_anonymize_url`): `scheme://user:password@host`
/// anywhere (libgit2 messages may quote URLs) becomes `scheme://host`, and an scp-like
/// `user@host:path` at its start (what a user types for an SSH remote) becomes `host:path`. A
/// token may be the user name (`https://<token>@github.com/...`, a form GitHub documents), so
/// no part of the user info is kept. The URL of a Git source is kept this way, since it is shown
/// in plans and Events and stored in container labels.
pub fn redact(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains('@') {
        return std::borrow::Cow::Borrowed(text);
    }
    // Where an authority (`[userinfo@]host[:port]`) ends: at its path, or at what quotes or
    // ends a URL in a message. Not at `?` or `#`, which RFC 3986 ends it at too: a password may
    // hold them unencoded, and must not show for that.
    let authority_end = |text: &str| {
        text.find(|c: char| matches!(c, '/' | '\'' | '"') || c.is_whitespace()).unwrap_or(text.len())
    };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    // The start of the text is an scp-like address when it has no scheme: `user@host:path`,
    // with no `/` before the `@`, so that local paths are never changed.
    let scheme = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c));
    if !rest.find("://").is_some_and(|i| scheme(&rest[..i])) {
        let authority = &rest[..authority_end(rest)];
        if let Some((userinfo, host)) = authority.rsplit_once('@')
            && host.contains(':')
        {
            rest = &rest[userinfo.len() + 1..];
        }
    }
    while let Some(i) = rest.find("://") {
        out.push_str(&rest[..i + 3]);
        rest = &rest[i + 3..];
        if let Some((userinfo, _)) = rest[..authority_end(rest)].rsplit_once('@') {
            rest = &rest[userinfo.len() + 1..];
        }
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}

/// A scope label (see [`Origin::scope`]) as this version writes it: an earlier poolctl kept the
/// user name of a Git URL in it, which is now dropped (see [`redact`]). Read this way, the
/// containers it made still count as their source's (not another's, which would leave them
/// alone), and the user name, which may be a token, is never shown.
pub fn scope_as_written_now(label: &str) -> String {
    label.strip_prefix("git:").map_or_else(|| label.to_owned(), |rest| format!("git:{}", redact(rest)))
}

/// `bytes` as text, or where they stop being UTF-8.
fn utf8_text(bytes: Vec<u8>, file: impl FnOnce() -> String) -> Result<String, SourceError> {
    String::from_utf8(bytes).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        let before = &bytes[..offset];
        let line = before.split(|&b| b == b'\n').count();
        let line_start = before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        SourceError::NotUtf8 {
            file: file(),
            line,
            column: offset - line_start + 1,
            offset,
            byte: bytes[offset],
        }
    })
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
    fn redact_drops_the_whole_user_info() {
        // A token as the user name, as GitHub documents it, is a secret like a password.
        assert_eq!(redact("https://ghp_TOKEN@github.com/o/fleet.git"), "https://github.com/o/fleet.git");
        assert_eq!(redact("https://u:p@h/r"), "https://h/r");
        assert_eq!(redact("https://u:p@h"), "https://h");
        assert_eq!(redact("https://@h/r"), "https://h/r");
        assert_eq!(redact("https://u:p@h?x"), "https://h?x");
        // Characters a password should encode, and may not have.
        assert_eq!(redact("https://u:p#?q@h/r"), "https://h/r");
        // The last `@` of the authority ends the user info; one in the path is no user info.
        assert_eq!(redact("https://u@x:p@h/r"), "https://h/r");
        assert_eq!(redact("https://u@h/r@x:y"), "https://h/r@x:y");
        assert_eq!(redact("https://h/r@x:y"), "https://h/r@x:y");
        assert_eq!(redact("https://u:p@[::1]:80/r"), "https://[::1]:80/r");
        // SSH user names go too, as git drops them: the issue's rule has no exception, and
        // poolctl logs in as `git` when a URL names no user.
        assert_eq!(redact("ssh://git@h:22/r"), "ssh://h:22/r");
        assert_eq!(redact("git@h:r"), "h:r");
        assert_eq!(redact("git@h:o/r.git"), "h:o/r.git");
        assert_eq!(redact("u:s3cret@h:r"), "h:r");
        // Anywhere in a message, as libgit2 may quote it.
        assert_eq!(
            redact("failed for 'https://u:p@h/r' and http://v@g and \"ssh://w@k/x\""),
            "failed for 'https://h/r' and http://g and \"ssh://k/x\""
        );
        assert_eq!(redact("git@h:r is gone: see https://t@h/x"), "h:r is gone: see https://h/x");
        // Local paths are never changed, whatever their names, nor text with no address.
        assert_eq!(redact("/srv/a:b@c/pools"), "/srv/a:b@c/pools");
        assert_eq!(redact("./a:b@c"), "./a:b@c");
        assert_eq!(redact("no at sign"), "no at sign");
        assert_eq!(redact("feature@x"), "feature@x");
        assert_eq!(redact("mail me@host"), "mail me@host");
    }

    #[test]
    fn a_scope_written_with_a_user_name_reads_as_written_now() {
        for (url, shown) in [("https://ghp_x@h/r", "https://h/r"), ("git@h:o/r", "h:o/r")] {
            let then = format!("git:{url}//pools");
            let now = Origin::Git {
                url: redact(url).into_owned(),
                reference: "main".into(),
                commit: String::new(),
                path: "pools".into(),
            };
            assert_eq!(scope_as_written_now(&then), now.scope(), "{url}");
            assert_eq!(now.scope(), format!("git:{shown}//pools"));
        }
        for label in ["git:/srv/repo//pools", "path:/srv/a:b@c", "git:https://h/r//"] {
            assert_eq!(scope_as_written_now(label), label);
        }
    }

    #[test]
    fn shown_escapes_control_characters() {
        assert_eq!(shown("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
    }

    #[test]
    fn non_utf8_text_is_located_by_line_and_byte() {
        let err = utf8_text(b"a: 1\nb: x\xffy\n".to_vec(), || "p.yaml".to_owned()).unwrap_err();
        assert!(
            matches!(err, SourceError::NotUtf8 { line: 2, column: 5, offset: 9, byte: 0xff, .. }),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "p.yaml is not UTF-8 text: line 2, byte 5 (byte 9 of the file) is 0xff; save it as UTF-8"
        );
        assert_eq!(utf8_text(b"ok".to_vec(), String::new).unwrap(), "ok");
    }
}
