//! The commands: plan, apply, status, history, validate, watch, unlock, suspend, resume, promote,
//! reconcile, schema and completions, each a
//! small file over the stages (source -> observe -> plan -> rollout). This is the CLI edge,
//! where library errors gain context and become exit statuses; a command takes the checked
//! [`Config`] and the run's [`crate::backend::Connections`], never a clap type or a concrete
//! backend.

mod apply;
mod common;
mod exit;
mod history;
mod mark;
mod plan;
mod status;
mod unlock;
mod validate;
mod watch;

use anyhow::Result;

use crate::config::{Config, Format, Task};
use crate::report::write_stdout;

pub use exit::{EXIT_ERROR, Exit};

/// Run one command.
pub async fn dispatch(config: Config) -> Result<Exit> {
    let ui = config.ui;
    match config.task {
        Task::Status(status) => status::status_command(&status, ui).await,
        Task::Plan(plan) => plan::plan_command(&plan, ui).await,
        Task::Apply(apply) => apply::apply_command(&apply, ui).await,
        Task::Validate(source) => validate::validate_command(&source),
        Task::Watch(watch) => watch::watch_command(watch).await,
        Task::Completions(shell) => {
            let mut cli = <crate::cli::Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cli, "poolctl", &mut script);
            write_stdout(|out| out.write_all(&script))?;
            Ok(Exit::Success)
        }
        Task::Unlock(unlock) => unlock::unlock_command(&unlock).await,
        Task::Mark(mark) => mark::mark_command(&mark).await,
        Task::History(history) => history::history_command(&history, ui).await,
        Task::Version(format) => {
            let version = env!("CARGO_PKG_VERSION");
            // A build may record its commit (`POOLCTL_GIT_COMMIT=$(git rev-parse HEAD) cargo build`).
            let commit = option_env!("POOLCTL_GIT_COMMIT").filter(|c| !c.is_empty());
            write_stdout(|out| match format {
                Format::Text => match commit {
                    Some(commit) => writeln!(out, "poolctl {version} (commit {commit})"),
                    None => writeln!(out, "poolctl {version}"),
                },
                Format::Json => {
                    let mut json = serde_json::json!({"name": "poolctl", "version": version});
                    if let Some(commit) = commit {
                        json["commit"] = commit.into();
                    }
                    writeln!(out, "{json}")
                }
            })?;
            Ok(Exit::Success)
        }
        Task::Schema => {
            let schema = serde_json::to_string_pretty(&crate::spec::json_schema())?;
            write_stdout(|out| writeln!(out, "{schema}"))?;
            Ok(Exit::Success)
        }
    }
}
