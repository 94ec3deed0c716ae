//! Shared setup for the scenario tests: databases, replicas, faults.

#![allow(dead_code)]

use std::time::Duration;

use leasehold::store::LeaseStore;
pub use leasehold_testkit::{PgCluster, TestDb};
use sqlx::PgPool;

/// A pool of `max` connections to `db` through `proxy`.
pub async fn proxied_pool(db: &TestDb, proxy: &leasehold_testkit::proxy::Proxy, max: u32) -> PgPool {
    let options = db.options.clone().host("127.0.0.1").port(proxy.port);
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(10))
        .connect_lazy_with(options)
}

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

/// Makes the lease of `key` free and its next slot `slot`: a past slot is
/// one a fleet that was down owes (due since then), a future one is not due
/// yet.
pub async fn owe_slot(pool: &PgPool, key: &str, slot: chrono::DateTime<chrono::Utc>) {
    let found = LeaseStore::new(pool.clone())
        .owe_slot_for_test(key, Some(slot))
        .await
        .expect("owe a slot");
    assert!(found.is_some(), "no lease row for {key}");
}

/// Fault: an operator deletes the lease row of `key`.
pub async fn operator_delete(pool: &PgPool, key: &str) {
    LeaseStore::new(pool.clone())
        .delete_row_for_test(key)
        .await
        .expect("delete lease");
}

// pg_stat_statements of one database: `reset_statement_stats`, `statement_calls`, `statement_totals`.
pub use leasehold_testkit::stats::{reset_statement_stats, statement_calls, statement_totals};

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

// The scripted job, its run log and replicas live in leasehold-testkit
// (feature `jobs`), shared with the benchmarks.
pub use leasehold_testkit::jobs::{
    BoxedRun, RunRecord, Runs, ScriptedJob, builder, job, overlapping_pairs, quick, replica, replica_on,
};
pub use leasehold_testkit::{eventually, eventually_async};

/// Jobs named `keys` that run only when triggered and do nothing: keys a
/// runtime registers (with their job, the part before `:`) for pages and
/// operators to act on.
pub fn idle_manual_jobs(keys: &[&str]) -> Vec<ScriptedJob> {
    keys.iter()
        .map(|key| job(key, quick(Schedule::Manual, LONG), |_| async { Ok(()) }))
        .collect()
}

use leasehold::{FenceGuard, Runtime, Schedule};
use tokio::time::Instant;

// ---------------------------------------------------------------------------
// The two connection modes
// ---------------------------------------------------------------------------

pub use leasehold::runtime::Connections;

/// Starts a replica on `pool` whose statements run in connection mode
/// `mode`: holder `holder`, poll interval `poll`.
pub async fn replica_in<J: leasehold::FencedJob>(
    mode: Connections,
    pool: PgPool,
    holder: &str,
    poll: Duration,
    jobs: Vec<J>,
) -> Runtime {
    builder(pool, holder, Some(poll), jobs)
        .connections(mode)
        .start()
        .await
        .expect("runtime starts")
}

/// A lease store for `pool`'s database of the kind `mode` gives the
/// runtime: over `pool` itself (shared), or on connections of its own
/// opened from `pool`'s connect options.
pub async fn store_in(mode: Connections, pool: &PgPool) -> LeaseStore {
    match mode {
        Connections::SharedWithService => LeaseStore::new(pool.clone()),
        _ => LeaseStore::connect((*pool.connect_options()).clone())
            .await
            .expect("the store connects"),
    }
}

