//! The command line, as clap types only: what the user typed, before it is turned into work.

// Doc comments here are --help texts, where backticks would be printed as they are.
#![allow(clippy::doc_markdown)]

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::spec::Duration;
pub use crate::style::ColorChoice;

/// The exit statuses, shown under every command's `--help`.
const EXIT_STATUS: &str = "Exit status: 0 success (plan --detailed-exitcode: no changes), 1 error, \
                           2 changes pending (plan --detailed-exitcode), 130 stopped at once by a \
                           second Ctrl-C or SIGTERM (two within 0.5s count as one).";

/// Reconcile pools of Docker containers that serve as Kubernetes nodes.
///
/// A pool file (YAML, in a directory or a Git repository) declares N identical containers.
/// `poolctl plan` shows what it would take to make Docker (and the cluster) match it;
/// `poolctl apply` does it, creating new instances first and retiring old ones in the safe
/// order: cordon, drain, stop the container, delete the Node, remove the container.
#[derive(Debug, Parser)]
#[command(
    name = "poolctl",
    version,
    propagate_version = true,
    max_term_width = 100,
    after_help = EXIT_STATUS
)]
pub struct Cli {
    /// More log output on stderr (-v: debug, -vv: trace). RUST_LOG overrides it.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// The format of log lines on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// When to colour the output (plans, status, progress and logs). `auto`: on a terminal,
    /// unless NO_COLOR is set.
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show what apply would do, without changing anything.
    #[command(after_help = EXIT_STATUS)]
    Plan(PlanArgs),
    /// Compute the plan, show it, and carry it out; or carry out a plan saved with `plan --out`.
    ///
    /// Asks for confirmation unless --yes is given. Stops at the first failure with the old
    /// instances still running; running apply again continues from what the world shows.
    ///
    /// With a PLAN_FILE, carries out exactly that plan, new instance names included, without
    /// asking (it was reviewed when it was made), and refuses it, changing nothing, when the
    /// source or the world changed since it was made.
    #[command(after_help = EXIT_STATUS, mut_arg("source", |a| a.required(false).required_unless_present("plan_file")))]
    Apply(ApplyArgs),
    /// Keep the world equal to the source: reconcile now, then whenever the source changes or
    /// the world drifts, until interrupted.
    ///
    /// Each reconcile prints its plan and applies it without asking (--dry-run: prints only).
    /// A directory is watched for edits; a Git source is fetched every --interval, and a local
    /// repository's refs are watched so that a commit is seen at once. Containers of the pool
    /// that die or are removed are replaced at once; the world is re-read every --resync. A bad
    /// spec or an unreachable source or daemon is reported and retried, keeping the last good
    /// state. The first Ctrl-C/SIGTERM stops at the next safe step boundary and exits 0; a
    /// second exits at once.
    #[command(after_help = EXIT_STATUS)]
    Watch(WatchArgs),
    /// Show each pool of the source as it is now: its instances (template, container, uptime,
    /// Node), its lock, and whether it is in sync.
    ///
    /// Reads only: takes no lock and changes nothing. -w keeps it up to date until Ctrl-C.
    #[command(after_help = EXIT_STATUS)]
    Status(StatusArgs),
    /// Show a pool's rollout history, as `kubectl rollout history` does: each rollout of a
    /// template (revision, template hash, commit or source, start, end, result).
    ///
    /// The world keeps the history (records beside the pool's instances, on its Docker
    /// endpoint), the last 10 revisions of each pool. Reads only: takes no lock and changes
    /// nothing.
    #[command(after_help = EXIT_STATUS)]
    History(HistoryArgs),
    /// Check a source's pool files offline (no Docker, no cluster); exit 1 with every error.
    #[command(after_help = EXIT_STATUS)]
    Validate(SourceArgs),
    /// Break the lock of a pool whose holder is gone, after confirmation.
    ///
    /// An apply or a watch reconcile holds the lock of each pool it changes, so that one run at
    /// a time changes a pool. A run killed outright leaves its lock behind until it expires (15s
    /// after its last renewal); this breaks it at once. A run whose lock is broken while it
    /// still runs stops at its next step boundary.
    Unlock(UnlockArgs),
    /// Suspend a pool: no apply or watch rolls it out or remediates it until `poolctl resume`.
    ///
    /// A stop button that is not a commit: recorded in the world (a pool of Nodes on its Lease,
    /// a container-only pool beside its instances on its Docker endpoint), so that every watch
    /// replica honours it at once. Plan and status say who suspended it, when and why; apply
    /// refuses it unless --ignore-suspend.
    #[command(after_help = EXIT_STATUS)]
    Suspend(SuspendArgs),
    /// Resume a pool that `poolctl suspend` suspended: watch rolls it again at once.
    #[command(after_help = EXIT_STATUS)]
    Resume(PoolArgs),
    /// Promote a pool's canaries: the rest of the pool rolls to their template.
    ///
    /// With spec.rollout.canary, a new template first reaches that many new instances, and the
    /// rollout holds there. The promotion is recorded in the world for the template the canaries
    /// run, so that every watch replica lets the rollout go on (at once: a reconcile is
    /// requested too); a later template needs a promotion of its own.
    #[command(
        after_help = EXIT_STATUS,
        mut_arg("pool", |a| a.help("The pool whose canaries to promote")),
        mut_arg("all", |a| a.help(
            "Every pool of the source whose canaries wait for promotion; the others are left as they are"
        )),
    )]
    Promote(PoolOrAllArgs),
    /// Ask watch to reconcile a pool now, without waiting for its next fetch or resync.
    ///
    /// The request is recorded in the world; the watch replica that acts on the pool takes it
    /// at once (within a couple of seconds, whatever its --resync) and removes it.
    #[command(after_help = EXIT_STATUS)]
    Reconcile(PoolOrAllArgs),
    /// Print the JSON Schema of the pool file.
    #[command(after_help = EXIT_STATUS)]
    Schema,
    /// Print poolctl's version.
    #[command(after_help = EXIT_STATUS)]
    Version {
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = OutputFormat::Text)]
        output: OutputFormat,
    },
    /// Print a shell completion script, e.g. `poolctl completions bash > /etc/bash_completion.d/poolctl`.
    #[command(after_help = EXIT_STATUS)]
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
}

