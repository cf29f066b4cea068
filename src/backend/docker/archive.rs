//! The tar archives that Docker's archive API speaks, with the `tar` crate: one file (in its
//! own directory) to upload, and the first entry of a download, a file or a symbolic link.
//!
//! Downloads come from Go's `archive/tar` in the daemon, which may put PAX (`x`) or GNU
//! long-name (`L`, `K`) records before an entry; the crate applies them (a long link target
//! included) and skips them.

use std::io::Read;

use tar::{Archive, Builder, EntryType, Header};

/// The first entry of a downloaded archive.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Entry {
    /// A file's content and permission bits.
    File(Vec<u8>, u32),
    /// A symbolic link, and its target as written.
    Symlink(String),
}

/// An archive holding directory `dir` (mode 0700) and `dir/file` (mode 0600, `content`), both
/// owned by root, to be extracted in `dir`'s parent.
pub(super) fn single_file(dir: &str, file: &str, content: &[u8], mtime: u64) -> Result<Vec<u8>, String> {
    let header = |kind: EntryType, mode: u32, size: usize| root_header(kind, mode, size as u64, mtime);
    let mut archive = Builder::new(Vec::with_capacity(4 * 512 + content.len()));
    let failed = |e: std::io::Error| format!("cannot build the archive: {e}");
    archive
        .append_data(&mut header(EntryType::Directory, 0o700, 0), format!("{dir}/"), std::io::empty())
        .map_err(failed)?;
    archive
        .append_data(&mut header(EntryType::Regular, 0o600, content.len()), format!("{dir}/{file}"), content)
        .map_err(failed)?;
    archive.into_inner().map_err(failed)
}

/// An archive of `files` (absolute path, content, permission bits), owned by root, to be
/// extracted at `/`. It holds no directory entries, so the directories a file goes into keep
/// their own modes (`/bin` stays 0755); Docker makes the missing ones, 0755.
pub(super) fn files_at_root(files: &[(&str, &[u8], u32)], mtime: u64) -> Result<Vec<u8>, String> {
    let mut archive = Builder::new(Vec::new());
    for (path, content, mode) in files {
        let mut h = root_header(EntryType::Regular, *mode, content.len() as u64, mtime);
        // `append_data` writes a long name in a GNU record of its own.
        archive
            .append_data(&mut h, path.trim_start_matches('/'), *content)
            .map_err(|e| format!("cannot archive {path}: {e}"))?;
    }
    archive.into_inner().map_err(|e| format!("cannot build the archive: {e}"))
}

/// The header of an entry owned by root.
fn root_header(kind: EntryType, mode: u32, size: u64, mtime: u64) -> Header {
    let mut h = Header::new_ustar();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_mtime(mtime);
    h.set_uid(0);
    h.set_gid(0);
    // Names that fit a ustar field always do; these two are a few bytes.
    let _ = h.set_username("root");
    let _ = h.set_groupname("root");
    h
}

