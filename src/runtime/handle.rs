//! [`Runtime`], the handle: trigger, add and remove jobs, health, shutdown,
//! and the shutdown a dropped last handle starts.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared as SharedFuture};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::state::{JobEntry, Shared, duplicate_key};
use super::unregister;
use crate::cancel::CancelReason;
use crate::error::{Error, Result};
use crate::health::Degraded;
use crate::job::FencedJob;
use crate::lease::{LeaseStore, Pause, Resumed, Target, Triggered};
use crate::metrics;
use crate::operator::Operator;
use crate::schedule::first_due;

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

/// The runtime's services, taken by whoever starts the shutdown.
pub(crate) struct Tasks {
    pub(crate) scheduler: JoinHandle<()>,
    pub(crate) finisher: JoinHandle<()>,
    pub(crate) stop_finisher: CancellationToken,
    pub(crate) heartbeat: JoinHandle<()>,
    pub(crate) stop_heartbeat: CancellationToken,
    pub(crate) listener: Option<JoinHandle<()>>,
    pub(crate) stop_listener: CancellationToken,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("holder", &self.handle.shared.holder)
            .field("jobs", &self.handle.shared.registry().len())
            .finish()
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
/// least one reason. Failing claims and heartbeats become a reason only
/// after [`RuntimeBuilder::degraded_after`](crate::RuntimeBuilder::degraded_after)
/// failures in a row (default 3): every replica shares one database, so a
/// single network blip must not take the whole fleet out of the load
/// balancer at once. A readiness handler (axum shown; any framework works):
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
    /// Runs in progress on this replica: job bodies running (a run whose
    /// body ended and whose release is out no longer counts).
    pub running: usize,
    /// At most this many runs at once on this replica
    /// ([`RuntimeBuilder::max_concurrent_runs`](crate::RuntimeBuilder::max_concurrent_runs)).
    pub max_concurrent_runs: usize,
    /// The runs in progress here of each job or kind limited on this
    /// replica ([`RuntimeBuilder::max_concurrent_runs_of`](crate::RuntimeBuilder::max_concurrent_runs_of)),
    /// by name: at its limit, its other due keys wait.
    pub limited: Vec<LimitedRuns>,
    /// The fleet-wide limits in force (by job or kind name: at most this
    /// many runs at once across the fleet), as this replica's last poll
    /// read them ([`Controls::set_limit`](crate::store::Controls::set_limit)).
    /// `leasehold limit list` shows the runs in progress and the keys
    /// waiting against each.
    pub fleet_limits: Vec<(String, u32)>,
    /// Keys registered on this replica.
    pub registered: usize,
    /// Whether `LISTEN` wake-ups reach this replica right now; when not, it
    /// polls every poll interval (see
    /// [`RuntimeBuilder::listen`](crate::RuntimeBuilder::listen)).
    pub listening: bool,
    /// Whether shutdown has begun.
    pub shutting_down: bool,
}

/// The runs in progress of a job or kind limited on one replica, in
/// [`Health::limited`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitedRuns {
    /// The job's or kind's name.
    pub name: String,
    /// Its runs in progress here.
    pub running: usize,
    /// At most this many at once here.
    pub limit: usize,
}

impl Runtime {
    /// The handle on a started runtime's services.
    pub(crate) fn started(shared: Arc<Shared>, tasks: Tasks) -> Runtime {
        Runtime {
            handle: Arc::new(Handle {
                shared,
                tasks: Mutex::new(Some(tasks)),
                shutdown: OnceLock::new(),
            }),
        }
    }

    fn shared(&self) -> &Shared {
        &self.handle.shared
    }

    /// This replica's holder id (`hostname-<random>` unless overridden).
    pub fn holder(&self) -> &str {
        &self.shared().holder
    }

