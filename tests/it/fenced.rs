//! Fenced writes: the downstream half of the lease. Same-run writes pass;
//! a stale run's writes change nothing and say so.

use leasehold::Error;

use crate::support::{self, accounts, balance, held_guard, set_balance};

/// The writes of one run share its fence: repeated column writes and
/// fenced transactions all succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_of_one_run_all_pass() {
    let db = support::db().await;
    accounts(&db.pool).await;
    let (rt, guard) = held_guard(&db, "a", "billing").await;
    for amount in 1..=3_i64 {
        let n = set_balance(&guard, &db.pool, 1, amount).await.unwrap();
        assert_eq!(n, 1);
        let mut tx = guard.begin_fenced(&db.pool).await.unwrap();
        sqlx::query("UPDATE account SET balance = balance + 10 WHERE id = 2")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    assert_eq!(balance(&db.pool, 1).await, (3, guard.fence()));
    assert_eq!(balance(&db.pool, 2).await.0, 30);
    // No matching row is not a stale fence.
    assert_eq!(set_balance(&guard, &db.pool, 99, 5_i64).await.unwrap(), 0);
    rt.shutdown().await;
}

/// After a newer run wrote, the older run's column write and fenced
/// transaction are rejected with StaleFence and change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_run_writes_nothing() {
    let db = support::db().await;
    accounts(&db.pool).await;
    let (old_rt, old) = held_guard(&db, "a", "billing").await;
    old_rt.shutdown().await;
    let (new_rt, new) = held_guard(&db, "b", "billing").await;
    assert!(new.fence() > old.fence());

    set_balance(&new, &db.pool, 1, 100_i64).await.unwrap();
    let mut tx = new.begin_fenced(&db.pool).await.unwrap();
    sqlx::query("UPDATE account SET balance = 200 WHERE id = 2")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let err = set_balance(&old, &db.pool, 1, -1_i64).await.unwrap_err();
    assert!(
        matches!(&err, Error::StaleFence { fence, newer, .. } if *fence == old.fence() && *newer == new.fence()),
        "{err:?}"
    );
    assert!(err.to_string().contains("nothing was written"), "{err}");
    let err = old.begin_fenced(&db.pool).await.unwrap_err();
    assert!(matches!(err, Error::StaleFence { .. }), "{err:?}");
    assert_eq!(balance(&db.pool, 1).await, (100, new.fence()));
    assert_eq!(balance(&db.pool, 2).await.0, 200);
    assert!(old.is_cancelled(), "a stale fence cancels the run that hit it");
    new_rt.shutdown().await;
}

/// A stale run's fenced transaction that waits on a newer run's open one
/// fails once the newer commits: the fence row lock orders them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_transaction_waiting_on_a_newer_one_fails() {
    let db = support::db().await;
    accounts(&db.pool).await;
    let (old_rt, old) = held_guard(&db, "a", "billing").await;
    old_rt.shutdown().await;
    let (new_rt, new) = held_guard(&db, "b", "billing").await;
    let mut newer_tx = new.begin_fenced(&db.pool).await.unwrap();
    let pool = db.pool.clone();
    let stale = tokio::spawn(async move { old.begin_fenced(&pool).await.map(drop) });
    support::until_a_session_waits_for_a_lock(&db.pool).await;
    assert!(!stale.is_finished(), "the stale transaction waits for the fence row");
    sqlx::query("UPDATE account SET balance = 7 WHERE id = 1")
        .execute(&mut *newer_tx)
        .await
        .unwrap();
    newer_tx.commit().await.unwrap();
    let err = stale.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::StaleFence { .. }), "{err:?}");
    new_rt.shutdown().await;
}

/// Identifiers with spaces, capitals and quotes work; an injection attempt
/// is just a table that does not exist; bad identifiers are refused with
/// a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identifiers_are_quoted_and_validated() {
    let db = support::db().await;
    accounts(&db.pool).await;
    sqlx::raw_sql(
        r#"CREATE TABLE "Odd ""Name"" t" ("the id" INT PRIMARY KEY, "Value" TEXT, last_fence BIGINT NOT NULL DEFAULT 0);
           INSERT INTO "Odd ""Name"" t" ("the id", "Value") VALUES (1, 'x');"#,
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let (rt, guard) = held_guard(&db, "a", "odd").await;
    let n = guard
        .update("Odd \"Name\" t")
        .set("Value", "y".to_owned())
        .filter("the id", 1_i32)
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 1);

    let err = guard
        .update("account\" SET balance = 666; --")
        .set("balance", 1_i64)
        .filter("id", 1_i32)
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Database(_)) && err.to_string().contains("does not exist"),
        "{err}"
    );
    assert_eq!(balance(&db.pool, 1).await.0, 0, "nothing was injected");

    for (table, column) in [("", "balance"), ("account", ""), ("account", "last_fence")] {
        let err = guard
            .update(table)
            .set(column, 1_i64)
            .filter("id", 1_i32)
            .execute(&db.pool)
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput { .. }),
            "{table:?}.{column:?}: {err:?}"
        );
    }
    let err = guard
        .update("account")
        .filter("id", 1_i32)
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("sets no column"), "{err}");
    rt.shutdown().await;
}

/// `ensure` confirms time left before a step that cannot be fenced: fine
/// when there is enough, renews when there is not, refuses what no lease
/// can give, and reports a lost lease (cancelling the run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensure_renews_refuses_or_reports_loss() {
    let db = support::db().await;
    // Lease 10 s: the local deadline is ~9 s (margin lease/10).
    let (rt, guard) = held_guard(&db, "a", "export").await;
    guard
        .ensure(std::time::Duration::from_secs(1))
        .await
        .expect("plenty left");
    let err = guard.ensure(std::time::Duration::from_secs(60)).await.unwrap_err();
    assert!(matches!(err, Error::InsufficientLease { .. }), "{err:?}");
    assert!(!guard.is_cancelled(), "asking for too much does not cancel the run");

    // Another holder takes the lease over behind the runtime's back.
    support::expire_now(&db.pool, "export").await;
    let thief = leasehold::LeaseStore::new(db.pool.clone());
    assert!(
        thief
            .claim("export", "b", support::LONG)
            .await
            .unwrap()
            .acquired()
            .is_some()
    );
    let err = guard.ensure(std::time::Duration::from_millis(9_500)).await.unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err:?}");
    assert!(guard.is_cancelled());
    assert!(guard.check().is_err());
    rt.shutdown().await;
}