/// Declares the scenario `async fn $scenario(mode: Connections)` as two
/// tests, `$scenario::owned` and `$scenario::shared_with_service`: one per
/// connection mode of the runtime.
macro_rules! in_both_connection_modes {
    ($scenario:ident) => {
        mod $scenario {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn owned() {
                super::$scenario(leasehold::runtime::Connections::default()).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn shared_with_service() {
                super::$scenario(leasehold::runtime::Connections::SharedWithService).await
            }
        }
    };
}
pub(crate) use in_both_connection_modes;

/// A replica `holder` running the manual job `key` right now, and the
/// guard of that run, which stays open until the runtime shuts down.
pub async fn held_guard(db: &TestDb, holder: &str, key: &str) -> (Runtime, FenceGuard) {
    held_guard_for(db, holder, key, Duration::from_secs(10)).await
}

/// [`held_guard`] with a lease of `lease` (heartbeat lease/3, margin
/// lease/10): for scenarios where the lease must run out.
pub async fn held_guard_for(db: &TestDb, holder: &str, key: &str, lease: Duration) -> (Runtime, FenceGuard) {
    held_guard_on(db.pool_with(2).await, holder, key, lease).await
}

/// [`held_guard_for`] on a pool of the caller's (through a proxy or a
/// pooler).
pub async fn held_guard_on(pool: PgPool, holder: &str, key: &str, lease: Duration) -> (Runtime, FenceGuard) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let body = move |guard: FenceGuard| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(guard.clone());
            guard.cancelled().await;
            Ok(())
        }
    };
    let rt = replica_on(
        pool,
        holder,
        Duration::from_millis(100),
        vec![job(key, quick(Schedule::Manual, lease), body)],
    )
    .await;
    rt.trigger(key).await.expect("trigger");
    let guard = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("the run starts")
        .expect("guard");
    (rt, guard)
}

/// Runs that each wait, once started, until the test lets one finish: the
/// scenario decides when a run ends instead of guessing a duration. Each
/// run is recorded in [`Gate::runs`]; a cancelled run records why and
/// returns an error.
#[derive(Clone)]
pub struct Gate {
    runs: Runs,
    finishes: std::sync::Arc<tokio::sync::Semaphore>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            runs: Runs::default(),
            finishes: std::sync::Arc::new(tokio::sync::Semaphore::new(0)),
        }
    }
}

impl Gate {
    /// The runs so far.
    pub fn runs(&self) -> &Runs {
        &self.runs
    }

    /// Lets one waiting (or the next) run return `Ok`.
    pub fn finish_one(&self) {
        self.finishes.add_permits(1);
    }

    /// The job body.
    pub fn body(&self) -> impl Fn(FenceGuard) -> leasehold_testkit::jobs::BoxedRun + Send + Sync + 'static {
        let gate = self.clone();
        move |guard: FenceGuard| {
            let gate = gate.clone();
            Box::pin(async move {
                let i = gate.runs.start(&guard);
                tokio::select! {
                    permit = gate.finishes.acquire() => {
                        permit.expect("the gate is never closed").forget();
                        gate.runs.end(i);
                        Ok(())
                    }
                    _ = guard.cancelled() => {
                        gate.runs.cancelled(i, guard.reason());
                        gate.runs.end(i);
                        Err("cancelled".into())
                    }
                }
            })
        }
    }
}

// ---------------------------------------------------------------------------
// Windows measured in the runtime's own decisions
// ---------------------------------------------------------------------------

/// Waits until `n` scheduler passes of `rt` that poll the server, each
/// begun after this call, have ended: every key that was due here, or that
/// the server said became due, has been proposed in a claim by then, and
/// each run claimed has been spawned. The window for "this must not run":
/// as long as the runtime needs to act, however slow the machine, instead
/// of a guessed sleep.
pub async fn wait_polls(rt: &Runtime, n: u64) {
    let faults = rt.faults();
    wait_counted("scheduler polls", n, faults.polls_begun(), || faults.polls_done()).await
}

/// Waits until `n` heartbeat ticks of `rt`, each begun after this call,
/// have ended: each renewal answered (or failed), and each loss reported
/// cancelled its run. The window for "this lease must not be renewed".
pub async fn wait_heartbeats(rt: &Runtime, n: u64) {
    let faults = rt.faults();
    wait_counted("heartbeat ticks", n, faults.heartbeats_begun(), || {
        faults.heartbeats_done()
    })
    .await
}