    /// The server's WAL timeline as this runtime's latest poll read it (the
    /// `leasehold_server_timeline` gauge of this runtime alone), 0 before
    /// its first poll; for tests (feature `test-util`).
    #[cfg(feature = "test-util")]
    pub fn server_timeline(&self) -> i64 {
        self.shared().timeline()
    }

    /// Fault injection for tests and chaos runs (feature `test-util`).
    #[cfg(feature = "test-util")]
    pub fn faults(&self) -> &super::faults::Faults {
        &self.shared().faults
    }

    /// The operator this runtime acts as: its holder id, so its triggers,
    /// pauses and resumes are in the history like any operator's.
    fn operator(&self) -> Result<Operator> {
        let shared = self.shared();
        Operator::new(shared.store.clone(), shared.holder.clone())
    }

    /// Makes the job with `key` due now, for the whole fleet: it runs once,
    /// under its lease, on whichever replica claims it first (this one is
    /// woken at once, the others by notification). A trigger that arrives
    /// while the job is running leads to one more run right after that run
    /// (several triggers during one run make one run); a scheduled job then
    /// goes on with its schedule. A paused key stays paused: it runs once
    /// resumed (logged). Recorded in the key's history as
    /// [`Operator::trigger`] does, with this runtime's holder id as the
    /// actor.
    ///
    /// Cancel-safe as [`Operator::trigger`].
    pub async fn trigger(&self, key: &str) -> Result<()> {
        let shared = self.shared();
        if shared.registry().job(key).is_none() {
            return Err(Error::UnknownJob(key.to_owned()));
        }
        if self.operator()?.trigger(key).await? == Triggered::Paused {
            tracing::info!(key, "triggered a paused key: it is due, and runs once resumed");
        }
        // Removed meanwhile: nothing to wake here.
        shared.wake_key(key);
        Ok(())
    }

    /// Pauses `target` for the whole fleet, durably, as
    /// [`Operator::pause`] does (paused by this replica's holder id, and
    /// recorded in the history): no replica claims its keys until
    /// [`Runtime::resume`]. Runs in progress finish, unless `cancel`: then
    /// each is cancelled at its next renewal (reason
    /// [`CancelReason::Paused`]) and released. Cancel-safe as
    /// [`Operator::pause`].
    ///
    /// ```no_run
    /// # async fn demo(runtime: leasehold::Runtime) -> leasehold::Result<()> {
    /// use leasehold::operator::Target;
    /// runtime.pause(&Target::job("billing"), true).await?; // stop billing everywhere, now
    /// // ... the incident is over:
    /// runtime.resume(&Target::job("billing")).await?;
    /// # Ok(()) }
    /// ```
    pub async fn pause(&self, target: &Target, cancel: bool) -> Result<Pause> {
        self.operator()?.pause(target, cancel).await
    }

    /// Lifts the pause of `target` as [`Operator::resume`] does (recorded
    /// with this replica's holder id): overdue keys are claimable at once,
    /// and what runs for the slots missed meanwhile is each job's
    /// [`CatchUp`](crate::CatchUp) policy. Cancel-safe as
    /// [`Operator::resume`].
    pub async fn resume(&self, target: &Target) -> Result<Resumed> {
        let resumed = self.operator()?.resume(target).await?;
        self.shared().wake_target(target);
        Ok(resumed)
    }

