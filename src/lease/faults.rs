//! Faults on the lease table for tests, demos and chaos runs (feature
//! `test-util`): what an outside event does to a row, not anything the
//! library itself ever sends. One statement each, so the tests, the chaos
//! harness, the demos and the benchmarks share one "expire now", one "row
//! locked elsewhere" and one "row deleted by hand".

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{Postgres, Transaction};

use super::LeaseStore;
use crate::connection;
use crate::error::Result;
use crate::validate;

impl LeaseStore {
    /// Fault: the lease of `key` expires now by the server clock, as if its
    /// holder had stalled past its lease; its holder and fence stay, so the
    /// holder's next renewal finds it lost (invariant 6). A free lease
    /// keeps its expiry. `None`: no such row; `Some(was_held)` otherwise.
    #[doc(hidden)]
    pub async fn expire_for_test(&self, key: &str) -> Result<Option<bool>> {
        self.expire_owing_for_test(key, None, false).await
    }

    /// Fault: as [`LeaseStore::expire_for_test`], and the key is due now
    /// (`slot` `None`) or owes `slot` (due since then, its next run for
    /// that slot): a fleet that was down while slots passed.
    #[doc(hidden)]
    pub async fn owe_slot_for_test(&self, key: &str, slot: Option<DateTime<Utc>>) -> Result<Option<bool>> {
        self.expire_owing_for_test(key, slot, true).await
    }

    async fn expire_owing_for_test(&self, key: &str, slot: Option<DateTime<Utc>>, due: bool) -> Result<Option<bool>> {
        validate::key(key)?;
        // $1 key, $2 slot (NULL: now), $3 whether to move the schedule.
        // GREATEST keeps the row's CHECK (expires_at > acquired_at) true.
        const EXPIRE: &str = "
            WITH old AS (
                SELECT key, expires_at > clock_timestamp() AS was_held
                  FROM leasehold_lease WHERE key = $1 FOR UPDATE
            ), expired AS (
                UPDATE leasehold_lease AS l
                   SET expires_at  = LEAST(l.expires_at,
                                           GREATEST(clock_timestamp(), l.acquired_at + interval '1 microsecond')),
                       next_due_at = CASE WHEN $3 THEN COALESCE($2, clock_timestamp()) ELSE l.next_due_at END,
                       slot_at     = CASE WHEN $3 THEN COALESCE($2, l.slot_at) ELSE l.slot_at END
                  FROM old WHERE l.key = old.key
            )
            SELECT was_held FROM old";
        connection::run!(&self.conns, |conn| sqlx::query_scalar(EXPIRE)
            .bind(key)
            .bind(slot)
            .bind(due)
            .fetch_optional(conn))
    }

    /// Fault: another session locks the lease row of `key`
    /// (`SELECT … FOR UPDATE`) until the returned [`LockedRow`] commits,
    /// rolls back or is dropped, as a long transaction or a hand-run
    /// `UPDATE` would; the holder's renewals and releases of it are `busy`
    /// meanwhile, and a claim of it waits. `Ok` whether or not the row
    /// exists.
    #[doc(hidden)]
    pub async fn lock_row_for_test(&self, key: &str) -> Result<LockedRow> {
        validate::key(key)?;
        const LOCK: &str = "SELECT 1 FROM leasehold_lease WHERE key = $1 FOR UPDATE";
        // The library's cancel-safe `begin`, not sqlx's `Pool::begin`
        // (upstream #4393): a test dropping this future leaves no pooled
        // connection inside a transaction.
        let mut tx = connection::begin(&self.conns).await?;
        sqlx::query(LOCK).bind(key).execute(&mut *tx).await?;
        Ok(LockedRow {
            tx,
            key: key.to_owned(),
        })
    }

    /// Fault: an operator deletes the lease row of `key` by hand (not
    /// [`Controls::forget`](crate::store::Controls::forget), which refuses a live lease). `true` if there
    /// was a row.
    #[doc(hidden)]
    pub async fn delete_row_for_test(&self, key: &str) -> Result<bool> {
        validate::key(key)?;
        const DELETE: &str = "DELETE FROM leasehold_lease WHERE key = $1";
        let done = connection::run!(&self.conns, |conn| sqlx::query(DELETE).bind(key).execute(conn))?;
        Ok(done.rows_affected() > 0)
    }
}

/// A lease row another session holds locked ([`LeaseStore::lock_row_for_test`]),
/// and what that session does inside its lock: the concurrent writer a
/// waiting claim must re-check against. Its writes are seen by others when
/// it commits; dropping it rolls back.
#[doc(hidden)]
#[derive(Debug)]
pub struct LockedRow {
    tx: Transaction<'static, Postgres>,
    key: String,
}

impl LockedRow {
    /// The session wins the lease for `holder` for `ttl` with a fresh fence
    /// (a concurrent winner, or a twin sharing a holder id), and returns
    /// that fence. Not a claim: no check, as a winner already decided.
    pub async fn take_over(&mut self, holder: &str, ttl: Duration) -> Result<i64> {
        validate::holder(holder)?;
        let secs = validate::lease_secs("lease duration", ttl)?;
        // $1 key, $2 holder, $3 ttl seconds. The fence from the sequence,
        // as every tenure's (invariant 4).
        const TAKE_OVER: &str = "
            UPDATE leasehold_lease
               SET holder = $2, fence = leasehold_next_fence(),
                   acquired_at = clock_timestamp(), expires_at = clock_timestamp() + make_interval(secs => $3)
             WHERE key = $1
            RETURNING fence";
        Ok(sqlx::query_scalar(TAKE_OVER)
            .bind(&self.key)
            .bind(holder)
            .bind(secs)
            .fetch_one(&mut *self.tx)
            .await?)
    }

    /// The session finishes the key's slot: its next run is due `by` from
    /// now, by the server clock.
    pub async fn postpone(&mut self, by: Duration) -> Result<()> {
        let secs = by.as_secs_f64();
        const POSTPONE: &str =
            "UPDATE leasehold_lease SET next_due_at = clock_timestamp() + make_interval(secs => $2) WHERE key = $1";
        sqlx::query(POSTPONE)
            .bind(&self.key)
            .bind(secs)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    /// Ends the session's transaction: its writes become visible and the
    /// row lock is released.
    pub async fn commit(self) -> Result<()> {
        Ok(self.tx.commit().await?)
    }

    /// Ends the session's transaction without its writes, releasing the
    /// row lock.
    pub async fn rollback(self) -> Result<()> {
        Ok(self.tx.rollback().await?)
    }
}
