//! The configuration step: what the user typed (clap's types in [`crate::cli`]) becomes one
//! checked value that the commands take, as ripgrep turns its `LowArgs` into `HiArgs`. Every
//! check that needs nothing but the command line happens here, before anything is read or
//! connected; no clap type reaches a command.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::{Cli, Command, NotifyArgs, OutputFormat, PlanningArgs, Preflight, SourceArgs};
use crate::model::Origin;
use crate::plan::PlanOptions;
use crate::report::Target;
use crate::rollout::execute::PreflightCheck;
use crate::source::{SourceError, SourceSpec};
use crate::style::ColorChoice;

/// The environment variable that names the Node poolctl runs on: deploy/04-deployment.yaml sets
/// it from the Pod's `spec.nodeName` (the downward API); outside a cluster it is not set.
pub const OWN_NODE_ENV: &str = "POOLCTL_NODE_NAME";

/// The shortest watch or status interval accepted: a zero period would spin (and tokio refuses
/// it).
const MIN_PERIOD: Duration = Duration::from_millis(100);

/// Why the command line cannot be carried out, before anything was read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("apply -o json asks no question: pass --yes (or apply a saved plan)")]
    JsonNeedsYes,
    /// Not a URL `--notify` takes; the URL itself is not shown, as it may hold a token.
    #[error("--notify: not a notification URL ({0})")]
    NotifyUrl(&'static str),
    #[error("--notify {0} needs a token: --notify-token-file FILE")]
    NotifyToken(String),
}

/// Where to notify, and with which token.
#[derive(Debug, Clone)]
pub struct Notify {
    pub target: Target,
    /// `--notify-token-file`.
    pub token_file: Option<PathBuf>,
}

/// Check `--notify`'s URL, without echoing it: webhook URLs carry their token in the path.
fn notify(args: &NotifyArgs) -> Result<Option<Notify>, ConfigError> {
    let Some(url) = &args.notify else { return Ok(None) };
    let target = Target::parse(url).map_err(ConfigError::NotifyUrl)?;
    if target.needs_token() && args.notify_token_file.is_none() {
        return Err(ConfigError::NotifyToken(target.shown()));
    }
    Ok(Some(Notify { target, token_file: args.notify_token_file.clone() }))
}

/// One run of poolctl, as the command line asks for it.
#[derive(Debug, Clone)]
pub struct Config {
    pub ui: Ui,
    pub task: Task,
}

/// How the user wants to be spoken to: the options every command shares.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ui {
    /// `--color`.
    pub color: ColorChoice,
    /// `-v` given once or more.
    pub verbose: u8,
}

/// What to do.
#[derive(Debug, Clone)]
pub enum Task {
    Plan(PlanConfig),
    Apply(ApplyConfig),
    Watch(WatchConfig),
    Status(StatusConfig),
    /// Check a source offline.
    Validate(Source),
    Unlock(UnlockConfig),
    /// `poolctl suspend`, `resume`, `reconcile`.
    Mark(MarkConfig),
    History(HistoryConfig),
    /// Print the JSON Schema of the pool file.
    Schema,
    /// Print a completion script for this shell.
    Completions(clap_complete::Shell),
    /// Print poolctl's version.
    Version(Format),
}

/// The output format of plans, status and progress (`-o`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

/// Where the pool files are: the classified `--source`, `--ref`, `--path` and `--allow-empty`,
/// and the source as the user wrote it, for messages.
#[derive(Debug, Clone)]
pub struct Source {
    pub spec: SourceSpec,
    pub given: String,
}

impl Source {
    /// Classify a source (a path, or a Git repository at a ref).
    pub fn new(
        given: &str,
        reference: Option<&str>,
        path: Option<&str>,
        allow_empty: bool,
    ) -> Result<Self, SourceError> {
        let spec = SourceSpec::new(given, reference, path)?.allowing_empty(allow_empty);
        Ok(Self { spec, given: given.to_owned() })
    }

    /// The source a saved plan was made from, read again.
    pub fn of_origin(origin: &Origin) -> Result<Self, SourceError> {
        match origin {
            Origin::Path { path } => Self::new(path, None, None, false),
            Origin::Git { url, reference, path, .. } => {
                Ok(Self { spec: SourceSpec::git(url, reference, path)?, given: url.clone() })
            }
        }
    }

    fn from_args(args: &SourceArgs) -> Result<Self, SourceError> {
        let given = args.source.as_deref().unwrap_or_default();
        Self::new(given, args.reference.as_deref(), args.path.as_deref(), args.allow_empty)
    }
}

