//! Handover (section 5 of the output): graceful (shutdown) and crash
//! (partition) handovers between two runtimes, and the stalled holder's
//! safety margin.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use leasehold::{CancelReason, FenceGuard, JobSettings, Runtime, Schedule};
use leasehold_testkit::TestDb;

use crate::report::{median_f64, ms, p50_p99, progress, table};
use crate::setup::{Bench, POLL, ScriptedJob, TenantJob, drop_db, fresh_db, job, jobs, runtime, wait_for};

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
fn hold_job(key: &str, lease: Duration, log: Arc<HoldLog>) -> ScriptedJob {
    let settings = JobSettings::new(Schedule::Manual)
        .lease(lease)
        .grace(Duration::from_millis(300));
    job(key, settings, move |guard: FenceGuard| {
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
    .named("handover")
}

/// Lease of the handover jobs.
const LEASE: Duration = Duration::from_secs(1);
/// Poll interval of the handover runtimes.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// How long a trial waits for a run to start before it counts as failed.
const WAIT: Duration = Duration::from_secs(5);

/// One trial's two runtimes on one manual key, each on its own pool of 2:
/// A holds the key (its run has started), B has started and waits for it.
struct HeldPair {
    log: Arc<HoldLog>,
    a: String,
    b: String,
    rt_a: Runtime,
    rt_b: Runtime,
}

impl HeldPair {
    /// Key `h{kind}-{i}`, holders `h{kind}{i}-a` and `-b`: starts A, triggers
    /// the key and waits for A's run, then starts B. `None` (A shut down)
    /// when A's run does not start.
    async fn start(db: &TestDb, kind: &str, i: usize) -> Option<HeldPair> {
        let key = format!("h{kind}-{i}");
        let log = Arc::new(HoldLog::default());
        let (a, b) = (format!("h{kind}{i}-a"), format!("h{kind}{i}-b"));
        let holder = async |name: &str| {
            let jobs = vec![hold_job(&key, LEASE, log.clone())];
            runtime(db.pool_with(2).await, name, Some(POLL_INTERVAL), jobs).await
        };
        let rt_a = holder(&a).await;
        rt_a.trigger(&key).await.expect("trigger");
        if wait_for(WAIT, POLL, || log.start_of(&a)).await.is_none() {
            rt_a.shutdown().await;
            return None;
        }
        let rt_b = holder(&b).await;
        Some(HeldPair { log, a, b, rt_a, rt_b })
    }

    /// When B's run started, once it has (`None` after [`WAIT`]).
    async fn b_started(&self) -> Option<Instant> {
        wait_for(WAIT, POLL, || self.log.start_of(&self.b)).await
    }

    async fn shutdown(self) {
        self.rt_a.shutdown().await;
        self.rt_b.shutdown().await;
    }
}

/// Graceful: the holder shuts down; the other runtime runs the job next.
/// From A's `shutdown()` to B's run start.
async fn graceful_trial(pair: HeldPair, i: usize) -> Option<Duration> {
    tokio::time::sleep(Duration::from_millis(150 + 20 * (i as u64 % 5))).await;
    let t0 = Instant::now();
    pair.rt_a.shutdown().await;
    let next = pair.b_started().await.map(|tb| tb - t0);
    pair.rt_b.shutdown().await;
    next
}

/// What one crash trial measured.
struct CrashTrial {
    /// Partition → B's run start.
    takeover: Duration,
    /// Seconds from A observing its cancellation to B's run start.
    margin_cancel: f64,
    /// Seconds from A's run future ending to B's run start.
    margin_stop: f64,
    /// Seconds from A observing its cancellation to the lease's server expiry.
    margin_expiry: f64,
    /// Seconds from the server expiry to B's run start (wall clock).
    after_expiry: f64,
    /// Why A's run was cancelled.
    reason: String,
}

/// Crash: the holder is cut off (no renewal, no release); the other takes
/// over after expiry. `None` when something was not recorded.
async fn crash_trial(pair: HeldPair, i: usize) -> Option<CrashTrial> {
    // Cut off at a different phase of the heartbeat each trial.
    tokio::time::sleep(Duration::from_millis(150 + (i as u64 * 67) % 333)).await;
    let t0 = Instant::now();
    pair.rt_a.faults().partition(true);
    let tb = pair.b_started().await;
    // Give the watcher task a moment in case it has not recorded yet.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let log = &pair.log;
    let cancelled = log.cancelled.lock().unwrap().iter().find(|c| c.0 == pair.a).cloned();
    let stopped = log.stopped.lock().unwrap().iter().find(|s| s.0 == pair.a).map(|s| s.1);
    let b_wall = log
        .started_wall
        .lock()
        .unwrap()
        .iter()
        .find(|s| s.0 == pair.b)
        .map(|s| s.1);
    let trial = match (tb, cancelled, stopped, b_wall) {
        (Some(tb), Some((_, tc, tc_wall, reason, expiry)), Some(ts), Some(b_wall)) => {
            let signed = |later: Instant, earlier: Instant| {
                later.saturating_duration_since(earlier).as_secs_f64()
                    - earlier.saturating_duration_since(later).as_secs_f64()
            };
            let secs = |d: chrono::TimeDelta| d.num_microseconds().unwrap_or(0) as f64 / 1e6;
            Some(CrashTrial {
                takeover: tb - t0,
                margin_cancel: signed(tb, tc),
                margin_stop: signed(tb, ts),
                margin_expiry: secs(expiry - tc_wall),
                after_expiry: secs(b_wall - expiry),
                reason: reason.map_or("none".into(), |r| r.to_string()),
            })
        }
        _ => {
            eprintln!("   crash trial {i}: incomplete (takeover {tb:?})");
            None
        }
    };
    pair.shutdown().await;
    trial
}

pub(crate) async fn handover(b: &Bench) {
    progress("5. handover");
    let (db, _) = fresh_db(&b.server).await;
    let trials = if b.smoke { 3 } else { 20 };
    let mut graceful = Vec::new();
    let mut crashes = Vec::new();
    let mut failures = 0;
    for i in 0..trials {
        if i % 5 == 0 {
            progress(&format!("   trial {i}"));
        }
        let Some(pair) = HeldPair::start(&db, "g", i).await else {
            failures += 1;
            continue;
        };
        match graceful_trial(pair, i).await {
            Some(d) => graceful.push(d),
            None => failures += 1,
        }
        let Some(pair) = HeldPair::start(&db, "c", i).await else {
            failures += 1;
            continue;
        };
        match crash_trial(pair, i).await {
            Some(trial) => crashes.push(trial),
            None => failures += 1,
        }
    }
    let crash: Vec<Duration> = crashes.iter().map(|c| c.takeover).collect();
    let of = |f: fn(&CrashTrial) -> f64| crashes.iter().map(f).collect::<Vec<f64>>();
    let (margin_cancel, margin_stop) = (of(|c| c.margin_cancel), of(|c| c.margin_stop));
    let (margin_expiry, after_expiry) = (of(|c| c.margin_expiry), of(|c| c.after_expiry));
    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    for c in &crashes {
        *reasons.entry(c.reason.as_str()).or_default() += 1;
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
    drop_db(db).await;
    if let Some(n) = b.max_keys.filter(|_| !b.smoke) {
        at_scale(b, n).await;
    }
}

/// Trials of the graceful handover at scale, per fleet.
const SCALE_TRIALS: usize = 5;

/// How long the settled fleet's runtimes have run, listening, before a
/// trial: well past a fresh runtime's first poll and its registration's
/// after-effects, against the 200–350 ms the other fleets give.
const SETTLED: Duration = Duration::from_secs(3);

/// Graceful handover of a due key while every runtime registers `n` more
/// keys (`--max-keys`), default settings: fleets of 2 and 3 runtimes.
async fn at_scale(b: &Bench, n: usize) {
    let mut rows = Vec::new();
    for (r, settled) in [(2, false), (3, false), (2, true)] {
        progress(&format!("   graceful handover, {r} runtimes × {n} keys"));
        let (db, _) = fresh_db(&b.server).await;
        let (times, missed, starts) = graceful_at_scale(&db, n, r, settled).await;
        drop_db(db).await;
        let (p50, p99) = p50_p99(&times);
        let settled = if settled {
            format!(", each listening for {} s", SETTLED.as_secs())
        } else {
            String::new()
        };
        rows.push(vec![
            format!("{r} × {n}{settled}"),
            times.len().to_string(),
            missed.to_string(),
            ms(p50),
            ms(p99),
            ms(times.iter().max().copied().unwrap_or_default()),
            starts,
        ]);
    }
    println!(
        "### Graceful handover with {n} keys per runtime
"
    );
    println!(
        "R runtimes with default settings (poll interval not set, own pool of 2 each) each register the same {n} \
         tenant keys (never due here) and one key whose run lasts until cancelled (lease 10 s, manual, triggered \
         once: a cancelled run leaves it due). {SCALE_TRIALS} trials per fleet: the runtime running that key is \
         shut down, from `shutdown()` until another runtime's run of the key starts; a fresh runtime then takes \
         the place of the one shut down (its `start()` is listed). A trial begins 200–350 ms after that \
         replacement started, so with 2 runtimes the key always goes to a runtime that young; in the fleet \
         marked \"listening for {} s\" a trial waits until every runtime has listened that long.\n",
        SETTLED.as_secs()
    );
    table(
        &[
            "runtimes × keys",
            "trials",
            &format!("no run within {} s", WAIT.as_secs()),
            "p50",
            "p99",
            "max",
            "`start()` of each runtime",
        ],
        &rows,
    );
}

/// One fleet of [`at_scale`]: the handover times, the trials without a
/// takeover, and the `start()` times.
/// `settled`: each trial waits until every runtime has listened for
/// [`SETTLED`].
async fn graceful_at_scale(db: &TestDb, n: usize, r: usize, settled: bool) -> (Vec<Duration>, usize, String) {
    let log = Arc::new(HoldLog::default());
    let key = format!("hscale-{r}");
    let mut starts = Vec::new();
    let mut generation = 0;
    let mut launch = async || {
        let name = format!("hscale{r}-{generation}");
        generation += 1;
        let pool = db.pool_with(2).await;
        let builder = jobs::builder(pool.clone(), &name, None, TenantJob::many(n)).register(hold_job(
            &key,
            Duration::from_secs(10),
            log.clone(),
        ));
        let t = Instant::now();
        let rt = builder.start().await.expect("runtime starts");
        starts.push(ms(t.elapsed()));
        (name, rt, pool)
    };
    let mut fleet = Vec::with_capacity(r);
    for _ in 0..r {
        fleet.push(launch().await);
    }
    fleet[0].1.trigger(&key).await.expect("trigger");
    let run_at = |i: usize| {
        let log = log.clone();
        async move { wait_for(WAIT, POLL, || log.started.lock().unwrap().get(i).cloned()).await }
    };
    let mut holder = run_at(0).await.map(|(h, _)| h);
    let (mut times, mut missed) = (Vec::new(), 0);
    for i in 0..SCALE_TRIALS {
        let Some(pos) = holder
            .as_ref()
            .and_then(|h| fleet.iter().position(|(name, ..)| name == h))
        else {
            missed += SCALE_TRIALS - i;
            break;
        };
        tokio::time::sleep(Duration::from_millis(200 + 37 * i as u64)).await;
        if settled {
            let listening = || fleet.iter().all(|(_, rt, _)| rt.health().listening).then_some(());
            // Not listening within WAIT: the trial goes ahead, and shows it.
            let _ = wait_for(WAIT, POLL, listening).await;
            tokio::time::sleep(SETTLED).await;
        }
        let (_, rt, pool) = fleet.swap_remove(pos);
        let seen = log.started.lock().unwrap().len();
        let t0 = Instant::now();
        rt.shutdown().await;
        match run_at(seen).await {
            Some((h, t)) => {
                times.push(t - t0);
                holder = Some(h);
            }
            None => {
                missed += 1;
                holder = None;
            }
        }
        pool.close().await;
        fleet.push(launch().await);
    }
    for (_, rt, pool) in fleet {
        rt.shutdown().await;
        pool.close().await;
    }
    (times, missed, starts.join(", "))
}
