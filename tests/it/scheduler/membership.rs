//! Keys added and removed while the runtime runs, and what a key added back
//! owes for the slots that passed while it was away.

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use leasehold::{CancelReason, Error, FenceGuard, Runtime, Schedule, operator::Target, store::LeaseStore};
use tokio::time::Instant;

use crate::support::{self, Gate, Runs, job, quick};

/// A runtime started with one key gets a second one at run time (it runs on
/// its slots; adding it twice is refused), then loses the first while it is
/// running: that run is cancelled (reason removed) and released before `remove`
/// returns, the key never runs here again, and its row stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_added_and_removed_while_running() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let runs = Runs::default();
    let every_second = quick(Schedule::every(Duration::from_secs(1)), Duration::from_secs(5));
    let long = job("tenant:a", every_second.clone(), runs.body(Duration::from_secs(60)));
    let rt = support::replica(&db, "replica", 2, vec![long]).await;

    let added = Instant::now();
    rt.add(job(
        "tenant:b",
        every_second.clone(),
        runs.body(Duration::from_millis(10)),
    ))
    .await
    .expect("a new key is added at run time");
    let again = rt
        .add(job(
            "tenant:b",
            every_second.clone(),
            runs.body(Duration::from_millis(10)),
        ))
        .await
        .expect_err("the same key twice");
    assert!(matches!(again, Error::InvalidInput { .. }), "{again:?}");
    assert!(again.to_string().contains("tenant:b"), "{again}");
    support::eventually(Duration::from_secs(5), || {
        let all = runs.all();
        (all.iter().filter(|r| r.key == "tenant:b" && r.started > added).count() >= 2).then_some(())
    })
    .await;
    assert_eq!(rt.health().registered, 2);

    // tenant:a has been running since its first slot: remove it.
    let a_run = support::eventually(Duration::from_secs(5), || {
        runs.all()
            .into_iter()
            .find(|r| r.key == "tenant:a" && r.ended.is_none())
    })
    .await;
    assert!(rt.remove("tenant:a").await.unwrap(), "it was registered");
    let removed = Instant::now();
    let a = runs.all().into_iter().find(|r| r.fence == a_run.fence).unwrap();
    assert_eq!(a.cancelled.map(|(_, why)| why), Some(CancelReason::Removed));
    assert!(
        a.ended.is_some_and(|end| end <= removed),
        "the run ended before remove returned"
    );
    let row = store.get("tenant:a").await.unwrap().expect("the row stays");
    assert!(!row.is_held(), "and its lease was released: {row:?}");
    assert!(!rt.remove("tenant:a").await.unwrap(), "no longer registered");
    assert!(matches!(rt.trigger("tenant:a").await, Err(Error::UnknownJob(_))));

    // Two slots of the same schedule come and go (tenant:b runs in them:
    // tenant:a would have been due there too), then two polls.
    support::eventually(Duration::from_secs(5), || {
        let all = runs.all();
        (all.iter()
            .filter(|r| r.key == "tenant:b" && r.started > removed)
            .count()
            >= 2)
            .then_some(())
    })
    .await;
    support::wait_polls(&rt, 2).await;
    let later_a = runs
        .all()
        .iter()
        .filter(|r| r.key == "tenant:a" && r.started > removed)
        .count();
    assert_eq!(later_a, 0, "a removed key never runs here again");
    let later_b = runs
        .all()
        .iter()
        .filter(|r| r.key == "tenant:b" && r.started > removed)
        .count();
    assert!(later_b >= 1, "the other key keeps its slots");
    assert_eq!(rt.health().registered, 1);
    rt.shutdown().await;
}

/// A key added with a shorter heartbeat than every key registered at start
/// is renewed at its own pace: its 2 s lease survives a 4 s run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_added_key_with_a_short_lease_is_renewed_in_time() {
    let db = support::db().await;
    let runs = Runs::default();
    let slow = job(
        "slow",
        quick(Schedule::Manual, Duration::from_secs(120)),
        runs.body(Duration::from_millis(10)),
    );
    let rt = support::replica(&db, "replica", 2, vec![slow]).await;
    rt.add(job(
        "short",
        quick(Schedule::Manual, Duration::from_secs(2)),
        runs.body(Duration::from_secs(4)),
    ))
    .await
    .unwrap();
    rt.trigger("short").await.unwrap();
    let run = support::eventually(Duration::from_secs(15), || {
        runs.all().into_iter().find(|r| r.key == "short" && r.ended.is_some())
    })
    .await;
    assert_eq!(run.cancelled, None, "the run kept its lease for 4 s: {run:?}");
    rt.shutdown().await;
}

