//! Runtime scenarios: replicas, schedules, faults, shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leasehold::{CancelReason, Error, FenceGuard, JobSettings, Runtime, Schedule, store::LeaseStore};
use tokio::time::Instant;

use crate::support::{self, Runs, eventually, job, quick, replica};

/// Three replicas, a job every second that takes 10 ms, for ~12 s: it runs
/// once per slot across the fleet (not three times), and no two runs of the
/// key ever overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_run_a_job_once_per_slot() {
    let db = support::db().await;
    let runs = Runs::default();
    let every_second = quick(Schedule::every(Duration::from_secs(1)), Duration::from_secs(3));
    let mut replicas = Vec::new();
    for r in 0..3 {
        let job = job("tick", every_second.clone(), runs.body(Duration::from_millis(10)));
        replicas.push(replica(&db, &format!("r{r}"), 3, vec![job]).await);
    }
    let window = Instant::now();
    tokio::time::sleep(Duration::from_secs(12)).await;
    let window_end = Instant::now();
    let elapsed = (window_end - window).as_secs_f64();
    for r in replicas {
        r.shutdown().await;
    }
    let mut all = runs.all();
    all.sort_by_key(|r| r.started);
    // Count the slots that ran inside the window. (A run interrupted by the
    // shutdown at the end is run again by the replica still up: the slot
    // was not done. That is right, but outside the window.)
    let in_window = all
        .iter()
        .filter(|r| r.started < window_end && r.cancelled.is_none())
        .count();
    let slots = elapsed.floor() as usize;
    assert!(
        in_window + 1 >= slots && in_window <= slots + 1,
        "{in_window} runs in {elapsed:.1}s ({slots} slots): {:?}",
        all.iter().map(|r| (&r.holder, r.fence)).collect::<Vec<_>>()
    );
    let mut per_replica = std::collections::BTreeMap::<&str, usize>::new();
    for r in &all {
        *per_replica.entry(r.holder.as_str()).or_default() += 1;
    }
    println!(
        "measured: {in_window} runs in {elapsed:.1}s = {slots} slots with 3 replicas; per replica {per_replica:?}"
    );
    for pair in all.windows(2) {
        let first_end = pair[0].ended.expect("every run ended");
        assert!(pair[1].started >= first_end, "runs overlap: {pair:?}");
        assert!(
            pair[1].fence > pair[0].fence,
            "fences must grow run after run: {pair:?}"
        );
    }
}

