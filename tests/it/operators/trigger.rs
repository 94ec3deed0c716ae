//! Triggers during a run: an operator who presses *Trigger* while the key
//! runs was told "due now", so the run's release must not swallow it — the
//! key runs once more after that run, and a scheduled key then goes on
//! with its schedule.

use std::time::Duration;

use leasehold::{Schedule, store::LeaseStore};

use crate::support::{self, Gate, job, quick};

const WITHIN: Duration = Duration::from_secs(10);

/// A manual key runs for a trigger; while it runs, two more triggers come
/// in, on two replicas, and both are accepted. When the run ends, the key
/// runs once more — two triggers during one run make one run — and then
/// not again until triggered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triggers_during_a_run_lead_to_one_more_run_after_it() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let gate = Gate::default();
    let export = || job("export", quick(Schedule::Manual, Duration::from_secs(5)), gate.body());
    let a = support::replica(&db, "a", 2, vec![export()]).await;
    let b = support::replica(&db, "b", 2, vec![export()]).await;

    a.trigger("export").await.unwrap();
    let first = gate.runs().wait_started(1, WITHIN).await[0].clone();
    a.trigger("export").await.expect("a trigger during the run is accepted");
    b.trigger("export").await.expect("and another, elsewhere");
    gate.finish_one();

    let runs = gate.runs().wait_started(2, WITHIN).await;
    let first_ended = runs[0].ended.expect("the first run ended");
    assert!(runs[1].started >= first_ended, "after the first run: {runs:?}");
    assert!(runs[1].fence > first.fence, "a run of its own: {runs:?}");
    gate.finish_one();
    let row = support::until_free(&store, "export").await;
    assert!(row.due_only_when_triggered(), "manual again: {row:?}");
    // Two polls of each replica after the release: a third run would have
    // been claimed by then.
    for rt in [&a, &b] {
        support::wait_polls(rt, 2).await;
    }
    assert_eq!(
        gate.runs().all().len(),
        2,
        "one run per trigger batch: {:?}",
        gate.runs().all()
    );
    a.shutdown().await;
    b.shutdown().await;
}

/// An hourly key is triggered while it runs: it runs once more right after
/// that run, and then waits for its next hourly slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_during_a_run_of_a_scheduled_key_runs_it_once_more_then_the_schedule_goes_on() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let gate = Gate::default();
    let hourly = quick(Schedule::every(Duration::from_secs(3600)), Duration::from_secs(5));
    let rt = support::replica(&db, "a", 2, vec![job("rollup", hourly, gate.body())]).await;

    rt.trigger("rollup").await.unwrap();
    gate.runs().wait_started(1, WITHIN).await;
    rt.trigger("rollup").await.unwrap();
    gate.finish_one();
    gate.runs().wait_started(2, WITHIN).await;
    gate.finish_one();

    let row = support::until_free(&store, "rollup").await;
    let next = row.next_due_at.expect("a due time");
    assert!(
        row.due_in() > Duration::ZERO && row.due_in() <= Duration::from_secs(3600),
        "next due at the next hourly slot: {row:?}"
    );
    assert_eq!(next.timestamp() % 3600, 0, "an hourly slot: {next}");
    support::wait_polls(&rt, 2).await;
    assert_eq!(gate.runs().all().len(), 2, "{:?}", gate.runs().all());
    rt.shutdown().await;
}
