//! The lease store: claim, renew, release and inspect leases, one SQL
//! statement each.
//!
//! # Invariants (docs/design.md §4), and where each is enforced
//!
//! 1. *Server clock only*: every comparison and expiry below uses
//!    `clock_timestamp()`; durations are sent as seconds and added on the
//!    server. The only times returned to Rust are for display and for
//!    computing the next cron slot from the server's own `now`.
//! 2. *One round trip*: claim, renew and release are one statement each on
//!    a pooled connection, returned to the pool before the method returns
//!    (a claim that returns no row costs a second read, to say why; `list`
//!    reads twice; a release meeting a locked row retries).
//! 3. *Claim* succeeds iff the row is absent, expired, or (re-entrant claim
//!    only) held by the same holder: the `WHERE` of `ON CONFLICT DO UPDATE`.
//! 4. *Fence monotonicity*: fences come from the `leasehold_fence_seq`
//!    sequence through `leasehold_next_fence()`, never from `fence + 1`, so
//!    deleting a row cannot reset them; that function moves the sequence
//!    ahead once on every new WAL timeline, so a promoted standby whose
//!    sequence is behind never repeats a fence.
//! 5. *Every run gets a new fence*: [`LeaseStore::claim_run`] always draws
//!    one, even for the same holder.
//! 6. *Renew* needs holder, fence and non-expiry.
//! 7. *Release* needs key, holder and fence.
//! 8. *Paused keys are never claimed*: every claim checks `leasehold_pause`
//!    for the key and for its job on the row it takes, after the row lock;
//!    a pause with cancellation is reported by the next renewal. The rule
//!    is written once, in `pause_rule.rs`, and expanded into each statement.
//! 9. *History is a bounded ring*: a run's row is written by its release,
//!    at `run number mod ring length`, and never overwrites a newer run.

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::connection::{self, Conns, PoisonCount};
use crate::error::Result;
use crate::validate;

// The pause rule's SQL, once (invariant 8): the statements below and in
// the child modules expand it with `concat!`.
#[macro_use]
mod pause_rule;

mod audit;
mod batch;
mod control;
#[cfg(feature = "test-util")]
mod faults;
pub(crate) mod fence;
mod fleet;
mod history;
mod keys;
mod recent;
mod revoke;

pub(crate) use crate::outcome::RunOutcome;
pub use audit::ActionRecord;
pub(crate) use audit::validate_actor;
pub use batch::Forgotten;
pub(crate) use batch::{Candidate, Finish, Polled, Released, Sighting, WAKE_CHANNEL};
pub use control::{Pause, PauseTarget, Resumed, Triggered};
#[cfg(feature = "test-util")]
pub use faults::LockedRow;
pub use fleet::{Fleet, HolderSeen};
pub use history::{KeyFilter, KeyPage, KeyState, KeyStatus, RunRecord};
pub(crate) use history::{RunReport, truncate_error};
pub(crate) use keys::{KIND_CHANNEL, KeyRow, KindGenerations, StoredArgs};
pub use keys::{KindStatus, MAX_ARGS_BYTES, NewKey, StoredKey};
pub use revoke::{Revoke, Revoked};

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
}