/// A replica cut off from the database (no heartbeat, no release) cancels
/// its run (reason deadline) *before* another replica can claim the lease
/// after it expires; the new run has a greater
/// fence; and a late write with the stalled run's guard is rejected as
/// stale and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_holder_stops_before_takeover_and_its_late_writes_are_rejected() {
    let db = support::db().await;
    support::accounts(&db.pool).await;

    let runs = Runs::default();
    let guards: Arc<std::sync::Mutex<Vec<FenceGuard>>> = Default::default();
    let pool = db.pool.clone();
    let make_job = || {
        let (runs, guards, pool) = (runs.clone(), guards.clone(), pool.clone());
        job(
            "settle",
            quick(Schedule::Manual, Duration::from_secs(2)),
            move |guard: FenceGuard| {
                let (runs, guards, pool) = (runs.clone(), guards.clone(), pool.clone());
                async move {
                    guards.lock().unwrap().push(guard.clone());
                    let i = runs.start(&guard);
                    support::set_balance(&guard, &pool, 1, guard.fence()).await?;
                    guard.cancelled().await;
                    runs.cancelled(i, guard.reason());
                    runs.end(i);
                    Err("cancelled".into())
                }
            },
        )
    };
    let a = replica(&db, "a", 2, vec![make_job()]).await;
    a.trigger("settle").await.unwrap();
    let first = runs.wait_started(1, Duration::from_secs(10)).await.remove(0);
    assert_eq!(first.holder, "a");

    let b = replica(&db, "b", 2, vec![make_job()]).await;
    let partitioned_at = Instant::now();
    a.faults().partition(true);
    let all = runs.wait_started(2, Duration::from_secs(15)).await;
    let (stalled, takeover) = (&all[0], &all[1]);
    let (cancelled_at, reason) = stalled.cancelled.expect("the stalled run was cancelled");
    assert_eq!(reason, CancelReason::Deadline);
    assert!(
        cancelled_at < takeover.started,
        "the stalled run must stop before the takeover starts"
    );
    println!(
        "measured: lease 2 s; partition -> cancellation {:?}, partition -> takeover {:?}, margin {:?}",
        cancelled_at - partitioned_at,
        takeover.started - partitioned_at,
        takeover.started - cancelled_at
    );
    assert_eq!(takeover.holder, "b");
    assert!(takeover.fence > stalled.fence);

    // The takeover's first write lands; then the stalled run's guard is
    // used late (a paused process waking up).
    let takeover_fence = takeover.fence;
    let pool = db.pool.clone();
    loop {
        let last: i64 = sqlx::query_scalar("SELECT last_fence FROM account WHERE id = 1")
            .fetch_one(&pool)
            .await
            .unwrap();
        if last == takeover_fence {
            break;
        }
        assert!(
            takeover.started.elapsed() < Duration::from_secs(10),
            "the takeover never wrote"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stale = guards.lock().unwrap()[0].clone();
    let err = support::set_balance(&stale, &db.pool, 1, -1_i64).await.unwrap_err();
    assert!(
        matches!(err, Error::StaleFence { fence, newer, .. } if fence == stalled.fence && newer == takeover.fence),
        "{err:?}"
    );
    // Fenced transactions: once the new run has committed one on the key,
    // the stale run's transaction is refused.
    let newer = guards.lock().unwrap()[1].clone();
    newer.begin_fenced(&db.pool).await.unwrap().commit().await.unwrap();
    let err = stale.begin_fenced(&db.pool).await.unwrap_err();
    assert!(matches!(err, Error::StaleFence { .. }), "{err:?}");
    let (balance, last_fence) = support::balance(&db.pool, 1).await;
    assert_eq!(
        (balance, last_fence),
        (takeover.fence, takeover.fence),
        "the stale writes changed nothing"
    );

    a.faults().partition(false);
    b.shutdown().await;
    a.shutdown().await;
}

/// Replica `a` in connection `mode` on a pool of 2, polling every `poll`,
/// runs the manual job `long` (lease `lease`, `work` long) once triggered,
/// after its liveness session registered: its run is stamped with it, so
/// it is stopped unless the registration is renewed in time after its
/// session ends. Returns the replica and its runs, the run started.
async fn a_stamped_long_run(
    db: &support::TestDb,
    mode: leasehold::runtime::Connections,
    poll: Duration,
    lease: Duration,
    work: Duration,
) -> (Runtime, Runs) {
    let runs = Runs::default();
    let rt = support::replica_in(
        mode,
        db.pool_with(2).await,
        "a",
        poll,
        vec![job("long", quick(Schedule::Manual, lease), runs.body(work))],
    )
    .await;
    eventually(Duration::from_secs(10), || rt.health().listening.then_some(())).await;
    rt.trigger("long").await.unwrap();
    runs.wait_started(1, Duration::from_secs(10)).await;
    let stamped: bool = sqlx::query_scalar("SELECT owner IS NOT NULL FROM leasehold_lease WHERE key = 'long'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(stamped, "the run is vouched for by the runtime's liveness session");
    (rt, runs)
}

/// The run of [`a_stamped_long_run`], once it ended.
async fn ended_run(runs: &Runs) -> support::RunRecord {
    eventually(Duration::from_secs(10), || {
        runs.all()[0].ended.map(|_| runs.all().remove(0))
    })
    .await
}

/// Killing every connection of the runtime's statement pool (and its
/// listener's) three times mid-run does not cost the run its lease:
/// heartbeats reconnect and the run completes. On connections of its own,
/// idle connections are not pinged before use, so this also proves that a
/// renewal finding its connection gone retries at once on another.
async fn terminated_backends_do_not_cost_the_lease(mode: leasehold::runtime::Connections) {
    let db = support::db().await;
    let (rt, runs) = a_stamped_long_run(
        &db,
        mode,
        Duration::from_millis(100),
        Duration::from_secs(2),
        Duration::from_secs(4),
    )
    .await;
    let mut killed_total = 0;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        killed_total += support::terminate_other_backends(&db.pool).await;
    }
    // (The pool reconnects lazily, so a later round may find nothing to kill.)
    assert!(killed_total >= 1, "the runtime's connections were terminated");
    let run = ended_run(&runs).await;
    assert!(run.cancelled.is_none(), "the run kept its lease: {run:?}");
    rt.shutdown().await;
}
support::in_both_connection_modes!(terminated_backends_do_not_cost_the_lease);

/// Every connection of a quiet runtime is terminated at once mid-run (a
/// DBA's `pg_terminate_backend`, a pooler restart): its liveness session
/// registers again, on a statement pool whose idle connections are all
/// dead, and vouches for the run again within the grace, so the run goes
/// on. Nothing else touches the pool first (a long poll, a long lease):
/// the listener's own statements meet the dead connections, and each is
/// sent again at once on a fresh one.
async fn a_quiet_runtimes_connections_terminated_at_once_cost_no_run(mode: leasehold::runtime::Connections) {
    let db = support::db().await;
    let (rt, runs) = a_stamped_long_run(
        &db,
        mode,
        Duration::from_secs(60),
        Duration::from_secs(60),
        Duration::from_secs(3),
    )
    .await;
    // The runtime's statements since the trigger are done: its
    // connections wait idle in its pool.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed = support::terminate_other_backends(&db.pool).await;
    assert!(
        killed >= 2,
        "the listener's and the pool's connections were terminated: {killed}"
    );
    let run = ended_run(&runs).await;
    assert!(run.cancelled.is_none(), "the run was vouched for again: {run:?}");
    rt.shutdown().await;
}
support::in_both_connection_modes!(a_quiet_runtimes_connections_terminated_at_once_cost_no_run);

/// Shutdown releases the lease at once: another replica runs the job long
/// before the (long) lease would have expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_so_another_replica_takes_over_at_once() {
    let db = support::db().await;
    let runs = Runs::default();
    let settings = quick(Schedule::Manual, Duration::from_secs(60));
    let a = replica(
        &db,
        "a",
        2,
        vec![job("report", settings.clone(), runs.body(Duration::from_secs(3600)))],
    )
    .await;
    a.trigger("report").await.unwrap();
    runs.wait_started(1, Duration::from_secs(10)).await;
    let b = replica(
        &db,
        "b",
        2,
        vec![job("report", settings, runs.body(Duration::from_secs(3600)))],
    )
    .await;

    let stopped = Instant::now();
    let report = a.shutdown().await;
    assert_eq!((report.runs_cancelled, report.leases_released), (1, 1), "{report:?}");
    let all = runs.wait_started(2, Duration::from_secs(20)).await;
    assert_eq!(all[0].cancelled.map(|c| c.1), Some(CancelReason::Shutdown));
    assert_eq!(all[1].holder, "b");
    assert!(all[1].fence > all[0].fence);
    assert!(
        all[1].started.duration_since(stopped) < Duration::from_secs(20),
        "took over without waiting out the 60 s lease"
    );
    b.shutdown().await;
}

