//! The runtime: registers jobs, claims them when they are due (by the
//! server clock, once per slot across the fleet), runs them under a lease,
//! heartbeats, cancels on loss, and shuts down cleanly.
//!
//! One task per registered job (its *job loop*: claim, run, release, wait),
//! one heartbeat task per runtime, and one task per run.
//!
//! # The local safety deadline, and why its margin is safe
//!
//! Each claim or renewal returns the time left on the lease *as measured by
//! the server* after it wrote the expiry. The replica adds that to the
//! instant it **sent** the statement, on its own monotonic clock. The
//! server's expiry cannot come before that instant in real time, whatever
//! the two wall clocks say — only the clocks' *rates* matter, never their
//! values. The margin (default lease/10) covers a difference in rate (NTP
//! slews clocks by at most 0.05 %, far below 10 %) and the time it takes to
//! stop a run. If renewals keep failing, the run is cancelled and dropped at
//! that deadline, before any other replica can claim the lease.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::FutureExt;
use futures::future::BoxFuture;
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::error::{CancelReason, Error, Result};
use crate::guard::FenceGuard;
use crate::heartbeat;
use crate::job::{FencedJob, JobError, JobSettings};
use crate::lease::{Claim, Due, LeaseStore, NextDue};
use crate::metrics::{self, RunOutcome};
use crate::schedule::Schedule;
use crate::tenure::Tenure;
use crate::validate;

/// Runs registered jobs on this replica. Build with [`Runtime::builder`];
/// stop with [`Runtime::shutdown`].
///
/// ```no_run
/// # use leasehold::{FenceGuard, FencedJob, JobError, JobSettings, Schedule};
/// # struct Nightly;
/// # impl FencedJob for Nightly {
/// #     fn name(&self) -> &str { "nightly" }
/// #     fn settings(&self) -> JobSettings { JobSettings::new(Schedule::Manual) }
/// #     async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> { Ok(()) }
/// # }
/// # async fn demo(pool: sqlx::PgPool) -> leasehold::Result<()> {
/// let runtime = leasehold::Runtime::builder(pool).register(Nightly).start().await?;
/// // ... on SIGTERM:
/// let report = runtime.shutdown().await;
/// println!("released {} leases", report.leases_released);
/// # Ok(()) }
/// ```
pub struct Runtime {
    shared: Arc<Shared>,
    job_loops: Vec<JoinHandle<Option<ShutdownRun>>>,
    heartbeat: JoinHandle<()>,
    stop_heartbeat: CancellationToken,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("holder", &self.shared.holder)
            .field("jobs", &self.shared.jobs.len())
            .finish()
    }
}

/// Builds a [`Runtime`]: register jobs, adjust settings, then
/// [`start`](RuntimeBuilder::start). Every setting is checked at `start`,
/// before anything runs.
#[must_use = "a builder does nothing until `.start()`"]
pub struct RuntimeBuilder {
    pool: PgPool,
    holder: Option<String>,
    migrate: bool,
    poll_interval: Duration,
    jobs: Vec<JobEntry>,
    #[cfg(feature = "prometheus")]
    prometheus: Option<String>,
}

impl std::fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("holder", &self.holder)
            .field("jobs", &self.jobs.len())
            .finish()
    }
}

type RunFn = Arc<dyn Fn(FenceGuard) -> BoxFuture<'static, Result<(), JobError>> + Send + Sync>;

struct JobEntry {
    name: String,
    key: String,
    settings: JobSettings,
    run: RunFn,
    wake: tokio::sync::Notify,
}

/// State shared by the runtime handle, its job loops and its heartbeat.
pub(crate) struct Shared {
    pub(crate) holder: String,
    pub(crate) store: LeaseStore,
    pub(crate) faults: Faults,
    jobs: Vec<Arc<JobEntry>>,
    held: Mutex<HashMap<String, Arc<Tenure>>>,
    stopping: CancellationToken,
    poll_interval: Duration,
    health_window: Duration,
    last_ok: Mutex<Option<Instant>>,
    started: Instant,
}

