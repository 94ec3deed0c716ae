//! The `leasehold` binary against a real PostgreSQL (the testkit's
//! throwaway cluster, or `DATABASE_URL`'s server).

// Under cli/ so that cargo does not take it for a test binary of its own.
#[path = "cli/check.rs"]
mod check;
#[path = "cli/console.rs"]
mod console;
#[path = "cli/conventions.rs"]
mod conventions;
#[path = "cli/errors.rs"]
mod errors;
#[path = "cli/forget.rs"]
mod forget;
#[path = "cli/history.rs"]
mod history;
#[path = "cli/key_life.rs"]
mod key_life;
#[path = "cli/keys.rs"]
mod keys;
#[path = "cli/limit.rs"]
mod limit;
#[path = "cli/output.rs"]
mod output;
#[path = "cli/pause.rs"]
mod pause;
#[path = "cli/revoke.rs"]
mod revoke;
#[path = "cli/status.rs"]
mod status;
#[path = "cli/tls.rs"]
mod tls;
#[path = "cli/trigger.rs"]
mod trigger;

use std::process::Output;
use std::time::Duration;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use leasehold::{
    CancelReason, Error, FenceGuard, FencedJob, JobError, JobSettings, Runtime, Schedule,
    store::{Claim, Due, LeaseStore, Renewal},
};
use leasehold_testkit::TestDb;
use tokio::sync::mpsc;

const LONG: Duration = Duration::from_secs(600);

/// A URL for the test database. With `DATABASE_URL` set, its URL with the
/// database swapped (so a password in it carries over); otherwise built from
/// the throwaway cluster's options (no password there).
fn url(db: &TestDb) -> String {
    if let Ok(server) = std::env::var("DATABASE_URL") {
        let (base, query) = match server.split_once('?') {
            Some((base, query)) => (base, format!("?{query}")),
            None => (server.as_str(), String::new()),
        };
        let scheme_end = base.find("://").map_or(0, |i| i + 3);
        let authority_end = base[scheme_end..].find('/').map_or(base.len(), |i| scheme_end + i);
        return format!("{}/{}{query}", &base[..authority_end], db.name);
    }
    let o = &db.options;
    format!(
        "postgres://{}@{}:{}/{}",
        o.get_username(),
        o.get_host(),
        o.get_port(),
        o.get_database().unwrap_or(&db.name)
    )
}

async fn migrated_db() -> TestDb {
    let db = leasehold_testkit::test_db().await;
    leasehold::migrate(&db.pool).await.expect("migrate");
    db
}

/// Runs the binary with `DATABASE_URL` set to `url` (or removed when `None`).
async fn leasehold(url: Option<&str>, args: &[&str]) -> Output {
    leasehold_env(url, args, &[]).await
}

/// The binary, with `DATABASE_URL` set to `url` (or removed when `None`)
/// and none of the variables that would change what it prints or where it
/// connects from the test's own environment (`COLUMNS`, `RUST_LOG`, the
/// libpq `PG*` ones).
fn command(url: Option<&str>, args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"));
    cmd.args(args);
    // Tables cut their last column to the terminal's width when it is known:
    // not here, so the tests see the default.
    cmd.env_remove("COLUMNS");
    cmd.env_remove("RUST_LOG");
    for var in [
        "PGHOST",
        "PGPORT",
        "PGUSER",
        "PGPASSWORD",
        "PGDATABASE",
        "PGSSLMODE",
        "PGSSLROOTCERT",
    ] {
        cmd.env_remove(var);
    }
    match url {
        Some(url) => cmd.env("DATABASE_URL", url),
        None => cmd.env_remove("DATABASE_URL"),
    };
    cmd
}

/// [`leasehold`] with these variables set.
async fn leasehold_env(url: Option<&str>, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = command(url, args);
    cmd.envs(env.iter().copied());
    tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("the CLI finished within 60s")
        .expect("the CLI binary runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[track_caller]
fn assert_exit(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "exit status\n--- stdout\n{}\n--- stderr\n{}",
        stdout(out),
        stderr(out)
    );
}

fn acquired(claim: Claim) -> leasehold::store::Lease {
    match claim {
        Claim::Acquired(lease) => lease,
        other => panic!("expected to acquire, got {other:?}"),
    }
}

/// A row for `key` whose lease `holder` claimed and released: free, with a
/// past fence. Returns that fence.
async fn released_row(store: &LeaseStore, key: &str, holder: &str) -> i64 {
    let lease = acquired(store.claim(key, holder, LONG).await.unwrap());
    assert!(store.release(key, holder, lease.fence).await.unwrap());
    lease.fence
}

/// The table row of `key` in `status` output, split into cells.
fn table_row(out: &str, key: &str) -> Vec<String> {
    let line = out
        .lines()
        .find(|l| l.split("  ").next() == Some(key) || l.starts_with(&format!("{key} ")))
        .unwrap_or_else(|| panic!("no row for {key} in\n{out}"));
    line.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .collect()
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("invalid JSON ({e}):\n{}", stdout(out)))
}

fn is_paused(claim: &Claim) -> bool {
    matches!(claim, Claim::Paused { .. })
}

/// A job that hands its guard to the test and waits to be cancelled (then
/// fails with the reason, unless it was for shutdown).
struct Holding {
    guards: mpsc::UnboundedSender<FenceGuard>,
}

impl FencedJob for Holding {
    fn name(&self) -> &str {
        "held-job"
    }

    fn settings(&self) -> JobSettings {
        JobSettings::new(Schedule::Manual).lease(Duration::from_secs(10))
    }

    async fn run(&self, guard: FenceGuard) -> Result<(), JobError> {
        let _ = self.guards.send(guard.clone());
        guard.cancelled().await;
        // Stopped, not done: the history records it as cancelled (with
        // the reason), not as succeeded.
        guard.check()?;
        Ok(())
    }
}

async fn running_job(db: &TestDb) -> (Runtime, mpsc::UnboundedReceiver<FenceGuard>, FenceGuard) {
    let (tx, mut guards) = mpsc::unbounded_channel();
    let rt = Runtime::builder(db.pool.clone())
        .holder("a")
        .poll_interval(Duration::from_millis(100))
        .register(Holding { guards: tx })
        .start()
        .await
        .expect("runtime starts");
    rt.trigger("held-job").await.expect("trigger");
    let guard = tokio::time::timeout(Duration::from_secs(10), guards.recv())
        .await
        .expect("the job starts within 10s")
        .expect("a guard");
    (rt, guards, guard)
}