impl LeaseInfo {
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
    /// [`KeyStatus::state`] reads too).
    ///
    /// ```no_run
    /// # async fn demo(store: leasehold::LeaseStore) -> leasehold::Result<()> {
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
/// claim gives at least [`crate::MIN_LEASE`]; a release of a run is never
/// within 1 µs of its claim).
pub(crate) fn never_claimed(acquired_at: DateTime<Utc>, expires_at: DateTime<Utc>) -> bool {
    expires_at - acquired_at <= chrono::TimeDelta::microseconds(1)
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Claim {
    /// The caller now holds the lease.
    Acquired(Lease),
    /// Another holder holds a valid lease. `current` is the row as of the
    /// statement's snapshot; it is `None` when the winner's row was committed
    /// concurrently and is not visible yet.
    HeldElsewhere {
        /// The current row, when visible.
        current: Option<LeaseInfo>,
    },
    /// The key, or its job, is paused ([`LeaseStore::pause`]): it is not
    /// claimed until resumed. `current` is the row, if the key has one.
    Paused {
        /// The current row, when there is one.
        current: Option<LeaseInfo>,
    },
    /// The lease is free but the next scheduled run is not due yet
    /// ([`LeaseStore::claim_run`] with [`Due::Scheduled`] only).
    NotDue {
        /// The current row, with the due time.
        current: LeaseInfo,
    },
}

impl Claim {
    /// The lease, if the claim acquired it.
    pub fn acquired(self) -> Option<Lease> {
        match self {
            Claim::Acquired(lease) => Some(lease),
            _ => None,
        }
    }
}

/// The answer to a renewal. A transport failure is not an answer: it comes
/// back as `Err(Error::Database)` and is worth retrying.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Renewal {
    /// The lease was extended; the new expiry and time left are inside.
    Renewed(Lease),
    /// Definitive: this tenure is over (taken over, released, or expired).
    /// Renewal never resurrects it; stop the work.
    Lost,
    /// The lease was extended, but an operator paused the key (or its job)
    /// and asked for the runs in progress to be cancelled
    /// (`leasehold pause --cancel`): stop the work, then release.
    Paused(Lease),
    /// Not renewed this time: another transaction has the lease row locked
    /// (leasehold does not wait for row locks). Still held; retry while the
    /// lease lasts.
    Busy,
}

/// Which leases one [`LeaseStore::renew_many`] statement extended.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct RenewedMany {
    /// Tenures that were extended, with their new expiry.
    pub renewed: Vec<Lease>,
    /// Tenures `(key, fence)` that were lost: definitive, as for [`Renewal::Lost`].
    pub lost: Vec<(String, i64)>,
    /// Tenures `(key, fence)` still held but not renewed this time because
    /// another transaction had their row locked: retry later; the lease
    /// runs out if the lock outlasts it.
    pub busy: Vec<(String, i64)>,
    /// Tenures `(key, fence)` among `renewed` whose key (or job) an operator
    /// paused with cancellation: stop those runs, then release them.
    pub paused: Vec<(String, i64)>,
}

/// Whether a [`LeaseStore::claim_run`] must respect the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Due {
    /// Claim only if the next run is due by the server clock.
    Scheduled,
    /// Claim regardless of the schedule (a manual trigger).
    Now,
}

/// What to record about the schedule when a run releases its lease.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum NextDue {
    /// Leave the due time as it is.
    Unchanged,
    /// The next run is due at this server time (the next slot).
    At(DateTime<Utc>),
    /// The next run is due this long after the release, by the server clock
    /// (retry backoff).
    After(Duration),
}

/// Claims, renews and releases leases in PostgreSQL. Cheap to clone.
///
/// Usable on its own, without the runtime: every method is one statement on a
/// pooled connection, so holding a lease for an hour holds no connection.
///
/// Two ways to make one:
///
/// - [`LeaseStore::new`] runs on a pool you pass, which your code may use
///   too. Before each statement leasehold checks that the connection it was
///   given is not inside a transaction your code left open (one extra
///   round trip; docs/design.md §4 C1).
/// - [`LeaseStore::connect`] opens a small pool of its own, that nothing
///   else uses: no check is needed, and your code cannot exhaust it.
///
/// Every method is cancel-safe in the sense that dropping its future leaves
/// the database consistent: the statement either committed or did not. A
/// claim whose answer was lost to cancellation may have acquired the lease;
/// it then expires on its own.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> leasehold::Result<()> {
/// use std::time::Duration;
/// use leasehold::{Claim, LeaseStore, Renewal};
///
/// let store = LeaseStore::new(pool);
/// if let Claim::Acquired(lease) = store.claim("nightly-reconcile", "web-1-a8f3", Duration::from_secs(60)).await? {
///     // ... work, sending lease.fence with every downstream write ...
///     match store.renew(&lease, Duration::from_secs(60)).await? {
///         Renewal::Renewed(renewed) => println!("good until {}", renewed.expires_at),
///         Renewal::Lost => return Ok(()), // someone newer owns the work: stop
///         _ => {} // busy (row locked elsewhere): still held, retry before it runs out
///     }
///     store.release(&lease.key, &lease.holder, lease.fence).await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LeaseStore {
    conns: Conns,
}

/// How many connections [`LeaseStore::connect`] opens at most, and the
/// runtime's default ([`Connections::Owned`](crate::Connections::Owned)):
/// enough for a claim and a release (or a heartbeat) in flight at once.
pub const DEFAULT_OWNED_CONNECTIONS: u32 = 2;

/// Columns every lease-returning statement ends with, so one row type reads
/// them all. `remaining_secs` is measured on the server after the write.
#[derive(sqlx::FromRow)]
struct LeaseRow {
    key: String,
    holder: String,
    fence: i64,
    acquired_at: DateTime<Utc>,
    expires_at: DateTime<Utc>,
    next_due_at: Option<DateTime<Utc>>,
    job_name: Option<String>,
    /// The slot the key's next run is for (NULL on rows written before
    /// schema 3: then the due time is the slot).
    slot_at: Option<DateTime<Utc>>,
    /// Runs claimed for this key so far, this one included.
    runs: i64,
    server_now: DateTime<Utc>,
}

