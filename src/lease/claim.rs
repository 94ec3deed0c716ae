//! Claims of one key: the re-entrant [`LeaseStore::claim`] and the claim
//! for a run, [`LeaseStore::claim_run`] (invariants 3, 4, 5 and 8).

use std::time::Duration;

use super::{Lease, LeaseInfo, LeaseRow, LeaseStore};
use crate::connection;
use crate::error::Result;
use crate::validate;

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
    /// The key, or its job, is paused ([`Controls::pause`](crate::store::Controls::pause)): it is not
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

/// Whether a [`LeaseStore::claim_run`] must respect the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Due {
    /// Claim only if the next run is due by the server clock.
    Scheduled,
    /// Claim regardless of the schedule (a manual trigger).
    Now,
}

#[derive(sqlx::FromRow)]
pub(crate) struct ClaimRow {
    pub(crate) acquired: bool,
    /// Not acquired because the key or its job is paused.
    pub(crate) paused: bool,
    #[sqlx(flatten)]
    pub(crate) row: LeaseRow,
}

/// The write of the re-entrant claim ([`LeaseStore::claim`]): the guarded
/// `UPDATE` of the key's row, without its `RETURNING`. Written once, and
/// sent on its own first and again inside the whole claim, so the two
/// cannot apply different guards. $1 key, $2 holder, $3 ttl seconds.
///
/// A plain UPDATE with its guards in the WHERE: taking a row over writes
/// one WAL record (an `ON CONFLICT DO UPDATE` locks the row first, a
/// second record).
/// - WHERE (invariant 3): take the row over only if we already hold it
///   (re-entrant) or it has expired by the server clock. A row locked by
///   a concurrent claim is waited for, and the WHERE evaluated again on
///   its latest version; a lease plainly held by another holder is not
///   written (no lock, no WAL, no fence drawn).
/// - SET times use clock_timestamp() *after* that wait, so a claim that
///   waited is not dated before it won.
/// - CASE: a holder re-claiming its own live lease keeps its tenure (same
///   fence, same acquired_at); any other takeover starts a new tenure with
///   a fresh fence from the sequence (invariant 4: a deleted or released
///   row can never make a fence repeat).
/// - Paused (invariant 8): a key paused by name, or (row's job_name) by
///   job, is never taken over.
macro_rules! claim_update {
    () => {
        concat!(
            "
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
            /* guard:claim.pause */ paused!(key = "l.key", jobs = "l.job_name")
        )
    };
}

impl LeaseStore {
    /// The re-entrant claim (invariant 3): acquire `key` for `holder` for `ttl`
    /// if it is free or expired; if `holder` already holds it, extend it and
    /// keep the same fence.
    ///
    /// Exactly one of any number of concurrent claimers of a free key gets
    /// [`Claim::Acquired`]. Use [`LeaseStore::claim_run`] to start a new
    /// *run* (it always takes a fresh fence).
    ///
    /// Takes an existing row in one statement; a key without a row, or a
    /// claim that loses, costs a second statement, which inserts the row
    /// or says who holds the key (or that it is paused).
    ///
    /// Cancel-safe as described on [`LeaseStore`]. Each statement is its own
    /// implicit transaction, so dropping the future between the two leaves
    /// the first one's answer standing: it took the row (a lease that then
    /// expires on its own) or changed nothing.
    pub async fn claim(&self, key: &str, holder: &str, ttl: Duration) -> Result<Claim> {
        validate::key(key)?;
        validate::holder(holder)?;
        let secs = validate::lease_secs("lease duration", ttl)?;
        // $1 key, $2 holder, $3 ttl seconds. The common case first: the
        // row exists and the claim takes it (free, expired, or re-entrant),
        // with `claim_update!` alone. Its answer is the taken row.
        const CLAIM_TAKE: &str = concat!(
            claim_update!(),
            "
                RETURNING l.*, clock_timestamp() AS server_now"
        );
        // Only when that took no row (a key without a row, a live lease of
        // another holder, a paused key, or a row that changed in between):
        // the whole claim, which tries the row again, inserts a missing
        // one, and otherwise answers with the current row.
        // - `updated`: `claim_update!` again. Between the two statements the
        //   lease may have expired, or its holder released it; the claim
        //   then takes it here, as one statement sent a moment later would.
        // - `inserted` only for a key with no row on the statement's
        //   snapshot: a claim of an existing key draws no fence there.
        //   ON CONFLICT DO NOTHING: a row committed after the snapshot
        //   is never overwritten (that claim lost; `claim_outcome` says so).
        // - Paused (invariant 8): a key paused by name is never inserted.
        // - `lost_claim_answer!` (pause_rule.rs) reports the current row
        //   when the claim lost, so the caller learns who holds it in the
        //   same round trip.
        const CLAIM: &str = concat!(
            "
            WITH updated AS (",
            claim_update!(),
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
            )",
            lost_claim_answer!()
        );
        let taken: Option<LeaseRow> = connection::run!(&self.conns, |conn| sqlx::query_as(CLAIM_TAKE)
            .bind(key)
            .bind(holder)
            .bind(secs)
            .fetch_optional(conn))?;
        if let Some(row) = taken {
            return Ok(Claim::Acquired(row.into_lease()));
        }
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
        // - `lost_claim_answer!`: the current row when the claim lost, as
        //   in `claim`.
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
            )",
            lost_claim_answer!()
        );
        let row: Option<ClaimRow> = connection::run!(&self.conns, |conn| sqlx::query_as(CLAIM_RUN)
            .bind(key)
            .bind(holder)
            .bind(secs)
            .bind(due == Due::Now)
            .fetch_optional(conn))?;
        self.claim_outcome(key, row, due).await
    }
}

impl LeaseStore {
    /// Reads a claim's answer. A lost scheduled claim whose snapshot shows a
    /// free lease that is not due yet is [`Claim::NotDue`]; anything else that
    /// lost was beaten by a holder (possibly one committed after the
    /// snapshot), or paused. With no row at all, a second statement tells a
    /// paused key without a row from a winner committed after the snapshot.
    async fn claim_outcome(&self, key: &str, row: Option<ClaimRow>, due: Due) -> Result<Claim> {
        if row.is_none() && self.controls().pause_of_key(key).await? {
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