/// Where the pool files are.
#[derive(Debug, Clone, Default, Args)]
pub struct SourceArgs {
    /// A pool file, a directory of them, or a Git repository (a local repository path with
    /// --ref, or a URL: file://, https://, ssh://, git@host:path).
    // An Option only so that `apply PLAN_FILE` may leave it out (the file names its source);
    // every other command requires it.
    #[arg(short, long, value_name = "PATH|URL", required = true)]
    pub source: Option<String>,

    /// For a Git source: the branch, tag or commit to read (default: the remote's HEAD).
    /// Giving --ref makes a local path a Git source.
    #[arg(long = "ref", value_name = "REF")]
    pub reference: Option<String>,

    /// The file or folder to read inside the repository, or below the source directory
    /// (default: all of it).
    #[arg(long, value_name = "PATH")]
    pub path: Option<String>,

    /// Accept a source that declares no pool (a repository emptied on purpose). Without it, a
    /// source with no pool document is an error: the wrong folder or a typo in --path must not
    /// read as "nothing to do".
    #[arg(long)]
    pub allow_empty: bool,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub source: SourceArgs,

    /// Output format of the plan.
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,

    /// Exit 0 when there are no changes, 2 when there are, 1 on error.
    #[arg(long)]
    pub detailed_exitcode: bool,

    /// Accepted so that `--dry-run` works on every command: plan never changes anything.
    #[arg(long)]
    pub dry_run: bool,

    /// Also save the plan to FILE (the document `-o json` prints), for `poolctl apply FILE` to
    /// carry out exactly.
    #[arg(long, value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,

    /// Plan only this pool of the source (repeatable), as Terraform's -target: the others are
    /// left out, neither shown nor changed.
    #[arg(long = "pool", value_name = "NAME")]
    pub pools: Vec<String>,

    /// Plan as `apply --ignore-windows` does: disrupt instances although the pools' disruption
    /// windows (spec.disruption.windows) hold that back now, naming each window overridden. A
    /// plan saved with --out keeps the choice.
    #[arg(long)]
    pub ignore_windows: bool,

    #[command(flatten)]
    pub planning: PlanningArgs,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub source: SourceArgs,

    /// Output format.
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,

    /// Keep watching: observe again every --interval and on Docker events, and show the status
    /// again (a terminal is redrawn; a pipe gets each status that changed).
    #[arg(short, long)]
    pub watch: bool,

    /// With -w: how often to observe again.
    #[arg(long, value_name = "DURATION", default_value = "2s")]
    pub interval: Duration,