impl Shared {
    /// The tenures of the runs in progress.
    pub(crate) fn held(&self) -> Vec<Arc<Tenure>> {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Notes a successful round trip to the database (for `health`).
    pub(crate) fn database_ok(&self) {
        *self.last_ok.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }
}

/// Fault injection for tests and chaos runs, reached through
/// [`Runtime::faults`]. Nothing here is needed in production.
#[derive(Debug, Default)]
pub struct Faults {
    stall_heartbeats: AtomicBool,
    partitioned: AtomicBool,
}

impl Faults {
    /// While `true`, heartbeat ticks send nothing, as if the replica were
    /// paused or partitioned from the database: runs then stop at their
    /// local deadline.
    pub fn stall_heartbeats(&self, stalled: bool) {
        self.stall_heartbeats.store(stalled, Ordering::SeqCst);
    }

    pub(crate) fn heartbeats_stalled(&self) -> bool {
        self.stall_heartbeats.load(Ordering::SeqCst) || self.partitioned()
    }

    /// While `true`, the runtime sends nothing at all — no heartbeat, no
    /// claim, no release — as if a partition cut it off from the database.
    /// Runs in progress carry on (their own queries are not affected) until
    /// their local deadline stops them.
    pub fn partition(&self, partitioned: bool) {
        self.partitioned.store(partitioned, Ordering::SeqCst);
    }

    pub(crate) fn partitioned(&self) -> bool {
        self.partitioned.load(Ordering::SeqCst)
    }
}

/// What [`Runtime::shutdown`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Runs in progress at shutdown that still returned `Ok` within grace.
    pub runs_finished: usize,
    /// Runs in progress at shutdown that were cancelled (returned an error
    /// or were dropped after the grace period).
    pub runs_cancelled: usize,
    /// Leases released, so other replicas can claim them at once.
    pub leases_released: usize,
}

/// A cheap view of the runtime's health, for liveness/readiness probes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// The database answered recently and the runtime is not shutting down.
    pub healthy: bool,
    /// How long ago the database last answered a claim or a heartbeat.
    pub last_database_contact: Option<Duration>,
    /// Runs in progress on this replica.
    pub running: usize,
    /// Whether shutdown has begun.
    pub shutting_down: bool,
}

/// The outcome of the run that was in progress when shutdown began.
struct ShutdownRun {
    outcome: RunOutcome,
    released: bool,
}

impl Runtime {
    /// A builder over `pool`. The pool can be small: no connection is held
    /// while a job runs.
    pub fn builder(pool: PgPool) -> RuntimeBuilder {
        RuntimeBuilder {
            pool,
            holder: None,
            migrate: true,
            poll_interval: Duration::from_secs(5),
            jobs: Vec::new(),
            #[cfg(feature = "prometheus")]
            prometheus: None,
        }
    }

    /// This replica's holder id (`hostname-<random>` unless overridden).
    pub fn holder(&self) -> &str {
        &self.shared.holder
    }

    /// Fault injection for tests and chaos runs.
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    /// Makes the job with `key` due now, for the whole fleet: it runs once,
    /// under its lease, on whichever replica claims it first (this one is
    /// woken at once). A trigger that arrives while the job is running may
    /// be absorbed by that run.
    ///
    /// Cancel-safe.
    pub async fn trigger(&self, key: &str) -> Result<()> {
        let job = self
            .shared
            .jobs
            .iter()
            .find(|j| j.key == key)
            .ok_or_else(|| Error::UnknownJob(key.to_owned()))?;
        self.shared.store.make_due(key).await?;
        job.wake.notify_one();
        Ok(())
    }

    /// Health for probes, without a database round trip: healthy while the
    /// database answered within the last three heartbeat or poll intervals.
    pub fn health(&self) -> Health {
        let last = *self.shared.last_ok.lock().unwrap_or_else(|p| p.into_inner());
        let ago = last.map(|t| t.elapsed());
        let shutting_down = self.shared.stopping.is_cancelled();
        let recent = ago.is_some_and(|a| a <= self.shared.health_window)
            // Just started: give the first claims time to answer.
            || (last.is_none() && self.shared.started.elapsed() <= self.shared.health_window);
        Health {
            healthy: recent && !shutting_down,
            last_database_contact: ago,
            running: self.shared.held.lock().unwrap_or_else(|p| p.into_inner()).len(),
            shutting_down,
        }
    }

