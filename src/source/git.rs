//! Reading a Git source straight from a commit's tree, through a cached bare clone.
//!
//! Every read fetches all branches and tags into the cache, so a new commit is seen by the next
//! plan, and nothing is ever checked out: the working tree of a local repository (uncommitted
//! edits) is not desired state. Branches land under `refs/remotes/origin/`, tags under
//! `refs/tags/`, and the remote's HEAD as `refs/remotes/origin/HEAD`.

use std::path::{Path, PathBuf};

use git2::{
    AutotagOption, Commit, Cred, CredentialType, FetchOptions, FetchPrune, ObjectType, Oid, RemoteCallbacks,
    Repository, TreeWalkMode, TreeWalkResult,
};
use sha2::{Digest, Sha256};

use super::{Origin, SourceError, SourceFile, is_hidden, is_pool_file, utf8_text};

const REMOTE_HEAD: &str = "refs/remotes/origin/HEAD";

/// A repository to fetch: `url` names it everywhere (cache key, messages, plan, labels);
/// `fetch_url` is what is fetched, and may carry credentials.
pub(super) struct Remote<'a> {
    pub(super) url: &'a str,
    pub(super) fetch_url: &'a str,
}

/// Fetch `url` and read the pool files at `reference` (the remote's HEAD when `None`) and `path`.
/// File paths are relative to the repository root, as they appear in the repository.
pub(super) fn read(
    cache_dir: &Path,
    remote: &Remote<'_>,
    reference: Option<&str>,
    path: &str,
) -> Result<(Origin, Vec<SourceFile>), SourceError> {
    let repo = open_cache(cache_dir, remote.url)?;
    fetch(&repo, remote)?;
    let commit = resolve_ref(&repo, remote.url, reference)?;
    files_at(&repo, remote.url, &commit, reference, path)
}

/// Fetch `url` once and, unless `reference` still resolves to the commit `seen`, read the pool
/// files at that commit: a `watch` look that costs one fetch.
pub(super) fn look(
    cache_dir: &Path,
    remote: &Remote<'_>,
    reference: Option<&str>,
    path: &str,
    seen: Option<&str>,
) -> Result<Option<(Origin, Vec<SourceFile>)>, SourceError> {
    let repo = open_cache(cache_dir, remote.url)?;
    fetch(&repo, remote)?;
    let commit = resolve_ref(&repo, remote.url, reference)?;
    if seen == Some(commit.id().to_string().as_str()) {
        return Ok(None);
    }
    files_at(&repo, remote.url, &commit, reference, path).map(Some)
}

/// The pool files at `path` in `commit`'s tree.
fn files_at(
    repo: &Repository,
    url: &str,
    commit: &Commit<'_>,
    reference: Option<&str>,
    path: &str,
) -> Result<(Origin, Vec<SourceFile>), SourceError> {
    let commit_id = commit.id().to_string();
    let git_error = |source: git2::Error| SourceError::Git { url: url.to_owned(), source: source.into() };
    let not_found = || SourceError::PathNotFound {
        url: url.to_owned(),
        commit: commit_id.clone(),
        path: path.to_owned(),
    };

    let tree = commit.tree().map_err(git_error)?;
    let object = if path.is_empty() {
        tree.as_object().clone()
    } else {
        let entry = tree.get_path(Path::new(path)).map_err(|_| not_found())?;
        entry.to_object(repo).map_err(git_error)?
    };

    let mut files = Vec::new();
    match object.kind() {
        Some(ObjectType::Blob) => {
            let blob = object.peel_to_blob().map_err(git_error)?;
            files.push(source_file(path.to_owned(), blob.content(), url, &commit_id)?);
        }
        Some(ObjectType::Tree) => {
            let subtree = object.peel_to_tree().map_err(git_error)?;
            let prefix = if path.is_empty() { String::new() } else { format!("{path}/") };
            let mut failure = None;
            subtree
                .walk(TreeWalkMode::PreOrder, |dir, entry| {
                    let Ok(name) = entry.name() else {
                        return TreeWalkResult::Skip;
                    };
                    if is_hidden(name) {
                        return TreeWalkResult::Skip;
                    }
                    // Only regular files: symlinks (mode 120000) hold a target path, not YAML,
                    // and submodules are commits of another repository.
                    let regular =
                        entry.kind() == Some(ObjectType::Blob) && entry.filemode() & 0o170_000 == 0o100_000;
                    if !regular || !is_pool_file(name) {
                        return TreeWalkResult::Ok;
                    }
                    let relative = format!("{prefix}{dir}{name}");
                    let file = entry
                        .to_object(repo)
                        .and_then(|o| o.peel_to_blob())
                        .map_err(git_error)
                        .and_then(|blob| source_file(relative, blob.content(), url, &commit_id));
                    match file {
                        Ok(file) => {
                            files.push(file);
                            TreeWalkResult::Ok
                        }
                        Err(e) => {
                            failure = Some(e);
                            TreeWalkResult::Abort
                        }
                    }
                })
                .or_else(|e| if failure.is_some() { Ok(()) } else { Err(git_error(e)) })?;
            if let Some(e) = failure {
                return Err(e);
            }
            // Git orders a tree's entries with directories as if they ended in `/`; sort as
            // the directory reader does, so both kinds of source agree.
            files.sort_by(|a, b| a.path_relative.cmp(&b.path_relative));
        }
        _ => return Err(not_found()),
    }

    let origin = Origin::Git {
        url: url.to_owned(),
        reference: reference.unwrap_or("HEAD").to_owned(),
        commit: commit_id,
        path: path.to_owned(),
    };
    Ok((origin, files))
}

