//! Schema migrations, safe when every replica starts at once.
//!
//! The migrations are the plain SQL files in `migrations/`, embedded here.
//! Each file records its own version in `leasehold_schema_version`, so a
//! schema applied by a user's own migration tool is recognised too. Nothing
//! here reads or writes sqlx's `_sqlx_migrations` table.

use sqlx::PgPool;

use crate::error::{Error, Result};

/// The migrations, in order: (version, SQL).
const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("../migrations/0001_leases.sql")),
    (2, include_str!("../migrations/0002_due_index.sql")),
    (3, include_str!("../migrations/0003_operators.sql")),
    (4, include_str!("../migrations/0004_actions.sql")),
    (5, include_str!("../migrations/0005_fence_tenure.sql")),
    (6, include_str!("../migrations/0006_fence_timeline.sql")),
    (7, include_str!("../migrations/0007_fleet_keys.sql")),
    (8, include_str!("../migrations/0008_run_ring_room.sql")),
    (9, include_str!("../migrations/0009_lost_runs.sql")),
    (10, include_str!("../migrations/0010_key_life.sql")),
    (11, include_str!("../migrations/0011_liveness.sql")),
    (12, include_str!("../migrations/0012_gone_seen.sql")),
    (13, include_str!("../migrations/0013_run_timeout.sql")),
    (14, include_str!("../migrations/0014_fleet_limit.sql")),
    (15, include_str!("../migrations/0015_commit_check_owner.sql")),
    (16, include_str!("../migrations/0016_schema_check.sql")),
];

/// The schema version this library needs and knows.
pub const SCHEMA_VERSION: i32 = MIGRATIONS[MIGRATIONS.len() - 1].0;

/// Key of the transaction-scoped advisory lock that serializes migrations
/// across replicas ("leasehold" in ASCII, so it is recognisable in
/// `pg_locks`). Transaction scope is the right tool here: the lock is short
/// and is released by COMMIT or ROLLBACK, whatever connection runs it.
const MIGRATION_LOCK: i64 = 0x6c65_6173_6568_6f6c;

/// Creates or upgrades leasehold's tables in the pool's database.
///
/// Idempotent and safe to call from every replica at start-up at once: the
/// whole upgrade runs in one transaction serialized by
/// `pg_advisory_xact_lock`, so exactly one caller applies each migration and
/// the others find it done. A database already migrated by a *newer*
/// leasehold gives [`Error::SchemaTooNew`] and is left untouched.
///
/// Cancel-safe in the sense that dropping the future at any await rolls the
/// transaction back and leaves no pooled connection inside it: nothing is
/// half-applied, but nothing is applied either.
///
/// ```no_run
/// # async fn demo() -> leasehold::Result<()> {
/// let pool = sqlx::PgPool::connect("postgres://localhost/app").await?;
/// leasehold::migrate(&pool).await?;
/// # Ok(()) }
/// ```
pub async fn migrate(pool: &PgPool) -> Result<()> {
    let mut tx = crate::connection::begin(&crate::connection::Conns::shared(pool.clone(), Default::default())).await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *tx)
        .await?;
    let current = read_version(&mut tx).await?.unwrap_or(0);
    if current > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            found: current,
            supported: SCHEMA_VERSION,
        });
    }
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
        tracing::info!(version, "applying leasehold migration");
        sqlx::raw_sql(*sql).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Checks that the schema exists and is one this library can use, without
/// changing anything. Used at start-up when automatic migration is off.
pub async fn check_schema(pool: &PgPool) -> Result<()> {
    match schema_version(pool).await? {
        None => Err(Error::SchemaMissing),
        Some(found) if found > SCHEMA_VERSION => Err(Error::SchemaTooNew {
            found,
            supported: SCHEMA_VERSION,
        }),
        Some(found) if found < SCHEMA_VERSION => Err(Error::SchemaOutdated {
            found,
            needed: SCHEMA_VERSION,
        }),
        Some(_) => Ok(()),
    }
}

/// The schema version applied to the database: the highest version in
/// `leasehold_schema_version`, or `None` when leasehold's schema is absent.
/// Changes nothing. Compare it with [`SCHEMA_VERSION`], the version this
/// library needs (or use [`check_schema`], which does).
///
/// Cancel-safe: one statement on a checked connection.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> leasehold::Result<()> {
/// match leasehold::schema::schema_version(&pool).await? {
///     Some(v) => println!("schema version {v} (this library needs {})", leasehold::schema::SCHEMA_VERSION),
///     None => println!("no leasehold schema: run leasehold::migrate"),
/// }
/// # Ok(()) }
/// ```
pub async fn schema_version(pool: &PgPool) -> Result<Option<i32>> {
    // One statement on a checked connection (an operator's command checks
    // the schema before it acts: one round trip, not a transaction of
    // three). The version table is read only when it exists: `CASE`
    // evaluates `query_to_xml`'s query, planned when it runs, only then —
    // a plain `SELECT` of a missing table fails at planning.
    const VERSION: &str = "
        SELECT CASE WHEN to_regclass('leasehold_schema_version') IS NULL THEN NULL
                    ELSE (xpath('/row/v/text()',
                                query_to_xml('SELECT max(version) AS v FROM leasehold_schema_version',
                                             false, true, '')))[1]::text::int END";
    let conns = crate::connection::Conns::shared(pool.clone(), Default::default());
    crate::connection::run!(&conns, |conn| sqlx::query_scalar(VERSION).fetch_one(conn))
}

/// The highest applied version, or `None` when the version table is absent.
async fn read_version(conn: &mut sqlx::PgConnection) -> Result<Option<i32>> {
    // Looking the table up first avoids an error (which would abort the
    // migration transaction) when it does not exist yet.
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('leasehold_schema_version') IS NOT NULL")
        .fetch_one(&mut *conn)
        .await?;
    if !exists {
        return Ok(None);
    }
    let version: Option<i32> = sqlx::query_scalar("SELECT max(version) FROM leasehold_schema_version")
        .fetch_one(&mut *conn)
        .await?;
    Ok(version)
}
