//! A time limit per run (`JobSettings::timeout`, `#[job(timeout = "15m")]`):
//! a run still going at its limit is cancelled with its own reason
//! (`timeout`), dropped after its grace if it does not return, recorded in
//! the history, and its key runs again at its next slot — not at once, not
//! never. Without a limit nothing changes. Bad limits are refused by name.
//! Status reads show each run in progress against its limit.
//!
//! Real PostgreSQL, real time: limits of a few hundred milliseconds.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use leasehold::console::ConsoleOptions;
use leasehold::{
    CancelReason, Error, FenceGuard, JobError, JobKind, JobSettings, Runtime, Schedule,
    runtime::RunOutcome,
    store::{LeaseStore, RunRecord},
};

use crate::console::http::{console, get};
use crate::support::{self, Runs, job, quick};

const LIMIT: Duration = Duration::from_millis(300);
const GRACE: Duration = Duration::from_millis(300);

/// An every-second key whose runs are limited to [`LIMIT`].
fn limited() -> JobSettings {
    quick(Schedule::every(Duration::from_secs(1)), Duration::from_secs(3))
        .grace(GRACE)
        .timeout(LIMIT)
}

/// The key's recorded runs, oldest first, once at least `n` are recorded.
async fn recorded(store: &LeaseStore, key: &str, n: usize) -> Vec<RunRecord> {
    support::eventually_async(Duration::from_secs(15), || {
        let store = store.clone();
        let key = key.to_owned();
        async move {
            let mut history = store.records().history(&key, 100).await.unwrap();
            history.reverse();
            (history.len() >= n).then_some(history)
        }
    })
    .await
}

fn is_timeout(run: &RunRecord) -> bool {
    run.outcome == RunOutcome::Cancelled && run.reason.as_deref() == Some("timeout")
}

/// A run that waits forever for an answer (but watches its guard) is
/// cancelled at its limit with reason `timeout`; the history records it as
/// cancelled (timeout); the key's next run is for its *next* slot, not the
/// one that timed out again, and starts no earlier than that slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_never_returns_is_cancelled_at_its_limit_and_its_key_runs_at_its_next_slot() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let runs = Runs::default();
    let rt = support::replica(
        &db,
        "r1",
        2,
        vec![job("stuck", limited(), runs.body(Duration::from_secs(3600)))],
    )
    .await;

    let seen = runs.wait_started(3, Duration::from_secs(15)).await;
    let first = &seen[0];
    let (cancelled_at, reason) = first.cancelled.expect("the first run was cancelled");
    assert_eq!(reason, CancelReason::Timeout);
    let took = cancelled_at - first.started;
    assert!(took >= LIMIT, "cancelled after {took:?}, before its limit {LIMIT:?}");
    assert!(took < LIMIT + Duration::from_millis(700), "cancelled after {took:?}");

    let history = recorded(&store, "stuck", 3).await;
    rt.shutdown().await;
    for run in &history {
        assert!(is_timeout(run), "every run times out the same way: {run:?}");
    }
    // The first run may be for no slot (a key never scheduled is due at once).
    let (a, b) = (&history[1], &history[2]);
    assert!(a.error.is_none(), "a timeout is not the job's error: {a:?}");
    assert!(a.duration() >= LIMIT, "{a:?}");
    // Its slot is given up: the next run is for the next slot, and it
    // waited for it (a stopped run that stayed due would run again at once
    // for the same slot, and time out forever).
    let (slot_a, slot_b) = (a.scheduled_for.expect("a slot"), b.scheduled_for.expect("a slot"));
    assert_eq!(slot_b - slot_a, chrono::TimeDelta::seconds(1), "{a:?}\n{b:?}");
    assert!(b.started_at >= slot_b, "{b:?} started before its slot");
}