/// Two removes of one key while its run takes a second to stop after being
/// cancelled (it ignores the cancellation that long): both wait for that
/// run to end, and both return that the key was registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_removes_of_one_key_both_wait_for_its_run_to_end() {
    let db = support::db().await;
    let runs = Runs::default();
    let slow_to_stop = {
        let runs = runs.clone();
        move |guard: FenceGuard| {
            let runs = runs.clone();
            async move {
                let i = runs.start(&guard);
                guard.cancelled().await;
                runs.cancelled(i, guard.reason());
                tokio::time::sleep(Duration::from_secs(1)).await;
                runs.end(i);
                Ok(())
            }
        }
    };
    let settings = quick(Schedule::Manual, Duration::from_secs(10)).grace(Duration::from_secs(5));
    let rt = support::replica(&db, "replica", 2, vec![job("slow-stop", settings, slow_to_stop)]).await;
    rt.trigger("slow-stop").await.unwrap();
    runs.wait_started(1, Duration::from_secs(10)).await;

    let removing = |rt: Runtime| async move {
        let removed = rt.remove("slow-stop").await.expect("remove");
        (removed, Instant::now())
    };
    let ((first, first_at), (second, second_at)) = tokio::join!(removing(rt.clone()), removing(rt.clone()));
    let run = runs.all().remove(0);
    let ended = run.ended.expect("the run ended");
    assert_eq!(
        (first, second),
        (true, true),
        "both removes report the key was registered"
    );
    assert!(first_at >= ended, "the first remove returned before the run ended");
    assert!(second_at >= ended, "the second remove returned before the run ended");
    assert_eq!(run.cancelled.map(|(_, why)| why), Some(CancelReason::Removed));
    assert!(!rt.remove("slow-stop").await.unwrap(), "no longer registered");
    rt.shutdown().await;
}

/// An hourly schedule: its next slot is (almost always) far beyond the end
/// of a scenario, so a run within one is a catch-up or a trigger.
fn hourly() -> leasehold::JobSettings {
    quick(Schedule::every(Duration::from_secs(3600)), Duration::from_secs(5))
}

/// As if the fleet had been away for two hours: `key` owes the slot of two
/// hours ago (its lease free, its holder and last claim unchanged).
async fn slots_passed(pool: &sqlx::PgPool, key: &str) -> chrono::DateTime<Utc> {
    let owed = Utc::now() - TimeDelta::hours(2);
    let owed = chrono::DateTime::from_timestamp_micros(owed.timestamp_micros()).expect("in range");
    support::owe_slot(pool, key, owed).await;
    owed
}

/// A key added at run time that never had a row is first due at its next
/// slot: adding a nightly tenant job does not run it now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_key_added_at_run_time_is_first_due_at_its_next_slot() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let runs = Runs::default();
    let rt = support::replica(&db, "a", 2, Vec::<support::ScriptedJob>::new()).await;

    rt.add(job("tenant:new", hourly(), runs.body(Duration::from_millis(10))))
        .await
        .unwrap();

    let row = store.get("tenant:new").await.unwrap().expect("its row");
    assert!(row.never_run(), "{row:?}");
    assert!(row.due_in() > Duration::ZERO, "due at its next slot, not now: {row:?}");
    support::wait_polls(&rt, 2).await;
    assert!(runs.all().is_empty(), "{:?}", runs.all());
    rt.shutdown().await;
}

