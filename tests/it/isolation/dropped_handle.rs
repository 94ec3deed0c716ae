//! The service drops its `Runtime` without `shutdown()`.

use std::time::Duration;

use leasehold::{CancelReason, Schedule, store::LeaseStore};

use crate::support::{self, Runs, eventually, job, quick};

/// Dropping the last handle stops the runtime: the run in progress is
/// cancelled (reason shutdown), its lease is released, and nothing runs
/// afterwards. The failure this guards against: the job keeps running and
/// its lease stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_runtime_stops_it_and_releases_its_lease() {
    let db = support::db().await;
    let runs = Runs::default();
    // Every second, each run working 10 s unless cancelled.
    let long = job(
        "dropped",
        quick(Schedule::every(Duration::from_secs(1)), Duration::from_secs(3)),
        runs.body(Duration::from_secs(10)),
    );
    let runtime = support::replica(&db, "r0", 3, vec![long]).await;
    let clone = runtime.clone();
    runs.wait_started(1, Duration::from_secs(5)).await;
    drop(runtime);
    // A clone is still alive: nothing stops, and the scheduler goes on.
    support::wait_polls(&clone, 2).await;
    assert!(
        runs.all()[0].cancelled.is_none(),
        "a live clone keeps the runtime running"
    );
    drop(clone);
    let cancelled = eventually(Duration::from_secs(5), || runs.all()[0].cancelled).await;
    assert_eq!(cancelled.1, CancelReason::Shutdown);
    let store = LeaseStore::new(db.pool.clone());
    let mut released = false;
    for _ in 0..100 {
        let row = store.get("dropped").await.unwrap().expect("row");
        if !row.is_held() {
            released = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(released, "the lease was released");
    let before = runs.all().len();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(runs.all().len(), before, "no run after the runtime was dropped");
}