/// The first file or symbolic link of `archive`.
pub(super) fn first_entry(archive: &[u8]) -> Result<Entry, String> {
    let broken = |e: std::io::Error| format!("a broken archive: {e}");
    let mut archive = Archive::new(archive);
    let mut entries = archive.entries().map_err(broken)?;
    let mut entry = entries.next().ok_or("the archive holds no file")?.map_err(broken)?;
    let kind = entry.header().entry_type();
    match kind {
        EntryType::Regular | EntryType::Continuous => {
            let size = entry.size();
            let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0).min(1 << 20));
            entry.read_to_end(&mut data).map_err(broken)?;
            // A short read of a slice is no error to `Read`: the header says what was sent.
            if data.len() as u64 == size {
                Ok(Entry::File(data, entry.header().mode().map_err(broken)? & 0o7777))
            } else {
                Err("a truncated archive".to_owned())
            }
        }
        EntryType::Symlink => {
            let target = entry.link_name_bytes().ok_or("a symbolic link without a target")?;
            Ok(Entry::Symlink(String::from_utf8_lossy(&target).into_owned()))
        }
        EntryType::Directory => Err("it is a directory".to_owned()),
        other => Err(format!("it is not a file (tar entry type {:?})", char::from(other.as_byte()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One entry of `kind` named `name`, with `data`, as Go's `archive/tar` may send it.
    fn archive_of(name: &str, kind: EntryType, link: Option<&str>, data: &[u8]) -> Vec<u8> {
        let mut b = Builder::new(Vec::new());
        let mut h = Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(data.len() as u64);
        h.set_mode(0o777);
        match link {
            Some(target) => b.append_link(&mut h, name, target).unwrap(),
            None => b.append_data(&mut h, name, data).unwrap(),
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn a_written_archive_reads_back() {
        let archive = single_file("poolctl", "token", b"s3cret\n", 1_700_000_000).unwrap();
        assert_eq!(archive.len() % 512, 0);
        let mut read = Archive::new(&archive[..]);
        let entries: Vec<(String, u32, u64, EntryType)> = read
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                let path = e.path().unwrap().display().to_string();
                (path, h.mode().unwrap(), h.uid().unwrap(), h.entry_type())
            })
            .collect();
        // The directory comes first, then the file, both root's, readable by root alone.
        assert_eq!(
            entries,
            [
                ("poolctl/".to_owned(), 0o700, 0, EntryType::Directory),
                ("poolctl/token".to_owned(), 0o600, 0, EntryType::Regular),
            ]
        );
        assert_eq!(first_entry(&archive), Err("it is a directory".to_owned()));
        let file_only = archive_of("token", EntryType::Regular, None, b"s3cret\n");
        assert_eq!(first_entry(&file_only), Ok(Entry::File(b"s3cret\n".to_vec(), 0o777)));
    }

    #[test]
    fn files_at_root_keep_their_modes_and_add_no_directory() {
        let long = format!("/opt/{}/run.sh", "d".repeat(120));
        let files: [(&str, &[u8], u32); 2] =
            [("/bin/k3d-entrypoint.sh", b"#!/bin/sh\n", 0o755), (&long, b"x", 0o600)];
        let archive = files_at_root(&files, 1_700_000_000).unwrap();
        let mut read = Archive::new(&archive[..]);
        let entries: Vec<(String, u32, EntryType)> = read
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let path = e.path().unwrap().display().to_string();
                (path, e.header().mode().unwrap(), e.header().entry_type())
            })
            .collect();
        assert_eq!(
            entries,
            [
                ("bin/k3d-entrypoint.sh".to_owned(), 0o755, EntryType::Regular),
                (long.trim_start_matches('/').to_owned(), 0o600, EntryType::Regular),
            ]
        );
        assert_eq!(first_entry(&archive), Ok(Entry::File(b"#!/bin/sh\n".to_vec(), 0o755)));
    }

    #[test]
    fn links_are_read_from_the_header_or_a_long_name_record() {
        let short = archive_of("node-token", EntryType::Symlink, Some("token"), b"");
        assert_eq!(first_entry(&short), Ok(Entry::Symlink("token".to_owned())));
        // A target too long for the header comes in a record of its own before the entry.
        let far = format!("/var/lib/rancher/k3s/{}/token", "x".repeat(120));
        let long = archive_of("node-token", EntryType::Symlink, Some(&far), b"");
        assert_eq!(first_entry(&long), Ok(Entry::Symlink(far)));
    }

    #[test]
    fn a_broken_archive_is_an_error_not_a_panic() {
        assert!(first_entry(&[]).is_err());
        let mut truncated = archive_of("f", EntryType::Regular, None, &[7; 4096]);
        truncated.truncate(512 + 5);
        assert!(first_entry(&truncated).is_err());
        let mut bad = archive_of("f", EntryType::Regular, None, b"");
        bad[124..136].copy_from_slice(b"zzzzzzzzzzz\0");
        assert!(first_entry(&bad).is_err());
        let fifo = archive_of("f", EntryType::Fifo, None, b"");
        assert_eq!(first_entry(&fifo), Err("it is not a file (tar entry type '6')".to_owned()));
    }
}
