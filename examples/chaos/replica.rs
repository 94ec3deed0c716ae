//! A replica process: one `Runtime` running the chaos jobs, logging its own
//! view of every run to a file (outside the fence, outside the database).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold::{Error, FenceGuard, FencedJob, JobError, JobSettings, Runtime, RuntimeBuilder, Schedule};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::args::Args;

/// Microseconds since the Unix epoch on this machine's clock.
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// The replica's own record of its runs: one tab-separated line per event,
/// `unix_us kind key fence holder slot detail`, appended and flushed at once
/// so a SIGKILL loses nothing already written.
pub struct EventLog {
    file: Mutex<File>,
}

impl EventLog {
    fn open(path: &std::path::Path) -> std::io::Result<EventLog> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(EventLog { file: Mutex::new(file) })
    }

    fn event(&self, kind: &str, guard: &FenceGuard, slot: i64, detail: &str) {
        let detail = detail.replace(['\t', '\n'], " ");
        let line = format!(
            "{}\t{kind}\t{}\t{}\t{}\t{slot}\t{detail}\n",
            now_us(),
            guard.key(),
            guard.fence(),
            guard.holder()
        );
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let _ = file.write_all(line.as_bytes());
    }
}

/// What every chaos job shares.
struct JobConfig {
    pool: PgPool,
    period: Duration,
    lease: Duration,
    steps: u32,
    step_pause: Duration,
    unfenced: bool,
    log: EventLog,
    runs: AtomicU64,
}

/// The job `chaos:<i>`: several steps, each a fenced transaction that
/// appends a ledger row, then a fenced column write on its counter row.
struct ChaosJob {
    key: String,
    cfg: Arc<JobConfig>,
}

/// Logs `dropped` if the run future is dropped (aborted by the runtime)
/// before it could log its own end.
struct EndGuard<'a> {
    cfg: &'a JobConfig,
    guard: &'a FenceGuard,
    slot: i64,
    ended: bool,
}

impl Drop for EndGuard<'_> {
    fn drop(&mut self) {
        if !self.ended {
            let reason = self.guard.reason().map(|r| r.to_string()).unwrap_or_default();
            self.cfg.log.event("dropped", self.guard, self.slot, &reason);
        }
    }
}

impl FencedJob for ChaosJob {
    fn name(&self) -> &str {
        "chaos"
    }

    fn key(&self) -> String {
        self.key.clone()
    }

    fn settings(&self) -> JobSettings {
        JobSettings::new(Schedule::every(self.cfg.period))
            .lease(self.cfg.lease)
            .grace(Duration::from_millis(300))
            .retry(Duration::from_millis(200), Duration::from_secs(1))
    }

    async fn run(&self, guard: FenceGuard) -> Result<(), JobError> {
        let cfg = &self.cfg;
        // The slot this run serves: the server time of the claim (the lease
        // was granted for `lease` from then), over the period — what the
        // runtime itself uses to compute the next slot.
        let lease = chrono::Duration::from_std(cfg.lease).unwrap_or_default();
        let acquired_us = (guard.expires_at() - lease).timestamp_micros();
        let period_us = cfg.period.as_micros() as i64;
        let slot = acquired_us.div_euclid(period_us.max(1));
        let run_id = format!("{}#{}", guard.holder(), cfg.runs.fetch_add(1, Ordering::Relaxed));
        cfg.log.event("start", &guard, slot, &run_id);
        let mut end = EndGuard {
            cfg,
            guard: &guard,
            slot,
            ended: false,
        };
        let result = self.steps(&guard, slot, &run_id).await;
        end.ended = true;
        match &result {
            Ok(()) => cfg.log.event("done", &guard, slot, &run_id),
            Err(e) => {
                let kind = match e.downcast_ref::<Error>() {
                    Some(Error::StaleFence { .. }) => "stale",
                    _ if guard.is_cancelled() => "cancelled",
                    _ => "failed",
                };
                let reason = guard.reason().map(|r| r.to_string()).unwrap_or_default();
                cfg.log.event(kind, &guard, slot, &format!("{reason} {e}"));
            }
        }
        result
    }
}

