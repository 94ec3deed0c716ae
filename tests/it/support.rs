//! Shared setup for the scenario tests: databases, replicas, faults.

#![allow(dead_code)]

use std::time::Duration;

use leasehold::LeaseStore;
pub use leasehold_testkit::{PgCluster, TestDb};
use sqlx::PgPool;

/// A fresh database with leasehold's schema.
pub async fn db() -> TestDb {
    let db = leasehold_testkit::test_db().await;
    leasehold::migrate(&db.pool).await.expect("migrate");
    db
}

/// A fresh database with leasehold's schema and a store over its pool.
pub async fn store() -> (TestDb, LeaseStore) {
    let db = db().await;
    let store = LeaseStore::new(db.pool.clone());
    (db, store)
}

/// A lease length long enough never to expire during a test by itself.
pub const LONG: Duration = Duration::from_secs(600);

/// Fault: the lease of `key` expires now, by the server clock, as if its
/// holder had stalled past the lease. Its row, holder and fence stay.
pub async fn expire_now(pool: &PgPool, key: &str) {
    let found = LeaseStore::new(pool.clone())
        .expire_for_test(key)
        .await
        .expect("expire lease");
    assert!(found.is_some(), "no lease row for {key}");
}

/// Makes the lease of `key` free (expired now) and its next run due now.
pub async fn free_and_due_now(pool: &PgPool, key: &str) {
    LeaseStore::new(pool.clone())
        .owe_slot_for_test(key, None)
        .await
        .expect("free and due");
}

/// Arranges a fleet that was down: the free row of `key` owes the slot
/// `slot` (and is due since then).
pub async fn owe_slot(pool: &PgPool, key: &str, slot: chrono::DateTime<chrono::Utc>) {
    let found = LeaseStore::new(pool.clone())
        .owe_slot_for_test(key, Some(slot))
        .await
        .expect("owe a slot");
    assert!(found.is_some(), "no lease row for {key}");
}

/// Fault: an operator deletes the lease row of `key`.
pub async fn operator_delete(pool: &PgPool, key: &str) {
    sqlx::query("DELETE FROM leasehold_lease WHERE key = $1")
        .bind(key)
        .execute(pool)
        .await
        .expect("delete lease");
}

/// Enables pg_stat_statements in this database and clears its counters
/// (this database's only: other tests run at the same time).
pub async fn reset_statement_stats(pool: &PgPool) {
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .execute(pool)
        .await
        .expect("pg_stat_statements must be preloaded (the testkit cluster does; for DATABASE_URL set shared_preload_libraries)");
    sqlx::query(
        "SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = current_database()), 0)",
    )
    .execute(pool)
    .await
    .expect("reset statement stats");
}

/// How many times statements whose text contains `needle` ran in this
/// database since [`reset_statement_stats`].
pub async fn statement_calls(pool: &PgPool, needle: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT COALESCE(sum(calls), 0)::int8 FROM pg_stat_statements s
          JOIN pg_database d ON d.oid = s.dbid
         WHERE d.datname = current_database() AND s.query LIKE '%' || $1 || '%'
           AND s.query NOT LIKE '%pg_stat_statements%'",
    )
    .bind(needle)
    .fetch_one(pool)
    .await
    .expect("read pg_stat_statements")
}

/// A pool that cannot reach any server: proves no SQL is sent, or that a
/// transport error stays an error.
pub fn unreachable_pool() -> PgPool {
    let options = sqlx::postgres::PgConnectOptions::new()
        .host("127.0.0.1")
        .port(1)
        .username("nobody");
    sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(Duration::from_secs(2))
        .connect_lazy_with(options)
}

