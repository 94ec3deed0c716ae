//! The lease row: what a statement returns about a key, and the views
//! of it callers get ([`Lease`], [`LeaseInfo`]).

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::KeyState;

/// A lease this caller holds: the tenure identified by `(key, holder, fence)`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Lease {
    /// The lease key.
    pub key: String,
    /// The holder id that claimed it.
    pub holder: String,
    /// The fencing token of this tenure. Send it with every downstream write.
    pub fence: i64,
    /// Server time when this tenure began.
    pub acquired_at: DateTime<Utc>,
    /// Server time when the lease expires unless renewed.
    pub expires_at: DateTime<Utc>,
    /// Time left on the lease, measured by the server when the statement ran.
    /// Measured from when the request was *sent*, this is a safe local
    /// deadline (see the runtime's heartbeat).
    pub remaining: Duration,
}

/// The row of a key as the server last saw it, for inspection.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LeaseInfo {
    /// The lease key.
    pub key: String,
    /// The current holder, or the last one if the lease is free.
    pub holder: String,
    /// The fence of the current (or last) tenure.
    pub fence: i64,
    /// Server time the current (or last) tenure began.
    pub acquired_at: DateTime<Utc>,
    /// Server time the lease expires (or expired, or was released).
    pub expires_at: DateTime<Utc>,
    /// When the next scheduled run is due (server time); `None` means now.
    pub next_due_at: Option<DateTime<Utc>>,
    /// The job the key belongs to, as its runtime last registered or
    /// claimed it (`None` on rows no runtime of schema 3 has touched yet).
    pub job_name: Option<String>,
    /// The server's clock when this was read.
    pub server_now: DateTime<Utc>,
    /// Whether a runtime's run of the key is open: claimed for a run and
    /// not released yet (a lease taken with the low-level `claim` is not a
    /// run).
    pub run_open: bool,
    /// The time limit of the current (or last) run, as the runtime that
    /// claimed it wrote it (`JobSettings::timeout`; `None`: no limit, or a
    /// runtime older than schema 13).
    pub run_timeout: Option<Duration>,
}

impl LeaseInfo {
    /// How long the run in progress has been going, by the server clock:
    /// `None` unless the lease is held for a run ([`run_open`](LeaseInfo::run_open)).
    /// Shown against [`run_timeout`](LeaseInfo::run_timeout) by `leasehold
    /// status` and the console.
    pub fn running_for(&self) -> Option<Duration> {
        (self.is_held() && self.run_open).then(|| (self.server_now - self.acquired_at).to_std().unwrap_or_default())
    }

    /// Whether some holder holds the lease right now (by the server clock).
    pub fn is_held(&self) -> bool {
        self.expires_at > self.server_now
    }

    /// Time left on the lease by the server clock (zero if free).
    pub fn remaining(&self) -> Duration {
        (self.expires_at - self.server_now).to_std().unwrap_or(Duration::ZERO)
    }

    /// Time until the next scheduled run is due by the server clock (zero if due).
    pub fn due_in(&self) -> Duration {
        self.next_due_at
            .and_then(|due| (due - self.server_now).to_std().ok())
            .unwrap_or(Duration::ZERO)
    }

    /// Whether the key runs only when triggered: its job is manual, or its
    /// schedule has no slot left (the due time is the "never" marker, year
    /// 9999, that the runtime writes for such keys).
    pub fn due_only_when_triggered(&self) -> bool {
        self.next_due_at.is_some_and(|due| due >= crate::schedule::never())
    }

    /// Whether the key was registered by a runtime but never claimed: its
    /// holder and fence are placeholders, no run ever took place.
    pub fn never_run(&self) -> bool {
        never_claimed(self.acquired_at, self.expires_at)
    }

    /// The lease's own state by the server clock: [`KeyState::Held`],
    /// [`KeyState::NeverRun`] or [`KeyState::Free`] (never
    /// [`KeyState::Paused`]: a pause is a row of its own, which
    /// [`KeyStatus::state`](super::KeyStatus::state) reads too).
    ///
    /// ```no_run
    /// # async fn demo(store: leasehold::store::LeaseStore) -> leasehold::Result<()> {
    /// if let Some(lease) = store.get("billing:acme").await? {
    ///     println!("{}: {}", lease.key, lease.state()); // held, free or never-run
    /// }
    /// # Ok(()) }
    /// ```
    pub fn state(&self) -> KeyState {
        if self.is_held() {
            KeyState::Held
        } else if self.never_run() {
            KeyState::NeverRun
        } else {
            KeyState::Free
        }
    }
}

/// The registration marker written by `LeaseStore::register`: a row that
/// expires exactly 1 µs after it was "acquired" was never claimed (every
/// claim gives at least [`crate::store::MIN_LEASE`]; a release of a run is never
/// within 1 µs of its claim).
pub(crate) fn never_claimed(acquired_at: DateTime<Utc>, expires_at: DateTime<Utc>) -> bool {
    expires_at - acquired_at <= chrono::TimeDelta::microseconds(1)
}

/// Columns every lease-returning statement ends with, so one row type reads
/// them all. `remaining_secs` is measured on the server after the write.
#[derive(sqlx::FromRow)]
pub(crate) struct LeaseRow {
    pub(crate) key: String,
    pub(crate) holder: String,
    pub(crate) fence: i64,
    pub(crate) acquired_at: DateTime<Utc>,
    pub(crate) expires_at: DateTime<Utc>,
    pub(crate) next_due_at: Option<DateTime<Utc>>,
    pub(crate) job_name: Option<String>,
    /// The slot the key's next run is for (NULL on rows written before
    /// schema 3: then the due time is the slot).
    pub(crate) slot_at: Option<DateTime<Utc>>,
    /// Runs claimed for this key so far, this one included.
    pub(crate) runs: i64,
    pub(crate) server_now: DateTime<Utc>,
    /// Whether a run of the key is open (schema 9; statements that do not
    /// return it read `false`).
    #[sqlx(default)]
    pub(crate) run_open: bool,
    /// The run's time limit in seconds (schema 13; NULL: none).
    #[sqlx(default)]
    pub(crate) run_timeout_secs: Option<f64>,
}

impl LeaseRow {
    pub(crate) fn into_lease(self) -> Lease {
        let remaining = (self.expires_at - self.server_now).to_std().unwrap_or(Duration::ZERO);
        Lease {
            key: self.key,
            holder: self.holder,
            fence: self.fence,
            acquired_at: self.acquired_at,
            expires_at: self.expires_at,
            remaining,
        }
    }

    pub(crate) fn into_info(self) -> LeaseInfo {
        LeaseInfo {
            key: self.key,
            holder: self.holder,
            fence: self.fence,
            acquired_at: self.acquired_at,
            expires_at: self.expires_at,
            next_due_at: self.next_due_at,
            job_name: self.job_name,
            server_now: self.server_now,
            run_open: self.run_open,
            run_timeout: self
                .run_timeout_secs
                .and_then(|secs| Duration::try_from_secs_f64(secs).ok()),
        }
    }
}
