//! What the many-runtime scenarios (contention, throughput) share:
//! a fleet of runtimes running the same scheduled keys, and the checks that
//! no (key, slot) ran twice.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use leasehold::{FenceGuard, JobSettings, Schedule};
use leasehold_testkit::TestDb;

use crate::report::ms;
use crate::setup::{Bench, ScriptedJob, job, runtime, wait_for};
use crate::stats::{
    ANY_SQL, CLAIM_SQL, CpuWindow, RELEASE_SQL, RENEW_SQL, ServerCpu, Wal, process_cpu, reset_statement_stats,
    statement_totals, wal,
};

/// One run as its job saw it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunRec {
    runtime: usize,
    key: usize,
    /// Schedule slot of the run, from the server time of its claim.
    slot: i64,
    at: Instant,
    fence: i64,
    /// The tenure's `acquired_at` (server clock), µs since the epoch, read as
    /// `expires_at − lease` (a few µs after the real `acquired_at` at most).
    acquired_us: i64,
    /// Wall clock when the run started (the server runs on this machine), µs.
    wall_us: i64,
}

/// What a fleet of runtimes did during a measurement window.
pub(crate) struct FleetOutcome {
    pub(crate) window: Duration,
    pub(crate) runs_in_window: usize,
    pub(crate) per_runtime: Vec<usize>,
    pub(crate) max_per_slot: usize,
    /// Shortest time between the starts of two consecutive runs of one key.
    pub(crate) min_gap: Duration,
    /// Consecutive runs of one key whose claims passed the due check in the same slot for certain.
    pub(crate) certain_doubles: usize,
    /// The runs of (key, slot)s that ran more than once, for the report.
    pub(crate) duplicates: Vec<String>,
    pub(crate) slots_expected: usize,
    pub(crate) slots_covered: usize,
    pub(crate) claims: Option<i64>,
    pub(crate) releases: Option<i64>,
    pub(crate) renewals: Option<i64>,
    pub(crate) statements: Option<i64>,
    /// Server execution time of the claims, the releases and all
    /// statements in the window, ms (`pg_stat_statements`).
    pub(crate) claim_ms: Option<f64>,
    pub(crate) release_ms: Option<f64>,
    pub(crate) statement_ms: Option<f64>,
    /// Due → start of every run in the window.
    pub(crate) late: Vec<Duration>,
    /// Trigger → start of the probe key (with [`Fleet::probe`]).
    pub(crate) triggers: Vec<Duration>,
    pub(crate) probe_missed: usize,
    pub(crate) cpu: String,
    /// WAL the server wrote in the window (`pg_stat_wal`, the whole
    /// cluster: nothing else runs on it).
    pub(crate) wal: Option<Wal>,
    /// CPU time of this process (every runtime of the fleet) in the window.
    pub(crate) client_cpu: Duration,
    /// CPU time of the server's processes in the window (`None` when they
    /// cannot be read from /proc).
    pub(crate) server_cpu: Option<Duration>,
}

impl FleetOutcome {
    /// Reports a safety violation (named `what`) when two runs of one key
    /// certainly ran in one slot.
    pub(crate) fn check_doubles(&self, b: &Bench, what: &str) {
        if self.certain_doubles > 0 {
            b.violation(format!(
                "{what}: {} pair(s) of runs of one key certainly in one slot; up to {} runs of one key share the \
                 slot of their tenure's `acquired_at` (shortest gap between two runs of a key: {})\n\n{}",
                self.certain_doubles,
                self.max_per_slot,
                ms(self.min_gap),
                self.duplicates.join("\n")
            ));
        }
    }
}

