//! Pool pressure (section 3 of the output): K long jobs on a pool of 2
//! connections, the runtime against a pinned connection + session
//! advisory lock per job (the approach of docs/design.md §8), with an unrelated `SELECT 1` probing the pool meanwhile.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use leasehold::{FenceGuard, JobSettings, Schedule};
use leasehold_testkit::TestDb;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::report::{ms, p50_p99, progress, table};
use crate::setup::{Bench, POLL, drop_db, fresh_db, job, runtime, wait_for};
use crate::stats::{ANY_SQL, PROBE_SQL, reset_statement_stats, statement_totals};

/// Concurrency gauge: current and maximum.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    max: AtomicUsize,
}

impl Gauge {
    fn inc(&self) {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(n, Ordering::SeqCst);
    }
    fn dec(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
    fn max(&self) -> usize {
        self.max.load(Ordering::SeqCst)
    }
}

/// Sends `SELECT 1` through `pool` every `every` (each in its own task, so a
/// stuck probe does not delay the next) until stopped.
struct Probes {
    stop: CancellationToken,
    handle: tokio::task::JoinHandle<Vec<Option<Duration>>>,
}

impl Probes {
    fn start(pool: PgPool, every: Duration, timeout: Duration) -> Self {
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let handle = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut probes = Vec::new();
            loop {
                tokio::select! {
                    _ = stopped.cancelled() => break,
                    _ = tick.tick() => {
                        let pool = pool.clone();
                        probes.push(tokio::spawn(async move {
                            let t = Instant::now();
                            let probe = sqlx::query_scalar::<_, i32>("SELECT 1").fetch_one(&pool);
                            match tokio::time::timeout(timeout, probe).await {
                                Ok(Ok(_)) => Some(t.elapsed()),
                                _ => None,
                            }
                        }));
                    }
                }
            }
            let mut out = Vec::with_capacity(probes.len());
            for p in probes {
                out.push(p.await.unwrap_or(None));
            }
            out
        });
        Probes { stop, handle }
    }

    /// Stops sending and waits for the probes in flight: (latencies, timed out).
    async fn finish(self) -> (Vec<Duration>, usize) {
        self.stop.cancel();
        let all = self.handle.await.unwrap_or_default();
        let timed_out = all.iter().filter(|p| p.is_none()).count();
        (all.into_iter().flatten().collect(), timed_out)
    }
}

/// What one phase of the pool-pressure scenario saw.
#[derive(Default)]
struct PressureOutcome {
    max_running: usize,
    started: usize,
    gave_up: usize,
    cancelled: usize,
    start_delays: Vec<Duration>,
    probes: Vec<Duration>,
    probes_timed_out: usize,
    statements: Option<i64>,
    phase: Duration,
}

/// Shared by the jobs of one phase.
#[derive(Default)]
struct PressureState {
    running: Gauge,
    finished: AtomicUsize,
    cancelled: AtomicUsize,
    gave_up: AtomicUsize,
    delays: Mutex<Vec<Duration>>,
    t0: Mutex<Option<Instant>>,
}

impl PressureState {
    fn started(&self) {
        self.running.inc();
        if let Some(t0) = *self.t0.lock().unwrap() {
            self.delays.lock().unwrap().push(t0.elapsed());
        }
    }
}

/// The advisory-lock baseline's key hash (docs/design.md §8): FNV-1a 32
/// bits, as a non-negative bigint.
fn fnv32(key: &str) -> i64 {
    let mut h: u32 = 0x811c_9dc5;
    for b in key.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    i64::from(h)
}