    /// Registers one more job while the runtime runs: its row is created if
    /// missing (first due at its next slot, so adding a nightly tenant job
    /// does not run it now), and the scheduler claims it when due. Fails,
    /// changing nothing, if its key or settings are invalid, if the key is
    /// registered here already, or if shutdown has begun.
    ///
    /// A key whose row exists keeps its schedule, and the slots that passed
    /// while no replica could run it (fleet down, paused) are missed slots
    /// for its [`CatchUp`](crate::CatchUp) policy — except a key this
    /// runtime [removed](Runtime::remove) that no replica claimed since:
    /// nobody registered it meanwhile (as far as can be told), so it comes
    /// back like a new key, first due at its next slot, unless it is paused.
    ///
    /// Cancel-safe: dropped before it returns, the job may or may not be
    /// registered (its row may exist either way, which is harmless).
    ///
    /// ```no_run
    /// # use leasehold::{FenceGuard, FencedJob, JobError, JobSettings, Schedule};
    /// # struct Reconcile { tenant: String }
    /// # impl FencedJob for Reconcile {
    /// #     fn name(&self) -> &str { "reconcile" }
    /// #     fn key(&self) -> String { format!("reconcile:{}", self.tenant) }
    /// #     fn settings(&self) -> JobSettings { JobSettings::new(Schedule::Manual) }
    /// #     async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> { Ok(()) }
    /// # }
    /// # async fn demo(runtime: leasehold::Runtime) -> leasehold::Result<()> {
    /// // A tenant signed up: start reconciling it on every replica that adds it.
    /// runtime.add(Reconcile { tenant: "acme".into() }).await?;
    /// // A tenant left: stop here (a run in progress is cancelled and released).
    /// runtime.remove("reconcile:acme").await?;
    /// # Ok(()) }
    /// ```
    pub async fn add<J: FencedJob>(&self, job: J) -> Result<()> {
        let shared = self.shared();
        if shared.stopping.is_cancelled() {
            return Err(Error::invalid(
                "runtime",
                shared.holder.as_str(),
                "it is shutting down; add jobs to the runtime that replaces it",
            ));
        }
        let job = Arc::new(JobEntry::new(job));
        job.check()?;
        if shared.registry().job(&job.key).is_some() {
            return Err(duplicate_key(&job.key));
        }
        let server_now = match shared.clock.server_now() {
            Some(now) => now,
            None => shared.store.server_now().await?,
        };
        let first = first_due(&job.settings.schedule, server_now);
        let away = shared.registry().removed_for(&job.key);
        if let Some(away) = away
            && shared.store.readd(&job.key, &job.name, first, away).await?
        {
            tracing::info!(key = %job.key, ?away, "key added back: no replica ran it while it was away, \
                so it is first due at its next slot");
        }
        let seen = shared
            .store
            .register_many(&shared.holder, &[(&job.key, &job.name, first)])
            .await?;
        metrics::prime(&job.name);
        shared.lower_tick(job.settings.get_heartbeat());
        // Marked at the insert: a wake-up of the key between the insert and
        // the filing keeps it due.
        let sent = {
            let mut registry = shared.registry();
            if !registry.insert(job.clone(), Instant::now()) {
                return Err(duplicate_key(&job.key));
            }
            registry.mark()
        };
        shared.file(&seen, sent);
        shared.wake_scheduler();
        Ok(())
    }

