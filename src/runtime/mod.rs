//! The runtime: registers jobs, claims them when they are due (by the
//! server clock, once per slot across the fleet), runs them under a lease,
//! heartbeats, cancels on loss, and shuts down cleanly.
//!
//! One task per registered job (its *job loop*: claim, run, release, wait),
//! one heartbeat task per runtime, and one task per run. [`Runtime`] is a
//! cheap, cloneable handle on them; the last handle dropped shuts the
//! runtime down.
//!
//! - `builder.rs`: settings, checks and start;
//! - `job_loop.rs`: claim, run, release, back off;
//! - this file: the handle — trigger, health, shutdown, drop.
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
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared as SharedFuture};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::{CancelReason, Error, Result};
use crate::guard::FenceGuard;
use crate::health::{Degraded, Tracker};
use crate::job::{JobError, JobSettings};
use crate::lease::LeaseStore;
use crate::metrics::RunOutcome;
use crate::tenure::Tenure;

mod builder;
mod job_loop;

pub use builder::RuntimeBuilder;

/// Runs registered jobs on this replica. Build with [`Runtime::builder`];
/// stop with [`Runtime::shutdown`], or by dropping every handle.
///
/// A cheap, cloneable handle: give one to each part of the service that
/// needs it (an HTTP handler that triggers a job, a readiness probe, the
/// signal handler). Any clone may start [`shutdown`](Runtime::shutdown) and
/// every clone that awaits it gets the same report.
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
/// let for_handlers = runtime.clone(); // e.g. into axum's state
/// // ... on SIGTERM:
/// let report = runtime.shutdown().await;
/// println!("released {} leases", report.leases_released);
/// # drop(for_handlers);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Runtime {
    handle: Arc<Handle>,
}

/// What the handles share; dropping the last one shuts the runtime down.
struct Handle {
    shared: Arc<Shared>,
    tasks: Mutex<Option<Tasks>>,
    shutdown: OnceLock<SharedFuture<BoxFuture<'static, ShutdownReport>>>,
}

/// The runtime's tasks, taken by whoever starts the shutdown.
struct Tasks {
    job_loops: Vec<JoinHandle<Option<ShutdownRun>>>,
    heartbeat: JoinHandle<()>,
    stop_heartbeat: CancellationToken,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("holder", &self.handle.shared.holder)
            .field("jobs", &self.handle.shared.jobs.len())
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
    pub(crate) health: Tracker,
    jobs: Vec<Arc<JobEntry>>,
    held: Mutex<HashMap<String, Arc<Tenure>>>,
    stopping: CancellationToken,
    poll_interval: Duration,
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

/// A view of the runtime's health for liveness/readiness probes, computed
/// without a database round trip.
///
/// `healthy` is false exactly when [`degraded`](Health::degraded) names at
/// least one reason. A readiness handler (axum shown; any framework works):
///
/// ```no_run
/// # #[cfg(any())] mod axum_example {
/// use axum::{extract::State, http::StatusCode};
///
/// async fn ready(State(runtime): State<leasehold::Runtime>) -> (StatusCode, String) {
///     let health = runtime.health();
///     if health.healthy {
///         (StatusCode::OK, "ok".into())
///     } else {
///         let reasons: Vec<String> = health.degraded.iter().map(ToString::to_string).collect();
///         (StatusCode::SERVICE_UNAVAILABLE, reasons.join("; "))
///     }
/// }
/// # }
/// ```
///
/// `examples/axum_service.rs` mounts it in a whole service.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// No reason to be degraded: the database answers claims and
    /// heartbeats, runs keep their leases, the pool is clean, and the
    /// runtime is not shutting down.
    pub healthy: bool,
    /// Why not, when not healthy (see [`Degraded`]).
    pub degraded: Vec<Degraded>,
    /// How long ago the database last answered a claim, heartbeat or
    /// release.
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
    pub fn builder(pool: sqlx::PgPool) -> RuntimeBuilder {
        RuntimeBuilder::new(pool)
    }

    fn shared(&self) -> &Shared {
        &self.handle.shared
    }

