//! Reading the sensitive values of a source: `valueFrom` files on this machine and variables of
//! poolctl's own environment. Nothing here quotes a value, not even in an error.

use std::io::Read as _;

use crate::spec::{Secret, ValueFrom};

/// The largest secret file: a token or a key, never a disk image by mistake.
const MAX_BYTES: u64 = 1 << 20;

/// The value `from` names: a file's content less one trailing newline (as `echo token > file`
/// writes it), or an environment variable's value.
pub(super) fn read(from: &ValueFrom) -> Result<Secret, String> {
    match (&from.file, &from.env) {
        (Some(file), _) => read_file(file),
        (None, Some(name)) => match std::env::var(name) {
            Ok(value) => Ok(Secret::new(value)),
            Err(std::env::VarError::NotPresent) => Err(format!("the environment variable {name} is not set")),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(format!("the environment variable {name} is not UTF-8 text"))
            }
        },
        (None, None) => Err("needs `file` or `env`".to_owned()),
    }
}

fn read_file(file: &str) -> Result<Secret, String> {
    let path = crate::home::expand_home(file);
    let cannot = |e: std::io::Error| format!("cannot read the secret file {}: {e}", path.display());
    let mut bytes = Vec::new();
    std::fs::File::open(&path).and_then(|f| f.take(MAX_BYTES + 1).read_to_end(&mut bytes)).map_err(cannot)?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(format!("the secret file {} is larger than {MAX_BYTES} bytes", path.display()));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("the secret file {} is not UTF-8 text", path.display()))?;
    Ok(Secret::new(text.strip_suffix('\n').map_or(text.as_str(), |t| t.strip_suffix('\r').unwrap_or(t))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &std::path::Path) -> ValueFrom {
        ValueFrom { file: Some(path.display().to_string()), env: None }
    }

    #[test]
    fn a_file_is_read_without_its_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        for (written, read_back) in
            [("s3cret\n", "s3cret"), ("s3cret\r\n", "s3cret"), ("a\n\n", "a\n"), ("x", "x")]
        {
            std::fs::write(&path, written).unwrap();
            assert_eq!(read(&file(&path)).unwrap().expose(), read_back, "{written:?}");
        }
    }

    #[test]
    fn failures_say_where_and_never_what() {
        let dir = tempfile::tempdir().unwrap();
        let missing = read(&file(&dir.path().join("missing"))).unwrap_err();
        assert!(
            missing.starts_with("cannot read the secret file ") && missing.contains("missing"),
            "{missing}"
        );
        let path = dir.path().join("binary");
        std::fs::write(&path, b"s3cret\xff").unwrap();
        let binary = read(&file(&path)).unwrap_err();
        assert!(binary.ends_with("is not UTF-8 text") && !binary.contains("s3cret"), "{binary}");
        let unset = ValueFrom { file: None, env: Some("POOLCTL_TEST_SURELY_UNSET_VARIABLE".to_owned()) };
        assert_eq!(
            read(&unset).unwrap_err(),
            "the environment variable POOLCTL_TEST_SURELY_UNSET_VARIABLE is not set"
        );
    }
}