/// Waits until `done()` reaches `begun + n`: the counted steps run one at a
/// time, so the `n` steps begun after `begun` was read have ended.
async fn wait_counted(what: &str, n: u64, begun: u64, done: impl Fn() -> u64) {
    let target = begun + n;
    let reached = leasehold_testkit::wait_for(Duration::from_secs(30), Duration::from_millis(5), || {
        (done() >= target).then_some(())
    })
    .await;
    assert!(
        reached.is_some(),
        "{what}: {} of {n} ended within 30 s",
        (done() + n).saturating_sub(target)
    );
}

/// Whether `check` holds within `within` (checked every
/// [`leasehold_testkit::wait::EVENTUALLY_EVERY`]): for an outcome that must
/// come within a bound the scenario states, asserted by the caller with its
/// own message.
pub async fn holds_within(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    leasehold_testkit::wait_for(within, leasehold_testkit::wait::EVENTUALLY_EVERY, || {
        check().then_some(())
    })
    .await
    .is_some()
}

/// Waits until the lease of `key` is free (its run released), and returns
/// the row then.
pub async fn until_free(store: &LeaseStore, key: &str) -> leasehold::store::LeaseInfo {
    eventually_async(Duration::from_secs(10), || async {
        let info = store.get(key).await.expect("read the row").expect("a row");
        (!info.is_held()).then_some(info)
    })
    .await
}

/// Waits until `key` is due by the server's clock (its next slot has come),
/// and returns the row then.
pub async fn until_due(store: &LeaseStore, key: &str) -> leasehold::store::LeaseInfo {
    eventually_async(Duration::from_secs(10), || async {
        let info = store.get(key).await.expect("read the row").expect("a row");
        info.next_due_at
            .is_some_and(|due| due <= info.server_now)
            .then_some(info)
    })
    .await
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

/// Fault: an outside session holds `SELECT … FOR UPDATE` on the lease row
/// of `key` until the returned row commits, rolls back or is dropped.
pub async fn lock_lease_row(pool: &PgPool, key: &str) -> leasehold::store::LockedRow {
    LeaseStore::new(pool.clone())
        .lock_row_for_test(key)
        .await
        .expect("lock the lease row")
}

/// Waits until a session of this database is blocked on a lock: the
/// statement under test has taken its snapshot and waits for a row another
/// session holds. The moment a scenario's other session acts, without
/// guessing it with a sleep (a claim that started late would see the other
/// session's commit in its snapshot and test nothing).
pub async fn until_a_session_waits_for_a_lock(pool: &PgPool) {
    eventually_async(Duration::from_secs(10), || async {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
              WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(pool)
        .await
        .expect("read pg_stat_activity");
        (waiting > 0).then_some(())
    })
    .await
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

/// Fault: the server terminates every client backend of this database but
/// the caller's (`pg_terminate_backend`), as a restart or a failover would.
/// Returns how many it terminated.
pub async fn terminate_other_backends(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
    )
    .fetch_one(pool)
    .await
    .expect("terminate backends")
}

/// How many fences the database has drawn so far (the fence sequence's
/// position): every claim that took a lease drew one, so the difference
/// between two readings counts the claims between them, whoever made them.
pub async fn fences_drawn(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM leasehold_fence_seq")
        .fetch_one(pool)
        .await
        .expect("read the fence sequence")
}

/// Fault: an outside session locks `leasehold_pause` (ACCESS EXCLUSIVE)
/// until the returned transaction ends. Every claim and every poll reads the
/// pauses in force (invariant 8), so a scheduler's next statement waits for
/// the lock, while releases, which do not read them, go through.
pub async fn lock_pause_table(pool: &PgPool) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut tx = pool.begin().await.expect("begin");
    sqlx::raw_sql("LOCK TABLE leasehold_pause IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *tx)
        .await
        .expect("lock the pause table");
    tx
}

// ---------------------------------------------------------------------------
// Logs: what a service's `tracing` subscriber would print
// ---------------------------------------------------------------------------

/// The `EnvFilter` the README gives a production service.
pub const PRODUCTION_LOG_FILTER: &str = "info,sqlx=warn";

/// Makes `subscriber` this thread's default until the guard is dropped, and
/// makes sure it sees every event of leasehold's callsites.
///
/// `tracing` caches one interest per callsite for the whole process, decided
/// by the first thread to reach it. With a single dispatcher registered, that
/// thread's own default decides: a test thread with no subscriber would
/// cache "never" and silence the callsite for the test capturing it (tokio-rs/
/// tracing#3611). A do-nothing global subscriber, set before any scoped one,
/// gives every thread a subscriber that wants every callsite, so no cached
/// interest is ever "never".
pub fn scoped_subscriber(
    subscriber: impl tracing::Subscriber + Send + Sync + 'static,
) -> tracing::subscriber::DefaultGuard {
    static BASELINE: std::sync::Once = std::sync::Once::new();
    BASELINE.call_once(|| {
        // Fails only if a global subscriber is already set, which serves too.
        let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry());
    });
    tracing::subscriber::set_default(subscriber)
}

