//! The state of one run's tenure, shared by the run's guard, the job loop
//! that started it, and the heartbeat. Private: [`FenceGuard`] is the handle.
//!
//! # Invariants
//!
//! - The fence never changes: a tenure is one run (invariant 5). A new run
//!   is a new `Tenure`.
//! - The cancel reason is set at most once, and always *before* the token is
//!   cancelled, so whoever observes the cancellation reads the reason.
//! - The local deadline only moves forward, and only from a successful
//!   renewal: `deadline = sent + remaining - margin`, where `sent` is the
//!   local monotonic instant the renewal (or claim) was sent and `remaining`
//!   the time left measured by the server after the write. The server's
//!   expiry cannot come before `sent + remaining` in real time, so the run is
//!   stopped `margin` before anyone else can claim the lease.
//! - A tenure cancelled for any reason but shutdown, pause, removal or
//!   timeout is never renewed again: after a loss, silently extending the
//!   lease would hide a gap in exclusion. (Those four are requests to stop,
//!   not losses: the run still holds its lease while it winds down.)
//!
//! [`FenceGuard`]: crate::FenceGuard

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cancel::CancelReason;
use crate::lease::{Lease, LeaseStore, StoredArgs};
use crate::metrics;

pub(crate) struct Tenure {
    pub(crate) job: String,
    pub(crate) key: String,
    pub(crate) holder: String,
    pub(crate) fence: i64,
    /// Server time the tenure began: the "now" its next slot is computed from.
    pub(crate) acquired_at: DateTime<Utc>,
    pub(crate) ttl: Duration,
    margin: Duration,
    pub(crate) store: LeaseStore,
    token: CancellationToken,
    /// Cancelled once the run has ended and its release went out (or gave
    /// up): what `Runtime::remove` waits for.
    pub(crate) ended: CancellationToken,
    reason: OnceLock<CancelReason>,
    slot: OnceLock<Option<DateTime<Utc>>>,
    /// The stored key's arguments this run starts with, as its claim read
    /// them (keys of job kinds only).
    pub(crate) args: Option<StoredArgs>,
    times: Mutex<Times>,
    /// The liveness registration the lease row is stamped with (0: none;
    /// invariant 10), moved by a re-point.
    owner: AtomicI64,
    /// When each fence advance now in flight was sent (`begin_fenced` may
    /// run from several clones of the guard at once), for `Runtime::health`.
    fence_waits: Mutex<Vec<Instant>>,
}

/// A fence advance in flight: counted in [`Tenure::longest_fence_wait`]
/// until dropped, and then recorded in `leasehold_fence_wait_seconds` —
/// also when the advance is cancelled, since its wait was real.
pub(crate) struct FenceWait<'a> {
    tenure: &'a Tenure,
    sent: Instant,
}

impl FenceWait<'_> {
    /// How long it has waited so far.
    pub(crate) fn waited(&self) -> Duration {
        self.sent.elapsed()
    }
}

impl Drop for FenceWait<'_> {
    fn drop(&mut self) {
        let mut waits = self.tenure.fence_waits.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = waits.iter().position(|t| *t == self.sent) {
            waits.swap_remove(i);
        }
        metrics::fence_wait(&self.tenure.job, self.sent.elapsed());
    }
}

#[derive(Clone, Copy)]
struct Times {
    /// Server expiry after the latest renewal (for display and metrics).
    expires_at: DateTime<Utc>,
    /// Local instant by which the server expiry has certainly not passed.
    valid_until: Instant,
}

impl Tenure {
    /// A tenure from a claim sent at `sent`.
    pub(crate) fn new(
        job: &str,
        lease: Lease,
        sent: Instant,
        ttl: Duration,
        margin: Duration,
        store: LeaseStore,
    ) -> Self {
        Tenure {
            job: job.to_owned(),
            times: Mutex::new(Times {
                expires_at: lease.expires_at,
                valid_until: sent + lease.remaining,
            }),
            key: lease.key,
            holder: lease.holder,
            fence: lease.fence,
            acquired_at: lease.acquired_at,
            ttl,
            margin,
            store,
            token: CancellationToken::new(),
            ended: CancellationToken::new(),
            reason: OnceLock::new(),
            slot: OnceLock::new(),
            args: None,
            owner: AtomicI64::new(0),
            fence_waits: Mutex::new(Vec::new()),
        }
    }

    /// The tenure of a stored key's run, with the arguments its claim read.
    pub(crate) fn with_args(mut self, args: Option<StoredArgs>) -> Self {
        self.args = args;
        self
    }

