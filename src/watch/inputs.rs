//! The watch loop's inputs from the source: one look at it (one fetch, and a parse when the
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

/// How long a directory must stay quiet before it is re-read: editors write in several steps,
/// and a look between them would report a half-written file as an error.
const DIR_DEBOUNCE: Duration = Duration::from_millis(300);
/// Git writes a ref by renaming a lock file over it, so the first event already shows the new
/// commit: look at once (leading edge), and once more after this much quiet if more came in
/// (a `git pull` moving several refs).
const GIT_DEBOUNCE: Duration = Duration::from_millis(100);

/// When a burst of file events turns into a look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edge {
    /// Once the burst is over: the files may be half-written until then.
    Trailing,
    /// At the first event, and once more at the end if the burst went on.
    Leading,
}

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

/// Look at the source once: one fetch (or one read of the files), and a parse only when the
/// revision moved.
pub(super) fn check_source(spec: &SourceSpec, seen: Option<&Revision>) -> Checked {
    match source::look(spec, seen) {
        Err(e) => Checked::Unreachable(e),
        Ok(None) => Checked::Unchanged,
        Ok(Some((revision, origin, files))) => {
            let read = source::desired_from_files(spec, origin, &files);
            match read.and_then(|d| source::not_empty(spec, d, files.len())) {
                Ok(d) => Checked::Loaded(revision, d),
                // What this revision says is wrong: looking again finds the same until it changes.
                Err(e @ (SourceError::Spec(_) | SourceError::NoPools { .. })) => {
                    Checked::Invalid(revision, e)
                }
                Err(e) => Checked::Unreachable(e),
            }
        }
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
    let (paths, debounce, edge): (Vec<(PathBuf, RecursiveMode)>, Duration, Edge) = match &spec.location {
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
            (vec![watched], DIR_DEBOUNCE, Edge::Trailing)
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
                Edge::Leading,
            )
        }
    };
    let (raw_tx, raw_rx) = mpsc::unbounded_channel::<()>();
    let mut watcher = match notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let relevant = |p: &Path| if edge == Edge::Leading { moves_a_ref(p) } else { relevant(p) };
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
    tokio::spawn(debounced(raw_rx, tx, debounce, edge));
    Some(watcher)
}

/// Turn bursts of raw events into looks. A full `tx` already holds a "look again".
async fn debounced(mut raw: mpsc::UnboundedReceiver<()>, tx: mpsc::Sender<()>, quiet: Duration, edge: Edge) {
    while raw.recv().await.is_some() {
        if edge == Edge::Leading {
            let _ = tx.try_send(());
        }
        let mut more = false;
        while let Ok(Some(())) = tokio::time::timeout(quiet, raw.recv()).await {
            more = true;
        }
        if edge == Edge::Trailing || more {
            let _ = tx.try_send(());
        }
    }
}

/// Whether a path in a Git directory can move the source's commit: `HEAD`, `packed-refs` and
/// the refs below `refs/`, not the files Git writes before them (`COMMIT_EDITMSG`, the index,
/// objects, logs, lock files: see [`relevant`]), which would make the leading edge look too
/// early.
fn moves_a_ref(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let under_refs = path.components().any(|c| c.as_os_str() == "refs");
    relevant(path) && (name == "HEAD" || name == "packed-refs" || under_refs)
}

/// Whether an event can change what a file says. Reads are not: our own fetch opens the
/// watched refs, and counting that as a change would fetch in a loop.
fn changes_content(kind: EventKind) -> bool {
    !matches!(kind, EventKind::Access(_) | EventKind::Modify(ModifyKind::Metadata(_)))
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
    fn only_refs_move_a_git_source() {
        assert!(moves_a_ref(Path::new("/r/.git/refs/heads/main")));
        assert!(moves_a_ref(Path::new("/r/.git/HEAD")));
        assert!(moves_a_ref(Path::new("/r/.git/packed-refs")));
        assert!(!moves_a_ref(Path::new("/r/.git/COMMIT_EDITMSG")));
        assert!(!moves_a_ref(Path::new("/r/.git/ORIG_HEAD")));
        assert!(!moves_a_ref(Path::new("/r/.git/refs/heads/main.lock")));
        assert!(!moves_a_ref(Path::new("/r/.git/logs/refs/heads/main")));
    }

    /// Feeds `bursts` of raw events, each burst followed by a quiet spell, and returns how many
    /// looks came out after the first event and in all. Time is paused: the quiet spells pass
    /// at once, in order.
    async fn looks(edge: Edge, bursts: &[usize]) -> (usize, usize) {
        let (raw_tx, raw_rx) = mpsc::unbounded_channel();
        let (tx, mut rx) = mpsc::channel(16);
        tokio::spawn(debounced(raw_rx, tx, GIT_DEBOUNCE, edge));
        let mut at_first = None;
        for &n in bursts {
            for _ in 0..n {
                raw_tx.send(()).unwrap();
            }
            tokio::task::yield_now().await;
            at_first.get_or_insert_with(|| {
                let mut seen = 0;
                while rx.try_recv().is_ok() {
                    seen += 1;
                }
                seen
            });
            tokio::time::sleep(GIT_DEBOUNCE * 3).await;
        }
        drop(raw_tx);
        let mut total = at_first.unwrap_or(0);
        while rx.recv().await.is_some() {
            total += 1;
        }
        (at_first.unwrap_or(0), total)
    }

    #[tokio::test(start_paused = true)]
    async fn a_git_change_is_looked_at_on_its_first_event_and_the_rest_coalesce() {
        assert_eq!(looks(Edge::Leading, &[1]).await, (1, 1), "one event, one look, at once");
        assert_eq!(looks(Edge::Leading, &[5]).await, (1, 2), "a burst: at once, and once after it");
        assert_eq!(looks(Edge::Leading, &[1, 1]).await, (1, 2), "two changes apart: two looks");
        assert_eq!(looks(Edge::Trailing, &[5]).await, (0, 1), "a directory waits for the quiet");
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
