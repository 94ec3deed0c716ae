//! Fleet-wide limits per job (invariant 11 in `lease/mod.rs`): at most N
//! tenures of a limited job's runs at once, across every replica, on the
//! server clock — set and read here, enforced by the statements that
//! create, extend and end tenures through the rules below.
//!
//! A limit of N is N rows of `leasehold_run_slot` (`job_name`, `slot_no`
//! 1..N). A claim of a limited job's key takes a free slot row in the same
//! statement as the lease row, and writes the tenure into it — its key,
//! fence, stamp and expiry, the lease row's own values; the renewals and
//! releases keep the slot's expiry equal to the lease row's. So a slot is
//! taken exactly while its tenure lives, and no tenure of a limited job
//! starts without a slot.
//!
//! Why rows, and not a count of live tenures in the claim's `WHERE`: a
//! statement reads its snapshot, so two concurrent claims both count N−1
//! and both start. A slot row is locked (`FOR UPDATE SKIP LOCKED`) and its
//! freeness re-checked by PostgreSQL on the row's latest version once
//! locked, so two claims never take one slot. The freeness test reads only
//! the slot row's own columns (and the liveness rule, which is monotone):
//! reading the lease row from a subquery would read the snapshot again —
//! the model check (model/fleet-limit.md) finds that bug in five steps.
//!
//! Each rule is a macro expanding to a string literal, as the pause rule
//! is, so each statement stays one `&'static str` and the rule is written
//! once.

use chrono::{DateTime, Utc};

use super::{Controls, KIND_CHANNEL, Record};
use crate::connection;
use crate::error::{Error, Result};
use crate::validate;

/// The largest fleet-wide limit (the schema's `CHECK`): a limit is a number
/// of rows, and one this large is no limit worth having.
pub const MAX_FLEET_LIMIT: u32 = 10_000;

/// The channel's name as a literal, for the statements that notify.
macro_rules! slot_channel {
    () => {
        "leasehold_slot"
    };
}

/// The `NOTIFY` channel a release sends a job's name on when it frees one
/// of its slots: replicas holding that job's keys back wake them.
pub(crate) const SLOT_CHANNEL: &str = slot_channel!();

/// The slot row `s` is free: its tenure's lease has expired by the server
/// clock, or the liveness registration its run was stamped with is dead —
/// the lease row's early takeover reads the same rule, so the slot is free
/// exactly when its key is claimable again (model/fleet-limit.md, finding
/// 1). Only the slot row's own columns: PostgreSQL re-checks them on the
/// row's latest version once locked.
macro_rules! slot_free {
    () => {
        concat!(
            "(/* guard:limit.slot_expired */ s.expires_at <= clock_timestamp() OR (s.owner IS NOT NULL AND ",
            dead_owner!(owner = "s.owner", acquired = "s.acquired_at"),
            "))"
        )
    };
}

/// The limit `limit` (a `leasehold_limit` row's alias) has, on the
/// statement's snapshot, no free slot: a claim's filter, so a replica does
/// not lock keys it cannot start. Not the guard (the slot take is): a
/// snapshot may show a slot free that a concurrent claim took.
macro_rules! limit_full {
    (limit = $m:literal) => {
        concat!(
            "NOT EXISTS (SELECT 1 FROM leasehold_run_slot AS s WHERE s.job_name = ",
            $m,
            ".job_name AND s.slot_no <= ",
            $m,
            ".fleet_limit AND ",
            slot_free!(),
            ")"
        )
    };
}

/// Whether any fleet-wide limit exists: an uncorrelated `EXISTS`, which
/// PostgreSQL evaluates once per statement (an `InitPlan`), so a false one
/// skips what it guards, as `paused!(if_any, …)` does for pauses.
macro_rules! any_limit {
    () => {
        "EXISTS (SELECT 1 FROM leasehold_limit)"
    };
}

