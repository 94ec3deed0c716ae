//! An operator's revoke (`leasehold revoke [--force]`): end a key's
//! current tenure now and fence its holder out, whether or not that holder
//! is still alive.
//!
//! One statement, with the lease row locked, so no claim, renewal or
//! release of the key can slip in between reading the tenure and ending it:
//!
//! 1. the row takes a fresh fence from `leasehold_fence_seq` and, if it was
//!    held, expires now. The old holder's renewal (holder + fence +
//!    non-expiry, invariant 6) then finds no row: its heartbeat reports the
//!    lease lost and cancels the run; its late release finds nothing
//!    (invariant 7). The next claim, by any replica, draws a fence above
//!    the new one (invariant 4).
//! 2. the fence rows of the resources (the key itself, and any other
//!    resource the caller names) rise to the new fence, so the old run's
//!    next `begin_fenced` is rejected at once (F1 in `fence.rs`), not only
//!    after a newer run has written.

use sqlx::FromRow;

use super::{Controls, LeaseInfo, LeaseRow, Record};
use crate::connection;
use crate::error::Result;
use crate::key::{IntoKey, Key};
use crate::validate;

/// Whether [`Controls::revoke`](crate::store::Controls::revoke) may end a tenure that is live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Revoke {
    /// Only a free lease (expired or released): fences out an ex-holder
    /// that may still wake up and write, and never interrupts a run.
    IfFree,
    /// Also a held lease: its run is cancelled at its next heartbeat and
    /// its fenced writes are rejected from now on.
    Force,
}

/// The answer to [`Controls::revoke`](crate::store::Controls::revoke).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Revoked {
    /// The tenure ended. `previous` is the row as it was (its holder lost
    /// `previous.fence`); every named resource now rejects fences below
    /// `fence`.
    Ended {
        /// The row before the revoke, read with the lock held.
        previous: LeaseInfo,
        /// The new fence of the row, above every fence handed out before.
        fence: i64,
    },
    /// The lease is held and [`Revoke::IfFree`] was asked: nothing changed.
    Held(LeaseInfo),
    /// No lease with that key.
    NotFound,
}

#[derive(FromRow)]
struct RevokeRow {
    /// NULL when nothing was ended (held without force).
    new_fence: Option<i64>,
    #[sqlx(flatten)]
    row: LeaseRow,
}

