//! A key's schedule changes while it runs, and between two of its runs,
//! from every 3 s to every 1 s and back (slots aligned on the Unix epoch):
//! the next run is the new schedule's first slot after the change — no
//! slot of it skipped, no run at an old-schedule instant the new schedule
//! does not have — and the runs after it keep to the new schedule. The
//! same for a static job whose settings `Runtime::add` replaces (after
//! `Runtime::remove`) while it runs.
//!
//! And what a change leaves alone: an owed slot and a retry's back-off
//! are never postponed by it.
//!
//! Read from the history (`scheduled_for`, server time); the change's
//! time is bracketed by two readings of the server clock, and the sync
//! that applies it may come a little after the second (a notification's
//! delivery): the first run after the change must be the new schedule's
//! first slot after some instant of that bracket.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use leasehold::{
    FenceGuard, JobError, JobKind, JobSettings, NewKey, Schedule,
    operator::Target,
    runtime::RunOutcome,
    store::{LeaseStore, RunRecord},
};

use crate::fleet::{TenantKind, replica, runs_of, tenant};
use crate::support;

/// How long after the second clock reading the replica may apply a change.
const SYNC_LAG: TimeDelta = TimeDelta::milliseconds(400);

fn every(secs: u64) -> Schedule {
    Schedule::every(Duration::from_secs(secs))
}

/// Whether `at` is a slot of "every `secs` s".
fn on(at: DateTime<Utc>, secs: i64) -> bool {
    at.timestamp_micros().rem_euclid(secs * 1_000_000) == 0
}

/// The key's history, oldest first.
async fn history(store: &LeaseStore, key: &str) -> Vec<RunRecord> {
    let mut runs = store.records().history(key, 100).await.expect("history");
    runs.sort_by_key(|r| r.run_no);
    runs
}

/// Waits until the history holds the run for `slot` and `after` runs after
/// it; returns those runs (the one for `slot` excluded).
async fn runs_after(store: &LeaseStore, key: &str, slot: DateTime<Utc>, after: usize) -> Vec<RunRecord> {
    support::eventually_async(Duration::from_secs(10), || async {
        let runs = history(store, key).await;
        let at = runs.iter().position(|r| r.scheduled_for == Some(slot))?;
        let later: Vec<RunRecord> = runs[at + 1..].to_vec();
        (later.len() >= after).then_some(later)
    })
    .await
}

/// The server's clock before and after `change`.
async fn bracket<F: Future<Output = ()>>(store: &LeaseStore, change: F) -> (DateTime<Utc>, DateTime<Utc>) {
    let before = store.server_now().await.expect("server clock");
    change.await;
    let after = store.server_now().await.expect("server clock");
    (before, after)
}

/// The runs after a change to `new` (every `secs` s) made between `from`
/// and `to`, after the run for `slot`: each for a slot of the new
/// schedule, the first the new schedule's first slot after the change
/// (and after `slot`), then each the slot after the one before — none
/// skipped, none extra.
fn assert_new_schedule(
    later: &[RunRecord],
    slot: DateTime<Utc>,
    secs: i64,
    (from, to): (DateTime<Utc>, DateTime<Utc>),
) {
    let new = every(u64::try_from(secs).expect("positive"));
    let slots: Vec<Option<DateTime<Utc>>> = later.iter().map(|r| r.scheduled_for).collect();
    let context = format!("slots after the run for {slot} (change between {from} and {to}): {slots:?}");
    for run in later {
        assert_eq!(run.outcome, RunOutcome::Succeeded, "{context}");
        let at = run
            .scheduled_for
            .unwrap_or_else(|| panic!("a scheduled run: {context}"));
        assert!(on(at, secs), "{at} is no slot of every {secs}s: {context}");
    }
    let first = slots[0].expect("checked");
    let earliest = new.upcoming(from.max(slot)).next().expect("a slot");
    let latest = new.upcoming((to + SYNC_LAG).max(slot)).next().expect("a slot");
    assert!(
        earliest <= first && first <= latest,
        "the first run after the change is for {first}, not the new schedule's first slot after it \
         ({earliest}..={latest}): {context}"
    );
    for pair in slots.windows(2) {
        let (a, b) = (pair[0].expect("checked"), pair[1].expect("checked"));
        assert_eq!(new.upcoming(a).next(), Some(b), "a slot skipped or repeated: {context}");
    }
}

