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
//! - A wake-up is never lost to an answer in flight. An answer (a claim's,
//!   a registration's, a release's) describes the row as its statement
//!   saw it, which may be before the commit that sent a notification heard
//!   while the statement was out. So every wake-up is numbered, each
//!   statement notes the number reached when it is sent ([`WakeMark`]),
//!   and an answer about a key woken after that mark never files the key
//!   later than now: it is claimed again at once, and that claim sees the
//!   commit. Cost: at most one more claim per such wake-up, none when idle.
//! - Runs in progress never exceed `max_concurrent_runs`: the scheduler asks
//!   for at most the room left, and a run counts until its release is done.
//! - A key removed while it runs is in `removing` from the moment it leaves
//!   the registry until its run has ended and been released (or the wait
//!   for that gave up): every `Runtime::remove` of the key meanwhile waits
//!   for that same end.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
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

/// A registered job's body, type-erased: the job itself is the only
/// allocation, shared by its runs.
pub(crate) trait Body: Send + Sync {
    /// A run of the job with `guard`, holding the job for as long as it
    /// lasts.
    fn run_owned(self: Arc<Self>, guard: FenceGuard) -> BoxFuture<'static, Result<(), JobError>>;
}

impl<J: FencedJob> Body for J {
    fn run_owned(self: Arc<Self>, guard: FenceGuard) -> BoxFuture<'static, Result<(), JobError>> {
        Box::pin(async move { FencedJob::run(&*self, guard).await })
    }
}

/// One registered key.
pub(crate) struct JobEntry {
    pub(crate) name: Arc<str>,
    pub(crate) key: Arc<str>,
    /// Shared by keys of one job registered with the same settings: a
    /// fleet registers many keys of a few jobs.
    pub(crate) settings: Arc<JobSettings>,
    pub(crate) body: Arc<dyn Body>,
}

impl JobEntry {
    /// Erases a job's type; reads its name, key and settings once.
    pub(crate) fn new<J: FencedJob>(job: J) -> Self {
        let (name, key, settings) = (Arc::from(job.name()), Arc::from(job.key()), Arc::new(job.settings()));
        JobEntry {
            name,
            key,
            settings,
            body: Arc::new(job),
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
    /// The number of the key's latest wake-up (0: none since registered).
    woken: u64,
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
    /// Wake-ups so far, of any key: the number of the latest.
    wakes: u64,
}

/// A point in the registry's sequence of wake-ups, noted when a statement
/// is sent: the wake-ups after it came while the statement was in flight,
/// so its answer may not have seen what they announce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WakeMark(u64);

/// What the scheduler needs to turn the server's answers into local
/// instants: when it is, whether notifications are heard, the poll
/// interval, the server's clock.
pub(crate) struct Reading<'a> {
    pub(crate) now: Instant,
    pub(crate) listening: bool,
    pub(crate) poll_interval: Duration,
    pub(crate) clock: &'a ServerClock,
}

impl Reading<'_> {
    /// When a key the server answered about is next worth a claim: a held
    /// lease when it would expire (or the next poll, if wake-ups are not
    /// heard), a free one when due, a free and due one lost to another
    /// claimer shortly.
    pub(crate) fn look_again(&self, sighting: &Sighting) -> Instant {
        let now = self.now;
        match sighting.held_for() {
            Some(left) if self.listening => now + left,
            Some(left) => now + left.min(self.poll_interval),
            None if sighting.paused && sighting.due_in().is_zero() => now + PAUSED_RECHECK,
            None if sighting.due_in().is_zero() => now + RACE_RETRY,
            None => self.clock.local(sighting.next_due_at.unwrap_or(sighting.server_now)),
        }
    }
}

/// The registry of a runtime being started: every key added, then filed
/// at the time its row says, then queued in one pass — the due queue is
/// built sorted once, not entry by entry, and no key is moved.
pub(crate) struct RegistryBuild {
    slots: HashMap<Arc<str>, Slot>,
}