/// Where the bare clone of `url` is kept: one directory per URL, named by its hash.
pub(super) fn cache_path(cache_dir: &Path, url: &str) -> PathBuf {
    let digest = Sha256::digest(url.as_bytes());
    cache_dir.join("git").join(hex::encode(&digest[..10]))
}

/// The file at `path` in `commit` of the cached clone of `url`, written into the cache (beside
/// the clone, by content, readable by its owner only: it may be a kubeconfig) for a reader that
/// needs a file on disk. The error says what is wrong with it (`is not in the repository`).
pub(super) fn file_at(cache_dir: &Path, url: &str, commit: &str, path: &str) -> Result<PathBuf, String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let repo = open_cache(cache_dir, url).map_err(|e| format!("cannot be read: {e}"))?;
    let tree = Oid::from_str(commit)
        .and_then(|oid| repo.find_commit(oid))
        .and_then(|c| c.tree())
        .map_err(|e| format!("cannot be read: {}", e.message()))?;
    let entry = tree.get_path(Path::new(path)).map_err(|_| "does not exist".to_owned())?;
    let blob =
        entry.to_object(&repo).and_then(|o| o.peel_to_blob()).map_err(|_| "is not a file".to_owned())?;
    let name = Path::new(path).file_name().unwrap_or_default();
    let dir = cache_path(cache_dir, url).with_extension("files").join(blob.id().to_string());
    let file = dir.join(name);
    if !file.exists() {
        let cannot = |e: std::io::Error| format!("cannot be written to the cache at {}: {e}", file.display());
        std::fs::create_dir_all(&dir).map_err(cannot)?;
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&file)
            .map_err(cannot)?;
        out.write_all(blob.content()).map_err(cannot)?;
    }
    Ok(file)
}

fn open_cache(cache_dir: &Path, url: &str) -> Result<Repository, SourceError> {
    let path = cache_path(cache_dir, url);
    if let Ok(repo) = Repository::open_bare(&path) {
        return Ok(repo);
    }
    std::fs::create_dir_all(&path).map_err(|source| SourceError::Io { path: path.clone(), source })?;
    Repository::init_bare(&path).map_err(|source| SourceError::Cache { path, source: source.into() })
}

