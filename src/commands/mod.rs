//! The commands: plan, apply, validate, schema, watch and unlock, each a small file over the stages
//! (source -> observe -> plan -> execute). This is the CLI edge, where library errors gain
//! context and become exit statuses.

mod apply;
mod common;
mod exit;
mod plan;
mod status;
mod unlock;
mod validate;
mod watch;

use anyhow::Result;

use crate::cli::Command;

pub use exit::{EXIT_ERROR, EXIT_INTERRUPTED, Exit};

/// How the user wants to be spoken to: the options every command shares.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ui {
    /// `--color`.
    pub color: crate::style::ColorChoice,
    /// `-v` given once or more.
    pub verbose: u8,
}

/// Run one command.
pub async fn dispatch(command: Command, ui: Ui) -> Result<Exit> {
    match command {
        Command::Status(args) => status::status_command(args, ui).await,
        Command::Plan(args) => plan::plan_command(args, ui).await,
        Command::Apply(args) => apply::apply_command(args, ui).await,
        Command::Validate(args) => validate::validate_command(&args),
        Command::Watch(args) => watch::watch_command(args).await,
        Command::Completions { shell } => {
            let mut cli = <crate::cli::Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cli, "poolctl", &mut script);
            common::write_stdout(|out| out.write_all(&script))?;
            Ok(Exit::Success)
        }
        Command::Unlock(args) => unlock::unlock_command(args).await,
        Command::Schema => {
            let schema = serde_json::to_string_pretty(&crate::spec::json_schema())?;
            common::write_stdout(|out| writeln!(out, "{schema}"))?;
            Ok(Exit::Success)
        }
    }
}
