//! A fenced transaction that its client stops talking on (a frozen process,
//! a half-open connection) is ended by the server one lease after its last
//! statement, so a successor waits at most that long for the fence row.

use std::time::Duration;

use leasehold::{runtime::Degraded, store::LeaseStore};
use tokio::time::Instant;

use crate::support::{self, accounts, balance, eventually, eventually_async, held_guard_for};

const LEASE: Duration = Duration::from_secs(2);

/// Replica "a" writes inside its fenced transaction and then sends nothing
/// more (its runtime neither, as in a frozen process). "b" takes the key
/// over once the lease is gone: its own fenced transaction waits for the
/// fence row only until the server has ended "a"'s, one lease after "a"'s
/// last statement — not for as long as "a" stays frozen. "a"'s write is
/// gone, and its COMMIT, sent afterwards, fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_holders_transaction_is_ended_within_a_lease_and_the_successor_writes() {
    let db = support::db().await;
    accounts(&db.pool).await;
    let (a_rt, a) = held_guard_for(&db, "a", "billing", LEASE).await;
    let mut frozen = a.begin_fenced(&db.pool).await.unwrap();
    sqlx::query("UPDATE account SET balance = 666 WHERE id = 1")
        .execute(&mut *frozen)
        .await
        .unwrap();
    let last_statement = Instant::now();
    // "a"'s runtime sends nothing more either: no renewal, no release.
    a_rt.faults().partition(true);
    // "b" asks for the key once "a"'s tenure is over (a trigger during the
    // run would be the run's own business).
    let store = LeaseStore::new(db.pool.clone());
    eventually_async(LEASE * 2, || async {
        let row = store.get("billing").await.unwrap().expect("row");
        (!row.is_held()).then_some(())
    })
    .await;

    let (b_rt, b) = held_guard_for(&db, "b", "billing", LEASE).await;
    assert!(b.fence() > a.fence());
    let mut tx = tokio::time::timeout(LEASE * 4, b.begin_fenced(&db.pool))
        .await
        .expect("the successor's fenced transaction must not wait for the frozen one to resume")
        .unwrap();
    let waited = last_statement.elapsed();
    assert!(
        waited < LEASE + Duration::from_secs(2),
        "the fence row was free {waited:?} after the frozen transaction's last statement (lease {LEASE:?})"
    );
    sqlx::query("UPDATE account SET balance = 7 WHERE id = 1")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    assert!(
        frozen.commit().await.is_err(),
        "the frozen transaction was ended by the server"
    );
    assert_eq!(balance(&db.pool, 1).await.0, 7, "only the successor's write is there");
    b_rt.shutdown().await;
    a_rt.shutdown().await;
}

/// While a run's fence advance waits for the fence row (here: another of its
/// own fenced transactions holds it), `health()` says so with the key, and
/// stops saying so once the wait is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_advance_waiting_for_the_row_shows_in_health_while_it_waits() {
    let db = support::db().await;
    accounts(&db.pool).await;
    // Long enough that the first transaction, idle while the second
    // waits, is not ended by the server meanwhile.
    let (rt, guard) = held_guard_for(&db, "a", "billing", LEASE * 2).await;
    let first = guard.begin_fenced(&db.pool).await.unwrap();
    let (second_guard, pool) = (guard.clone(), db.pool.clone());
    let second = tokio::spawn(async move { second_guard.begin_fenced(&pool).await.map(drop) });
    support::until_a_session_waits_for_a_lock(&db.pool).await;

    let waiting = |h: &leasehold::runtime::Health| {
        h.degraded
            .iter()
            .any(|d| matches!(d, Degraded::FencedTransactionWaiting { key, .. } if key == "billing"))
    };
    eventually(Duration::from_secs(5), || waiting(&rt.health()).then_some(())).await;
    assert!(!rt.health().healthy);

    first.commit().await.unwrap();
    second.await.unwrap().unwrap();
    assert!(!waiting(&rt.health()), "the wait is over");
    rt.shutdown().await;
}

/// The idle bound only ever shortens what the service set: with the
/// database's own `idle_in_transaction_session_timeout` at 1 s and a 10 s
/// lease, a fenced transaction left idle is ended after about 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shorter_idle_timeout_of_the_service_is_kept() {
    let db = support::db().await;
    accounts(&db.pool).await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE \"{}\" SET idle_in_transaction_session_timeout = '1s'",
        db.name
    )))
    .execute(&db.pool)
    .await
    .unwrap();
    // New connections see the setting.
    let pool = db.pool_with(2).await;
    let (rt, guard) = held_guard_for(&db, "a", "billing", Duration::from_secs(10)).await;
    let mut tx = guard.begin_fenced(&pool).await.unwrap();
    // Within 3 s (far below the lease's bound), the server has ended it.
    let _ = leasehold_testkit::wait_for_async(
        Duration::from_secs(3),
        leasehold_testkit::wait::EVENTUALLY_EVERY,
        || async {
            support::backends_in_transaction(&db.pool)
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await;
    let ended = sqlx::query("UPDATE account SET balance = 1 WHERE id = 1")
        .execute(&mut *tx)
        .await;
    assert!(
        ended.is_err(),
        "the server ended the transaction after the service's 1 s"
    );
    rt.shutdown().await;
}

/// A fence advance that waits for the fence row is logged by leasehold —
/// WARN, naming the key and the fence — before sqlx's own slow-statement
/// warning (1 s), and an INFO line says when the wait is over.
#[tokio::test(flavor = "current_thread")]
async fn a_fence_advance_waiting_for_the_row_is_logged_with_its_key_and_fence() {
    let db = support::db().await;
    accounts(&db.pool).await;
    let (rt, guard) = held_guard_for(&db, "a", "billing", LEASE * 2).await;
    let (logs, _capture) = support::LogCounts::capture("leasehold=info");
    let first = guard.begin_fenced(&db.pool).await.unwrap();
    let (second_guard, pool) = (guard.clone(), db.pool.clone());
    let second = tokio::spawn(async move { second_guard.begin_fenced(&pool).await.map(drop) });
    let warned = |logs: &support::LogCounts| {
        logs.messages(tracing::Level::WARN)
            .iter()
            .any(|m| m.contains("waits for the resource's row"))
    };
    support::eventually_async(Duration::from_secs(5), || {
        let logs = logs.clone();
        async move { warned(&logs).then_some(()) }
    })
    .await;
    first.commit().await.unwrap();
    second.await.unwrap().unwrap();
    assert!(
        logs.messages(tracing::Level::INFO)
            .iter()
            .any(|m| m.contains("fence wait over")),
        "{:?}",
        logs.messages(tracing::Level::INFO)
    );
    rt.shutdown().await;
}