#[derive(sqlx::FromRow)]
struct RenewRow {
    busy: bool,
    /// Renewed, but paused with cancellation.
    stop: bool,
    #[sqlx(flatten)]
    row: LeaseRow,
}

#[derive(sqlx::FromRow)]
struct ClaimRow {
    acquired: bool,
    /// Not acquired because the key or its job is paused.
    paused: bool,
    #[sqlx(flatten)]
    row: LeaseRow,
}

impl LeaseRow {
    fn into_lease(self) -> Lease {
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

    fn into_info(self) -> LeaseInfo {
        LeaseInfo {
            key: self.key,
            holder: self.holder,
            fence: self.fence,
            acquired_at: self.acquired_at,
            expires_at: self.expires_at,
            next_due_at: self.next_due_at,
            job_name: self.job_name,
            server_now: self.server_now,
        }
    }
}

impl LeaseStore {
    /// A store over `pool`, which other code may use too. The schema must
    /// exist ([`crate::migrate`]).
    ///
    /// Every statement first checks that its connection is not inside a
    /// transaction someone else left open, and closes it if it is (one
    /// extra round trip per statement). To skip that, and to keep your
    /// code from starving the store of connections, use
    /// [`LeaseStore::connect`].
    pub fn new(pool: PgPool) -> Self {
        LeaseStore {
            conns: Conns::shared(pool, PoisonCount::default()),
        }
    }

    /// A store on connections of its own: a pool of at most
    /// [`DEFAULT_OWNED_CONNECTIONS`] opened from `options`, used by nothing
    /// else. Opens one connection before returning, so a bad address or
    /// password fails here, and the first claim does not wait for a
    /// connect. The schema must exist ([`crate::migrate`]).
    ///
    /// Nothing else sends on these connections, so none can be left inside
    /// a transaction: statements run without the check [`LeaseStore::new`]
    /// does, one round trip each. Idle connections are not pinged before
    /// use either (sqlx's `test_before_acquire` is off): a connection the
    /// server closed meanwhile fails its statement, sqlx discards it, and
    /// the caller's retry gets a fresh one — the runtime retries a claim
    /// within a second and a heartbeat at its next tick, well inside a
    /// lease. A ping would cost a round trip on every statement to save
    /// one failed statement after a restart.
    ///
    /// ```no_run
    /// # async fn demo(pool: sqlx::PgPool) -> leasehold::Result<()> {
    /// use leasehold::LeaseStore;
    ///
    /// // The same server and credentials as the service's pool.
    /// let store = LeaseStore::connect((*pool.connect_options()).clone()).await?;
    /// println!("server time: {}", store.server_now().await?);
    /// # Ok(()) }
    /// ```
    pub async fn connect(options: PgConnectOptions) -> Result<Self> {
        let store = Self::owned(options, DEFAULT_OWNED_CONNECTIONS);
        drop(store.conns.pool().acquire().await?);
        Ok(store)
    }

    /// A store on a pool of its own of at most `max` connections (at least
    /// 1), opened lazily; one connection is kept open while idle.
    pub(crate) fn owned(options: PgConnectOptions, max: u32) -> Self {
        let pool = PgPoolOptions::new()
            .max_connections(max.max(1))
            .min_connections(1)
            .test_before_acquire(false)
            // A connection is not held across a job's run, only for one
            // statement: waiting longer than this for one means the
            // server is unreachable, and the caller retries.
            .acquire_timeout(Duration::from_secs(10))
            .idle_timeout(Duration::from_secs(600))
            .max_lifetime(Duration::from_secs(1800))
            .connect_lazy_with(options);
        LeaseStore {
            conns: Conns::owned(pool),
        }
    }

    /// Closes the store's own pool ([`LeaseStore::connect`]); a store over a
    /// pool passed to [`LeaseStore::new`] leaves that pool open.
    pub(crate) async fn close_owned(&self) {
        if self.conns.is_owned() {
            self.conns.pool().close().await;
        }
    }

    /// The database server's clock: the only clock leasehold compares
    /// leases against (invariant 1), and the one schedules are computed
    /// from. For showing times relative to it when no lease row was read.
    ///
    /// Cancel-safe as described on [`LeaseStore`].
    ///
    /// ```no_run
    /// # async fn demo(store: leasehold::LeaseStore) -> leasehold::Result<()> {
    /// println!("server time: {}", store.server_now().await?);
    /// # Ok(()) }
    /// ```
    pub async fn server_now(&self) -> Result<DateTime<Utc>> {
        const SERVER_NOW: &str = "SELECT clock_timestamp()";
        connection::run!(&self.conns, |conn| sqlx::query_scalar(SERVER_NOW).fetch_one(conn))
    }

