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

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{ClaimRow, Lease, LeaseInfo, LeaseRow, LeaseStore, NextDue};
use crate::connection;
use crate::error::Result;
use crate::validate;

/// The `LISTEN`/`NOTIFY` channel of wake-ups. The payload is a key that may
/// be claimable now. Every statement that notifies binds this constant, so
/// the name lives here only.
pub(crate) const WAKE_CHANNEL: &str = "leasehold";

/// What the server says about one key the scheduler asked about: enough to
/// know when to look at it again.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub(crate) struct Sighting {
    pub(crate) key: String,
    pub(crate) expires_at: DateTime<Utc>,
    pub(crate) next_due_at: Option<DateTime<Utc>>,
    pub(crate) server_now: DateTime<Utc>,
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

/// The answer to a batch claim.
#[derive(Debug, Default)]
pub(crate) struct Claimed {
    /// Keys this statement claimed, each with its own fresh fence.
    pub(crate) acquired: Vec<Lease>,
    /// The other candidates, as the statement's snapshot saw them.
    pub(crate) seen: Vec<Sighting>,
}

/// One run's release, for [`LeaseStore::finish_many`].
#[derive(Debug, Clone)]
pub(crate) struct Finish {
    pub(crate) key: String,
    pub(crate) holder: String,
    pub(crate) fence: i64,
    pub(crate) next: NextDue,
}

/// What one release of [`LeaseStore::finish_many`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// The tenure was the current one and is released.
    Yes,
    /// The tenure was not the current one any more: nothing changed.
    NotCurrent,
    /// Its row is locked by another transaction: nothing changed yet.
    Busy,
}

/// What [`LeaseStore::forget`] did.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Forgotten {
    /// The row was deleted: no schedule, no history of holders is left. A
    /// runtime that still registers the key creates it again (due at its
    /// next slot); its fences keep growing, they come from the sequence.
    Deleted,
    /// There was no row for this key.
    NotFound,
    /// The lease was held when the delete reached the row: nothing was
    /// deleted. The row as read then (or just after, if a claim committed
    /// while `forget` ran). Stop the run (or wait for it), then forget the
    /// key again.
    Held(LeaseInfo),
}

#[derive(sqlx::FromRow)]
struct ForgetRow {
    deleted: bool,
    #[sqlx(flatten)]
    row: LeaseRow,
}

impl LeaseStore {
    /// Creates the rows of `keys` that do not exist yet — a free lease due at
    /// the paired time — and returns every key's row, in **one** statement.
    /// Existing rows keep their schedule: a restart never resets it.
    pub(crate) async fn register_many(&self, holder: &str, keys: &[(&str, DateTime<Utc>)]) -> Result<Vec<Sighting>> {
        validate::holder(holder)?;
        let mut sorted: Vec<(&str, DateTime<Utc>)> = keys.to_vec();
        for (key, _) in &sorted {
            validate::key(key)?;
        }
        // One order for every replica: concurrent inserts of overlapping
        // key sets then wait for each other instead of deadlocking.
        sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let (names, dues): (Vec<&str>, Vec<DateTime<Utc>>) = sorted.into_iter().unzip();
        // $1 holder, $2 keys, $3 first due times, $4 the wake-up channel.
        // - The new row expires 1 µs after it was "acquired", from one clock
        //   reading: free, valid for the CHECK, and marked never run
        //   (`never_claimed`). Its fence still comes from the sequence.
        // - ON CONFLICT DO NOTHING: an existing row keeps its schedule.
        // - A new row due already wakes the listeners (the notify half).
        const REGISTER_MANY: &str = "
            WITH t AS (
                SELECT * FROM unnest($2::text[], $3::timestamptz[]) AS t(key, first_due)
            ), inserted AS (
                INSERT INTO leasehold_lease (key, holder, fence, acquired_at, expires_at, next_due_at)
                SELECT t.key, $1, nextval('leasehold_fence_seq'), c.now, c.now + interval '1 microsecond', t.first_due
                  FROM t, (SELECT clock_timestamp() AS now) AS c
                ON CONFLICT (key) DO NOTHING
                RETURNING key, expires_at, next_due_at
            ), woken AS (
                SELECT count(*) AS n FROM (
                    SELECT pg_notify($4, i.key) FROM inserted AS i
                     WHERE i.next_due_at <= clock_timestamp()) AS notified
            )
            SELECT i.key, i.expires_at, i.next_due_at, clock_timestamp() AS server_now
              FROM inserted AS i, woken
            UNION ALL
            SELECT l.key, l.expires_at, l.next_due_at, clock_timestamp()
              FROM leasehold_lease AS l JOIN t ON t.key = l.key
             WHERE l.key NOT IN (SELECT key FROM inserted)";
        if names.is_empty() {
            return Ok(Vec::new());
        }
        connection::run!(&self.pool, &self.poisoned, |conn| sqlx::query_as(REGISTER_MANY)
            .bind(holder)
            .bind(&names)
            .bind(&dues)
            .bind(WAKE_CHANNEL)
            .fetch_all(conn))
    }

