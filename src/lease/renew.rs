//! Renewals: the heartbeat statement, for one tenure or many (invariant 6).

use std::collections::HashSet;
use std::time::Duration;

use super::{Lease, LeaseRow, LeaseStore};
use crate::connection;
use crate::error::Result;
use crate::validate;

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

#[derive(sqlx::FromRow)]
struct RenewRow {
    busy: bool,
    /// Renewed, but paused with cancellation.
    stop: bool,
    #[sqlx(flatten)]
    row: LeaseRow,
}

impl LeaseStore {
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
    /// `places` (invariant 11): a renewed tenure's place under its job's
    /// fleet-wide limit, if it holds one, expires with its lease again
    /// (`slots_follow!`); a tenure not renewed keeps its place's expiry, so
    /// the place frees when the lease does.
    ///
    /// `stop` (invariant 8) reports a renewed tenure whose key or job was
    /// paused with cancellation: the lease is still renewed — the run is
    /// legitimately the holder until it stops and releases.
    pub(crate) const RENEW_MANY: &str = concat!(
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
    ), places AS (
        ",
        slots_follow!(rows = "renewed"),
        "
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
        let rows: Vec<RenewRow> = connection::run_resending!(&self.conns, settling Some(Self::RENEW_MANY), |conn| sqlx::query_as(Self::RENEW_MANY)
            .bind(holder)
            .bind(&keys)
            .bind(&fences)
            .bind(&ttls)
            .fetch_all(conn))?;
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
}
