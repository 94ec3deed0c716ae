//! Fleet-wide limits per job (`Controls::set_limit`): at most N runs of a
//! job at once across every replica, counted by tenure on the server
//! clock; waiting keys start, oldest due first, as soon as a place frees.

use std::time::Duration;

use chrono::{DateTime, Utc};
use leasehold::operator::LimitSet;
use leasehold::{Error, Runtime, Schedule};
use tokio::time::Instant;

use crate::support::{self, RunRecord, Runs, job, quick};

/// The largest number of intervals `[start, end)` open at one instant
/// (an end and a start at the same instant do not overlap).
fn most_at_once<T: Ord + Copy>(intervals: impl IntoIterator<Item = (T, T)>) -> usize {
    let mut edges: Vec<(T, i32)> = Vec::new();
    for (start, end) in intervals {
        edges.push((start, 1));
        edges.push((end, -1));
    }
    edges.sort_by_key(|&(at, delta)| (at, delta));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, delta) in edges {
        now += delta;
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

/// A replica registering `keys` (each job named by its prefix: `report`),
/// with room for 8 runs, polling every 5 s: a waiting key that starts
/// sooner than that was woken by a place freeing.
async fn replica(db: &support::TestDb, holder: &str, keys: &[String], runs: &Runs, work: Duration) -> Runtime {
    let settings = quick(Schedule::Manual, Duration::from_secs(30));
    let mut builder = Runtime::builder(db.pool_with(3).await)
        .holder(holder)
        .poll_interval(Duration::from_secs(5))
        .max_concurrent_runs(8);
    for key in keys {
        builder = builder.register(job(key, settings.clone(), runs.body(work)));
    }
    builder.start().await.expect("runtime starts")
}

/// Three replicas register the same 50 `report` keys; the fleet limit of
/// `report` is 4. All 50 are triggered at once (in key order): every key
/// runs once, never more than 4 at a time — by the jobs' own clock and by
/// the tenures the history records on the server's — the limit is used,
/// and the keys start in the order they fell due (give or take the keys
/// concurrent claims had locked). A waiting key starts as soon as a place
/// frees: well within the poll interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_reports_on_three_replicas_run_at_most_four_at_once_oldest_first() {
    let db = support::db().await;
    let runs = Runs::default();
    let keys: Vec<String> = (0..50).map(|k| format!("report:{k:02}")).collect();
    let work = Duration::from_millis(300);
    let mut fleet = Vec::new();
    for holder in ["r1", "r2", "r3"] {
        fleet.push(replica(&db, holder, &keys, &runs, work).await);
    }
    let store = fleet[0].store().clone();
    assert_eq!(
        store
            .controls()
            .set_limit("report", 4, "test@fleet")
            .await
            .expect("set"),
        LimitSet::Set { previous: None }
    );
    // Every replica learns the limit at once (the set tells them to poll):
    // from then on they wake its keys in the order they fall due.
    support::eventually(Duration::from_secs(4), || {
        fleet
            .iter()
            .all(|rt| rt.health().fleet_limits == [("report".to_owned(), 4)])
            .then_some(())
    })
    .await;
    let mut due_at = Vec::new();
    for key in &keys {
        due_at.push(Instant::now());
        fleet[0].trigger(key).await.expect("trigger");
    }
    let all: Vec<RunRecord> = support::eventually(Duration::from_secs(60), || {
        let all = runs.all();
        (all.len() >= keys.len() && all.iter().all(|r| r.ended.is_some())).then_some(all)
    })
    .await;

    let mut ran: Vec<&str> = all.iter().map(|r| r.key.as_str()).collect();
    ran.sort_unstable();
    assert_eq!(
        ran,
        keys.iter().map(String::as_str).collect::<Vec<_>>(),
        "each key ran once"
    );
    let on_jobs = most_at_once(all.iter().map(|r| (r.started, r.ended.expect("ended"))));
    assert_eq!(
        on_jobs, 4,
        "at most four at once by the jobs' clock, and the limit is used"
    );
    let tenures: Vec<(DateTime<Utc>, DateTime<Utc>)> =
        sqlx::query_as("SELECT started_at, ended_at FROM leasehold_run WHERE job_name = 'report'")
            .fetch_all(&db.pool)
            .await
            .expect("history");
    assert_eq!(tenures.len(), keys.len(), "every run is in the history");
    let on_server = most_at_once(tenures.iter().copied());
    assert!(
        on_server <= 4,
        "{on_server} tenures of report overlapped on the server's clock"
    );
    let holders: std::collections::BTreeSet<&str> = all.iter().map(|r| r.holder.as_str()).collect();
    assert!(
        holders.len() >= 2,
        "the limit is the fleet's, not one replica's: {holders:?}"
    );

    // Due order: the k-th key to start is one of the first k + 8 to fall due
    // (a concurrent claim may skip up to its batch of locked keys).
    let mut by_start = all.clone();
    by_start.sort_by_key(|r| r.started);
    let rank = |key: &str| keys.iter().position(|k| k == key).expect("a key of ours");
    let mut worst = 0usize;
    for (k, run) in by_start.iter().enumerate() {
        worst = worst.max(rank(&run.key).saturating_sub(k));
    }
    // The waits, and the longest time a place stood free while a key waited.
    let mut waits: Vec<Duration> = all
        .iter()
        .map(|r| r.started.saturating_duration_since(due_at[rank(&r.key)]))
        .collect();
    waits.sort_unstable();
    let mut idle = Duration::ZERO;
    let mut ends: Vec<Instant> = all.iter().filter_map(|r| r.ended).collect();
    ends.sort_unstable();
    for (k, run) in by_start.iter().enumerate().skip(4) {
        // The k-th start needs the (k-4)-th end: how long after it did it come?
        idle = idle.max(run.started.saturating_duration_since(ends[k - 4]));
    }
    eprintln!(
        "fleet limit 4, 3 replicas, 50 keys: most at once {on_jobs} (jobs) {on_server} (server); \
         wait p50 {:?} p99 {:?}; out of due order by at most {worst}; a place free while a key waited at most {idle:?}",
        waits[waits.len() / 2],
        waits[waits.len() * 99 / 100]
    );
    assert!(worst <= 8, "a key started {worst} places ahead of its due order");
    assert!(
        idle < Duration::from_secs(4),
        "a place stood free {idle:?} while keys waited: woken by the release, not the 5 s poll"
    );
    assert!(
        store.controls().clear_limit("report").await.expect("clear"),
        "the limit was in force"
    );
    for rt in fleet {
        rt.shutdown().await;
    }
}

