//! Fault injection for tests and chaos runs (feature `test-util`), reached
//! through `Runtime::faults`, and counters of the services' progress, so a
//! test can wait for the runtime's own decisions (two polls, three
//! heartbeat ticks) instead of a guessed stretch of wall time. Nothing here
//! is needed in production, and without the feature none of it is compiled.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Fault injection for tests and chaos runs, and counters of the runtime's
/// progress, reached through [`Runtime::faults`](crate::Runtime::faults).
/// Needs the `test-util` feature.
#[derive(Debug, Default)]
pub struct Faults {
    stall_heartbeats: AtomicBool,
    freeze_liveness: AtomicBool,
    partitioned: AtomicBool,
    hold_claim_answers: AtomicBool,
    claim_answers_let_go: Notify,
    claim_answers_held: AtomicU64,
    notifications_heard: AtomicU64,
    pooler_found: AtomicBool,
    polls_begun: AtomicU64,
    polls_done: AtomicU64,
    heartbeats_begun: AtomicU64,
    heartbeats_done: AtomicU64,
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

    /// While `true`, the listener neither registers nor confirms its
    /// liveness session, as a frozen process would not, though the session
    /// stays open (invariant 10).
    pub fn freeze_liveness(&self, frozen: bool) {
        self.freeze_liveness.store(frozen, Ordering::SeqCst);
    }

    pub(crate) fn liveness_frozen(&self) -> bool {
        self.freeze_liveness.load(Ordering::SeqCst) || self.partitioned()
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

    /// While `true`, the scheduler holds every claim answer it gets before
    /// acting on it, until this is set back to `false`: the claim stays in
    /// flight, as on a loaded machine, for as long as a test needs (say, for
    /// a notification to arrive meanwhile). Shutdown lets a held answer go.
    pub fn hold_claim_answers(&self, hold: bool) {
        self.hold_claim_answers.store(hold, Ordering::SeqCst);
        if !hold {
            self.claim_answers_let_go.notify_waiters();
        }
    }

    /// How many claim answers [`Faults::hold_claim_answers`] has held so far.
    pub fn claim_answers_held(&self) -> u64 {
        self.claim_answers_held.load(Ordering::SeqCst)
    }

    /// How many wake-up notifications the listener has heard so far (its
    /// own probes aside).
    pub fn notifications_heard(&self) -> u64 {
        self.notifications_heard.load(Ordering::SeqCst)
    }

    /// Where the scheduler has a claim answer: held there while
    /// [`Faults::hold_claim_answers`] says so, or until `stopping`.
    pub(crate) async fn claim_answered(&self, stopping: &CancellationToken) {
        if !self.hold_claim_answers.load(Ordering::SeqCst) {
            return;
        }
        self.claim_answers_held.fetch_add(1, Ordering::SeqCst);
        loop {
            // Registered before the flag is read again, so a release between
            // the two is not missed.
            let let_go = self.claim_answers_let_go.notified();
            tokio::pin!(let_go);
            let_go.as_mut().enable();
            if !self.hold_claim_answers.load(Ordering::SeqCst) {
                return;
            }
            tokio::select! {
                _ = let_go => {}
                _ = stopping.cancelled() => return,
            }
        }
    }

    /// Whether the listener has found a connection pooler between it and
    /// the server (its session mark refused or missing, or its session
    /// shared) and given up listening for good.
    pub fn pooler_found(&self) -> bool {
        self.pooler_found.load(Ordering::SeqCst)
    }

    pub(crate) fn pooler_detected(&self) {
        self.pooler_found.store(true, Ordering::SeqCst);
    }

    pub(crate) fn notification_heard(&self) {
        self.notifications_heard.fetch_add(1, Ordering::SeqCst);
    }

    /// How many scheduler passes have begun with a poll (`due_since`) so far.
    /// Passes run one at a time, so once [`Faults::polls_done`] reaches this
    /// reading plus `n`, `n` whole passes that began after the reading have
    /// ended.
    pub fn polls_begun(&self) -> u64 {
        self.polls_begun.load(Ordering::SeqCst)
    }

    /// How many scheduler passes that polled have ended: the poll answered
    /// (or failed), and every key then due here was proposed in a claim and
    /// its run, if claimed, spawned.
    pub fn polls_done(&self) -> u64 {
        self.polls_done.load(Ordering::SeqCst)
    }

    /// How many heartbeat ticks have begun to renew (stalled ticks, which
    /// send nothing, are not counted).
    pub fn heartbeats_begun(&self) -> u64 {
        self.heartbeats_begun.load(Ordering::SeqCst)
    }

    /// How many heartbeat ticks have ended: their renewal answered (or
    /// failed, or there was nothing to renew), and each loss it reported
    /// cancelled its run.
    pub fn heartbeats_done(&self) -> u64 {
        self.heartbeats_done.load(Ordering::SeqCst)
    }

    pub(crate) fn poll_begins(&self) {
        self.polls_begun.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn poll_done(&self) {
        self.polls_done.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn heartbeat_begins(&self) {
        self.heartbeats_begun.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn heartbeat_done(&self) {
        self.heartbeats_done.fetch_add(1, Ordering::SeqCst);
    }
}
