//! `leasehold`: the operator CLI for [leasehold](https://docs.rs/leasehold).
//!
//! See who holds which lease, what is paused and how each key's last runs
//! ended (`status`), read a key's run history (`history`), pause and resume a
//! key or a job for the whole fleet (`pause`, `resume`), make a key due now
//! (`trigger`), cap a job's runs at once across the fleet (`limit`), end a
//! tenure so another replica takes over with a higher fence (`revoke`), delete the row of a key no replica registers any more
//! (`forget`), add, update and remove the keys of job kinds for the whole
//! fleet (`add`, `update`, `remove`), create the schema (`migrate`), check a database and this
//! machine's clock (`check`), serve the operator web console on a local
//! address (`console`), and print shell completions (`completions`).
//! `cli/README.md` has example sessions.
//!
//! # Exit codes
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success (also when standard output is closed early, as by `leasehold status \| head -1`) |
//! | 1 | error: database unreachable, schema missing, a failed check, … |
//! | 2 | usage: bad arguments, no database URL, an invalid URL |
//! | 3 | refused: `revoke` of a lease that is held, without `--force`; `forget` of a held lease; `add` of a key that exists |
//! | 4 | not found: `revoke`, `forget` or `trigger` of a key that has no lease row; `resume` of a key or job that is not paused; `history` of a key with neither a lease row nor runs; `update` or `remove` of a key that is not a key of the kind; `limit set` on a name no key has as its job or kind; `limit clear` of a job without a limit |

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod check;
mod console;
mod db;
mod duration;
mod failure;
mod forget;
mod history;
mod keys;
mod limit;
mod ops;
mod out;
mod pause;
mod revoke;
mod runs;
mod status;
mod text;
mod trigger;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::failure::Failure;

