//! The release of one tenure, [`LeaseStore::release`] (invariant 7), and
//! what a run's release records about the schedule.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{LeaseStore, WAKE_CHANNEL};
use crate::connection;
use crate::error::Result;
use crate::validate;

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

impl LeaseStore {
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
                .bind(WAKE_CHANNEL)
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
    ///   release does; a place freed under a fleet-wide limit
    ///   (`places`, invariant 11) wakes the replicas holding its job back.
    /// - No row: the tenure was not the current one any more.
    ///
    /// One statement for every answer, on purpose: a plain `UPDATE … WHERE
    /// key, holder, fence` costs about 0.7× its server time but waits on a
    /// row locked elsewhere, and the forms that keep `SKIP LOCKED` and leave
    /// the `busy` answer to a second statement save under 15 % of it, about
    /// 1 % of a claim + release round trip.
    const RELEASE: &str = concat!(
        "
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
            RETURNING l.key, l.fence, l.next_due_at, l.expires_at
        ), places AS (
            ",
        slots_follow!(rows = "released"),
        "
        ), woken AS (
            SELECT count(*) AS n FROM (
                SELECT pg_notify($4, r.key) FROM released AS r
                 WHERE r.next_due_at IS NULL OR r.next_due_at <= clock_timestamp()
                UNION ALL
                SELECT pg_notify('",
        slot_channel!(),
        "', p.job_name) FROM places AS p) AS notified
        )
        SELECT false AS busy FROM released, woken
        UNION ALL
        SELECT true FROM leasehold_lease AS l
         WHERE l.key = $1 AND l.holder = $2 AND l.fence = $3
           AND NOT EXISTS (SELECT 1 FROM mine)"
    );
}
