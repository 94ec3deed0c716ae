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
use super::state::{JobEntry, Registry, Shared, WakeMark};
use super::supervise;
use crate::connection::bounded;
use crate::fast_hash::{FastMap, FastSet};
use crate::lease::{Candidate, Claimed, ClaimedRun, Polled, Sighting};
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

/// The longest the first claim waits for the listener's first
/// registration; a listener that takes longer (a slow server, a lost
/// probe) registers later, and the runs claimed meanwhile fall back to
/// their leases.
const FIRST_REGISTRATION_WAIT: Duration = Duration::from_secs(2);

/// Runs until shutdown begins; claims nothing after that.
pub(crate) async fn run(shared: Arc<Shared>, since: DateTime<Utc>, kinds: Vec<Arc<KindEntry>>) {
    let mut scheduler = Scheduler {
        fleet: FleetSync::new(&kinds),
        since,
        next_poll: Instant::now(),
        errors: 0,
        missing: Vec::new(),
    };
    // The first claim waits for the listener's first registration (tens of
    // milliseconds): a run claimed before it would not be stamped, and a
    // crash of this replica would then hand that run over only when its
    // lease expires (invariant 10) — the runs a replica starts as it
    // comes up, often overdue ones after a deploy, are the likeliest to
    // meet a crash of a bad release.
    tokio::select! {
        () = shared.liveness.first_settled(FIRST_REGISTRATION_WAIT) => {}
        () = shared.stopping.cancelled() => return,
    }
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
        let next_due = if shared.limits.is_empty() {
            shared.registry().next_at()
        } else {
            // Keys held back by their name's limit are not worth waking
            // for: a run's end of that name wakes the scheduler.
            let admit = shared.limits.admit();
            shared.registry().next_at_admitted(&admit)
        };
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
            limits,
        } = self.answered(shared, answer)?;
        shared.clock.observed(server_now);
        shared.pauses_seen(paused);
        shared.limits.fleet_seen(limits);
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
    /// shutdown has begun. The steps: [`propose`] the due keys, send the
    /// claim ([`Scheduler::send_claim`]), start or hand back each key
    /// acquired ([`start_or_hand_back`], deciding by [`admission`]), count
    /// and file the others, remember the candidates whose row is gone
    /// ([`rows_gone`]), and say whether to look again ([`look_again`]).
    async fn claim(&mut self, shared: &Arc<Shared>) -> Result<bool, Duration> {
        let Some(proposal) = propose(shared, Instant::now()) else {
            return Ok(false);
        };
        let sent = Instant::now();
        let claimed = self.send_claim(shared, &proposal).await?;
        let by_key: FastMap<&str, &Arc<JobEntry>> = proposal.jobs.iter().map(|j| (&*j.key, j)).collect();
        // Candidates the server answered for; the others have no row.
        let mut answered: FastSet<&str> = FastSet::with_capacity_and_hasher(proposal.jobs.len(), Default::default());
        let mut started = 0;
        for run in claimed.acquired {
            let Some(&job) = by_key.get(run.lease.key.as_str()) else {
                continue;
            };
            answered.insert(&*job.key);
            if start_or_hand_back(shared, Arc::clone(job), run, sent) {
                started += 1;
            }
        }
        // Keys held back by their job's fleet-wide limit for longer than
        // their schedule's interval, per limited job proposed (the gauge
        // goes back to 0 when none is).
        let mut overdue: FastMap<&str, usize> = FastMap::default();
        for job in &proposal.jobs {
            if shared.limits.fleet_limited(&job.name) {
                overdue.insert(&job.name, 0);
            }
        }
        for sighting in &claimed.seen {
            if let Some(job) = by_key.get(sighting.key.as_str()) {
                answered.insert(&*job.key);
                let outcome = unclaimed(sighting);
                if outcome == ClaimOutcome::Limited {
                    // Its job's places are all taken: its keys wait here,
                    // due, until a place frees (or a poll interval).
                    shared
                        .limits
                        .hold_fleet(&job.name, Instant::now() + shared.poll_interval);
                    // A limit set since the last poll: read it now, so the
                    // next claim of the job's keys takes places.
                    if !shared.limits.fleet_limited(&job.name) {
                        shared.poll_soon();
                    }
                    if waited_past_interval(&job.settings.schedule, sighting)
                        && let Some(n) = overdue.get_mut(&*job.name)
                    {
                        *n += 1;
                    }
                }
                metrics::claim(&job.name, outcome);
            }
        }
        for (name, keys) in overdue {
            metrics::fleet_limit_overdue(name, keys);
        }
        shared.file(&claimed.seen, proposal.marked);
        let gone = rows_gone(&proposal.jobs, &answered, &shared.registry());
        self.missing.extend(gone);
        Ok(look_again(started, &proposal))
    }

    /// Sends the claim of `proposal`'s keys (one statement, bounded by
    /// [`CLAIM_TIMEOUT`]); a failure counts every candidate as an error.
    async fn send_claim(&mut self, shared: &Shared, proposal: &Proposal) -> Result<Claimed, Duration> {
        let candidates: Vec<Candidate<'_>> = proposal
            .jobs
            .iter()
            .map(|j| Candidate {
                key: &j.key,
                job_name: &j.name,
                lease: j.settings.lease,
                timeout: j.settings.timeout,
                head_start: shared.priorities.head_start(&j.name),
            })
            .collect();
        // The claim's fleet-wide limits' steps only when a candidate's job
        // has a limit as the last poll read them: the claim without them
        // refuses a limited job's key, so knowledge a poll old is safe.
        let with_limits = shared.limits.any_fleet_limited(proposal.jobs.iter().map(|j| &*j.name));
        let answer = bounded(
            CLAIM_TIMEOUT,
            "claim",
            shared.store.claim_due(
                &shared.holder,
                &candidates,
                proposal.room,
                shared.history,
                shared.liveness.current(),
                with_limits,
            ),
        )
        .await;
        #[cfg(feature = "test-util")]
        shared.faults.claim_answered(&shared.stopping).await;
        if answer.is_err() {
            for job in &proposal.jobs {
                metrics::claim(&job.name, ClaimOutcome::Error);
            }
        }
        self.answered(shared, answer)
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

/// The keys one claim proposes.
struct Proposal {
    /// Due here now, at most `wanted`, in the queue's order.
    jobs: Vec<Arc<JobEntry>>,
    /// How many the claim asked the queue for: a full page means more may
    /// be due.
    wanted: usize,
    /// How many runs may start: the most the statement claims.
    room: usize,
    /// Taken with the candidates: a wake-up after it may announce a commit
    /// this claim's answer does not see.
    marked: WakeMark,
}

/// Step 1 of a claim: the due keys there is room for — here, and for their
/// job name when it has a limit here — or `None` when there is no room,
/// shutdown has begun or nothing is due at `now`.
fn propose(shared: &Shared, now: Instant) -> Option<Proposal> {
    let room = shared.room();
    if room == 0 || shared.stopping.is_cancelled() {
        return None;
    }
    let wanted = candidates_wanted(room);
    let (jobs, marked) = {
        let registry = shared.registry();
        let jobs = if !shared.priorities.is_empty() {
            registry.due_by_priority(now, wanted, &mut shared.limits.admit(), &shared.priorities)
        } else if shared.limits.is_empty() {
            registry.due(now, wanted)
        } else {
            registry.due_admitted(now, wanted, &mut shared.limits.admit())
        };
        (jobs, registry.mark())
    };
    (!jobs.is_empty()).then_some(Proposal {
        jobs,
        wanted,
        room,
        marked,
    })
}

/// What becomes of a key a claim acquired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admission {
    /// Run it, if it is still registered.
    Run,
    /// Answered after the tenure's local deadline ([`answered_too_late`]):
    /// hand it back unrun.
    TooLate,
    /// Shutdown began while the claim was in flight: hand it back.
    Stopping,
}

