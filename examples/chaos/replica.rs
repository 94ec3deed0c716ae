//! A replica process: one `Runtime` running the chaos jobs, logging its own
//! view of every run to a file (outside the fence, outside the database).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::str::FromStr;
use std::sync::atomic::{AtomicI64, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold::{Error, FenceGuard, FencedJob, JobError, JobSettings, Runtime, RuntimeBuilder, Schedule};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::args::Args;

/// Microseconds since the Unix epoch on this machine's real clock, even in
/// a replica whose clock libfaketime fakes (`clock.rs`): the system call
/// itself, not libc's `clock_gettime`, which libfaketime replaces. The
/// checker compares these times across processes.
pub fn now_us() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `clock_gettime(CLOCK_REALTIME, &mut ts)` writes one timespec
    // into `ts`, which lives for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clock_gettime,
            libc::CLOCK_REALTIME,
            &mut ts as *mut libc::timespec,
        )
    };
    if rc == 0 {
        return ts.tv_sec * 1_000_000 + ts.tv_nsec / 1_000;
    }
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
        self.write(&line);
    }

    /// An event that is not about a run (`key` `-`, fence and slot 0).
    fn note(&self, kind: &str, holder: &str, detail: &str) {
        let detail = detail.replace(['\t', '\n'], " ");
        self.write(&format!("{}\t{kind}\t-\t0\t{holder}\t0\t{detail}\n", now_us()));
    }

    fn write(&self, line: &str) {
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let _ = file.write_all(line.as_bytes());
    }
}

/// Where a run is: which await the runtime dropped it at, for the
/// `dropped` event (`dropped deadline in begin_fenced`). `begin_fenced`
/// covers taking a connection, the `BEGIN` and the fence statement: a drop
/// there is the one that can leave a connection inside a transaction.
struct Phase(AtomicU8);

impl Phase {
    const NAMES: [&'static str; 7] = [
        "pause",
        "begin_fenced",
        "insert",
        "commit",
        "counter",
        "unfenced",
        "hold",
    ];
    const PAUSE: u8 = 0;
    const BEGIN_FENCED: u8 = 1;
    const INSERT: u8 = 2;
    const COMMIT: u8 = 3;
    const COUNTER: u8 = 4;
    const UNFENCED: u8 = 5;
    const HOLD: u8 = 6;

    fn set(&self, phase: u8) {
        self.0.store(phase, Ordering::Relaxed);
    }

    fn name(&self) -> &'static str {
        Self::NAMES
            .get(usize::from(self.0.load(Ordering::Relaxed)))
            .copied()
            .unwrap_or("?")
    }
}

/// What every chaos job shares.
struct JobConfig {
    /// The pool the runtime itself claims, renews and releases on: a
    /// connection a job leaves inside a transaction is one the runtime's
    /// own statements may land on next (`poison.rs`).
    pool: PgPool,
    period: Duration,
    lease: Duration,
    steps: u32,
    step_pause: Duration,
    /// How long a run waits before its first step (`--body`).
    body: Duration,
    /// The library's default job settings and poll interval
    /// (`--default-settings`).
    default_settings: bool,
    unfenced: bool,
    log: EventLog,
    runs: AtomicU64,
    /// Until when (local µs) the next fenced transaction is to be held open
    /// (`stop-in-fence`, armed by SIGUSR2); 0 when not armed.
    hold_armed_until: AtomicI64,
    /// The replica's `application_name`; a held transaction shows
    /// `<this>-hold` (see [`HOLD_SUFFIX`]).
    application_name: String,
}

/// What a held fenced transaction appends to its `application_name` (with
/// `SET LOCAL`, so it ends with the transaction): the harness's sign in
/// `pg_stat_activity` that the replica is inside a fenced transaction
/// right now, holding its key's `leasehold_fence` row lock.
pub const HOLD_SUFFIX: &str = "-hold";

/// How often each replica's runtime polls for due keys (the checker allows
/// for it when it judges how long a due key waited).
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// The name of the job whose keys (`limited:<i>`, `--limited-jobs`) run
/// under a fleet-wide limit (`--fleet-limit`, set by the orchestrator).
pub const LIMITED_JOB: &str = "limited";