/// A run that stops cleanly when told (returns `Ok` at its cancellation)
/// is still recorded as cancelled at its limit, not as a success: its work
/// was cut short.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_returns_ok_when_cancelled_at_its_limit_is_recorded_as_timed_out() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let settings = quick(Schedule::Manual, Duration::from_secs(3)).timeout(LIMIT);
    let body = |guard: FenceGuard| async move {
        guard.cancelled().await;
        Ok::<(), JobError>(())
    };
    let rt = support::replica(&db, "r1", 2, vec![job("polite", settings, body)]).await;
    rt.trigger("polite").await.unwrap();
    let history = recorded(&store, "polite", 1).await;
    rt.shutdown().await;
    assert!(is_timeout(&history[0]), "{:?}", history[0]);
}

/// A run that ignores its cancellation (a call that never returns) is
/// dropped at the end of its grace, keeps its lease until then so no one
/// else starts the key, is recorded as cancelled (timeout), and the key
/// still runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_ignores_its_cancellation_is_dropped_after_its_grace_and_the_key_runs_again() {
    /// Sets the instant it is dropped at: when the runtime drops the run.
    struct Dropped(Arc<Mutex<Vec<Instant>>>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.lock().unwrap().push(Instant::now());
        }
    }

    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let started = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let dropped = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let body = {
        let (started, dropped) = (started.clone(), dropped.clone());
        move |_guard: FenceGuard| {
            let (started, dropped) = (started.clone(), dropped.clone());
            async move {
                started.lock().unwrap().push(Instant::now());
                let _drop = Dropped(dropped);
                std::future::pending::<()>().await;
                Ok::<(), JobError>(())
            }
        }
    };
    let rt = support::replica(&db, "r1", 2, vec![job("deaf", limited(), body)]).await;

    // The first run is dropped, and the key runs again.
    support::eventually(Duration::from_secs(15), || {
        (started.lock().unwrap().len() >= 2).then_some(())
    })
    .await;
    let first_start = started.lock().unwrap()[0];
    let first_drop = dropped.lock().unwrap()[0];
    let lived = first_drop - first_start;
    assert!(
        lived >= LIMIT + GRACE,
        "dropped after {lived:?}, before its limit and grace"
    );
    assert!(
        lived < LIMIT + GRACE + Duration::from_millis(700),
        "dropped after {lived:?}"
    );
    let second_start = started.lock().unwrap()[1];
    assert!(
        second_start >= first_drop,
        "the next run started while the dropped one still ran"
    );

    let history = recorded(&store, "deaf", 1).await;
    rt.shutdown().await;
    let first = &history[0];
    assert!(is_timeout(first), "{first:?}");
    assert!(
        first.duration() >= LIMIT + GRACE,
        "held its lease through its grace: {first:?}"
    );
}

/// Without a limit (the default), a run that takes longer than any limit
/// above is left alone: it succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_limit_a_long_run_is_not_cancelled() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let runs = Runs::default();
    let settings = quick(Schedule::Manual, Duration::from_secs(3));
    assert_eq!(settings.get_timeout(), None, "no limit by default");
    let rt = support::replica(
        &db,
        "r1",
        2,
        vec![job("slow", settings, runs.body(Duration::from_millis(1500)))],
    )
    .await;
    rt.trigger("slow").await.unwrap();
    let history = recorded(&store, "slow", 1).await;
    rt.shutdown().await;
    let run = &runs.all()[0];
    assert!(run.cancelled.is_none(), "{run:?}");
    assert_eq!(history[0].outcome, RunOutcome::Succeeded, "{:?}", history[0]);
    assert!(history[0].duration() >= Duration::from_millis(1500));
}

/// A kind whose settings are read at run time: its time limit is checked
/// like a job's.
struct Report(JobSettings);

