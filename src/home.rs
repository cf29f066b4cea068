//! The home directory at the start of a path (`~`, `$HOME`, `${HOME}`), as a shell expands it:
//! one rule for every path a user writes in a pool file or a kubeconfig.

use std::path::PathBuf;

/// `$HOME`, unless it is unset or empty.
pub fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from)
}

/// `path` with a leading `~`, `$HOME` or `${HOME}` (alone, or followed by `/`) replaced by the
/// home directory; any other path as it is (`~other/x` and `a/~/b` included: poolctl does not
/// look users up). Without a home directory, nothing is replaced.
pub fn expand_home(path: &str) -> PathBuf {
    let Some(home) = home_dir() else { return PathBuf::from(path) };
    for prefix in ["~", "$HOME", "${HOME}"] {
        match path.strip_prefix(prefix) {
            Some("") => return home,
            Some(rest) if rest.starts_with('/') => return home.join(rest.trim_start_matches('/')),
            _ => {}
        }
    }
    PathBuf::from(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_home_directory_is_expanded_as_a_shell_would() {
        let Some(home) = home_dir() else { return };
        assert_eq!(expand_home("~/.kube/config"), home.join(".kube/config"));
        assert_eq!(expand_home("$HOME/k"), home.join("k"));
        assert_eq!(expand_home("${HOME}/k"), home.join("k"));
        assert_eq!(expand_home("~"), home);
        assert_eq!(expand_home("$HOME"), home);
        assert_eq!(expand_home("/etc/k"), PathBuf::from("/etc/k"));
        assert_eq!(expand_home("k"), PathBuf::from("k"));
        assert_eq!(expand_home("a/~/b"), PathBuf::from("a/~/b"));
        assert_eq!(expand_home("~other/x"), PathBuf::from("~other/x"));
        assert_eq!(expand_home("$HOMEY/x"), PathBuf::from("$HOMEY/x"));
    }
}
