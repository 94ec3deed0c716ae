//! A lease row locked by an outside transaction cannot wedge the heartbeat,
//! a run stopped at its deadline counts once in health, and no run — not
//! even one winding down within its grace — outlives its deadline.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{
    CancelReason, Schedule,
    runtime::{Connections, Degraded},
};
use tokio::time::Instant;

use crate::support::{self, Runs, eventually, in_both_connection_modes, job, quick};

/// Lease 2 s; an outside transaction holds `SELECT … FOR UPDATE` on the
/// lease row (at most 6 s). The run stops at its local deadline (before the
/// lease can expire), the runtime reports degraded during the stall (within
/// those 6 s), and healthy again shortly after the lock is released.
async fn a_locked_lease_row_stops_the_run_at_its_deadline_and_heals_after(mode: Connections) {
    let db = support::db().await;
    let runs = Runs::default();
    let rt = support::replica_in(
        mode,
        db.pool_with(3).await,
        "r0",
        Duration::from_millis(100),
        vec![job(
            "locked",
            quick(Schedule::Manual, Duration::from_secs(2)),
            runs.body(Duration::from_secs(60)),
        )],
    )
    .await;
    rt.trigger("locked").await.unwrap();
    runs.wait_started(1, Duration::from_secs(5)).await;
    let outside = support::lock_lease_row(&db.pool, "locked").await;
    let locked_at = Instant::now();
    let (stopped_at, reason) = eventually(Duration::from_secs(5), || runs.all()[0].cancelled).await;
    assert_eq!(reason, CancelReason::Deadline);
    let stall = Duration::from_secs(6).saturating_sub(locked_at.elapsed());
    let degraded_seen = support::holds_within(stall, || !rt.health().healthy).await;
    outside.rollback().await.unwrap();
    let released_at = Instant::now();
    let healed = eventually(Duration::from_secs(10), || rt.health().healthy.then(Instant::now)).await;
    println!(
        "measured: lock -> run stopped {:?} (reason deadline); degraded during the stall: {degraded_seen}; \
         lock released -> healthy {:?}",
        stopped_at - locked_at,
        healed - released_at
    );
    assert!(
        stopped_at - locked_at < Duration::from_secs(2),
        "stopped before the lease could expire"
    );
    assert!(
        degraded_seen,
        "health must say degraded while the heartbeat cannot renew"
    );
    rt.shutdown().await;
}
in_both_connection_modes!(a_locked_lease_row_stops_the_run_at_its_deadline_and_heals_after);

/// One locked lease row does not stall the renewal of the others: with
/// two runs in progress (lease 2 s) and the row of one locked by an outside
/// transaction for 3 s, only that run stops at its deadline; the other
/// keeps its lease throughout (its renewals skip nothing but the locked
/// row).
async fn one_locked_lease_row_does_not_stall_the_renewal_of_the_others(mode: Connections) {
    let db = support::db().await;
    let runs = Runs::default();
    let settings = quick(Schedule::Manual, Duration::from_secs(2));
    let rt = support::replica_in(
        mode,
        db.pool_with(3).await,
        "r0",
        Duration::from_millis(100),
        vec![
            job("locked", settings.clone(), runs.body(Duration::from_secs(60))),
            job("free", settings, runs.body(Duration::from_secs(60))),
        ],
    )
    .await;
    rt.trigger("locked").await.unwrap();
    rt.trigger("free").await.unwrap();
    runs.wait_started(2, Duration::from_secs(5)).await;
    let outside = support::lock_lease_row(&db.pool, "locked").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    outside.rollback().await.unwrap();
    let all = runs.all();
    let by_key = |key: &str| all.iter().find(|r| r.key == key).expect("a run").clone();
    assert_eq!(
        by_key("locked").cancelled.map(|(_, reason)| reason),
        Some(CancelReason::Deadline),
        "the run whose row was locked stops at its deadline"
    );
    assert!(
        by_key("free").cancelled.is_none(),
        "the other run kept its lease: {:?}",
        by_key("free")
    );
    rt.shutdown().await;
}
in_both_connection_modes!(one_locked_lease_row_does_not_stall_the_renewal_of_the_others);