impl JobKind for Report {
    type Args = u64;
    fn name(&self) -> &str {
        "report"
    }
    fn settings(&self) -> JobSettings {
        self.0.clone()
    }
    async fn run(&self, _tenant: u64, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

/// A limit below 100 ms or above 168 h, on a job or a kind, is refused at
/// start with an error naming the value, the accepted range and the job.
/// (The derive refuses them at
/// compile time: `tests/ui/fail/timeout_out_of_range.rs`.)
#[tokio::test]
async fn bad_limits_are_refused_with_the_value_and_the_range() {
    let noop = |_: FenceGuard| async { Ok(()) };
    let manual = || JobSettings::new(Schedule::Manual);
    for (limit, shown) in [
        (Duration::ZERO, "0ns"),
        (Duration::from_millis(50), "50ms"),
        (Duration::from_secs(169 * 3600), "169h"),
    ] {
        let err = Runtime::builder(support::unreachable_pool())
            .register(job("nightly", manual().timeout(limit), noop))
            .start()
            .await
            .expect_err("refused");
        assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains(&format!("run timeout {shown}"))
                && text.contains("from 100ms to 168h")
                && text.contains("\"nightly\""),
            "{text}"
        );

        let err = Runtime::builder(support::unreachable_pool())
            .register_kind(Report(manual().timeout(limit)))
            .start()
            .await
            .expect_err("refused");
        let text = err.to_string();
        assert!(
            text.contains(&format!("run timeout {shown}")) && text.contains("from 100ms to 168h"),
            "{text}"
        );
    }
}

/// While a run is in progress its lease row says how long it has been
/// going and against what limit, and the console shows it (`leasehold
/// status`: `cli/tests/cli/status.rs`); a job without a limit has none,
/// and a lease taken with the low-level `claim` is no run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_in_progress_shows_how_long_it_has_been_going_against_its_limit() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let runs = Runs::default();
    let settings = |limit: Option<Duration>| {
        let s = quick(Schedule::Manual, Duration::from_secs(3));
        match limit {
            Some(limit) => s.timeout(limit),
            None => s,
        }
    };
    let rt = support::replica(
        &db,
        "r1",
        2,
        vec![
            job(
                "limited",
                settings(Some(Duration::from_secs(900))),
                runs.body(Duration::from_secs(60)),
            ),
            job("unlimited", settings(None), runs.body(Duration::from_secs(60))),
        ],
    )
    .await;
    rt.trigger("limited").await.unwrap();
    rt.trigger("unlimited").await.unwrap();
    runs.wait_started(2, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let limited = store.get("limited").await.unwrap().expect("a row");
    let going = limited.running_for().expect("a run in progress");
    assert!(
        going >= Duration::from_millis(300) && going < Duration::from_secs(10),
        "{going:?}"
    );
    assert_eq!(limited.run_timeout, Some(Duration::from_secs(900)));
    let unlimited = store.get("unlimited").await.unwrap().expect("a row");
    assert!(unlimited.running_for().is_some());
    assert_eq!(unlimited.run_timeout, None);
    // The list operators read (status, the console) says the same.
    let listed = store.records().list("limited").await.unwrap();
    assert_eq!(listed[0].lease.run_timeout, Some(Duration::from_secs(900)));
    assert!(listed[0].lease.running_for().is_some());
    // The console shows it on the leases page and the key's page.
    let app = console(&db.pool, ConsoleOptions::new());
    let page = get(&app, "/", &[]).await;
    let row = |key: &str| {
        let row = page.body.split(&format!("data-key=\"{key}\"")).nth(1).expect("a row");
        row.split("</tr>").next().expect("a row").to_owned()
    };
    assert!(
        row("limited").contains("running ") && row("limited").contains(" of 15 min"),
        "{}",
        row("limited")
    );
    assert!(row("unlimited").contains(", no limit"), "{}", row("unlimited"));
    let key = get(&app, "/key?key=limited", &[]).await;
    let running = key.body.split("id=\"running\"").nth(1).expect("the run's line");
    assert!(
        running
            .split("</dd>")
            .next()
            .is_some_and(|dd| dd.contains(" of 15 min")),
        "{}",
        key.body
    );

    rt.shutdown().await;
    let ended = store.get("limited").await.unwrap().expect("a row");
    assert_eq!(ended.running_for(), None, "released: no run in progress");

    store.claim("by-hand", "tool", Duration::from_secs(30)).await.unwrap();
    let by_hand = store.get("by-hand").await.unwrap().expect("a row");
    assert!(by_hand.is_held() && by_hand.running_for().is_none() && by_hand.run_timeout.is_none());
}

/// A kind whose keys work for a second, or until cancelled.
struct Reports(Runs);

impl JobKind for Reports {
    type Args = u64;
    fn name(&self) -> &str {
        "reports"
    }
    fn settings(&self) -> JobSettings {
        quick(Schedule::Manual, Duration::from_secs(3)).grace(GRACE)
    }
    async fn run(&self, _tenant: u64, guard: FenceGuard) -> Result<(), JobError> {
        (self.0.body(Duration::from_secs(1)))(guard).await
    }
}

/// A key of a kind may have its own limit, in place of its kind's (none
/// here): given when it is added, changed or dropped by an update, and
/// read by every replica that runs the kind. A bad one is refused by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_a_kind_has_its_own_limit_given_when_added_and_changed_by_an_update() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let runs = Runs::default();
    let rt = support::builder(
        db.pool.clone(),
        "r1",
        Some(Duration::from_millis(100)),
        Vec::<support::ScriptedJob>::new(),
    )
    .register_kind(Reports(runs.clone()))
    .start()
    .await
    .unwrap();
    let key = |name: &str| leasehold::NewKey::new("reports", name, &7u64, Schedule::Manual).unwrap();
    let bad = store
        .keys()
        .add(&[key("reports:bad").timeout(Duration::from_millis(50))])
        .await;
    let text = bad.expect_err("refused").to_string();
    assert!(
        text.contains("run timeout 50ms") && text.contains("from 100ms to 168h") && text.contains("reports:bad"),
        "{text}"
    );
    store
        .keys()
        .add(&[key("reports:limited").timeout(LIMIT), key("reports:plain")])
        .await
        .unwrap();
    let stored = store
        .keys()
        .get_many(&["reports:limited", "reports:plain"])
        .await
        .unwrap();
    assert_eq!((stored[0].timeout, stored[1].timeout), (Some(LIMIT), None));

