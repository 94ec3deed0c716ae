//! Catch-up policies: what runs for the slots a fleet missed while it was
//! down. Every scenario: a minutely key whose fleet was down for five
//! slots (its row owes the slot five minutes back), then two replicas come
//! back at once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use leasehold::{CatchUp, FenceGuard, Runtime, Schedule, runtime::RunOutcome, store::LeaseStore};

use crate::support::{self, ScriptedJob, job, quick};

/// The slots the runs were for, in the order they ran.
#[derive(Clone, Default)]
struct Slots(Arc<Mutex<Vec<Option<DateTime<Utc>>>>>);

impl Slots {
    fn all(&self) -> Vec<Option<DateTime<Utc>>> {
        self.0.lock().unwrap().clone()
    }

    fn job(&self, policy: CatchUp) -> ScriptedJob {
        let slots = self.clone();
        job(
            "minutely",
            quick(Schedule::every(Duration::from_secs(60)), Duration::from_secs(5)).catch_up(policy),
            move |guard: FenceGuard| {
                let slots = slots.clone();
                async move {
                    slots.0.lock().unwrap().push(guard.slot());
                    Ok(())
                }
            },
        )
    }
}

/// Arranges a fleet that was down for five slots and brings two replicas
/// back; returns them, the store, and the latest slot that passed.
async fn down_for_five_slots(
    db: &support::TestDb,
    slots: &Slots,
    policy: CatchUp,
) -> (Vec<Runtime>, LeaseStore, DateTime<Utc>) {
    let store = LeaseStore::new(db.pool.clone());
    // Not within 5 s of a minute boundary, so no regular slot comes during
    // the test's window.
    loop {
        let now = Utc::now();
        let into = now - now.duration_trunc(TimeDelta::minutes(1)).unwrap();
        if into > TimeDelta::seconds(2) && into < TimeDelta::seconds(50) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let first = support::replica(db, "before", 2, vec![slots.job(policy)]).await;
    first.shutdown().await;
    let latest = store
        .get("minutely")
        .await
        .unwrap()
        .unwrap()
        .server_now
        .duration_trunc(TimeDelta::minutes(1))
        .unwrap();
    let owed = latest - TimeDelta::minutes(4);
    support::owe_slot(&db.pool, "minutely", owed).await;
    let mut fleet = Vec::new();
    for holder in ["r1", "r2"] {
        fleet.push(support::replica(db, holder, 2, vec![slots.job(policy)]).await);
    }
    (fleet, store, latest)
}

/// Waits until the catch-up is over — the lease free and the next run due
/// at the next future slot, after `latest` — and then for two polls of
/// every replica, in which any run still owed would have been claimed;
/// shuts the fleet down.
async fn settle(fleet: Vec<Runtime>, store: &LeaseStore, latest: DateTime<Utc>) {
    let next = Some(latest + TimeDelta::minutes(1));
    support::eventually_async(Duration::from_secs(10), || async {
        let row = store.get("minutely").await.expect("read the row").expect("a row");
        (!row.is_held() && row.next_due_at == next).then_some(())
    })
    .await;
    for rt in &fleet {
        support::wait_polls(rt, 2).await;
    }
    for rt in fleet {
        rt.shutdown().await;
    }
}

/// `once` (the default): one run for the whole stretch, for the latest
/// missed slot; then the next future slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_runs_the_missed_stretch_once() {
    let db = support::db().await;
    let slots = Slots::default();
    let (fleet, store, latest) = down_for_five_slots(&db, &slots, CatchUp::Once).await;
    settle(fleet, &store, latest).await;
    assert_eq!(slots.all(), vec![Some(latest)]);
    let row = store.get("minutely").await.unwrap().unwrap();
    assert_eq!(row.next_due_at, Some(latest + TimeDelta::minutes(1)));
}

/// `skip`: no run for the missed slots (a `skipped` history row says so);
/// the next run is the next future slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_runs_nothing_for_missed_slots() {
    let db = support::db().await;
    let slots = Slots::default();
    let (fleet, store, latest) = down_for_five_slots(&db, &slots, CatchUp::Skip).await;
    settle(fleet, &store, latest).await;
    assert_eq!(slots.all(), vec![], "no run for missed slots");
    let row = store.get("minutely").await.unwrap().unwrap();
    assert_eq!(row.next_due_at, Some(latest + TimeDelta::minutes(1)));
    let history = store.records().history("minutely", 10).await.unwrap();
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0].outcome, RunOutcome::Skipped);
    assert_eq!(history[0].scheduled_for, Some(latest - TimeDelta::minutes(4)));
}

/// `all(3)`: each of the latest three missed slots runs, oldest first, once
/// each across the two replicas; the older two are skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_runs_each_missed_slot_up_to_its_bound_oldest_first() {
    let db = support::db().await;
    let slots = Slots::default();
    let (fleet, store, latest) = down_for_five_slots(&db, &slots, CatchUp::all(3)).await;
    settle(fleet, &store, latest).await;
    let expected: Vec<_> = (0..3)
        .rev()
        .map(|back| Some(latest - TimeDelta::minutes(back)))
        .collect();
    assert_eq!(slots.all(), expected);
    let row = store.get("minutely").await.unwrap().unwrap();
    assert_eq!(row.next_due_at, Some(latest + TimeDelta::minutes(1)));
    let history = store.records().history("minutely", 10).await.unwrap();
    let ran: Vec<_> = history.iter().rev().map(|r| r.scheduled_for).collect();
    assert_eq!(ran, expected, "history, oldest first");
}

/// A failed catch-up run is retried for the same slot (the retry moves
/// the due time, not the slot owed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_catch_up_run_is_retried_for_the_same_slot() {
    let db = support::db().await;
    let seen: Arc<Mutex<Vec<Option<DateTime<Utc>>>>> = Arc::default();
    let log = seen.clone();
    let flaky = job(
        "minutely",
        quick(Schedule::every(Duration::from_secs(60)), Duration::from_secs(5)).catch_up(CatchUp::all(2)),
        move |guard: FenceGuard| {
            let log = log.clone();
            async move {
                let mut log = log.lock().unwrap();
                log.push(guard.slot());
                if log.len() == 1 {
                    return Err("first attempt fails".into());
                }
                Ok(())
            }
        },
    );
    let slots = Slots::default();
    let (fleet, store, latest) = down_for_five_slots(&db, &slots, CatchUp::all(2)).await;
    for rt in fleet {
        rt.shutdown().await;
    }
    support::owe_slot(&db.pool, "minutely", latest - TimeDelta::minutes(1)).await;
    let rt = support::replica(&db, "r3", 2, vec![flaky]).await;
    settle(vec![rt], &store, latest).await;
    let prev = Some(latest - TimeDelta::minutes(1));
    assert_eq!(*seen.lock().unwrap(), vec![prev, prev, Some(latest)]);
}
