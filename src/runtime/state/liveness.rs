//! This runtime's liveness registration, as the listener keeps it
//! (invariant 10; the SQL is `lease/liveness.rs`).
//!
//! # Invariants
//!
//! - `current` is the registration claims stamp their runs with, or none:
//!   set once the listener registered its session, cleared the moment that
//!   session is seen to fail, so a claim sent after the failure stamps
//!   nothing (its run falls back to its lease).
//! - Its instant is the local instant the latest successful confirmation
//!   was *sent*: the server wrote its `confirmed_at` after that, and can
//!   only see the session gone after its last confirmation, so no replica
//!   can take a run stamped with it over before that instant plus the
//!   grace, by any clock that runs at the real rate.
//! - `settled` turns true once, when the listener's first attempt to
//!   register is over (registered, or failed, or there is no listener):
//!   the scheduler's first claim waits for it, so the runs a replica
//!   starts as it comes up are stamped like the others.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::lease::Registration;

#[derive(Default)]
pub(crate) struct Liveness {
    current: Mutex<Option<(Registration, Instant)>>,
    /// Cancelled once the first attempt to register is over: a flag that
    /// can be awaited.
    settled: CancellationToken,
}

impl Liveness {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(Registration, Instant)>> {
        // One plain value, written whole: consistent even after a panic.
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The registration a claim sent now stamps its runs with.
    pub(crate) fn current(&self) -> Option<Registration> {
        self.lock().map(|(registration, _)| registration)
    }

    /// `registration` was just made, or confirmed, by a statement sent at
    /// `sent`.
    pub(crate) fn confirmed(&self, registration: Registration, sent: Instant) {
        *self.lock() = Some((registration, sent));
    }

    /// The session failed: claims stop stamping. Returns the registration
    /// it had and when it was last confirmed.
    pub(crate) fn failed(&self) -> Option<(Registration, Instant)> {
        self.lock().take()
    }

    /// The first attempt to register is over, whatever came of it.
    pub(crate) fn settle(&self) {
        self.settled.cancel();
    }

    /// Waits, at most `limit`, for the first attempt to register to be
    /// over ([`settle`](Self::settle)).
    pub(crate) async fn first_settled(&self, limit: Duration) {
        let _ = tokio::time::timeout(limit, self.settled.cancelled()).await;
    }
}
