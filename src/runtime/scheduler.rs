//! The scheduler service: one per runtime, whatever the number of keys.
//!
//! It keeps a due queue of the registered keys (when each is next worth a
//! claim, learned from the server's answers), and loops:
//!
//! 1. every poll interval, asks the server which keys *became* due since it
//!    last looked (`LeaseStore::due_since`: triggers made elsewhere, wake-ups
//!    a lost notification did not bring) — one statement, an index range;
//!    and at once when the listener starts (again) to listen, for what was
//!    notified while no one listened;
//! 2. when keys are due locally and there is room under
//!    `max_concurrent_runs`, claims them in **one** statement
//!    (`LeaseStore::claim_due`), starts a supervised run per claimed key,
//!    and files the others at the time the server's answer says;
//! 3. sleeps until the next key is due, the next poll, or a wake-up (a
//!    notification, a trigger, a run that ended), whichever comes first.
//!
//! Every statement is bounded in time, so a stuck pool or row lock delays
//! claims and shows in `Runtime::health`, without wedging the runtime.
//!
//! Once shutdown has begun it sends no claim, whatever is due: it looks
//! before every claim of a pass, not only between passes. A claim already
//! in flight then hands what it took straight back (so do a claim answered
//! after its local deadline and one for a key removed meanwhile); those
//! hand-backs are tracked with the runs, so shutdown waits for them.
//!
//! A notification heard while a claim is in flight is not lost to that
//! claim's answer: the answer may describe the row from before the commit
//! that notified, so a key woken meanwhile is claimed again at once instead
//! of being filed at the time the answer says (`Registry::file`).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use super::fleet::{self, FleetSync, KindEntry};
use super::state::{JobEntry, Shared};
use super::supervise;
use crate::connection::bounded;
use crate::fast_hash::{FastMap, FastSet};
use crate::lease::{Candidate, Polled, Sighting};
use crate::metrics::{self, ClaimOutcome};
use crate::schedule::first_due;
use crate::tenure::Tenure;

/// Most keys proposed in one claim statement.
const MAX_CANDIDATES: usize = 1024;
/// Most keys one poll reads as newly due.
const MAX_DISCOVERED: usize = 1000;
/// How long a sync of the kinds' keys may take (a reload of a kind reads
/// all its keys).
const SYNC_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a claim may wait for a connection and an answer.
const CLAIM_TIMEOUT: Duration = Duration::from_secs(10);
/// How far back each poll's window reaches before the previous one ended,
/// to cover transactions that read the clock before they committed.
const WINDOW_OVERLAP: chrono::TimeDelta = chrono::TimeDelta::seconds(2);

/// Runs until shutdown begins; claims nothing after that.
pub(crate) async fn run(shared: Arc<Shared>, since: DateTime<Utc>, kinds: Vec<Arc<KindEntry>>) {
    let mut scheduler = Scheduler {
        fleet: FleetSync::new(&kinds),
        since,
        next_poll: Instant::now(),
        errors: 0,
        missing: Vec::new(),
    };
    loop {
        if shared.stopping.is_cancelled() {
            return;
        }
        let wait = if shared.partitioned() {
            shared.poll_interval
        } else {
            scheduler.step(&shared).await
        };
        let wake_at = Instant::now() + wait;
        tokio::select! {
            _ = tokio::time::sleep_until(wake_at) => {}
            _ = shared.scheduler_woken() => {}
            _ = shared.stopping.cancelled() => return,
        }
    }
}

struct Scheduler {
    /// The stored keys of the kinds this replica registers.
    fleet: FleetSync,
    /// Server time the next poll's window starts from.
    since: DateTime<Utc>,
    next_poll: Instant,
    /// Statements that failed in a row (drives the back-off).
    errors: u32,
    /// Registered keys whose row is gone (forgotten while registered):
    /// created again before the next claim.
    missing: Vec<Arc<JobEntry>>,
}

impl Scheduler {
    /// One pass: poll if it is time, register missing rows, claim what is
    /// due. Returns how long to sleep unless woken.
    async fn step(&mut self, shared: &Arc<Shared>) -> Duration {
        let polls = shared.take_poll_request() || Instant::now() >= self.next_poll;
        // Counted for tests: a pass that polled, from its poll to its last
        // claim, so a test can wait for whole passes (feature `test-util`).
        #[cfg(feature = "test-util")]
        if polls {
            shared.faults.poll_begins();
        }
        let wait = self.pass(shared, polls).await;
        #[cfg(feature = "test-util")]
        if polls {
            shared.faults.poll_done();
        }
        wait
    }

