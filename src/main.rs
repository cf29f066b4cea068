//! The `poolctl` binary: arguments -> tracing -> a command -> exit status.

use std::process::ExitCode;

use clap::Parser;
use poolctl::cli::{Cli, LogFormat};
use poolctl::commands::{EXIT_ERROR, dispatch};
use poolctl::config::Config;
use poolctl::spec::escape_controls;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // clap exits 2 on a usage error, which `plan --detailed-exitcode` means as "changes
        // pending": a typo in a CI script must read as an error instead.
        Err(e) => {
            let e = without_destructive_suggestion(e);
            let code = if e.use_stderr() { ExitCode::from(EXIT_ERROR) } else { ExitCode::SUCCESS };
            // Printing help or an error to a closed pipe is nothing to report.
            let _ = e.print();
            return code;
        }
    };
    init_tracing(cli.verbose, cli.log_format, cli.color.stderr());
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    let run = async { dispatch(Config::from_cli(cli)?).await };
    match runtime.block_on(run) {
        Ok(exit) => ExitCode::from(exit.code()),
        Err(e) => {
            // The last guard for every message: whatever a cause quotes (a path, a URL, a
            // daemon's answer) cannot drive the terminal. Lines stay lines.
            let message = format!("{e:#}");
            let lines: Vec<_> = message.split('\n').map(escape_controls).collect();
            eprintln!("error: {}", lines.join("\n"));
            ExitCode::from(EXIT_ERROR)
        }
    }
}

/// Flags that retire or take over pools: a typo must never be answered with one of them.
const DESTRUCTIVE: [&str; 2] = ["--prune", "--adopt"];

/// clap suggests the closest flag to an unknown one; `--prun` or `--dryrun` would be told about
/// `--prune`. Such an error is rebuilt without the suggestion (and without the usage line that
/// repeats it).
fn without_destructive_suggestion(e: clap::Error) -> clap::Error {
    use clap::CommandFactory;
    use clap::error::{ContextKind, ContextValue};
    let destructive = |v: &ContextValue| match v {
        ContextValue::String(s) => DESTRUCTIVE.iter().any(|d| s.starts_with(d)),
        ContextValue::Strings(all) => all.iter().any(|s| DESTRUCTIVE.iter().any(|d| s.starts_with(d))),
        _ => false,
    };
    if !e.get(ContextKind::SuggestedArg).is_some_and(destructive) {
        return e;
    }
    let mut clean = clap::Error::new(e.kind()).with_cmd(&Cli::command());
    for (kind, value) in e.context() {
        if !matches!(kind, ContextKind::SuggestedArg | ContextKind::Usage) {
            clean.insert(kind, value.clone());
        }
    }
    clean
}

fn init_tracing(verbose: u8, format: LogFormat, ansi: bool) {
    // By default poolctl's own progress that is not on stdout (image pulls, evictions, watch
    // status) shows, and other crates speak only to warn. kube's client logs every failed
    // request as an ERROR in hyper's words ("client error (Connect)"), before poolctl reports
    // the same failure with its cause: that line is only shown from -v on.
    let default = match verbose {
        0 => "poolctl=info,kube_client::client::builder=off,warn",
        1 => "poolctl=debug,info",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // Colour codes only for a terminal (`--color`, NO_COLOR): logs that go to a file or a pipe
    // stay greppable.
    // A user's log says what happened; where in the code it happened (the module path) is for a
    // developer's -v.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(verbose > 0);
    // bollard's debug and trace output quotes request bodies: a container's environment (its
    // sensitive values too) and the files poolctl writes into containers (join tokens). No
    // RUST_LOG may bring it out.
    let no_bodies = tracing_subscriber::filter::filter_fn(|meta| {
        !(meta.target().starts_with("bollard") && *meta.level() > tracing::Level::INFO)
    });
    match format {
        LogFormat::Text => builder.finish().with(no_bodies).init(),
        LogFormat::Json => builder.json().finish().with(no_bodies).init(),
    }
}
