//! The little of the tar format that Docker's archive API needs here: one file (in its own
//! directory) to upload, and the first entry of a download, a file or a symbolic link.
//!
//! Uploads are plain ustar. Downloads come from Go's `archive/tar` in the daemon, which may put
//! PAX (`x`) or GNU long-name (`L`, `K`) records before an entry; those are read for a link
//! target and otherwise skipped.

const BLOCK: usize = 512;

/// The first entry of a downloaded archive.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Entry {
    File(Vec<u8>),
    /// A symbolic link, and its target as written.
    Symlink(String),
}

/// An archive holding directory `dir` (mode 0700) and `dir/file` (mode 0600, `content`), both
/// owned by root, to be extracted in `dir`'s parent.
pub(super) fn single_file(dir: &str, file: &str, content: &[u8], mtime: u64) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(4 * BLOCK + content.len());
    out.extend_from_slice(&header(&format!("{dir}/"), 0o700, 0, mtime, b'5')?);
    out.extend_from_slice(&header(&format!("{dir}/{file}"), 0o600, content.len(), mtime, b'0')?);
    out.extend_from_slice(content);
    out.resize(out.len().next_multiple_of(BLOCK), 0);
    // Two empty blocks end an archive.
    out.resize(out.len() + 2 * BLOCK, 0);
    Ok(out)
}

fn header(name: &str, mode: u32, size: usize, mtime: u64, kind: u8) -> Result<[u8; BLOCK], String> {
    let mut h = [0u8; BLOCK];
    if name.len() >= 100 {
        return Err(format!("the path {name:?} is too long for an archive entry"));
    }
    h[..name.len()].copy_from_slice(name.as_bytes());
    let mut octal = |range: std::ops::Range<usize>, value: u64| {
        let digits = range.len() - 1;
        let text = format!("{value:0digits$o}");
        h[range.start..range.start + digits].copy_from_slice(&text.as_bytes()[text.len() - digits..]);
    };
    octal(100..108, u64::from(mode));
    octal(108..116, 0);
    octal(116..124, 0);
    octal(124..136, u64::try_from(size).unwrap_or(u64::MAX));
    octal(136..148, mtime);
    h[156] = kind;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[265..269].copy_from_slice(b"root");
    h[297..301].copy_from_slice(b"root");
    // The checksum is taken with its own field as spaces.
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    let text = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(text.as_bytes());
    Ok(h)
}

/// The first file or symbolic link of `archive`.
pub(super) fn first_entry(archive: &[u8]) -> Result<Entry, String> {
    let mut pos = 0;
    let mut long_link: Option<String> = None;
    while pos + BLOCK <= archive.len() {
        let h = &archive[pos..pos + BLOCK];
        if h.iter().all(|&b| b == 0) {
            break;
        }
        let size =
            usize::try_from(octal_field(&h[124..136])?).map_err(|_| "an entry too large".to_owned())?;
        let start = pos + BLOCK;
        let end = start.checked_add(size).filter(|&e| e <= archive.len()).ok_or("a truncated archive")?;
        let data = &archive[start..end];
        match h[156] {
            b'0' | 0 | b'7' => return Ok(Entry::File(data.to_vec())),
            b'2' => {
                let target = long_link.take().unwrap_or_else(|| text_field(&h[157..257]));
                return Ok(Entry::Symlink(target));
            }
            b'x' => long_link = pax_linkpath(data).or(long_link),
            b'K' => long_link = Some(text_field(data)),
            b'g' | b'L' => {}
            b'5' => return Err("it is a directory".to_owned()),
            other => return Err(format!("it is not a file (tar entry type {:?})", char::from(other))),
        }
        pos = start + size.next_multiple_of(BLOCK);
    }
    Err("the archive holds no file".to_owned())
}

/// A NUL-terminated text field.
fn text_field(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

/// An octal number field, padded with spaces or NULs.
fn octal_field(field: &[u8]) -> Result<u64, String> {
    let text = text_field(field);
    let digits = text.trim_matches(|c: char| c == ' ' || c == '\0');
    if digits.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(digits, 8).map_err(|_| format!("a bad number field {digits:?} in the archive"))
}

/// The `linkpath` of PAX records (`<length> <key>=<value>\n`...).
fn pax_linkpath(records: &[u8]) -> Option<String> {
    let mut rest = records;
    while !rest.is_empty() {
        let space = rest.iter().position(|&b| b == b' ')?;
        let len: usize = std::str::from_utf8(&rest[..space]).ok()?.parse().ok()?;
        let record = rest.get(space + 1..len)?;
        let record = record.strip_suffix(b"\n").unwrap_or(record);
        if let Some(value) = record.strip_prefix(b"linkpath=") {
            return Some(String::from_utf8_lossy(value).into_owned());
        }
        rest = rest.get(len..)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_archive_reads_back() {
        let archive = single_file("poolctl", "token", b"s3cret\n", 1_700_000_000).unwrap();
        assert_eq!(archive.len() % BLOCK, 0);
        // The directory comes first, then the file.
        assert_eq!(&archive[..8], b"poolctl/");
        assert_eq!(archive[156], b'5');
        assert_eq!(text_field(&archive[100..108]), "0000700");
        assert_eq!(text_field(&archive[BLOCK + 100..BLOCK + 108]), "0000600");
        assert_eq!(first_entry(&archive), Err("it is a directory".to_owned()));
        assert_eq!(first_entry(&archive[BLOCK..]), Ok(Entry::File(b"s3cret\n".to_vec())));
        // The checksum is what tar computes: the header's bytes with the field as spaces.
        let mut h = archive[..BLOCK].to_vec();
        let stored = octal_field(&h[148..156]).unwrap();
        h[148..156].copy_from_slice(b"        ");
        assert_eq!(stored, h.iter().map(|&b| u64::from(b)).sum::<u64>());
    }

    #[test]
    fn links_are_read_from_the_header_or_a_pax_record() {
        let mut link = header("node-token", 0o777, 0, 0, b'2').unwrap().to_vec();
        link[157..162].copy_from_slice(b"token");
        link.resize(3 * BLOCK, 0);
        assert_eq!(first_entry(&link), Ok(Entry::Symlink("token".to_owned())));

        let record = b"39 linkpath=/var/lib/rancher/k3s/token\n";
        assert_eq!(record.len(), 39);
        let mut pax = header("PaxHeaders/node-token", 0o644, record.len(), 0, b'x').unwrap().to_vec();
        pax.extend_from_slice(record);
        pax.resize(2 * BLOCK, 0);
        pax.extend_from_slice(&header("node-token", 0o777, 0, 0, b'2').unwrap());
        pax.resize(5 * BLOCK, 0);
        assert_eq!(first_entry(&pax), Ok(Entry::Symlink("/var/lib/rancher/k3s/token".to_owned())));
    }

    #[test]
    fn a_broken_archive_is_an_error_not_a_panic() {
        assert!(first_entry(&[]).is_err());
        let mut truncated = header("f", 0o600, 4096, 0, b'0').unwrap().to_vec();
        truncated.extend_from_slice(b"short");
        assert_eq!(first_entry(&truncated), Err("a truncated archive".to_owned()));
        let mut bad = header("f", 0o600, 0, 0, b'0').unwrap();
        bad[124..136].copy_from_slice(b"zzzzzzzzzzz\0");
        assert!(first_entry(&bad).is_err());
        assert!(header(&"x".repeat(100), 0o600, 0, 0, b'0').is_err());
    }
}