    /// This replica's holder id (`hostname-<random>` unless overridden).
    pub fn holder(&self) -> &str {
        &self.shared().holder
    }

    /// Fault injection for tests and chaos runs.
    pub fn faults(&self) -> &Faults {
        &self.shared().faults
    }

    /// Makes the job with `key` due now, for the whole fleet: it runs once,
    /// under its lease, on whichever replica claims it first (this one is
    /// woken at once). A trigger that arrives while the job is running may
    /// be absorbed by that run.
    ///
    /// Cancel-safe.
    pub async fn trigger(&self, key: &str) -> Result<()> {
        let shared = self.shared();
        let job = shared
            .jobs
            .iter()
            .find(|j| j.key == key)
            .ok_or_else(|| Error::UnknownJob(key.to_owned()))?;
        shared.store.make_due(key).await?;
        job.wake.notify_one();
        Ok(())
    }

    /// Health for probes, without a database round trip: see [`Health`].
    pub fn health(&self) -> Health {
        let shared = self.shared();
        let shutting_down = shared.stopping.is_cancelled();
        let (degraded, since) = shared.health.read(shutting_down);
        Health {
            healthy: degraded.is_empty(),
            degraded,
            last_database_contact: Some(since),
            running: shared.held.lock().unwrap_or_else(|p| p.into_inner()).len(),
            shutting_down,
        }
    }

    /// Stops claiming, cancels running jobs (reason *shutdown*), waits for
    /// each up to its grace period (then drops it), releases every lease so
    /// other replicas can take over at once, and only then stops the
    /// heartbeat. Returns what happened.
    ///
    /// Any clone may call it, any number of times: the first call starts the
    /// shutdown and every call returns the same report once it is done.
    /// Cancel-safe: the shutdown runs in a task of its own, so dropping this
    /// future does not interrupt it.
    ///
    /// Dropping the last [`Runtime`] handle without calling this starts the
    /// same shutdown in the background (no new claims, runs cancelled for
    /// shutdown, leases released when possible, otherwise left to expire);
    /// call it when you want to wait for the handover to finish.
    pub async fn shutdown(&self) -> ShutdownReport {
        self.handle.start_shutdown().await
    }
}

impl Handle {
    /// Starts the shutdown once; returns the future of its report.
    fn start_shutdown(&self) -> SharedFuture<BoxFuture<'static, ShutdownReport>> {
        self.shutdown
            .get_or_init(|| {
                let shared = self.shared.clone();
                shared.stopping.cancel();
                for tenure in shared.held() {
                    tenure.cancel(CancelReason::Shutdown);
                }
                let tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner()).take();
                let work = shutdown(shared, tasks);
                // In a task of its own, so the handover finishes whoever
                // stops waiting for it.
                let task = match tokio::runtime::Handle::try_current() {
                    Ok(rt) => Some(rt.spawn(work)),
                    Err(_) => None,
                };
                async move {
                    match task {
                        Some(task) => task.await.unwrap_or_default(),
                        None => ShutdownReport::default(),
                    }
                }
                .boxed()
                .shared()
            })
            .clone()
    }
}

impl Drop for Handle {
    /// The last handle is gone: nothing can stop the runtime later, so stop
    /// it now, in the background. Without a Tokio runtime to run the
    /// handover on, the tokens are still cancelled: job loops stop claiming
    /// and runs are cancelled wherever their tasks still run.
    fn drop(&mut self) {
        if self.shutdown.get().is_none() {
            tracing::warn!(holder = %self.shared.holder,
                "leasehold runtime dropped without shutdown(): stopping it in the background \
                 (call and await Runtime::shutdown to wait for the handover)");
            drop(self.start_shutdown());
        }
    }
}

async fn shutdown(shared: Arc<Shared>, tasks: Option<Tasks>) -> ShutdownReport {
    let mut report = ShutdownReport::default();
    let Some(tasks) = tasks else {
        return report;
    };
    for job_loop in tasks.job_loops {
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
    tasks.stop_heartbeat.cancel();
    let _ = tasks.heartbeat.await;
    tracing::info!(holder = %shared.holder, ?report, "leasehold runtime stopped");
    report
}

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