/// A replica running key `k` of the tenant kind on `schedule`, each run
/// working for `work`; its kind and store.
async fn one_key(schedule: &str, work: Duration) -> (support::TestDb, LeaseStore, TenantKind, leasehold::Runtime) {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    store.keys().add(&[tenant("k", "basic", schedule)]).await.unwrap();
    let kind = TenantKind::working(work);
    let a = replica(&db, "a", &kind, Duration::from_millis(100), true).await;
    (db, store, kind, a)
}

/// Waits for a run of `k` to start for a slot `pick` accepts; its slot.
async fn run_starts(kind: &TenantKind, pick: impl Fn(DateTime<Utc>) -> bool) -> DateTime<Utc> {
    support::eventually(Duration::from_secs(8), || {
        runs_of(&kind.log, "k")
            .iter()
            .rev()
            .find_map(|r| r.slot.filter(|s| pick(*s)))
    })
    .await
}

/// Waits until the run for `slot` is released (in the history).
async fn released(store: &LeaseStore, slot: DateTime<Utc>) {
    support::eventually_async(Duration::from_secs(5), || async {
        history(store, "k")
            .await
            .iter()
            .any(|r| r.scheduled_for == Some(slot))
            .then_some(())
    })
    .await;
}

/// During a run for a 3 s slot, the key goes to every second: the next run
/// is the next second's slot, not the old schedule's next slot 3 s later
/// (which would skip two slots of the new schedule).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slower_to_faster_during_a_run() {
    let (_db, store, kind, a) = one_key("every 3s", Duration::from_millis(600)).await;
    let slot = run_starts(&kind, |_| true).await;
    let change = bracket(&store, async {
        store.keys().update(&tenant("k", "basic", "every 1s")).await.unwrap();
    })
    .await;
    let later = runs_after(&store, "k", slot, 3).await;
    a.shutdown().await;
    assert_new_schedule(&later, slot, 1, change);
}

/// During a run for a 1 s slot that is no 3 s slot's predecessor, the key
/// goes to every 3 s: the next run is the next 3 s slot, not the old
/// schedule's next second (an instant the new schedule does not have).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faster_to_slower_during_a_run() {
    let (_db, store, kind, a) = one_key("every 1s", Duration::from_millis(600)).await;
    let slot = run_starts(&kind, |s| on(s, 3)).await;
    let change = bracket(&store, async {
        store.keys().update(&tenant("k", "basic", "every 3s")).await.unwrap();
    })
    .await;
    let later = runs_after(&store, "k", slot, 2).await;
    a.shutdown().await;
    assert_new_schedule(&later, slot, 3, change);
}

/// Between two runs on a 3 s schedule, the key goes to every second: the
/// pending 3 s slot is brought forward to the next second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slower_to_faster_between_runs() {
    let (_db, store, kind, a) = one_key("every 3s", Duration::from_millis(50)).await;
    let slot = run_starts(&kind, |_| true).await;
    released(&store, slot).await;
    let change = bracket(&store, async {
        store.keys().update(&tenant("k", "basic", "every 1s")).await.unwrap();
    })
    .await;
    let later = runs_after(&store, "k", slot, 3).await;
    a.shutdown().await;
    assert_new_schedule(&later, slot, 1, change);
}

/// Between two runs on a 1 s schedule, the key goes to every 3 s: the
/// pending next second, which the new schedule does not have, is moved to
/// the next 3 s slot — later, since it was not due yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faster_to_slower_between_runs() {
    let (_db, store, kind, a) = one_key("every 1s", Duration::from_millis(50)).await;
    let slot = run_starts(&kind, |s| on(s, 3)).await;
    released(&store, slot).await;
    let change = bracket(&store, async {
        store.keys().update(&tenant("k", "basic", "every 3s")).await.unwrap();
    })
    .await;
    let later = runs_after(&store, "k", slot, 2).await;
    a.shutdown().await;
    assert_new_schedule(&later, slot, 3, change);
}

