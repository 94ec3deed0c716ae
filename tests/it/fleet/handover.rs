//! A key added through one replica runs wherever its kind is registered,
//! and a key removed through one replica stops everywhere.

use std::time::Duration;

use leasehold::{CancelReason, store::LeaseStore};
use leasehold_testkit::jobs::ScriptedJob;
use tokio::time::Instant;

use super::{LEASE, TenantKind, replica, runs_of, tenant};
use crate::support;

/// A and B register the kind; a key added through A's API runs (on one of
/// them, once per slot); A shuts down; the key goes on running on B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_added_through_a_runs_on_b_when_a_is_gone() {
    let db = support::db().await;
    let kind = TenantKind::working(Duration::from_millis(10));
    let a = replica(&db, "a", &kind, Duration::from_millis(200), true).await;
    let b = replica(&db, "b", &kind, Duration::from_millis(200), true).await;
    // Both are running (and have loaded the kind, empty) before the add.
    for rt in [&a, &b] {
        support::wait_polls(rt, 1).await;
    }

    let added = a
        .store()
        .keys()
        .add(&[tenant("tenant:acme", "pro", "every 1s")])
        .await
        .unwrap();
    assert_eq!(added, 1);
    support::eventually(Duration::from_secs(5), || {
        (runs_of(&kind.log, "tenant:acme").len() >= 2).then_some(())
    })
    .await;
    let first = &runs_of(&kind.log, "tenant:acme")[0];
    assert_eq!((first.plan.as_str(), first.version), ("pro", Some(1)));

    a.shutdown().await;
    let gone = Instant::now();
    let before = runs_of(&kind.log, "tenant:acme").len();
    support::eventually(Duration::from_secs(5), || {
        let runs = runs_of(&kind.log, "tenant:acme");
        (runs.len() >= before + 2 && runs.iter().skip(before).all(|r| r.holder == "b")).then_some(())
    })
    .await;
    assert!(
        gone.elapsed() < LEASE,
        "B ran it after A released it, not after its lease expired"
    );
    b.shutdown().await;
}

/// A key runs on A (a long run, in progress); it is removed through B's
/// store: A's run is cancelled (reason removed) within a fraction of the poll
/// interval (by notification), and the key never runs again anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_removed_through_b_stops_on_a_at_once_by_notification() {
    removed_through_b_stops_on_a(true, Duration::from_secs(30), Duration::from_secs(3)).await;
}

/// The same without notifications: A stops it within one poll interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_removed_through_b_stops_on_a_within_one_poll() {
    removed_through_b_stops_on_a(false, Duration::from_secs(1), Duration::from_millis(1500)).await;
}

/// The scenario of the two tests above: A polls every `poll`, B's removal
/// must stop A's run within `within`.
async fn removed_through_b_stops_on_a(listen: bool, poll: Duration, within: Duration) {
    let db = support::db().await;
    let kind = TenantKind::working(Duration::from_secs(60));
    let store = LeaseStore::new(db.pool.clone());
    store
        .keys()
        .add(&[tenant("tenant:gone", "basic", "manual")])
        .await
        .unwrap();
    let a = replica(&db, "a", &kind, poll, listen).await;
    support::eventually(Duration::from_secs(5), || (a.health().registered == 1).then_some(())).await;
    a.trigger("tenant:gone").await.unwrap();
    support::eventually(Duration::from_secs(5), || {
        (!runs_of(&kind.log, "tenant:gone").is_empty()).then_some(())
    })
    .await;
    // B only removes: it registers no kind.
    let b = support::replica(&db, "b", 2, Vec::<ScriptedJob>::new()).await;
    let removed = Instant::now();
    assert!(b.store().keys().remove("tenant", "tenant:gone").await.unwrap());
    let why = support::eventually(within, || runs_of(&kind.log, "tenant:gone")[0].cancelled).await;
    assert_eq!(why, CancelReason::Removed);
    let took = removed.elapsed();
    assert!(took < within, "stopped {took:?} after the removal");
    let row = support::until_free(&store, "tenant:gone").await;
    assert!(!row.is_held());
    assert_eq!(a.health().registered, 0, "unregistered on A");
    assert!(matches!(
        a.trigger("tenant:gone").await,
        Err(leasehold::Error::UnknownJob(_))
    ));
    assert_eq!(runs_of(&kind.log, "tenant:gone").len(), 1);
    a.shutdown().await;
    b.shutdown().await;
}