    /// Triggers `key` once it runs on the replica, and returns its newest
    /// recorded run once there is one more than `before`.
    async fn run_once(rt: &Runtime, store: &LeaseStore, key: &str, before: usize) -> RunRecord {
        // Registered by the replica's sync, at the notification or its next poll.
        support::eventually_async(Duration::from_secs(10), || async { rt.trigger(key).await.ok() }).await;
        recorded(store, key, before + 1).await.pop().expect("a run")
    }
    let limited = run_once(&rt, &store, "reports:limited", 0).await;
    assert!(is_timeout(&limited), "the key's own limit: {limited:?}");
    let plain = run_once(&rt, &store, "reports:plain", 0).await;
    assert_eq!(plain.outcome, RunOutcome::Succeeded, "the kind has no limit: {plain:?}");

    // The limit moves from one key to the other.
    store
        .keys()
        .update(&key("reports:limited"))
        .await
        .unwrap()
        .expect("updated");
    store
        .keys()
        .update(&key("reports:plain").timeout(LIMIT))
        .await
        .unwrap()
        .expect("updated");
    // Every replica syncs at the notification, or within a poll (100 ms).
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let limited = run_once(&rt, &store, "reports:limited", 1).await;
    assert_eq!(
        limited.outcome,
        RunOutcome::Succeeded,
        "its limit was dropped: {limited:?}"
    );
    let plain = run_once(&rt, &store, "reports:plain", 1).await;
    assert!(is_timeout(&plain), "given a limit by its update: {plain:?}");
    // The console's key page shows a key's own limit, and none for the other.
    let app = console(&db.pool, ConsoleOptions::new());
    let page = get(&app, "/key?key=reports%3Aplain", &[]).await;
    assert!(page.body.contains("<dd id=\"timeout\">300ms per run"), "{}", page.body);
    let page = get(&app, "/key?key=reports%3Alimited", &[]).await;
    assert!(!page.body.contains("id=\"timeout\""), "{}", page.body);
    rt.shutdown().await;
}
