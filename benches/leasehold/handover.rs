//! Handover (section 5 of the output): graceful (shutdown) and crash
//! (partition) handovers between two runtimes, and the stalled holder's
//! safety margin.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use leasehold::{CancelReason, FenceGuard, JobSettings, Schedule};

use crate::report::{median_f64, ms, p50_p99, progress, table};
use crate::setup::{Bench, BenchJob, bench_job, drop_db, fresh_db, runtime, wait_for};

/// A run's cancellation as a watcher saw it: holder, instant observed, wall
/// time observed, reason, and the server expiry known then.
type Cancelled = (String, Instant, DateTime<Utc>, Option<CancelReason>, DateTime<Utc>);

/// What the runs of one handover trial saw.
#[derive(Default)]
struct HoldLog {
    started: Mutex<Vec<(String, Instant)>>,
    cancelled: Mutex<Vec<Cancelled>>,
    /// holder, instant the run's future ended (returned or was dropped).
    stopped: Mutex<Vec<(String, Instant)>>,
    /// wall time of each run start, by holder.
    started_wall: Mutex<Vec<(String, DateTime<Utc>)>>,
}

impl HoldLog {
    fn start_of(&self, holder: &str) -> Option<Instant> {
        self.started
            .lock()
            .unwrap()
            .iter()
            .find(|(h, _)| h == holder)
            .map(|(_, t)| *t)
    }
}

/// Records when the run's future ends, whether it returned or was dropped.
struct OnStop(Arc<HoldLog>, String);

impl Drop for OnStop {
    fn drop(&mut self) {
        self.0.stopped.lock().unwrap().push((self.1.clone(), Instant::now()));
    }
}

/// A job that holds its lease until cancelled, recording everything.
fn hold_job(key: &str, lease: Duration, log: Arc<HoldLog>) -> BenchJob {
    let settings = JobSettings::new(Schedule::Manual)
        .lease(lease)
        .grace(Duration::from_millis(300));
    bench_job("handover", key.to_owned(), settings, move |guard: FenceGuard| {
        let log = log.clone();
        async move {
            let holder = guard.holder().to_owned();
            let _stop = OnStop(log.clone(), holder.clone());
            log.started.lock().unwrap().push((holder.clone(), Instant::now()));
            log.started_wall.lock().unwrap().push((holder.clone(), Utc::now()));
            // A separate task observes the cancellation: the runtime may drop this future
            // (no grace after a deadline) before it is polled again.
            let watcher = guard.clone();
            let log2 = log.clone();
            tokio::spawn(async move {
                watcher.cancelled().await;
                let now = (Instant::now(), Utc::now());
                log2.cancelled
                    .lock()
                    .unwrap()
                    .push((holder, now.0, now.1, watcher.reason(), watcher.expires_at()));
            });
            guard.cancelled().await;
            Err("cancelled".into())
        }
    })
}