    /// Stops claiming, cancels running jobs (reason *shutdown*), waits for
    /// each up to its grace period (then drops it), releases every lease so
    /// other replicas can take over at once, and only then stops the
    /// heartbeat. Returns what happened.
    ///
    /// Not cancel-safe: dropping it midway leaves leases to expire on their
    /// own.
    pub async fn shutdown(self) -> ShutdownReport {
        self.shared.stopping.cancel();
        for tenure in self.shared.held() {
            tenure.cancel(CancelReason::Shutdown);
        }
        let mut report = ShutdownReport::default();
        for job_loop in self.job_loops {
            match job_loop.await {
                Ok(Some(run)) => {
                    if run.outcome == RunOutcome::Succeeded {
                        report.runs_finished += 1;
                    } else {
                        report.runs_cancelled += 1;
                    }
                    report.leases_released += usize::from(run.released);
                }
                Ok(None) => {}
                Err(e) => tracing::error!(error = %e, "a job loop ended abnormally during shutdown"),
            }
        }
        self.stop_heartbeat.cancel();
        let _ = self.heartbeat.await;
        tracing::info!(holder = %self.shared.holder, ?report, "leasehold runtime stopped");
        report
    }
}

impl RuntimeBuilder {
    /// Registers a job. Its key must be unique in this runtime; its settings
    /// are checked at [`start`](RuntimeBuilder::start).
    pub fn register<J: FencedJob>(mut self, job: J) -> Self {
        let job = Arc::new(job);
        let (name, key, settings) = (job.name().to_owned(), job.key(), job.settings());
        let run: RunFn = Arc::new(move |guard| {
            let job = job.clone();
            async move { job.run(guard).await }.boxed()
        });
        self.jobs.push(JobEntry {
            name,
            key,
            settings,
            run,
            wake: tokio::sync::Notify::new(),
        });
        self
    }

    /// Overrides the holder id (default `hostname-<random>`). It must be
    /// unique per process: two runtimes with one holder id would share
    /// leases.
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = Some(holder.into());
        self
    }

    /// Whether to run [`crate::migrate`] at start (default `true`). When
    /// `false`, a missing or outdated schema fails `start` with an error
    /// naming the fix.
    pub fn migrate(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
        self
    }

    /// How often an idle job loop re-reads its lease row (default 5 s): it
    /// bounds how soon other replicas notice a trigger or a released lease.
    /// Due times themselves are waited for exactly.
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every;
        self
    }

    /// Serves every leasehold metric for Prometheus on `addr` (e.g.
    /// `"127.0.0.1:9464"`; keep it on loopback or a private interface),
    /// installing the process-wide `metrics` recorder. Skip this if your
    /// service installs its own recorder: leasehold's metrics go to it.
    /// Fails at [`start`](RuntimeBuilder::start) if the address is bad or
    /// the port is taken.
    #[cfg(feature = "prometheus")]
    pub fn prometheus(mut self, addr: impl Into<String>) -> Self {
        self.prometheus = Some(addr.into());
        self
    }

    /// Checks every setting, migrates (or checks the schema), registers each
    /// job's schedule, and starts the job loops and the heartbeat.
    ///
    /// Nothing is started if anything is wrong: duplicate keys, a lease out
    /// of range, a heartbeat at or above half the lease, a margin that
    /// leaves no time to run, a bad schedule.
    pub async fn start(self) -> Result<Runtime> {
        let holder = match self.holder {
            Some(holder) => holder,
            None => default_holder(),
        };
        validate::holder(&holder)?;
        if self.poll_interval < Duration::from_millis(10) {
            return Err(Error::invalid(
                "poll interval",
                self.poll_interval,
                "it must be at least 10ms",
            ));
        }
        for (i, job) in self.jobs.iter().enumerate() {
            validate::key(&job.key)?;
            job.settings.validate(&job.key)?;
            if self.jobs[..i].iter().any(|other| other.key == job.key) {
                return Err(Error::invalid(
                    "job key",
                    &job.key,
                    "it is registered twice; give each instance its own key (e.g. \"reconcile:{tenant}\")",
                ));
            }
        }
        #[cfg(feature = "prometheus")]
        if let Some(addr) = &self.prometheus {
            crate::exporter::install(addr)?;
        }
        if self.migrate {
            crate::migrate(&self.pool).await?;
        } else {
            crate::check_schema(&self.pool).await?;
        }
        let store = LeaseStore::new(self.pool);
        let server_now = store.server_now().await?;
        for job in &self.jobs {
            store
                .register(&job.key, &holder, first_due(&job.settings.schedule, server_now))
                .await?;
            metrics::prime(&job.name);
        }
        let tick = self
            .jobs
            .iter()
            .map(|j| j.settings.heartbeat_interval())
            .min()
            .unwrap_or(Duration::from_secs(20));
        let shared = Arc::new(Shared {
            holder,
            store,
            faults: Faults::default(),
            jobs: self.jobs.into_iter().map(Arc::new).collect(),
            held: Mutex::new(HashMap::new()),
            stopping: CancellationToken::new(),
            poll_interval: self.poll_interval,
            health_window: 3 * tick.max(self.poll_interval),
            last_ok: Mutex::new(Some(Instant::now())),
            started: Instant::now(),
        });
        let stop_heartbeat = CancellationToken::new();
        let heartbeat = tokio::spawn(heartbeat::run(shared.clone(), tick, stop_heartbeat.clone()));
        let job_loops = shared
            .jobs
            .iter()
            .map(|job| tokio::spawn(job_loop(shared.clone(), job.clone())))
            .collect();
        tracing::info!(holder = %shared.holder, jobs = shared.jobs.len(), "leasehold runtime started");
        Ok(Runtime {
            shared,
            job_loops,
            heartbeat,
            stop_heartbeat,
        })
    }
}

