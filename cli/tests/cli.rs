//! The `leasehold` binary against a real PostgreSQL (the testkit's
//! throwaway cluster, or `DATABASE_URL`'s server).

// Under cli/ so that cargo does not take it for a test binary of its own.
#[path = "cli/console.rs"]
mod console;
#[path = "cli/keys.rs"]
mod keys;

use std::process::Output;
use std::time::Duration;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use leasehold::{
    CancelReason, Claim, Due, Error, FenceGuard, FencedJob, JobError, JobSettings, LeaseStore, Renewal, Runtime,
    Schedule,
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
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"));
    cmd.args(args);
    // Tables cut their last column to the terminal's width when it is known:
    // not here, so the tests see the default.
    cmd.env_remove("COLUMNS");
    match url {
        Some(url) => cmd.env("DATABASE_URL", url),
        None => cmd.env_remove("DATABASE_URL"),
    };
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

fn acquired(claim: Claim) -> leasehold::Lease {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_held_and_free_leases_as_a_table_and_as_json() {
    let db = migrated_db().await;
    let url = url(&db);
    let store = LeaseStore::new(db.pool.clone());
    let alpha = acquired(store.claim("alpha", "web-1", LONG).await.unwrap());
    let beta = acquired(store.claim("beta", "web-2", LONG).await.unwrap());
    assert!(store.release("beta", "web-2", beta.fence).await.unwrap());
    acquired(store.claim("other:gamma", "web-3", LONG).await.unwrap());

    let out = leasehold(Some(&url), &["status"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("3 leases (2 held, 1 free)"), "{text}");
    let header = text.lines().find(|l| l.starts_with("KEY")).expect("a header");
    for column in ["STATE", "HOLDER", "FENCE", "ACQUIRED", "EXPIRES", "NEXT DUE"] {
        assert!(header.contains(column), "{header}");
    }
    let row = table_row(&text, "alpha");
    assert_eq!(
        &row[..4],
        ["alpha", "held", "web-1", &alpha.fence.to_string()],
        "{text}"
    );
    assert!(row[5].starts_with("in 9m") || row[5].starts_with("in 10m"), "{row:?}");
    assert_eq!(row[6], "now", "never scheduled: due now");
    let row = table_row(&text, "beta");
    assert_eq!(&row[..4], ["beta", "free", "web-2", &beta.fence.to_string()], "{text}");
    assert!(row[5].starts_with("expired ") && row[5].ends_with(" ago"), "{row:?}");
    // Columns line up: every row's FENCE column ends where the header's does.
    let fence_end = header.find("FENCE").unwrap() + "FENCE".len();
    for key in ["alpha", "beta", "other:gamma"] {
        let line = text.lines().find(|l| l.starts_with(key)).unwrap();
        let fence = table_row(&text, key)[3].clone();
        assert_eq!(line[..fence_end].trim_end(), line[..fence_end].to_owned(), "{text}");
        assert!(line[..fence_end].ends_with(&fence), "{text}");
    }

    let out = leasehold(Some(&url), &["status", "--json"]).await;
    assert_exit(&out, 0);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert!(doc["server_now"].is_string(), "{doc}");
    let leases = doc["leases"].as_array().expect("a leases array");
    assert_eq!(leases.len(), 3);
    let a = &leases[0];
    assert_eq!(a["key"], "alpha");
    assert_eq!(a["holder"], "web-1");
    assert_eq!(a["fence"], alpha.fence);
    assert_eq!(a["state"], "held");
    assert!(a["expires_in_seconds"].as_f64().unwrap() > 500.0, "{a}");
    assert!(a["next_due_at"].is_null() && a["due_in_seconds"].is_null(), "{a}");
    assert!(a["acquired_at"].is_string() && a["expires_at"].is_string(), "{a}");
    let b = &leases[1];
    assert_eq!((b["key"].as_str(), b["state"].as_str()), (Some("beta"), Some("free")));
    assert!(b["expires_in_seconds"].as_f64().unwrap() <= 0.0, "{b}");

    let out = leasehold(Some(&url), &["status", "--json", "--prefix", "other:"]).await;
    assert_exit(&out, 0);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let keys: Vec<&str> = doc["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["other:gamma"]);

    // LIKE wildcards in a prefix are literal.
    let out = leasehold(Some(&url), &["status", "--prefix", "%"]).await;
    assert_exit(&out, 0);
    assert!(stdout(&out).contains("0 leases with prefix \"%\""), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_of_a_held_lease_without_force_is_refused_and_changes_nothing() {
    let db = migrated_db().await;
    let store = LeaseStore::new(db.pool.clone());
    let lease = acquired(store.claim("nightly", "web-1", LONG).await.unwrap());
    let before = store.get("nightly").await.unwrap().unwrap();

    let out = leasehold(Some(&url(&db)), &["release", "nightly"]).await;
    assert_exit(&out, 3);
    let err = stderr(&out);
    assert!(err.contains("held by web-1") && err.contains("--force"), "{err}");
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));

    let after = store.get("nightly").await.unwrap().unwrap();
    assert_eq!(
        (after.holder.as_str(), after.fence, after.acquired_at, after.expires_at),
        (
            before.holder.as_str(),
            before.fence,
            before.acquired_at,
            before.expires_at
        )
    );
    let fence_rows: i64 = sqlx::query_scalar("SELECT count(*) FROM leasehold_fence")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(fence_rows, 0, "a refused release raises no fence");
    assert!(matches!(store.renew(&lease, LONG).await.unwrap(), Renewal::Renewed(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_release_ends_the_tenure_and_the_next_claim_gets_a_higher_fence() {
    let db = migrated_db().await;
    let store = LeaseStore::new(db.pool.clone());
    let lease = acquired(store.claim("nightly", "web-1", LONG).await.unwrap());

    let out = leasehold(
        Some(&url(&db)),
        &["release", "nightly", "--force", "--resource", "ledger"],
    )
    .await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    let new_fence: i64 = store.get("nightly").await.unwrap().unwrap().fence;
    assert!(new_fence > lease.fence);
    assert!(
        text.contains(&format!(
            "released \"nightly\": holder web-1 lost fence {}",
            lease.fence
        )) && text.contains(&format!("new fence {new_fence}")),
        "{text}"
    );

    // The old holder's renewal and late release find nothing.
    assert_eq!(store.renew(&lease, LONG).await.unwrap(), Renewal::Lost);
    assert!(!store.release("nightly", "web-1", lease.fence).await.unwrap());
    let info = store.get("nightly").await.unwrap().unwrap();
    assert!(!info.is_held(), "released: free");
    // The key's resource and the named one are raised to the new fence.
    let fences: Vec<(String, i64)> =
        sqlx::query_as("SELECT resource, last_fence FROM leasehold_fence ORDER BY resource")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        fences,
        [("ledger".to_owned(), new_fence), ("nightly".to_owned(), new_fence)]
    );

    // Any holder, the old one included, now claims with a higher fence.
    let next = acquired(store.claim("nightly", "web-2", LONG).await.unwrap());
    assert!(next.fence > new_fence, "{} > {new_fence}", next.fence);
    assert_eq!(next.holder, "web-2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_of_a_free_lease_needs_no_force_and_still_fences_out_the_last_holder() {
    let db = migrated_db().await;
    let store = LeaseStore::new(db.pool.clone());
    let lease = acquired(store.claim("hourly", "web-1", LONG).await.unwrap());
    // The holder stalls past its lease: expired on the server, row intact.
    store.expire_for_test("hourly").await.unwrap();
    let expired_at = store.get("hourly").await.unwrap().unwrap().expires_at;

    let out = leasehold(Some(&url(&db)), &["release", "hourly"]).await;
    assert_exit(&out, 0);
    assert!(stdout(&out).contains("was already free"), "{}", stdout(&out));
    let info = store.get("hourly").await.unwrap().unwrap();
    assert!(info.fence > lease.fence);
    assert_eq!(info.expires_at, expired_at, "a free lease keeps its expiry");
    let raised: i64 = sqlx::query_scalar("SELECT last_fence FROM leasehold_fence WHERE resource = 'hourly'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(raised, info.fence);
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

/// The key scenario: after `release --force`, the running job's next
/// fenced write is rejected at once, before any newer run has written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_jobs_next_fenced_write_fails_with_stale_fence_after_forced_release() {
    let db = migrated_db().await;
    let (rt, mut guards, guard) = running_job(&db).await;
    // The run can write before the release.
    guard
        .begin_fenced(&db.pool)
        .await
        .expect("fenced tx")
        .commit()
        .await
        .unwrap();

    let out = leasehold(Some(&url(&db)), &["release", "held-job"]).await;
    assert_exit(&out, 3);
    assert!(stderr(&out).contains("held by a"), "{}", stderr(&out));
    let out = leasehold(Some(&url(&db)), &["release", "held-job", "--force"]).await;
    assert_exit(&out, 0);

    let err = guard
        .begin_fenced(&db.pool)
        .await
        .expect_err("a stale run writes nothing");
    assert!(
        matches!(&err, Error::StaleFence { fence, newer, .. } if *fence == guard.fence() && *newer > guard.fence()),
        "{err:?}"
    );
    assert!(guard.is_cancelled(), "a stale fence cancels the run");

    // The job is still due, so a new run starts with a higher fence and
    // its fenced writes go through.
    let next = tokio::time::timeout(Duration::from_secs(10), guards.recv())
        .await
        .expect("a new run within 10s")
        .expect("a guard");
    assert!(next.fence() > guard.fence());
    next.begin_fenced(&db.pool)
        .await
        .expect("the new run writes")
        .commit()
        .await
        .unwrap();
    rt.shutdown().await;
}

/// Without any fenced write, the old holder learns of the release from its
/// own heartbeat: the renewal finds the lease gone and cancels the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_holders_heartbeat_reports_the_loss_after_forced_release() {
    let db = migrated_db().await;
    let (rt, _guards, guard) = running_job(&db).await;
    let out = leasehold(Some(&url(&db)), &["release", "held-job", "--force"]).await;
    assert_exit(&out, 0);
    // Heartbeat every lease/3 = 3.3s.
    tokio::time::timeout(Duration::from_secs(8), guard.cancelled())
        .await
        .expect("the heartbeat cancels the run");
    assert_eq!(guard.reason(), Some(leasehold::CancelReason::Stolen));
    assert!(matches!(guard.check(), Err(Error::LeaseLost { .. })));
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_of_an_unknown_key_exits_4() {
    let db = migrated_db().await;
    let out = leasehold(Some(&url(&db)), &["release", "no-such-job", "--force"]).await;
    assert_exit(&out, 4);
    assert!(
        stderr(&out).contains("no lease with key \"no-such-job\""),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_is_a_clear_error() {
    // Port 1 on loopback: nothing listens there.
    let url = "postgres://nobody:secret-password@127.0.0.1:1/app";
    for args in [
        &["status"][..],
        &["check"],
        &["migrate"],
        &["release", "k"],
        &["forget", "k"],
        &["history", "k"],
        &["pause", "k"],
        &["resume", "--job", "j"],
        &["trigger", "k"],
    ] {
        let mut all = args.to_vec();
        all.extend(["--connect-timeout", "5"]);
        let out = leasehold(Some(url), &all).await;
        assert_exit(&out, 1);
        let err = stderr(&out);
        assert!(
            err.contains("cannot connect to PostgreSQL at nobody@127.0.0.1:1/app"),
            "{err}"
        );
        assert!(!err.contains("secret-password"), "the password is never printed: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_errors_exit_2() {
    let out = leasehold(None, &["status"]).await;
    assert_exit(&out, 2);
    assert!(stderr(&out).contains("DATABASE_URL"), "{}", stderr(&out));
    let out = leasehold(Some("mysql://x@y/z"), &["status"]).await;
    assert_exit(&out, 2);
    assert!(stderr(&out).contains("invalid database URL"), "{}", stderr(&out));
    let out = leasehold(Some("postgres://u@127.0.0.1:1/d"), &["frobnicate"]).await;
    assert_exit(&out, 2);
    let out = leasehold(Some("postgres://u@127.0.0.1:1/d"), &["release"]).await;
    assert_exit(&out, 2);
    let out = leasehold(Some("postgres://u@127.0.0.1:1/d"), &["release", ""]).await;
    assert_exit(&out, 2);
    let out = leasehold(Some("postgres://u@127.0.0.1:1/d"), &["forget"]).await;
    assert_exit(&out, 2);
    let long = "k".repeat(leasehold::MAX_KEY_BYTES + 1);
    let out = leasehold(Some("postgres://u@127.0.0.1:1/d"), &["forget", &long, "--json"]).await;
    assert_exit(&out, 2);
    assert!(stderr(&out).contains("invalid lease key"), "{}", stderr(&out));
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_schema_names_leasehold_migrate_which_creates_it() {
    let db = leasehold_testkit::test_db().await;
    let url = url(&db);
    for args in [
        &["status"][..],
        &["release", "k", "--force"],
        &["forget", "k"],
        &["history", "k"],
        &["pause", "k"],
        &["resume", "k"],
        &["trigger", "k"],
    ] {
        let out = leasehold(Some(&url), args).await;
        assert_exit(&out, 1);
        assert!(stderr(&out).contains("run `leasehold migrate`"), "{}", stderr(&out));
    }
    let out = leasehold(Some(&url), &["check"]).await;
    assert_exit(&out, 1);
    assert!(stdout(&out).contains("leasehold migrate"), "{}", stdout(&out));

    let out = leasehold(Some(&url), &["migrate"]).await;
    assert_exit(&out, 0);
    let version = leasehold::SCHEMA_VERSION;
    assert!(
        stdout(&out).contains(&format!("from nothing to version {version}")),
        "{}",
        stdout(&out)
    );
    leasehold::check_schema(&db.pool).await.expect("schema exists now");
    let out = leasehold(Some(&url), &["migrate"]).await;
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains(&format!("already at version {version}")),
        "{}",
        stdout(&out)
    );
    let out = leasehold(Some(&url), &["status"]).await;
    assert_exit(&out, 0);
    assert!(stdout(&out).contains("0 leases"), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_skew_and_a_clean_round_trip() {
    let db = migrated_db().await;
    let url = url(&db);
    let out = leasehold(None, &["check", "--database-url", &url]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    let version = leasehold::SCHEMA_VERSION;
    assert!(text.contains(&format!("schema   ok    version {version} ")), "{text}");
    assert!(text.contains("clock    ok") && text.contains("skew "), "{text}");
    assert!(text.contains("rates are off by up to ρ = 1 %"), "{text}");
    assert!(text.contains("lease    ok    round trip ok"), "{text}");
    assert!(text.contains("all checks passed"), "{text}");
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM leasehold_lease")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "the scratch row is deleted");
}

/// `check` tells the operator what a failover would do: the server's
/// timeline, where the fence sequence is and whether it jumped, and that a
/// role whose commits do not wait for a standby can lose its last commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_the_timeline_the_fence_sequence_and_asynchronous_replication() {
    let db = migrated_db().await;
    let url = url(&db);
    let out = leasehold(Some(&url), &["check"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    let (timeline, next): (i64, i64) =
        sqlx::query_as("SELECT leasehold_timeline_id(), last_value + 1 FROM leasehold_fence_seq")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(
        text.contains(&format!(
            "failover ok    timeline {timeline}; fence sequence next at {next}, no jump on it"
        )),
        "{text}"
    );
    assert!(
        text.contains("asynchronous: synchronous_standby_names is empty"),
        "{text}"
    );

    // As after a restore onto another cluster: the check's own claims draw
    // the first fences on this timeline, and the report shows the jump.
    sqlx::query("UPDATE leasehold_timeline SET timeline = timeline + 1000")
        .execute(&db.pool)
        .await
        .unwrap();
    let out = leasehold(Some(&url), &["check"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(
        text.contains(&format!("timeline {timeline}; fence sequence next at ")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            " moved from {next} to {} when fences were first drawn",
            next + (1 << 32)
        )),
        "{text}"
    );
}

/// A job registered by a runtime but never run shows as such: no holder,
/// fence or acquisition time that would suggest a run took place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_a_never_run_job_as_never_run() {
    let db = migrated_db().await;
    let url = url(&db);
    let (guards, _rx) = mpsc::unbounded_channel();
    let runtime = Runtime::builder(db.pool.clone())
        .register(Holding { guards })
        .start()
        .await
        .unwrap();
    runtime.shutdown().await;
    let out = leasehold(Some(&url), &["status"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    let row = table_row(&text, "held-job");
    assert_eq!(
        row,
        [
            "held-job",
            "never-run",
            "-",
            "-",
            "-",
            "-",
            "never",
            "held-job",
            "-",
            "-",
            "-"
        ],
        "{text}"
    );
    let out = leasehold(Some(&url), &["status", "--json"]).await;
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(doc["leases"][0]["state"], "never-run", "{doc}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_of_a_free_key_deletes_its_row() {
    let db = migrated_db().await;
    let store = LeaseStore::new(db.pool.clone());
    released_row(&store, "tenant-42:reconcile", "web-1").await;
    acquired(store.claim("tenant-7:reconcile", "web-1", LONG).await.unwrap());

    let out = leasehold(Some(&url(&db)), &["forget", "tenant-42:reconcile"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(text.starts_with("forgot \"tenant-42:reconcile\""), "{text}");
    assert!(
        text.contains("a replica that still registers \"tenant-42:reconcile\" creates it again"),
        "{text}"
    );
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    assert!(
        store.get("tenant-42:reconcile").await.unwrap().is_none(),
        "the row is gone"
    );
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM leasehold_lease WHERE key = 'tenant-42:reconcile'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 0);
    // Only that key: the other tenant's held lease is untouched.
    let other = store.get("tenant-7:reconcile").await.unwrap().expect("still there");
    assert!(other.is_held());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_of_a_held_key_is_refused_and_keeps_the_row() {
    let db = migrated_db().await;
    let store = LeaseStore::new(db.pool.clone());
    let lease = acquired(store.claim("tenant-42:reconcile", "web-1", LONG).await.unwrap());
    let before = store.get("tenant-42:reconcile").await.unwrap().unwrap();

    let out = leasehold(Some(&url(&db)), &["forget", "tenant-42:reconcile"]).await;
    assert_exit(&out, 3);
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "lease \"tenant-42:reconcile\" is held by web-1 (fence {}, ",
            lease.fence
        )),
        "{err}"
    );
    assert!(
        err.contains("m ") && err.contains(" left); nothing was deleted"),
        "time left: {err}"
    );
    assert!(
        err.contains("leasehold release --force tenant-42:reconcile")
            && err.contains("leasehold forget tenant-42:reconcile"),
        "{err}"
    );
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));

    let after = store
        .get("tenant-42:reconcile")
        .await
        .unwrap()
        .expect("the row is still there");
    assert_eq!(
        (after.holder.as_str(), after.fence, after.acquired_at, after.expires_at),
        (
            before.holder.as_str(),
            before.fence,
            before.acquired_at,
            before.expires_at
        ),
        "a refused forget changes nothing"
    );
    assert_eq!(after.fence, lease.fence);
    assert!(matches!(store.renew(&lease, LONG).await.unwrap(), Renewal::Renewed(_)));

    // As the message says: end the tenure, then forget.
    let out = leasehold(Some(&url(&db)), &["release", "--force", "tenant-42:reconcile"]).await;
    assert_exit(&out, 0);
    let out = leasehold(Some(&url(&db)), &["forget", "tenant-42:reconcile"]).await;
    assert_exit(&out, 0);
    assert!(store.get("tenant-42:reconcile").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_of_a_missing_key_exits_4() {
    let db = migrated_db().await;
    let out = leasehold(Some(&url(&db)), &["forget", "no-such-tenant"]).await;
    assert_exit(&out, 4);
    assert!(
        stderr(&out).contains("no lease with key \"no-such-tenant\"") && stderr(&out).contains("nothing to forget"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_json_reports_each_outcome_with_the_same_exit_codes() {
    let db = migrated_db().await;
    let url = url(&db);
    let store = LeaseStore::new(db.pool.clone());
    let held = acquired(store.claim("held", "web-1", LONG).await.unwrap());
    let free = acquired(store.claim("free", "web-2", LONG).await.unwrap());
    assert!(store.release("free", "web-2", free.fence).await.unwrap());

    let out = leasehold(Some(&url), &["forget", "free", "--json"]).await;
    assert_exit(&out, 0);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(doc, serde_json::json!({ "key": "free", "outcome": "deleted" }));
    assert!(store.get("free").await.unwrap().is_none());

    let out = leasehold(Some(&url), &["forget", "free", "--json"]).await;
    assert_exit(&out, 4);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(doc, serde_json::json!({ "key": "free", "outcome": "not-found" }));
    assert!(stderr(&out).contains("no lease with key"), "{}", stderr(&out));

    let out = leasehold(Some(&url), &["forget", "held", "--json"]).await;
    assert_exit(&out, 3);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(
        (doc["key"].as_str(), doc["outcome"].as_str()),
        (Some("held"), Some("held")),
        "{doc}"
    );
    let lease = &doc["lease"];
    assert_eq!(lease["key"], "held");
    assert_eq!(lease["holder"], "web-1");
    assert_eq!(lease["fence"], held.fence);
    assert_eq!(lease["state"], "held");
    assert!(lease["expires_in_seconds"].as_f64().unwrap() > 500.0, "{lease}");
    assert!(
        lease["acquired_at"].is_string() && lease["expires_at"].is_string(),
        "{lease}"
    );
    assert!(stderr(&out).contains("held by web-1"), "{}", stderr(&out));
    assert_eq!(store.get("held").await.unwrap().unwrap().fence, held.fence);
}

/// Fences come from the sequence, not the row: a key forgotten and claimed
/// again gets a fence above every fence of its past, so a paused holder of
/// the forgotten key can never pass a fence check of the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_key_claimed_again_gets_a_higher_fence() {
    let db = migrated_db().await;
    let store = LeaseStore::new(db.pool.clone());
    let first = released_row(&store, "tenant-42:reconcile", "web-1").await;
    let before = store.get("tenant-42:reconcile").await.unwrap().unwrap().fence;

    let out = leasehold(Some(&url(&db)), &["forget", "tenant-42:reconcile"]).await;
    assert_exit(&out, 0);
    assert!(store.get("tenant-42:reconcile").await.unwrap().is_none());

    let again = acquired(store.claim("tenant-42:reconcile", "web-2", LONG).await.unwrap());
    assert!(again.fence > before, "{} > {before}", again.fence);
    assert!(again.fence > first);
    assert_eq!(
        store.get("tenant-42:reconcile").await.unwrap().unwrap().fence,
        again.fence
    );
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("invalid JSON ({e}):\n{}", stdout(out)))
}

fn is_paused(claim: &Claim) -> bool {
    matches!(claim, Claim::Paused { .. })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_of_a_key() {
    let db = migrated_db().await;
    let url = url(&db);
    let store = LeaseStore::new(db.pool.clone());
    released_row(&store, "tenant-1:sync", "web-1").await;
    released_row(&store, "tenant-2:sync", "web-1").await;

    let out = leasehold(
        Some(&url),
        &["pause", "tenant-1:sync", "--by", "alice@laptop", "--json"],
    )
    .await;
    assert_exit(&out, 0);
    let doc = json(&out);
    assert_eq!(
        (doc["scope"].as_str(), doc["name"].as_str(), doc["paused_by"].as_str()),
        (Some("key"), Some("tenant-1:sync"), Some("alice@laptop")),
        "{doc}"
    );
    assert_eq!(
        (doc["cancel"].as_bool(), doc["already_paused"].as_bool()),
        (Some(false), Some(false))
    );
    assert_eq!(
        (doc["keys"].as_u64(), doc["running"].as_u64()),
        (Some(1), Some(0)),
        "{doc}"
    );
    assert!(doc["paused_at"].is_string(), "{doc}");

    // Every replica obeys it: a claim of the key is refused, even a trigger's.
    let claim = store.claim_run("tenant-1:sync", "web-2", LONG, Due::Now).await.unwrap();
    assert!(is_paused(&claim), "{claim:?}");
    let other = store.claim_run("tenant-2:sync", "web-2", LONG, Due::Now).await.unwrap();
    let other = acquired(other);
    assert!(store.release("tenant-2:sync", "web-2", other.fence).await.unwrap());

    // Pausing again keeps the first pause.
    let out = leasehold(Some(&url), &["pause", "tenant-1:sync", "--by", "bob@desk"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(
        text.starts_with("key \"tenant-1:sync\" was already paused by alice@laptop since "),
        "{text}"
    );
    assert!(text.contains("it covers 1 key, none running"), "{text}");
    assert!(text.contains("`leasehold resume tenant-1:sync`"), "{text}");

    let out = leasehold(Some(&url), &["status"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("2 leases (0 held, 2 free, 1 paused)"), "{text}");
    assert_eq!(table_row(&text, "tenant-1:sync")[1], "free, paused", "{text}");
    assert_eq!(table_row(&text, "tenant-2:sync")[1], "free", "{text}");
    assert!(text.contains("1 pause in force"), "{text}");
    let pause_line = text
        .lines()
        .find(|l| l.starts_with("key \"tenant-1:sync\""))
        .unwrap_or_else(|| panic!("no pause row in\n{text}"));
    assert!(
        pause_line.contains("alice@laptop") && pause_line.contains(" ago)"),
        "{pause_line}"
    );
    let out = leasehold(Some(&url), &["status", "--json"]).await;
    let doc = json(&out);
    assert_eq!(doc["leases"][0]["paused"], true, "{doc}");
    assert_eq!(doc["leases"][1]["paused"], false, "{doc}");
    assert_eq!(doc["pauses"][0]["scope"], "key", "{doc}");
    assert_eq!(doc["pauses"][0]["paused_by"], "alice@laptop", "{doc}");
    // A prefix that covers no paused key shows no pause.
    let out = leasehold(Some(&url), &["status", "--json", "--prefix", "tenant-2"]).await;
    assert_eq!(json(&out)["pauses"], serde_json::json!([]));

    let out = leasehold(Some(&url), &["resume", "tenant-1:sync", "--json"]).await;
    assert_exit(&out, 0);
    let doc = json(&out);
    assert_eq!(doc["outcome"], "resumed", "{doc}");
    assert_eq!(doc["woken"], 1, "due since it was created: overdue, woken: {doc}");
    let claim = store.claim_run("tenant-1:sync", "web-2", LONG, Due::Now).await.unwrap();
    let lease = acquired(claim);
    assert!(store.release("tenant-1:sync", "web-2", lease.fence).await.unwrap());

    // Nothing left to resume: exit 4, in text and in JSON.
    let out = leasehold(Some(&url), &["resume", "tenant-1:sync"]).await;
    assert_exit(&out, 4);
    assert!(
        stderr(&out).contains("key \"tenant-1:sync\" is not paused"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    let out = leasehold(Some(&url), &["resume", "--job", "no-such-job", "--json"]).await;
    assert_exit(&out, 4);
    assert_eq!(
        json(&out),
        serde_json::json!({ "scope": "job", "name": "no-such-job", "outcome": "not-paused" })
    );
    assert!(
        stderr(&out).contains("job \"no-such-job\" is not paused"),
        "{}",
        stderr(&out)
    );
}

/// A job with a run in progress, paused with and without `--cancel`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_of_a_job() {
    let db = migrated_db().await;
    let url = url(&db);
    let store = LeaseStore::new(db.pool.clone());
    let (rt, _guards, guard) = running_job(&db).await;

    let out = leasehold(Some(&url), &["pause", "--job", "held-job"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(
        text.starts_with("paused job \"held-job\" for the whole fleet (by "),
        "{text}"
    );
    assert!(
        text.contains("it covers 1 key, 1 running: that run finishes (use --cancel to stop it at its next renewal)"),
        "{text}"
    );
    assert!(text.contains("`leasehold resume --job held-job`"), "{text}");
    let by = std::env::var("USER").map_or("leasehold-cli".to_owned(), |user| format!("{user}@"));
    let pause = store.pauses().await.unwrap();
    assert!(pause[0].paused_by.starts_with(&by), "{pause:?}");
    assert!(!guard.is_cancelled(), "without --cancel the run goes on");

    // --cancel on the same pause: the run stops at its next renewal
    // (heartbeat lease/3 = 3.3s) with reason `paused`.
    let out = leasehold(Some(&url), &["pause", "--job", "held-job", "--cancel", "--json"]).await;
    assert_exit(&out, 0);
    let doc = json(&out);
    assert_eq!(
        (
            doc["scope"].as_str(),
            doc["cancel"].as_bool(),
            doc["already_paused"].as_bool()
        ),
        (Some("job"), Some(true), Some(true)),
        "{doc}"
    );
    assert_eq!(
        (doc["keys"].as_u64(), doc["running"].as_u64()),
        (Some(1), Some(1)),
        "{doc}"
    );
    tokio::time::timeout(Duration::from_secs(10), guard.cancelled())
        .await
        .expect("the pause cancels the run");
    assert_eq!(guard.reason(), Some(CancelReason::Paused));
    // Released, and no replica claims it back.
    let claim = loop {
        let claim = store.claim_run("held-job", "web-9", LONG, Due::Now).await.unwrap();
        if !matches!(claim, Claim::HeldElsewhere { .. }) {
            break claim;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(is_paused(&claim), "{claim:?}");

    // status: paused, its job, the cancelled run.
    let out = leasehold(Some(&url), &["status"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    let row = table_row(&text, "held-job");
    assert_eq!(row[1], "free, paused", "{text}");
    assert_eq!(row[7], "held-job", "the JOB column: {text}");
    assert!(
        row[8].starts_with("cancelled (paused) ") && row[8].ends_with(" ago"),
        "{text}"
    );
    assert_eq!(row[9], "never", "no run succeeded: {text}");
    assert!(text.contains("job \"held-job\""), "the pause is listed: {text}");
    let out = leasehold(Some(&url), &["status", "--json"]).await;
    let doc = json(&out);
    let lease = &doc["leases"][0];
    assert_eq!(
        (lease["job_name"].as_str(), lease["paused"].as_bool()),
        (Some("held-job"), Some(true)),
        "{doc}"
    );
    assert_eq!(lease["last_run"]["outcome"], "cancelled", "{doc}");
    assert_eq!(lease["last_run"]["reason"], "paused", "{doc}");
    assert!(
        lease["last_success_at"].is_null() && lease["last_error"].is_null(),
        "{doc}"
    );
    assert_eq!(doc["pauses"][0]["cancel"], true, "{doc}");

    // Resuming the key alone does not lift its job's pause.
    let out = leasehold(Some(&url), &["resume", "held-job"]).await;
    assert_exit(&out, 4);
    assert!(
        stderr(&out).contains("key \"held-job\" has no pause of its own in ")
            && stderr(&out)
                .contains(": it is paused through its job \"held-job\" (`leasehold resume --job held-job` lifts"),
        "{}",
        stderr(&out)
    );

    // Paused both ways: lifting the key's own pause leaves the job's.
    let out = leasehold(Some(&url), &["pause", "held-job", "--by", "ops"]).await;
    assert_exit(&out, 0);
    let out = leasehold(Some(&url), &["resume", "held-job"]).await;
    assert_exit(&out, 0);
    assert!(
        stdout(&out).starts_with(
            "lifted the pause of key \"held-job\", but it stays paused: its job \"held-job\" is paused too"
        ),
        "{}",
        stdout(&out)
    );
    let claim = store.claim_run("held-job", "web-9", LONG, Due::Now).await.unwrap();
    assert!(is_paused(&claim), "{claim:?}");

    let out = leasehold(Some(&url), &["resume", "--job", "held-job", "--json"]).await;
    assert_exit(&out, 0);
    assert_eq!(json(&out)["outcome"], "resumed");
    assert!(store.pauses().await.unwrap().is_empty());
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_makes_a_key_due_now_and_a_missing_key_exits_4() {
    let db = migrated_db().await;
    let url = url(&db);
    let store = LeaseStore::new(db.pool.clone());
    // A manual job's key, registered and never run: due "never".
    let (guards, _rx) = mpsc::unbounded_channel();
    let runtime = Runtime::builder(db.pool.clone())
        .register(Holding { guards })
        .start()
        .await
        .unwrap();
    runtime.shutdown().await;
    let before = store.get("held-job").await.unwrap().unwrap();
    assert!(before.next_due_at.is_some_and(|due| due > before.server_now));

    let out = leasehold(Some(&url), &["trigger", "held-job"]).await;
    assert_exit(&out, 0);
    assert_eq!(
        stdout(&out),
        "\"held-job\" is due now: the first replica that claims it runs it\n"
    );
    let after = store.get("held-job").await.unwrap().unwrap();
    assert!(
        after.next_due_at.is_some_and(|due| due <= after.server_now),
        "{after:?}"
    );

    // A paused key is due too, and runs once resumed.
    let out = leasehold(Some(&url), &["pause", "--job", "held-job"]).await;
    assert_exit(&out, 0);
    let out = leasehold(Some(&url), &["trigger", "held-job", "--json"]).await;
    assert_exit(&out, 0);
    assert_eq!(
        json(&out),
        serde_json::json!({ "key": "held-job", "outcome": "paused", "paused": true })
    );
    let out = leasehold(Some(&url), &["trigger", "held-job"]).await;
    assert_exit(&out, 0);
    assert!(stdout(&out).contains("is due now but paused"), "{}", stdout(&out));

    // Each action is in the key's history, with who took it (the job
    // pause too: it covers this key).
    let actions = store.actions("held-job", 10).await.unwrap();
    let taken: Vec<&str> = actions.iter().map(|a| a.action.as_str()).collect();
    assert_eq!(taken, ["trigger", "trigger", "pause", "trigger"], "newest first");
    assert!(
        actions.iter().all(|a| !a.actor.is_empty() && a.outcome.is_some()),
        "{actions:?}"
    );

    let out = leasehold(Some(&url), &["trigger", "no-such-job"]).await;
    assert_exit(&out, 4);
    assert!(
        stderr(&out).contains("no lease with key \"no-such-job\"") && stderr(&out).contains("nothing to trigger"),
        "{}",
        stderr(&out)
    );
    let out = leasehold(Some(&url), &["trigger", "no-such-job", "--json"]).await;
    assert_exit(&out, 4);
    assert_eq!(
        json(&out),
        serde_json::json!({ "key": "no-such-job", "outcome": "not-found", "paused": false })
    );
    assert!(store.get("no-such-job").await.unwrap().is_none(), "no row is created");
}

/// Fails its first run (with a long, multi-line error), then succeeds.
struct FailsOnce {
    runs: Arc<AtomicU32>,
}

const LONG_ERROR: &str = "upstream said no\n  while posting invoice 42: the ledger service answered 503 \
                          Service Unavailable after 3 attempts; retry later or check the ledger's health page";

impl FencedJob for FailsOnce {
    fn name(&self) -> &str {
        "invoices"
    }

    fn key(&self) -> String {
        "invoices:acme".to_owned()
    }

    fn settings(&self) -> JobSettings {
        JobSettings::new(Schedule::Manual)
            .lease(Duration::from_secs(10))
            .retry(Duration::from_millis(10), Duration::from_millis(10))
    }

    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        if self.runs.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(LONG_ERROR.into());
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_shows_recorded_runs_newest_first() {
    let db = migrated_db().await;
    let url = url(&db);
    let store = LeaseStore::new(db.pool.clone());
    let rt = Runtime::builder(db.pool.clone())
        .holder("web-1")
        .poll_interval(Duration::from_millis(100))
        .register(FailsOnce {
            runs: Arc::new(AtomicU32::new(0)),
        })
        .start()
        .await
        .expect("runtime starts");

    // Registered, no run yet: a row, no history.
    let out = leasehold(Some(&url), &["history", "invoices:acme"]).await;
    assert_exit(&out, 0);
    assert_eq!(stdout(&out), "no runs recorded for \"invoices:acme\"\n");

    rt.trigger("invoices:acme").await.expect("trigger");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while store.history("invoices:acme", 10).await.unwrap().len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "two runs recorded within 15s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    rt.shutdown().await;
    let runs = store.history("invoices:acme", 10).await.unwrap();
    assert_eq!(runs.len(), 2, "{runs:?}");

    let out = leasehold(Some(&url), &["history", "invoices:acme"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(
        text.starts_with("history of \"invoices:acme\" (job invoices): 2 runs recorded, newest first; server time "),
        "{text}"
    );
    let header = text
        .lines()
        .find(|l| l.trim_start().starts_with("RUN"))
        .expect("a header");
    for column in ["FENCE", "HOLDER", "SLOT", "STARTED", "DURATION", "OUTCOME", "ERROR"] {
        assert!(header.contains(column), "{header}");
    }
    let rows: Vec<Vec<String>> = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("RUN"))
        .skip(1)
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
    let (newest, oldest) = (&rows[0], &rows[1]);
    assert_eq!(newest[0], runs[0].run_no.to_string(), "newest first: {text}");
    assert_eq!(
        &newest[1..4],
        [runs[0].fence.to_string().as_str(), "web-1", "-"],
        "{text}"
    );
    assert!(newest[4].ends_with(" ago)"), "absolute and relative start: {text}");
    assert_eq!(newest[6], "succeeded", "{text}");
    assert_eq!(newest.len(), 7, "no error: {text}");
    assert_eq!(oldest[6], "failed", "{text}");
    // The error, on one line, cut for the table.
    let error = &oldest[7];
    assert!(
        error.starts_with("upstream said no while posting invoice 42: "),
        "{text}"
    );
    assert!(error.ends_with('…') && error.chars().count() <= 60, "{error}");

    let out = leasehold(Some(&url), &["history", "invoices:acme", "--json"]).await;
    assert_exit(&out, 0);
    let doc = json(&out);
    assert_eq!(doc["key"], "invoices:acme");
    assert!(doc["server_now"].is_string(), "{doc}");
    let json_runs = doc["runs"].as_array().expect("a runs array");
    assert_eq!(json_runs.len(), 2);
    assert_eq!(json_runs[0]["outcome"], "succeeded");
    assert_eq!(json_runs[0]["run_no"], runs[0].run_no);
    assert_eq!(json_runs[0]["holder"], "web-1");
    assert_eq!(json_runs[0]["job_name"], "invoices");
    assert!(json_runs[0]["error"].is_null() && json_runs[0]["scheduled_for"].is_null());
    assert!(json_runs[0]["duration_seconds"].as_f64().unwrap() >= 0.0);
    assert_eq!(json_runs[1]["outcome"], "failed");
    assert_eq!(json_runs[1]["error"], LONG_ERROR, "in full in JSON");

    let out = leasehold(Some(&url), &["history", "invoices:acme", "--limit", "1"]).await;
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains(": the latest 1 run (--limit 1), newest first"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("succeeded") && !stdout(&out).contains("failed"),
        "{}",
        stdout(&out)
    );

    // status: the latest run, success and error of the key.
    let out = leasehold(Some(&url), &["status"]).await;
    let text = stdout(&out);
    let row = table_row(&text, "invoices:acme");
    assert_eq!(row[7], "invoices", "{text}");
    assert!(row[8].starts_with("succeeded ") && row[8].ends_with(" ago"), "{text}");
    assert!(row[9].ends_with(" ago"), "{text}");
    assert!(
        row[10].contains(" ago: upstream said no while") && row[10].ends_with('…'),
        "{text}"
    );
    let out = leasehold(Some(&url), &["status", "--json"]).await;
    let lease = json(&out)["leases"][0].clone();
    assert_eq!(lease["last_run"]["outcome"], "succeeded", "{lease}");
    assert_eq!(lease["last_success_at"], lease["last_run"]["ended_at"], "{lease}");
    assert_eq!(lease["last_error"]["message"], LONG_ERROR, "{lease}");
    assert_eq!(lease["last_error"]["outcome"], "failed", "{lease}");
    assert!(lease["last_error"]["at"].is_string(), "{lease}");

    // A key with neither a row nor runs.
    let out = leasehold(Some(&url), &["history", "no-such-key"]).await;
    assert_exit(&out, 4);
    assert!(
        stderr(&out).contains("no lease with key \"no-such-key\""),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_usage_errors_exit_2() {
    let url = Some("postgres://u@127.0.0.1:1/d");
    for (args, says) in [
        (&["history", "k", "--limit", "0"][..], "0 is not in 1..=10000"),
        (&["history", "k", "--limit", "10001"], "10001 is not in 1..=10000"),
        (&["history", "k", "--limit", "-3"], "-3"),
        (&["pause"], "required"),
        (&["pause", "k", "--job", "j"], "cannot be used with"),
        (&["resume"], "required"),
        (&["resume", "k", "--job", "j"], "cannot be used with"),
        (&["pause", "k", "--by", ""], "invalid --by"),
        (&["pause", "--job", ""], "invalid job name"),
        (&["trigger"], "required"),
        (&["trigger", ""], "invalid lease key"),
    ] {
        let out = leasehold(url, args).await;
        assert_exit(&out, 2);
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
}
