//! Jobs and runtimes for scenario tests and benchmarks (feature `jobs`):
//! a job whose body is a closure ([`ScriptedJob`]), a log of the runs such
//! jobs saw ([`Runs`]), and starting runtimes on a test database.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{CancelReason, FenceGuard, FencedJob, JobError, JobSettings, Runtime, RuntimeBuilder, Schedule};
use sqlx::PgPool;
use tokio::time::Instant;

use crate::TestDb;
use crate::wait::eventually;

/// What a job body returns: `futures::future::BoxFuture` without the crate.
pub type BoxedRun = Pin<Box<dyn Future<Output = Result<(), JobError>> + Send + 'static>>;

type Body = Arc<dyn Fn(FenceGuard) -> BoxedRun + Send + Sync>;

/// A job whose body is a closure, so each scenario scripts its behaviour.
#[derive(Clone)]
pub struct ScriptedJob {
    /// The job's name (metrics label): by default its key up to the first `:`.
    pub name: String,
    /// The lease key.
    pub key: String,
    /// Schedule, lease and the rest.
    pub settings: JobSettings,
    body: Body,
}

impl ScriptedJob {
    /// The same job under another name (the `job_name` metrics label).
    pub fn named(mut self, name: &str) -> Self {
        name.clone_into(&mut self.name);
        self
    }
}

impl std::fmt::Debug for ScriptedJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedJob")
            .field("name", &self.name)
            .field("key", &self.key)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl FencedJob for ScriptedJob {
    fn name(&self) -> &str {
        &self.name
    }
    fn key(&self) -> String {
        self.key.clone()
    }
    fn settings(&self) -> JobSettings {
        self.settings.clone()
    }
    async fn run(&self, guard: FenceGuard) -> Result<(), JobError> {
        (self.body)(guard).await
    }
}

/// A scripted job on `key`, named after the key up to its first `:`
/// ([`ScriptedJob::named`] to choose another name).
pub fn job<F, Fut>(key: &str, settings: JobSettings, body: F) -> ScriptedJob
where
    F: Fn(FenceGuard) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), JobError>> + Send + 'static,
{
    ScriptedJob {
        name: key.split(':').next().unwrap_or(key).to_owned(),
        key: key.to_owned(),
        settings,
        body: Arc::new(move |guard| Box::pin(body(guard))),
    }
}

/// Settings with a short lease for fault scenarios: heartbeat lease/3,
/// margin lease/10, short grace and backoff.
pub fn quick(schedule: Schedule, lease: Duration) -> JobSettings {
    JobSettings::new(schedule)
        .lease(lease)
        .grace(Duration::from_millis(300))
        .retry(Duration::from_millis(200), Duration::from_secs(1))
}

/// One run as its job saw it.
#[derive(Debug, Clone)]
pub struct RunRecord {
    /// The runtime (holder id) that ran it.
    pub holder: String,
    /// The key it ran.
    pub key: String,
    /// Its fencing token.
    pub fence: i64,
    /// When it started.
    pub started: Instant,
    /// Unix time at the start (the server's clock is this machine's): which
    /// slot of an epoch-aligned schedule the run belongs to.
    pub started_unix: f64,
    /// When it ended (returned, or observed its cancellation and returned).
    pub ended: Option<Instant>,
    /// When the run observed its cancellation, and why.
    pub cancelled: Option<(Instant, CancelReason)>,
}

/// Shared log of runs, written by [`Runs::body`] jobs.
#[derive(Clone, Default, Debug)]
pub struct Runs(Arc<Mutex<Vec<RunRecord>>>);

impl Runs {
    /// Every run so far, in start order.
    pub fn all(&self) -> Vec<RunRecord> {
        self.0.lock().unwrap().clone()
    }