impl RegistryBuild {
    pub(crate) fn with_capacity(keys: usize) -> Self {
        RegistryBuild {
            slots: HashMap::with_capacity(keys),
        }
    }

    /// Adds a key, worth a claim at `now` unless filed later. False if the
    /// key is added already.
    pub(crate) fn add(&mut self, job: Arc<JobEntry>, now: Instant) -> bool {
        match self.slots.entry(job.key.clone()) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(Slot {
                    job,
                    at: Some(now),
                    woken: 0,
                    failures: 0,
                    losses: 0,
                });
                true
            }
        }
    }

    /// Each key the registration answered about is next worth a claim at
    /// the time `reading` says; a key without an answer stays at `now`
    /// (its row was inserted by another replica meanwhile: look at once).
    /// Nothing listens yet, so no wake-up can have come in between.
    pub(crate) fn file(&mut self, seen: &[Sighting], reading: &Reading<'_>) {
        for sighting in seen {
            if let Some(slot) = self.slots.get_mut(sighting.key.as_str()) {
                slot.at = Some(reading.look_again(sighting));
            }
        }
    }

    /// The registry, its due queue built in one sorted pass.
    pub(crate) fn finish(self) -> Registry {
        let queue = self
            .slots
            .values()
            .filter_map(|slot| Some((slot.at?, slot.job.key.clone())))
            .collect();
        Registry {
            slots: self.slots,
            queue,
            ..Registry::default()
        }
    }
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
                woken: 0,
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

    /// Gives a registered key a new job (a stored key's new schedule),
    /// keeping its place in the queue and its streaks. A run in progress
    /// keeps the job it started with. False if the key is not registered.
    pub(crate) fn replace(&mut self, job: Arc<JobEntry>) -> bool {
        match self.slots.get_mut(&job.key) {
            Some(slot) => {
                slot.job = job;
                true
            }
            None => false,
        }
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

    /// A wake-up: the key may be claimable now. Moves a waiting key to
    /// `now` if it was later (never later), and numbers the wake-up, a
    /// running key's too, so that an answer already in flight about the key
    /// cannot file it past this wake-up ([`Registry::file`],
    /// [`Registry::finish`]).
    pub(crate) fn wake(&mut self, key: &str, now: Instant) {
        let Some(slot) = self.slots.get_mut(key) else {
            return;
        };
        self.wakes += 1;
        slot.woken = self.wakes;
        if let Some(at) = slot.at
            && at > now
        {
            self.wait_until(key, now);
        }
    }

    /// The wake-ups so far: note it before sending a statement whose answer
    /// will be filed with [`Registry::file`] or [`Registry::finish`].
    pub(crate) fn mark(&self) -> WakeMark {
        WakeMark(self.wakes)
    }

    /// `at`, unless `key` was woken after `sent`: then no later than `now`.
    fn unless_woken(&self, key: &str, sent: WakeMark, at: Instant, now: Instant) -> Instant {
        match self.slots.get(key) {
            Some(slot) if slot.woken > sent.0 => at.min(now),
            _ => at,
        }
    }

    /// Files what a statement sent at `sent` answered about keys: each
    /// waiting key at the time `reading` says it is next worth a claim —
    /// except a key woken since `sent`, which stays due now: the answer may
    /// predate the commit the wake-up announced.
    pub(crate) fn file(&mut self, seen: &[Sighting], sent: WakeMark, reading: &Reading<'_>) {
        for sighting in seen {
            let at = self.unless_woken(&sighting.key, sent, reading.look_again(sighting), reading.now);
            self.wait_until(&sighting.key, at);
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

    /// The key's run ended here: back in the due queue at `at` — or at
    /// `now`, if it was woken after its release was sent at `sent` — unless
    /// it was removed meanwhile (or removed and added again: the new
    /// registration is waiting already).
    pub(crate) fn finish(&mut self, key: &str, at: Instant, sent: WakeMark, now: Instant) {
        let at = self.unless_woken(key, sent, at, now);
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
    /// The server's WAL timeline as the latest poll read it; 0 before the
    /// first (timelines start at 1).
    pub(crate) timeline: AtomicI64,
    /// Wakes the scheduler: a key became worth a claim, or room freed up.
    pub(crate) wake: Notify,
    /// Heartbeat period in nanoseconds: the shortest of the jobs' heartbeat
    /// intervals (it only goes down, when a job is added).
    pub(crate) tick: AtomicU64,
    pub(crate) retick: Notify,
    /// Whether `LISTEN` wake-ups are working right now.
    pub(crate) listening: AtomicBool,
    /// Set when the listener starts (or starts again) to listen: the
    /// notifications sent before it did were heard by no one, so the
    /// scheduler polls at once instead of at its next poll.
    pub(crate) poll_now: AtomicBool,
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

    /// Files keys a statement sent at `sent` answered about, at the time
    /// worth looking again ([`Registry::file`]).
    pub(crate) fn file(&self, seen: &[Sighting], sent: WakeMark) {
        if let Some(last) = seen.last() {
            self.clock.observed(last.server_now);
        }
        let reading = Reading {
            now: Instant::now(),
            listening: self.listening(),
            poll_interval: self.poll_interval,
            clock: &self.clock,
        };
        self.registry().file(seen, sent, &reading);
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

    /// Records the server's WAL timeline a poll read: the gauge follows it,
    /// and a timeline other than the one seen before — a standby was
    /// promoted, this runtime now talks to it — is logged once, as a
    /// warning (the first fence drawn on it moved the fence sequence ahead,
    /// docs/design.md §4).
    pub(crate) fn timeline_seen(&self, timeline: i64) {
        let before = self.timeline.swap(timeline, Ordering::Relaxed);
        if before == timeline {
            return;
        }
        crate::metrics::server_timeline(timeline);
        if before == 0 {
            // The first reading is no news: a quiet runtime logs one INFO
            // line per run, and the gauge carries the timeline.
            tracing::debug!(holder = %self.holder, timeline, "the server's WAL timeline");
        } else {
            tracing::warn!(holder = %self.holder, from = before, to = timeline,
                "the server is on a new WAL timeline: a standby was promoted (a failover); fences drawn on it \
                 are above every fence of the old timeline, but commits the old primary had not shipped are lost");
        }
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

#[cfg(test)]
mod tests {
    //! The wake-up rule, on the registry alone: the scheduler's statements
    //! are replaced by the answers they would bring, in the order a loaded
    //! machine can deliver them.

    use std::sync::Arc;
    use std::time::Duration;

    use chrono::{DateTime, Utc};
    use tokio::time::Instant;

    use super::{JobEntry, Reading, Registry, ServerClock};
    use crate::guard::FenceGuard;
    use crate::job::{FencedJob, JobError, JobSettings};
    use crate::lease::Sighting;
    use crate::schedule::Schedule;

    const LEASE: Duration = Duration::from_secs(30);

    /// A manual job that does nothing, under `key`.
    struct Handover(String);

    impl FencedJob for Handover {
        fn name(&self) -> &str {
            "handover"
        }
        fn key(&self) -> String {
            self.0.clone()
        }
        fn settings(&self) -> JobSettings {
            JobSettings::new(Schedule::Manual)
        }
        async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
            Ok(())
        }
    }

    fn entry(key: &str) -> Arc<JobEntry> {
        Arc::new(JobEntry::new(Handover(key.to_owned())))
    }

    /// What a claim answers about a due key another replica holds for
    /// `LEASE` more.
    fn held_elsewhere(key: &str) -> Sighting {
        let server_now: DateTime<Utc> = "2026-12-01T12:00:00Z".parse().unwrap();
        Sighting {
            key: key.to_owned(),
            expires_at: server_now + LEASE,
            next_due_at: Some(server_now - chrono::TimeDelta::seconds(1)),
            server_now,
            paused: false,
        }
    }

    fn listening(now: Instant, clock: &ServerClock) -> Reading<'_> {
        Reading {
            now,
            listening: true,
            poll_interval: Duration::from_secs(60),
            clock,
        }
    }

    fn proposed(registry: &Registry, now: Instant) -> Vec<String> {
        registry.due(now, 8).iter().map(|j| j.key.to_string()).collect()
    }

    /// Claim sent → the holder's release is notified → the claim's answer
    /// (from before the release) says "held for 30 s": the key stays due,
    /// so the next pass claims it, instead of waiting out a lease that is
    /// already released.
    #[test]
    fn a_notification_while_a_claim_is_in_flight_keeps_the_key_due() {
        let clock = ServerClock::default();
        let t0 = Instant::now();
        let mut registry = Registry::default();
        registry.insert(entry("k"), t0);

        assert_eq!(proposed(&registry, t0), ["k"], "the claim proposes k");
        let sent = registry.mark();
        registry.wake("k", t0 + Duration::from_millis(5));
        let answered = t0 + Duration::from_millis(10);
        registry.file(&[held_elsewhere("k")], sent, &listening(answered, &clock));

        assert_eq!(proposed(&registry, answered), ["k"], "k is claimed again at once");
        assert!(registry.next_at().is_some_and(|at| at <= answered));
    }

    /// Without a wake-up during the claim (one before it was sent does not
    /// count, nor one of another key), the answer files the key at the
    /// lease's expiry: the rule costs no claim when nothing happened.
    #[test]
    fn a_claim_answer_parks_the_key_when_no_notification_came_meanwhile() {
        let clock = ServerClock::default();
        let t0 = Instant::now();
        let mut registry = Registry::default();
        registry.insert(entry("k"), t0 + Duration::from_secs(5));
        registry.insert(entry("other"), t0 + Duration::from_secs(3600));
        registry.wake("k", t0);

        assert_eq!(proposed(&registry, t0), ["k"]);
        let sent = registry.mark();
        registry.wake("other", t0 + Duration::from_millis(5));
        let answered = t0 + Duration::from_millis(10);
        registry.file(&[held_elsewhere("k")], sent, &listening(answered, &clock));

        assert_eq!(proposed(&registry, answered), ["other"], "k waits, other was woken");
        assert_eq!(
            proposed(&registry, answered + LEASE - Duration::from_millis(1)),
            ["other"]
        );
        assert_eq!(proposed(&registry, answered + LEASE), ["other", "k"]);
    }

    /// A run's release is out → a trigger elsewhere commits after it and is
    /// notified → the release answers "next due in an hour": the key is
    /// back in the queue due now, not in an hour.
    #[test]
    fn a_notification_while_a_release_is_out_keeps_the_key_due() {
        let t0 = Instant::now();
        let mut registry = Registry::default();
        let job = entry("k");
        registry.insert(job.clone(), t0);
        assert!(registry.start(&job));

        let sent = registry.mark();
        registry.wake("k", t0 + Duration::from_millis(5));
        let answered = t0 + Duration::from_millis(10);
        registry.finish("k", answered + Duration::from_secs(3600), sent, answered);

        assert_eq!(proposed(&registry, answered), ["k"]);
    }

    /// The same release with no wake-up while it was out: due in an hour.
    #[test]
    fn a_release_answer_files_the_key_when_no_notification_came_meanwhile() {
        let t0 = Instant::now();
        let mut registry = Registry::default();
        let job = entry("k");
        registry.insert(job.clone(), t0);
        assert!(registry.start(&job));
        registry.wake("k", t0); // during the run, before the release: its answer saw it

        let sent = registry.mark();
        let answered = t0 + Duration::from_millis(10);
        let hour = answered + Duration::from_secs(3600);
        registry.finish("k", hour, sent, answered);

        assert!(proposed(&registry, answered).is_empty());
        assert_eq!(registry.next_at(), Some(hour));
    }
}