    /// [`Scheduler::step`], polling first if `polls`.
    async fn pass(&mut self, shared: &Arc<Shared>, polls: bool) -> Duration {
        if polls {
            if let Err(pause) = self.poll(shared).await {
                return pause;
            }
            self.next_poll = Instant::now() + shared.poll_interval;
        }
        if !self.missing.is_empty()
            && let Err(pause) = self.register_missing(shared).await
        {
            return pause;
        }
        // Shutdown may begin during any statement of this pass: look before
        // each claim, or a runtime with more due keys than run slots keeps
        // claiming (and handing back) for as long as keys fall due.
        while !shared.stopping.is_cancelled() {
            match self.claim(shared).await {
                Ok(true) => continue, // started a full batch: more may be due
                Ok(false) => break,
                Err(pause) => return pause,
            }
        }
        let next_due = shared.registry().next_at();
        sleep_for(Instant::now(), next_due, self.next_poll, shared.room())
    }

    /// Reads the keys that became due since the last poll and moves the ones
    /// registered here to the front of the queue; syncs the kinds' keys.
    async fn poll(&mut self, shared: &Arc<Shared>) -> Result<(), Duration> {
        let since = self.since - WINDOW_OVERLAP;
        let kinds = self.fleet.names();
        let vouch = fleet::vouch(shared.poll_interval);
        let answer = bounded(
            CLAIM_TIMEOUT,
            "poll",
            shared.store.due_since(since, MAX_DISCOVERED, &kinds, vouch),
        )
        .await;
        drop(kinds);
        let Polled {
            server_now,
            seen,
            paused,
            timeline,
            kinds,
        } = self.answered(shared, answer)?;
        shared.clock.observed(server_now);
        shared.pauses_seen(paused);
        if let Some(timeline) = timeline {
            shared.timeline_seen(timeline);
        }
        // A full page means more may wait: the next window starts after it.
        self.since = match seen.last() {
            Some(last) if seen.len() >= MAX_DISCOVERED => last.next_due_at.unwrap_or(server_now),
            _ => server_now,
        };
        let now = Instant::now();
        {
            let mut registry = shared.registry();
            for sighting in &seen {
                registry.wake(&sighting.key, now);
            }
        }
        // The keys of this replica's kinds: added, updated, removed.
        let synced = bounded(SYNC_TIMEOUT, "sync", self.fleet.sync(shared, kinds)).await;
        self.answered(shared, synced)
    }

    /// Creates again the rows of registered keys that vanished.
    async fn register_missing(&mut self, shared: &Shared) -> Result<(), Duration> {
        let server_now = match shared.clock.server_now() {
            Some(now) => now,
            None => match bounded(CLAIM_TIMEOUT, "clock", shared.store.server_now()).await {
                Ok(now) => now,
                Err(error) => return self.answered::<()>(shared, Err(error)),
            },
        };
        let jobs = std::mem::take(&mut self.missing);
        let sent = shared.registry().mark();
        let keys: Vec<(&str, &str, DateTime<Utc>)> = jobs
            .iter()
            .map(|j| (&*j.key, &*j.name, first_due(&j.settings.schedule, server_now)))
            .collect();
        let answer = bounded(
            CLAIM_TIMEOUT,
            "register",
            shared.store.register_many(&shared.holder, &keys),
        )
        .await;
        match self.answered(shared, answer) {
            Ok(seen) => {
                tracing::info!(
                    keys = jobs.len(),
                    "registered keys whose rows had been deleted (forgotten) again"
                );
                shared.file(&seen, sent);
                Ok(())
            }
            Err(pause) => {
                self.missing = jobs;
                Err(pause)
            }
        }
    }