    /// Records the start of a run; returns its index.
    pub fn start(&self, guard: &FenceGuard) -> usize {
        let mut runs = self.0.lock().unwrap();
        runs.push(RunRecord {
            holder: guard.holder().to_owned(),
            key: guard.key().to_owned(),
            fence: guard.fence(),
            started: Instant::now(),
            started_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock after 1970")
                .as_secs_f64(),
            ended: None,
            cancelled: None,
        });
        runs.len() - 1
    }

    /// Records the end of run `i`.
    pub fn end(&self, i: usize) {
        self.0.lock().unwrap()[i].ended = Some(Instant::now());
    }

    /// Records that run `i` observed its cancellation, for `reason`.
    pub fn cancelled(&self, i: usize, reason: Option<CancelReason>) {
        let reason = reason.expect("a cancelled guard has a reason");
        self.0.lock().unwrap()[i].cancelled = Some((Instant::now(), reason));
    }

    /// A job body that records its run and works for `work` — or until it
    /// is cancelled, which it records too.
    pub fn body(&self, work: Duration) -> impl Fn(FenceGuard) -> BoxedRun + Send + Sync + 'static {
        let runs = self.clone();
        move |guard: FenceGuard| {
            let runs = runs.clone();
            Box::pin(async move {
                let i = runs.start(&guard);
                tokio::select! {
                    _ = tokio::time::sleep(work) => {
                        runs.end(i);
                        Ok(())
                    }
                    _ = guard.cancelled() => {
                        runs.cancelled(i, guard.reason());
                        runs.end(i);
                        Err("cancelled".into())
                    }
                }
            })
        }
    }

    /// Waits until `n` runs have started (panics after `within`).
    pub async fn wait_started(&self, n: usize, within: Duration) -> Vec<RunRecord> {
        eventually(within, || (self.all().len() >= n).then(|| self.all())).await
    }
}

/// Runs that overlap in time: pairs `(i, j)` of `runs` (all of one key).
pub fn overlapping_pairs(runs: &[RunRecord]) -> Vec<(usize, usize)> {
    let mut pairs = Vec::new();
    for (i, a) in runs.iter().enumerate() {
        for (j, b) in runs.iter().enumerate().skip(i + 1) {
            let a_end = a.ended.unwrap_or_else(Instant::now);
            let b_end = b.ended.unwrap_or_else(Instant::now);
            if a.started < b_end && b.started < a_end {
                pairs.push((i, j));
            }
        }
    }
    pairs
}

/// A runtime builder on `pool` with holder id `holder`, poll interval
/// `poll` (the default when `None`) and `jobs` registered.
pub fn builder<J: FencedJob>(pool: PgPool, holder: &str, poll: Option<Duration>, jobs: Vec<J>) -> RuntimeBuilder {
    let mut builder = Runtime::builder(pool).holder(holder);
    if let Some(poll) = poll {
        builder = builder.poll_interval(poll);
    }
    for job in jobs {
        builder = builder.register(job);
    }
    builder
}

/// Starts [`builder`]'s runtime (panics if it does not start).
pub async fn start<J: FencedJob>(pool: PgPool, holder: &str, poll: Option<Duration>, jobs: Vec<J>) -> Runtime {
    builder(pool, holder, poll, jobs).start().await.expect("runtime starts")
}

/// Starts a replica: a runtime with holder id `holder` on its own pool of
/// `connections` connections to `db`, polling every 100 ms.
pub async fn replica<J: FencedJob>(db: &TestDb, holder: &str, connections: u32, jobs: Vec<J>) -> Runtime {
    let pool = db.pool_with(connections).await;
    start(pool, holder, Some(Duration::from_millis(100)), jobs).await
}

/// Starts a replica on `pool` (the caller keeps a clone, to misuse it as the
/// service would): holder `holder`, poll interval `poll`.
pub async fn replica_on<J: FencedJob>(pool: PgPool, holder: &str, poll: Duration, jobs: Vec<J>) -> Runtime {
    start(pool, holder, Some(poll), jobs).await
}