/// The due time lives in the database: replicas restarted more often than
/// the job's period still run it once per slot. (A run that a restart's
/// shutdown interrupts is not done: its slot runs again in the next
/// replica, as documented — so the upper bound counts the runs that were
/// not cancelled for shutdown.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_do_not_starve_long_periods() {
    let db = support::db().await;
    let runs = Runs::default();
    let settings = quick(Schedule::every(Duration::from_secs(4)), Duration::from_secs(2));
    let window = Instant::now();
    let mut generation = 0;
    while window.elapsed() < Duration::from_secs(13) {
        let rt = replica(
            &db,
            &format!("gen{generation}"),
            2,
            vec![job("hourly", settings.clone(), runs.body(Duration::from_millis(10)))],
        )
        .await;
        tokio::time::sleep(Duration::from_millis(1200)).await;
        rt.shutdown().await;
        generation += 1;
    }
    let slots = (window.elapsed().as_secs_f64() / 4.0).floor() as usize;
    let all = runs.all();
    let done = all
        .iter()
        .filter(|r| r.cancelled.map(|c| c.1) != Some(leasehold::CancelReason::Shutdown))
        .count();
    assert!(
        done + 1 >= slots && done <= slots + 1 && !all.is_empty(),
        "{done} runs done ({} started) for {slots} slots over {generation} restarts: {:?}",
        all.len(),
        all.iter()
            .map(|r| (&r.holder, r.fence, r.started_unix, r.cancelled.map(|c| c.1)))
            .collect::<Vec<_>>()
    );
}