    /// The liveness registration the run's lease row is stamped with.
    pub(crate) fn owner(&self) -> Option<i64> {
        Some(self.owner.load(Ordering::SeqCst)).filter(|id| *id != 0)
    }

    /// The lease row's stamp now names `owner` (the claim's, or a re-point's).
    pub(crate) fn set_owner(&self, owner: Option<i64>) {
        self.owner.store(owner.unwrap_or(0), Ordering::SeqCst);
    }

    fn times(&self) -> Times {
        // A poisoned lock only means a panic elsewhere while writing two
        // plain values; they are still consistent.
        *self.times.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a successful renewal sent at `sent`. Never moves the deadline
    /// back, and is ignored once the tenure is lost.
    pub(crate) fn renewed(&self, lease: &Lease, sent: Instant) {
        // Only this tenure's own row may move its deadline: the renewal
        // SQL returns only rows matching holder and fence (invariant 6),
        // and this check keeps that true here even if a caller passed
        // another row (the model check showed `ensure` would otherwise
        // trust whatever row came back; model/README.md).
        if !self.wants_renewal() || lease.key != self.key || lease.fence != self.fence {
            return;
        }
        let mut times = self.times.lock().unwrap_or_else(|p| p.into_inner());
        let valid_until = sent + lease.remaining;
        if valid_until > times.valid_until {
            *times = Times {
                expires_at: lease.expires_at,
                valid_until,
            };
        }
    }

    /// Cancels the run for `reason`. The first reason wins; returns whether
    /// this call set it.
    pub(crate) fn cancel(&self, reason: CancelReason) -> bool {
        let first = self.reason.set(reason).is_ok();
        self.token.cancel();
        first
    }

    /// Cancels the run because its lease is gone (or about to be): logged
    /// at ERROR and counted once, however many parts of the runtime notice.
    /// Returns whether this call was the one that counted it, so a caller
    /// keeping a count of its own counts each loss once too.
    pub(crate) fn lose(&self, reason: CancelReason) -> bool {
        let first = self.cancel(reason);
        if first {
            tracing::error!(job = %self.job, key = %self.key, holder = %self.holder, fence = self.fence,
                %reason, "lease lost; cancelling the run");
            metrics::lost(&self.job, reason);
        }
        first
    }

    /// Why the lease was lost, when a renewal finds the tenure gone:
    /// expired if the local clock says it may have run out, else stolen.
    pub(crate) fn loss_reason(&self) -> CancelReason {
        if Instant::now() >= self.times().valid_until {
            CancelReason::Expired
        } else {
            CancelReason::Stolen
        }
    }

    pub(crate) fn reason(&self) -> Option<CancelReason> {
        self.reason.get().copied()
    }

    /// Whether the heartbeat should keep renewing this tenure: yes while
    /// it runs, and while a run asked to stop (shutdown, pause, removal,
    /// its time limit) winds down within its grace — it still legitimately
    /// holds the lease, and no other replica may start the key before it
    /// has ended.
    pub(crate) fn wants_renewal(&self) -> bool {
        matches!(
            self.reason(),
            None | Some(CancelReason::Shutdown | CancelReason::Paused | CancelReason::Removed | CancelReason::Timeout)
        )
    }

    /// The schedule slot this run is for, once decided (`None`: a triggered
    /// or manual run).
    pub(crate) fn slot(&self) -> Option<DateTime<Utc>> {
        self.slot.get().copied().flatten()
    }

    /// Records the slot this run is for (once; later calls are ignored).
    pub(crate) fn set_slot(&self, slot: Option<DateTime<Utc>>) {
        let _ = self.slot.set(slot);
    }

    /// Marks a fence advance as sent now, until the returned value drops.
    pub(crate) fn fence_wait(&self) -> FenceWait<'_> {
        let sent = Instant::now();
        self.fence_waits.lock().unwrap_or_else(|p| p.into_inner()).push(sent);
        FenceWait { tenure: self, sent }
    }

    /// How long the oldest fence advance still in flight has waited.
    pub(crate) fn longest_fence_wait(&self) -> Option<Duration> {
        let waits = self.fence_waits.lock().unwrap_or_else(|p| p.into_inner());
        waits.iter().min().map(|sent| sent.elapsed())
    }

    pub(crate) fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// The local instant at which the run must be stopped if no renewal
    /// arrives: `margin` before the lease can expire on the server.
    pub(crate) fn deadline(&self) -> Instant {
        self.times()
            .valid_until
            .checked_sub(self.margin)
            .unwrap_or_else(Instant::now)
    }

