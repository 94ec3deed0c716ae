//! An operator's revoke (`leasehold revoke [--force]`): the tenure ends
//! at once, its holder is fenced out downstream, and the next claim runs
//! with a fence above the revoke's.

use leasehold::{
    Error,
    operator::{Revoke, Revoked},
    store::{Claim, LeaseStore, Renewal},
};

use crate::support::{self, LONG, held_guard};

/// A held lease is left alone unless forced; forced, its holder's renewal
/// and release fail, another replica claims it at once, and the old run's
/// fenced transactions — on the key and on the named resource — are
/// rejected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lease_is_revoked_only_when_forced_and_its_holder_is_fenced_out() {
    let (_db, store) = support::store().await;
    let Claim::Acquired(lease) = store.claim("billing", "web-1", LONG).await.unwrap() else {
        panic!("first claim acquires");
    };

    let refused = store.controls().revoke("billing", Revoke::IfFree, &[]).await.unwrap();
    let Revoked::Held(info) = refused else {
        panic!("a held lease needs Revoke::Force: {refused:?}");
    };
    assert_eq!((info.holder.as_str(), info.fence), ("web-1", lease.fence));
    assert!(
        matches!(store.renew(&lease, LONG).await.unwrap(), Renewal::Renewed(_)),
        "nothing changed: the holder still renews"
    );

    let Revoked::Ended { previous, fence } = store
        .controls()
        .revoke("billing", Revoke::Force, &["ledger"])
        .await
        .unwrap()
    else {
        panic!("a forced revoke ends the tenure");
    };
    assert_eq!((previous.holder.as_str(), previous.fence), ("web-1", lease.fence));
    assert!(previous.is_held(), "the row as it was: held");
    assert!(fence > lease.fence, "a fresh fence: {fence} after {}", lease.fence);

    assert_eq!(store.renew(&lease, LONG).await.unwrap(), Renewal::Lost);
    assert!(!store.release("billing", "web-1", lease.fence).await.unwrap());
    let Claim::Acquired(next) = store.claim("billing", "web-2", LONG).await.unwrap() else {
        panic!("the revoked lease is free at once");
    };
    assert!(
        next.fence > fence,
        "the next tenure's fence {} is above the revoke's {fence}",
        next.fence
    );
}

/// The run of a revoked tenure cannot write through the fence any more,
/// neither on its key nor on a resource the operator named, even before
/// any newer run has written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_run_is_rejected_downstream_before_any_newer_run_writes() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let (rt, guard) = held_guard(&db, "web-1", "billing").await;
    // The run's committed write leaves the ledger's fence row naming its
    // tenure; the revoke raises it all the same.
    guard
        .begin_fenced_on(&db.pool, "ledger")
        .await
        .expect("the run writes while it holds the lease")
        .commit()
        .await
        .expect("and commits while it holds it");

    let Revoked::Ended { fence, .. } = store
        .controls()
        .revoke("billing", Revoke::Force, &["ledger"])
        .await
        .unwrap()
    else {
        panic!("a forced revoke ends the tenure");
    };
    for resource in ["billing", "ledger"] {
        let err = guard.begin_fenced_on(&db.pool, resource).await.unwrap_err();
        assert!(
            matches!(err, Error::StaleFence { newer, .. } if newer == fence),
            "{resource}: {err:?}"
        );
    }
    rt.shutdown().await;
}

/// A free lease needs no force: its ex-holder, stalled past its lease, is
/// fenced out should it wake up and write. The schedule is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_lease_is_revoked_without_force_and_keeps_its_schedule() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let (rt, guard) = held_guard(&db, "web-1", "billing").await;
    rt.shutdown().await;
    let before = store.get("billing").await.unwrap().expect("row");
    assert!(!before.is_held(), "released at shutdown");

    let Revoked::Ended { previous, fence } = store.controls().revoke("billing", Revoke::IfFree, &[]).await.unwrap()
    else {
        panic!("a free lease is revoked without force");
    };
    assert_eq!(previous.fence, guard.fence());
    let err = guard.begin_fenced(&db.pool).await.unwrap_err();
    assert!(
        matches!(err, Error::StaleFence { newer, .. } if newer == fence),
        "{err:?}"
    );
    let after = store.get("billing").await.unwrap().expect("row");
    assert_eq!(after.next_due_at, before.next_due_at, "the schedule is untouched");
    assert_eq!(after.expires_at, before.expires_at, "a free lease keeps its expiry");
}

/// A revoke raises fence rows, never lowers them: a resource that already
/// carries a higher fence keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoke_never_lowers_a_fence_row() {
    let (db, store) = support::store().await;
    let Claim::Acquired(_) = store.claim("billing", "web-1", LONG).await.unwrap() else {
        panic!("claim");
    };
    // A resource written by a far later run (its fence row is ahead).
    sqlx::query("INSERT INTO leasehold_fence (resource, last_fence) VALUES ('ledger', 1000000000)")
        .execute(&db.pool)
        .await
        .unwrap();
    store
        .controls()
        .revoke("billing", Revoke::Force, &["ledger"])
        .await
        .unwrap();
    let kept: i64 = sqlx::query_scalar("SELECT last_fence FROM leasehold_fence WHERE resource = 'ledger'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(kept, 1_000_000_000);
}

/// A missing key is reported as such; a bad name is refused before any SQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_is_not_found_and_bad_names_are_refused() {
    let (_db, store) = support::store().await;
    assert_eq!(
        store.controls().revoke("nobody", Revoke::Force, &[]).await.unwrap(),
        Revoked::NotFound
    );
    let err = store
        .controls()
        .revoke("billing", Revoke::Force, &[""])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
    assert!(err.to_string().contains("fenced resource"), "{err}");
}