/// 50 long jobs at once on a 2-connection pool: all run together, the
/// heartbeat keeps every lease, and a job's own query still gets a
/// connection while they run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_long_jobs_share_a_two_connection_pool() {
    let db = support::db().await;
    let runs = Runs::default();
    let pool = db.pool_with(2).await;
    let queried = Arc::new(AtomicUsize::new(0));
    let settings = quick(Schedule::Manual, Duration::from_secs(1)).heartbeat(Duration::from_millis(300));
    let mut builder = Runtime::builder(pool.clone())
        .holder("a")
        .poll_interval(Duration::from_millis(200));
    for i in 0..50 {
        let (runs, pool, queried) = (runs.clone(), pool.clone(), queried.clone());
        builder = builder.register(job(&format!("long:{i}"), settings.clone(), move |guard: FenceGuard| {
            let (runs, pool, queried) = (runs.clone(), pool.clone(), queried.clone());
            async move {
                let i = runs.start(&guard);
                tokio::time::sleep(Duration::from_millis(500)).await;
                let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&pool).await?;
                queried.fetch_add(one as usize, Ordering::SeqCst);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(3)) => {}
                    _ = guard.cancelled() => runs.cancelled(i, guard.reason()),
                }
                runs.end(i);
                Ok(())
            }
        }));
    }
    let rt = builder.start().await.unwrap();
    support::reset_statement_stats(&db.pool).await;
    for i in 0..50 {
        rt.trigger(&format!("long:{i}")).await.unwrap();
    }
    let all = runs.wait_started(50, Duration::from_secs(20)).await;
    let last_start = all.iter().map(|r| r.started).max().unwrap();
    let first_end = eventually(Duration::from_secs(30), || {
        let all = runs.all();
        all.iter()
            .all(|r| r.ended.is_some())
            .then(|| all.iter().filter_map(|r| r.ended).min().unwrap())
    })
    .await;
    assert!(last_start < first_end, "all 50 ran at the same time");
    assert_eq!(queried.load(Ordering::SeqCst), 50, "every job's own query completed");
    assert!(runs.all().iter().all(|r| r.cancelled.is_none()), "no lease was lost");
    let beats = support::statement_calls(&db.pool, "unnest($2::text[]").await;
    let window = first_end - last_start;
    println!("measured: {beats} heartbeat statements for 50 leases over {window:?} of 300 ms ticks (+ the ramp-up)");
    assert!(beats >= 5, "heartbeats ran ({beats})");
    rt.shutdown().await;
}

