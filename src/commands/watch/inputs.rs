//! The watch loop's inputs from the source: one look at it (resolve, and load when the
//! revision moved), and notify watches on what can change it on this machine (a directory, or
//! a local repository's refs), debounced into "look again".

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::event::ModifyKind;
use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tracing::warn;

use crate::model::Desired;
use crate::source::{self, Location, Revision, SourceError, SourceSpec};

/// How long a directory must stay quiet before it is re-read: editors write in several steps.
const DIR_DEBOUNCE: Duration = Duration::from_millis(300);
/// Git writes a ref by renaming a lock file: one event, so a short settle is enough.
const GIT_DEBOUNCE: Duration = Duration::from_millis(100);

/// What one look at the source found.
pub(super) enum Checked {
    /// The same revision as last time.
    Unchanged,
    Loaded(Revision, Desired),
    /// The revision's pool files are invalid.
    Invalid(Revision, SourceError),
    /// The source could not be read or fetched at all.
    Unreachable(SourceError),
}

pub(super) fn check_source(spec: &SourceSpec, seen: Option<&Revision>) -> Checked {
    let revision = match source::resolve(spec) {
        Ok(r) => r,
        Err(e) => return Checked::Unreachable(e),
    };
    if seen == Some(&revision) {
        return Checked::Unchanged;
    }
    match source::load(spec) {
        // The commit that was read, should the ref have moved since the resolve.
        Ok(d) => Checked::Loaded(d.origin.commit().map_or(revision, |c| Revision::Commit(c.to_owned())), d),
        // What this revision says is wrong: looking again finds the same until it changes.
        Err(
            e @ (SourceError::Spec(_)
            | SourceError::NoPools { .. }
            | SourceError::NotUtf8 { .. }
            | SourceError::TooLarge { .. }),
        ) => Checked::Invalid(revision, e),
        Err(e) => Checked::Unreachable(e),
    }
}

pub(super) fn source_label(spec: &SourceSpec) -> String {
    let label = match &spec.location {
        Location::Path { .. } => spec.local_path().map_or_else(String::new, |p| p.display().to_string()),
        Location::Git { url, reference, path, .. } => {
            format!(
                "{url} @ {}{}",
                reference.as_deref().unwrap_or("HEAD"),
                if path.is_empty() { String::new() } else { format!(" path {path}") }
            )
        }
    };
    source::shown(&label)
}

/// Watch what can change a source on this machine: the directory (or file) of a path source,
/// or the refs of a local Git repository. Events are debounced here; the loop only hears "look
/// again". Without notify (e.g. no inotify left) the source is still fetched on the interval.
pub(super) fn watch_files(spec: &SourceSpec, tx: mpsc::Sender<()>) -> Option<notify::RecommendedWatcher> {
    let (paths, debounce): (Vec<(PathBuf, RecursiveMode)>, Duration) = match &spec.location {
        Location::Path { .. } => {
            let path = spec.local_path()?;
            // A file is watched through its directory: editors that save by writing a new file
            // and renaming it over the old one would leave a watch on the file itself blind
            // after the first save. A look at an unchanged spec costs one read and changes
            // nothing.
            let watched = if path.is_file() {
                (path.parent()?.to_path_buf(), RecursiveMode::NonRecursive)
            } else {
                (path, RecursiveMode::Recursive)
            };
            (vec![watched], DIR_DEBOUNCE)
        }
        Location::Git { url, .. } => {
            let local = url.strip_prefix("file://").unwrap_or(url);
            if !local.starts_with('/') {
                return None;
            }
            let repo = git2::Repository::open(local).ok()?;
            let git_dir = repo.path().to_path_buf();
            // HEAD and packed-refs sit in the git dir itself; branches and tags below refs/.
            (
                vec![
                    (git_dir.clone(), RecursiveMode::NonRecursive),
                    (git_dir.join("refs"), RecursiveMode::Recursive),
                ],
                GIT_DEBOUNCE,
            )
        }
    };
    let (raw_tx, mut raw_rx) = mpsc::unbounded_channel::<()>();
    let mut watcher = match notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|e| changes_content(e.kind) && e.paths.iter().any(|p| relevant(p))) {
            let _ = raw_tx.send(());
        }
    }) {
        Ok(w) => w,
        Err(e) => {
            warn!("cannot watch the source for changes ({e}); relying on the fetch interval");
            return None;
        }
    };
    for (path, mode) in &paths {
        if let Err(e) = watcher.watch(path, *mode) {
            warn!(
                "cannot watch {} for changes ({e}); relying on the fetch interval",
                source::shown(&path.to_string_lossy())
            );
        }
    }
    tokio::spawn(async move {
        while raw_rx.recv().await.is_some() {
            // Quiet for `debounce` since the last event: then look once.
            while let Ok(Some(())) = tokio::time::timeout(debounce, raw_rx.recv()).await {}
            // A full channel already holds a "look again".
            let _ = tx.try_send(());
        }
    });
    Some(watcher)
}

/// Whether an event can change what a file says. Reads are not: our own fetch opens the
/// watched refs, and counting that as a change would fetch in a loop.
fn changes_content(kind: EventKind) -> bool {
    match kind {
        EventKind::Access(_) | EventKind::Modify(ModifyKind::Metadata(_)) => false,
        EventKind::Any
        | EventKind::Create(_)
        | EventKind::Modify(_)
        | EventKind::Remove(_)
        | EventKind::Other => true,
    }
}

/// Whether a changed path can change the source: not Git's index, logs or lock files, nor
/// hidden editor files in a directory source.
// Git names its lock files `*.lock` in lower case; this is a name pattern, not a file type.
#[allow(clippy::case_sensitive_file_extension_comparisons)]
fn relevant(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    !(name == "index"
        || name.ends_with(".lock")
        || name.starts_with(".#")
        || name.ends_with('~')
        || path.components().any(|c| c.as_os_str() == "logs" || c.as_os_str() == "objects"))
}

#[cfg(test)]
mod tests {
    use notify::event::{AccessKind, MetadataKind};

    use super::*;

    #[test]
    fn reads_and_metadata_are_not_changes() {
        assert!(!changes_content(EventKind::Access(AccessKind::Any)));
        assert!(!changes_content(EventKind::Modify(ModifyKind::Metadata(MetadataKind::AccessTime))));
        assert!(changes_content(EventKind::Modify(ModifyKind::Any)));
        assert!(changes_content(EventKind::Create(notify::event::CreateKind::File)));
    }

    #[test]
    fn git_housekeeping_files_are_not_changes() {
        assert!(relevant(Path::new("/r/.git/refs/heads/main")));
        assert!(relevant(Path::new("/r/.git/packed-refs")));
        assert!(relevant(Path::new("/d/pools/a.yaml")));
        assert!(!relevant(Path::new("/r/.git/index")));
        assert!(!relevant(Path::new("/r/.git/refs/heads/main.lock")));
        assert!(!relevant(Path::new("/r/.git/logs/HEAD")));
        assert!(!relevant(Path::new("/d/.#a.yaml")));
    }
}
