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

/// Increments computed by the server: 40 concurrent `.add`s of one run on
/// one row all count (none reads a value another then overwrites), an
/// assignment and an increment go in one statement, and a stale run's
/// increment is rejected and adds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn increments_all_count_and_a_stale_one_adds_nothing() {
    let db = support::db().await;
    accounts(&db.pool).await;
    let pool = db.pool_with(8).await;
    let (old_rt, old) = held_guard(&db, "a", "billing").await;
    let adds = (0..40).map(|_| {
        old.update("account")
            .add("balance", 1_i64)
            .filter("id", 1_i32)
            .execute(&pool)
    });
    for updated in futures::future::join_all(adds).await {
        assert_eq!(updated.unwrap(), 1);
    }
    assert_eq!(balance(&db.pool, 1).await, (40, old.fence()));

    // An INT column takes a BIGINT increment; `set` and `add` in one update.
    sqlx::raw_sql("ALTER TABLE account ADD COLUMN \"Posted count\" INT NOT NULL DEFAULT 0")
        .execute(&db.pool)
        .await
        .unwrap();
    let updated = old
        .update("account")
        .add("Posted count", 2_i64)
        .set("balance", 7_i64)
        .filter("id", 2_i32)
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(updated, 1);
    let posted: i32 = sqlx::query_scalar("SELECT \"Posted count\" FROM account WHERE id = 2")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!((posted, balance(&db.pool, 2).await.0), (2, 7));

    let err = old
        .update("account")
        .add("last_fence", 1_i64)
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");

    old_rt.shutdown().await;
    let (new_rt, new) = held_guard(&db, "b", "billing").await;
    new.update("account")
        .add("balance", 100_i64)
        .filter("id", 1_i32)
        .execute(&db.pool)
        .await
        .unwrap();
    let err = old
        .update("account")
        .add("balance", 1_i64)
        .filter("id", 1_i32)
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::StaleFence { .. }), "{err:?}");
    assert_eq!(balance(&db.pool, 1).await, (140, new.fence()));
    new_rt.shutdown().await;
}

/// F3 with F5: a newer run's fenced transaction waits for the fence row
/// while an older run's transaction holds it, and goes through once that
/// one ends — here by a COMMIT sent after the older tenure ended, which the
/// server refuses, so only the newer run's write is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_transaction_waits_for_an_older_open_one_which_then_commits_nothing() {
    let db = support::db().await;
    accounts(&db.pool).await;
    let (old_rt, old) = held_guard(&db, "a", "billing").await;
    let mut older_tx = old.begin_fenced(&db.pool).await.unwrap();
    sqlx::query("UPDATE account SET balance = 666 WHERE id = 1")
        .execute(&mut *older_tx)
        .await
        .unwrap();
    // "a" goes silent and its lease runs out: "b" takes the key over.
    old_rt.faults().partition(true);
    support::expire_now(&db.pool, "billing").await;
    let (new_rt, new) = held_guard(&db, "b", "billing").await;

    let pool = db.pool.clone();
    let newer = tokio::spawn(async move {
        let mut tx = new.begin_fenced(&pool).await?;
        sqlx::query("UPDATE account SET balance = 7 WHERE id = 1")
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok::<_, Error>(())
    });
    support::until_a_session_waits_for_a_lock(&db.pool).await;
    assert!(!newer.is_finished(), "the newer transaction waits for the fence row");
    let err = older_tx.commit().await.unwrap_err();
    assert!(Error::from(err).is_fencing());
    newer.await.unwrap().unwrap();
    assert_eq!(balance(&db.pool, 1).await.0, 7);
    new_rt.shutdown().await;
    old_rt.shutdown().await;
}

/// A resource that already carries a fence above the run's (left by an
/// earlier owner: a table restored from elsewhere, a key renamed) refuses
/// even a live run's fenced transaction (F1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_row_above_the_runs_fence_refuses_a_live_run() {
    let db = support::db().await;
    sqlx::query("INSERT INTO leasehold_fence (resource, last_fence) VALUES ('billing', 1000000000)")
        .execute(&db.pool)
        .await
        .unwrap();
    let (rt, guard) = held_guard(&db, "a", "billing").await;
    let err = guard.begin_fenced(&db.pool).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::StaleFence {
                newer: 1_000_000_000,
                ..
            }
        ),
        "{err:?}"
    );
    rt.shutdown().await;
}

/// A row whose `last_fence` is above the run's (left by an earlier owner)
/// is not overwritten by a live run's fenced update (F4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_above_the_runs_fence_refuses_a_live_runs_update() {
    let db = support::db().await;
    accounts(&db.pool).await;
    sqlx::query("UPDATE account SET balance = 9, last_fence = 1000000000 WHERE id = 1")
        .execute(&db.pool)
        .await
        .unwrap();
    let (rt, guard) = held_guard(&db, "a", "billing").await;
    let err = set_balance(&guard, &db.pool, 1, 666_i64).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::StaleFence {
                newer: 1_000_000_000,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(balance(&db.pool, 1).await, (9, 1_000_000_000));
    rt.shutdown().await;
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
    let thief = leasehold::store::LeaseStore::new(db.pool.clone());
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