/// A panicking job and a failing job do not take the runtime down; the
/// failing one is retried with a growing backoff, not hammered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panics_and_failures_are_contained_and_backed_off() {
    let db = support::db().await;
    let attempts: Arc<std::sync::Mutex<Vec<Instant>>> = Default::default();
    let panics = Arc::new(AtomicUsize::new(0));
    let healthy = Runs::default();
    let failing = {
        let attempts = attempts.clone();
        job(
            "failing",
            quick(Schedule::Manual, Duration::from_secs(2))
                .retry(Duration::from_millis(200), Duration::from_millis(800)),
            move |_| {
                let attempts = attempts.clone();
                async move {
                    attempts.lock().unwrap().push(Instant::now());
                    Err("downstream refused".into())
                }
            },
        )
    };
    let panicking = {
        let panics = panics.clone();
        job(
            "panicking",
            quick(Schedule::Manual, Duration::from_secs(2)),
            move |_| {
                let panics = panics.clone();
                async move {
                    panics.fetch_add(1, Ordering::SeqCst);
                    panic!("bug in a job");
                }
            },
        )
    };
    let steady = job(
        "steady",
        quick(Schedule::every(Duration::from_secs(1)), Duration::from_secs(2)),
        healthy.body(Duration::from_millis(5)),
    );
    let rt = replica(&db, "a", 2, vec![failing, panicking, steady]).await;
    rt.trigger("failing").await.unwrap();
    rt.trigger("panicking").await.unwrap();
    // Within 3.5 s: the panic, two runs of the other job, and four attempts
    // of the failing one (200 ms, 400 ms, then the 800 ms cap between them).
    support::holds_within(Duration::from_millis(3500), || {
        panics.load(Ordering::SeqCst) >= 1 && healthy.all().len() >= 2 && attempts.lock().unwrap().len() >= 4
    })
    .await;
    assert!(panics.load(Ordering::SeqCst) >= 1);
    assert!(healthy.all().len() >= 2, "other jobs kept running");
    assert!(rt.health().healthy, "{:?}", rt.health());
    let attempts = attempts.lock().unwrap().clone();
    assert!(
        (4..=8).contains(&attempts.len()),
        "{} attempts in 3.5 s",
        attempts.len()
    );
    let gaps: Vec<Duration> = attempts.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.iter().all(|g| *g >= Duration::from_millis(190)),
        "backoff respected: {gaps:?}"
    );
    assert!(
        gaps.last().unwrap() >= &Duration::from_millis(700),
        "backoff grew to its cap: {gaps:?}"
    );
    rt.shutdown().await;
}

/// Bad settings and duplicate keys are refused before anything starts (the
/// pool here cannot even reach a server).
#[tokio::test]
async fn bad_settings_are_refused_at_start() {
    let noop = |_: FenceGuard| async { Ok(()) };
    let cases: Vec<(Vec<support::ScriptedJob>, &str)> = vec![
        (
            vec![job("a", JobSettings::new(Schedule::Manual).lease(Duration::ZERO), noop)],
            "lease duration",
        ),
        (
            vec![job(
                "a",
                JobSettings::new(Schedule::Manual).heartbeat(Duration::from_secs(30)),
                noop,
            )],
            "heartbeat interval",
        ),
        (
            vec![job(
                "a",
                JobSettings::new(Schedule::Manual).margin(Duration::from_secs(50)),
                noop,
            )],
            "deadline margin",
        ),
        // A margin that cannot cover ρ = 1 % at a one-minute lease.
        (
            vec![job(
                "a",
                JobSettings::new(Schedule::Manual).margin(Duration::from_secs(1)),
                noop,
            )],
            "deadline margin 1s: must be at least 2ρ × lease = 1s200ms",
        ),
        (
            vec![job("a", JobSettings::new(Schedule::every(Duration::ZERO)), noop)],
            "schedule period",
        ),
        (
            vec![
                job("a", JobSettings::new(Schedule::Manual), noop),
                job("a", JobSettings::new(Schedule::Manual), noop),
            ],
            "registered twice",
        ),
        (vec![job("", JobSettings::new(Schedule::Manual), noop)], "lease key"),
    ];
    for (jobs, expect) in cases {
        let mut builder = Runtime::builder(support::unreachable_pool());
        for j in jobs {
            builder = builder.register(j);
        }
        let err = builder.start().await.expect_err(expect);
        assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
        assert!(err.to_string().contains(expect), "{err} should mention {expect}");
    }
    assert!(Schedule::cron("61 * * * *").is_err());
}

/// With automatic migration off, a database without the schema fails at
/// start with an error naming the fix.
#[tokio::test]
async fn missing_schema_without_auto_migrate_is_a_clear_error() {
    let db = leasehold_testkit::test_db().await;
    let err = Runtime::builder(db.pool.clone())
        .migrate(false)
        .register(job("a", JobSettings::new(Schedule::Manual), |_| async { Ok(()) }))
        .start()
        .await
        .expect_err("no schema");
    assert!(matches!(err, Error::SchemaMissing), "{err:?}");
}

