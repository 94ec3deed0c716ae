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

use std::sync::Mutex;

use tokio::time::Instant;

use crate::lease::Registration;

#[derive(Default)]
pub(crate) struct Liveness {
    current: Mutex<Option<(Registration, Instant)>>,
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
}
