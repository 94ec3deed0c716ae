//! The guard clauses of the stored keys' statements, one scenario each
//! (scripts/clause-removal.py names them).

use std::time::Duration;

use leasehold::{NewKey, Schedule, operator::Target, store::LeaseStore};

use super::{TenantKind, replica, runs_of, tenant};
use crate::support;

/// An update or removal naming the wrong kind changes nothing; a removal
/// naming the right one removes the key and its count.
#[tokio::test]
async fn an_update_or_removal_of_another_kind_changes_nothing() {
    let (_db, store) = support::store().await;
    store
        .keys()
        .add(&[tenant("k:1", "basic", "manual"), tenant("k:2", "basic", "manual")])
        .await
        .unwrap();
    // A later add: one new key, one that exists (kept as it is).
    let added = store
        .keys()
        .add(&[tenant("k:3", "basic", "manual"), tenant("k:1", "pro", "manual")])
        .await
        .unwrap();
    assert_eq!(added, 1);
    let other = NewKey::new("report", "k:1", &"x", Schedule::Manual).unwrap();
    assert_eq!(store.keys().update(&other).await.unwrap(), None);
    let row = store.keys().get("k:1").await.unwrap().unwrap();
    assert_eq!(
        (row.kind.as_str(), row.version, row.args.as_str()),
        ("tenant", 1, r#"{"plan": "basic"}"#)
    );
    assert!(!store.keys().remove("report", "k:1").await.unwrap());
    assert!(store.keys().get("k:1").await.unwrap().is_some());

    assert!(store.keys().remove("tenant", "k:1").await.unwrap());
    assert!(store.keys().get("k:1").await.unwrap().is_none());
    let kinds = store.keys().kinds().await.unwrap();
    assert_eq!((kinds[0].kind.as_str(), kinds[0].keys), ("tenant", 2));
}

/// A replica's report about version 1 arrives after an update to version
/// 2: it writes nothing, version 2 stays clear.
#[tokio::test]
async fn a_report_about_an_old_version_leaves_the_new_one_clear() {
    let (_db, store) = support::store().await;
    store.keys().add(&[tenant("k", "basic", "manual")]).await.unwrap();
    assert_eq!(
        store.keys().update(&tenant("k", "pro", "manual")).await.unwrap(),
        Some(2)
    );
    assert!(!store.report_args_error_for_test("k", 1, "bad").await.unwrap());
    assert_eq!(store.keys().get("k").await.unwrap().unwrap().args_error, None);
    assert!(store.report_args_error_for_test("k", 2, "bad").await.unwrap());
}

/// A key's schedule is changed from manual to every second while a replica
/// runs: the replica reloads the kind (its generation moved) and the key
/// starts running on its new schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_schedule_reaches_a_running_replica() {
    let db = support::db().await;
    let kind = TenantKind::working(Duration::from_millis(10));
    let store = LeaseStore::new(db.pool.clone());
    store.keys().add(&[tenant("k", "basic", "manual")]).await.unwrap();
    let a = replica(&db, "a", &kind, Duration::from_millis(100), true).await;
    support::eventually(Duration::from_secs(5), || (a.health().registered == 1).then_some(())).await;
    support::wait_polls(&a, 3).await;
    assert!(runs_of(&kind.log, "k").is_empty(), "manual: never run untriggered");
    store.keys().update(&tenant("k", "basic", "every 1s")).await.unwrap();
    support::eventually(Duration::from_secs(5), || {
        (runs_of(&kind.log, "k").len() >= 2).then_some(())
    })
    .await;
    a.shutdown().await;
}

/// The poll that vouches for a replica's kinds also counts the keys no
/// live replica runs: the replica's own kinds, whose vouch is lapsed (or
/// was never written) on that statement's snapshot, are not counted;
/// another kind's keys are.
#[tokio::test]
async fn a_replicas_own_kinds_are_never_counted_unknown_by_its_poll() {
    let (_db, store) = support::store().await;
    let ghost = NewKey::new("ghost", "g:1", &1, Schedule::Manual).unwrap();
    store
        .keys()
        .add(&[
            ghost,
            tenant("k:1", "basic", "manual"),
            tenant("k:2", "basic", "manual"),
        ])
        .await
        .unwrap();
    // No replica has vouched for either kind: all three keys run nowhere.
    assert_eq!(store.unknown_kind_keys_for_test(&[]).await.unwrap(), 3);
    // The first poll of a replica running "tenant": only the ghost's key.
    assert_eq!(store.unknown_kind_keys_for_test(&["tenant"]).await.unwrap(), 1);
}

/// Keys of a kind no live replica registers show as such; the kinds a
/// replica registers are live while it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_a_kind_nobody_runs_are_visible() {
    let db = support::db().await;
    let kind = TenantKind::working(Duration::from_millis(10));
    let store = LeaseStore::new(db.pool.clone());
    let ghost = NewKey::new("ghost", "g:1", &1, Schedule::Manual).unwrap();
    store
        .keys()
        .add(&[ghost, tenant("k", "basic", "manual")])
        .await
        .unwrap();
    let a = replica(&db, "a", &kind, Duration::from_millis(100), true).await;
    let live = support::eventually_async(Duration::from_secs(5), || async {
        let kinds = store.keys().kinds().await.unwrap();
        kinds
            .iter()
            .find(|k| k.kind == "tenant" && k.live)
            .map(|_| kinds.clone())
    })
    .await;
    let ghost = live.iter().find(|k| k.kind == "ghost").unwrap();
    assert_eq!((ghost.keys, ghost.live), (1, false));
    a.shutdown().await;
}

/// A paused key of a running replica is triggered (due now, held back by
/// the pause), then its schedule changes to hourly: the trigger is not
/// postponed to the next hour; the key runs once resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_schedule_never_postpones_a_due_run() {
    let db = support::db().await;
    let kind = TenantKind::working(Duration::from_millis(10));
    let store = LeaseStore::new(db.pool.clone());
    store.keys().add(&[tenant("k", "basic", "manual")]).await.unwrap();
    let a = replica(&db, "a", &kind, Duration::from_millis(100), true).await;
    support::eventually(Duration::from_secs(5), || (a.health().registered == 1).then_some(())).await;
    let key = Target::key("k").unwrap();
    store.controls().pause(&key, false, "test").await.unwrap();
    store.controls().trigger("k").await.unwrap();
    store.keys().update(&tenant("k", "basic", "every 1h")).await.unwrap();
    // A has synced the new schedule (its next poll at the latest), and
    // proposed the due key in a claim.
    support::wait_polls(&a, 2).await;
    assert!(runs_of(&kind.log, "k").is_empty(), "paused");
    store.controls().resume(&key).await.unwrap();
    support::eventually(Duration::from_secs(5), || {
        (!runs_of(&kind.log, "k").is_empty()).then_some(())
    })
    .await;
    a.shutdown().await;
}
