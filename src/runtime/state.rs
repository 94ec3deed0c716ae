//! What the runtime's handle and services share: the registered jobs and
//! when each is next worth a claim, the runs in progress, the removals in
//! progress, the wake-ups.
//!
//! # Invariants
//!
//! - A registered key is either *waiting* (in the due queue, with the local
//!   instant it is next worth a claim) or *running* here (its tenure is in
//!   `held`), never both: the scheduler never proposes a key this runtime is
//!   already running.
//! - The due queue is only a hint. Every claim is decided by the server
//!   clock and the row; a queue that is early costs a claim that answers
//!   "not due", a queue that is late is corrected by wake-ups and polling.
//! - Runs in progress never exceed `max_concurrent_runs`: the scheduler asks
//!   for at most the room left, and a run counts until its release is done.
//! - A key removed while it runs is in `removing` from the moment it leaves
//!   the registry until its run has ended and been released (or the wait
//!   for that gave up): every `Runtime::remove` of the key meanwhile waits
//!   for that same end.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::{Error, Result};
use crate::guard::FenceGuard;
use crate::health::Tracker;
use crate::job::FencedJob;
use crate::job::{JobError, JobSettings};
use crate::lease::{Finish, LeaseStore, PauseTarget, Released, Sighting};
use crate::tenure::Tenure;
use crate::validate;

/// A key that was free and due but went to another claimer's lock is looked
/// at again this soon: the other claim is a few milliseconds from commit.
const RACE_RETRY: Duration = Duration::from_millis(25);

/// An overdue paused key is looked at again this often. A resume wakes its
/// keys sooner: by notification, and by moving their due time into the
/// next poll's window.
const PAUSED_RECHECK: Duration = Duration::from_secs(30);

/// A registered job's body, type-erased.
pub(crate) type RunFn = Arc<dyn Fn(FenceGuard) -> BoxFuture<'static, Result<(), JobError>> + Send + Sync>;

/// One registered key.
pub(crate) struct JobEntry {
    pub(crate) name: Arc<str>,
    pub(crate) key: Arc<str>,
    pub(crate) settings: JobSettings,
    pub(crate) run: RunFn,
}

impl JobEntry {
    /// Erases a job's type; reads its name, key and settings once.
    pub(crate) fn new<J: FencedJob>(job: J) -> Self {
        let job = Arc::new(job);
        let (name, key, settings) = (Arc::from(job.name()), Arc::from(job.key()), job.settings());
        let run: RunFn = Arc::new(move |guard| {
            let job = job.clone();
            Box::pin(async move { job.run(guard).await })
        });
        JobEntry {
            name,
            key,
            settings,
            run,
        }
    }

    /// Checks the key and the settings, naming the key in any error.
    pub(crate) fn check(&self) -> Result<()> {
        validate::key(&self.key)?;
        self.settings.validate(&self.key)
    }
}

/// The error for a key registered twice in one runtime.
pub(crate) fn duplicate_key(key: &str) -> Error {
    Error::invalid(
        "job key",
        key,
        "it is registered twice in this runtime; give each instance its own key (e.g. \"reconcile:{tenant}\"), or remove the old one first",
    )
}

/// A key's local state: when it is next worth a claim, and its streaks.
struct Slot {
    job: Arc<JobEntry>,
    /// `Some` while waiting (the due queue holds `(at, key)` too); `None`
    /// while running here.
    at: Option<Instant>,
    /// Runs that failed or panicked in a row (drives the fleet-wide retry
    /// back-off recorded with the release).
    failures: u32,
    /// Runs of this replica that lost their lease in a row.
    losses: u32,
}

/// The registered keys and the due queue.
#[derive(Default)]
pub(crate) struct Registry {
    slots: HashMap<Arc<str>, Slot>,
    queue: BTreeSet<(Instant, Arc<str>)>,
    /// Keys `Runtime::remove` unregistered here, and when: a key added
    /// back comes back like a new one unless some replica ran it since
    /// (`LeaseStore::readd`). One entry per removed key, until re-added.
    removed: HashMap<Arc<str>, Instant>,
}

