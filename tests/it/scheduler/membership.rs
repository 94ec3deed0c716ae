//! Keys added and removed while the runtime runs.

use std::time::Duration;

use leasehold::{CancelReason, Error, FenceGuard, LeaseStore, Runtime, Schedule};
use tokio::time::Instant;

use crate::support::{self, Runs, job, quick};

/// A runtime started with one key gets a second one at run time (it runs on
/// its slots; adding it twice is refused), then loses the first while it is
/// running: that run is cancelled for shutdown and released before `remove`
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
    assert_eq!(a.cancelled.map(|(_, why)| why), Some(CancelReason::Shutdown));
    assert!(
        a.ended.is_some_and(|end| end <= removed),
        "the run ended before remove returned"
    );
    let row = store.get("tenant:a").await.unwrap().expect("the row stays");
    assert!(!row.is_held(), "and its lease was released: {row:?}");
    assert!(!rt.remove("tenant:a").await.unwrap(), "no longer registered");
    assert!(matches!(rt.trigger("tenant:a").await, Err(Error::UnknownJob(_))));

    tokio::time::sleep(Duration::from_secs(2)).await;
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
    assert_eq!(run.cancelled.map(|(_, why)| why), Some(CancelReason::Shutdown));
    assert!(!rt.remove("slow-stop").await.unwrap(), "no longer registered");
    rt.shutdown().await;
}