/// Step 3 of a claim, for one acquired key: whether its run may start. An
/// answer that came after the tenure's local deadline (sent + remaining −
/// margin, §5) means the lease may already have expired on the server and
/// another replica's run started, so this run must not start at all, not
/// even until the supervisor stops it. A claim is bounded by
/// `CLAIM_TIMEOUT`, not by the lease, so a slow answer can arrive that late
/// (found by the model check).
fn admission(sent: Instant, remaining: Duration, margin: Duration, now: Instant, stopping: bool) -> Admission {
    if answered_too_late(sent, remaining, margin, now) {
        Admission::TooLate
    } else if stopping {
        Admission::Stopping
    } else {
        Admission::Run
    }
}

/// Starts the supervised run of an acquired key, or hands the lease
/// straight back: claimed too late, claimed while shutting down (the claim
/// was in flight when it began), or removed while the claim was in flight.
/// The hand-back is tracked with the runs, so that shutdown waits for it
/// too. True if a run started.
fn start_or_hand_back(shared: &Arc<Shared>, job: Arc<JobEntry>, run: ClaimedRun, sent: Instant) -> bool {
    let lease = &run.lease;
    if let Some(lost_job) = &run.lost_job {
        tracing::warn!(key = %job.key, job = %lost_job, fence = lease.fence,
            "the key's previous run ended without a release (its replica crashed, froze past its lease \
             or could not write its release); recorded as lost");
        metrics::run_lost(lost_job);
    }
    shared
        .clock
        .observed(lease.expires_at - chrono::TimeDelta::from_std(lease.remaining).unwrap_or_default());
    let margin = job.settings.get_margin();
    let admitted = admission(
        sent,
        lease.remaining,
        margin,
        Instant::now(),
        shared.stopping.is_cancelled(),
    );
    if admitted == Admission::TooLate {
        tracing::warn!(key = %job.key, fence = lease.fence, "claim answered after its local deadline; not running it");
    }
    if shared.limits.fleet_limited(&job.name)
        && let Some(due) = run.pending_slot
    {
        metrics::fleet_limit_wait(&job.name, (lease.acquired_at - due).to_std().unwrap_or_default());
    }
    metrics::claim(
        &job.name,
        if admitted == Admission::TooLate {
            ClaimOutcome::TooLate
        } else {
            ClaimOutcome::Acquired
        },
    );
    if admitted != Admission::Run || !shared.registry().start(&job) {
        let store = shared.store.clone();
        let fence = lease.fence;
        let holder = lease.holder.clone();
        shared.runs.spawn(async move {
            let release = store.release(&job.key, &holder, fence);
            if tokio::time::timeout(CLAIM_TIMEOUT, release).await.is_err() {
                tracing::warn!(key = %job.key, "could not hand back a lease claimed at shutdown; it will expire");
            }
        });
        return false;
    }
    let tenure = Arc::new(
        Tenure::new(
            &job.name,
            run.lease,
            sent,
            job.settings.lease,
            margin,
            shared.store.clone(),
        )
        .with_args(run.args),
    );
    tenure.set_owner(run.owner);
    supervise::spawn(shared.clone(), job, tenure, run.run_no, run.pending_slot);
    true
}