    /// The pool this store runs on: the one passed to [`LeaseStore::new`],
    /// or its own ([`LeaseStore::connect`]).
    pub fn pool(&self) -> &PgPool {
        self.conns.pool()
    }

    /// Poisoned connections this store (and the fenced writes of its runs)
    /// found and closed.
    pub(crate) fn poisoned(&self) -> &PoisonCount {
        self.conns.poisoned()
    }

    /// The re-entrant claim (invariant 3): acquire `key` for `holder` for `ttl`
    /// if it is free or expired; if `holder` already holds it, extend it and
    /// keep the same fence.
    ///
    /// Exactly one of any number of concurrent claimers of a free key gets
    /// [`Claim::Acquired`]. Use [`LeaseStore::claim_run`] to start a new
    /// *run* (it always takes a fresh fence).
    ///
    /// Cancel-safe as described on [`LeaseStore`].
    pub async fn claim(&self, key: &str, holder: &str, ttl: Duration) -> Result<Claim> {
        validate::key(key)?;
        validate::holder(holder)?;
        let secs = validate::lease_secs("lease duration", ttl)?;
        // $1 key, $2 holder, $3 ttl seconds. A plain UPDATE of the row
        // with its guards in the WHERE, and the INSERT only for a key
        // without a row: taking a row over writes one WAL record (an
        // `ON CONFLICT DO UPDATE` locks the row first, a second record).
        // - WHERE of `updated` (invariant 3): take the row over only if we
        //   already hold it (re-entrant) or it has expired by the server
        //   clock. A row locked by a concurrent claim is waited for, and the
        //   WHERE evaluated again on its latest version; a lease plainly
        //   held by another holder is not written (no lock, no WAL, no
        //   fence drawn).
        // - SET times use clock_timestamp() *after* that wait, so a claim
        //   that waited is not dated before it won.
        // - CASE: a holder re-claiming its own live lease keeps its tenure
        //   (same fence, same acquired_at); any other takeover starts a new
        //   tenure with a fresh fence from the sequence (invariant 4: a
        //   deleted or released row can never make a fence repeat).
        // - `inserted` only for a key with no row on the statement's
        //   snapshot: a claim of an existing key draws no fence there.
        //   ON CONFLICT DO NOTHING: a row committed after the snapshot
        //   is never overwritten (that claim lost; `claim_outcome` says so).
        // - Paused (invariant 8): a key paused by name, or (row's job_name) by
        //   job, is never claimed — neither inserted nor taken over.
        // - The UNION half reports the current row when the claim lost, so
        //   the caller learns who holds it in the same round trip.
        const CLAIM: &str = concat!(
            "
            WITH updated AS (
                UPDATE leasehold_lease AS l
                   SET holder      = $2,
                       expires_at  = clock_timestamp() + make_interval(secs => $3),
                       acquired_at = CASE WHEN l.holder = $2 AND l.expires_at > clock_timestamp()
                                          THEN l.acquired_at ELSE clock_timestamp() END,
                       fence       = /* guard:claim.fence_kept */ CASE WHEN l.holder = $2 AND l.expires_at > clock_timestamp()
                                          THEN l.fence ELSE /* guard:claim.takeover_fence */ leasehold_next_fence() END
                 WHERE l.key = $1
                   AND /* guard:claim.takeover */ (/* guard:claim.reentrant */ l.holder = $2
                        /* guard:claim.expiry */ OR l.expires_at <= clock_timestamp())
                   AND NOT ",
            /* guard:claim.pause */ paused!(key = "l.key", jobs = "l.job_name"),
            "
                RETURNING l.*
            ), inserted AS (
                INSERT INTO leasehold_lease AS l (key, holder, fence, acquired_at, expires_at)
                SELECT $1, $2, /* guard:claim.insert_fence */ leasehold_next_fence(), clock_timestamp(),
                       clock_timestamp() + make_interval(secs => $3)
                 WHERE /* guard:claim.precheck */ NOT EXISTS (SELECT 1 FROM leasehold_lease c WHERE c.key = $1)
                   AND NOT ",
            /* guard:claim.insert_pause */ paused!(key = "$1", jobs = "NULL"),
            "
                ON CONFLICT (key) DO NOTHING
                RETURNING l.*
            ), claimed AS (
                SELECT * FROM updated UNION ALL SELECT * FROM inserted
            ), paused AS (
                SELECT ",
            paused!(key = "$1", jobs = "SELECT job_name FROM leasehold_lease WHERE key = $1"),
            " AS paused
            )
            SELECT true AS acquired, false AS paused, c.*, clock_timestamp() AS server_now FROM claimed c
            UNION ALL
            SELECT false, paused.paused, l.*, clock_timestamp() FROM leasehold_lease l, paused
             WHERE l.key = $1 AND NOT EXISTS (SELECT 1 FROM claimed)"
        );
        let row: Option<ClaimRow> = connection::run!(&self.conns, |conn| sqlx::query_as(CLAIM)
            .bind(key)
            .bind(holder)
            .bind(secs)
            .fetch_optional(conn))?;
        self.claim_outcome(key, row, Due::Now).await
    }

