//! The commands: plan, apply, validate, schema, watch and unlock, each a small file over the stages
//! (source -> observe -> plan -> execute). This is the CLI edge, where library errors gain
//! context and become exit statuses.

mod apply;
mod common;
mod plan;
mod unlock;
mod validate;
mod watch;

use anyhow::Result;

use crate::cli::Command;

/// How the process should exit when a command did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Success,
    /// `plan --detailed-exitcode` found changes.
    Changes,
}

impl Exit {
    /// The exit status: 0, or 2 for changes pending.
    pub fn code(self) -> u8 {
        match self {
            Self::Success => 0,
            Self::Changes => 2,
        }
    }
}

/// The exit status of a command that failed, and of a usage error (clap's own 2 would read as
/// "changes pending" to `plan --detailed-exitcode` callers).
pub const EXIT_ERROR: u8 = 1;

/// The exit status when a second interrupt stops poolctl at once, as shells report SIGINT.
pub const EXIT_INTERRUPTED: i32 = 130;

/// Run one command.
pub async fn dispatch(command: Command) -> Result<Exit> {
    match command {
        Command::Plan(args) => plan::plan_command(args).await,
        Command::Apply(args) => apply::apply_command(args).await,
        Command::Validate(args) => validate::validate_command(&args),
        Command::Watch(args) => watch::watch_command(args).await,
        Command::Unlock(args) => unlock::unlock_command(args).await,
        Command::Schema => {
            let schema = serde_json::to_string_pretty(&crate::spec::json_schema())?;
            common::write_stdout(|out| writeln!(out, "{schema}"))?;
            Ok(Exit::Success)
        }
    }
}