/// Operate leasehold's leases in a PostgreSQL database.
///
/// Exit codes: 0 ok (also when standard output is closed early, as by `| head`), 1 error, 2 usage, 3
/// refused (revoke of a held lease without --force, forget of a held lease, add of a key that exists),
/// 4 not found (revoke, forget, trigger or history of a key without a row; resume of something not
/// paused; update or remove of a key that is not a key of the kind; limit set on a job no key has, limit
/// clear of a job without a limit).
///
/// The database: DATABASE_URL or --database-url; without either, the libpq variables (PGHOST, PGPORT,
/// PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE). TLS: sslmode in the URL (or PGSSLMODE), with
/// sslrootcert=PATH for verify-ca and verify-full. Durations take units: 250ms, 10s, 5m, 1h30m. Log
/// lines go to standard error, filtered by RUST_LOG (default leasehold=warn).
#[derive(Debug, Parser)]
#[command(name = "leasehold", version, about, long_about)]
struct Cli {
    /// PostgreSQL URL, e.g. postgres://user@host:5432/app. Prefer the
    /// environment variable for URLs with a password (argv is visible to
    /// other users in `ps`).
    #[arg(
        long,
        env = "DATABASE_URL",
        global = true,
        hide_env_values = true,
        value_name = "URL"
    )]
    database_url: Option<String>,

    /// How long to wait for a database connection before giving up, e.g.
    /// 10s, 1m (at most 1h).
    #[arg(
        long,
        global = true,
        default_value = "10s",
        value_name = "DURATION",
        value_parser = duration::connect_timeout
    )]
    connect_timeout: Duration,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show every lease: holder, fence, expiry, next due time, pause, job and
    /// latest runs, by the server clock; and the pauses in force.
    Status(status::Args),
    /// Show a key's recorded runs, newest first: fence, holder, slot, start,
    /// duration, outcome and error.
    History(history::Args),
    /// Pause a key, or every key of a job, for the whole fleet until
    /// `leasehold resume`.
    ///
    /// No replica claims a paused key, not even for a trigger; slots that
    /// pass meanwhile are missed slots (each job's catch-up policy decides
    /// what runs on resume). Runs in progress finish, unless --cancel: then
    /// each is cancelled at its next renewal (reason `paused`) and released.
    /// Pausing what is paused keeps the first pause (adding --cancel).
    Pause(pause::PauseArgs),
    /// Lift the pause of a key or of a job; overdue keys become claimable at
    /// once. Exits 4 if it is not paused.
    ///
    /// A key paused both by its own name and by its job stays paused until
    /// both are lifted.
    Resume(pause::ResumeArgs),
    /// Make a key due now: the first replica that claims it runs it (a
    /// paused key runs once resumed). Exits 4 if the key has no lease row.
    Trigger(trigger::Args),
    /// Set, clear or list fleet-wide limits: at most N runs of a job (or
    /// kind) at once across every replica.
    ///
    /// A change applies from every replica's next claim, without restarts.
    /// Lowering a limit never stops a run in progress; it only holds new
    /// starts back. `leasehold status` shows each limit's runs in progress,
    /// keys waiting and the longest wait.
    Limit {
        #[command(subcommand)]
        command: limit::Command,
    },
    /// End the current tenure of a lease; the next claim gets a higher fence.
    ///
    /// Without --force, only a free lease (an ex-holder that may wake up
    /// and write is fenced out); a held one exits 3. Exits 4 if the key has
    /// no lease row.
    Revoke(revoke::Args),
    /// Delete the row of a key no replica registers any more, unless its lease is held.
    ///
    /// For keys of a removed tenant or job: the key's schedule and last
    /// holder go; a replica that still registers
    /// the key creates the row again, due at its next slot. Fences stay
    /// monotonic: they come from a sequence, not from the row. A held lease is
    /// refused (exit 3): stop its run, or `leasehold revoke --force KEY`,
    /// then forget it. A key with no row exits 4.
    Forget(forget::Args),
    /// Add a key of a job kind for the whole fleet: every replica that
    /// registers the kind runs it. Exits 3 if the key exists.
    Add(keys::DefineArgs),
    /// Replace a key's arguments and schedule; its next run, wherever it is
    /// claimed, uses them (a run in progress keeps its own). Exits 4 if there
    /// is no such key of the kind.
    Update(keys::DefineArgs),
    /// Remove a key of a job kind: every replica stops it (a run in progress
    /// is cancelled). Exits 4 if there is no such key of the kind.
    Remove(keys::KeyArgs),
    /// Create or upgrade leasehold's tables (safe while replicas run).
    Migrate(db::MigrateArgs),
    /// Check the schema, the server clock against this machine's, and a
    /// claim/renew/release round trip on a scratch key.
    Check(check::Args),
    /// Serve the operator web console (leases, keys, runs, the fleet) until
    /// Ctrl-C.
    ///
    /// Read-only unless a token is set in LEASEHOLD_CONSOLE_TOKEN (or read
    /// with --token-file): then whoever logs in with it may trigger, pause,
    /// resume and revoke, recorded under the name they give. Listens on
    /// loopback only unless --allow-remote (it speaks plain HTTP).
    Console(console::Args),
    /// Print a completion script for SHELL on standard output (no database).
    ///
    /// bash: `leasehold completions bash > ~/.local/share/bash-completion/completions/leasehold`;
    /// zsh: `leasehold completions zsh > "${fpath[1]}/_leasehold"`; fish:
    /// `leasehold completions fish > ~/.config/fish/completions/leasehold.fish`.
    Completions {
        /// bash, elvish, fish, powershell or zsh.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => return Failure::error(format!("cannot start the async runtime: {e}")).exit(),
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.exit(),
    }
}

/// The filter when `RUST_LOG` is unset: the library's warnings and errors
/// (an action whose outcome could not be recorded, …), nothing else.
const DEFAULT_LOG: &str = "leasehold=warn";