/// `trigger` runs a job once across the fleet, under its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_runs_once_across_the_fleet() {
    let db = support::db().await;
    let runs = Runs::default();
    let settings = quick(Schedule::Manual, Duration::from_secs(2));
    let a = replica(
        &db,
        "a",
        2,
        vec![job("adhoc", settings.clone(), runs.body(Duration::from_millis(10)))],
    )
    .await;
    let b = replica(
        &db,
        "b",
        2,
        vec![job("adhoc", settings, runs.body(Duration::from_millis(10)))],
    )
    .await;
    b.trigger("adhoc").await.unwrap();
    runs.wait_started(1, Duration::from_secs(10)).await;
    // The run released, then two polls of each replica: a second run for
    // the one trigger would have been claimed by then.
    support::until_free(&LeaseStore::new(db.pool.clone()), "adhoc").await;
    for rt in [&a, &b] {
        support::wait_polls(rt, 2).await;
    }
    assert_eq!(runs.all().len(), 1, "one run for one trigger: {:?}", runs.all());
    assert!(matches!(a.trigger("nope").await, Err(Error::UnknownJob(_))));
    a.shutdown().await;
    b.shutdown().await;
}

/// A database outage shorter than the lease is survived; a longer one stops
/// the run at its local deadline, and the job runs again under a fresh
/// fence once the server is back. (A cluster of its own: it is stopped.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_outages_short_ones_are_survived_long_ones_stop_the_run() {
    let cluster = tokio::task::spawn_blocking(support::PgCluster::start)
        .await
        .unwrap()
        .expect("own cluster");
    let cluster = Arc::new(cluster);
    let db = leasehold_testkit::create_db(&cluster.options()).await;
    leasehold::migrate(&db.pool).await.unwrap();
    let runs = Runs::default();
    let rt = replica(
        &db,
        "a",
        2,
        vec![job(
            "etl",
            quick(Schedule::Manual, Duration::from_secs(3)),
            runs.body(Duration::from_secs(3600)),
        )],
    )
    .await;
    rt.trigger("etl").await.unwrap();
    runs.wait_started(1, Duration::from_secs(10)).await;

    let stop = |immediate| {
        let c = cluster.clone();
        tokio::task::spawn_blocking(move || c.stop(immediate).expect("stop"))
    };
    let start = || {
        let c = cluster.clone();
        tokio::task::spawn_blocking(move || c.start_server().expect("start"))
    };

    // Shorter than the lease (3 s): the run survives.
    stop(false).await.unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    start().await.unwrap();
    // Two heartbeat ticks answered after the restart: a lease the outage
    // had cost would be reported lost by now.
    support::wait_heartbeats(&rt, 2).await;
    assert!(
        runs.all()[0].cancelled.is_none(),
        "a short outage must not cost the lease: {:?}",
        runs.all()
    );

    // Longer than the lease: cancelled by the local deadline while the
    // server is still down, then run again with a fresh fence.
    stop(true).await.unwrap();
    let cancelled = eventually(Duration::from_secs(6), || runs.all()[0].cancelled).await;
    assert_eq!(cancelled.1, CancelReason::Deadline);
    tokio::time::sleep(Duration::from_secs(2)).await;
    start().await.unwrap();
    let all = runs.wait_started(2, Duration::from_secs(20)).await;
    assert!(all[1].fence > all[0].fence);
    rt.shutdown().await;
}