pub(crate) async fn handover(b: &Bench) {
    progress("5. handover");
    let (db, _) = fresh_db(&b.server).await;
    let trials = if b.smoke { 3 } else { 20 };
    let lease = Duration::from_secs(1);
    let poll = Duration::from_millis(100);
    let mut graceful = Vec::new();
    let mut crash = Vec::new();
    let mut margin_cancel = Vec::new();
    let mut margin_stop = Vec::new();
    let mut margin_expiry = Vec::new();
    let mut after_expiry = Vec::new();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut failures = 0;
    for i in 0..trials {
        if i % 5 == 0 {
            progress(&format!("   trial {i}"));
        }
        // Graceful: the holder shuts down; the other runtime runs the job next.
        {
            let key = format!("hg-{i}");
            let log = Arc::new(HoldLog::default());
            let (a, bh) = (format!("hg{i}-a"), format!("hg{i}-b"));
            let rt_a = runtime(
                db.pool_with(2).await,
                &a,
                Some(poll),
                vec![hold_job(&key, lease, log.clone())],
            )
            .await;
            rt_a.trigger(&key).await.expect("trigger");
            if wait_for(Duration::from_secs(5), || log.start_of(&a)).await.is_none() {
                failures += 1;
                rt_a.shutdown().await;
                continue;
            }
            let rt_b = runtime(
                db.pool_with(2).await,
                &bh,
                Some(poll),
                vec![hold_job(&key, lease, log.clone())],
            )
            .await;
            tokio::time::sleep(Duration::from_millis(150 + 20 * (i as u64 % 5))).await;
            let t0 = Instant::now();
            rt_a.shutdown().await;
            match wait_for(Duration::from_secs(5), || log.start_of(&bh)).await {
                Some(tb) => graceful.push(tb - t0),
                None => failures += 1,
            }
            rt_b.shutdown().await;
        }
        // Crash: the holder is cut off (no renewal, no release); the other takes over after expiry.
        {
            let key = format!("hc-{i}");
            let log = Arc::new(HoldLog::default());
            let (a, bh) = (format!("hc{i}-a"), format!("hc{i}-b"));
            let rt_a = runtime(
                db.pool_with(2).await,
                &a,
                Some(poll),
                vec![hold_job(&key, lease, log.clone())],
            )
            .await;
            rt_a.trigger(&key).await.expect("trigger");
            if wait_for(Duration::from_secs(5), || log.start_of(&a)).await.is_none() {
                failures += 1;
                rt_a.shutdown().await;
                continue;
            }
            let rt_b = runtime(
                db.pool_with(2).await,
                &bh,
                Some(poll),
                vec![hold_job(&key, lease, log.clone())],
            )
            .await;
            // Cut off at a different phase of the heartbeat each trial.
            tokio::time::sleep(Duration::from_millis(150 + (i as u64 * 67) % 333)).await;
            let t0 = Instant::now();
            rt_a.faults().partition(true);
            let tb = wait_for(Duration::from_secs(5), || log.start_of(&bh)).await;
            // Give the watcher task a moment in case it has not recorded yet.
            tokio::time::sleep(Duration::from_millis(20)).await;
            let cancelled = log.cancelled.lock().unwrap().iter().find(|c| c.0 == a).cloned();
            let stopped = log.stopped.lock().unwrap().iter().find(|s| s.0 == a).map(|s| s.1);
            let b_wall = log.started_wall.lock().unwrap().iter().find(|s| s.0 == bh).map(|s| s.1);
            match (tb, cancelled, stopped, b_wall) {
                (Some(tb), Some((_, tc, tc_wall, reason, expiry)), Some(ts), Some(b_wall)) => {
                    crash.push(tb - t0);
                    let signed = |later: Instant, earlier: Instant| {
                        later.saturating_duration_since(earlier).as_secs_f64()
                            - earlier.saturating_duration_since(later).as_secs_f64()
                    };
                    margin_cancel.push(signed(tb, tc));
                    margin_stop.push(signed(tb, ts));
                    margin_expiry.push((expiry - tc_wall).num_microseconds().unwrap_or(0) as f64 / 1e6);
                    after_expiry.push((b_wall - expiry).num_microseconds().unwrap_or(0) as f64 / 1e6);
                    *reasons
                        .entry(reason.map_or("none".into(), |r| r.to_string()))
                        .or_default() += 1;
                }
                _ => {
                    failures += 1;
                    eprintln!("   crash trial {i}: incomplete (takeover {tb:?})");
                }
            }
            rt_a.shutdown().await;
            rt_b.shutdown().await;
        }
    }
    let min_f = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let max_f = |v: &[f64]| v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let secs_ms = |s: f64| format!("{:.1} ms", s * 1000.0);
    for (name, v) in [
        ("cancellation observed → takeover run", &margin_cancel),
        ("run stopped → takeover run", &margin_stop),
        ("cancellation observed → server expiry", &margin_expiry),
    ] {
        if v.iter().any(|&m| m <= 0.0) {
            b.violation(format!(
                "handover: margin {name} not positive: min {:.1} ms",
                min_f(v) * 1000.0
            ));
        }
    }
    println!("## 5. Handover: lease 1 s (heartbeat 333 ms, margin 100 ms), poll interval 100 ms\n");
    println!(
        "{trials} trials, each one graceful handover then one crash, each with two fresh runtimes on their own pools \
         of 2. Graceful: from `shutdown()` of the holder to the other runtime's run start. Crash: \
         `faults().partition(true)` on the holder (it stops renewing and never releases; its run is stopped at its \
         local deadline) at a different heartbeat phase each trial, to the other runtime's run start; expected ≤ \
         lease + poll interval = 1.1 s. {}\n",
        if failures > 0 {
            format!("**{failures} trial(s) did not complete and are left out.**")
        } else {
            String::new()
        }
    );
    let mut rows = Vec::new();
    for (name, v, bound) in [
        (
            "graceful: shutdown → next run",
            &graceful,
            "≈ poll interval (100 ms) + shutdown",
        ),
        ("crash: partition → takeover run", &crash, "≤ lease + poll = 1.1 s"),
    ] {
        let (p50, p99) = p50_p99(v);
        rows.push(vec![
            name.into(),
            v.len().to_string(),
            ms(p50),
            ms(p99),
            ms(v.iter().min().copied().unwrap_or_default()),
            ms(v.iter().max().copied().unwrap_or_default()),
            bound.into(),
        ]);
    }
    table(&["handover", "trials", "p50", "p99", "min", "max", "expected"], &rows);
    println!(
        "Stalled holder (the crash trials): its safety margin before anyone else runs the job; must be > 0 every time.\n"
    );
    let mut rows = Vec::new();
    for (name, v) in [
        (
            "cancellation observed (`guard.cancelled()`) → takeover run starts",
            &margin_cancel,
        ),
        (
            "holder's run future ended (dropped) → takeover run starts",
            &margin_stop,
        ),
        (
            "cancellation observed → lease expiry on the server clock",
            &margin_expiry,
        ),
        ("lease expiry on the server → takeover run starts", &after_expiry),
    ] {
        rows.push(vec![
            name.into(),
            v.len().to_string(),
            secs_ms(min_f(v)),
            secs_ms(median_f64(v)),
            secs_ms(max_f(v)),
        ]);
    }
    table(&["interval", "trials", "min", "median", "max"], &rows);
    println!(
        "Cancel reasons seen by the stalled holders: {}.\n",
        reasons
            .iter()
            .map(|(r, n)| format!("{r} × {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    drop_db(&b.server, db).await;
}