    /// Unregisters `key` on this replica. A run of it in progress here is
    /// cancelled (reason *removed*), given its grace period, and released;
    /// this returns once that is done. The key's row stays (other replicas
    /// may still run it); delete it with [`Controls::forget`](crate::store::Controls::forget)
    /// (`leasehold forget KEY`) once no replica registers it. Added back
    /// later with [`Runtime::add`], a key no replica ran meanwhile is first
    /// due at its next slot.
    ///
    /// Returns whether the key was registered. Removes of one key at once
    /// all wait for the same run to end, and all return `true`: the key was
    /// registered when the first began.
    ///
    /// Cancel-safe: dropping the future does not stop the cancellation and
    /// release it started, and other removes of the key still wait for them.
    pub async fn remove(&self, key: &str) -> Result<bool> {
        match unregister::begin(&self.handle.shared, key) {
            Some(ended) => {
                ended.cancelled().await;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The lease store this runtime's statements run on: for the keys of
    /// job kinds ([`Keys::add`](crate::store::Keys::add), [`Keys::update`](crate::store::Keys::update),
    /// [`Keys::remove`](crate::store::Keys::remove)) and everything else a store does.
    pub fn store(&self) -> &LeaseStore {
        &self.shared().store
    }

    /// Health for probes, without a database round trip: see [`Health`].
    pub fn health(&self) -> Health {
        let shared = self.shared();
        let shutting_down = shared.stopping.is_cancelled();
        let (mut degraded, since) = shared.health.read(shutting_down);
        // Read off the runs themselves, so a wait shows while it lasts.
        for tenure in shared.held() {
            if let Some(waited) = tenure.longest_fence_wait()
                && waited > tenure.ttl / 4
            {
                degraded.push(Degraded::FencedTransactionWaiting {
                    key: tenure.key.clone(),
                    waited,
                });
            }
        }
        Health {
            healthy: degraded.is_empty(),
            degraded,
            last_database_contact: Some(since),
            running: shared.running(),
            max_concurrent_runs: shared.max_concurrent_runs,
            limited: shared
                .limits
                .read()
                .into_iter()
                .map(|(name, running, limit)| LimitedRuns {
                    name: name.to_string(),
                    running,
                    limit,
                })
                .collect(),
            fleet_limits: shared
                .limits
                .fleet_limits()
                .into_iter()
                .map(|(name, limit)| (name.to_string(), limit))
                .collect(),
            registered: shared.registry().len(),
            listening: shared.listening(),
            shutting_down,
        }
    }

    /// Stops claiming, cancels running jobs (reason *shutdown*), waits for
    /// each up to its grace period (then drops it), releases every lease so
    /// other replicas can take over at once (they are woken by
    /// notification), and only then stops the heartbeat. Returns what
    /// happened.
    ///
    /// Any clone may call it, any number of times: the first call starts the
    /// shutdown and every call returns the same report once it is done.
    /// Cancel-safe: the shutdown runs in a task of its own, so dropping this
    /// future does not interrupt it.
    ///
    /// Once it returns, nothing of the runtime's holds the process: its own
    /// pool and the listener's connection are closed, its services and runs
    /// have ended, and nothing of it runs on Tokio's blocking pool, so the
    /// service's `main` can return and exit at once. (The
    /// Prometheus exporter of [`RuntimeBuilder::prometheus`](crate::RuntimeBuilder::prometheus)
    /// is the process's, on a thread of its own: it serves until the process
    /// exits, and does not delay that.)
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
    /// handover on, the tokens are still cancelled: the scheduler stops
    /// claiming and runs are cancelled wherever their tasks still run.
    fn drop(&mut self) {
        if self.shutdown.get().is_none() {
            tracing::warn!(holder = %self.shared.holder,
                "leasehold runtime dropped without shutdown(): stopping it in the background \
                 (call and await Runtime::shutdown to wait for the handover)");
            drop(self.start_shutdown());
        }
    }
}

/// The shutdown, in order: the scheduler stops claiming (at once, however
/// many keys are due: a claim in flight hands what it took back, and none
/// is sent after it); every run ends (cancelled, graced, released through
/// the finisher), and every hand-back is done; the finisher sends what is
/// left; then the heartbeat and the listener stop — the heartbeat last of
/// the runs' companions, so no lease goes unrenewed while its run is alive.
async fn shutdown(shared: Arc<Shared>, tasks: Option<Tasks>) -> ShutdownReport {
    let Some(tasks) = tasks else {
        return ShutdownReport::default();
    };
    let _ = tasks.scheduler.await;
    shared.runs.close();
    shared.runs.wait().await;
    tasks.stop_finisher.cancel();
    let _ = tasks.finisher.await;
    tasks.stop_heartbeat.cancel();
    let _ = tasks.heartbeat.await;
    tasks.stop_listener.cancel();
    if let Some(listener) = tasks.listener {
        let _ = listener.await;
    }
    shared.store.close_owned().await;
    let counts = shared.stopped_runs();
    let report = ShutdownReport {
        runs_finished: counts.finished,
        runs_cancelled: counts.cancelled,
        leases_released: counts.released,
    };
    tracing::info!(holder = %shared.holder, ?report, "leasehold runtime stopped");
    report
}
