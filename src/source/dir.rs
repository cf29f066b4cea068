//! Reading a file or directory source from disk, as it is now.

use std::fs;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use super::{Origin, SourceError, SourceFile, is_hidden, is_pool_file, utf8_text};

/// Read `root` (or `root/path` when `--path` was given): a file as itself, a directory as all of
/// its pool files below it, sorted by their path relative to `root`.
pub(super) fn read(root: &Path, path: &str) -> Result<(Origin, Vec<SourceFile>), SourceError> {
    if !path.is_empty() && fs::metadata(root).is_ok_and(|m| m.is_file()) {
        return Err(SourceError::Invalid(format!(
            "--path needs a directory or Git source, and {} is a file",
            root.display()
        )));
    }
    let target = if path.is_empty() { root.to_path_buf() } else { root.join(path) };
    let meta = fs::metadata(&target).map_err(|e| io_error(&target, e))?;
    if !meta.is_file() && !meta.is_dir() {
        return Err(SourceError::NotAFile { kind: kind_of(&meta), path: target });
    }
    let canonical = fs::canonicalize(&target).map_err(|e| io_error(&target, e))?;
    let origin = Origin::Path { path: canonical.to_string_lossy().into_owned() };

    if meta.is_file() {
        let relative = if path.is_empty() {
            // A single file is its own root: it is known by its name.
            canonical.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
        } else {
            path.to_owned()
        };
        return Ok((origin, vec![SourceFile { path_relative: relative, text: read_text(&target)? }]));
    }

    let mut files = Vec::new();
    walk(&target, path, &mut files)?;
    files.sort_by(|a, b| a.path_relative.cmp(&b.path_relative));
    Ok((origin, files))
}

/// Collect the pool files below `dir`, whose path relative to the source root is `prefix`.
fn walk(dir: &Path, prefix: &str, files: &mut Vec<SourceFile>) -> Result<(), SourceError> {
    let entries = fs::read_dir(dir).map_err(|e| io_error(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io_error(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_hidden(&name) {
            continue;
        }
        let full = entry.path();
        let relative = if prefix.is_empty() { name.clone() } else { format!("{prefix}/{name}") };
        let file_type = entry.file_type().map_err(|e| io_error(&full, e))?;
        if file_type.is_dir() {
            walk(&full, &relative, files)?;
        } else if is_pool_file(&name) {
            // Symlinks to files are followed; symlinks to directories are not (they may loop),
            // and a dangling one is skipped like any other non-file.
            let is_file = file_type.is_file() || fs::metadata(&full).is_ok_and(|m| m.is_file());
            if is_file {
                files.push(SourceFile { path_relative: relative, text: read_text(&full)? });
            }
        }
    }
    Ok(())
}

/// Read one pool file. Only a regular file is opened (a FIFO would block the read until a
/// writer came), and only up to the size a pool file may have.
fn read_text(path: &Path) -> Result<String, SourceError> {
    let meta = fs::metadata(path).map_err(|e| io_error(path, e))?;
    if !meta.is_file() {
        return Err(SourceError::NotAFile { kind: kind_of(&meta), path: path.to_path_buf() });
    }
    let limit = u64::try_from(crate::spec::MAX_FILE_BYTES).unwrap_or(u64::MAX);
    if meta.len() > limit {
        return Err(SourceError::TooLarge { path: path.to_path_buf(), bytes: meta.len() });
    }
    let mut bytes = Vec::new();
    // Bounded even if the file grows between the look and the read.
    fs::File::open(path)
        .and_then(|file| file.take(limit + 1).read_to_end(&mut bytes))
        .map_err(|e| io_error(path, e))?;
    if bytes.len() as u64 > limit {
        return Err(SourceError::TooLarge { path: path.to_path_buf(), bytes: bytes.len() as u64 });
    }
    utf8_text(bytes, || path.display().to_string())
}

/// What a path that is neither a regular file nor a directory is, in words.
fn kind_of(meta: &fs::Metadata) -> &'static str {
    let kind = meta.file_type();
    if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

fn io_error(path: &Path, source: std::io::Error) -> SourceError {
    let path = PathBuf::from(path);
    if source.kind() == ErrorKind::NotFound {
        SourceError::NotFound { path }
    } else {
        SourceError::Io { path, source }
    }
}
