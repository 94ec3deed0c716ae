//! The scheduler's statements: many keys per statement, so a runtime's cost
//! follows the work it does, not the number of keys it registers.
//!
//! Same invariants as the single-key statements (numbered in the doc
//! comment of `lease/mod.rs`): server clock only, one round trip, fences from the
//! sequence, a claim for a run only on a free and due lease, releases scoped
//! to `(key, holder, fence)`. Two more, for batches:
//!
//! - *Replicas do not wait for each other*: the batch claim locks its rows
//!   with `FOR UPDATE SKIP LOCKED`, so two runtimes claiming overlapping
//!   key sets split them instead of queueing.
//! - *Wake-ups ride on the writes*: a statement that makes a key claimable
//!   now (a trigger, a release of a still-due key, a new due key) sends
//!   `NOTIFY leasehold, '<key>'` in the same transaction, so listeners hear
//!   of it exactly when it commits.

mod claim_due;
mod finish;
mod poll;
mod register;

use std::time::Duration;

use chrono::{DateTime, Utc};

pub(crate) use claim_due::{Candidate, Claimed, ClaimedRun};
pub(crate) use finish::{Finish, Released};
pub(crate) use poll::Polled;
pub(crate) use register::Registered;

/// What the server says about one key the scheduler asked about: enough to
/// know when to look at it again.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub(crate) struct Sighting {
    pub(crate) key: String,
    pub(crate) expires_at: DateTime<Utc>,
    pub(crate) next_due_at: Option<DateTime<Utc>>,
    pub(crate) server_now: DateTime<Utc>,
    /// Paused (by key or job): not claimable until resumed.
    #[sqlx(default)]
    pub(crate) paused: bool,
    /// Not claimed because its job has a fleet-wide limit (invariant 11):
    /// its places were all taken, or (rarely) its row was locked by
    /// another claimer. Looked at again when a place frees.
    #[sqlx(default)]
    pub(crate) held_back: bool,
    /// Its job has a fleet-wide limit (whether or not it got a place).
    #[sqlx(default)]
    pub(crate) limited: bool,
}

impl Sighting {
    /// Time left on a live lease, by the server clock (`None` when free).
    pub(crate) fn held_for(&self) -> Option<Duration> {
        (self.expires_at - self.server_now)
            .to_std()
            .ok()
            .filter(|d| !d.is_zero())
    }

    /// Time until due, by the server clock (zero when due).
    pub(crate) fn due_in(&self) -> Duration {
        self.next_due_at
            .and_then(|due| (due - self.server_now).to_std().ok())
            .unwrap_or(Duration::ZERO)
    }
}