/// Step 5 of a claim: the candidates the server said nothing about (their
/// row is gone: forgotten while registered) and that are still registered
/// as proposed (not removed or replaced meanwhile), to create again before
/// the next claim.
fn rows_gone(jobs: &[Arc<JobEntry>], answered: &FastSet<&str>, registry: &Registry) -> Vec<Arc<JobEntry>> {
    jobs.iter()
        .filter(|j| !answered.contains(&*j.key))
        .filter(|j| {
            registry
                .job(&j.key)
                .is_some_and(|registered| Arc::ptr_eq(&registered, j))
        })
        .cloned()
        .collect()
}

/// Step 6 of a claim: look again at once? Only after a full page of
/// candidates that yielded runs: more may be due. Keys handed back do not
/// count: they stay due here, so counting them would propose them again at
/// once, round after round.
fn look_again(started: usize, proposal: &Proposal) -> bool {
    started > 0 && proposal.jobs.len() >= proposal.wanted
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
/// Whether a key held back since it fell due has waited longer than its
/// schedule's interval (the time from that due time to the slot after it);
/// a manual key has none.
fn waited_past_interval(schedule: &crate::schedule::Schedule, sighting: &Sighting) -> bool {
    let Some(due) = sighting.next_due_at else {
        return false;
    };
    let Some(next) = schedule.upcoming(due).next() else {
        return false;
    };
    sighting.server_now - due > next - due
}

fn unclaimed(sighting: &Sighting) -> ClaimOutcome {
    if sighting.paused {
        ClaimOutcome::Paused
    } else if sighting.held_back && sighting.due_in().is_zero() && sighting.held_for().is_none() {
        ClaimOutcome::Limited
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
    //! answers come too late, how an unclaimed key is counted, and the
    //! named steps of a claim (propose, admit, rows gone, look again).

    use std::time::Duration;

    use chrono::TimeDelta;
    use tokio::time::Instant;

    use super::{
        Admission, MAX_CANDIDATES, admission, answered_too_late, candidates_wanted, look_again, propose, rows_gone,
        sleep_for, unclaimed,
    };
    use crate::fast_hash::FastSet;
    use crate::metrics::ClaimOutcome;
    use crate::runtime::state::testing::{entry, entry_of, free, held_elsewhere, shared, shared_limited, tenure};
    use crate::runtime::state::{NameLimits, Registry, RunSlot};

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

    /// Keys filed at `at`, each with its own registered job.
    fn registry_of(keys: &[&str], at: Instant) -> Registry {
        let mut registry = Registry::default();
        for key in keys {
            registry.insert(entry(key), at);
        }
        registry
    }

    fn keys(jobs: &[std::sync::Arc<crate::runtime::state::JobEntry>]) -> Vec<&str> {
        jobs.iter().map(|j| &*j.key).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_claim_proposes_the_keys_due_now_when_there_is_room() {
        let now = Instant::now();
        let mut registry = registry_of(&["a", "b"], now);
        registry.insert(entry("later"), now + 10 * SECOND);
        let shared = shared(2, registry);
        let proposal = propose(&shared, Instant::now()).expect("two keys due");
        assert_eq!(keys(&proposal.jobs), ["a", "b"], "not the key due later");
        assert_eq!((proposal.room, proposal.wanted), (2, 8));

        tokio::time::advance(10 * SECOND).await;
        let proposal = propose(&shared, Instant::now()).expect("three keys due");
        assert_eq!(keys(&proposal.jobs), ["a", "b", "later"], "in the queue's order");
    }

    /// Four reports and one billing key due at once, reports limited to 2
    /// here: a claim proposes two reports and the billing key; with a
    /// report running, one report; with two running, none — the held-back
    /// reports stay due, and are not worth waking for until a run ends.
    #[tokio::test(start_paused = true)]
    async fn a_claim_proposes_a_limited_names_keys_only_up_to_its_room_left() {
        let now = Instant::now();
        let mut registry = Registry::default();
        for key in ["r1", "r2", "r3", "r4"] {
            registry.insert(entry_of("report", key), now);
        }
        registry.insert(entry_of("billing", "b1"), now);
        registry.insert(entry_of("billing", "b2"), now + 10 * SECOND);
        let limits = NameLimits::new([(std::sync::Arc::from("report"), 2)]);
        let shared = shared_limited(8, registry, limits);

        let proposal = propose(&shared, now).expect("keys due");
        assert_eq!(
            keys(&proposal.jobs),
            ["b1", "r1", "r2"],
            "two reports, and the other name's key"
        );
        assert_eq!(
            proposal.room, 8,
            "the runtime's own room is not spent on held-back keys"
        );

        let start = |job: &std::sync::Arc<crate::runtime::state::JobEntry>| {
            assert!(shared.registry().start(job));
            RunSlot::take(shared.clone(), job.clone(), tenure(&shared, job))
        };
        let (b1, r1, r2) = (&proposal.jobs[0], &proposal.jobs[1], &proposal.jobs[2]);
        let billing = start(b1);
        let first = start(r1);
        assert_eq!(keys(&propose(&shared, now).expect("one report fits").jobs), ["r2"]);
        let second = start(r2);
        assert!(
            propose(&shared, now).is_none(),
            "r3 and r4 are held back: nothing to propose"
        );
        let admit = shared.limits.admit();
        assert_eq!(
            shared.registry().next_at_admitted(&admit),
            Some(now + 10 * SECOND),
            "the next key worth waking for is the later billing key, not a held-back report"
        );
        drop(billing);

        drop(first);
        let proposal = propose(&shared, now).expect("a report's run ended: one place");
        assert_eq!(
            keys(&proposal.jobs),
            ["b1", "r1"],
            "the ended runs' keys are due again; one report fits, r3 and r4 wait"
        );
        drop(second);
    }

    #[tokio::test(start_paused = true)]
    async fn a_claim_proposes_nothing_without_room_while_stopping_or_with_nothing_due() {
        let now = Instant::now();
        assert!(propose(&shared(0, registry_of(&["a"], now)), now).is_none(), "no room");
        assert!(
            propose(&shared(2, registry_of(&["a"], now + SECOND)), now).is_none(),
            "nothing due yet"
        );
        let stopping = shared(2, registry_of(&["a"], now));
        stopping.stopping.cancel();
        assert!(propose(&stopping, now).is_none(), "shutdown has begun");
    }

    #[tokio::test(start_paused = true)]
    async fn an_acquired_key_runs_unless_answered_too_late_or_at_shutdown() {
        let sent = Instant::now();
        let (remaining, margin) = (30 * SECOND, 3 * SECOND);
        assert_eq!(
            admission(sent, remaining, margin, sent + 26 * SECOND, false),
            Admission::Run
        );
        assert_eq!(
            admission(sent, remaining, margin, sent + 26 * SECOND, true),
            Admission::Stopping
        );
        tokio::time::advance(27 * SECOND).await;
        assert_eq!(
            admission(sent, remaining, margin, Instant::now(), false),
            Admission::TooLate,
            "at the local deadline"
        );
        assert_eq!(
            admission(sent, remaining, margin, Instant::now(), true),
            Admission::TooLate,
            "too late is counted as such, also at shutdown"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn rows_gone_are_the_unanswered_candidates_still_registered_as_proposed() {
        let now = Instant::now();
        let mut registry = registry_of(&["answered", "replaced", "gone", "removed"], now);
        let proposed = registry.due(now, 8);
        registry.insert(entry("unregistered-later"), now);
        assert!(registry.replace(entry("replaced")), "a new job under the same key");
        registry.remove("removed");
        let answered: FastSet<&str> = ["answered"].into_iter().collect();
        assert_eq!(keys(&rows_gone(&proposed, &answered, &registry)), ["gone"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_claim_looks_again_only_after_a_full_page_that_started_runs() {
        let now = Instant::now();
        let full: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
        let full: Vec<&str> = full.iter().map(String::as_str).collect();
        let page = propose(&shared(4, registry_of(&full, now)), now).expect("eight keys due");
        assert_eq!(page.jobs.len(), page.wanted);
        assert!(look_again(1, &page), "a full page that started a run");
        assert!(!look_again(0, &page), "every key handed back or not claimed");
        let short = propose(&shared(4, registry_of(&["a", "b"], now)), now).expect("two keys due");
        assert!(!look_again(2, &short), "fewer keys than asked for: none left");
    }
}