/// A fleet that was down for many slots runs the job once on return, not
/// once per missed slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missed_slots_run_once_on_return() {
    let db = support::db().await;
    let runs = Runs::default();
    let settings = quick(Schedule::every(Duration::from_secs(60)), Duration::from_secs(2));
    let first = replica(
        &db,
        "old",
        2,
        vec![job("minutely", settings.clone(), runs.body(Duration::from_millis(5)))],
    )
    .await;
    first.shutdown().await;
    // The fleet was down for ten slots.
    let ten_minutes_ago = LeaseStore::new(db.pool.clone()).server_now().await.unwrap() - chrono::Duration::minutes(10);
    support::owe_slot(&db.pool, "minutely", ten_minutes_ago).await;
    let back = replica(
        &db,
        "new",
        2,
        vec![job("minutely", settings, runs.body(Duration::from_millis(5)))],
    )
    .await;
    runs.wait_started(1, Duration::from_secs(10)).await;
    // The catch-up run released, then two polls: a run for another missed
    // slot would have been claimed by then.
    support::until_free(&LeaseStore::new(db.pool.clone()), "minutely").await;
    support::wait_polls(&back, 2).await;
    back.shutdown().await;
    // One catch-up run (two only if a new minute began in this window).
    let n = runs.all().len();
    assert!((1..=2).contains(&n), "{n} runs after ten missed slots");
    let due: bool =
        sqlx::query_scalar("SELECT next_due_at > clock_timestamp() FROM leasehold_lease WHERE key = 'minutely'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(due, "the next run is due in the future, at the next slot");
}

/// A key registered at start but never claimed reads as never run; once a
/// run took place (and was released) it no longer does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_key_reads_as_never_run_until_its_first_run() {
    let db = support::db().await;
    let runs = Runs::default();
    let rt = replica(
        &db,
        "a",
        2,
        vec![job(
            "registered",
            quick(Schedule::Manual, Duration::from_secs(2)),
            runs.body(Duration::from_millis(10)),
        )],
    )
    .await;
    let store = leasehold::store::LeaseStore::new(db.pool.clone());
    assert!(store.get("registered").await.unwrap().expect("row").never_run());
    rt.trigger("registered").await.unwrap();
    eventually(Duration::from_secs(10), || runs.all().first().and_then(|r| r.ended)).await;
    rt.shutdown().await;
    assert!(!store.get("registered").await.unwrap().expect("row").never_run());
}

/// At the README's production log filter, 100 successful runs print at
/// most one line each, all INFO, and nothing at WARN or above.
#[tokio::test]
async fn successful_runs_log_one_info_line_each_at_the_production_filter() {
    let filter = support::PRODUCTION_LOG_FILTER;
    let readme = include_str!("../../README.md");
    assert!(
        readme.contains(&format!("EnvFilter::new(\"{filter}\")")),
        "the README shows {filter:?}"
    );
    let db = support::db().await;
    let runs = Runs::default();
    let jobs = (0..100)
        .map(|i| {
            job(
                &format!("tick:{i}"),
                quick(Schedule::Manual, Duration::from_secs(10)),
                runs.body(Duration::ZERO),
            )
        })
        .collect();
    let rt = replica(&db, "r1", 4, jobs).await;
    let (logs, _capture) = support::LogCounts::capture(filter);

    for i in 0..100 {
        rt.trigger(&format!("tick:{i}")).await.unwrap();
    }
    support::eventually_async(Duration::from_secs(30), || async {
        let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM leasehold_run WHERE outcome = 'succeeded'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
        (recorded == 100).then_some(())
    })
    .await;
    let (info, warn, error) = (
        logs.at(tracing::Level::INFO),
        logs.at(tracing::Level::WARN),
        logs.at(tracing::Level::ERROR),
    );
    rt.shutdown().await;

    assert_eq!(runs.all().len(), 100);
    let lines = logs.messages(tracing::Level::INFO);
    assert!(info <= 100, "{info} INFO lines for 100 runs: {lines:?}");
    assert_eq!(lines.iter().filter(|m| *m == "run ended").count(), 100, "{lines:?}");
    assert_eq!((warn, error), (0, 0), "{:?}", logs.messages(tracing::Level::WARN));
}