/// leasehold's log lines that pass a filter, counted by level.
#[derive(Clone, Default)]
pub struct LogCounts(std::sync::Arc<std::sync::Mutex<Vec<(tracing::Level, String)>>>);

impl LogCounts {
    /// Counts, from now on and on this thread (a current-thread test runs
    /// the runtime's tasks on it), the events of leasehold's modules that
    /// pass `filter`, until the guard is dropped.
    pub fn capture(filter: &str) -> (LogCounts, tracing::subscriber::DefaultGuard) {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::{EnvFilter, Layer};

        let counts = LogCounts::default();
        let layer = counts.clone().with_filter(EnvFilter::new(filter));
        let guard = scoped_subscriber(tracing_subscriber::registry().with(layer));
        (counts, guard)
    }

    /// How many lines at exactly `level`.
    pub fn at(&self, level: tracing::Level) -> usize {
        self.0.lock().unwrap().iter().filter(|(l, _)| *l == level).count()
    }

    /// The messages at `level`, for assertion messages.
    pub fn messages(&self, level: tracing::Level) -> Vec<String> {
        let lines = self.0.lock().unwrap();
        lines
            .iter()
            .filter(|(l, _)| *l == level)
            .map(|(_, m)| m.clone())
            .collect()
    }

    /// Forgets what was counted so far.
    pub fn clear(&self) {
        self.0.lock().unwrap().clear();
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for LogCounts {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: tracing_subscriber::layer::Context<'_, S>) {
        let meta = event.metadata();
        if !meta.target().starts_with("leasehold") {
            return;
        }
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        self.0.lock().unwrap().push((*meta.level(), message.0));
    }
}

// A primary with a streaming standby and the steps of a failover.
pub use leasehold_testkit::standby::Replicated;

/// The statements prepared on each open connection of `store`, oldest
/// first, each with the number of generic and custom plans it has run
/// (`pg_prepared_statements`, read unprepared, so that reading adds none).
/// Every connection of the pool is held at once, so that each is read
/// once, one still on its way back to the pool included.
pub async fn prepared_statements(store: &leasehold::store::LeaseStore) -> Vec<Vec<(String, i64, i64)>> {
    let mut held = Vec::new();
    while held.len() < store.pool().size().max(1) as usize {
        held.push(store.pool().acquire().await.expect("a connection of the store"));
    }
    let mut each = Vec::new();
    for conn in &mut held {
        let statements = sqlx::query_as(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements ORDER BY prepare_time",
        )
        .persistent(false)
        .fetch_all(&mut **conn)
        .await
        .expect("the prepared statements read");
        each.push(statements);
    }
    each
}