    pub(crate) fn expires_at(&self) -> DateTime<Utc> {
        self.times().expires_at
    }

    /// Time left before the local deadline.
    pub(crate) fn remaining(&self) -> Duration {
        self.deadline().saturating_duration_since(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    //! The tenure's state transitions, on a paused clock and a store that
    //! never connects (a tenure only holds it for the guard's writes).
    use super::*;

    const LEASE: Duration = Duration::from_secs(30);
    const MARGIN: Duration = Duration::from_secs(3);

    /// A lease row as a claim or renewal answers it. Its server times are
    /// for display only: the tenure decides on `remaining` and local time.
    fn lease(key: &str, fence: i64, remaining: Duration) -> Lease {
        Lease {
            key: key.to_owned(),
            holder: "r1".to_owned(),
            fence,
            acquired_at: DateTime::UNIX_EPOCH,
            expires_at: DateTime::UNIX_EPOCH,
            remaining,
        }
    }

    fn tenure() -> Tenure {
        let store = LeaseStore::new(
            sqlx::postgres::PgPoolOptions::new()
                .connect_lazy("postgres://leasehold@127.0.0.1:1/never")
                .expect("a lazy pool"),
        );
        Tenure::new(
            "billing",
            lease("billing", 7, LEASE),
            Instant::now(),
            LEASE,
            MARGIN,
            store,
        )
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_is_a_margin_before_the_lease_and_only_moves_forward() {
        let t = tenure();
        let claimed = Instant::now();
        assert_eq!(t.deadline(), claimed + LEASE - MARGIN);
        tokio::time::advance(Duration::from_secs(10)).await;
        // A renewal sent now with the whole lease left moves it on.
        let sent = Instant::now();
        t.renewed(&lease("billing", 7, LEASE), sent);
        assert_eq!(t.deadline(), sent + LEASE - MARGIN);
        // An older answer (sent before, or with less left) never moves it back.
        t.renewed(&lease("billing", 7, LEASE), claimed);
        t.renewed(&lease("billing", 7, Duration::from_secs(1)), sent);
        assert_eq!(t.deadline(), sent + LEASE - MARGIN);
        assert_eq!(t.remaining(), LEASE - MARGIN);
    }

    #[tokio::test(start_paused = true)]
    async fn only_its_own_row_renews_it() {
        let t = tenure();
        let before = t.deadline();
        tokio::time::advance(Duration::from_secs(10)).await;
        t.renewed(&lease("billing", 8, LEASE), Instant::now());
        t.renewed(&lease("reports", 7, LEASE), Instant::now());
        assert_eq!(t.deadline(), before, "another fence or key moves nothing");
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_reason_wins_and_is_set_before_the_token_is_cancelled() {
        let t = tenure();
        assert_eq!((t.reason(), t.token().is_cancelled()), (None, false));
        assert!(t.cancel(CancelReason::Paused));
        assert_eq!(
            (t.reason(), t.token().is_cancelled()),
            (Some(CancelReason::Paused), true)
        );
        assert!(!t.lose(CancelReason::Stolen), "a second reason does not count");
        assert!(!t.cancel(CancelReason::Shutdown));
        assert_eq!(t.reason(), Some(CancelReason::Paused));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_tenure_is_never_renewed_and_a_stopping_one_still_is() {
        for reason in [CancelReason::Stolen, CancelReason::Expired, CancelReason::Deadline] {
            let t = tenure();
            let before = t.deadline();
            assert!(t.lose(reason), "{reason}: the first loss counts");
            assert!(!t.wants_renewal(), "{reason}");
            tokio::time::advance(Duration::from_secs(10)).await;
            t.renewed(&lease("billing", 7, LEASE), Instant::now());
            assert_eq!(t.deadline(), before, "{reason}: a loss is never papered over");
        }
        for reason in [
            CancelReason::Shutdown,
            CancelReason::Paused,
            CancelReason::Removed,
            CancelReason::Timeout,
        ] {
            let t = tenure();
            t.cancel(reason);
            assert!(t.wants_renewal(), "{reason}: still holds its lease while it winds down");
            tokio::time::advance(Duration::from_secs(10)).await;
            let sent = Instant::now();
            t.renewed(&lease("billing", 7, LEASE), sent);
            assert_eq!(t.deadline(), sent + LEASE - MARGIN, "{reason}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_tenure_gone_before_its_time_was_stolen_and_after_it_expired() {
        let t = tenure();
        assert_eq!(t.loss_reason(), CancelReason::Stolen);
        tokio::time::advance(LEASE).await;
        assert_eq!(t.loss_reason(), CancelReason::Expired);
    }
}