    /// Claims the due keys there is room for. `Ok(true)` if the batch was
    /// full and started runs (look again at once). Claims nothing once
    /// shutdown has begun.
    async fn claim(&mut self, shared: &Arc<Shared>) -> Result<bool, Duration> {
        let room = shared.room();
        if room == 0 || shared.stopping.is_cancelled() {
            return Ok(false);
        }
        let wanted = candidates_wanted(room);
        // The mark goes with the candidates: a wake-up after it may announce
        // a commit this claim's answer does not see.
        let (jobs, marked) = {
            let registry = shared.registry();
            (registry.due(Instant::now(), wanted), registry.mark())
        };
        if jobs.is_empty() {
            return Ok(false);
        }
        let candidates: Vec<Candidate<'_>> = jobs
            .iter()
            .map(|j| Candidate {
                key: &j.key,
                job_name: &j.name,
                lease: j.settings.lease,
            })
            .collect();
        let sent = Instant::now();
        let answer = bounded(
            CLAIM_TIMEOUT,
            "claim",
            shared.store.claim_due(
                &shared.holder,
                &candidates,
                room,
                shared.history,
                shared.liveness.current(),
            ),
        )
        .await;
        #[cfg(feature = "test-util")]
        shared.faults.claim_answered(&shared.stopping).await;
        if answer.is_err() {
            for job in &jobs {
                metrics::claim(&job.name, ClaimOutcome::Error);
            }
        }
        let claimed = self.answered(shared, answer)?;
        let mut started = 0;
        let by_key: FastMap<&str, &Arc<JobEntry>> = jobs.iter().map(|j| (&*j.key, j)).collect();
        // Candidates the server answered for; the others have no row.
        let mut answered: FastSet<&str> = FastSet::with_capacity_and_hasher(jobs.len(), Default::default());
        for run in claimed.acquired {
            let lease = &run.lease;
            let Some(job) = by_key.get(lease.key.as_str()).map(|j| Arc::clone(j)) else {
                continue;
            };
            answered.insert(&*by_key[lease.key.as_str()].key);
            if let Some(lost_job) = &run.lost_job {
                tracing::warn!(key = %job.key, job = %lost_job, fence = lease.fence,
                    "the key's previous run ended without a release (its replica crashed, froze past its lease \
                     or could not write its release); recorded as lost");
                metrics::run_lost(lost_job);
            }
            shared
                .clock
                .observed(lease.expires_at - chrono::TimeDelta::from_std(lease.remaining).unwrap_or_default());
            // An answer that came after the tenure's local deadline (sent +
            // remaining − margin, §5): the lease may already have expired
            // on the server and another replica's run started, so this run
            // must not start at all, not even until the supervisor stops it.
            // A claim is bounded by CLAIM_TIMEOUT, not by the lease, so a
            // slow answer can arrive that late (found by the model check).
            let too_late = answered_too_late(sent, lease.remaining, job.settings.get_margin(), Instant::now());
            if too_late {
                tracing::warn!(key = %job.key, fence = lease.fence, "claim answered after its local deadline; not running it");
            }
            metrics::claim(
                &job.name,
                if too_late {
                    ClaimOutcome::TooLate
                } else {
                    ClaimOutcome::Acquired
                },
            );
            // Claimed too late, claimed while shutting down (the claim was
            // in flight when it began), or removed while the claim was in
            // flight: hand it straight back instead of running it. Tracked
            // with the runs, so that shutdown waits for the hand-back too.
            if too_late || shared.stopping.is_cancelled() || !shared.registry().start(&job) {
                let store = shared.store.clone();
                let fence = lease.fence;
                let holder = lease.holder.clone();
                shared.runs.spawn(async move {
                    let release = store.release(&job.key, &holder, fence);
                    if tokio::time::timeout(CLAIM_TIMEOUT, release).await.is_err() {
                        tracing::warn!(key = %job.key, "could not hand back a lease claimed at shutdown; it will expire");
                    }
                });
                continue;
            }
            let tenure = Arc::new(
                Tenure::new(
                    &job.name,
                    run.lease,
                    sent,
                    job.settings.lease,
                    job.settings.get_margin(),
                    shared.store.clone(),
                )
                .with_args(run.args),
            );
            tenure.set_owner(run.owner);
            supervise::spawn(shared.clone(), job, tenure, run.run_no, run.pending_slot);
            started += 1;
        }
        for sighting in &claimed.seen {
            if let Some(job) = by_key.get(sighting.key.as_str()) {
                answered.insert(&*job.key);
                metrics::claim(&job.name, unclaimed(sighting));
            }
        }
        shared.file(&claimed.seen, marked);
        let registry = shared.registry();
        let lost_rows = jobs.iter().filter(|j| !answered.contains(&*j.key)).filter(|j| {
            registry
                .job(&j.key)
                .is_some_and(|registered| Arc::ptr_eq(&registered, j))
        });
        self.missing.extend(lost_rows.cloned());
        drop(registry);
        // A full page of candidates that yielded runs: more may be due. Keys
        // handed back do not count: they stay due here, so counting them
        // would propose them again at once, round after round.
        Ok(started > 0 && jobs.len() >= wanted)
    }

    /// Records a statement's outcome in health and the error streak; on
    /// error, the pause before the next attempt. Every scheduler statement
    /// (poll, registration, claim) counts as a claim in `Runtime::health`.
    fn answered<T>(&mut self, shared: &Shared, answer: crate::error::Result<T>) -> Result<T, Duration> {
        match answer {
            Ok(value) => {
                self.errors = 0;
                // The database answered: an idle runtime's polls are what
                // keeps `Runtime::health` from reading it as silent.
                shared.health.claim_answered();
                Ok(value)
            }
            Err(error) => {
                self.errors += 1;
                shared.health.claim_failed(&error);
                tracing::warn!(holder = %shared.holder, %error, "scheduler statement failed; retrying");
                let backoff = Duration::from_millis(100).saturating_mul(1 << self.errors.min(6));
                Err(backoff.min(shared.poll_interval.max(Duration::from_secs(1))))
            }
        }
    }
}

