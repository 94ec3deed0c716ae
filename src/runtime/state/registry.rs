//! The registered keys and the due queue.

use std::collections::{BTreeSet, HashMap};

use crate::fast_hash::FastMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Priorities;
use super::{Admit, JobEntry, Reading};
use crate::lease::{Sighting, Target};
use crate::runtime::run_end::Streak;

#[cfg(test)]
mod tests;

/// Keys held back by their name's limit that one look at the queue passes
/// over at most ([`Registry::due_admitted`]).
pub(crate) const SCAN_PAST_HELD: usize = 4096;

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
    slots: FastMap<Arc<str>, Slot>,
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

/// The registry of a runtime being started: every key added, then filed
/// at the time its row says, in one pass that also lines up the due queue,
/// then queued in one sorted build — no key is moved. Filed in key order
/// (the order the registration sends), keys due at one instant are queued
/// presorted.
pub(crate) struct RegistryBuild {
    slots: FastMap<Arc<str>, Slot>,
    /// The due queue's entries in the order filed.
    queue: Vec<(Instant, Arc<str>)>,
}

impl RegistryBuild {
    pub(crate) fn with_capacity(keys: usize) -> Self {
        RegistryBuild {
            slots: FastMap::with_capacity_and_hasher(keys, Default::default()),
            queue: Vec::new(),
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

    /// Files every added key, once: the `i`-th of `jobs` is next worth a
    /// claim at `at(i)`, or stays at `now` when that is `None` (its row was
    /// inserted by another replica meanwhile: look at once). Nothing
    /// listens yet, so no wake-up can have come in between.
    pub(crate) fn file(&mut self, jobs: &[Arc<JobEntry>], mut at: impl FnMut(usize) -> Option<Instant>) {
        self.queue.reserve_exact(jobs.len());
        for (i, job) in jobs.iter().enumerate() {
            if let Some(slot) = self.slots.get_mut(&job.key) {
                if let Some(when) = at(i) {
                    slot.at = Some(when);
                }
                if let Some(when) = slot.at {
                    self.queue.push((when, job.key.clone()));
                }
            }
        }
    }

    /// The registry, its due queue built in one sorted pass.
    pub(crate) fn finish(self) -> Registry {
        let mut queue = self.queue;
        if queue.len() != self.slots.len() {
            // Not every key was filed: queue them from the slots.
            queue = self
                .slots
                .values()
                .filter_map(|slot| Some((slot.at?, slot.job.key.clone())))
                .collect();
        }
        // Stable, so a queue filed in order costs one pass to check.
        queue.sort();
        Registry {
            slots: self.slots,
            queue: queue.into_iter().collect(),
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
    /// keeps the job it started with, but its release files the key's next
    /// due time from the new one's schedule (`supervise::next_due`). False
    /// if the key is not registered.
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

    /// A wake-up that asks for a run now (a trigger or a notification):
    /// [`Registry::wake`], and the key goes to the front of the due queue,
    /// ahead of keys that fell due earlier and still wait for room. A
    /// trigger then goes out with the next claim that has room, not after
    /// a whole slot's backlog of scheduled keys; scheduled keys lose at
    /// most one place each per wake-up.
    pub(crate) fn wake_first(&mut self, key: &str, now: Instant) {
        self.wake(key, now);
        // Strictly before the first key: ties are broken by key name.
        let front = match self.queue.first() {
            Some((at, _)) if *at <= now => at.checked_sub(Duration::from_nanos(1)).unwrap_or(*at),
            _ => now,
        };
        if self
            .slots
            .get(key)
            .and_then(|slot| slot.at)
            .is_some_and(|at| at > front)
        {
            self.wait_until(key, front);
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
    pub(crate) fn wake_target(&mut self, target: &Target, now: Instant) {
        let keys: Vec<Arc<str>> = match target {
            Target::Key(key) => vec![Arc::from(key.as_str())],
            Target::Job(name) => self
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

    /// [`Registry::due`] under limits per job name: keys whose name is
    /// full are passed over, left due, and do not count towards `max`.
    /// Looks at most [`SCAN_PAST_HELD`] keys past `max`, so a long run of
    /// held-back keys costs a bounded scan (a key behind more of them waits
    /// until they drain).
    pub(crate) fn due_admitted(&self, now: Instant, max: usize, admit: &mut Admit) -> Vec<Arc<JobEntry>> {
        self.queue
            .iter()
            .take_while(|(at, _)| *at <= now)
            .take(max.saturating_add(SCAN_PAST_HELD))
            .filter_map(|(_, key)| self.slots.get(key).map(|s| &s.job))
            .filter(|job| admit.take(&job.name))
            .take(max)
            .cloned()
            .collect()
    }

    /// [`Registry::due_admitted`] under priorities: of the due keys (within
    /// [`SCAN_PAST_HELD`] past `max`), the `max` that go first by the
    /// priority rule (`priority.rs`): the most waited-for, counting each
    /// key's head start as waiting (its time due here plus its job's
    /// head start), ties to the queue's order.
    pub(crate) fn due_by_priority(
        &self,
        now: Instant,
        max: usize,
        admit: &mut Admit,
        priorities: &Priorities,
    ) -> Vec<Arc<JobEntry>> {
        let mut due: Vec<(Duration, usize, &Arc<JobEntry>)> = self
            .queue
            .iter()
            .take_while(|(at, _)| *at <= now)
            .take(max.saturating_add(SCAN_PAST_HELD))
            .filter_map(|(at, key)| self.slots.get(key).map(|s| (*at, &s.job)))
            .filter(|(_, job)| !admit.is_full(&job.name))
            .enumerate()
            .map(|(n, (at, job))| (now.duration_since(at) + priorities.head_start(&job.name), n, job))
            .collect();
        due.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        due.into_iter()
            .map(|(_, _, job)| job)
            .filter(|job| admit.take(&job.name))
            .take(max)
            .cloned()
            .collect()
    }

    /// When the earliest waiting key is next worth a claim.
    pub(crate) fn next_at(&self) -> Option<Instant> {
        self.queue.first().map(|(at, _)| *at)
    }

    /// [`Registry::next_at`] under limits per job name: the earliest
    /// waiting key whose name has room (within [`SCAN_PAST_HELD`] keys);
    /// `None` when all those are held back — a run's end wakes the
    /// scheduler, and the poll comes anyway.
    pub(crate) fn next_at_admitted(&self, admit: &Admit) -> Option<Instant> {
        self.queue
            .iter()
            .take(SCAN_PAST_HELD)
            .find(|(_, key)| self.slots.get(key).is_some_and(|s| !admit.is_full(&s.job.name)))
            .map(|(at, _)| *at)
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
    pub(crate) fn paused_per_job(&self, pauses: &[Target]) -> HashMap<Arc<str>, usize> {
        let mut counts: HashMap<Arc<str>, usize> = HashMap::new();
        for slot in self.slots.values() {
            let job = &slot.job;
            let paused = pauses.iter().any(|p| p.covers(&job.key, Some(&job.name)));
            *counts.entry(job.name.clone()).or_default() += usize::from(paused);
        }
        counts
    }

    /// Applies `change` to the key's failure streak; the streak after it.
    /// `None` if the key is not registered.
    pub(crate) fn update_failures(&mut self, key: &str, change: Streak) -> Option<u32> {
        let slot = self.slots.get_mut(key)?;
        slot.failures = change.apply(slot.failures);
        Some(slot.failures)
    }

    /// Applies `change` to the key's loss streak; the streak before and
    /// after it. `None` if the key is not registered.
    pub(crate) fn update_losses(&mut self, key: &str, change: Streak) -> Option<(u32, u32)> {
        let slot = self.slots.get_mut(key)?;
        let before = slot.losses;
        slot.losses = change.apply(before);
        Some((before, slot.losses))
    }
}
