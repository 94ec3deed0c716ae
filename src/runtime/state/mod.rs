//! What the runtime's handle and services share: the registered jobs and
//! when each is next worth a claim, the runs in progress, the removals in
//! progress, the wake-ups. Its fields change only through [`Shared`]'s
//! methods, which keep the invariants below; one file per concern:
//!
//! - `job.rs`: a registered key's job, type-erased;
//! - `registry.rs`: the registered keys and the due queue;
//! - `reading.rs`: when a key the server answered about is next worth a claim;
//! - `clock.rs`: the server's clock, mapped onto the local one;
//! - `liveness.rs`: the liveness registration runs are stamped with;
//! - `limits.rs`: the limits per job name on this replica;
//! - `run_slot.rs`: a run's hold on a concurrency slot, given back on drop.
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
//!   A run holds a [`RunSlot`] from claim to release; dropping it — at the
//!   run's end, or when its task panics or is dropped — gives back the slot,
//!   the key's `held` entry and the key's place in the due queue, so no path
//!   leaks a slot or strands a key as running.
//! - A key removed while it runs is in `removing` from the moment it leaves
//!   the registry until its run has ended and been released (or the wait
//!   for that gave up): every `Runtime::remove` of the key meanwhile waits
//!   for that same end.

use std::collections::HashMap;

use crate::fast_hash::FastMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::health::Tracker;
use crate::lease::{Finish, LeaseStore, Released, Sighting, Target};
use crate::tenure::Tenure;

mod clock;
mod job;
mod limits;
mod liveness;
mod priority;
mod reading;
mod registry;
mod run_slot;
#[cfg(test)]
pub(crate) mod testing;

pub(crate) use clock::ServerClock;
pub(crate) use job::{Body, JobEntry, duplicate_key};
pub(crate) use limits::{Admit, NameLimits};
pub(crate) use liveness::Liveness;
pub(crate) use priority::{DEFAULT_AGING, MAX_PRIORITY, Priorities};
pub(crate) use reading::Reading;
pub(crate) use registry::{Registry, RegistryBuild, WakeMark};
pub(crate) use run_slot::RunSlot;

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
struct StopCounts {
    finished: AtomicUsize,
    cancelled: AtomicUsize,
    released: AtomicUsize,
}

/// The runs that ended while the runtime stopped, as the shutdown report
/// counts them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StopTally {
    pub(crate) finished: usize,
    pub(crate) cancelled: usize,
    pub(crate) released: usize,
}

/// What a runtime's shared state starts from.
pub(crate) struct Setup {
    pub(crate) holder: String,
    pub(crate) store: LeaseStore,
    pub(crate) health: Tracker,
    pub(crate) registry: Registry,
    pub(crate) poll_interval: Duration,
    pub(crate) max_concurrent_runs: usize,
    pub(crate) limits: NameLimits,
    pub(crate) priorities: Priorities,
    pub(crate) history: u32,
    /// The first heartbeat period.
    pub(crate) tick: Duration,
    pub(crate) clock: ServerClock,
    pub(crate) finishes: mpsc::UnboundedSender<FinishRequest>,
}