impl ChaosJob {
    async fn steps(&self, guard: &FenceGuard, slot: i64, run_id: &str) -> Result<(), JobError> {
        let cfg = &self.cfg;
        const LEDGER: &str = "INSERT INTO chaos_ledger (key, fence, run_id, step, holder, slot, fenced)
                              VALUES ($1, $2, $3, $4, $5, $6, $7)";
        for step in 1..=cfg.steps as i32 {
            if step > 1 {
                tokio::select! {
                    _ = tokio::time::sleep(cfg.step_pause) => {}
                    _ = guard.cancelled() => return Err(format!("cancelled before step {step}").into()),
                }
            }
            let ledger = sqlx::query(LEDGER)
                .bind(guard.key())
                .bind(guard.fence())
                .bind(run_id)
                .bind(step)
                .bind(guard.holder())
                .bind(slot)
                .bind(!cfg.unfenced);
            if cfg.unfenced {
                // --unsafe-unfenced: the same effects with plain statements.
                // The fence is still recorded, so the checker can see what
                // a stale run managed to write.
                ledger.execute(&cfg.pool).await?;
                sqlx::query("UPDATE chaos_counter SET last_step = $1, last_run = $2, last_fence = $3 WHERE key = $4")
                    .bind(step)
                    .bind(run_id)
                    .bind(guard.fence())
                    .bind(guard.key())
                    .execute(&cfg.pool)
                    .await?;
            } else {
                let mut tx = guard.begin_fenced(&cfg.pool).await?; // a stale fence writes nothing
                ledger.execute(&mut *tx).await?;
                tx.commit().await?;
                guard
                    .update("chaos_counter")
                    .set("last_step", step)
                    .set("last_run", run_id.to_owned())
                    .filter("key", guard.key().to_owned())
                    .execute(&cfg.pool)
                    .await?;
            }
        }
        Ok(())
    }
}

fn builder(pool: &PgPool, holder: &str, cfg: &Arc<JobConfig>, jobs: usize) -> RuntimeBuilder {
    let mut builder = Runtime::builder(pool.clone())
        .holder(holder)
        .poll_interval(Duration::from_secs(1));
    for i in 0..jobs {
        builder = builder.register(ChaosJob {
            key: format!("chaos:{i}"),
            cfg: cfg.clone(),
        });
    }
    builder
}

/// Replica mode: run until SIGTERM (graceful shutdown) or SIGKILL.
pub async fn main(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let n = args.replica.unwrap_or(0);
    let url = args
        .database_url
        .as_deref()
        .ok_or("--database-url is required in replica mode")?;
    let database = args
        .database
        .as_deref()
        .ok_or("--database is required in replica mode")?;
    let log = args.log.as_deref().ok_or("--log is required in replica mode")?;
    let mut options = PgConnectOptions::from_str(url)?
        .database(database)
        .application_name(&format!("chaos-r{n}"));
    if let Some(port) = args.via_port {
        options = options.host("127.0.0.1").port(port);
    }
    // Lazy: a replica restarted while PostgreSQL is down still starts.
    // No ping before each acquire (a common production setting): a run
    // woken from a pause then sends its next write at once, before the
    // runtime can drop it — the stale writes the fence must stop.
    let pool = PgPoolOptions::new()
        .max_connections(5)
        .acquire_timeout(Duration::from_secs(10))
        .test_before_acquire(false)
        .connect_lazy_with(options);
    let cfg = Arc::new(JobConfig {
        pool: pool.clone(),
        period: args.period,
        lease: args.lease,
        steps: args.steps,
        step_pause: args.step_pause,
        unfenced: args.unsafe_unfenced,
        log: EventLog::open(log)?,
        runs: AtomicU64::new(0),
    });
    let holder = format!("r{n}-g{}", args.generation);
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut attempts = 0;
    let runtime = loop {
        let start = builder(&pool, &holder, &cfg, args.jobs).migrate(false).start();
        tokio::select! {
            started = start => match started {
                Ok(runtime) => break runtime,
                Err(e) if attempts < 120 => {
                    attempts += 1;
                    eprintln!("replica {holder}: start failed ({e}); retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => return Err(e.into()),
            },
            _ = terminate.recv() => return Ok(()),
        }
    };
    eprintln!("replica {holder} (pid {}) started", std::process::id());
    terminate.recv().await;
    let report = runtime.shutdown().await;
    eprintln!("replica {holder} stopped: {report:?}");
    Ok(())
}