    /// Claims, for new runs of `holder`, up to `limit` of `candidates`
    /// `(key, lease)` that are free and due, in **one** statement: each
    /// claimed key gets its own fresh fence. Rows another transaction has
    /// locked are skipped, not waited for. The candidates not claimed come
    /// back as the snapshot saw them; a candidate without a row is in
    /// neither list.
    pub(crate) async fn claim_due(
        &self,
        holder: &str,
        candidates: &[(&str, Duration)],
        limit: usize,
    ) -> Result<Claimed> {
        validate::holder(holder)?;
        let mut keys = Vec::with_capacity(candidates.len());
        let mut ttls = Vec::with_capacity(candidates.len());
        for (key, ttl) in candidates {
            validate::key(key)?;
            keys.push(*key);
            ttls.push(validate::lease_secs("lease duration", *ttl)?);
        }
        if keys.is_empty() || limit == 0 {
            return Ok(Claimed::default());
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        // $1 holder, $2 keys, $3 lease seconds, $4 how many to claim at most.
        // `pick` decides, with the guards of `claim_run` (invariant 3, no
        // re-entrance), evaluated on the latest row version once locked:
        // - expires_at <= now: the lease is free by the server clock —
        //   whoever held it, this holder id included (two processes may
        //   share one id);
        // - next_due_at <= now: the key is due by the server clock, so
        //   replicas whose timers fire at different moments still start one
        //   run per slot;
        // - FOR UPDATE SKIP LOCKED: a row another claimer (or any other
        //   transaction) has locked is left to it, never waited for.
        // `claimed` writes: a fresh nextval per row (invariants 4 and 5),
        // times from clock_timestamp() after the locks were taken, so
        // acquired_at is never before the due time it consumed.
        // The UNION half reports the unclaimed candidates, so the caller
        // learns when to look again in the same round trip.
        const CLAIM_DUE: &str = "
            WITH t AS (
                SELECT * FROM unnest($2::text[], $3::float8[]) AS t(key, ttl)
            ), pick AS (
                SELECT l.key FROM leasehold_lease AS l JOIN t ON t.key = l.key
                 WHERE l.expires_at <= clock_timestamp()
                   AND (l.next_due_at IS NULL OR l.next_due_at <= clock_timestamp())
                 ORDER BY l.next_due_at NULLS FIRST, l.key
                 LIMIT $4
                   FOR UPDATE OF l SKIP LOCKED
            ), claimed AS (
                UPDATE leasehold_lease AS l
                   SET holder      = $1,
                       fence       = nextval('leasehold_fence_seq'),
                       acquired_at = clock_timestamp(),
                       expires_at  = clock_timestamp() + make_interval(secs => t.ttl)
                  FROM pick, t
                 WHERE l.key = pick.key AND t.key = pick.key
                RETURNING l.*
            )
            SELECT true AS acquired, c.*, clock_timestamp() AS server_now FROM claimed AS c
            UNION ALL
            SELECT false, l.*, clock_timestamp() FROM leasehold_lease AS l JOIN t ON t.key = l.key
             WHERE l.key NOT IN (SELECT key FROM claimed)";
        let rows: Vec<ClaimRow> = connection::run!(&self.pool, &self.poisoned, |conn| sqlx::query_as(CLAIM_DUE)
            .bind(holder)
            .bind(&keys)
            .bind(&ttls)
            .bind(limit)
            .fetch_all(conn))?;
        let mut claimed = Claimed::default();
        for ClaimRow { acquired, row } in rows {
            if acquired {
                claimed.acquired.push(row.into_lease());
            } else {
                claimed.seen.push(Sighting {
                    key: row.key,
                    expires_at: row.expires_at,
                    next_due_at: row.next_due_at,
                    server_now: row.server_now,
                });
            }
        }
        Ok(claimed)
    }

    /// Releases many runs' tenures and records when each key is next due,
    /// in **one** statement. Says, per item, whether that tenure was
    /// released, was not the current one any more (a late release of an
    /// older tenure changes nothing), or is busy: its row is locked by
    /// another transaction, which a release does not wait for — retry it.
    /// A key left due by its release wakes the listeners.
    pub(crate) async fn finish_many(&self, items: &[Finish]) -> Result<Vec<Released>> {
        let mut keys = Vec::with_capacity(items.len());
        let mut holders = Vec::with_capacity(items.len());
        let mut fences = Vec::with_capacity(items.len());
        let mut ats: Vec<Option<DateTime<Utc>>> = Vec::with_capacity(items.len());
        let mut afters: Vec<Option<f64>> = Vec::with_capacity(items.len());
        for item in items {
            validate::key(&item.key)?;
            validate::holder(&item.holder)?;
            validate::fence(item.fence)?;
            keys.push(item.key.as_str());
            holders.push(item.holder.as_str());
            fences.push(item.fence);
            let (at, after) = match item.next {
                NextDue::Unchanged => (None, None),
                NextDue::At(at) => (Some(at), None),
                NextDue::After(delay) => (None, Some(delay.as_secs_f64())),
            };
            ats.push(at);
            afters.push(after);
        }
        if items.is_empty() {
            return Ok(Vec::new());
        }
        // $1 keys, $2 holders, $3 fences, $4 next due (absolute), $5 next due
        // (seconds from now), $6 the wake-up channel.
        // - `mine` (invariant 7): holder and fence scope each release to the
        //   caller's own tenure, so a late release — after a takeover, or of
        //   the same holder's earlier run — never frees a newer one.
        // - FOR UPDATE SKIP LOCKED: a row locked elsewhere (a service's
        //   `SELECT … FOR UPDATE`, another claimer) is reported `busy`, not
        //   waited for, so one locked row never holds up the batch.
        // - Expiring at "now" rather than deleting keeps the schedule;
        //   GREATEST keeps the CHECK true even if the server clock stepped
        //   back.
        // - A released key that is still due (a cancelled run, a trigger
        //   during the run) is claimable at once: `woken` tells listeners.
        const FINISH_MANY: &str = "
            WITH t AS (
                SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::timestamptz[], $5::float8[])
                           AS t(key, holder, fence, at, after)
            ), mine AS (
                SELECT l.key FROM leasehold_lease AS l JOIN t ON t.key = l.key
                 WHERE l.holder = t.holder
                   AND l.fence = t.fence
                   FOR UPDATE OF l SKIP LOCKED
            ), released AS (
                UPDATE leasehold_lease AS l
                   SET expires_at  = GREATEST(clock_timestamp(), l.acquired_at + interval '1 microsecond'),
                       next_due_at = COALESCE(t.at, clock_timestamp() + make_interval(secs => t.after), l.next_due_at)
                  FROM t
                 WHERE l.key = t.key
                   AND l.key IN (SELECT key FROM mine)
                RETURNING l.key, l.fence, l.next_due_at
            ), woken AS (
                SELECT count(*) AS n FROM (
                    SELECT pg_notify($6, r.key) FROM released AS r
                     WHERE r.next_due_at IS NULL OR r.next_due_at <= clock_timestamp()) AS notified
            )
            SELECT r.key, r.fence, false AS busy FROM released AS r, woken
            UNION ALL
            SELECT l.key, l.fence, true FROM leasehold_lease AS l JOIN t ON t.key = l.key
             WHERE l.holder = t.holder AND l.fence = t.fence
               AND l.key NOT IN (SELECT key FROM mine)";
        let done: Vec<(String, i64, bool)> =
            connection::run!(&self.pool, &self.poisoned, |conn| sqlx::query_as(FINISH_MANY)
                .bind(&keys)
                .bind(&holders)
                .bind(&fences)
                .bind(&ats)
                .bind(&afters)
                .bind(WAKE_CHANNEL)
                .fetch_all(conn))?;
        Ok(items
            .iter()
            .map(
                |item| match done.iter().find(|(k, f, _)| *k == item.key && *f == item.fence) {
                    Some((_, _, false)) => Released::Yes,
                    Some((_, _, true)) => Released::Busy,
                    None => Released::NotCurrent,
                },
            )
            .collect())
    }