    /// Claims `key` for a new run: succeeds only if the lease is free
    /// (released, expired, or never claimed) — **even for the holder id that
    /// holds it** — and the tenure always gets a fresh fence (invariant 5),
    /// so "same fence" downstream always means "same run".
    ///
    /// Not re-entrant, on purpose: two processes that share a holder id (a
    /// copied configuration) must not both run the key. A process restarted
    /// with its old holder id claims its keys again once their old leases
    /// expire (or are released).
    ///
    /// With [`Due::Scheduled`], the claim also requires the key's next run to
    /// be due by the server clock, which is what makes a schedule run once
    /// per slot across the fleet.
    ///
    /// Cancel-safe as described on [`LeaseStore`].
    pub async fn claim_run(&self, key: &str, holder: &str, ttl: Duration, due: Due) -> Result<Claim> {
        validate::key(key)?;
        validate::holder(holder)?;
        let secs = validate::lease_secs("lease duration", ttl)?;
        // $1 key, $2 holder, $3 ttl seconds, $4 "ignore the schedule".
        // - The NOT EXISTS pre-check skips, on the statement's snapshot, a
        //   lease that is held or not due yet: an idle replica's poll then
        //   locks nothing, writes no WAL and draws no fence. It only ever
        //   lets more claims through; DO UPDATE's WHERE decides.
        // - fence is always a freshly drawn one (invariants 4 and 5).
        // - WHERE (invariant 3, no re-entrance): the lease has expired by the
        //   server clock — whoever holds it, this holder id included, since
        //   two processes may share one id; a scheduled claim also needs
        //   next_due_at to have passed by the server clock, so replicas whose
        //   timers fire at different moments still start one run per slot.
        //   Evaluated after waiting for the row lock, on the latest row.
        // - SET times use clock_timestamp() after that wait, so acquired_at
        //   is never earlier than the due time the claim consumed: the next
        //   slot, computed from it, is always a later one.
        // - Paused (invariant 8): a key paused by name or by its row's
        //   job_name is never claimed, not even by a trigger.
        // - runs counts the key's runs (the history ring's position);
        //   slot_at keeps the slot this run is for (older rows: the due time).
        const CLAIM_RUN: &str = concat!(
            "
            WITH claimed AS (
                INSERT INTO leasehold_lease AS l (key, holder, fence, acquired_at, expires_at, runs)
                SELECT $1, $2, /* guard:claim_run.insert_fence */ leasehold_next_fence(), clock_timestamp(),
                       clock_timestamp() + make_interval(secs => $3), 1
                 WHERE NOT EXISTS (SELECT 1 FROM leasehold_lease c
                                    WHERE c.key = $1
                                      AND (c.expires_at > clock_timestamp()
                                           OR (NOT $4 AND c.next_due_at > clock_timestamp())))
                   AND NOT ",
            /* guard:claim_run.insert_pause */ paused!(key = "$1", jobs = "NULL"),
            "
                ON CONFLICT (key) DO UPDATE
                   SET holder      = EXCLUDED.holder,
                       fence       = /* guard:claim_run.fresh_fence */ EXCLUDED.fence,
                       /* guard:claim_run.server_times */ acquired_at = clock_timestamp(),
                       expires_at  = clock_timestamp() + make_interval(secs => $3),
                       runs        = l.runs + 1,
                       slot_at     = COALESCE(l.slot_at, l.next_due_at)
                 WHERE /* guard:claim_run.expiry */ l.expires_at <= clock_timestamp()
                   AND /* guard:claim_run.due */ ($4 OR l.next_due_at IS NULL OR l.next_due_at <= clock_timestamp())
                   AND NOT ",
            /* guard:claim_run.pause */ paused!(key = "l.key", jobs = "l.job_name"),
            "
                RETURNING l.*
            ), paused AS (
                SELECT ",
            paused!(key = "$1", jobs = "SELECT job_name FROM leasehold_lease WHERE key = $1"),
            " AS paused
            )
            SELECT true AS acquired, false AS paused, c.*, clock_timestamp() AS server_now FROM claimed c
            UNION ALL
            SELECT false, paused.paused, l.*, clock_timestamp() FROM leasehold_lease l, paused
             WHERE l.key = $1 AND NOT EXISTS (SELECT 1 FROM claimed)"
        );
        let row: Option<ClaimRow> = connection::run!(&self.conns, |conn| sqlx::query_as(CLAIM_RUN)
            .bind(key)
            .bind(holder)
            .bind(secs)
            .bind(due == Due::Now)
            .fetch_optional(conn))?;
        self.claim_outcome(key, row, due).await
    }