impl Controls<'_> {
    /// Ends the current tenure of `key` and raises the fence of `key`, and
    /// of each of `resources`, to a fresh fence — an operator's
    /// `leasehold revoke`. See [`Revoke`] for when a held lease is
    /// revoked. Name only resources that belong to this key (fences are
    /// ordered within a key).
    ///
    /// The schedule is untouched: a due job is claimed again at once, by
    /// any replica, with a fence above the new one.
    ///
    /// Cancel-safe as described on [`LeaseStore`](super::LeaseStore): one statement, which
    /// either committed or did not.
    ///
    /// ```no_run
    /// # async fn demo(store: leasehold::store::LeaseStore) -> leasehold::Result<()> {
    /// use leasehold::operator::{Revoke, Revoked};
    /// match store.controls().revoke("billing", Revoke::IfFree, &["ledger"]).await? {
    ///     Revoked::Ended { previous, fence } => println!("{} fenced out; new fence {fence}", previous.holder),
    ///     Revoked::Held(info) => println!("held by {}: pass Revoke::Force", info.holder),
    ///     _ => println!("no such key"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn revoke(self, key: impl IntoKey, revoke: Revoke, resources: &[&str]) -> Result<Revoked> {
        self.revoke_recorded(&key.into_key()?, revoke, resources, None).await
    }

    /// [`revoke`](Self::revoke) of a key checked where it entered, writing
    /// `record` (if any) in the same statement.
    pub(crate) async fn revoke_recorded(
        self,
        key: &Key,
        revoke: Revoke,
        resources: &[&str],
        record: Option<&Record<'_>>,
    ) -> Result<Revoked> {
        let key = key.as_str();
        let mut raise = vec![key];
        for &resource in resources {
            validate::resource(resource)?;
            if !raise.contains(&resource) {
                raise.push(resource);
            }
        }
        // $1 key, $2 force, $3 resources (the key first).
        // - `old … FOR UPDATE`: the tenure read is the one ended.
        // - `$2 OR old.expires_at <= clock_timestamp()`: a live run is only
        //   interrupted on request.
        // - `fence = leasehold_next_fence()`: a fresh fence, so a renewal naming the
        //   old one fails (invariants 4 and 6).
        // - `expires_at = LEAST(expires_at, …)`: a held lease expires now
        //   (GREATEST keeps the row's CHECK true if the server clock stepped
        //   back); a free one keeps its expiry.
        // - `places` (invariant 11): the ended tenure's place under its
        //   job's fleet-wide limit, if any, is free when its lease is, and
        //   `told` wakes the replicas holding that job's keys back.
        // - `raised`: GREATEST, a fence row only rises (F1); `lease_key =
        //   NULL`: no tenure wrote the row, so the commit check (F5) has no
        //   tenure to hold this statement to.
        // - `recorded` (the record: $4 action, $5 actor, $6 words: [1] not
        //   found, [2] `refused: held by %s (fence %s)`, [3] `ended the
        //   tenure of %s (fence %s, %s); new fence %s`, the old tenure [4]
        //   held, [5] free; $7 the schema version asked for (`leasehold_schema_is`, NULL: none)): the action's row with the new fence, in the
        //   statement that ends the tenure, so the two commit together; one
        //   row whether or not a lease row was found, its words the answer's.
        const REVOKE: &str = concat!(
            "
            WITH old AS (
                SELECT l.*, clock_timestamp() AS server_now
                  FROM leasehold_lease AS l WHERE l.key = $1 FOR UPDATE
            ), ended AS (
                UPDATE leasehold_lease AS l
                   SET fence = /* guard:revoke.new_fence */ leasehold_next_fence(),
                       expires_at = /* guard:revoke.expire */ LEAST(l.expires_at,
                                          GREATEST(clock_timestamp(), l.acquired_at + interval '1 microsecond'))
                  FROM old
                 WHERE l.key = old.key
                   AND /* guard:revoke.force */ ($2 OR old.expires_at <= clock_timestamp())
                RETURNING l.fence, l.expires_at
            ), places AS (
                UPDATE leasehold_run_slot AS s SET expires_at = ended.expires_at
                  FROM old, ended
                 WHERE /* guard:revoke.place */ s.key = old.key AND s.fence = old.fence
                RETURNING s.job_name
            ), told AS (
                SELECT pg_notify('",
        slot_channel!(),
        "', p.job_name) FROM places AS p
            ), raised AS (
                INSERT INTO leasehold_fence AS f (resource, last_fence)
                /* guard:revoke.raise_fences */ SELECT r, ended.fence FROM ended CROSS JOIN unnest($3::text[]) AS r
                ON CONFLICT (resource) DO UPDATE
                   SET last_fence = /* guard:revoke.never_lower */ GREATEST(f.last_fence, EXCLUDED.last_fence), updated_at = clock_timestamp(),
                       /* guard:revoke.tenure_cleared */ lease_key = NULL
            ), recorded AS (
                INSERT INTO leasehold_action (scope, name, action, actor, outcome, fence)
                SELECT 'key', $1, $4, $5,
                       CASE WHEN o.key IS NULL THEN format(($6::text[])[1])
                            WHEN e.fence IS NULL THEN format(($6::text[])[2], o.holder, o.fence)
                            ELSE format(($6::text[])[3], o.holder, o.fence,
                                        format(($6::text[])[CASE WHEN o.expires_at > o.server_now THEN 4 ELSE 5 END]),
                                        e.fence) END,
                       e.fence
                  FROM (VALUES (1)) AS one(n) LEFT JOIN old AS o ON true LEFT JOIN ended AS e ON true
                 WHERE /* guard:revoke.recorded */ $4::text IS NOT NULL AND leasehold_schema_is($7::int)
            )
            SELECT (SELECT fence FROM ended) AS new_fence, (SELECT count(*) FROM told) AS told, old.* FROM old"
        );
        let force = revoke == Revoke::Force;
        let (action, actor, words, schema) = Record::binds(record);
        let row: Option<RevokeRow> = connection::run!(&self.store.conns, |conn| sqlx::query_as(REVOKE)
            .bind(key)
            .bind(force)
            .bind(&raise)
            .bind(action)
            .bind(actor)
            .bind(words)
            .bind(schema)
            .fetch_optional(conn))?;
        Ok(match row {
            None => Revoked::NotFound,
            Some(RevokeRow {
                new_fence: Some(fence),
                row,
            }) => Revoked::Ended {
                previous: row.into_info(),
                fence,
            },
            Some(RevokeRow { new_fence: None, row }) => Revoked::Held(row.into_info()),
        })
    }
}