impl Registry {
    /// Adds a waiting key, next worth a claim at `at`. False if the key is
    /// registered already.
    pub(crate) fn insert(&mut self, job: Arc<JobEntry>, at: Instant) -> bool {
        if self.slots.contains_key(&job.key) {
            return false;
        }
        self.removed.remove(&job.key);
        self.queue.insert((at, job.key.clone()));
        self.slots.insert(
            job.key.clone(),
            Slot {
                job,
                at: Some(at),
                failures: 0,
                losses: 0,
            },
        );
        true
    }

    /// Forgets a key, remembering when; returns its job if it was
    /// registered.
    pub(crate) fn remove(&mut self, key: &str) -> Option<Arc<JobEntry>> {
        let slot = self.slots.remove(key)?;
        if let Some(at) = slot.at {
            self.queue.remove(&(at, slot.job.key.clone()));
        }
        self.removed.insert(slot.job.key.clone(), Instant::now());
        Some(slot.job)
    }

    /// How long ago [`Registry::remove`] unregistered `key`, if it did and
    /// the key was not added back since.
    pub(crate) fn removed_for(&self, key: &str) -> Option<Duration> {
        self.removed.get(key).map(Instant::elapsed)
    }

    pub(crate) fn job(&self, key: &str) -> Option<Arc<JobEntry>> {
        self.slots.get(key).map(|s| s.job.clone())
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Moves a waiting key to `at` (earlier or later). A running key is
    /// left alone: its run decides when it is next worth a claim.
    pub(crate) fn wait_until(&mut self, key: &str, at: Instant) {
        if let Some(slot) = self.slots.get_mut(key)
            && let Some(old) = slot.at
        {
            self.queue.remove(&(old, slot.job.key.clone()));
            self.queue.insert((at, slot.job.key.clone()));
            slot.at = Some(at);
        }
    }

    /// Like [`Registry::wait_until`], but only ever earlier.
    pub(crate) fn wake(&mut self, key: &str, now: Instant) {
        if let Some(at) = self.slots.get(key).and_then(|s| s.at)
            && at > now
        {
            self.wait_until(key, now);
        }
    }

    /// Wakes every waiting key `target` covers (after a resume).
    pub(crate) fn wake_target(&mut self, target: &PauseTarget, now: Instant) {
        let keys: Vec<Arc<str>> = match target {
            PauseTarget::Key(key) => vec![Arc::from(key.as_str())],
            PauseTarget::Job(name) => self
                .slots
                .values()
                .filter(|s| *s.job.name == **name)
                .map(|s| s.job.key.clone())
                .collect(),
        };
        for key in keys {
            self.wake(&key, now);
        }
    }

    /// The waiting keys worth a claim at `now`, earliest first, at most `max`.
    pub(crate) fn due(&self, now: Instant, max: usize) -> Vec<Arc<JobEntry>> {
        self.queue
            .iter()
            .take_while(|(at, _)| *at <= now)
            .take(max)
            .filter_map(|(_, key)| self.slots.get(key).map(|s| s.job.clone()))
            .collect()
    }

    /// When the earliest waiting key is next worth a claim.
    pub(crate) fn next_at(&self) -> Option<Instant> {
        self.queue.first().map(|(at, _)| *at)
    }

    /// The key starts running here: out of the due queue. False — nothing
    /// to run — if `job` is not what is registered under its key any more
    /// (removed, or removed and added again, while its claim was in flight)
    /// or the key is running already.
    pub(crate) fn start(&mut self, job: &Arc<JobEntry>) -> bool {
        match self.slots.get_mut(&job.key) {
            Some(slot) if Arc::ptr_eq(&slot.job, job) => match slot.at.take() {
                Some(at) => {
                    self.queue.remove(&(at, slot.job.key.clone()));
                    true
                }
                None => false,
            },
            _ => false,
        }
    }

    /// The key's run ended here: back in the due queue at `at`, unless it
    /// was removed meanwhile (or removed and added again: the new
    /// registration is waiting already).
    pub(crate) fn finish(&mut self, key: &str, at: Instant) {
        if let Some(slot) = self.slots.get_mut(key)
            && slot.at.is_none()
        {
            slot.at = Some(at);
            self.queue.insert((at, slot.job.key.clone()));
        }
    }

    /// For every job registered here, how many of its keys `pauses` cover.
    pub(crate) fn paused_per_job(&self, pauses: &[PauseTarget]) -> HashMap<Arc<str>, usize> {
        let mut counts: HashMap<Arc<str>, usize> = HashMap::new();
        for slot in self.slots.values() {
            let job = &slot.job;
            let paused = pauses.iter().any(|p| p.covers(&job.key, Some(&job.name)));
            *counts.entry(job.name.clone()).or_default() += usize::from(paused);
        }
        counts
    }

    /// The failure and loss streaks of a key, to read and update.
    pub(crate) fn streaks(&mut self, key: &str) -> Option<(&mut u32, &mut u32)> {
        self.slots.get_mut(key).map(|s| (&mut s.failures, &mut s.losses))
    }
}

/// Maps the server's clock onto this process's monotonic clock, from the
/// latest answer that carried the server's time. Only used to decide when
/// to *look* at a key again — never for a safety decision, which the server
/// makes with its own clock.
#[derive(Default)]
pub(crate) struct ServerClock {
    anchor: Mutex<Option<(Instant, DateTime<Utc>)>>,
}

impl ServerClock {
    pub(crate) fn observed(&self, server_now: DateTime<Utc>) {
        *self.anchor.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), server_now));
    }

    /// The local instant at which the server's clock reads `at` (capped a
    /// day ahead: the queue is a hint, and a "never" due time is year 9999).
    pub(crate) fn local(&self, at: DateTime<Utc>) -> Instant {
        let now = Instant::now();
        let Some((seen, server)) = *self.anchor.lock().unwrap_or_else(|p| p.into_inner()) else {
            return now;
        };
        let server_now = server + chrono::TimeDelta::from_std(now - seen).unwrap_or_default();
        let ahead = (at - server_now).to_std().unwrap_or(Duration::ZERO);
        now + ahead.min(Duration::from_secs(86_400))
    }

    /// The server's clock now, as last seen plus the local time since.
    pub(crate) fn server_now(&self) -> Option<DateTime<Utc>> {
        let (seen, server) = (*self.anchor.lock().unwrap_or_else(|p| p.into_inner()))?;
        Some(server + chrono::TimeDelta::from_std(seen.elapsed()).unwrap_or_default())
    }
}