    /// Show only this pool of the source (repeatable).
    #[arg(long = "pool", value_name = "NAME")]
    pub pools: Vec<String>,
}

#[derive(Debug, Args)]
// Each bool is a flag a user types: clap's way of saying a switch.
#[allow(clippy::struct_excessive_bools)]
pub struct ApplyArgs {
    /// A plan saved with `poolctl plan --out FILE`: carry out exactly that plan. --source may
    /// then be left out (the file names it).
    #[arg(value_name = "PLAN_FILE", conflicts_with_all = ["dry_run", "prune", "adopt"])]
    pub plan_file: Option<std::path::PathBuf>,

    #[command(flatten)]
    pub source: SourceArgs,

    /// Do not ask for confirmation.
    #[arg(short, long)]
    pub yes: bool,

    /// Print the plan and stop, changing nothing (as `poolctl plan` does).
    #[arg(long, conflicts_with = "yes")]
    pub dry_run: bool,

    /// Output format: `json` writes one JSON object per line: the plan, then each step's
    /// start, waits, done or failed (with durations), then the end (needs --yes or a plan file:
    /// there is no question in JSON).
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,

    /// How long to wait for the lock of a pool that another apply or watch is changing
    /// (default: fail at once, naming the holder).
    #[arg(long, value_name = "DURATION", default_value = "0s")]
    pub lock_timeout: Duration,

    #[command(flatten)]
    pub notify: NotifyArgs,

    /// Act only on this pool of the source (repeatable), as Terraform's -target: the others are
    /// left out, neither shown nor changed.
    #[arg(long = "pool", value_name = "NAME", conflicts_with = "plan_file")]
    pub pools: Vec<String>,

    /// Roll this pool back (repeatable) to the last template that was rolled out completely,
    /// from its history (`poolctl history POOL`), as failureAction: rollback does when a
    /// rollout stalls. The pool stays there until the source changes or an apply without
    /// --rollback tries the source's template again.
    #[arg(long, value_name = "POOL", conflicts_with = "plan_file")]
    pub rollback: Vec<String>,

    /// Skip this preflight check (repeatable). With version-skew, new Nodes are created even
    /// when their kubelet (as the image's tag or its poolctl.dev/kubelet-version label says) is
    /// newer than the API server, or older than Kubernetes' version skew policy allows.
    #[arg(long, value_enum, value_name = "CHECK")]
    pub skip_preflight: Vec<Preflight>,

    /// Disrupt instances although the pools' disruption windows (spec.disruption.windows) hold
    /// that back now: the plan still names each window it overrides.
    #[arg(long, conflicts_with = "plan_file")]
    pub ignore_windows: bool,

    /// Roll out and remediate the pools that `poolctl suspend` suspended all the same (they
    /// stay suspended for watch). Without it, apply refuses a suspended pool that has steps.
    #[arg(long, conflicts_with = "plan_file")]
    pub ignore_suspend: bool,

    #[command(flatten)]
    pub planning: PlanningArgs,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// The pool whose history to show.
    #[arg(value_name = "POOL")]
    pub pool: String,

    /// The source that declares the pool (it says which Docker endpoint the pool lives on).
    #[command(flatten)]
    pub source: SourceArgs,

    /// Output format.
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

#[derive(Debug, Args)]
pub struct SuspendArgs {
    /// The pool to suspend.
    #[arg(value_name = "POOL")]
    pub pool: String,

    /// The source that declares the pool (it says on which Docker endpoint the pool lives).
    #[command(flatten)]
    pub source: SourceArgs,

    /// Why, for whoever finds the pool suspended (shown by plan and status).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
}

#[derive(Debug, Args)]
pub struct PoolArgs {
    /// The pool.
    #[arg(value_name = "POOL")]
    pub pool: String,

    /// The source that declares the pool (it says on which Docker endpoint the pool lives).
    #[command(flatten)]
    pub source: SourceArgs,
}

/// One pool, or `--all`: what `reconcile` and `promote` act on. The words of each command's
/// `--help` are its own (`mut_arg` on the command).
#[derive(Debug, Args)]
pub struct PoolOrAllArgs {
    /// The pool to reconcile now.
    #[arg(value_name = "POOL", required_unless_present = "all", conflicts_with = "all")]
    pub pool: Option<String>,

    /// Every pool the source declares.
    #[arg(long)]
    pub all: bool,

