//! What resuming touches, and what pausing again keeps: a resume makes the
//! free, overdue keys of its own target claimable now and leaves every
//! other schedule alone (a running key's included); a second pause never
//! weakens the first.

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use leasehold::{
    Schedule,
    operator::{Resumed, Target},
    store::LeaseStore,
};

use crate::support::{self, Gate, job, quick};

/// Keys of job `tenant` (one overdue, one not yet due) and an overdue key
/// of another job. Resuming `tenant` wakes its overdue key only: the key
/// that is not yet due keeps its slot, and the other job's key is not
/// touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_wakes_only_the_overdue_keys_of_its_target() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let manual = || quick(Schedule::Manual, Duration::from_secs(5));
    let noop = || |_| async { Ok(()) };
    // Register the rows (with their job names), then stop: nothing claims
    // them while the schedules are arranged by hand.
    let rt = support::replica(
        &db,
        "r1",
        2,
        vec![
            job("tenant:overdue", manual(), noop()),
            job("tenant:later", manual(), noop()),
            job("other:overdue", manual(), noop()),
        ],
    )
    .await;
    rt.shutdown().await;
    // Whole microseconds: what a timestamptz keeps.
    let micros =
        |t: chrono::DateTime<Utc>| chrono::DateTime::from_timestamp_micros(t.timestamp_micros()).expect("in range");
    let past = micros(Utc::now() - TimeDelta::minutes(10));
    let future = micros(Utc::now() + TimeDelta::hours(1));
    store
        .controls()
        .pause(&Target::job("tenant"), false, "test")
        .await
        .unwrap();
    support::owe_slot(&db.pool, "tenant:overdue", past).await;
    support::owe_slot(&db.pool, "tenant:later", future).await;
    support::owe_slot(&db.pool, "other:overdue", past).await;
    let due = |info: Option<leasehold::store::LeaseInfo>| info.expect("row").next_due_at.expect("scheduled");

    let resumed = store.controls().resume(&Target::job("tenant")).await.unwrap();

    assert_eq!(resumed, Resumed::Yes { woken: 1 });
    let woken = due(store.get("tenant:overdue").await.unwrap());
    assert!(
        woken > past + TimeDelta::minutes(5),
        "the overdue key is due now: {woken}"
    );
    assert_eq!(
        due(store.get("tenant:later").await.unwrap()),
        future,
        "not yet due: keeps its slot"
    );
    assert_eq!(
        due(store.get("other:overdue").await.unwrap()),
        past,
        "another job's key is not touched"
    );
}

/// Pausing again without cancellation keeps the cancellation asked by the
/// first pause: an operator re-running `pause` cannot silently let runs go
/// on that were asked to stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_again_without_cancel_keeps_the_cancel() {
    let (_db, store) = support::store().await;
    let target = Target::key("billing").unwrap();
    assert!(store.controls().pause(&target, true, "alice").await.unwrap().cancel);
    let again = store.controls().pause(&target, false, "bob").await.unwrap();
    assert!(again.cancel, "the second pause kept the cancel: {again:?}");
    let pauses = store.controls().pauses().await.unwrap();
    assert_eq!(pauses.len(), 1);
    assert!(pauses[0].cancel);
    assert_eq!(pauses[0].paused_by, "alice", "the first pause is the one in force");
}

/// A manual key runs; it is paused without cancel and resumed while the run
/// goes on. The resume is not a trigger: the run's release records when the
/// key is next due (never, for a manual key), and it does not run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_while_the_key_runs_adds_no_run() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let gate = Gate::default();
    let rt = support::replica(
        &db,
        "r1",
        2,
        vec![job(
            "ledger",
            quick(Schedule::Manual, Duration::from_secs(5)),
            gate.body(),
        )],
    )
    .await;
    rt.trigger("ledger").await.unwrap();
    gate.runs().wait_started(1, Duration::from_secs(10)).await;

    let target = Target::key("ledger").unwrap();
    store.controls().pause(&target, false, "test").await.unwrap();
    let resumed = store.controls().resume(&target).await.unwrap();
    gate.finish_one();

    assert_eq!(resumed, Resumed::Yes { woken: 0 }, "a running key is not woken");
    let row = support::until_free(&store, "ledger").await;
    assert!(row.due_only_when_triggered(), "{row:?}");
    // Two polls read the row after the release: a resume that woke the
    // key would have run it by then.
    support::wait_polls(&rt, 2).await;
    assert_eq!(gate.runs().all().len(), 1, "{:?}", gate.runs().all());
    rt.shutdown().await;
}