/// Asserts that no connection of `pool` stays checked out. sqlx returns a
/// dropped connection to the pool from a spawned task, so this allows that
/// task a moment to run.
pub async fn assert_pool_idle(pool: &PgPool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while pool.num_idle() < pool.size() as usize {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {} connections still checked out",
            pool.size() as usize - pool.num_idle(),
            pool.size()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---------------------------------------------------------------------------
// Replicas and scripted jobs
// ---------------------------------------------------------------------------

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use leasehold::{FenceGuard, FencedJob, JobError, JobSettings, Runtime, Schedule};
use tokio::time::Instant;

type Body = Arc<dyn Fn(FenceGuard) -> BoxFuture<'static, Result<(), JobError>> + Send + Sync>;

/// A job whose body is a closure, so each scenario scripts its behaviour.
#[derive(Clone)]
pub struct ScriptedJob {
    pub name: String,
    pub key: String,
    pub settings: JobSettings,
    body: Body,
}

impl FencedJob for ScriptedJob {
    fn name(&self) -> &str {
        &self.name
    }
    fn key(&self) -> String {
        self.key.clone()
    }
    fn settings(&self) -> JobSettings {
        self.settings.clone()
    }
    async fn run(&self, guard: FenceGuard) -> Result<(), JobError> {
        (self.body)(guard).await
    }
}

/// A scripted job named after its key.
pub fn job<F, Fut>(key: &str, settings: JobSettings, body: F) -> ScriptedJob
where
    F: Fn(FenceGuard) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), JobError>> + Send + 'static,
{
    ScriptedJob {
        name: key.split(':').next().unwrap_or(key).to_owned(),
        key: key.to_owned(),
        settings,
        body: Arc::new(move |guard| Box::pin(body(guard))),
    }
}

/// Settings with a short lease for fault scenarios: heartbeat lease/3,
/// margin lease/10, short grace and backoff.
pub fn quick(schedule: Schedule, lease: Duration) -> JobSettings {
    JobSettings::new(schedule)
        .lease(lease)
        .grace(Duration::from_millis(300))
        .retry(Duration::from_millis(200), Duration::from_secs(1))
}

/// One run as its job saw it.
#[derive(Debug, Clone)]
pub struct RunRecord {
    pub holder: String,
    pub key: String,
    pub fence: i64,
    pub started: Instant,
    /// Unix time at the start (the server's clock is this machine's): which
    /// slot of an epoch-aligned schedule the run belongs to.
    pub started_unix: f64,
    pub ended: Option<Instant>,
    /// When the run observed its cancellation, and why.
    pub cancelled: Option<(Instant, leasehold::CancelReason)>,
}

/// Shared log of runs, written by [`Runs::body`] jobs.
#[derive(Clone, Default)]
pub struct Runs(Arc<Mutex<Vec<RunRecord>>>);

impl Runs {
    pub fn all(&self) -> Vec<RunRecord> {
        self.0.lock().unwrap().clone()
    }

    /// Records the start of a run; returns its index.
    pub fn start(&self, guard: &FenceGuard) -> usize {
        let mut runs = self.0.lock().unwrap();
        runs.push(RunRecord {
            holder: guard.holder().to_owned(),
            key: guard.key().to_owned(),
            fence: guard.fence(),
            started: Instant::now(),
            started_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock after 1970")
                .as_secs_f64(),
            ended: None,
            cancelled: None,
        });
        runs.len() - 1
    }

    pub fn end(&self, i: usize) {
        self.0.lock().unwrap()[i].ended = Some(Instant::now());
    }

    pub fn cancelled(&self, i: usize, reason: Option<leasehold::CancelReason>) {
        let reason = reason.expect("a cancelled guard has a reason");
        self.0.lock().unwrap()[i].cancelled = Some((Instant::now(), reason));
    }

    /// A job body that records its run and works for `work` — or until it
    /// is cancelled, which it records too.
    pub fn body(
        &self,
        work: Duration,
    ) -> impl Fn(FenceGuard) -> BoxFuture<'static, Result<(), JobError>> + Send + Sync + 'static {
        let runs = self.clone();
        move |guard: FenceGuard| {
            let runs = runs.clone();
            Box::pin(async move {
                let i = runs.start(&guard);
                tokio::select! {
                    _ = tokio::time::sleep(work) => {
                        runs.end(i);
                        Ok(())
                    }
                    _ = guard.cancelled() => {
                        runs.cancelled(i, guard.reason());
                        runs.end(i);
                        Err("cancelled".into())
                    }
                }
            })
        }
    }

    /// Waits until `n` runs have started (panics after `within`).
    pub async fn wait_started(&self, n: usize, within: Duration) -> Vec<RunRecord> {
        eventually(within, || (self.all().len() >= n).then(|| self.all())).await
    }
}

/// Polls `check` every 20 ms until it returns `Some`, or panics after
/// `within`. For waiting on an outcome, never for asserting a speed.
pub async fn eventually<T>(within: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "condition not reached within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Like [`eventually`], for a check that talks to the database.
pub async fn eventually_async<T, F, Fut>(within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "condition not reached within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts a replica: a runtime with holder id `holder` on its own pool of
/// `connections` connections to `db`.
pub async fn replica(db: &TestDb, holder: &str, connections: u32, jobs: Vec<ScriptedJob>) -> Runtime {
    let pool = db.pool_with(connections).await;
    let mut builder = Runtime::builder(pool)
        .holder(holder)
        .poll_interval(Duration::from_millis(100));
    for job in jobs {
        builder = builder.register(job);
    }
    builder.start().await.expect("runtime starts")
}

/// A replica `holder` running the manual job `key` right now, and the
/// guard of that run, which stays open until the runtime shuts down.
pub async fn held_guard(db: &TestDb, holder: &str, key: &str) -> (Runtime, FenceGuard) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let body = move |guard: FenceGuard| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(guard.clone());
            guard.cancelled().await;
            Ok(())
        }
    };
    let rt = replica(
        db,
        holder,
        2,
        vec![job(key, quick(Schedule::Manual, Duration::from_secs(10)), body)],
    )
    .await;
    rt.trigger(key).await.expect("trigger");
    let guard = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("the run starts")
        .expect("guard");
    (rt, guard)
}