/// What a fleet runs: `runtimes` runtimes (each on its own pool of
/// `conns`) all registering the same `keys` jobs every `period`.
pub(crate) struct Fleet<'a> {
    pub(crate) tag: &'a str,
    pub(crate) runtimes: usize,
    pub(crate) keys: usize,
    pub(crate) period: Duration,
    /// How long each run's body sleeps (`None`: it returns at once).
    pub(crate) body_sleep: Option<Duration>,
    pub(crate) conns: u32,
    pub(crate) warmup: Duration,
    pub(crate) window: Duration,
    /// Every runtime also registers one `Schedule::Manual` key, triggered
    /// through a runtime in turn during the window, each trigger once the
    /// previous run started: trigger → start latencies under the fleet's load.
    pub(crate) probe: bool,
}

/// How long a probe trigger waits for its run to start before it counts as missed.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Starts the fleet, waits `warmup`, measures for `window`, shuts down.
pub(crate) async fn fleet(db: &TestDb, stats: bool, spec: &Fleet<'_>) -> FleetOutcome {
    let Fleet {
        tag,
        runtimes: r,
        keys,
        period,
        body_sleep,
        conns,
        warmup,
        window,
        probe,
    } = *spec;
    let lease = Duration::from_secs(10);
    let runs: Arc<Mutex<Vec<RunRec>>> = Arc::default();
    let probe_starts: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let probe_key = format!("{tag}-probe");
    let period_ms = period.as_millis() as i64;
    let mut runtimes = Vec::new();
    let mut pools = Vec::new();
    for i in 0..r {
        let mut jobs: Vec<ScriptedJob> = (0..keys)
            .map(|j| {
                let runs = runs.clone();
                let settings = JobSettings::new(Schedule::every(period)).lease(lease);
                job(&format!("{tag}-{j}"), settings, move |guard: FenceGuard| {
                    let runs = runs.clone();
                    async move {
                        let acquired = guard.expires_at() - chrono::Duration::from_std(lease).unwrap_or_default();
                        let rec = RunRec {
                            runtime: i,
                            key: j,
                            slot: acquired.timestamp_millis().div_euclid(period_ms),
                            at: Instant::now(),
                            fence: guard.fence(),
                            acquired_us: acquired.timestamp_micros(),
                            wall_us: Utc::now().timestamp_micros(),
                        };
                        runs.lock().unwrap().push(rec);
                        if let Some(d) = body_sleep {
                            tokio::time::sleep(d).await;
                        }
                        Ok(())
                    }
                })
                .named(tag)
            })
            .collect();
        if probe {
            let starts = probe_starts.clone();
            jobs.push(
                job(
                    &probe_key,
                    JobSettings::new(Schedule::Manual),
                    move |_guard: FenceGuard| {
                        starts.lock().unwrap().push(Instant::now());
                        async { Ok(()) }
                    },
                )
                .named("probe"),
            );
        }
        let pool = db.pool_with(conns).await;
        pools.push(pool.clone());
        runtimes.push(runtime(pool, &format!("{tag}-r{i}"), None, jobs).await);
    }
    tokio::time::sleep(warmup).await;
    if stats {
        reset_statement_stats(&db.pool).await;
    }
    let wal0 = if stats { wal(&db.pool).await } else { None };
    let server = ServerCpu::start(&db.pool).await;
    let client0 = process_cpu();
    let cpu = CpuWindow::start();
    let w0 = Instant::now();
    let w0_wall = Utc::now().timestamp_millis();
    let mut triggers = Vec::new();
    let mut probe_missed = 0;
    if probe {
        let mut i = 0usize;
        while w0.elapsed() + PROBE_TIMEOUT / 10 < window {
            let seen = probe_starts.lock().unwrap().len();
            let t0 = Instant::now();
            runtimes[i % r]
                .trigger(&probe_key)
                .await
                .expect("trigger the probe key");
            match wait_for(PROBE_TIMEOUT, Duration::from_micros(200), || {
                probe_starts.lock().unwrap().get(seen).copied()
            })
            .await
            {
                Some(t) => triggers.push(t - t0),
                None => probe_missed += 1,
            }
            i += 1;
            // Let the run release before the next trigger; vary the phase.
            tokio::time::sleep(Duration::from_millis(20 + (i as u64 * 37) % 60)).await;
        }
    }
    tokio::time::sleep(window.saturating_sub(w0.elapsed())).await;
    let w1 = Instant::now();
    let w1_wall = Utc::now().timestamp_millis();
    let cpu = cpu.end();
    let client_cpu = process_cpu().saturating_sub(client0);
    let server_cpu = server.map(|s| s.used());
    let wal = match (wal0, if stats { wal(&db.pool).await } else { None }) {
        (Some(a), Some(b)) => Some(b.since(&a)),
        _ => None,
    };
    let (claims, releases, renewals, statements) = if stats {
        (
            Some(statement_totals(&db.pool, CLAIM_SQL).await),
            Some(statement_totals(&db.pool, RELEASE_SQL).await),
            Some(statement_totals(&db.pool, RENEW_SQL).await.calls),
            Some(statement_totals(&db.pool, ANY_SQL).await),
        )
    } else {
        (None, None, None, None)
    };
    for rt in runtimes {
        rt.shutdown().await;
    }
    for pool in pools {
        pool.close().await;
    }
    let runs = runs.lock().unwrap().clone();
    let in_window: Vec<&RunRec> = runs.iter().filter(|x| x.at >= w0 && x.at < w1).collect();
    let mut per_runtime = vec![0; r];
    for x in &in_window {
        per_runtime[x.runtime] += 1;
    }
    // How late each run in the window started after its key fell due (the
    // start of the slot its claim consumed: the slot boundary before its
    // `acquired_at`), by the wall clock the server shares.
    let late: Vec<Duration> = in_window
        .iter()
        .map(|x| {
            let due_us = x.acquired_us.div_euclid(period_ms * 1000) * period_ms * 1000;
            Duration::from_micros(u64::try_from(x.wall_us - due_us).unwrap_or(0))
        })
        .collect();
    let mut per_slot: HashMap<(usize, i64), usize> = HashMap::new();
    for x in &runs {
        *per_slot.entry((x.key, x.slot)).or_default() += 1;
    }
    // Slots that began and ended inside the window (their runs start within it).
    let first = w0_wall.div_euclid(period_ms) + 1;
    let last = w1_wall.div_euclid(period_ms); // exclusive: the slot under way at w1 may not have run yet
    let full: HashSet<(usize, i64)> = runs
        .iter()
        .filter(|x| x.slot >= first && x.slot < last)
        .map(|x| (x.key, x.slot))
        .collect();
    FleetOutcome {
        window: w1 - w0,
        runs_in_window: in_window.len(),
        per_runtime,
        max_per_slot: per_slot.values().copied().max().unwrap_or(0),
        min_gap: min_gap(&runs),
        certain_doubles: certain_doubles(&runs, period_ms * 1000),
        duplicates: duplicates(&runs, &per_slot, period_ms),
        slots_expected: keys * (last - first).max(0) as usize,
        slots_covered: full.len(),
        claims: claims.map(|c| c.calls),
        releases: releases.map(|c| c.calls),
        renewals,
        statements: statements.map(|c| c.calls),
        claim_ms: claims.map(|c| c.exec_ms),
        release_ms: releases.map(|c| c.exec_ms),
        statement_ms: statements.map(|c| c.exec_ms),
        late,
        triggers,
        probe_missed,
        cpu,
        wal,
        client_cpu,
        server_cpu,
    }
}