/// A run's release, handed to the finisher to go out with others.
pub(crate) struct FinishRequest {
    pub(crate) finish: Finish,
    /// What the release did (never [`Released::Busy`]: those are retried);
    /// dropped if it could not be sent.
    pub(crate) done: oneshot::Sender<Released>,
}

/// Counts for the shutdown report, kept by the runs that end while the
/// runtime stops.
#[derive(Default)]
pub(crate) struct StopCounts {
    pub(crate) finished: AtomicUsize,
    pub(crate) cancelled: AtomicUsize,
    pub(crate) released: AtomicUsize,
}

/// State shared by the runtime handle and its services.
pub(crate) struct Shared {
    pub(crate) holder: String,
    pub(crate) store: LeaseStore,
    #[cfg(feature = "test-util")]
    pub(crate) faults: super::faults::Faults,
    pub(crate) health: Tracker,
    pub(crate) registry: Mutex<Registry>,
    /// The tenures to renew: runs from claim until just before release.
    pub(crate) held: Mutex<HashMap<Arc<str>, Arc<Tenure>>>,
    /// Runs in progress, counted until their release is done (what the
    /// concurrency limit counts).
    pub(crate) in_progress: AtomicUsize,
    /// Keys removed while running, until their run has ended and been
    /// released: cancelled (through its `Arc`, which tells one removal from
    /// a later one of the same key) when it has.
    pub(crate) removing: Mutex<HashMap<Arc<str>, Arc<CancellationToken>>>,
    /// Set at shutdown: no new claims, runs cancelled.
    pub(crate) stopping: CancellationToken,
    pub(crate) poll_interval: Duration,
    pub(crate) max_concurrent_runs: usize,
    /// Runs kept per key in the history ring.
    pub(crate) history: u32,
    /// The pauses in force, as the latest poll read them (for the gauge).
    pub(crate) paused: Mutex<Vec<PauseTarget>>,
    /// Wakes the scheduler: a key became worth a claim, or room freed up.
    pub(crate) wake: Notify,
    /// Heartbeat period in nanoseconds: the shortest of the jobs' heartbeat
    /// intervals (it only goes down, when a job is added).
    pub(crate) tick: AtomicU64,
    pub(crate) retick: Notify,
    /// Whether `LISTEN` wake-ups are working right now.
    pub(crate) listening: AtomicBool,
    pub(crate) clock: ServerClock,
    pub(crate) finishes: mpsc::UnboundedSender<FinishRequest>,
    pub(crate) runs: TaskTracker,
    pub(crate) stop_counts: StopCounts,
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

