//! Forgetting a key: the row goes only when the lease is free, fences keep
//! growing across forget and re-add, and a runtime that still registers
//! the key recreates its row.

use std::time::Duration;

use leasehold::{
    Schedule,
    operator::Forgotten,
    store::{Claim, LeaseStore},
};

use crate::support::{self, Runs, job, quick};

/// Forget refuses a held lease (the row and its fence stay), deletes a free
/// one, reports a missing one; the next claim of the key gets a fence
/// greater than any before (the sequence, not the row, makes fences).
#[tokio::test]
async fn forget_deletes_only_a_free_row_and_fences_keep_growing() {
    let (_db, store) = support::store().await;
    let ttl = Duration::from_secs(60);
    let Claim::Acquired(lease) = store.claim("tenant:gone", "h1", ttl).await.unwrap() else {
        panic!("a free key is claimed");
    };
    match store.controls().forget("tenant:gone").await.unwrap() {
        Forgotten::Held(info) => {
            assert_eq!((info.holder.as_str(), info.fence), ("h1", lease.fence));
        }
        other => panic!("a held lease is not forgotten: {other:?}"),
    }
    let row = store.get("tenant:gone").await.unwrap().expect("the row stays");
    assert_eq!((row.fence, row.is_held()), (lease.fence, true));

    assert!(store.release("tenant:gone", "h1", lease.fence).await.unwrap());
    assert_eq!(
        store.controls().forget("tenant:gone").await.unwrap(),
        Forgotten::Deleted
    );
    assert_eq!(store.get("tenant:gone").await.unwrap(), None);
    assert_eq!(
        store.controls().forget("tenant:gone").await.unwrap(),
        Forgotten::NotFound
    );

    let again = store
        .claim("tenant:gone", "h2", ttl)
        .await
        .unwrap()
        .acquired()
        .expect("free again");
    assert!(again.fence > lease.fence, "fence {} after {}", again.fence, lease.fence);
}

/// A key forgotten while a runtime still registers it comes back: the
/// runtime recreates its row and runs it again, with a greater fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_recreates_a_forgotten_key_it_still_registers() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let runs = Runs::default();
    let settings = quick(Schedule::every(Duration::from_secs(1)), Duration::from_secs(5));
    let rt = support::replica(
        &db,
        "replica",
        2,
        vec![job("tenant:back", settings, runs.body(Duration::from_millis(10)))],
    )
    .await;
    let first = runs.wait_started(1, Duration::from_secs(5)).await[0].clone();
    let mut forgotten = false;
    for _ in 0..100 {
        if store.controls().forget("tenant:back").await.unwrap() == Forgotten::Deleted {
            forgotten = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(forgotten, "the key was free at some point");
    let n = runs.all().len();
    let later = runs.wait_started(n + 1, Duration::from_secs(10)).await;
    assert!(later[n].fence > first.fence);
    assert!(store.get("tenant:back").await.unwrap().is_some(), "the row is back");
    rt.shutdown().await;
}