/// Shortest interval between the starts of consecutive runs of one key.
pub(crate) fn min_gap(runs: &[RunRec]) -> Duration {
    let mut by_key: HashMap<usize, Vec<Instant>> = HashMap::new();
    for x in runs {
        by_key.entry(x.key).or_default().push(x.at);
    }
    by_key
        .values_mut()
        .flat_map(|starts| {
            starts.sort();
            starts.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>()
        })
        .min()
        .unwrap_or(Duration::MAX)
}

/// Pairs of consecutive runs of one key whose claims certainly passed the due
/// check in the same slot. Run *i*'s claim cannot pass the check before the
/// due time run *i − 1*'s release left (the next slot after its
/// `acquired_at`, the runtime's rule for a successful run), and run *i + 1*'s
/// claim passes it no later than that run's start. So if that due time and
/// the start of run *i + 1* fall in one slot, both claims passed in that slot.
/// This holds whichever way a claim's `acquired_at` and its due check are
/// ordered. `acquired_us` is `expires_at − lease`, which can be a few µs later
/// than the real `acquired_at` (two `clock_timestamp()` calls), so it is taken
/// [`ACQUIRED_SLACK_US`] earlier: a boundary inside that slack cannot produce a
/// false count.
pub(crate) fn certain_doubles(runs: &[RunRec], period_us: i64) -> usize {
    let mut by_key: HashMap<usize, Vec<&RunRec>> = HashMap::new();
    for x in runs {
        by_key.entry(x.key).or_default().push(x);
    }
    let slot = |us: i64| us.div_euclid(period_us);
    let mut doubles = 0;
    for of_key in by_key.values_mut() {
        of_key.sort_by_key(|x| x.fence);
        for w in of_key.windows(3) {
            let left_due = (slot(w[0].acquired_us - ACQUIRED_SLACK_US) + 1) * period_us;
            if slot(left_due) == slot(w[2].wall_us) {
                doubles += 1;
            }
        }
    }
    doubles
}