// ---------------------------------------------------------------------------
// A fenced downstream: an `account` table with a `last_fence` column
// ---------------------------------------------------------------------------

/// Creates `account (id, balance, last_fence)` with accounts 1 and 2 at 0.
pub async fn accounts(pool: &PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE account (id INT PRIMARY KEY, balance BIGINT NOT NULL, last_fence BIGINT NOT NULL DEFAULT 0);
         INSERT INTO account (id, balance) VALUES (1, 0), (2, 0);",
    )
    .execute(pool)
    .await
    .expect("create accounts");
}

/// `(balance, last_fence)` of account `id`.
pub async fn balance(pool: &PgPool, id: i32) -> (i64, i64) {
    sqlx::query_as("SELECT balance, last_fence FROM account WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("read account")
}

/// A fenced column write: sets account `id`'s balance under `guard`'s fence.
pub async fn set_balance(guard: &FenceGuard, pool: &PgPool, id: i32, value: i64) -> leasehold::Result<u64> {
    guard
        .update("account")
        .set("balance", value)
        .filter("id", id)
        .execute(pool)
        .await
}

// ---------------------------------------------------------------------------
// Pool hygiene: poisoned connections, backends left inside transactions
// ---------------------------------------------------------------------------

/// Fault: service code leaves a pooled connection of `pool` inside a
/// transaction sqlx does not know about (`raw_sql("BEGIN")`), and lets it go
/// back to the pool.
pub async fn poison_one(pool: &PgPool) {
    let mut conn = pool.acquire().await.expect("acquire to poison");
    sqlx::raw_sql("BEGIN").execute(&mut *conn).await.expect("BEGIN");
}

/// Fault: like [`poison_one`], but the transaction is also aborted (an error
/// inside it), so every later statement fails with 25P02.
pub async fn poison_one_aborted(pool: &PgPool) {
    let mut conn = pool.acquire().await.expect("acquire to poison");
    sqlx::raw_sql("BEGIN").execute(&mut *conn).await.expect("BEGIN");
    let _ = sqlx::raw_sql("SELECT 1/0").execute(&mut *conn).await;
}

/// Fault: an outside transaction holds `SELECT … FOR UPDATE` on the lease
/// row of `key` until the returned transaction ends.
pub async fn lock_lease_row(pool: &PgPool, key: &str) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut tx = pool.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM leasehold_lease WHERE key = $1 FOR UPDATE")
        .bind(key)
        .execute(&mut *tx)
        .await
        .expect("lock the lease row");
    tx
}

/// Backends of this database (other than the caller's) sitting inside a
/// transaction: `(pid, state, query)`.
pub async fn backends_in_transaction(pool: &PgPool) -> Vec<(i32, String, String)> {
    sqlx::query_as(
        "SELECT pid, state, query FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid()
            AND state LIKE 'idle in transaction%'",
    )
    .fetch_all(pool)
    .await
    .expect("read pg_stat_activity")
}

/// Waits until no backend of this database is left inside a transaction
/// (connections being closed take a moment), or panics naming them.
pub async fn assert_no_backend_in_transaction(pool: &PgPool, context: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found = backends_in_transaction(pool).await;
        if found.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{context}: backends left inside a transaction: {found:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts a replica on `pool` (the caller keeps a clone, to misuse it as the
/// service would): holder `holder`, poll interval `poll`.
pub async fn replica_on(pool: PgPool, holder: &str, poll: Duration, jobs: Vec<ScriptedJob>) -> Runtime {
    let mut builder = Runtime::builder(pool).holder(holder).poll_interval(poll);
    for job in jobs {
        builder = builder.register(job);
    }
    builder.start().await.expect("runtime starts")
}

/// Runs that overlap in time: pairs `(i, j)` of `runs` (all of one key).
pub fn overlapping_pairs(runs: &[RunRecord]) -> Vec<(usize, usize)> {
    let mut pairs = Vec::new();
    for (i, a) in runs.iter().enumerate() {
        for (j, b) in runs.iter().enumerate().skip(i + 1) {
            let a_end = a.ended.unwrap_or_else(Instant::now);
            let b_end = b.ended.unwrap_or_else(Instant::now);
            if a.started < b_end && b.started < a_end {
                pairs.push((i, j));
            }
        }
    }
    pairs
}