    /// Runs in progress: from claim until their release is done.
    pub(crate) fn running(&self) -> usize {
        self.in_progress.load(Ordering::SeqCst)
    }

    pub(crate) fn removing(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Arc<CancellationToken>>> {
        self.removing.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        // A poisoned lock means a panic elsewhere mid-update of plain
        // collections; the scheduler re-checks everything with the server.
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn tick(&self) -> Duration {
        Duration::from_nanos(self.tick.load(Ordering::SeqCst))
    }

    /// Lowers the heartbeat period to `tick` if it is shorter.
    pub(crate) fn lower_tick(&self, tick: Duration) {
        let nanos = u64::try_from(tick.as_nanos()).unwrap_or(u64::MAX);
        if self.tick.fetch_min(nanos, Ordering::SeqCst) > nanos {
            self.retick.notify_one();
        }
    }

    pub(crate) fn listening(&self) -> bool {
        self.listening.load(Ordering::SeqCst)
    }

    /// Files keys the server answered about at the time worth looking again:
    /// a held lease when it would expire (or the next poll, if wake-ups are
    /// not heard), a free one when due, a free and due one lost to another
    /// claimer shortly.
    pub(crate) fn file(&self, seen: &[Sighting]) {
        let now = Instant::now();
        if let Some(last) = seen.last() {
            self.clock.observed(last.server_now);
        }
        let mut registry = self.registry();
        for sighting in seen {
            let at = match sighting.held_for() {
                Some(left) if self.listening() => now + left,
                Some(left) => now + left.min(self.poll_interval),
                None if sighting.paused && sighting.due_in().is_zero() => now + PAUSED_RECHECK,
                None if sighting.due_in().is_zero() => now + RACE_RETRY,
                None => self.clock.local(sighting.next_due_at.unwrap_or(sighting.server_now)),
            };
            registry.wait_until(&sighting.key, at);
        }
    }

    /// Records the pauses a poll read; when they changed, sets the paused
    /// gauge of every job registered here.
    pub(crate) fn pauses_seen(&self, pauses: Vec<PauseTarget>) {
        let mut known = self.paused.lock().unwrap_or_else(|p| p.into_inner());
        if *known == pauses {
            return;
        }
        let counts = self.registry().paused_per_job(&pauses);
        for (job, keys) in counts {
            crate::metrics::jobs_paused(&job, keys);
        }
        *known = pauses;
    }

    /// Whether fault injection cut this runtime off from the database.
    pub(crate) fn partitioned(&self) -> bool {
        #[cfg(feature = "test-util")]
        {
            self.faults.partitioned()
        }
        #[cfg(not(feature = "test-util"))]
        {
            false
        }
    }

    /// Whether fault injection stalls heartbeats.
    pub(crate) fn heartbeats_stalled(&self) -> bool {
        #[cfg(feature = "test-util")]
        {
            self.faults.heartbeats_stalled()
        }
        #[cfg(not(feature = "test-util"))]
        {
            false
        }
    }
}
