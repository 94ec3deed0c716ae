//! Shutdown while more keys are due than the replica has run slots for, and
//! its scheduler is in the middle of a statement when shutdown begins: by
//! `Runtime::shutdown`, or by dropping the last handle.

use std::time::Duration;

use leasehold::{FenceGuard, Runtime, Schedule};
use sqlx::PgPool;
use tokio::time::Instant;

use crate::support::{self, ScriptedJob, TestDb, eventually, eventually_async, fences_drawn, job, quick};

/// Keys on the replica, each due every 200 ms: far more than it can run.
const KEYS: usize = 300;
/// Runs at once on the replica.
const LIMIT: usize = 4;
/// The runs' grace (300 ms, `quick`) plus release round trips, with room
/// for a loaded test machine.
const SHUTDOWN_BOUND: Duration = Duration::from_secs(3);

/// `KEYS` keys due every 200 ms; each run works 20 ms, or until cancelled.
fn busy_keys() -> Vec<ScriptedJob> {
    (0..KEYS)
        .map(|k| {
            job(
                &format!("busy:{k}"),
                quick(Schedule::every(Duration::from_millis(200)), Duration::from_secs(5)),
                |guard: FenceGuard| async move {
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                        _ = guard.cancelled() => {}
                    }
                    Ok(())
                },
            )
        })
        .collect()
}

/// A replica `holder` of the busy keys with room for `LIMIT` runs, claiming
/// as fast as its runs end, then caught in the middle of a scheduler
/// statement with all its run slots free: an outside session locks the
/// pause table, which every claim and poll reads. Returns the lock.
async fn busy_replica_mid_claim(db: &TestDb, holder: &str) -> (Runtime, sqlx::Transaction<'static, sqlx::Postgres>) {
    let runtime = support::builder(
        db.pool_with(5).await,
        holder,
        Some(Duration::from_millis(100)),
        busy_keys(),
    )
    .max_concurrent_runs(LIMIT)
    .start()
    .await
    .expect("runtime starts");
    let start = fences_drawn(&db.pool).await;
    eventually_async(Duration::from_secs(10), || async {
        (fences_drawn(&db.pool).await >= start + 40).then_some(())
    })
    .await;
    let lock = support::lock_pause_table(&db.pool).await;
    // The runs end and are released; no new one can start, and with due
    // keys and free slots the scheduler is straight back in a statement,
    // waiting for the lock (the heartbeat has nothing left to renew).
    eventually(Duration::from_secs(10), || {
        (runtime.health().running == 0).then_some(())
    })
    .await;
    support::until_a_session_waits_for_a_lock(&db.pool).await;
    (runtime, lock)
}

/// Live leases `holder` holds, by the server clock.
async fn held_by(pool: &PgPool, holder: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM leasehold_lease WHERE holder = $1 AND expires_at > clock_timestamp()")
        .bind(holder)
        .fetch_one(pool)
        .await
        .expect("read leases")
}

/// One replica, 300 keys due every 200 ms, room for 4 runs; shutdown begins
/// while its scheduler waits on a statement. Shutdown returns within the
/// grace period plus a release round trip, every lease is handed back, and
/// once shutdown began nothing but the claim already sent takes a lease
/// (at most the 4 free slots' worth), though hundreds of keys stay due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_while_keys_keep_falling_due_returns_in_time_and_claims_nothing() {
    let db = support::db().await;
    let (runtime, lock) = busy_replica_mid_claim(&db, "busy").await;
    let before = fences_drawn(&db.pool).await;
    let began = Instant::now();
    let stopping = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.shutdown().await }
    });
    eventually(Duration::from_secs(5), || runtime.health().shutting_down.then_some(())).await;
    lock.rollback().await.expect("unlock");
    let stopped = tokio::time::timeout(SHUTDOWN_BOUND, stopping).await;
    let took = began.elapsed();
    let claimed = fences_drawn(&db.pool).await - before;
    println!("measured: shutdown took {took:?}, {claimed} claims after it began");
    assert!(
        stopped.is_ok(),
        "shutdown did not return within {SHUTDOWN_BOUND:?}; {claimed} claims since it began"
    );
    assert!(claimed <= LIMIT as i64, "{claimed} claims after shutdown began");
    assert_eq!(held_by(&db.pool, "busy").await, 0, "every lease handed back");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        fences_drawn(&db.pool).await - before,
        claimed,
        "claims after shutdown returned"
    );
}

/// The same, but the service drops its last handle instead: the shutdown
/// that starts in the background stops claiming too, and hands every lease
/// back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_last_handle_while_keys_keep_falling_due_stops_claiming() {
    let db = support::db().await;
    let (runtime, lock) = busy_replica_mid_claim(&db, "dropped").await;
    let before = fences_drawn(&db.pool).await;
    drop(runtime);
    lock.rollback().await.expect("unlock");
    let bound = Instant::now() + SHUTDOWN_BOUND;
    while held_by(&db.pool, "dropped").await > 0 {
        let claimed = fences_drawn(&db.pool).await - before;
        assert!(
            Instant::now() < bound,
            "leases still held {SHUTDOWN_BOUND:?} after the drop; {claimed} claims since"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Nothing claims any more, now or later.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let claimed = fences_drawn(&db.pool).await - before;
    println!("measured: {claimed} claims after the last handle was dropped");
    assert!(
        claimed <= LIMIT as i64,
        "{claimed} claims after the last handle was dropped"
    );
    assert_eq!(held_by(&db.pool, "dropped").await, 0, "every lease handed back");
}