/// At the same filter, a run whose lease another replica took is one ERROR
/// line, and no WARN.
#[tokio::test]
async fn a_lost_lease_logs_one_error_line() {
    let db = support::db().await;
    let runs = Runs::default();
    // A 6 s lease (each renewal may take its 2 s tick) and a 2 s grace: a
    // loaded test machine can stretch a renewal past a 1 s tick, or the
    // cancelled body's return past `quick`'s 300 ms grace, and each is a
    // WARN of its own, not this scenario's.
    let billing = job(
        "billing",
        quick(Schedule::Manual, Duration::from_secs(6)).grace(Duration::from_secs(2)),
        runs.body(Duration::from_secs(60)),
    );
    let rt = replica(&db, "a", 2, vec![billing]).await;
    let (logs, _capture) = support::LogCounts::capture(support::PRODUCTION_LOG_FILTER);
    rt.trigger("billing").await.unwrap();
    runs.wait_started(1, Duration::from_secs(10)).await;

    // Another replica takes the key over once the lease has expired.
    support::expire_now(&db.pool, "billing").await;
    let claim = LeaseStore::new(db.pool.clone())
        .claim("billing", "b", Duration::from_secs(30))
        .await
        .unwrap();
    assert!(matches!(claim, leasehold::store::Claim::Acquired(_)), "{claim:?}");
    eventually(Duration::from_secs(10), || runs.all()[0].ended.map(drop)).await;
    rt.shutdown().await;

    assert_eq!(
        runs.all()[0].cancelled.map(|(_, reason)| reason),
        Some(CancelReason::Stolen)
    );
    let errors = logs.messages(tracing::Level::ERROR);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("lease lost"), "{errors:?}");
    assert_eq!(
        logs.at(tracing::Level::WARN),
        0,
        "{:?}",
        logs.messages(tracing::Level::WARN)
    );
}

/// The log counts above see a line even when another thread, with no
/// subscriber of its own, reached that line's callsite first — as a
/// concurrent test's replica does. Without the global baseline in
/// `support::scoped_subscriber`, `tracing` would cache "never" for the
/// callsite and the capture would count nothing.
#[test]
fn a_capture_counts_a_line_another_thread_reached_first() {
    fn lease_lost_line() {
        tracing::error!(target: "leasehold::tenure", "lease lost; cancelling the run");
    }
    let (logs, _capture) = support::LogCounts::capture(support::PRODUCTION_LOG_FILTER);
    std::thread::spawn(lease_lost_line)
        .join()
        .expect("the other thread logs");
    lease_lost_line();
    assert_eq!(logs.at(tracing::Level::ERROR), 1);
}

/// Health reasons count in the singular and the plural.
#[test]
fn degraded_reasons_say_one_in_the_singular() {
    use leasehold::runtime::Degraded;
    let said = |d: Degraded| d.to_string();
    let claims = |consecutive| Degraded::ClaimsFailing {
        consecutive,
        last_error: "timeout".into(),
    };
    assert_eq!(said(claims(1)), "1 claim failed; last: timeout");
    assert_eq!(said(claims(3)), "3 claims in a row failed; last: timeout");
    let heartbeats = |consecutive| Degraded::HeartbeatsFailing {
        consecutive,
        last_error: "timeout".into(),
    };
    assert!(said(heartbeats(1)).starts_with("1 heartbeat failed;"));
    assert!(said(heartbeats(2)).starts_with("2 heartbeats in a row failed;"));
    let lost = |count| Degraded::RunsLostAtDeadline {
        count,
        ago: Duration::from_secs(4),
    };
    assert!(
        said(lost(1)).starts_with("1 run stopped at its deadline"),
        "{}",
        said(lost(1))
    );
    assert!(said(lost(2)).starts_with("2 runs stopped at their deadline"));
    assert!(said(Degraded::PoisonedConnections { closed: 1 }).starts_with("1 pooled connection was found"));
    assert!(said(Degraded::PoisonedConnections { closed: 2 }).starts_with("2 pooled connections were found"));
}

/// A pool of its own of 0 connections, or more than the runtime could
/// use, is refused at start with an error naming the setting and the way
/// out, before anything connects or runs.
#[tokio::test]
async fn an_own_pool_size_out_of_range_is_refused_at_start() {
    let db = support::db().await;
    for size in [0, 33] {
        let err = Runtime::builder(db.pool.clone())
            .connections(leasehold::runtime::Connections::Owned(size))
            .start()
            .await
            .expect_err("out of range");
        assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
        let said = err.to_string();
        assert!(
            said.contains("connections")
                && said.contains(&format!("Owned({size})"))
                && said.contains("SharedWithService"),
            "{said}"
        );
    }
}
