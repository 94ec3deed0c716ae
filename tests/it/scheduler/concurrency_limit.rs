//! `max_concurrent_runs`: a replica claims only what it has room for and
//! leaves the rest to the others.

use std::time::Duration;

use leasehold::store::LeaseStore;
use leasehold::{Error, Runtime, Schedule};

use crate::support::{self, Runs, job, quick};

/// Replica "small" (limit 2) and "big" (limit 10) register the same six
/// long-running keys, all due at the same second: "small" claims two of
/// them in one statement and never runs more, "big" takes the other four,
/// and all six run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_replica_leaves_keys_to_the_others() {
    let db = support::db().await;
    let runs = Runs::default();
    let keys: Vec<String> = (0..6).map(|k| format!("tenant:{k}")).collect();
    let start = |holder: &'static str, limit: usize| {
        let jobs: Vec<_> = keys
            .iter()
            .map(|k| {
                job(
                    k,
                    quick(Schedule::every(Duration::from_secs(1)), Duration::from_secs(30)),
                    runs.body(Duration::from_secs(600)),
                )
            })
            .collect();
        let db = &db;
        async move {
            let mut builder = Runtime::builder(db.pool_with(2).await)
                .holder(holder)
                .poll_interval(Duration::from_millis(200))
                .max_concurrent_runs(limit);
            for j in jobs {
                builder = builder.register(j);
            }
            builder.start().await.expect("runtime starts")
        }
    };
    let small = start("small", 2).await;
    // At the next second all six are due: "small" claims what it has room for.
    support::eventually(Duration::from_secs(5), || (small.health().running == 2).then_some(())).await;
    let big = start("big", 10).await;
    let mut most = 0;
    let all = support::eventually(Duration::from_secs(10), || {
        most = most.max(small.health().running);
        let all = runs.all();
        (all.len() >= 6).then_some(all)
    })
    .await;
    assert!(most <= 2, "small ran {most} at once");
    let on_small = all.iter().filter(|r| r.holder == "small").count();
    let on_big = all.iter().filter(|r| r.holder == "big").count();
    assert_eq!((on_small, on_big), (2, 4), "{all:?}");
    let health = small.health();
    assert_eq!((health.running, health.max_concurrent_runs), (2, 2));
    small.shutdown().await;
    big.shutdown().await;
}

/// With room for one run, a run whose release is held up (an outside
/// session holds its lease row locked) gives its slot back as its body
/// ends: a second key triggered then runs at once, not after the release
/// (which would wait for the lock, or for the release's 5 s bound). The
/// first key keeps its lease meanwhile and is released once the lock goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_held_up_gives_the_slot_back_but_keeps_the_lease() {
    let db = support::db().await;
    let runs = Runs::default();
    let settings = quick(Schedule::Manual, Duration::from_secs(30));
    let mut builder = Runtime::builder(db.pool_with(2).await)
        .holder("r1")
        .poll_interval(Duration::from_millis(200))
        .max_concurrent_runs(1);
    for key in ["first", "second"] {
        builder = builder.register(job(key, settings.clone(), runs.body(Duration::from_millis(300))));
    }
    let rt = builder.start().await.expect("runtime starts");
    let store = LeaseStore::new(db.pool.clone());
    rt.trigger("first").await.expect("trigger");
    support::eventually(Duration::from_secs(5), || (rt.health().running == 1).then_some(())).await;
    let lock = support::lock_lease_row(&db.pool, "first").await;
    let first_ended = support::eventually(Duration::from_secs(5), || {
        runs.all().iter().find(|r| r.key == "first").and_then(|r| r.ended)
    })
    .await;
    rt.trigger("second").await.expect("trigger");
    let second = support::eventually(Duration::from_secs(10), || {
        runs.all().into_iter().find(|r| r.key == "second" && r.ended.is_some())
    })
    .await;
    assert!(
        second.started.duration_since(first_ended) < Duration::from_secs(3),
        "the second key waited for the first's release: it started {:?} after the first's body ended",
        second.started.duration_since(first_ended)
    );
    let first = store.get("first").await.expect("read the row").expect("a row");
    assert!(
        first.is_held(),
        "the first run's release has not gone through: {first:?}"
    );
    drop(lock);
    let first = support::until_free(&store, "first").await;
    assert_eq!(
        runs.all().iter().filter(|r| r.key == "first").count(),
        1,
        "the first key did not run again under its unreleased lease"
    );
    assert_eq!(first.holder, "r1");
    rt.shutdown().await;
}

/// A zero limit is refused at start, naming the setting.
#[tokio::test]
async fn a_zero_limit_is_refused() {
    let db = support::db().await;
    let err = Runtime::builder(db.pool.clone())
        .max_concurrent_runs(0)
        .start()
        .await
        .expect_err("zero is not a limit");
    assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
    assert!(err.to_string().contains("max_concurrent_runs"), "{err}");
}