/// An `UPDATE` giving each slot whose tenure is one of `rows` (a CTE with
/// `key`, `fence` and `expires_at`) that row's expiry: a renewal extends
/// its slot with its lease, a release frees it with its lease. By `(key,
/// fence)`: only the tenure's own slot, never one a newer tenure of the
/// key took. Returns the job of each slot written.
///
/// Behind one look at whether any limit exists (`any_limit!`): with none,
/// the usual case, PostgreSQL evaluates it once and skips the join (a
/// one-time filter), so a fleet without limits pays nothing for them. As
/// safe as the join alone: a limit's slots are created and deleted with
/// its row, so a statement that sees no limit sees no slot either.
macro_rules! slots_follow {
    (rows = $rows:literal) => {
        concat!(
            "UPDATE leasehold_run_slot AS s SET expires_at = x.expires_at FROM ",
            $rows,
            " AS x WHERE ",
            any_limit!(),
            " AND /* guard:limit.slot_tenure */ s.key = x.key AND s.fence = x.fence RETURNING s.job_name"
        )
    };
}

/// A fleet-wide limit in force, as [`Controls::limits`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetLimit {
    /// The job (or kind) it limits.
    pub job: String,
    /// At most this many runs at once, across the fleet.
    pub limit: u32,
    /// Who set it.
    pub set_by: String,
    /// When it was set, by the server clock.
    pub set_at: DateTime<Utc>,
    /// Runs in progress that hold one of its places (a run started before
    /// the limit was lowered may hold a place above it).
    pub running: u32,
    /// Keys of the job that are due, free and not paused: waiting for a
    /// place (or for a replica's next claim).
    pub waiting: u64,
    /// When the longest-waiting of them fell due (`None`: none waits).
    pub waiting_since: Option<DateTime<Utc>>,
    /// The server's clock when this was read.
    pub server_now: DateTime<Utc>,
}

impl FleetLimit {
    /// How long the longest-waiting key has been due.
    pub fn longest_wait(&self) -> Option<std::time::Duration> {
        self.waiting_since
            .and_then(|since| (self.server_now - since).to_std().ok())
    }
}

/// What [`Controls::set_limit`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LimitSet {
    /// The limit is in force; `previous` is the one it replaced.
    Set {
        /// The limit before (`None`: the job had none).
        previous: Option<u32>,
    },
    /// No key of that name's job or kind exists: nothing was set.
    UnknownJob,
}

#[derive(sqlx::FromRow)]
struct LimitRow {
    job_name: String,
    fleet_limit: i32,
    set_by: String,
    set_at: DateTime<Utc>,
    running: i64,
    waiting: i64,
    waiting_since: Option<DateTime<Utc>>,
    server_now: DateTime<Utc>,
}

impl From<LimitRow> for FleetLimit {
    fn from(row: LimitRow) -> Self {
        FleetLimit {
            job: row.job_name,
            limit: u32::try_from(row.fleet_limit).unwrap_or(0),
            set_by: row.set_by,
            set_at: row.set_at,
            running: u32::try_from(row.running).unwrap_or(u32::MAX),
            waiting: u64::try_from(row.waiting).unwrap_or(0),
            waiting_since: row.waiting_since,
            server_now: row.server_now,
        }
    }
}

/// Checks a fleet-wide limit: 1 to [`MAX_FLEET_LIMIT`].
pub(crate) fn check_limit(limit: u32) -> Result<i32> {
    if limit == 0 || limit > MAX_FLEET_LIMIT {
        return Err(Error::invalid(
            "fleet limit",
            limit,
            format!(
                "a limit is 1 to {MAX_FLEET_LIMIT} runs at once; to lift a job's limit, clear it \
                 (`leasehold limit clear <job>`) instead of setting 0"
            ),
        ));
    }
    i32::try_from(limit).map_err(|_| Error::invalid("fleet limit", limit, "too large"))
}