    /// Extends the tenure `lease` for `ttl` from now (server clock).
    ///
    /// [`Renewal::Lost`] is definitive: the lease was taken over, released or
    /// had already expired — renewal never resurrects an expired lease. A
    /// database error is transient and worth retrying while the lease lasts.
    ///
    /// Cancel-safe as described on [`LeaseStore`].
    pub async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Renewal> {
        let mut renewed = self
            .renew_many(&lease.holder, &[(&lease.key, lease.fence)], ttl)
            .await?;
        let stop = !renewed.paused.is_empty();
        Ok(match (renewed.renewed.pop(), renewed.busy.pop()) {
            (Some(lease), _) if stop => Renewal::Paused(lease),
            (Some(lease), _) => Renewal::Renewed(lease),
            (None, Some(_)) => Renewal::Busy,
            (None, None) => Renewal::Lost,
        })
    }

    /// Renews every listed tenure `(key, fence)` of `holder` in **one**
    /// statement, and says which were lost.
    ///
    /// This is the heartbeat: one round trip per tick however many leases a
    /// replica holds. Cancel-safe as described on [`LeaseStore`].
    pub async fn renew_many<K: AsRef<str>>(
        &self,
        holder: &str,
        tenures: &[(K, i64)],
        ttl: Duration,
    ) -> Result<RenewedMany> {
        let each: Vec<(&str, i64, Duration)> = tenures.iter().map(|(k, f)| (k.as_ref(), *f, ttl)).collect();
        self.renew_each(holder, &each).await
    }

    /// The heartbeat statement, public and hidden behind the `test-util`
    /// feature only so the benchmarks can time and EXPLAIN the very same text.
    #[cfg(feature = "test-util")]
    #[doc(hidden)]
    pub const RENEW_MANY_SQL: &str = Self::RENEW_MANY;

    /// The heartbeat statement of [`LeaseStore::renew_many`].
    ///
    /// $1 holder, $2 keys, $3 fences, $4 ttl seconds. Invariant 6, in `mine`:
    /// - holder and fence: only the caller's own tenure, not a newer one
    ///   (a takeover, or the same holder's later run);
    /// - expires_at > now: an expired lease stays expired even if nobody
    ///   took it yet — a takeover must advance the fence, so silently
    ///   extending it here would hide a gap in exclusion (checked again in
    ///   the UPDATE, the instant it writes);
    /// - `FOR UPDATE SKIP LOCKED`: a row locked by someone else (a service
    ///   transaction holding `SELECT … FOR UPDATE`, a claim in flight) is not
    ///   waited for. It comes back as `busy` instead: not renewed this tick,
    ///   not lost either, so one locked row never stalls the renewal of
    ///   every other lease, and a stuck lock ends in that run's local
    ///   deadline rather than a wedged heartbeat.
    ///
    /// `stop` (invariant 8) reports a renewed tenure whose key or job was
    /// paused with cancellation: the lease is still renewed — the run is
    /// legitimately the holder until it stops and releases.
    const RENEW_MANY: &str = concat!(
        "
    WITH t AS (
        SELECT * FROM unnest($2::text[], $3::int8[], $4::float8[]) AS t(key, fence, ttl)
    ), mine AS (
        SELECT l.key FROM leasehold_lease AS l JOIN t ON t.key = l.key
         WHERE /* guard:renew.holder */ l.holder = $1
           AND /* guard:renew.fence */ l.fence = t.fence
           AND /* guard:renew.live */ l.expires_at > clock_timestamp()
           FOR UPDATE OF l /* guard:renew.skip_locked */ SKIP LOCKED
    ), renewed AS (
        UPDATE leasehold_lease AS l
           SET expires_at = clock_timestamp() + make_interval(secs => t.ttl)
          FROM t
         WHERE l.key = t.key
           AND l.key IN (SELECT key FROM mine)
           AND /* guard:renew.still_live */ l.expires_at > clock_timestamp()
        RETURNING l.*
    )
    SELECT false AS busy,
           ",
        /* guard:renew.cancelling_pause */ paused!(cancelling, key = "r.key", jobs = "r.job_name"),
        " AS stop,
           r.*, clock_timestamp() AS server_now FROM renewed AS r
    UNION ALL
    SELECT true, false, l.*, clock_timestamp() FROM leasehold_lease AS l JOIN t ON t.key = l.key
     WHERE l.holder = $1 AND l.fence = t.fence AND l.expires_at > clock_timestamp()
       AND l.key NOT IN (SELECT key FROM mine)"
    );