/// A limit of 0, above the largest, or on a name no key has is refused,
/// naming the value and what to do; clearing one that is not set says so.
#[tokio::test]
async fn a_fleet_limit_of_zero_too_large_or_on_an_unknown_job_is_refused() {
    let db = support::db().await;
    let runs = Runs::default();
    let rt = replica(&db, "r1", &["report:1".to_owned()], &runs, Duration::ZERO).await;
    let controls = rt.store().controls();
    let zero = controls
        .set_limit("report", 0, "ops")
        .await
        .expect_err("0 is not a limit");
    assert!(matches!(zero, Error::InvalidInput { .. }), "{zero:?}");
    assert!(zero.to_string().contains("clear"), "says how to lift a limit: {zero}");
    let huge = controls
        .set_limit("report", 1_000_000, "ops")
        .await
        .expect_err("absurd");
    assert!(
        huge.to_string().contains("1000000") && huge.to_string().contains("10000"),
        "{huge}"
    );
    assert_eq!(
        controls.set_limit("reprot", 2, "ops").await.expect("answered"),
        LimitSet::UnknownJob
    );
    assert!(controls.limits().await.expect("limits").is_empty(), "nothing was set");
    assert!(!controls.clear_limit("report").await.expect("clear"));
    rt.shutdown().await;
}