    /// The source that declares the pool (it says on which Docker endpoint the pool lives).
    #[command(flatten)]
    pub source: SourceArgs,
}

#[derive(Debug, Args)]
pub struct UnlockArgs {
    /// The pool whose lock to break.
    #[arg(value_name = "POOL")]
    pub pool: String,

    /// The source that declares the pool (it says where a pool of Nodes keeps its lock).
    #[command(flatten)]
    pub source: SourceArgs,

    /// Do not ask for confirmation.
    #[arg(short, long)]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    #[command(flatten)]
    pub source: SourceArgs,

    /// For a Git source: how often to fetch.
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub interval: Duration,

    /// How often to re-read the world to correct drift (Docker events act at once besides).
    #[arg(long, value_name = "DURATION", default_value = "60s")]
    pub resync: Duration,

    /// Print each plan, apply nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Serve /metrics (Prometheus), /healthz and /readyz on this address, e.g.
    /// 127.0.0.1:9464 (0.0.0.0:9464 in a Pod). Off by default.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,

    /// With --listen, also serve push receivers at POST /hooks/github (X-Hub-Signature-256),
    /// /hooks/gitlab (X-Gitlab-Token) and /hooks/generic (X-Signature: sha256=HMAC), which
    /// make watch fetch the source at once; FILE holds the secret the senders share (the
    /// variable POOLCTL_HOOK_SECRET may hold it instead). Without a secret there are no
    /// receivers.
    #[arg(long, value_name = "FILE", requires = "listen")]
    pub hook_secret: Option<std::path::PathBuf>,

    #[command(flatten)]
    pub notify: NotifyArgs,

    /// Skip this preflight check (repeatable). With version-skew, new Nodes are created even
    /// when their kubelet (as the image's tag or its poolctl.dev/kubelet-version label says) is
    /// newer than the API server, or older than Kubernetes' version skew policy allows.
    #[arg(long, value_enum, value_name = "CHECK")]
    pub skip_preflight: Vec<Preflight>,

    /// Reconcile at most this many pools at once; the others wait their turn. Each pool is
    /// reconciled on its own, so a long rollout of one never holds up another. No bound by
    /// default.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub max_concurrent_pools: Option<u16>,

    #[command(flatten)]
    pub planning: PlanningArgs,
}

/// Where apply and watch tell each pool's rollout.
#[derive(Debug, Clone, Default, Args)]
pub struct NotifyArgs {
    /// Tell each pool's rollout (started, succeeded, failed) to URL: http(s)://... (a JSON
    /// document, as Flux's generic webhook), generic-hmac+https://... (the same, signed:
    /// X-Signature: sha256=HMAC), slack+https://... (a Slack incoming webhook),
    /// github://OWNER/REPO or gitlab://PROJECT (a commit status poolctl/POOL on the source's
    /// commit; ?api=URL for GitHub Enterprise or a self-managed GitLab). Retried a few times,
    /// never holding up the rollout; never printed whole, as it often holds a token.
    #[arg(long, value_name = "URL", env = "POOLCTL_NOTIFY_URL", hide_env_values = true)]
    pub notify: Option<String>,

    /// The file that holds the token of --notify: the API token of github:// and gitlab://,
    /// the key of generic-hmac+.
    #[arg(long, value_name = "FILE", requires = "notify")]
    pub notify_token_file: Option<std::path::PathBuf>,
}

/// Choices that change what the plan does, shared by plan, apply and watch.
#[derive(Debug, Args)]
pub struct PlanningArgs {
    /// Replace this instance although it is current, surge first, through the whole safe
    /// retirement (repeatable), as `terraform apply -replace`. A Node labelled
    /// poolctl.dev/replace=true is replaced the same way, by apply and watch.
    #[arg(long, value_name = "INSTANCE")]
    pub replace: Vec<String>,

    /// Also retire pools that this source created and no longer declares.
    #[arg(long)]
    pub prune: bool,

    /// Take over a declared pool whose containers were created from another source (another
    /// directory, repository or path). Without it such a pool is left alone.
    #[arg(long)]
    pub adopt: bool,
}

/// A preflight check of apply and watch that `--skip-preflight` turns off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Preflight {
    /// The kubelet of new Nodes against the API server's version.
    VersionSkew,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[cfg(test)]
mod tests {
    /// clap's own checks of the whole command line: every `mut_arg` names an argument the
    /// command has, no two arguments clash.
    #[test]
    fn the_command_line_is_well_formed() {
        <super::Cli as clap::CommandFactory>::command().debug_assert();
    }
}
