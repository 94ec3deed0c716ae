//! A key of a kind removed and added again starts a new life (schema v10):
//! it runs on its new definition's schedule from its first slot after the
//! add — never for a slot its old life owed —, its arguments' version goes
//! on from the old life's last, status never shows it as a live key while
//! it is removed, and the history of its old life stays, marked as such.

use std::time::Duration;

use chrono::{DateTime, Utc};
use leasehold::{
    CancelReason,
    store::{KeyFilter, KeyState, LeaseStore, RunRecord},
};

use super::{Ran, TenantKind, replica, runs_of, tenant};
use crate::support::{self, TestDb};

/// The old life: every 2 s; the new one: every 5 s (slots aligned to the
/// epoch). Their slots coincide every 10 s: a scenario that tells the two
/// schedules apart by a slot acts where the next one is not shared.
const OLD: &str = "every 2s";
const NEW: &str = "every 5s";

/// A replica (polling every `poll`, listening or not) runs `k` on the old
/// schedule, its arguments updated once (version 2); returns once a run of
/// version 2 has started.
async fn old_life(db: &TestDb, kind: &TenantKind, poll: Duration, listen: bool) -> (leasehold::Runtime, LeaseStore) {
    let store = LeaseStore::new(db.pool.clone());
    store.keys().add(&[tenant("k", "basic", OLD)]).await.unwrap();
    assert_eq!(store.keys().update(&tenant("k", "plus", OLD)).await.unwrap(), Some(2));
    let a = replica(db, "a", kind, poll, listen).await;
    support::eventually(Duration::from_secs(10), || {
        runs_of(&kind.log, "k")
            .iter()
            .any(|r| r.version == Some(2))
            .then_some(())
    })
    .await;
    (a, store)
}

/// The runs of the new life (plan `pro`).
fn new_life(kind: &TenantKind) -> Vec<Ran> {
    runs_of(&kind.log, "k")
        .into_iter()
        .filter(|r| r.plan == "pro")
        .collect()
}

/// Every run after the add belongs to the new life and ran for a slot of
/// the new schedule after the add; the first for its first slot.
fn assert_on_new_schedule(kind: &TenantKind, before: usize, added: (DateTime<Utc>, DateTime<Utc>)) {
    let after: Vec<Ran> = runs_of(&kind.log, "k").into_iter().skip(before).collect();
    assert!(!after.is_empty());
    for run in &after {
        assert_eq!(run.plan, "pro", "no run of the old life after the add: {run:?}");
        let slot = run.slot.expect("a scheduled run");
        assert_eq!(slot.timestamp() % 5, 0, "a slot of the new schedule: {run:?}");
        assert!(
            slot > added.0,
            "no slot from before the new life: {run:?}, added {added:?}"
        );
    }
    let first = after[0].slot.expect("scheduled");
    let next = |t: DateTime<Utc>| {
        let s = t.timestamp() - t.timestamp().rem_euclid(5) + 5;
        DateTime::from_timestamp(s, 0).unwrap()
    };
    assert!(
        first == next(added.0) || first == next(added.1),
        "the first run is the new schedule's first slot after the add: {first} (added {added:?})"
    );
}