/// Fetch every branch and tag of `url` into the cache, pruning what the remote deleted, and
/// record the remote's HEAD.
fn fetch(repo: &Repository, from: &Remote<'_>) -> Result<(), SourceError> {
    let fetch_error =
        |source: git2::Error| SourceError::Fetch { url: from.url.to_owned(), source: source.into() };
    let mut remote = repo.remote_anonymous(from.fetch_url).map_err(fetch_error)?;
    let mut options = FetchOptions::new();
    options.remote_callbacks(callbacks()).prune(FetchPrune::On).download_tags(AutotagOption::All);
    let refspecs = ["+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"];
    remote.fetch(&refspecs, Some(&mut options), None).map_err(fetch_error)?;

    // The advertised HEAD stays readable after the fetch has disconnected. A detached HEAD's
    // commit is on no branch, so it may not have been fetched: then there is no default ref.
    let head =
        remote.list().map_err(fetch_error)?.iter().find(|h| h.name() == "HEAD").map(git2::RemoteHead::oid);
    if let Some(oid) = head.filter(|oid| repo.find_commit(*oid).is_ok()) {
        repo.reference(REMOTE_HEAD, oid, true, "poolctl: remote HEAD").map_err(fetch_error)?;
    } else if let Ok(mut stale) = repo.find_reference(REMOTE_HEAD) {
        stale.delete().map_err(fetch_error)?;
    }
    Ok(())
}

/// Credentials, as git would find them: the SSH agent for ssh, the configured credential helper
/// for https. libgit2 asks again after every rejected credential, so give up after a few tries
/// rather than loop.
fn callbacks<'a>() -> RemoteCallbacks<'a> {
    let mut callbacks = RemoteCallbacks::new();
    let mut attempts = 0;
    callbacks.credentials(move |url, username, allowed| {
        attempts += 1;
        if attempts > 4 {
            return Err(git2::Error::from_str(
                "authentication failed (tried the SSH agent and the Git credential helper)",
            ));
        }
        let user = username.unwrap_or("git");
        if allowed.contains(CredentialType::USERNAME) {
            Cred::username(user)
        } else if allowed.contains(CredentialType::SSH_KEY) {
            Cred::ssh_key_from_agent(user)
        } else if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
            Cred::credential_helper(&git2::Config::open_default()?, url, username)
        } else {
            Cred::default()
        }
    });
    callbacks
}

/// Resolve `reference` like git does: a tag, then a branch, then a commit id or unique prefix;
/// `None` or `HEAD` is the remote's HEAD. Full names (`refs/heads/x`, `refs/tags/x`) work too.
fn resolve_ref<'r>(
    repo: &'r Repository,
    url: &str,
    reference: Option<&str>,
) -> Result<Commit<'r>, SourceError> {
    let reference = reference.unwrap_or("HEAD");
    let candidates = if reference == "HEAD" {
        vec![REMOTE_HEAD.to_owned()]
    } else if let Some(branch) = reference.strip_prefix("refs/heads/") {
        vec![format!("refs/remotes/origin/{branch}")]
    } else if reference.starts_with("refs/tags/") {
        vec![reference.to_owned()]
    } else {
        vec![format!("refs/tags/{reference}"), format!("refs/remotes/origin/{reference}")]
    };
    for name in &candidates {
        if let Ok(found) = repo.find_reference(name) {
            return found
                .peel_to_commit()
                .map_err(|source| SourceError::Git { url: url.to_owned(), source: source.into() });
        }
    }
    if reference == "HEAD" {
        return Err(SourceError::NoHead { url: url.to_owned(), branches: branches(repo) });
    }
    let is_hex =
        reference.len() >= 4 && reference.len() <= 40 && reference.bytes().all(|b| b.is_ascii_hexdigit());
    if is_hex {
        let object = if reference.len() == 40 {
            Oid::from_str(reference).and_then(|oid| repo.find_object(oid, None))
        } else {
            repo.find_object_by_prefix(reference, None)
        };
        if let Ok(commit) = object.and_then(|o| o.peel_to_commit()) {
            return Ok(commit);
        }
    }
    Err(SourceError::RefNotFound { url: url.to_owned(), reference: reference.to_owned() })
}

/// The branches fetched from the remote, for advice.
fn branches(repo: &Repository) -> Vec<String> {
    let Ok(refs) = repo.references_glob("refs/remotes/origin/*") else { return Vec::new() };
    let mut names: Vec<String> = refs
        .filter_map(Result::ok)
        .filter_map(|r| r.name().ok().and_then(|n| n.strip_prefix("refs/remotes/origin/")).map(str::to_owned))
        .filter(|name| name != "HEAD")
        .collect();
    names.sort();
    names
}

fn source_file(relative: String, content: &[u8], url: &str, commit: &str) -> Result<SourceFile, SourceError> {
    let text = utf8_text(content.to_vec(), || format!("{relative} in {url} at {commit}"))?;
    Ok(SourceFile { path_relative: relative, text })
}