/// `poolctl plan`.
#[derive(Debug, Clone)]
pub struct PlanConfig {
    pub source: Source,
    pub options: PlanOptions,
    pub format: Format,
    /// `--detailed-exitcode`.
    pub detailed_exitcode: bool,
    /// `--out FILE`: also save the plan there.
    pub out: Option<PathBuf>,
}

/// `poolctl apply`.
#[derive(Debug, Clone)]
pub struct ApplyConfig {
    /// The source to plan from; with a saved plan, the one given (else the file names it).
    pub source: Option<Source>,
    /// `apply PLAN_FILE`: carry out exactly this saved plan.
    pub plan_file: Option<PathBuf>,
    pub options: PlanOptions,
    /// `--yes`: do not ask.
    pub yes: bool,
    /// `--dry-run`: print the plan and stop.
    pub dry_run: bool,
    pub format: Format,
    /// `--lock-timeout`: how long to wait for a pool another run holds.
    pub lock_timeout: Duration,
    /// `--skip-preflight`: the preflight checks not to make.
    pub skip_preflight: BTreeSet<PreflightCheck>,
    /// `--notify`: where to tell each pool's rollout.
    pub notify: Option<Notify>,
}

/// `poolctl watch`.
#[derive(Debug, Clone)]
pub struct WatchConfig {
    pub source: Source,
    pub options: PlanOptions,
    /// How often a Git source is fetched.
    pub interval: Duration,
    /// How often the world is read again to correct drift.
    pub resync: Duration,
    /// `--dry-run`: print each plan, apply nothing.
    pub dry_run: bool,
    /// `--listen`: where to serve metrics, health and the receivers.
    pub listen: Option<std::net::SocketAddr>,
    /// `--hook-secret`: the file that holds the receivers' secret.
    pub hook_secret: Option<PathBuf>,
    /// `--notify`: where to tell each pool's rollout.
    pub notify: Option<Notify>,
    /// `--skip-preflight`: the preflight checks not to make.
    pub skip_preflight: BTreeSet<PreflightCheck>,
    /// `--max-concurrent-pools`: how many pools are reconciled at once (no bound when `None`).
    pub max_concurrent_pools: Option<usize>,
}

/// `poolctl status`.
#[derive(Debug, Clone)]
pub struct StatusConfig {
    pub source: Source,
    pub format: Format,
    /// `-w`: keep it up to date.
    pub watch: bool,
    /// With `-w`: how often to observe again.
    pub interval: Duration,
    /// `--pool`: only these pools of the source (all when empty).
    pub pools: BTreeSet<String>,
}

/// `poolctl history`.
#[derive(Debug, Clone)]
pub struct HistoryConfig {
    pub pool: String,
    pub source: Source,
    pub format: Format,
}

/// What `poolctl suspend`, `resume`, `reconcile` and `promote` record in the world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mark {
    Suspend {
        reason: Option<String>,
    },
    Resume,
    Reconcile,
    /// `poolctl promote`: the canaries of the template the source gives the pool.
    Promote,
}

impl Mark {
    /// The command that records it.
    pub fn command(&self) -> &'static str {
        match self {
            Mark::Suspend { .. } => "suspend",
            Mark::Resume => "resume",
            Mark::Reconcile => "reconcile",
            Mark::Promote => "promote",
        }
    }
}

/// `poolctl suspend`, `resume` and `reconcile`: the pools (empty: every declared pool, for
/// `reconcile --all`), the source that declares them, and what to record.
#[derive(Debug, Clone)]
pub struct MarkConfig {
    pub pools: Vec<String>,
    pub source: Source,
    pub mark: Mark,
}

/// `poolctl unlock`.
#[derive(Debug, Clone)]
pub struct UnlockConfig {
    pub pool: String,
    pub source: Source,
    pub yes: bool,
}