/// State shared by the runtime handle and its services.
///
/// The fields that change while the runtime runs are private: they change
/// through the methods below (and [`RunSlot`]), which keep the invariants
/// of this module. The ones left visible are set once at start, or are
/// handles with their own rules (a token, a task tracker, a channel).
pub(crate) struct Shared {
    pub(crate) holder: String,
    pub(crate) store: LeaseStore,
    #[cfg(feature = "test-util")]
    pub(crate) faults: super::faults::Faults,
    pub(crate) health: Tracker,
    registry: Mutex<Registry>,
    /// The tenures to renew: runs from claim until just before release.
    held: Mutex<FastMap<Arc<str>, Arc<Tenure>>>,
    /// Runs in progress: bodies running, counted from claim until the body
    /// ended (what the concurrency limit counts). Changed only by
    /// [`RunSlot`].
    in_progress: AtomicUsize,
    /// Runs whose body ended and whose release is not answered yet (their
    /// keys still out of the due queue). Changed only by [`RunSlot`].
    releasing: AtomicUsize,
    /// Keys removed while running, until their run has ended and been
    /// released: cancelled (through its `Arc`, which tells one removal from
    /// a later one of the same key) when it has.
    removing: Mutex<HashMap<Arc<str>, Arc<CancellationToken>>>,
    /// Set at shutdown: no new claims, runs cancelled.
    pub(crate) stopping: CancellationToken,
    pub(crate) poll_interval: Duration,
    pub(crate) max_concurrent_runs: usize,
    /// At most N runs of a job name at once here; counted by [`RunSlot`].
    pub(crate) limits: NameLimits,
    /// Which jobs' keys are claimed first when room is short.
    pub(crate) priorities: Priorities,
    /// Runs kept per key in the history ring.
    pub(crate) history: u32,
    /// The pauses in force, as the latest poll read them (for the gauge).
    paused: Mutex<Vec<Target>>,
    /// The server's WAL timeline as the latest poll read it; 0 before the
    /// first (timelines start at 1).
    timeline: AtomicI64,
    /// Wakes the scheduler: a key became worth a claim, or room freed up.
    wake: Notify,
    /// Heartbeat period in nanoseconds: the shortest of the jobs' heartbeat
    /// intervals (it only goes down, when a job is added).
    tick: AtomicU64,
    retick: Notify,
    /// Whether `LISTEN` wake-ups are working right now.
    listening: AtomicBool,
    /// Set when the listener starts (or starts again) to listen: the
    /// notifications sent before it did were heard by no one, so the
    /// scheduler polls at once instead of at its next poll.
    poll_now: AtomicBool,
    pub(crate) clock: ServerClock,
    /// The liveness registration claims stamp runs with (invariant 10).
    pub(crate) liveness: Liveness,
    pub(crate) finishes: mpsc::UnboundedSender<FinishRequest>,
    pub(crate) runs: TaskTracker,
    stop_counts: StopCounts,
}

