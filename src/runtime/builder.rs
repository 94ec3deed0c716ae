//! [`RuntimeBuilder`]: settings, the checks run at `start`, and start-up.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::FutureExt;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::job_loop::job_loop;
use super::{Faults, Handle, JobEntry, RunFn, Runtime, Shared, Tasks};
use crate::error::{Error, Result};
use crate::health::Tracker;
use crate::heartbeat;
use crate::job::FencedJob;
use crate::lease::LeaseStore;
use crate::metrics;
use crate::schedule::Schedule;
use crate::validate;

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

impl RuntimeBuilder {
    pub(super) fn new(pool: PgPool) -> Self {
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

    /// Overrides the holder id (default `hostname-<random>`, new at every
    /// start).
    ///
    /// Keep it unique per process. If two live runtimes share one (a copied
    /// configuration), exclusion still holds — a claim for a new run never
    /// takes a live lease, whoever holds it, and renewals and releases are
    /// scoped to each run's own fence — but `start` logs a warning when it
    /// finds live leases under this id. A process restarted with its old
    /// id claims its keys again once their old leases expire.
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
        let live = store.live_keys_of(&holder).await?;
        if !live.is_empty() {
            tracing::warn!(holder = %holder, keys = ?live,
                "live leases are held under this runtime's holder id: another running process uses the \
                 same id (give each process its own, or leave the default), or this process restarted \
                 before its old leases expired; they are not taken over, they are claimed once they expire");
        }
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
        let health = Tracker::new(3 * tick.max(self.poll_interval), store.poisoned().clone());
        let shared = Arc::new(Shared {
            holder,
            store,
            faults: Faults::default(),
            health,
            jobs: self.jobs.into_iter().map(Arc::new).collect(),
            held: Mutex::new(HashMap::new()),
            stopping: CancellationToken::new(),
            poll_interval: self.poll_interval,
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
            handle: Arc::new(Handle {
                shared,
                tasks: Mutex::new(Some(Tasks {
                    job_loops,
                    heartbeat,
                    stop_heartbeat,
                })),
                shutdown: OnceLock::new(),
            }),
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
pub(super) fn never() -> DateTime<Utc> {
    DateTime::from_timestamp(253_402_214_400, 0).unwrap_or_default()
}
