//! `pg_stat_statements` of one database: how many statements ran, what
//! they cost. Other tests or scenarios use other databases on the same
//! server at the same time, so every reset and every read is scoped to the
//! current database.
//!
//! The extension must be preloaded (`shared_preload_libraries`): the
//! testkit's clusters do it when the server has the module; a
//! `DATABASE_URL` server must be configured for it.

use sqlx::PgPool;

/// Whether `pg_stat_statements` works in this database: creates the
/// extension if needed and reads the view once (it fails when the module is
/// not preloaded).
pub async fn statement_stats_available(pool: &PgPool) -> bool {
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .execute(pool)
        .await
        .is_ok()
        && sqlx::query("SELECT count(*) FROM pg_stat_statements")
            .execute(pool)
            .await
            .is_ok()
}

/// Enables `pg_stat_statements` in this database and clears its counters
/// (this database's only). Panics when the extension is not available.
pub async fn reset_statement_stats(pool: &PgPool) {
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .execute(pool)
        .await
        .expect("pg_stat_statements must be preloaded (the testkit cluster does; for DATABASE_URL set shared_preload_libraries)");
    sqlx::query(
        "SELECT pg_stat_statements_reset(0::oid, (SELECT oid FROM pg_database WHERE datname = current_database()), 0::int8)",
    )
    .execute(pool)
    .await
    .expect("pg_stat_statements_reset");
}

/// Sums of `pg_stat_statements` over some statements of one database.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct StatementTotals {
    /// Times the statements ran.
    pub calls: i64,
    /// Rows they returned or changed, all calls together.
    pub rows: i64,
    /// Their total execution time, in milliseconds.
    pub exec_ms: f64,
    /// WAL records they wrote.
    pub wal_records: i64,
    /// WAL they wrote, in bytes.
    pub wal_bytes: f64,
}

/// Totals for the statements of this database whose text matches the SQL
/// `LIKE` pattern `like`, since [`reset_statement_stats`] (the statistics
/// queries themselves are left out).
pub async fn statement_totals(pool: &PgPool, like: &str) -> StatementTotals {
    let row: (i64, i64, f64, i64, f64) = sqlx::query_as(
        "SELECT COALESCE(sum(s.calls), 0)::int8, COALESCE(sum(s.rows), 0)::int8, COALESCE(sum(s.total_exec_time), 0)::float8,
                COALESCE(sum(s.wal_records), 0)::int8, COALESCE(sum(s.wal_bytes), 0)::float8
           FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
          WHERE d.datname = current_database() AND s.query LIKE $1
            AND s.query NOT LIKE '%pg_stat_statements%'",
    )
    .bind(like)
    .fetch_one(pool)
    .await
    .expect("read pg_stat_statements");
    StatementTotals {
        calls: row.0,
        rows: row.1,
        exec_ms: row.2,
        wal_records: row.3,
        wal_bytes: row.4,
    }
}

/// How many times statements of this database whose text contains `needle`
/// ran since [`reset_statement_stats`] (`needle` is a `LIKE` fragment:
/// `%` and `_` in it are wildcards).
pub async fn statement_calls(pool: &PgPool, needle: &str) -> i64 {
    statement_totals(pool, &format!("%{needle}%")).await.calls
}

/// The text of each statement of this database that ran since
/// [`reset_statement_stats`] (the statistics queries themselves left out),
/// for an assertion's message.
pub async fn statement_texts(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT s.query FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
          WHERE d.datname = current_database() AND s.query NOT LIKE '%pg_stat_statements%'",
    )
    .fetch_all(pool)
    .await
    .expect("read pg_stat_statements")
}