pub(crate) async fn pool_pressure(b: &Bench) {
    progress("3. pool pressure");
    let (db, stats) = fresh_db(&b.server).await;
    let (sizes, work, rounds): (&[usize], Duration, usize) = if b.smoke {
        (&[2, 20], Duration::from_secs(1), 1)
    } else {
        (&[2, 100, 1_000], Duration::from_secs(5), 2)
    };
    let window = work / 2;
    let mut results: BTreeMap<(usize, &str), Vec<PressureOutcome>> = BTreeMap::new();
    for &k in sizes {
        for round in 0..rounds {
            let order: [&str; 2] = if round % 2 == 0 {
                ["leasehold", "pinned"]
            } else {
                ["pinned", "leasehold"]
            };
            for which in order {
                progress(&format!("   K = {k}, round {round}, {which}"));
                let out = if which == "leasehold" {
                    pressure_leasehold(&db, stats, k, work, round).await
                } else {
                    pressure_pinned(&db, stats, k, work, window, round).await
                };
                results.entry((k, which)).or_default().push(out);
            }
        }
    }
    println!(
        "## 3. Pool pressure: K jobs of {} s each on a pool of 2 connections\n",
        work.as_secs()
    );
    println!(
        "leasehold: one `Runtime` (default poll interval, lease 3 s so the heartbeat ticks every 1 s while the jobs \
         run) with K `Schedule::Manual` jobs, all triggered at once (`trigger` × K, concurrently). Pinned: the \
         usual advisory-lock fix, for each job `pool.acquire()`, `SELECT pg_try_advisory_lock($1)` on that connection, hold \
         it for the job, `SELECT pg_advisory_unlock($1)` on the same connection, return it; a job that gets no \
         connection within {} s gives up its turn (a scheduler that waited instead would need ⌈K/2⌉ × {} s to run \
         them all). Meanwhile an unrelated `SELECT 1` goes through the same pool every 50 ms (timeout {} s). \
         {rounds} round(s) per K, approaches alternating; counts are medians over rounds, latencies pooled.\n",
        window.as_secs_f64(),
        work.as_secs(),
        (work * 2).as_secs()
    );
    let mut rows = Vec::new();
    for &k in sizes {
        for which in ["leasehold", "pinned"] {
            let outs = &results[&(k, which)];
            let med = |f: &dyn Fn(&PressureOutcome) -> usize| {
                let mut v: Vec<usize> = outs.iter().map(f).collect();
                v.sort();
                v[(v.len() - 1) / 2]
            };
            let delays: Vec<Duration> = outs.iter().flat_map(|o| o.start_delays.clone()).collect();
            let probes: Vec<Duration> = outs.iter().flat_map(|o| o.probes.clone()).collect();
            let (d50, _) = p50_p99(&delays);
            let dmax = delays.iter().max().copied().unwrap_or_default();
            let (q50, q99) = p50_p99(&probes);
            let timed_out: usize = outs.iter().map(|o| o.probes_timed_out).sum();
            let total: usize = outs.iter().map(|o| o.probes_timed_out + o.probes.len()).sum();
            let statements = outs
                .iter()
                .filter_map(|o| o.statements)
                .max()
                .map_or("n/a".into(), |s| s.to_string());
            let phase = outs.iter().map(|o| o.phase).max().unwrap_or_default();
            rows.push(vec![
                k.to_string(),
                if which == "leasehold" {
                    "leasehold runtime".into()
                } else {
                    "pinned connection + advisory lock".into()
                },
                med(&|o| o.max_running).to_string(),
                med(&|o| o.started).to_string(),
                med(&|o| o.gave_up).to_string(),
                med(&|o| o.cancelled).to_string(),
                format!("{} / {}", ms(d50), ms(dmax)),
                ms(q50),
                ms(q99),
                format!("{timed_out} / {total}"),
                statements,
                ms(phase),
            ]);
        }
    }
    table(
        &[
            "K",
            "approach",
            "max running at once",
            "started",
            "could not start",
            "runs cancelled",
            "start delay p50 / max",
            "`SELECT 1` p50",
            "`SELECT 1` p99",
            "probes timed out",
            "statements in phase (probes excluded)",
            "phase length",
        ],
        &rows,
    );
    drop_db(db).await;
}

/// Statements of this database since the reset, the probes' left out.
async fn statements_but_probes(pool: &PgPool) -> i64 {
    statement_totals(pool, ANY_SQL).await.calls - statement_totals(pool, PROBE_SQL).await.calls
}