    /// Keys that became claimable (free, and due) since the server time
    /// `since` because their due time passed or a trigger set it: the
    /// polling side of wake-ups, for when `LISTEN` cannot be used or a
    /// notification was lost. At most `limit` keys, oldest due first; the
    /// server's clock comes back even when none did.
    pub(crate) async fn due_since(&self, since: DateTime<Utc>, limit: usize) -> Result<(DateTime<Utc>, Vec<Sighting>)> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        // $1 since, $2 limit. Reads the next_due_at index, so its cost
        // follows the keys that became due, not the size of the table. A
        // LEFT JOIN on one clock row, so an empty answer still reads the
        // server clock the next window starts from.
        const DUE_SINCE: &str = "
            SELECT c.now AS server_now, d.key, d.expires_at, d.next_due_at
              FROM (SELECT clock_timestamp() AS now) AS c
              LEFT JOIN LATERAL (
                  SELECT l.key, l.expires_at, l.next_due_at FROM leasehold_lease AS l
                   WHERE l.next_due_at > $1
                     AND l.next_due_at <= c.now
                     AND l.expires_at <= c.now
                   ORDER BY l.next_due_at
                   LIMIT $2) AS d ON true";
        type Row = (
            DateTime<Utc>,
            Option<String>,
            Option<DateTime<Utc>>,
            Option<DateTime<Utc>>,
        );
        let rows: Vec<Row> = connection::run!(&self.pool, &self.poisoned, |conn| sqlx::query_as(DUE_SINCE)
            .bind(since)
            .bind(limit)
            .fetch_all(conn))?;
        let server_now = rows.first().map(|r| r.0).unwrap_or(since);
        let seen = rows
            .into_iter()
            .filter_map(|(server_now, key, expires_at, next_due_at)| {
                Some(Sighting {
                    key: key?,
                    expires_at: expires_at?,
                    next_due_at,
                    server_now,
                })
            })
            .collect();
        Ok((server_now, seen))
    }

    /// Whether `listener` is a session of its own on the server, as `LISTEN`
    /// needs — false behind a transaction-pooling proxy (PgBouncer in
    /// transaction or statement mode), where `LISTEN` must never be sent:
    /// the server connection it ran on goes back to the proxy's pool still
    /// listening, and the *service's* next query on it fails with an
    /// unexpected notification.
    ///
    /// Side-effect free: while one of this store's pooled connections holds
    /// a transaction open (so a proxy cannot hand its backend to anyone
    /// else), the listener's backend pid is read before and after. A real
    /// session keeps its pid and never shares it; through a transaction
    /// pooler, the pooled transaction usually lands on the backend the
    /// listener just used (PgBouncer hands out the most recently used
    /// server connection first), or the listener moves. Three rounds.
    pub(crate) async fn is_own_session(&self, listener: &mut sqlx::postgres::PgListener) -> Result<bool> {
        const PID: &str = "SELECT pg_backend_pid()";
        for _ in 0..3 {
            let before: i32 = sqlx::query_scalar(PID).fetch_one(&mut *listener).await?;
            let mut tx = connection::begin(&self.pool, &self.poisoned).await?;
            let pooled: i32 = sqlx::query_scalar(PID).fetch_one(&mut *tx).await?;
            let after: i32 = sqlx::query_scalar(PID).fetch_one(&mut *listener).await?;
            tx.rollback().await?;
            if pooled == before || after != before {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Sends `payload` on the wake-up channel (the listener's probe).
    pub(crate) async fn notify(&self, payload: &str) -> Result<()> {
        connection::run!(&self.pool, &self.poisoned, |conn| sqlx::query(
            "SELECT pg_notify($1, $2)"
        )
        .bind(WAKE_CHANNEL)
        .bind(payload)
        .execute(conn))?;
        Ok(())
    }

    /// Deletes the row of `key` — its schedule and last holder — unless
    /// its lease is held right now. For keys no replica registers any more
    /// (a removed tenant); a runtime that still registers the key creates
    /// the row again. Fences stay monotonic across forget and re-add: they
    /// come from the sequence, not from the row.
    ///
    /// Cancel-safe as described on [`LeaseStore`].
    ///
    /// ```no_run
    /// # async fn demo(store: leasehold::LeaseStore) -> leasehold::Result<()> {
    /// use leasehold::Forgotten;
    /// match store.forget("reconcile:tenant-42").await? {
    ///     Forgotten::Deleted | Forgotten::NotFound => {}
    ///     Forgotten::Held(info) => eprintln!("held by {} for {:?}; stop it first", info.holder, info.remaining()),
    ///     _ => {}
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn forget(&self, key: &str) -> Result<Forgotten> {
        validate::key(key)?;
        // $1 key. The expiry clause is the whole safety of this statement:
        // deleting a live lease would let another replica claim it while its
        // run goes on. The UNION half reports the row that was kept.
        const FORGET: &str = "
            WITH gone AS (
                DELETE FROM leasehold_lease WHERE key = $1 AND expires_at <= clock_timestamp() RETURNING key
            )
            SELECT true AS deleted, l.*, clock_timestamp() AS server_now
              FROM leasehold_lease AS l WHERE l.key IN (SELECT key FROM gone)
            UNION ALL
            SELECT false, l.*, clock_timestamp() FROM leasehold_lease AS l
             WHERE l.key = $1 AND NOT EXISTS (SELECT 1 FROM gone)";
        let row: Option<ForgetRow> = connection::run!(&self.pool, &self.poisoned, |conn| sqlx::query_as(FORGET)
            .bind(key)
            .fetch_optional(conn))?;
        Ok(match row {
            Some(ForgetRow { deleted: true, .. }) => Forgotten::Deleted,
            Some(ForgetRow { deleted: false, row }) => {
                let info = row.into_info();
                if info.is_held() {
                    Forgotten::Held(info)
                } else {
                    // Free on the statement's snapshot, yet not deleted: a
                    // claim committed before the DELETE reached the row, and
                    // its re-check saw the new tenure. Read that tenure.
                    match self.get(key).await? {
                        Some(now) => Forgotten::Held(now),
                        None => Forgotten::NotFound,
                    }
                }
            }
            None => Forgotten::NotFound,
        })
    }
}