/// A static job on every second is removed while it runs for a slot and
/// added back on every 3 s (`Runtime::add` replacing its settings): the
/// cancelled run is recorded as removed, and the next run is the new
/// schedule's first slot after the change, then every 3 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_replacing_the_settings_during_a_run() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let slots: Arc<Mutex<Vec<Option<DateTime<Utc>>>>> = Arc::default();
    let job = |secs: u64| {
        let slots = slots.clone();
        support::job("k", support::quick(every(secs), Duration::from_secs(5)), move |guard| {
            slots.lock().unwrap().push(guard.slot());
            async move {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(600)) => {}
                    _ = guard.cancelled() => {}
                }
                Ok(())
            }
        })
    };
    let a = support::replica_on(db.pool_with(4).await, "a", Duration::from_millis(100), vec![job(1)]).await;
    let slot = support::eventually(Duration::from_secs(8), || {
        slots.lock().unwrap().iter().rev().find_map(|s| s.filter(|s| on(*s, 3)))
    })
    .await;
    let change = bracket(&store, async {
        assert!(a.remove("k").await.unwrap());
        a.add(job(3)).await.unwrap();
    })
    .await;
    let later = runs_after(&store, "k", slot, 2).await;
    a.shutdown().await;
    let runs = history(&store, "k").await;
    let cancelled = runs
        .iter()
        .find(|r| r.scheduled_for == Some(slot))
        .expect("the run for the slot");
    assert_eq!(
        (cancelled.outcome, cancelled.reason.as_deref()),
        (RunOutcome::Cancelled, Some("removed"))
    );
    assert_new_schedule(&later, slot, 3, change);
}

/// A key on every second is paused until a slot of it is owed, then goes
/// to hourly: the owed slot is not moved to the next hour (a new schedule
/// moves only a slot not due yet later); it runs once resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_schedule_never_postpones_an_owed_slot() {
    let (_db, store, kind, a) = one_key("every 1s", Duration::from_millis(10)).await;
    let slot = run_starts(&kind, |_| true).await;
    released(&store, slot).await;
    let key = Target::key("k").unwrap();
    store.controls().pause(&key, false, "test").await.unwrap();
    // The next slot passes while paused: owed.
    support::eventually_async(Duration::from_secs(5), || async {
        let row = store.get("k").await.unwrap()?;
        let now = store.server_now().await.unwrap();
        row.next_due_at.filter(|due| *due <= now - TimeDelta::milliseconds(200))
    })
    .await;
    let ran = runs_of(&kind.log, "k").len();
    store.keys().update(&tenant("k", "basic", "every 1h")).await.unwrap();
    support::wait_polls(&a, 3).await;
    store.controls().resume(&key).await.unwrap();
    support::eventually(Duration::from_secs(5), || {
        (runs_of(&kind.log, "k").len() > ran).then_some(())
    })
    .await;
    a.shutdown().await;
}

/// A kind whose runs fail, retried after 2 s.
#[derive(Clone, Default)]
struct Failing {
    slots: Arc<Mutex<Vec<Option<DateTime<Utc>>>>>,
}

impl JobKind for Failing {
    type Args = u32;

    fn name(&self) -> &str {
        "failing"
    }

    fn settings(&self) -> JobSettings {
        support::quick(Schedule::Manual, Duration::from_secs(5)).retry(Duration::from_secs(2), Duration::from_secs(2))
    }

    async fn run(&self, _args: u32, guard: FenceGuard) -> Result<(), JobError> {
        self.slots.lock().unwrap().push(guard.slot());
        Err("always fails".into())
    }
}

/// A run on every second fails; while its retry waits out its back-off,
/// the key goes to hourly: the retry (for the slot still owed) is not
/// moved to the next hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_schedule_never_postpones_a_retry() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let key = |schedule: &str| NewKey::new("failing", "f", &1u32, schedule.parse().expect("schedule")).expect("key");
    store.keys().add(&[key("every 1s")]).await.unwrap();
    let kind = Failing::default();
    let a = leasehold::Runtime::builder(db.pool_with(2).await)
        .holder("a")
        .poll_interval(Duration::from_millis(100))
        .register_kind(kind.clone())
        .start()
        .await
        .expect("runtime starts");
    let slot = support::eventually_async(Duration::from_secs(5), || async {
        let runs = history(&store, "f").await;
        runs.first().filter(|r| r.outcome == RunOutcome::Failed)?.scheduled_for
    })
    .await;
    store.keys().update(&key("every 1h")).await.unwrap();
    support::eventually(Duration::from_secs(5), || {
        let slots = kind.slots.lock().unwrap();
        (slots.iter().filter(|s| **s == Some(slot)).count() >= 2).then_some(())
    })
    .await;
    a.shutdown().await;
}