async fn pressure_leasehold(db: &TestDb, stats: bool, k: usize, work: Duration, round: usize) -> PressureOutcome {
    let pool = db.pool_with(2).await;
    let state = Arc::new(PressureState::default());
    let keys: Vec<String> = (0..k).map(|i| format!("pp-{k}-{round}-{i}")).collect();
    let settings = JobSettings::new(Schedule::Manual).lease(Duration::from_secs(3));
    let jobs = keys
        .iter()
        .map(|key| {
            let state = state.clone();
            job(key, settings.clone(), move |guard: FenceGuard| {
                let state = state.clone();
                async move {
                    state.started();
                    let result = tokio::select! {
                        _ = tokio::time::sleep(work) => Ok(()),
                        _ = guard.cancelled() => {
                            state.cancelled.fetch_add(1, Ordering::SeqCst);
                            Err("cancelled".into())
                        }
                    };
                    state.running.dec();
                    state.finished.fetch_add(1, Ordering::SeqCst);
                    result
                }
            })
            .named("pressure")
        })
        .collect();
    let rt = runtime(pool.clone(), &format!("pressure-{k}-{round}"), None, jobs).await;
    // Let the job loops' first (not-due) claims go through before measuring.
    tokio::time::sleep(Duration::from_millis(300) + Duration::from_millis(k as u64)).await;
    if stats {
        reset_statement_stats(&pool).await;
    }
    let probes = Probes::start(pool.clone(), Duration::from_millis(50), work * 2);
    let t0 = Instant::now();
    *state.t0.lock().unwrap() = Some(t0);
    let triggers = join_all(keys.iter().map(|key| rt.trigger(key))).await;
    assert!(triggers.iter().all(Result::is_ok), "trigger failed");
    let done = wait_for(work + Duration::from_secs(60), POLL, || {
        (state.finished.load(Ordering::SeqCst) >= k).then_some(())
    })
    .await;
    let phase = t0.elapsed();
    let (probe_lat, timed_out) = probes.finish().await;
    let statements = if stats {
        Some(statements_but_probes(&pool).await)
    } else {
        None
    };
    rt.shutdown().await;
    pool.close().await;
    let started = state.delays.lock().unwrap().len();
    if done.is_none() {
        eprintln!("   leasehold K={k}: only {started} of {k} runs finished in time");
    }
    PressureOutcome {
        max_running: state.running.max(),
        started,
        gave_up: k - started,
        cancelled: state.cancelled.load(Ordering::SeqCst),
        start_delays: state.delays.lock().unwrap().clone(),
        probes: probe_lat,
        probes_timed_out: timed_out,
        statements,
        phase,
    }
}

async fn pressure_pinned(
    db: &TestDb,
    stats: bool,
    k: usize,
    work: Duration,
    window: Duration,
    round: usize,
) -> PressureOutcome {
    let pool = db.pool_with(2).await;
    let state = Arc::new(PressureState::default());
    if stats {
        reset_statement_stats(&pool).await;
    }
    let probes = Probes::start(pool.clone(), Duration::from_millis(50), work * 2);
    let t0 = Instant::now();
    *state.t0.lock().unwrap() = Some(t0);
    let jobs: Vec<_> = (0..k)
        .map(|i| {
            let (pool, state) = (pool.clone(), state.clone());
            let lock = fnv32(&format!("pp-pinned-{k}-{round}-{i}"));
            tokio::spawn(async move {
                // Reserve a dedicated connection for the whole job.
                let mut conn = match tokio::time::timeout(window, pool.acquire()).await {
                    Ok(Ok(conn)) => conn,
                    _ => {
                        state.gave_up.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                };
                let acquired: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                    .bind(lock)
                    .fetch_one(&mut *conn)
                    .await
                    .expect("pg_try_advisory_lock");
                if !acquired {
                    state.gave_up.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                state.started();
                tokio::time::sleep(work).await;
                state.running.dec();
                let unlocked: bool = sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
                    .bind(lock)
                    .fetch_one(&mut *conn)
                    .await
                    .expect("pg_advisory_unlock");
                assert!(unlocked, "unlock on the pinned connection");
                drop(conn);
                state.finished.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    for job in jobs {
        let _ = job.await;
    }
    let phase = t0.elapsed();
    let (probe_lat, timed_out) = probes.finish().await;
    let statements = if stats {
        Some(statements_but_probes(&pool).await)
    } else {
        None
    };
    pool.close().await;
    let started = state.delays.lock().unwrap().len();
    PressureOutcome {
        max_running: state.running.max(),
        started,
        gave_up: state.gave_up.load(Ordering::SeqCst),
        cancelled: 0,
        start_delays: state.delays.lock().unwrap().clone(),
        probes: probe_lat,
        probes_timed_out: timed_out,
        statements,
        phase,
    }
}