    /// [`LeaseStore::renew_many`] with a lease length per tenure, so one
    /// heartbeat statement serves jobs with different leases.
    pub(crate) async fn renew_each(&self, holder: &str, tenures: &[(&str, i64, Duration)]) -> Result<RenewedMany> {
        validate::holder(holder)?;
        let mut keys = Vec::with_capacity(tenures.len());
        let mut fences = Vec::with_capacity(tenures.len());
        let mut ttls = Vec::with_capacity(tenures.len());
        for (key, fence, ttl) in tenures {
            validate::key(key)?;
            validate::fence(*fence)?;
            ttls.push(validate::lease_secs("lease duration", *ttl)?);
            keys.push(*key);
            fences.push(*fence);
        }
        if tenures.is_empty() {
            return Ok(RenewedMany::default());
        }

        // Renewing is safe to send twice (it only extends tenures this
        // holder still holds), so a connection found gone is retried at once
        // rather than costing a heartbeat tick per dead idle connection.
        let mut retries = self.conns.retries_after_lost_connection();
        let rows: Vec<RenewRow> = loop {
            let result = connection::run!(&self.conns, |conn| sqlx::query_as(Self::RENEW_MANY)
                .bind(holder)
                .bind(&keys)
                .bind(&fences)
                .bind(&ttls)
                .fetch_all(conn));
            match result {
                Err(error) if retries > 0 && connection::connection_lost(&error) => retries -= 1,
                result => break result?,
            }
        };
        let mut renewed = Vec::with_capacity(rows.len());
        let mut busy = Vec::new();
        let mut paused = Vec::new();
        for RenewRow {
            busy: locked,
            stop,
            row,
        } in rows
        {
            if locked {
                busy.push((row.key, row.fence));
            } else {
                if stop {
                    paused.push((row.key.clone(), row.fence));
                }
                renewed.push(row.into_lease());
            }
        }
        let still_held: HashSet<(&str, i64)> = renewed
            .iter()
            .map(|l| (l.key.as_str(), l.fence))
            .chain(busy.iter().map(|(k, f)| (k.as_str(), *f)))
            .collect();
        let lost = tenures
            .iter()
            .filter(|(key, fence, _)| !still_held.contains(&(*key, *fence)))
            .map(|(key, fence, _)| ((*key).to_owned(), *fence))
            .collect();
        Ok(RenewedMany {
            renewed,
            lost,
            busy,
            paused,
        })
    }

    /// Ends the tenure `(key, holder, fence)` now, so the next claim (by any
    /// holder) succeeds at once. Returns whether that tenure was still the
    /// current one; a late release of an older tenure changes nothing.
    ///
    /// The row is kept (not deleted) so the key's schedule survives; fences
    /// do not depend on it either way. Cancel-safe as described on
    /// [`LeaseStore`].
    ///
    /// If another transaction has the row locked, the release does not
    /// wait on the server holding a connection: it retries (10 ms, then up
    /// to every 500 ms) until the lock is gone. Bound it with a timeout if
    /// that matters to you; the lease expires on its own meanwhile.
    pub async fn release(&self, key: &str, holder: &str, fence: i64) -> Result<bool> {
        validate::key(key)?;
        validate::holder(holder)?;
        validate::fence(fence)?;
        let mut pause = Duration::from_millis(10);
        loop {
            let busy: Option<bool> = connection::run!(&self.conns, |conn| sqlx::query_scalar(Self::RELEASE)
                .bind(key)
                .bind(holder)
                .bind(fence)
                .bind(batch::WAKE_CHANNEL)
                .fetch_optional(conn))?;
            match busy {
                Some(false) => return Ok(true),
                Some(true) => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                None => return Ok(false),
            }
        }
    }