/// A lock that a panic elsewhere poisoned still guards plain collections
/// whose every update is one call: take it.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    pub(crate) fn new(setup: Setup) -> Self {
        Shared {
            holder: setup.holder,
            store: setup.store,
            #[cfg(feature = "test-util")]
            faults: Default::default(),
            health: setup.health,
            registry: Mutex::new(setup.registry),
            held: Mutex::new(FastMap::default()),
            in_progress: AtomicUsize::new(0),
            releasing: AtomicUsize::new(0),
            removing: Mutex::default(),
            stopping: CancellationToken::new(),
            poll_interval: setup.poll_interval,
            max_concurrent_runs: setup.max_concurrent_runs,
            limits: setup.limits,
            priorities: setup.priorities,
            history: setup.history,
            paused: Mutex::new(Vec::new()),
            timeline: AtomicI64::new(0),
            wake: Notify::new(),
            tick: AtomicU64::new(u64::try_from(setup.tick.as_nanos()).unwrap_or(u64::MAX)),
            retick: Notify::new(),
            listening: AtomicBool::new(false),
            poll_now: AtomicBool::new(false),
            clock: setup.clock,
            liveness: Liveness::default(),
            finishes: setup.finishes,
            runs: TaskTracker::new(),
            stop_counts: StopCounts::default(),
        }
    }

    /// The tenures of the runs in progress.
    pub(crate) fn held(&self) -> Vec<Arc<Tenure>> {
        lock(&self.held).values().cloned().collect()
    }

    /// The tenure of `key`'s run in progress here, if any.
    pub(crate) fn held_tenure(&self, key: &str) -> Option<Arc<Tenure>> {
        lock(&self.held).get(key).cloned()
    }

    /// Runs in progress: from claim until their body ended.
    pub(crate) fn running(&self) -> usize {
        self.in_progress.load(Ordering::SeqCst)
    }

    /// How many more runs may start now: room under `max_concurrent_runs`
    /// for the bodies running, less the releases awaiting an answer beyond
    /// as many again. A run's slot frees when its body ends, not when its
    /// release answers, so a busy replica claims while its releases are out
    /// and both go in larger batches (each statement's fixed cost shared by
    /// more runs); the second bound keeps the leases it has claimed and not
    /// released within twice the limit when releases are slow.
    pub(crate) fn room(&self) -> usize {
        let limit = self.max_concurrent_runs;
        let backlog = self.releasing.load(Ordering::SeqCst).saturating_sub(limit);
        limit.saturating_sub(self.running()).saturating_sub(backlog)
    }

    pub(crate) fn removing(&self) -> MutexGuard<'_, HashMap<Arc<str>, Arc<CancellationToken>>> {
        lock(&self.removing)
    }

    pub(crate) fn registry(&self) -> MutexGuard<'_, Registry> {
        // A poisoned lock means a panic elsewhere mid-update of plain
        // collections; the scheduler re-checks everything with the server.
        lock(&self.registry)
    }

    /// Wakes the scheduler: a key may be worth a claim, or room freed up.
    pub(crate) fn wake_scheduler(&self) {
        self.wake.notify_one();
    }

    /// Resolves at the scheduler's next wake-up ([`Shared::wake_scheduler`]).
    pub(crate) fn scheduler_woken(&self) -> Notified<'_> {
        self.wake.notified()
    }

    /// A wake-up of `key`: if it is registered here, it is claimed next
    /// ([`Registry::wake_first`]) and the scheduler is woken. False if it
    /// is not registered. A key whose job has a fleet-wide limit is woken
    /// in its turn instead ([`Registry::wake`]): its job's places go to
    /// its keys oldest due first, and wake-ups come in the order keys fell
    /// due, where going to the front would start the newest first.
    pub(crate) fn wake_key(&self, key: &str) -> bool {
        let mut registry = self.registry();
        let Some(job) = registry.job(key) else {
            return false;
        };
        if self.limits.fleet_limited(&job.name) {
            registry.wake(key, Instant::now());
        } else {
            registry.wake_first(key, Instant::now());
        }
        drop(registry);
        self.wake_scheduler();
        true
    }

    /// Wakes every key `target` covers (after a resume), and the scheduler.
    pub(crate) fn wake_target(&self, target: &Target) {
        self.registry().wake_target(target, Instant::now());
        self.wake_scheduler();
    }

    /// Asks the scheduler for a poll at once (what was notified while no
    /// one listened, or a kind's keys changed), and wakes it.
    pub(crate) fn poll_soon(&self) {
        self.poll_now.store(true, Ordering::SeqCst);
        self.wake_scheduler();
    }

    /// Whether a poll was asked for since the last call (and no more).
    pub(crate) fn take_poll_request(&self) -> bool {
        self.poll_now.swap(false, Ordering::SeqCst)
    }

    pub(crate) fn tick(&self) -> Duration {
        Duration::from_nanos(self.tick.load(Ordering::SeqCst))
    }

    /// Resolves when the heartbeat period was lowered ([`Shared::lower_tick`]).
    pub(crate) fn reticked(&self) -> Notified<'_> {
        self.retick.notified()
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

    /// The server's WAL timeline as the latest poll read it; 0 before the
    /// first.
    #[cfg(feature = "test-util")]
    pub(crate) fn timeline(&self) -> i64 {
        self.timeline.load(Ordering::Relaxed)
    }

    /// Records whether `LISTEN` wake-ups work now; returns whether they did.
    pub(crate) fn set_listening(&self, listening: bool) -> bool {
        self.listening.swap(listening, Ordering::SeqCst)
    }

    /// Counts a run that ended while the runtime stops, for the shutdown
    /// report: `finished` if it succeeded, cancelled otherwise.
    pub(crate) fn count_stopped_run(&self, finished: bool, released: bool) {
        let counts = &self.stop_counts;
        match finished {
            true => counts.finished.fetch_add(1, Ordering::SeqCst),
            false => counts.cancelled.fetch_add(1, Ordering::SeqCst),
        };
        if released {
            counts.released.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The runs counted by [`Shared::count_stopped_run`].
    pub(crate) fn stopped_runs(&self) -> StopTally {
        let counts = &self.stop_counts;
        StopTally {
            finished: counts.finished.load(Ordering::SeqCst),
            cancelled: counts.cancelled.load(Ordering::SeqCst),
            released: counts.released.load(Ordering::SeqCst),
        }
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
    pub(crate) fn pauses_seen(&self, pauses: Vec<Target>) {
        let mut known = lock(&self.paused);
        if *known == pauses {
            return;
        }
        let counts = self.registry().paused_per_job(&pauses);
        for (job, keys) in counts {
            crate::metrics::jobs_paused(&job, keys);
        }
        *known = pauses;
    }

    /// Sets the paused gauge of `job` again, from the pauses last read:
    /// after keys of it were unregistered (removed keys of a kind), so the
    /// gauge counts only the keys that are still live (0 once none is).
    pub(crate) fn recount_paused(&self, job: &str) {
        let known = lock(&self.paused);
        let keys = self.registry().paused_per_job(&known).get(job).copied().unwrap_or(0);
        crate::metrics::jobs_paused(job, keys);
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