/// Two tenant keys — one that ran, one that never did — are removed from
/// the only replica that had them; hours of slots pass; they are added
/// back. Nobody registered them meanwhile, so they come back like new keys,
/// first due at their next slot: no catch-up run at the add.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_key_added_back_is_first_due_at_its_next_slot() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let runs = Runs::default();
    let tenant = |key: &str| job(key, hourly(), runs.body(Duration::from_millis(10)));
    let rt = support::replica(&db, "a", 2, vec![tenant("tenant:ran"), tenant("tenant:idle")]).await;
    rt.trigger("tenant:ran").await.unwrap();
    runs.wait_started(1, Duration::from_secs(10)).await;
    support::until_free(&store, "tenant:ran").await;

    for key in ["tenant:ran", "tenant:idle"] {
        assert!(rt.remove(key).await.unwrap());
        slots_passed(&db.pool, key).await;
        rt.add(tenant(key)).await.unwrap();
    }

    for key in ["tenant:ran", "tenant:idle"] {
        let row = store.get(key).await.unwrap().expect("its row");
        assert!(
            row.due_in() > Duration::ZERO && row.due_in() <= Duration::from_secs(3600),
            "{key}: due at its next slot: {row:?}"
        );
    }
    support::wait_polls(&rt, 2).await;
    assert_eq!(runs.all().len(), 1, "no catch-up run: {:?}", runs.all());
    rt.shutdown().await;
}

/// Replica `a` removes a key that replica `b` still registers, and `b`
/// runs it after that. Then `b` goes down and hours of slots pass with
/// nobody to run them. When `a` adds the key back, those are missed slots
/// of a key that stayed registered: it catches up at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_another_replica_kept_registered_still_catches_up() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let runs = Runs::default();
    let tenant = || job("tenant:acme", hourly(), runs.body(Duration::from_millis(10)));
    let a = support::replica(&db, "a", 2, vec![tenant()]).await;
    let b = support::replica(&db, "b", 2, vec![tenant()]).await;
    assert!(a.remove("tenant:acme").await.unwrap());
    b.trigger("tenant:acme").await.unwrap();
    runs.wait_started(1, Duration::from_secs(10)).await;
    support::until_free(&store, "tenant:acme").await;
    b.shutdown().await;
    slots_passed(&db.pool, "tenant:acme").await;

    a.add(tenant()).await.unwrap();

    let runs = runs.wait_started(2, Duration::from_secs(10)).await;
    assert_eq!(runs[1].holder, "a", "the catch-up run: {runs:?}");
    a.shutdown().await;
}

/// A removed key is added back while its job is paused: the slots the
/// pause holds back stay owed, and run (once, catch-up) when it is resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_key_added_back_keeps_its_missed_slots_for_the_resume() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let runs = Runs::default();
    let tenant = || job("tenant:acme", hourly(), runs.body(Duration::from_millis(10)));
    let rt = support::replica(&db, "a", 2, vec![tenant()]).await;
    assert!(rt.remove("tenant:acme").await.unwrap());
    store
        .controls()
        .pause(&Target::job("tenant"), false, "test")
        .await
        .unwrap();
    let owed = slots_passed(&db.pool, "tenant:acme").await;

    rt.add(tenant()).await.unwrap();

    let row = store.get("tenant:acme").await.unwrap().expect("its row");
    assert_eq!(row.next_due_at, Some(owed), "still owed: {row:?}");
    rt.resume(&Target::job("tenant")).await.unwrap();
    runs.wait_started(1, Duration::from_secs(10)).await;
    rt.shutdown().await;
}

/// Replica `b` is running a key when replica `a` removes it and adds it
/// back. The run in progress keeps the due time its release writes: the
/// key does not run again after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_added_back_while_another_replica_runs_it_keeps_that_runs_schedule() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let gate = Gate::default();
    let tenant = || job("tenant:acme", hourly(), gate.body());
    let b = support::replica(&db, "b", 2, vec![tenant()]).await;
    b.trigger("tenant:acme").await.unwrap();
    gate.runs().wait_started(1, Duration::from_secs(10)).await;
    let a = support::replica(&db, "a", 2, vec![tenant()]).await;

    assert!(a.remove("tenant:acme").await.unwrap());
    a.add(tenant()).await.unwrap();
    gate.finish_one();

    let row = support::until_free(&store, "tenant:acme").await;
    assert!(row.due_in() > Duration::ZERO, "next due at its next slot: {row:?}");
    for rt in [&a, &b] {
        support::wait_polls(rt, 2).await;
    }
    assert_eq!(gate.runs().all().len(), 1, "{:?}", gate.runs().all());
    a.shutdown().await;
    b.shutdown().await;
}