/// How much earlier than `expires_at − lease` the real `acquired_at` may be.
pub(crate) const ACQUIRED_SLACK_US: i64 = 1_000;

/// Up to three (key, slot)s with more than one run, each with its runs and
/// the key's next run, as Markdown lines.
pub(crate) fn duplicates(runs: &[RunRec], per_slot: &HashMap<(usize, i64), usize>, period_ms: i64) -> Vec<String> {
    let mut dup: Vec<(usize, i64)> = per_slot.iter().filter(|(_, n)| **n > 1).map(|(k, _)| *k).collect();
    dup.sort();
    let mut out = Vec::new();
    let clock =
        |us: i64| DateTime::from_timestamp_micros(us).map_or("?".into(), |t| t.format("%H:%M:%S%.6f").to_string());
    for (key, slot) in dup.into_iter().take(3) {
        let boundary = (slot + 1) * period_ms * 1000;
        out.push(format!(
            "- key {key}, slot starting {} (next slot boundary {}):",
            clock(slot * period_ms * 1000),
            clock(boundary)
        ));
        let mut of_key: Vec<&RunRec> = runs.iter().filter(|x| x.key == key).collect();
        of_key.sort_by_key(|x| x.at);
        let first = of_key.iter().position(|x| x.slot == slot).unwrap_or(0);
        for x in of_key.iter().skip(first).take(per_slot[&(key, slot)] + 1) {
            out.push(format!(
                "  - runtime {}, fence {}, tenure acquired_at {} (server), run started {} (wall)",
                x.runtime,
                x.fence,
                clock(x.acquired_us),
                clock(x.wall_us)
            ));
        }
    }
    out
}

/// How the two slot checks of the fleet scenarios read.
pub(crate) const SLOT_CHECKS: &str = "\"Max runs in one (key, slot)\" puts each run in the slot of its tenure's `acquired_at`; \
     \"certain double runs\" counts consecutive runs of a key whose claims passed the due check in one slot for \
     certain (see `certain_doubles` in the bench); the second must be 0. The first should be 1 too, since a claim \
     is dated after its due check; the bench reads `acquired_at` as `expires_at − lease`, a few µs late, so a run \
     dated just past a boundary can still show 2 without a double run.";

pub(crate) fn per_run(count: Option<i64>, runs: usize) -> String {
    count.map_or("n/a".into(), |c| format!("{:.2}", c as f64 / runs.max(1) as f64))
}
