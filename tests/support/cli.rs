//! Running the real `poolctl` binary in tests: to completion ([`Run`]), or left running and
//! read line by line ([`Process`]).

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// Bounds that only keep a broken test from hanging; nothing waits for them to pass.
const PATIENCE: Duration = Duration::from_secs(90);

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

    /// Runs `cmd` to completion.
    pub fn of(cmd: &mut Command) -> Self {
        Self::from_output(&cmd.output().expect("poolctl runs"))
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

/// Which output of a [`Process`] a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// A running `poolctl`, its output read line by line; killed when dropped.
pub struct Process {
    child: Child,
    lines: Receiver<(Stream, String)>,
    /// Everything read so far, `Stdout: ...` or `Stderr: ...`, for failure messages.
    pub seen: Vec<String>,
}

impl Process {
    /// Starts `cmd` with both outputs piped.
    pub fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("poolctl starts");
        let (tx, lines) = channel();
        for (stream, pipe) in [
            (Stream::Stdout, Box::new(child.stdout.take().expect("piped")) as Box<dyn Read + Send>),
            (Stream::Stderr, Box::new(child.stderr.take().expect("piped"))),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if tx.send((stream, line)).is_err() {
                        return;
                    }
                }
            });
        }
        Self { child, lines, seen: Vec::new() }
    }

    /// Reads on until a line of `stream` contains `text`; returns it.
    #[track_caller]
    pub fn wait_for(&mut self, stream: Stream, text: &str) -> String {
        self.wait_until(stream, text, |line| line.contains(text))
    }

    /// Reads on until a line of `stream` passes `test` (`what` describes it); returns it.
    #[track_caller]
    pub fn wait_until(&mut self, stream: Stream, what: &str, test: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((s, line)) => {
                    self.seen.push(format!("{s:?}: {line}"));
                    if s == stream && test(&line) {
                        return line;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "no {stream:?} line with {what:?} within {PATIENCE:?}; output:\n{}",
                        self.seen.join("\n")
                    )
                }
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "poolctl ended ({:?}) before printing {what:?}; output:\n{}",
                    self.child.try_wait(),
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// The next line of either stream, or `None` once both are closed (poolctl exited).
    #[track_caller]
    pub fn next_line(&mut self) -> Option<(Stream, String)> {
        match self.lines.recv_timeout(PATIENCE) {
            Ok((s, line)) => {
                self.seen.push(format!("{s:?}: {line}"));
                Some((s, line))
            }
            Err(RecvTimeoutError::Timeout) => {
                panic!("poolctl printed nothing for {PATIENCE:?}; output:\n{}", self.seen.join("\n"))
            }
            Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Reads the rest of the output and waits for the exit.
    pub fn wait(&mut self) -> ExitStatus {
        while self.next_line().is_some() {}
        self.child.wait().expect("wait")
    }

    /// The next applied plan: waits until a rollout reports completion.
    #[track_caller]
    pub fn applied(&mut self) {
        self.wait_for(Stream::Stdout, "Apply complete");
    }

    #[track_caller]
    pub fn assert_alive(&mut self) {
        assert!(
            self.child.try_wait().expect("try_wait").is_none(),
            "poolctl exited:\n{}",
            self.seen.join("\n")
        );
    }

    /// Sends `signal` (`TERM`, `INT`...) and waits for the exit, reading all the output.
    pub fn signal(&mut self, signal: &str) -> ExitStatus {
        let sent = Command::new("kill").args([format!("-{signal}"), self.child.id().to_string()]).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -{signal} failed");
        // Drain the output, so that the child never blocks on a full pipe while exiting.
        self.wait()
    }

    /// The process id, as lock holders name it.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` and returns at once, without waiting for anything.
    pub fn send(&self, signal: &str) {
        let sent = Command::new("kill").args([format!("-{signal}"), self.child.id().to_string()]).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -{signal} failed");
    }

    /// SIGKILL: no chance to clean up.
    pub fn kill(&mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaped");
    }

    /// What `stream` printed so far, one line each.
    pub fn output(&self, stream: Stream) -> String {
        let prefix = format!("{stream:?}: ");
        self.seen
            .iter()
            .filter_map(|l| l.strip_prefix(&prefix))
            .fold(String::new(), |text, l| text + l + "\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
