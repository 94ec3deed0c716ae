//! This runtime's liveness registration, as the listener keeps it
//! (invariant 10; the SQL is `lease/liveness.rs`).
//!
//! # Invariants
//!
//! - `current` is the registration claims stamp their runs with, or none:
//!   set once the listener registered its session, cleared the moment that
//!   session is seen to fail, so a claim sent after the failure stamps
//!   nothing (its run falls back to its lease).
//! - `confirmed` is the local instant the latest successful confirmation
//!   of `current` was *sent*: the server wrote its `confirmed_at` after
//!   that, so no replica can take a run stamped with it over before
//!   `confirmed + GRACE`, by any clock that runs at the real rate.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

use tokio::time::Instant;

use crate::lease::Registration;

#[derive(Default)]
pub(crate) struct Liveness {
    /// The registration's id, 0 for none (ids start at 1).
    current: AtomicI64,
    confirmed: Mutex<Option<Instant>>,
}

impl Liveness {
    /// The registration a claim sent now stamps its runs with.
    pub(crate) fn current(&self) -> Option<Registration> {
        match self.current.load(Ordering::SeqCst) {
            0 => None,
            id => Some(Registration { id }),
        }
    }

    /// `registration` was just made, or confirmed, by a statement sent at
    /// `sent`.
    pub(crate) fn confirmed(&self, registration: Registration, sent: Instant) {
        *self.confirmed.lock().unwrap_or_else(|p| p.into_inner()) = Some(sent);
        self.current.store(registration.id, Ordering::SeqCst);
    }

    /// The session failed: claims stop stamping. Returns the registration
    /// it had and when it was last confirmed.
    pub(crate) fn failed(&self) -> Option<(Registration, Instant)> {
        let id = self.current.swap(0, Ordering::SeqCst);
        let confirmed = *self.confirmed.lock().unwrap_or_else(|p| p.into_inner());
        match (id, confirmed) {
            (0, _) | (_, None) => None,
            (id, Some(sent)) => Some((Registration { id }, sent)),
        }
    }
}