/// Removed during a run, then — once the run is cancelled and released —
/// added again with another schedule and other arguments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_added_again_starts_on_its_new_schedule_with_a_newer_version() {
    let db = support::db().await;
    let kind = TenantKind::working(Duration::from_millis(1500));
    let (a, store) = old_life(&db, &kind, Duration::from_millis(100), true).await;

    // Removed while its run is in progress: cancelled, released.
    assert!(store.keys().remove("tenant", "k").await.unwrap());
    support::eventually(Duration::from_secs(5), || {
        runs_of(&kind.log, "k")
            .iter()
            .any(|r| r.cancelled == Some(CancelReason::Removed))
            .then_some(())
    })
    .await;
    support::until_free(&store, "k").await;

    // (c) Removed: not a live key anywhere status reads.
    let status = store.records().status("k").await.unwrap().expect("its row stays");
    assert!(status.removed);
    assert_eq!(status.state(), KeyState::Removed);
    for state in [KeyState::Free, KeyState::NeverRun, KeyState::Paused, KeyState::Held] {
        let page = store.records().list_page(&KeyFilter::new().state(state)).await.unwrap();
        assert!(page.keys.is_empty(), "{state}: {:?}", page.keys);
    }
    let page = store
        .records()
        .list_page(&KeyFilter::new().state(KeyState::Removed))
        .await
        .unwrap();
    assert_eq!(page.keys.len(), 1);

    // Added again, another schedule, other arguments.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = runs_of(&kind.log, "k").len();
    let t0 = store.server_now().await.unwrap();
    assert_eq!(store.keys().add(&[tenant("k", "pro", NEW)]).await.unwrap(), 1);
    let t1 = store.server_now().await.unwrap();

    // (b) The version goes on from the old life's last (2).
    assert_eq!(store.keys().get("k").await.unwrap().unwrap().version, 3);
    let status = store.records().status("k").await.unwrap().unwrap();
    assert!(!status.removed);
    assert_ne!(status.state(), KeyState::Removed);

    // (a) Nothing runs before the new schedule's first slot; that slot runs.
    support::eventually(Duration::from_secs(12), || (!new_life(&kind).is_empty()).then_some(())).await;
    assert_on_new_schedule(&kind, before, (t0, t1));
    assert_eq!(new_life(&kind)[0].version, Some(3));

    // (d) The history: the old life's runs marked, the new life's not.
    let history = support::eventually_async(Duration::from_secs(10), || async {
        let runs = store.records().history("k", 100).await.unwrap();
        runs.iter().any(|r: &RunRecord| r.started_at > t1).then_some(runs)
    })
    .await;
    for run in &history {
        assert_eq!(run.earlier_life, run.started_at < t0, "{run:?}");
    }
    assert!(
        history
            .iter()
            .any(|r| r.earlier_life && r.reason.as_deref() == Some("removed"))
    );
    let latest = store.records().status("k").await.unwrap().unwrap();
    assert!(latest.last.as_ref().is_some_and(|r| !r.earlier_life));
    let recent = store.records().recent_runs(&["k"], None, 100).await.unwrap();
    assert_eq!(
        recent.iter().map(|r| r.earlier_life).collect::<Vec<_>>(),
        history.iter().map(|r| r.earlier_life).collect::<Vec<_>>()
    );
    a.shutdown().await;
}

/// Removed and added again at once, during a run: whether the replica sees
/// the removal (its run cancelled, released after the add) or only the new
/// definition (its run goes on and is released after the add), the key
/// runs next at the new schedule's first slot after the add.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_removed_and_added_again_during_a_run_starts_on_its_new_schedule() {
    let db = support::db().await;
    let kind = TenantKind::working(Duration::from_millis(1500));
    let (a, store) = old_life(&db, &kind, Duration::from_millis(100), true).await;
    assert!(store.get("k").await.unwrap().unwrap().is_held(), "a run is in progress");

    let before = runs_of(&kind.log, "k").len();
    let t0 = store.server_now().await.unwrap();
    assert!(store.keys().remove("tenant", "k").await.unwrap());
    assert_eq!(store.keys().add(&[tenant("k", "pro", NEW)]).await.unwrap(), 1);
    let t1 = store.server_now().await.unwrap();
    assert_eq!(store.keys().get("k").await.unwrap().unwrap().version, 3);

    support::eventually(Duration::from_secs(12), || (!new_life(&kind).is_empty()).then_some(())).await;
    assert_on_new_schedule(&kind, before, (t0, t1));
    a.shutdown().await;
}

/// Removed and added again during a run, on a replica that learns of
/// changes only at its polls (every 30 s): its run ends normally before
/// the replica sees either change, and its release names the old
/// schedule's next slot. The release leaves the new life's due time: the
/// key runs next at the new schedule's first slot after the add.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_the_old_life_released_after_the_add_leaves_the_new_schedule() {
    let db = support::db().await;
    let kind = TenantKind::working(Duration::from_millis(1500));
    let (a, store) = old_life(&db, &kind, Duration::from_secs(30), false).await;
    // A release that wrongly names the old schedule's next slot would look
    // right if that slot were the new schedule's first too (`OLD` and `NEW`
    // share every tenth second): act early in a run whose next old slot is
    // not one of `NEW`'s.
    support::eventually(Duration::from_secs(10), || {
        let runs = runs_of(&kind.log, "k");
        let last = runs.last()?;
        let next_old = last.slot?.timestamp() + 2;
        (last.started.elapsed() < Duration::from_millis(300) && next_old % 5 != 0).then_some(())
    })
    .await;
    assert!(store.get("k").await.unwrap().unwrap().is_held(), "a run is in progress");

    let before = runs_of(&kind.log, "k").len();
    let t0 = store.server_now().await.unwrap();
    assert!(store.keys().remove("tenant", "k").await.unwrap());
    assert_eq!(store.keys().add(&[tenant("k", "pro", NEW)]).await.unwrap(), 1);
    let t1 = store.server_now().await.unwrap();

    support::eventually(Duration::from_secs(12), || (!new_life(&kind).is_empty()).then_some(())).await;
    assert_on_new_schedule(&kind, before, (t0, t1));
    a.shutdown().await;
}