impl Config {
    /// Check and resolve the command line.
    pub fn from_cli(cli: Cli) -> Result<Self, ConfigError> {
        let ui = Ui { color: cli.color, verbose: cli.verbose };
        let task = match cli.command {
            Command::Plan(args) => Task::Plan(PlanConfig {
                source: Source::from_args(&args.source)?,
                options: PlanOptions {
                    pools: args.pools.into_iter().collect(),
                    ignore_windows: args.ignore_windows,
                    ..options(&args.planning)
                },
                format: format(args.output),
                detailed_exitcode: args.detailed_exitcode,
                out: args.out,
            }),
            Command::Apply(args) => {
                let format = format(args.output);
                if args.plan_file.is_none() && format == Format::Json && !args.yes && !args.dry_run {
                    return Err(ConfigError::JsonNeedsYes);
                }
                let source = match (&args.plan_file, &args.source.source) {
                    (Some(_), None) => None,
                    _ => Some(Source::from_args(&args.source)?),
                };
                Task::Apply(ApplyConfig {
                    source,
                    plan_file: args.plan_file,
                    // An explicit apply tries a stalled rollout again; plan shows it, and watch
                    // waits for the source to change.
                    options: PlanOptions {
                        retry_stalled: true,
                        pools: args.pools.into_iter().collect(),
                        rollback: args.rollback.into_iter().collect(),
                        ignore_windows: args.ignore_windows,
                        ignore_suspend: args.ignore_suspend,
                        ..options(&args.planning)
                    },
                    yes: args.yes,
                    dry_run: args.dry_run,
                    format,
                    lock_timeout: args.lock_timeout.get(),
                    skip_preflight: skipped(&args.skip_preflight),
                    notify: notify(&args.notify)?,
                })
            }
            Command::Watch(args) => Task::Watch(WatchConfig {
                source: Source::from_args(&args.source)?,
                options: options(&args.planning),
                interval: args.interval.get().max(MIN_PERIOD),
                resync: args.resync.get().max(MIN_PERIOD),
                dry_run: args.dry_run,
                listen: args.listen,
                hook_secret: args.hook_secret,
                notify: notify(&args.notify)?,
                skip_preflight: skipped(&args.skip_preflight),
                max_concurrent_pools: args.max_concurrent_pools.map(usize::from),
            }),
            Command::Status(args) => Task::Status(StatusConfig {
                source: Source::from_args(&args.source)?,
                format: format(args.output),
                watch: args.watch,
                interval: args.interval.get().max(MIN_PERIOD),
                pools: args.pools.into_iter().collect(),
            }),
            Command::Validate(args) => Task::Validate(Source::from_args(&args)?),
            Command::History(args) => Task::History(HistoryConfig {
                source: Source::from_args(&args.source)?,
                pool: args.pool,
                format: format(args.output),
            }),
            Command::Unlock(args) => Task::Unlock(UnlockConfig {
                source: Source::from_args(&args.source)?,
                pool: args.pool,
                yes: args.yes,
            }),
            Command::Suspend(args) => {
                let reason = args.reason.filter(|r| !r.trim().is_empty());
                mark(Some(args.pool), &args.source, Mark::Suspend { reason })?
            }
            Command::Resume(args) => mark(Some(args.pool), &args.source, Mark::Resume)?,
            Command::Promote(args) => mark(args.pool, &args.source, Mark::Promote)?,
            Command::Reconcile(args) => mark(args.pool, &args.source, Mark::Reconcile)?,
            Command::Schema => Task::Schema,
            Command::Completions { shell } => Task::Completions(shell),
            Command::Version { output } => Task::Version(format(output)),
        };
        Ok(Self { ui, task })
    }
}

/// `poolctl suspend`, `resume`, `promote` or `reconcile` of one pool, or of all (`--all`: none
/// named).
fn mark(pool: Option<String>, source: &SourceArgs, mark: Mark) -> Result<Task, SourceError> {
    let pools = pool.into_iter().collect();
    Ok(Task::Mark(MarkConfig { source: Source::from_args(source)?, pools, mark }))
}

fn options(args: &PlanningArgs) -> PlanOptions {
    let replace = args.replace.iter().cloned().collect();
    let own_node = own_node(std::env::var(OWN_NODE_ENV).ok());
    PlanOptions { prune: args.prune, adopt: args.adopt, replace, own_node, ..PlanOptions::default() }
}