/// Sends the library's log lines (`tracing`) to standard error, filtered by
/// `RUST_LOG` (`RUST_LOG=leasehold=debug`, `RUST_LOG=sqlx=info,leasehold=info`);
/// standard output stays the command's own. A `RUST_LOG` that is not a
/// filter is named on standard error and the default is used.
fn init_logging() {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;

    let (filter, problem) = match std::env::var("RUST_LOG") {
        Ok(value) if value.trim().is_empty() => (EnvFilter::new(DEFAULT_LOG), None),
        Ok(value) => match EnvFilter::try_new(&value) {
            Ok(filter) => (filter, None),
            Err(e) => (
                EnvFilter::new(DEFAULT_LOG),
                Some(format!(
                    "RUST_LOG={} is not a log filter ({}); using {DEFAULT_LOG}. Write it as \
                     TARGET=LEVEL[,TARGET=LEVEL…], e.g. RUST_LOG=leasehold=debug",
                    text::cell(&text::cut(&value, 200)),
                    text::one_line(&text::cut(&e.to_string(), 300))
                )),
            ),
        },
        Err(std::env::VarError::NotPresent) => (EnvFilter::new(DEFAULT_LOG), None),
        Err(std::env::VarError::NotUnicode(_)) => (
            EnvFilter::new(DEFAULT_LOG),
            Some(format!(
                "RUST_LOG is not valid UTF-8; using {DEFAULT_LOG}. Write it as TARGET=LEVEL, e.g. \
                 RUST_LOG=leasehold=debug"
            )),
        ),
    };
    // Another subscriber cannot be installed already: nothing else sets one.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .log_internal_errors(false)
        .try_init();
    if let Some(problem) = problem {
        use std::io::Write;
        let _ = writeln!(std::io::stderr().lock(), "leasehold: {problem}");
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    // Every argument is checked before connecting; `add` and `update`
    // build the key they send as they check it.
    let mut new_key = None;
    match &cli.command {
        Command::Completions { shell } => return completions(*shell),
        Command::Revoke(args) => args.validate()?,
        Command::History(args) => args.validate()?,
        Command::Pause(args) => args.validate()?,
        Command::Resume(args) => args.validate()?,
        Command::Limit { command } => command.validate()?,
        Command::Console(args) => args.validate()?,
        Command::Add(args) | Command::Update(args) => new_key = Some(args.checked()?),
        Command::Remove(args) => args.validate()?,
        // Their keys were checked as they were parsed (`failure::KeyArg`).
        Command::Forget(_) | Command::Trigger(_) => {}
        Command::Status(_) | Command::Migrate(_) | Command::Check(_) => {}
    }
    let target = match cli.database_url.as_deref() {
        Some(url) => db::Target::parse(url)?,
        None => db::Target::from_pg_vars()?.ok_or_else(|| {
            Failure::usage(
                "no database: set DATABASE_URL or pass --database-url postgres://user@host:5432/db, or set the \
                 libpq variables (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE)",
            )
        })?,
    };
    let db = target.connect(cli.connect_timeout).await?;
    match cli.command {
        Command::Status(args) => status::run(&db, &args).await,
        Command::Revoke(args) => revoke::run(&db, &args).await,
        Command::Forget(args) => forget::run(&db, &args).await,
        Command::History(args) => history::run(&db, &args).await,
        Command::Pause(args) => pause::pause(&db, &args).await,
        Command::Resume(args) => pause::resume(&db, &args).await,
        Command::Trigger(args) => trigger::run(&db, &args).await,
        Command::Limit { command } => command.run(&db).await,
        Command::Add(args) => keys::add(&db, &args, checked(new_key)?).await,
        Command::Update(args) => keys::update(&db, &args, checked(new_key)?).await,
        Command::Remove(args) => keys::remove(&db, &args).await,
        Command::Migrate(args) => db.migrate(&args).await,
        Command::Check(args) => check::run(&db, &args).await,
        Command::Console(args) => console::run(&db, &args).await,
        Command::Completions { shell } => completions(shell),
    }
}

/// The key `add` or `update` checked before connecting.
fn checked(new_key: Option<leasehold::NewKey>) -> Result<leasehold::NewKey, Failure> {
    new_key.ok_or_else(|| Failure::error("internal error: the key to send was not checked; please report it"))
}

/// Writes the completion script for `shell`, generated from the same
/// definitions that parse the arguments (so it cannot drift from them).
fn completions(shell: clap_complete::Shell) -> Result<(), Failure> {
    use clap::CommandFactory;
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "leasehold", &mut script);
    out::print(String::from_utf8_lossy(&script))
}
