//! The lease store: claim, renew, release and inspect leases, one SQL
//! statement each. One file per concern: `claim.rs`, `renew.rs`,
//! `release.rs`, the row they return in `row.rs`, the scheduler's batch
//! statements in `batch/`, and the operators', history and stored keys'
//! statements in their own files.
//!
//! # Invariants (docs/design.md §4), and where each is enforced
//!
//! 1. *Server clock only*: every comparison and expiry below uses
//!    `clock_timestamp()`; durations are sent as seconds and added on the
//!    server. The only times returned to Rust are for display and for
//!    computing the next cron slot from the server's own `now`.
//! 2. *One round trip*: claim, renew and release are one statement each on
//!    a pooled connection, returned to the pool before the method returns
//!    (the re-entrant claim sends its `UPDATE` alone first and the whole
//!    claim only when that took no row; a claim that returns no row costs
//!    a further read, to say why; `list` reads twice; a release meeting a
//!    locked row retries).
//! 3. *Claim* succeeds iff the row is absent, expired, or (re-entrant claim
//!    only) held by the same holder: the `WHERE` of the statement's write
//!    (`claim`'s `UPDATE`, `claim_run`'s `ON CONFLICT DO UPDATE`,
//!    `claim_due`'s `pick`).
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
//! 10. *A dead replica's runs are taken over early*: a run stamped with a
//!     liveness registration whose session was seen gone a grace ago is
//!     claimable before its lease expires (`liveness.rs`, `dead_owner!`).
//! 11. *A limited job has at most N tenures at once*: a claim of a key whose
//!     job has a fleet-wide limit takes one of the job's N slot rows in the
//!     same statement, tested free on the slot row itself after its lock;
//!     renewals and releases keep the slot's expiry equal to the lease
//!     row's (`limit.rs`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::connection::{self, Conns, PoisonCount};
use crate::error::Result;
use crate::key::IntoKey;
use crate::validate;

// The pause rule's SQL, once (invariant 8): the statements below and in
// the child modules expand it with `concat!`.
#[macro_use]
mod pause_rule;
// The liveness rule's SQL, once (invariant 10): the batch claim and the
// statements of `liveness.rs` expand it.
#[macro_use]
mod liveness;

// Whether a run belongs to an earlier life of its key (`RunRecord::
// earlier_life`): the history's statements expand it with `concat!`.
#[macro_use]
mod life_rule;
// The fleet-wide limit's rules (invariant 11): the batch claim, the
// renewals and the releases expand them.
#[macro_use]
mod limit;

mod audit;
mod batch;
mod claim;
mod control;
#[cfg(feature = "test-util")]
mod faults;
pub(crate) mod fence;
mod fleet;
mod forget;
mod history;
mod keys;
mod listen;
mod recent;
mod release;
mod renew;
mod revoke;
mod row;
mod session;

pub(crate) use crate::outcome::RunOutcome;
pub use audit::ActionRecord;
pub(crate) use audit::Record;
pub(crate) use batch::{Candidate, Claimed, ClaimedRun, Finish, Polled, Registered, Released, Sighting};
pub(crate) use claim::ClaimRow;
pub use claim::{Claim, Due};
pub use control::{Controls, Pause, Resumed, Target, Triggered};
#[cfg(feature = "test-util")]
pub use faults::LockedRow;
pub use fleet::{Fleet, HolderSeen};
pub use forget::Forgotten;
pub use history::{KeyFilter, KeyPage, KeyState, KeyStatus, Records, RunRecord};
pub(crate) use history::{RunReport, storable_text};
pub(crate) use keys::{KIND_CHANNEL, KeyRow, KindGenerations, StoredArgs};
pub use keys::{Keys, KindStatus, MAX_ARGS_BYTES, NewKey, StoredKey};
pub(crate) use limit::SLOT_CHANNEL;
pub use limit::{FleetLimit, LimitSet, MAX_FLEET_LIMIT};
pub(crate) use listen::{SESSION_MARK, WAKE_CHANNEL, is_pooler_refusal};
pub(crate) use liveness::{CONFIRM_EVERY, GRACE, Registration, SESSION_HORIZON};
pub(crate) use release::NextDue;
pub use renew::{Renewal, RenewedMany};
pub use revoke::{Revoke, Revoked};
pub(crate) use row::LeaseRow;
pub use row::{Lease, LeaseInfo};

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
/// use leasehold::store::{Claim, LeaseStore, Renewal};
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
/// runtime's default ([`Connections::Owned`](crate::runtime::Connections::Owned)):
/// enough for a claim and a release (or a heartbeat) in flight at once.
pub const DEFAULT_OWNED_CONNECTIONS: u32 = 2;

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
    /// connect. The schema must exist ([`crate::migrate`]). Each connection
    /// draws one fence as it opens, so the server's once-per-session check
    /// of its timeline is not paid by the first claim sent on it, and
    /// prepares the statements of every run (claim, heartbeat, release).
    ///
    /// Nothing else sends on these connections, so none can be left inside
    /// a transaction: statements run without the check [`LeaseStore::new`]
    /// does, one round trip each. Idle connections are not pinged before
    /// use either (sqlx's `test_before_acquire` is off): a connection the
    /// server closed meanwhile fails its statement, sqlx discards it, and
    /// the caller's retry gets a fresh one — the runtime retries a claim
    /// within a second, and a statement safe to send twice (a renewal,
    /// the steps that register the liveness session again and move the
    /// runs' stamps to it, a `BEGIN`) at once on another connection. A ping
    /// would cost a round trip on every statement to save one failed
    /// statement after a restart.
    ///
    /// ```no_run
    /// # async fn demo(pool: sqlx::PgPool) -> leasehold::Result<()> {
    /// use leasehold::store::LeaseStore;
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
            .after_connect(|conn, _| {
                Box::pin(async move {
                    session::prepare(conn).await;
                    Ok(())
                })
            })
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
    /// # async fn demo(store: leasehold::store::LeaseStore) -> leasehold::Result<()> {
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

    /// The keys of job kinds and the kinds ([`Keys`]).
    pub fn keys(&self) -> Keys<'_> {
        Keys { store: self }
    }

    /// Pause, resume, trigger, revoke, forget ([`Controls`]).
    pub fn controls(&self) -> Controls<'_> {
        Controls { store: self }
    }

    /// Run history, the per-key overview and the audit trail ([`Records`]).
    pub fn records(&self) -> Records<'_> {
        Records { store: self }
    }

    /// Reads the row of `key` as the server sees it now, or `None` if the key
    /// was never claimed (or its row was deleted).
    pub async fn get(&self, key: impl IntoKey) -> Result<Option<LeaseInfo>> {
        let key = key.into_key()?;
        const GET: &str = "SELECT l.*, clock_timestamp() AS server_now FROM leasehold_lease l WHERE l.key = $1";
        let row: Option<LeaseRow> = connection::run!(&self.conns, |conn| sqlx::query_as(GET)
            .bind(key.as_str())
            .fetch_optional(conn))?;
        Ok(row.map(LeaseRow::into_info))
    }
}