/// `hostname-<random>`: the host for diagnosis, the suffix so that a
/// restart is a new holder.
fn default_holder() -> String {
    let host = hostname::get()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "replica".to_owned());
    let host: String = host.chars().take(200).collect();
    format!("{host}-{:08x}", rand::random::<u32>())
}

/// When a job that has never run is first due: its first slot, so a
/// nightly job does not run at deploy time; never for a manual job.
fn first_due(schedule: &Schedule, server_now: DateTime<Utc>) -> DateTime<Utc> {
    schedule.next_after(server_now).unwrap_or(never())
}

/// The due time of a job that only runs when triggered (year 9999).
fn never() -> DateTime<Utc> {
    DateTime::from_timestamp(253_402_214_400, 0).unwrap_or_default()
}

/// The job loop: wait until due, claim, run, release, repeat — until
/// shutdown. Returns the outcome of the run that shutdown interrupted, if
/// any.
async fn job_loop(shared: Arc<Shared>, job: Arc<JobEntry>) -> Option<ShutdownRun> {
    let mut failures: u32 = 0;
    let mut claim_errors: u32 = 0;
    loop {
        if shared.stopping.is_cancelled() {
            return None;
        }
        if shared.faults.partitioned() {
            tokio::select! {
                _ = tokio::time::sleep(shared.poll_interval) => continue,
                _ = shared.stopping.cancelled() => return None,
            }
        }
        let sent = Instant::now();
        let claim = shared
            .store
            .claim_run(&job.key, &shared.holder, job.settings.lease, Due::Scheduled)
            .await;
        let wait = match claim {
            Ok(Claim::Acquired(lease)) => {
                shared.database_ok();
                claim_errors = 0;
                metrics::claim(&job.name, "acquired");
                let tenure = Arc::new(Tenure::new(
                    &job.name,
                    lease,
                    sent,
                    job.settings.lease,
                    job.settings.margin(),
                    shared.store.clone(),
                ));
                let (outcome, released) = run_once(&shared, &job, &tenure, &mut failures).await;
                if tenure.reason() == Some(CancelReason::Shutdown) || shared.stopping.is_cancelled() {
                    return Some(ShutdownRun { outcome, released });
                }
                continue;
            }
            Ok(Claim::HeldElsewhere { current }) => {
                shared.database_ok();
                claim_errors = 0;
                metrics::claim(&job.name, "held_elsewhere");
                current.map(|c| c.remaining()).unwrap_or(shared.poll_interval)
            }
            Ok(Claim::NotDue { current }) => {
                shared.database_ok();
                claim_errors = 0;
                metrics::claim(&job.name, "not_due");
                current.due_in()
            }
            Err(error) => {
                claim_errors += 1;
                metrics::claim(&job.name, "error");
                tracing::warn!(job = %job.name, key = %job.key, %error, "claim failed; retrying");
                job.settings.backoff(claim_errors)
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait.min(shared.poll_interval)) => {}
            _ = job.wake.notified() => {}
            _ = shared.stopping.cancelled() => return None,
        }
    }
}