/// The Node poolctl runs on, from [`OWN_NODE_ENV`]'s value: read once, here, so that the planner
/// and the executor are given it. An empty value names no Node.
pub fn own_node(value: Option<String>) -> Option<String> {
    value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

/// The checks `--skip-preflight` names.
fn skipped(checks: &[Preflight]) -> BTreeSet<PreflightCheck> {
    checks
        .iter()
        .map(|check| match check {
            Preflight::VersionSkew => PreflightCheck::VersionSkew,
        })
        .collect()
}

fn format(output: OutputFormat) -> Format {
    match output {
        OutputFormat::Text => Format::Text,
        OutputFormat::Json => Format::Json,
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn config(args: &[&str]) -> Result<Config, ConfigError> {
        Config::from_cli(Cli::try_parse_from([&["poolctl"], args].concat()).unwrap())
    }

    #[test]
    fn the_command_line_becomes_one_value() {
        let Config { ui, task } =
            config(&["-vv", "--color", "never", "apply", "-s", "pools", "--prune", "--yes"]).unwrap();
        assert_eq!((ui.verbose, ui.color), (2, ColorChoice::Never));
        let Task::Apply(apply) = task else { panic!("{task:?}") };
        assert_eq!(apply.options, PlanOptions { prune: true, retry_stalled: true, ..PlanOptions::default() });
        assert!(apply.yes && apply.plan_file.is_none());
        assert_eq!(apply.source.unwrap().given, "pools");
    }

    #[test]
    fn a_saved_plan_needs_no_source_and_json_without_a_question_needs_yes() {
        let Task::Apply(apply) = config(&["apply", "p.json", "-o", "json"]).unwrap().task else {
            panic!("not apply")
        };
        assert!(apply.source.is_none());
        assert_eq!(apply.format, Format::Json);
        let err = config(&["apply", "-s", "pools", "-o", "json"]).unwrap_err();
        assert_eq!(err.to_string(), "apply -o json asks no question: pass --yes (or apply a saved plan)");
    }

    #[test]
    fn apply_and_watch_skip_the_preflight_checks_they_are_told_to() {
        let skew = BTreeSet::from([PreflightCheck::VersionSkew]);
        let args = ["-s", "pools", "--skip-preflight", "version-skew"];
        let Task::Apply(apply) = config(&[&["apply"][..], &args].concat()).unwrap().task else {
            panic!("not apply")
        };
        assert_eq!(apply.skip_preflight, skew);
        let Task::Watch(watch) = config(&[&["watch"][..], &args].concat()).unwrap().task else {
            panic!("not watch")
        };
        assert_eq!(watch.skip_preflight, skew);
        let Task::Apply(apply) = config(&["apply", "-s", "pools"]).unwrap().task else { panic!("not apply") };
        assert!(apply.skip_preflight.is_empty(), "every check by default");
        // Only the checks there are; plan makes none.
        assert!(Cli::try_parse_from(["poolctl", "apply", "-s", "p", "--skip-preflight", "images"]).is_err());
        assert!(Cli::try_parse_from([&["poolctl", "plan"][..], &args].concat()).is_err());
    }

    #[test]
    fn the_own_node_is_a_name_or_nothing() {
        assert_eq!(own_node(Some("kind-worker\n".to_owned())), Some("kind-worker".to_owned()));
        assert_eq!(own_node(Some("  ".to_owned())), None);
        assert_eq!(own_node(None), None);
    }

    #[test]
    fn periods_are_kept_from_spinning() {
        let Task::Watch(watch) = config(&["watch", "-s", "pools", "--interval", "0s"]).unwrap().task else {
            panic!("not watch")
        };
        assert_eq!(watch.interval, MIN_PERIOD);
        assert!(config(&["plan", "-s", ""]).unwrap_err().to_string().contains("--source is empty"));
    }

    #[test]
    fn a_notify_url_is_checked_without_being_echoed() {
        let ok = config(&["watch", "-s", "pools", "--notify", "https://hooks.example/T0/s3cret"]).unwrap();
        let Task::Watch(watch) = ok.task else { panic!("not watch") };
        assert_eq!(watch.notify.unwrap().target.shown(), "https://hooks.example");
        for bad in ["ftp://hooks.example/s3cret", "s3cret", "http:///s3cret", "slack+ftp://x/s3cret"] {
            let err = config(&["watch", "-s", "pools", "--notify", bad]).unwrap_err().to_string();
            assert!(err.starts_with("--notify: not a notification URL"), "{err}");
            assert!(!err.contains("s3cret"), "{err}");
        }
        let err = config(&["apply", "-s", "p", "--notify", "github://acme/fleet"]).unwrap_err().to_string();
        assert_eq!(err, "--notify github://acme/fleet needs a token: --notify-token-file FILE");
        let args = ["apply", "-s", "p", "--notify", "gitlab://g/p", "--notify-token-file", "t"];
        let Task::Apply(apply) = config(&args).unwrap().task else { panic!("not apply") };
        assert_eq!(apply.notify.unwrap().token_file, Some(PathBuf::from("t")));
    }
}