/// How long the scheduler sleeps unless woken: until the next key is due
/// or the next poll, whichever comes first — except with keys due and no
/// room, when only the next poll (or a run's end, which wakes it) is worth
/// waking for. At least a millisecond: never a busy loop.
fn sleep_for(now: Instant, next_due: Option<Instant>, next_poll: Instant, room: usize) -> Duration {
    let until = next_due.unwrap_or(next_poll).min(next_poll);
    let until = if until <= now && room == 0 { next_poll } else { until };
    until.saturating_duration_since(now).max(Duration::from_millis(1))
}

/// How many keys one claim proposes for `room` runs: a few more than room
/// (some will be held or locked), within `[8, MAX_CANDIDATES]`.
fn candidates_wanted(room: usize) -> usize {
    room.saturating_mul(2).clamp(8, MAX_CANDIDATES)
}

/// Whether a claim sent at `sent` was answered (at `now`) after its
/// tenure's local deadline (sent + remaining − margin, §5): the lease may
/// already have expired on the server and another replica's run started.
fn answered_too_late(sent: Instant, remaining: Duration, margin: Duration, now: Instant) -> bool {
    (sent + remaining)
        .checked_sub(margin)
        .is_none_or(|deadline| deadline <= now)
}

/// Why a proposed key the server answered about was not claimed.
fn unclaimed(sighting: &Sighting) -> ClaimOutcome {
    if sighting.paused {
        ClaimOutcome::Paused
    } else if sighting.due_in().is_zero() {
        // Free and due but not claimed: another claimer had it locked.
        ClaimOutcome::HeldElsewhere
    } else {
        ClaimOutcome::NotDue
    }
}

#[cfg(test)]
mod tests {
    //! The scheduler's decisions, on tokio's paused clock, without a
    //! database: how long it sleeps, how many keys it proposes, which
    //! answers come too late, how an unclaimed key is counted.

    use std::time::Duration;

    use chrono::TimeDelta;
    use tokio::time::Instant;

    use super::{MAX_CANDIDATES, answered_too_late, candidates_wanted, sleep_for, unclaimed};
    use crate::metrics::ClaimOutcome;
    use crate::runtime::state::testing::{free, held_elsewhere};

    const SECOND: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn it_sleeps_until_the_next_due_key_or_the_next_poll() {
        let now = Instant::now();
        let poll = now + 10 * SECOND;
        assert_eq!(
            sleep_for(now, Some(now + 3 * SECOND), poll, 4),
            3 * SECOND,
            "a key due first"
        );
        assert_eq!(
            sleep_for(now, Some(now + 60 * SECOND), poll, 4),
            10 * SECOND,
            "the poll first"
        );
        assert_eq!(sleep_for(now, None, poll, 4), 10 * SECOND, "no key: the poll");
    }

    #[tokio::test(start_paused = true)]
    async fn with_keys_due_and_no_room_it_waits_for_the_poll_or_a_runs_end() {
        let now = Instant::now();
        let poll = now + 10 * SECOND;
        assert_eq!(sleep_for(now, Some(now), poll, 0), 10 * SECOND, "no room: no busy loop");
        assert_eq!(
            sleep_for(now, Some(now), poll, 1),
            Duration::from_millis(1),
            "room: claim at once, yet never a zero sleep"
        );
        tokio::time::advance(11 * SECOND).await;
        assert_eq!(
            sleep_for(Instant::now(), Some(now), poll, 0),
            Duration::from_millis(1),
            "the poll is overdue: poll"
        );
    }

    #[test]
    fn a_claim_proposes_twice_its_room_within_bounds() {
        assert_eq!(candidates_wanted(1), 8);
        assert_eq!(candidates_wanted(10), 20);
        assert_eq!(candidates_wanted(usize::MAX), MAX_CANDIDATES);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_after_the_local_deadline_is_too_late() {
        let sent = Instant::now();
        let (remaining, margin) = (30 * SECOND, 3 * SECOND);
        assert!(!answered_too_late(sent, remaining, margin, sent + 26 * SECOND));
        assert!(
            answered_too_late(sent, remaining, margin, sent + 27 * SECOND),
            "at the deadline"
        );
        assert!(
            answered_too_late(sent, 2 * SECOND, margin, sent),
            "less left than the margin"
        );
    }

    #[test]
    fn an_unclaimed_key_is_counted_by_why() {
        assert_eq!(
            unclaimed(&held_elsewhere("k")),
            ClaimOutcome::HeldElsewhere,
            "due, but held"
        );
        assert_eq!(
            unclaimed(&free("k", TimeDelta::seconds(-1), false)),
            ClaimOutcome::HeldElsewhere
        );
        assert_eq!(
            unclaimed(&free("k", TimeDelta::seconds(-1), true)),
            ClaimOutcome::Paused
        );
        assert_eq!(
            unclaimed(&free("k", TimeDelta::seconds(60), false)),
            ClaimOutcome::NotDue
        );
    }
}
