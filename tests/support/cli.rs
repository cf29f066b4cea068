//! Running the real `poolctl` binary in tests.

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// What one run of the binary printed and how it exited.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from_output(out: &Output) -> Self {
        Self {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Panics with everything printed unless the run exited with `code`.
    #[track_caller]
    pub fn expect_code(self, code: i32) -> Self {
        assert_eq!(self.code, code, "exit code\n--- stdout\n{}\n--- stderr\n{}", self.stdout, self.stderr);
        self
    }
}

/// A `poolctl` command with a private Git cache directory.
pub fn poolctl(cache: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_poolctl"));
    cmd.env("POOLCTL_CACHE_DIR", cache).env_remove("RUST_LOG").stdin(Stdio::null());
    cmd
}

/// Run `poolctl args...` to completion.
pub fn run(cache: &Path, args: &[&str]) -> Run {
    Run::from_output(&poolctl(cache).args(args).output().expect("poolctl runs"))
}