impl Controls<'_> {
    /// The first statements of [`Controls::set_limit`]'s transaction: the
    /// lock that holds the fleet's claims (and renewals, releases) back
    /// while the limit is set, bounded both ways — at most `lock_timeout`
    /// waiting for it (a transaction left open on a lease row would
    /// otherwise stall every renewal queued behind the set), and at most
    /// `idle_in_transaction_session_timeout` held by a client that went
    /// silent holding it (frozen, cut off): the server then ends its
    /// session, which releases the lock and commits nothing.
    pub(crate) const DRAIN_CLAIMS: &'static str = "SET LOCAL lock_timeout = '1s';
            /* guard:set_limit.frozen_bounded */ SET LOCAL idle_in_transaction_session_timeout = '1s';
            /* guard:set_limit.claims_drained */ LOCK TABLE leasehold_lease IN SHARE MODE";

    /// [`Controls::DRAIN_CLAIMS`], for the scenario that freezes a set
    /// holding its lock.
    #[cfg(feature = "test-util")]
    #[doc(hidden)]
    pub const DRAIN_CLAIMS_SQL: &'static str = Self::DRAIN_CLAIMS;

    /// Sets the fleet-wide limit of the job (or kind) `job` to `limit` runs
    /// at once (1 to [`MAX_FLEET_LIMIT`]), for every replica, from their
    /// next claim: no restart. Lowering it never stops a run in progress;
    /// it only holds new starts back until fewer than `limit` run. Raising
    /// it lets waiting keys start at their replicas' next claim (within a
    /// poll interval; at once when a run of the job ends).
    ///
    /// Runs of the job in progress when a limit is first set take its
    /// places (as this statement sees them), so they count against it.
    /// Refused for a name no key has ([`LimitSet::UnknownJob`]); the limit
    /// applies to keys claimed under that name by replicas of schema 14
    /// and later (the runtime's claims: `LeaseStore::claim_run` takes no
    /// place). The set waits for the claims in flight (at most a second;
    /// then it fails with PostgreSQL's lock timeout, nothing set: try
    /// again), so no run starts beside it without a place. Cancel-safe: one
    /// transaction, rolled back if dropped.
    ///
    /// ```no_run
    /// # async fn demo(store: leasehold::store::LeaseStore) -> leasehold::Result<()> {
    /// use leasehold::operator::LimitSet;
    /// match store.controls().set_limit("report", 4, "alice@laptop").await? {
    ///     LimitSet::Set { previous } => println!("at most 4 reports at once (was {previous:?})"),
    ///     _ => eprintln!("no key of a job named report"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn set_limit(self, job: &str, limit: u32, by: &str) -> Result<LimitSet> {
        validate::existing_job_name(job)?;
        validate::actor("set by", by)?;
        self.set_limit_recorded(job, limit, by, None, false).await
    }

    /// [`Controls::set_limit`] writing `record`, if any, in its statement
    /// (`Operator::set_limit`); `job` and `by` were checked where they
    /// entered. `registered`: a runtime registers `job` (its code declares
    /// the limit: `RuntimeBuilder::fleet_limit`), so the limit is set even
    /// before any key of it exists — a kind's first keys are often added
    /// after its replicas start.
    pub(crate) async fn set_limit_recorded(
        self,
        job: &str,
        limit: u32,
        by: &str,
        record: Option<&Record<'_>>,
        registered: bool,
    ) -> Result<LimitSet> {
        let limit = check_limit(limit)?;
        // $1 job, $2 limit, $3 by, $4 the kinds' channel: replicas poll at
        // once, so they learn the limit now rather than at their next poll.
        // - `recorded` (the record: $5 action, $6 actor, $7 words: [1] set,
        //   with the limit it replaced, [2] set where none was, [3] unknown
        //   job; $9 the schema version asked for (`leasehold_schema_is`, NULL: none)): the action's row on the
        //   job, in the statement that sets the limit, so the two commit
        //   together.
        // - `known`: a name some key has (its row's job, or a stored key's
        //   kind), one a runtime registers ($8), or one with a limit
        //   already (a kind whose code declares it, before its first key),
        //   so a typo is refused rather than limiting nothing.
        // - `places`: the slot rows 1..limit that do not exist yet, created
        //   free — or holding a run of the job in progress that holds no
        //   place (`live`, oldest first), so runs started before the limit
        //   count against it. Slots above a lowered limit stay: a run holding
        //   one ends normally, and claims take only slots up to the limit.
        const SET_LIMIT: &str = "
            WITH known AS (
                SELECT $8::bool
                    OR EXISTS (SELECT 1 FROM leasehold_limit WHERE job_name = $1)
                    OR EXISTS (SELECT 1 FROM leasehold_lease WHERE job_name = $1)
                    OR EXISTS (SELECT 1 FROM leasehold_key WHERE kind = $1) AS known
            ), before AS (
                SELECT m.fleet_limit FROM leasehold_limit AS m WHERE m.job_name = $1
            ), set AS (
                INSERT INTO leasehold_limit AS m (job_name, fleet_limit, set_by)
                SELECT $1, $2, $3 FROM known WHERE known.known
                ON CONFLICT (job_name) DO UPDATE
                   SET fleet_limit = EXCLUDED.fleet_limit, set_by = EXCLUDED.set_by, set_at = clock_timestamp()
                RETURNING m.job_name
            ), live AS (
                SELECT l.key, l.fence, l.owner, l.acquired_at, l.expires_at,
                       row_number() OVER (ORDER BY l.acquired_at, l.key) AS n
                  FROM leasehold_lease AS l
                 WHERE l.job_name = $1 AND l.expires_at > clock_timestamp()
                   AND NOT EXISTS (SELECT 1 FROM leasehold_run_slot AS s WHERE s.key = l.key AND s.fence = l.fence)
            ), missing AS (
                SELECT g.slot_no, row_number() OVER (ORDER BY g.slot_no) AS n
                  FROM generate_series(1, $2) AS g(slot_no)
                 WHERE NOT EXISTS (SELECT 1 FROM leasehold_run_slot AS s WHERE s.job_name = $1 AND s.slot_no = g.slot_no)
            ), places AS (
                INSERT INTO leasehold_run_slot (job_name, slot_no, key, fence, owner, acquired_at, expires_at)
                SELECT set.job_name, missing.slot_no, live.key, live.fence, live.owner,
                       COALESCE(live.acquired_at, '-infinity'), COALESCE(live.expires_at, '-infinity')
                  FROM set CROSS JOIN missing LEFT JOIN live USING (n)
                ON CONFLICT (job_name, slot_no) DO NOTHING
            ), recorded AS (
                INSERT INTO leasehold_action (scope, name, action, actor, outcome)
                SELECT 'job', $1, $5, $6,
                       CASE WHEN NOT k.known THEN format(($7::text[])[3])
                            WHEN b.fleet_limit IS NULL THEN format(($7::text[])[2])
                            ELSE format(($7::text[])[1], b.fleet_limit) END
                  FROM known AS k LEFT JOIN before AS b ON true
                 WHERE /* guard:set_limit.recorded */ $5::text IS NOT NULL AND leasehold_schema_is($9::int)
            )
            SELECT (SELECT known FROM known) AS known, (SELECT fleet_limit FROM before) AS previous,
                   (SELECT count(*) FROM (SELECT pg_notify($4, job_name) FROM set) AS n) AS told";
        // Run first, in the set's transaction: no claim is in flight while
        // the limit is set. A claim's statement reads the limits on its
        // snapshot, so one that began before the set commits would start a
        // run without a place — and, if it committed after the set's own
        // snapshot, one the set does not give a place either: N + 1 runs.
        // `SHARE` waits for the claims (and renewals, releases) holding
        // the table's `ROW EXCLUSIVE` lock, and holds new ones back until
        // the set commits; those then take their snapshot, which has the
        // limit, once they have the lock (PostgreSQL locks a statement's
        // tables before it takes its snapshot). The set then reads every
        // run started before it.
        let (action, actor, words, schema) = Record::binds(record);
        let mut tx = connection::begin(&self.store.conns).await?;
        sqlx::raw_sql(Self::DRAIN_CLAIMS).execute(&mut *tx).await?;
        let (known, previous, _told): (bool, Option<i32>, i64) = sqlx::query_as(SET_LIMIT)
            .bind(job)
            .bind(limit)
            .bind(by)
            .bind(KIND_CHANNEL)
            .bind(action)
            .bind(actor)
            .bind(words)
            .bind(registered)
            .bind(schema)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(if known {
            LimitSet::Set {
                previous: previous.and_then(|p| u32::try_from(p).ok()),
            }
        } else {
            LimitSet::UnknownJob
        })
    }

    /// Lifts the fleet-wide limit of `job`: its keys start as freely as any
    /// other's from the replicas' next claim. Whether it had one.
    /// Cancel-safe: one statement.
    pub async fn clear_limit(self, job: &str) -> Result<bool> {
        validate::existing_job_name(job)?;
        self.clear_limit_recorded(job, None).await
    }

    /// [`Controls::clear_limit`] writing `record`, if any, in its statement
    /// (`Operator::clear_limit`); `job` was checked where it entered.
    pub(crate) async fn clear_limit_recorded(self, job: &str, record: Option<&Record<'_>>) -> Result<bool> {
        // $1 job, $2 the kinds' channel (replicas poll at once); `recorded`
        // (the record: $3 action, $4 actor, $5 words: [1] lifted, [2] not
        // limited; $6 the schema version asked for (`leasehold_schema_is`, NULL: none)) in the same statement. The slot rows go with the limit: a job without a limit
        // has none, and its claims look for none.
        const CLEAR_LIMIT: &str = "
            WITH gone AS (
                DELETE FROM leasehold_limit WHERE job_name = $1 RETURNING job_name
            ), places AS (
                DELETE FROM leasehold_run_slot WHERE job_name IN (SELECT job_name FROM gone)
            ), recorded AS (
                INSERT INTO leasehold_action (scope, name, action, actor, outcome)
                SELECT 'job', $1, $3, $4,
                       CASE WHEN EXISTS (SELECT 1 FROM gone) THEN format(($5::text[])[1])
                            ELSE format(($5::text[])[2]) END
                 WHERE /* guard:clear_limit.recorded */ $3::text IS NOT NULL AND leasehold_schema_is($6::int)
            )
            SELECT count(*) FROM (SELECT pg_notify($2, job_name) FROM gone) AS told";
        let (action, actor, words, schema) = Record::binds(record);
        let gone: i64 = connection::run!(&self.store.conns, |conn| sqlx::query_scalar(CLEAR_LIMIT)
            .bind(job)
            .bind(KIND_CHANNEL)
            .bind(action)
            .bind(actor)
            .bind(words)
            .bind(schema)
            .fetch_one(conn))?;
        Ok(gone > 0)
    }

    /// Each limit in force, `(job, limit)`, without the counts
    /// [`limits`](Self::limits) reads (those scan the job's lease rows): a
    /// starting runtime compares its declared limits with these.
    pub(crate) async fn limits_in_force(self) -> Result<Vec<(String, u32)>> {
        const IN_FORCE: &str = "SELECT job_name, fleet_limit FROM leasehold_limit";
        let rows: Vec<(String, i32)> =
            connection::run!(&self.store.conns, |conn| sqlx::query_as(IN_FORCE).fetch_all(conn))?;
        Ok(rows
            .into_iter()
            .map(|(job, limit)| (job, u32::try_from(limit).unwrap_or(0)))
            .collect())
    }

    /// Every fleet-wide limit in force, by job name, each with its runs in
    /// progress and its keys waiting. Cancel-safe: one statement.
    pub async fn limits(self) -> Result<Vec<FleetLimit>> {
        // `running`: places held (a slot free by the same rule the claims
        // use is not counted). `waiting`: the job's keys due, free and not
        // paused — what a place would start.
        const LIMITS: &str = concat!(
            "
            SELECT m.job_name, m.fleet_limit, m.set_by, m.set_at,
                   (SELECT count(*) FROM leasehold_run_slot AS s WHERE s.job_name = m.job_name AND NOT ",
            slot_free!(),
            ") AS running,
                   w.waiting, w.waiting_since, clock_timestamp() AS server_now
              FROM leasehold_limit AS m, LATERAL (
                  SELECT count(*) AS waiting, min(l.next_due_at) AS waiting_since
                    FROM leasehold_lease AS l
                   WHERE l.job_name = m.job_name AND l.expires_at <= clock_timestamp()
                     AND l.next_due_at <= clock_timestamp()
                     AND NOT ",
            paused!(key = "l.key", jobs = "l.job_name"),
            ") AS w
             ORDER BY m.job_name"
        );
        let rows: Vec<LimitRow> = connection::run!(&self.store.conns, |conn| sqlx::query_as(LIMITS).fetch_all(conn))?;
        Ok(rows.into_iter().map(FleetLimit::from).collect())
    }
}