/// The job `chaos:<i>` (or `limited:<i>`, the same runs under the name
/// [`LIMITED_JOB`]): several steps, each a fenced transaction that appends
/// a ledger row, then a fenced column write on its counter row.
struct ChaosJob {
    /// `chaos` or [`LIMITED_JOB`].
    name: &'static str,
    key: String,
    cfg: Arc<JobConfig>,
}

/// Logs `dropped` if the run future is dropped (aborted by the runtime)
/// before it could log its own end, with the reason and the phase it was
/// dropped in (`dropped deadline in begin_fenced`).
struct EndGuard<'a> {
    cfg: &'a JobConfig,
    guard: &'a FenceGuard,
    slot: i64,
    phase: &'a Phase,
    ended: bool,
}

impl Drop for EndGuard<'_> {
    fn drop(&mut self) {
        if !self.ended {
            let reason = self.guard.reason().map(|r| r.to_string()).unwrap_or_default();
            let detail = format!("{reason} in {}", self.phase.name());
            self.cfg.log.event("dropped", self.guard, self.slot, &detail);
        }
    }
}

impl FencedJob for ChaosJob {
    fn name(&self) -> &str {
        self.name
    }

    fn key(&self) -> String {
        self.key.clone()
    }

    fn settings(&self) -> JobSettings {
        if self.cfg.default_settings {
            return JobSettings::new(Schedule::every(self.cfg.period));
        }
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
        let slot = if cfg.default_settings {
            // The schedule slot the run is for (the drill counts slots by
            // it), else its claim's: the lease length is the library's.
            guard
                .slot()
                .unwrap_or_else(|| guard.started_at())
                .timestamp_micros()
                .div_euclid(period_us.max(1))
        } else {
            acquired_us.div_euclid(period_us.max(1))
        };
        let run_id = format!("{}#{}", guard.holder(), cfg.runs.fetch_add(1, Ordering::Relaxed));
        cfg.log.event("start", &guard, slot, &run_id);
        let phase = Phase(AtomicU8::new(Phase::PAUSE));
        let mut end = EndGuard {
            cfg,
            guard: &guard,
            slot,
            phase: &phase,
            ended: false,
        };
        let result = match self.body(&guard).await {
            Ok(()) => self.steps(&guard, slot, &run_id, &phase).await,
            Err(e) => Err(e),
        };
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
    /// The run's body before its steps (`--body`): time spent as a real
    /// job spends it, cancellable.
    async fn body(&self, guard: &FenceGuard) -> Result<(), JobError> {
        if self.cfg.body.is_zero() {
            return Ok(());
        }
        tokio::select! {
            _ = tokio::time::sleep(self.cfg.body) => Ok(()),
            _ = guard.cancelled() => Err("cancelled in its body".into()),
        }
    }

    async fn steps(&self, guard: &FenceGuard, slot: i64, run_id: &str, phase: &Phase) -> Result<(), JobError> {
        let cfg = &self.cfg;
        const LEDGER: &str = "INSERT INTO chaos_ledger (key, fence, run_id, step, holder, slot, fenced)
                              VALUES ($1, $2, $3, $4, $5, $6, $7)";
        for step in 1..=cfg.steps as i32 {
            if step > 1 {
                phase.set(Phase::PAUSE);
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
                phase.set(Phase::UNFENCED);
                ledger.execute(&cfg.pool).await?;
                sqlx::query("UPDATE chaos_counter SET last_step = $1, last_run = $2, last_fence = $3 WHERE key = $4")
                    .bind(step)
                    .bind(run_id)
                    .bind(guard.fence())
                    .bind(guard.key())
                    .execute(&cfg.pool)
                    .await?;
            } else {
                // On the pool the runtime claims and renews on: a run dropped
                // inside begin_fenced is what `begin-drop` aims at.
                phase.set(Phase::BEGIN_FENCED);
                let mut tx = guard.begin_fenced(&cfg.pool).await?; // a stale fence writes nothing
                phase.set(Phase::INSERT);
                ledger.execute(&mut *tx).await?;
                if cfg.take_hold() {
                    phase.set(Phase::HOLD);
                    self.hold(guard, slot, &mut tx).await?;
                }
                phase.set(Phase::COMMIT);
                tx.commit().await?;
                phase.set(Phase::COUNTER);
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

    /// `stop-in-fence`: keeps the fenced transaction open, after its write
    /// and before its commit, for half a lease, marked in
    /// `pg_stat_activity` so that the harness can freeze the process right
    /// here. Logged as a `hold` event. A run cancelled meanwhile gives up
    /// (its transaction rolls back when dropped).
    async fn hold(
        &self,
        guard: &FenceGuard,
        slot: i64,
        tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    ) -> Result<(), JobError> {
        let cfg = &self.cfg;
        let marked = format!("{}{HOLD_SUFFIX}", cfg.application_name);
        sqlx::query("SELECT set_config('application_name', $1, true)")
            .bind(&marked)
            .execute(&mut **tx)
            .await?;
        cfg.log.event("hold", guard, slot, &marked);
        tokio::select! {
            _ = tokio::time::sleep(cfg.lease / 2) => Ok(()),
            _ = guard.cancelled() => Err("cancelled while holding its fenced transaction".into()),
        }
    }
}

impl JobConfig {
    /// Whether this fenced transaction is the one to hold: the first to
    /// get here while armed disarms it.
    fn take_hold(&self) -> bool {
        let until = self.hold_armed_until.swap(0, Ordering::Relaxed);
        until > now_us()
    }
}

fn builder(pool: &PgPool, holder: &str, cfg: &Arc<JobConfig>, (jobs, limited): (usize, usize)) -> RuntimeBuilder {
    let mut builder = Runtime::builder(pool.clone()).holder(holder);
    if !cfg.default_settings {
        builder = builder.poll_interval(POLL_INTERVAL);
    }
    let chaos = (0..jobs).map(|i| ("chaos", format!("chaos:{i}")));
    let limited = (0..limited).map(|i| (LIMITED_JOB, format!("{LIMITED_JOB}:{i}")));
    for (name, key) in chaos.chain(limited) {
        builder = builder.register(ChaosJob {
            name,
            key,
            cfg: cfg.clone(),
        });
    }
    builder
}

/// The `raw-begin` fault, on each SIGUSR1: a plain `BEGIN` on the shared
/// pool. sqlx hands the connection back to the pool with the server inside
/// a transaction that no `Transaction` owns — the state a `begin` dropped
/// in flight leaves (sqlx issue #4393), made deterministic. Logged as a
/// `raw-begin` event with the outcome.
async fn raw_begins(mut usr1: tokio::signal::unix::Signal, pool: PgPool, cfg: Arc<JobConfig>, holder: String) {
    while usr1.recv().await.is_some() {
        let outcome = match sqlx::raw_sql("BEGIN").execute(&pool).await {
            Ok(_) => "ok".to_owned(),
            Err(e) => format!("error {e}"),
        };
        cfg.log.note("raw-begin", &holder, &outcome);
    }
}

/// The `stop-in-fence` fault, on each SIGUSR2: arms the next fenced
/// transaction of any of this replica's runs to be held open (for a period
/// and a lease; an arming nobody takes lapses). Logged as an `arm` note.
async fn arm_holds(mut usr2: tokio::signal::unix::Signal, cfg: Arc<JobConfig>, holder: String) {
    let window = (cfg.period + cfg.lease).as_micros() as i64;
    while usr2.recv().await.is_some() {
        cfg.hold_armed_until.store(now_us() + window, Ordering::Relaxed);
        cfg.log.note("arm", &holder, "hold the next fenced transaction");
    }
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
    // Before the pool and the runtime exist, so that a SIGUSR1 (raw-begin)
    // or SIGUSR2 (stop-in-fence) never meets its default action, which ends
    // the process.
    let usr1 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())?;
    let usr2 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined2())?;
    let application_name = format!("chaos-r{n}");
    let mut options = PgConnectOptions::from_str(url)?
        .database(database)
        .application_name(&application_name);
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
        body: args.body,
        default_settings: args.default_settings,
        unfenced: args.unsafe_unfenced,
        log: EventLog::open(log)?,
        runs: AtomicU64::new(0),
        hold_armed_until: AtomicI64::new(0),
        application_name,
    });
    let holder = format!("r{n}-g{}", args.generation);
    tokio::spawn(raw_begins(usr1, pool.clone(), cfg.clone(), holder.clone()));
    tokio::spawn(arm_holds(usr2, cfg.clone(), holder.clone()));
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut attempts = 0;
    let runtime = loop {
        let start = builder(&pool, &holder, &cfg, (args.jobs, args.limited_jobs))
            .migrate(false)
            .start();
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
