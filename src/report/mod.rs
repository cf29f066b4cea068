//! Where what a run says goes: the sinks a command chooses for a rollout's
//! [`Event`](crate::rollout::event::Event)s, the webhook notifications and the HTTP endpoints
//! of `watch` (its probes, metrics and receivers), and stdout itself. Nothing else writes a rollout's output.

mod kube_events;
mod metrics;
mod progress;
mod providers;
mod receiver;
mod serve;
mod signature;
mod summary;
mod webhook;

use std::io::{self, Write};

use anyhow::Context;

use crate::source::{self, SourceError};

pub use kube_events::{KubeEvents, tell_now};
pub use metrics::Metrics;
pub use progress::{Progress, ProgressFormat, ProgressUi};
pub use providers::Target;
pub use receiver::{MAX_BODY, Receiver, Receivers};
pub use serve::{Probes, serve};
pub use signature::{Secret, SecretError};
pub use summary::{end_event, write_summary};
pub use webhook::{Notice, Notifier};

/// Write to stdout; a closed pipe (`poolctl plan | head`) is not an error.
pub fn write_stdout(f: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> anyhow::Result<()> {
    let stdout = io::stdout();
    let mut lock = stdout.lock();
    match f(&mut lock).and_then(|()| lock.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to stdout"),
    }
}

/// Why the source `source` (as given, or a label of it) gave no desired state, as one error.
pub fn source_failure(source: &str, error: SourceError) -> anyhow::Error {
    match error {
        // Spec errors are the user's to fix, one per line with its place; "cannot read" would
        // send them looking for an I/O problem.
        SourceError::Spec(errors) => {
            let lines: Vec<String> = errors.0.iter().map(|e| format!("  {e}")).collect();
            anyhow::anyhow!(
                "the pool spec in {} has {}:\n{}",
                source::shown(source),
                crate::style::count(lines.len(), "error"),
                lines.join("\n")
            )
        }
        // Says what it is about already, and the source would only repeat it.
        e @ SourceError::NoPools { .. } => e.into(),
        e => anyhow::Error::from(e).context(format!("cannot read the source {}", source::shown(source))),
    }
}