/// Sixteen runs (lease 3 s) whose heartbeats stall all stop at their
/// deadline together: health reports sixteen runs stopped at their deadline,
/// each counted once, however many turns its supervisor took to notice the
/// cancellation after the deadline passed.
async fn each_run_stopped_at_its_deadline_counts_once_in_health(mode: Connections) {
    const RUNS: usize = 16;
    let db = support::db().await;
    let runs = Runs::default();
    let keys: Vec<String> = (0..RUNS).map(|k| format!("stalled:{k}")).collect();
    let jobs = keys
        .iter()
        .map(|key| {
            job(
                key,
                quick(Schedule::Manual, Duration::from_secs(3)),
                runs.body(Duration::from_secs(60)),
            )
        })
        .collect();
    let rt = support::replica_in(mode, db.pool_with(3).await, "r0", Duration::from_millis(100), jobs).await;
    for key in &keys {
        rt.trigger(key).await.unwrap();
    }
    runs.wait_started(RUNS, Duration::from_secs(10)).await;
    rt.faults().stall_heartbeats(true);
    let first = eventually(Duration::from_secs(10), || {
        let first: Vec<_> = runs.all().into_iter().take(RUNS).collect();
        first.iter().all(|r| r.cancelled.is_some()).then_some(first)
    })
    .await;
    rt.faults().stall_heartbeats(false);
    for run in &first {
        assert_eq!(run.cancelled.map(|c| c.1), Some(CancelReason::Deadline), "{run:?}");
    }
    // Each key runs again (a first loss is retried at once): its first
    // run's supervisor is done, so nothing can count that loss any more.
    runs.wait_started(2 * RUNS, Duration::from_secs(10)).await;
    let counted = rt.health().degraded.into_iter().find_map(|d| match d {
        Degraded::RunsLostAtDeadline { count, .. } => Some(count),
        _ => None,
    });
    assert_eq!(counted, Some(RUNS as u32), "{RUNS} runs stopped at their deadline");
    rt.shutdown().await;
}
in_both_connection_modes!(each_run_stopped_at_its_deadline_counts_once_in_health);

/// A run asked to stop for shutdown keeps its lease while it winds down,
/// but not past its local deadline: replica "a" is cut off from the database
/// and shut down with a grace (10 s) longer than the lease (2 s), its job
/// ignoring the cancellation. The run is dropped at the deadline, before
/// "b" can claim the key, so the two never run at once.
async fn a_run_winding_down_for_shutdown_is_dropped_at_its_deadline_not_its_grace(mode: Connections) {
    let db = support::db().await;
    let runs = Runs::default();
    let last_worked: Arc<Mutex<Option<Instant>>> = Arc::default();
    let stubborn = {
        let (runs, last_worked) = (runs.clone(), last_worked.clone());
        move |guard: leasehold::FenceGuard| {
            let (runs, last_worked) = (runs.clone(), last_worked.clone());
            async move {
                let i = runs.start(&guard);
                for _ in 0..80 {
                    *last_worked.lock().unwrap() = Some(Instant::now());
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                runs.end(i);
                Ok(())
            }
        }
    };
    let settings = quick(Schedule::Manual, Duration::from_secs(2)).grace(Duration::from_secs(10));
    let a = support::replica_in(
        mode,
        db.pool_with(2).await,
        "a",
        Duration::from_millis(100),
        vec![job("k", settings.clone(), stubborn)],
    )
    .await;
    a.trigger("k").await.unwrap();
    runs.wait_started(1, Duration::from_secs(5)).await;
    a.faults().partition(true);
    let stopping = tokio::spawn({
        let a = a.clone();
        async move { a.shutdown().await }
    });
    let b = support::replica_in(
        mode,
        db.pool_with(2).await,
        "b",
        Duration::from_millis(100),
        vec![job("k", settings, runs.body(Duration::from_secs(1)))],
    )
    .await;
    let b_run = eventually(Duration::from_secs(15), || {
        runs.all().into_iter().find(|r| r.holder == "b")
    })
    .await;
    // Once a's shutdown has returned, its run is gone: what it did last is
    // final.
    let _ = stopping.await;
    let a_last = last_worked.lock().unwrap().expect("a worked");
    assert!(
        a_last < b_run.started,
        "a's job still worked {:?} after b's run started",
        a_last - b_run.started
    );
    b.shutdown().await;
}
in_both_connection_modes!(a_run_winding_down_for_shutdown_is_dropped_at_its_deadline_not_its_grace);