    /// The statement of [`LeaseStore::release`]: the runtime's release
    /// (`finish_many`) for one tenure that records nothing — neither a
    /// history row (only the runtime keeps run history) nor a new due time
    /// — without that statement's arrays and history CTEs.
    ///
    /// $1 key, $2 holder, $3 fence, $4 the wake-up channel.
    /// - `mine` (invariant 7): only the caller's own tenure; `FOR UPDATE
    ///   SKIP LOCKED` answers `busy` (true) for a row locked elsewhere
    ///   instead of waiting on the server.
    /// - Expires the lease at "now" (GREATEST keeps the CHECK true if the
    ///   clock stepped back) and keeps the row, its due time — a trigger
    ///   included — and the slot it owes.
    /// - A released key that is due wakes the listeners, as the runtime's
    ///   release does.
    /// - No row: the tenure was not the current one any more.
    const RELEASE: &str = "
        WITH mine AS (
            SELECT l.key FROM leasehold_lease AS l
             WHERE l.key = $1 AND /* guard:release.holder */ l.holder = $2 AND /* guard:release.fence */ l.fence = $3
               FOR UPDATE SKIP LOCKED
        ), released AS (
            UPDATE leasehold_lease AS l
               SET expires_at = GREATEST(clock_timestamp(), l.acquired_at + interval '1 microsecond'),
                   slot_at    = COALESCE(l.slot_at, l.next_due_at)
             WHERE l.key = $1
               AND l.key IN (SELECT key FROM mine)
            RETURNING l.key, l.next_due_at
        ), woken AS (
            SELECT count(*) AS n FROM (
                SELECT pg_notify($4, r.key) FROM released AS r
                 WHERE r.next_due_at IS NULL OR r.next_due_at <= clock_timestamp()) AS notified
        )
        SELECT false AS busy FROM released, woken
        UNION ALL
        SELECT true FROM leasehold_lease AS l
         WHERE l.key = $1 AND l.holder = $2 AND l.fence = $3
           AND NOT EXISTS (SELECT 1 FROM mine)";

    /// Keys whose lease `holder` holds right now (at most 10), to warn about
    /// two processes sharing one holder id.
    pub(crate) async fn live_keys_of(&self, holder: &str) -> Result<Vec<String>> {
        validate::holder(holder)?;
        const LIVE_KEYS_OF: &str = "
            SELECT key FROM leasehold_lease
             WHERE holder = $1 AND expires_at > clock_timestamp()
             ORDER BY key LIMIT 10";
        connection::run!(&self.conns, |conn| sqlx::query_scalar(LIVE_KEYS_OF)
            .bind(holder)
            .fetch_all(conn))
    }

    /// Reads the row of `key` as the server sees it now, or `None` if the key
    /// was never claimed (or its row was deleted).
    pub async fn get(&self, key: &str) -> Result<Option<LeaseInfo>> {
        validate::key(key)?;
        const GET: &str = "SELECT l.*, clock_timestamp() AS server_now FROM leasehold_lease l WHERE l.key = $1";
        let row: Option<LeaseRow> =
            connection::run!(&self.conns, |conn| sqlx::query_as(GET).bind(key).fetch_optional(conn))?;
        Ok(row.map(LeaseRow::into_info))
    }
}

impl LeaseStore {
    /// Reads a claim's answer. A lost scheduled claim whose snapshot shows a
    /// free lease that is not due yet is [`Claim::NotDue`]; anything else that
    /// lost was beaten by a holder (possibly one committed after the
    /// snapshot), or paused. With no row at all, a second statement tells a
    /// paused key without a row from a winner committed after the snapshot.
    async fn claim_outcome(&self, key: &str, row: Option<ClaimRow>, due: Due) -> Result<Claim> {
        if row.is_none() && self.pause_of_key(key).await? {
            return Ok(Claim::Paused { current: None });
        }
        Ok(claim_outcome(row, due))
    }
}

fn claim_outcome(row: Option<ClaimRow>, due: Due) -> Claim {
    match row {
        Some(ClaimRow {
            acquired: true, row, ..
        }) => Claim::Acquired(row.into_lease()),
        Some(ClaimRow { paused: true, row, .. }) => Claim::Paused {
            current: Some(row.into_info()),
        },
        Some(ClaimRow {
            acquired: false, row, ..
        }) => {
            let current = row.into_info();
            if due == Due::Scheduled && !current.is_held() && current.due_in() > Duration::ZERO {
                Claim::NotDue { current }
            } else {
                Claim::HeldElsewhere { current: Some(current) }
            }
        }
        // The claim lost to a row committed after this statement's snapshot.
        None => Claim::HeldElsewhere { current: None },
    }
}
