//! The server refuses the COMMIT of a fenced transaction whose tenure has
//! ended, whatever the client sends and however late: nothing it wrote is
//! committed.

use leasehold::{Error, store::LeaseStore};

use crate::support::{self, LONG, accounts, balance, held_guard, set_balance};

/// A run that resumes after its lease ended cannot even begin a fenced
/// transaction: it is told it lost the lease, and the run is cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_transaction_begun_after_the_tenure_ended_is_refused() {
    let db = support::db().await;
    accounts(&db.pool).await;
    let (rt, guard) = held_guard(&db, "a", "billing").await;
    support::expire_now(&db.pool, "billing").await;

    let err = guard.begin_fenced(&db.pool).await.unwrap_err();
    assert!(
        matches!(&err, Error::LeaseLost { key, fence, .. } if key == "billing" && *fence == guard.fence()),
        "{err:?}"
    );
    assert!(
        guard.is_cancelled(),
        "a fenced write after the tenure ended cancels the run"
    );
    rt.shutdown().await;
}

/// The lease expires (the holder was paused) between the write and the
/// COMMIT, and no other replica has claimed the key yet: the COMMIT is
/// refused with LH001 and the write is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_after_the_lease_expired_commits_nothing() {
    let db = support::db().await;
    accounts(&db.pool).await;
    let (rt, guard) = held_guard(&db, "a", "billing").await;
    let mut tx = guard.begin_fenced(&db.pool).await.unwrap();
    sqlx::query("UPDATE account SET balance = 666 WHERE id = 1")
        .execute(&mut *tx)
        .await
        .unwrap();
    support::expire_now(&db.pool, "billing").await;

    let err = tx.commit().await.unwrap_err();
    let code = err.as_database_error().and_then(|e| e.code()).map(|c| c.into_owned());
    assert_eq!(code.as_deref(), Some("LH001"), "{err}");
    assert!(err.to_string().contains("nothing it wrote was committed"), "{err}");
    assert!(
        Error::from(err).is_fencing(),
        "the refusal reads as 'stop, someone newer owns this'"
    );
    assert_eq!(balance(&db.pool, 1).await.0, 0, "the write was not committed");
    rt.shutdown().await;
}

/// Another replica claimed the key (a live lease with a newer fence) while
/// the old transaction was open on a resource the new run has not touched
/// yet: the old COMMIT is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_after_another_replica_took_the_key_commits_nothing() {
    let db = support::db().await;
    accounts(&db.pool).await;
    let (rt, guard) = held_guard(&db, "a", "billing").await;
    let mut tx = guard.begin_fenced_on(&db.pool, "ledger").await.unwrap();
    sqlx::query("UPDATE account SET balance = 666 WHERE id = 1")
        .execute(&mut *tx)
        .await
        .unwrap();
    support::expire_now(&db.pool, "billing").await;
    let successor = LeaseStore::new(db.pool.clone())
        .claim("billing", "c", LONG)
        .await
        .unwrap()
        .acquired()
        .expect("the expired lease is free");
    assert!(successor.fence > guard.fence());

    let err = tx.commit().await.unwrap_err();
    assert!(Error::from(err).is_fencing());
    assert_eq!(balance(&db.pool, 1).await.0, 0, "the write was not committed");
    rt.shutdown().await;
}

/// While the tenure holds its lease, any number of fenced transactions
/// commit, on the key and on other resources (F2 with the commit check).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_tenure_commits_every_fenced_transaction() {
    let db = support::db().await;
    accounts(&db.pool).await;
    let (rt, guard) = held_guard(&db, "a", "billing").await;
    for resource in ["billing", "ledger", "billing"] {
        let mut tx = guard.begin_fenced_on(&db.pool, resource).await.unwrap();
        sqlx::query("UPDATE account SET balance = balance + 1 WHERE id = 1")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    assert_eq!(balance(&db.pool, 1).await.0, 3);
    rt.shutdown().await;
}

/// A fenced `UPDATE` sent after the tenure ended writes nothing, even on a
/// row no newer run has written yet, and says the lease is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_update_after_the_tenure_ended_writes_nothing() {
    let db = support::db().await;
    accounts(&db.pool).await;
    let (rt, guard) = held_guard(&db, "a", "billing").await;
    assert_eq!(set_balance(&guard, &db.pool, 1, 5_i64).await.unwrap(), 1);
    support::expire_now(&db.pool, "billing").await;

    let err = set_balance(&guard, &db.pool, 1, 666_i64).await.unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err:?}");
    assert_eq!(balance(&db.pool, 1).await, (5, guard.fence()), "the write was refused");
    assert!(guard.is_cancelled());
    rt.shutdown().await;
}