/// Runs one tenure to its end and releases it. Returns the outcome and
/// whether the lease was released.
async fn run_once(shared: &Shared, job: &JobEntry, tenure: &Arc<Tenure>, failures: &mut u32) -> (RunOutcome, bool) {
    shared
        .held
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(job.key.clone(), tenure.clone());
    metrics::held(&job.name, 1.0);
    tracing::info!(job = %job.name, key = %job.key, holder = %tenure.holder, fence = tenure.fence, "lease acquired; run starting");
    let span = tracing::info_span!("leasehold.run", job = %job.name, key = %job.key, holder = %tenure.holder, fence = tenure.fence);
    let started = Instant::now();
    let mut handle = tokio::spawn((job.run)(FenceGuard::new(tenure.clone())).instrument(span));

    let finished = loop {
        tokio::select! {
            result = &mut handle => break Some(result),
            _ = tenure.token().cancelled() => {
                // A run past its deadline gets no grace: the lease may be
                // claimable elsewhere soon.
                let grace = if tenure.reason() == Some(CancelReason::Deadline) { Duration::ZERO } else { job.settings.grace };
                match tokio::time::timeout(grace, &mut handle).await {
                    Ok(result) => break Some(result),
                    Err(_) => {
                        handle.abort();
                        tracing::error!(job = %job.name, key = %job.key, fence = tenure.fence, ?grace,
                            "cancelled run did not return within its grace period; dropped");
                        break None;
                    }
                }
            }
            _ = tokio::time::sleep_until(tenure.deadline()) => {
                if Instant::now() >= tenure.deadline() {
                    tenure.lose(CancelReason::Deadline);
                }
            }
            _ = shared.stopping.cancelled(), if !tenure.token().is_cancelled() => {
                tenure.cancel(CancelReason::Shutdown);
            }
        }
    };

    let outcome = match finished {
        Some(Ok(Ok(()))) => RunOutcome::Succeeded,
        _ if tenure.reason().is_some_and(|r| r != CancelReason::Shutdown) => RunOutcome::Cancelled,
        Some(Ok(Err(error))) => {
            let fencing = error.downcast_ref::<Error>().is_some_and(Error::is_fencing);
            if fencing || tenure.reason().is_some() {
                RunOutcome::Cancelled
            } else {
                tracing::error!(job = %job.name, key = %job.key, fence = tenure.fence, %error, "run failed");
                RunOutcome::Failed
            }
        }
        Some(Err(join)) if join.is_panic() => {
            let panic = join.into_panic();
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(job = %job.name, key = %job.key, fence = tenure.fence, %message, "run panicked");
            RunOutcome::Panicked
        }
        Some(Err(_)) | None => RunOutcome::Cancelled,
    };
    let next = match outcome {
        RunOutcome::Succeeded => {
            *failures = 0;
            NextDue::At(job.settings.schedule.next_after(tenure.acquired_at).unwrap_or(never()))
        }
        RunOutcome::Failed | RunOutcome::Panicked => {
            *failures += 1;
            NextDue::After(job.settings.backoff(*failures))
        }
        // Not done: still due, so the next claimer runs it again at once.
        RunOutcome::Cancelled => NextDue::Unchanged,
    };
    metrics::run_finished(&job.name, outcome, started.elapsed());

    // Stop renewing before releasing, so a renewal can never race the release.
    shared.held.lock().unwrap_or_else(|p| p.into_inner()).remove(&job.key);
    metrics::held(&job.name, -1.0);
    let released = if shared.faults.partitioned() {
        tracing::warn!(job = %job.name, key = %job.key, "partitioned (fault injection): release skipped, the lease will expire");
        false
    } else {
        let release = shared.store.finish(&job.key, &tenure.holder, tenure.fence, next);
        match tokio::time::timeout(RELEASE_TIMEOUT, release).await {
            Ok(Ok(released)) => {
                shared.database_ok();
                released
            }
            Ok(Err(error)) => {
                tracing::warn!(job = %job.name, key = %job.key, %error, "release failed; the lease will expire on its own");
                false
            }
            Err(_) => {
                tracing::warn!(job = %job.name, key = %job.key, "release timed out; the lease will expire on its own");
                false
            }
        }
    };
    tracing::info!(job = %job.name, key = %job.key, fence = tenure.fence, outcome = outcome.as_str(), released,
        "run ended");
    (outcome, released)
}

/// How long a release may take before the lease is left to expire.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Hidden helpers for code generated by `#[derive(FencedJob)]`.
#[doc(hidden)]
pub mod __private {
    use crate::schedule::Schedule;

    /// A cron schedule the derive already validated at compile time.
    pub fn cron(expr: &'static str) -> Schedule {
        match Schedule::cron(expr) {
            Ok(schedule) => schedule,
            Err(e) => {
                panic!("leasehold-macros accepted {expr:?} but leasehold rejects it ({e}): use matching versions")
            }
        }
    }
}