/// The largest number of `runs` in progress at one instant.
fn most_at_once(runs: &[support::RunRecord]) -> usize {
    let mut edges: Vec<(tokio::time::Instant, i32)> = Vec::new();
    for run in runs {
        edges.push((run.started, 1));
        edges.push((run.ended.expect("every run ended"), -1));
    }
    // At one instant an end comes before a start: back-to-back runs do not overlap.
    edges.sort_by_key(|&(at, delta)| (at, delta));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, delta) in edges {
        now += delta;
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

/// One replica with room for 8 runs, `report` limited to 2 of them: six
/// reports triggered at once all run, never more than two at a time; two
/// billing keys triggered while four reports wait start at once instead of
/// waiting behind them; every report's place is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_job_runs_at_most_its_limit_here_and_the_other_slots_go_to_other_jobs() {
    let db = support::db().await;
    let runs = Runs::default();
    let settings = quick(Schedule::Manual, Duration::from_secs(30));
    let keys: Vec<String> = (0..6)
        .map(|k| format!("report:{k}"))
        .chain((0..2).map(|k| format!("billing:{k}")))
        .collect();
    let mut builder = Runtime::builder(db.pool_with(2).await)
        .holder("r1")
        .poll_interval(Duration::from_millis(200))
        .max_concurrent_runs(8)
        .max_concurrent_runs_of("report", 2);
    for key in &keys {
        builder = builder.register(job(key, settings.clone(), runs.body(Duration::from_millis(700))));
    }
    let rt = builder.start().await.expect("runtime starts");
    let (reports, billing) = keys.split_at(6);
    for key in reports {
        rt.trigger(key).await.expect("trigger");
    }
    // Two reports run, four wait: health shows the name at its limit.
    let limited = support::eventually(Duration::from_secs(5), || {
        let limited = rt.health().limited;
        (limited[0].running == 2).then_some(limited)
    })
    .await;
    assert_eq!(
        limited.iter().map(|l| (l.name.as_str(), l.limit)).collect::<Vec<_>>(),
        [("report", 2)],
        "only the limited name is listed"
    );
    // Keys of another job, due while reports are held back, take the free slots.
    for key in billing {
        rt.trigger(key).await.expect("trigger");
    }
    let all = support::eventually(Duration::from_secs(15), || {
        let all = runs.all();
        (all.len() == keys.len() && all.iter().all(|r| r.ended.is_some())).then_some(all)
    })
    .await;
    let reports: Vec<_> = all.iter().filter(|r| r.key.starts_with("report:")).cloned().collect();
    let mut ran: Vec<&str> = reports.iter().map(|r| r.key.as_str()).collect();
    ran.sort_unstable();
    assert_eq!(
        ran,
        ["report:0", "report:1", "report:2", "report:3", "report:4", "report:5"]
    );
    assert_eq!(
        most_at_once(&reports),
        2,
        "at most two reports at once, and the limit is used"
    );
    let mut report_starts: Vec<_> = reports.iter().map(|r| r.started).collect();
    report_starts.sort_unstable();
    for billing in all.iter().filter(|r| r.key.starts_with("billing:")) {
        assert!(
            billing.started < report_starts[2],
            "{} waited behind the held-back reports: {all:?}",
            billing.key
        );
    }
    // A run's place comes back as its body returns, before its release is done.
    support::eventually(Duration::from_secs(5), || {
        (rt.health().limited[0].running == 0).then_some(())
    })
    .await;
    rt.shutdown().await;
}

/// A limit per name of 0, on a name nothing registered, or given twice is
/// refused at start, naming the value and what to do.
#[tokio::test]
async fn a_limit_per_name_that_is_zero_unknown_or_given_twice_is_refused() {
    let db = support::db().await;
    let refused = |name: &'static str, runs: usize, twice: bool| {
        let pool = db.pool.clone();
        async move {
            let mut builder = Runtime::builder(pool)
                .register(job(
                    "report:0",
                    quick(Schedule::Manual, Duration::from_secs(30)),
                    |_| async { Ok(()) },
                ))
                .max_concurrent_runs_of(name, runs);
            if twice {
                builder = builder.max_concurrent_runs_of(name, runs);
            }
            let err = builder.start().await.expect_err("refused");
            assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
            err.to_string()
        }
    };
    let zero = refused("report", 0, false).await;
    assert!(
        zero.contains("max_concurrent_runs_of") && zero.contains("at least 1"),
        "{zero}"
    );
    let unknown = refused("reprot", 2, false).await;
    assert!(
        unknown.contains("reprot") && unknown.contains("registered: report"),
        "names the value and what is registered: {unknown}"
    );
    let twice = refused("report", 2, true).await;
    assert!(twice.contains("one limit"), "{twice}");
}
