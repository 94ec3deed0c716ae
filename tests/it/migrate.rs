//! Migration scenarios: a fleet starting at once, re-runs, foreign tables.

use leasehold::Error;

use crate::support;

/// docs/design.md §3, M1: 50 replicas migrating an empty database at once all succeed,
/// the schema is created once, a second run is a no-op, and the user's own
/// `_sqlx_migrations` table is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_replicas_migrate_an_empty_database_at_once() {
    let db = leasehold_testkit::test_db().await;
    sqlx::raw_sql(
        "CREATE TABLE _sqlx_migrations (version BIGINT PRIMARY KEY, description TEXT NOT NULL);
         INSERT INTO _sqlx_migrations VALUES (20240101, 'users own migration');
         CREATE TABLE lease (key TEXT PRIMARY KEY, owner TEXT);
         INSERT INTO lease VALUES ('theirs', 'user');",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    support::reset_statement_stats(&db.pool).await;

    let pool = db.pool_with(50).await;
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { leasehold::migrate(&pool).await })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().expect("every replica's migrate succeeds");
    }
    let created = support::statement_calls(&db.pool, "CREATE TABLE IF NOT EXISTS leasehold_lease").await;
    assert_eq!(created, 1, "the schema is created by exactly one replica");

    leasehold::migrate(&db.pool).await.expect("second run");
    let created = support::statement_calls(&db.pool, "CREATE TABLE IF NOT EXISTS leasehold_lease").await;
    assert_eq!(created, 1, "running migrate again is a no-op");

    let versions: Vec<i32> = sqlx::query_scalar("SELECT version FROM leasehold_schema_version")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(versions, (1..=leasehold::schema::SCHEMA_VERSION).collect::<Vec<_>>());
    let theirs: Vec<(i64, String)> = sqlx::query_as("SELECT version, description FROM _sqlx_migrations")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(theirs, vec![(20240101, "users own migration".to_owned())]);
    let lease: (String, String) = sqlx::query_as("SELECT key, owner FROM lease")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(lease, ("theirs".to_owned(), "user".to_owned()));
    leasehold::schema::check_schema(&db.pool)
        .await
        .expect("schema is complete");
}

/// A database migrated by a newer leasehold is refused with a clear error,
/// and left as it is.
#[tokio::test]
async fn a_newer_schema_is_refused() {
    let db = support::db().await;
    sqlx::query("INSERT INTO leasehold_schema_version (version, description) VALUES ($1, 'from the future')")
        .bind(leasehold::schema::SCHEMA_VERSION + 1)
        .execute(&db.pool)
        .await
        .unwrap();
    let err = leasehold::migrate(&db.pool).await.expect_err("newer schema");
    assert!(
        matches!(err, Error::SchemaTooNew { found, .. } if found == leasehold::schema::SCHEMA_VERSION + 1),
        "{err:?}"
    );
    assert!(err.to_string().contains("upgrade leasehold"), "{err}");
    assert!(matches!(
        leasehold::schema::check_schema(&db.pool).await,
        Err(Error::SchemaTooNew { .. })
    ));
}

/// Without migrations, the check names the fix; the plain SQL files, applied
/// by hand as a user's migration tool would, are recognised as complete.
#[tokio::test]
async fn a_missing_schema_names_the_fix_and_hand_applied_sql_counts() {
    let db = leasehold_testkit::test_db().await;
    let err = leasehold::schema::check_schema(&db.pool)
        .await
        .expect_err("no schema yet");
    assert!(matches!(err, Error::SchemaMissing), "{err:?}");
    assert!(err.to_string().contains("leasehold::migrate"), "{err}");

    let mut files: Vec<_> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for file in files {
        let sql = std::fs::read_to_string(&file).unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&db.pool).await.unwrap();
    }
    leasehold::schema::check_schema(&db.pool)
        .await
        .expect("hand-applied schema is recognised");
    leasehold::migrate(&db.pool)
        .await
        .expect("and migrate has nothing left to do");
}

/// A schema older than the library (version 1, before the scheduler's
/// index) is reported as such (the fix is the same: migrate), and `migrate`
/// brings it up to date: the index is there afterwards.
#[tokio::test]
async fn an_older_schema_is_reported_and_upgraded() {
    let db = support::db().await;
    sqlx::raw_sql("DROP INDEX leasehold_lease_next_due; DELETE FROM leasehold_schema_version WHERE version > 1")
        .execute(&db.pool)
        .await
        .unwrap();
    let err = leasehold::schema::check_schema(&db.pool)
        .await
        .expect_err("older schema");
    assert!(matches!(err, Error::SchemaOutdated { found: 1, .. }), "{err:?}");
    assert!(err.to_string().contains("leasehold::migrate"), "{err}");
    leasehold::migrate(&db.pool).await.expect("upgrade");
    leasehold::schema::check_schema(&db.pool).await.expect("up to date");
    let index: bool = sqlx::query_scalar("SELECT to_regclass('leasehold_lease_next_due') IS NOT NULL")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(index, "the upgrade created the next_due_at index");
}
