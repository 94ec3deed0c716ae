//! Shared setup for the scenario tests: databases, replicas, faults.

#![allow(dead_code)]

use std::time::Duration;

use leasehold::LeaseStore;
use leasehold_testkit::TestDb;
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
    let done = sqlx::query(
        "UPDATE leasehold_lease SET expires_at = GREATEST(clock_timestamp(), acquired_at + interval '1 microsecond') WHERE key = $1",
    )
    .bind(key)
    .execute(pool)
    .await
    .expect("expire lease");
    assert_eq!(done.rows_affected(), 1, "no lease row for {key}");
}

/// Fault: an operator deletes the lease row of `key`.
pub async fn operator_delete(pool: &PgPool, key: &str) {
    sqlx::query("DELETE FROM leasehold_lease WHERE key = $1")
        .bind(key)
        .execute(pool)
        .await
        .expect("delete lease");
}

/// Enables pg_stat_statements in this database and clears its counters.
pub async fn reset_statement_stats(pool: &PgPool) {
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .execute(pool)
        .await
        .expect("pg_stat_statements must be preloaded (the testkit cluster does; for DATABASE_URL set shared_preload_libraries)");
    sqlx::query("SELECT pg_stat_statements_reset()")
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
