//! The batch claim: up to a replica's room of due keys in one statement,
//! each with a fresh fence (invariants 3, 4, 5 and 8; `SKIP LOCKED`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{FromRow, Row};

use super::Sighting;
use crate::connection;
use crate::error::Result;
use crate::lease::{ClaimRow, Lease, LeaseStore, Registration, SESSION_HORIZON, StoredArgs};
use crate::validate;

/// A key claimed for a run by [`LeaseStore::claim_due`].
#[derive(Debug)]
pub(crate) struct ClaimedRun {
    pub(crate) lease: Lease,
    /// The key's run number: this run's place in the history ring.
    pub(crate) run_no: i64,
    /// The schedule slot the key owed when claimed (`None`: none recorded).
    pub(crate) pending_slot: Option<DateTime<Utc>>,
    /// A stored key's arguments as the claim saw them (`None`: the key is
    /// not a stored key, or not any more).
    pub(crate) args: Option<StoredArgs>,
    /// The job of the key's previous run, when this claim recorded that
    /// run as lost (it ended without a release).
    pub(crate) lost_job: Option<String>,
    /// The liveness registration the claim stamped the row with.
    pub(crate) owner: Option<i64>,
}

/// A claimed row of [`LeaseStore::claim_due`]'s answer.
#[derive(sqlx::FromRow)]
struct ClaimedRow {
    #[sqlx(flatten)]
    claim: ClaimRow,
    args_kind: Option<String>,
    args: Option<String>,
    args_version: Option<i64>,
    lost_job: Option<String>,
    owner: Option<i64>,
}

/// One key to claim with [`LeaseStore::claim_due`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate<'a> {
    pub(crate) key: &'a str,
    pub(crate) job_name: &'a str,
    pub(crate) lease: Duration,
    /// The run's time limit (`JobSettings::timeout`), written on the row
    /// for status and the console.
    pub(crate) timeout: Option<Duration>,
    /// How much earlier than its due time the key competes for the room
    /// (its job's priority: `RuntimeBuilder::priority_of`).
    pub(crate) head_start: Duration,
}

/// The answer to a batch claim.
#[derive(Debug, Default)]
pub(crate) struct Claimed {
    /// Keys this statement claimed, each with its own fresh fence.
    pub(crate) acquired: Vec<ClaimedRun>,
    /// The other candidates, as the statement's snapshot saw them.
    pub(crate) seen: Vec<Sighting>,
}

// The parts of the batch claim's two texts (`LeaseStore::CLAIM_DUE` and
// `LeaseStore::CLAIM_DUE_UNLIMITED`), each written once: macros expanding
// to string literals, so each text stays one `&'static str`. What each
// clause protects is said above `CLAIM_DUE`.

/// The candidates, one row each: `t`.
macro_rules! claim_candidates {
    () => {
        "
            WITH t AS (
                SELECT * FROM unnest($2::text[], $3::float8[], $5::text[], $9::float8[], $10::float8[])
                           AS t(key, ttl, job, run_timeout, head_start)
            )"
    };
}

/// `pick`: the free, due, unpaused candidates there is room for, locked,
/// less those `except` (a condition on `t`) leaves out.
macro_rules! claim_pick {
    (except = $except:expr) => {
        concat!(
            "
            , pick AS (
                SELECT l.key, l.run_open, l.runs, l.job_name, l.fence, l.holder, l.slot_at, l.acquired_at,
                       l.expires_at, l.next_due_at, t.ttl, t.job AS new_job, t.run_timeout
                  FROM leasehold_lease AS l JOIN t ON t.key = l.key
                 WHERE (/* guard:claim_due.expiry */ l.expires_at <= clock_timestamp()
                        OR (/* guard:claim_due.early */ l.owner IS NOT NULL AND ",
            dead_owner!(owner = "l.owner", acquired = "l.acquired_at"),
            "))
                   AND /* guard:claim_due.due */ (l.next_due_at IS NULL OR l.next_due_at <= clock_timestamp())
                   AND NOT ",
            /* guard:claim_due.pause */ paused!(if_any, key = "l.key", jobs = "l.job_name, t.job"),
            "
                   AND ",
            $except,
            "
                 ORDER BY l.next_due_at - make_interval(secs => t.head_start) NULLS FIRST, l.key
                 LIMIT /* guard:claim_due.limit */ $4
                   FOR UPDATE OF l /* guard:claim_due.skip_locked */ SKIP LOCKED
            )"
        )
    };
}

/// `claimed`: the tenure written on each lease row of `from` (`pick`, or
/// the part of it that got a place).
macro_rules! claim_write {
    (from = $from:literal) => {
        concat!(
            "
            , claimed AS (
                UPDATE leasehold_lease AS l
                   SET holder      = $1,
                       fence       = /* guard:claim_due.fresh_fence */ leasehold_next_fence(),
                       acquired_at = clock_timestamp(),
                       expires_at  = clock_timestamp() + make_interval(secs => p.ttl),
                       job_name    = p.new_job,
                       runs        = l.runs + 1,
                       slot_at     = COALESCE(l.slot_at, l.next_due_at),
                       run_open    = true,
                       run_timeout_secs = p.run_timeout,
                       owner       = CASE WHEN p.ttl <= $8 THEN (SELECT r.id FROM leasehold_replica AS r
                                           WHERE r.id = $7 AND r.confirmed_at + r.grace / 2 > clock_timestamp()) END
                  FROM ",
            $from,
            " AS p
                 WHERE l.key = p.key
                RETURNING l.*
            )"
        )
    };
}

/// `lost`: the history row of each run a claim took over unreleased.
macro_rules! claim_lost {
    () => {
        "
            , lost AS (
                INSERT INTO leasehold_run AS r (key, slot, run_no, job_name, fence, holder, scheduled_for,
                                                started_at, ended_at, outcome, reason, error)
                SELECT p.key, (p.runs % $6::int8)::int, p.runs, p.job_name, p.fence, p.holder, p.slot_at,
                       p.acquired_at, LEAST(p.expires_at, c.acquired_at), 'lost',
                       CASE WHEN p.expires_at <= c.acquired_at THEN 'expired' ELSE 'session_ended' END,
                       CASE WHEN p.expires_at <= c.acquired_at THEN 'lease expired without a release'
                            ELSE 'its replica''s session ended without a release' END
                  FROM pick AS p JOIN claimed AS c ON c.key = p.key
                 WHERE /* guard:claim_due.lost_open */ p.run_open AND $6::int8 > 0
                ON CONFLICT (key, slot) DO UPDATE
                   SET run_no = EXCLUDED.run_no, job_name = EXCLUDED.job_name, fence = EXCLUDED.fence,
                       holder = EXCLUDED.holder, scheduled_for = EXCLUDED.scheduled_for,
                       started_at = EXCLUDED.started_at, ended_at = EXCLUDED.ended_at,
                       outcome = EXCLUDED.outcome, reason = EXCLUDED.reason, error = EXCLUDED.error
                 /* guard:claim_due.lost_ring_order */ WHERE r.run_no < EXCLUDED.run_no
                RETURNING r.key, r.job_name
            )"
    };
}

/// The answer: the claimed rows, then every other candidate as the
/// snapshot saw it, with `held_back` and `limited` (conditions on `t`).
macro_rules! claim_answer {
    (held_back = $held_back:expr, limited = $limited:expr) => {
        concat!(
            "
            SELECT true AS acquired, false AS paused, c.*, clock_timestamp() AS server_now,
                   k.kind AS args_kind, k.args::text AS args, k.version AS args_version,
                   (SELECT lo.job_name FROM lost AS lo WHERE lo.key = c.key) AS lost_job,
                   false AS held_back, false AS limited
              FROM claimed AS c LEFT JOIN leasehold_key AS k ON k.key = c.key
            UNION ALL
            SELECT false,
                   ",
            paused!(if_any, key = "l.key", jobs = "l.job_name, t.job"),
            ",
                   l.*, clock_timestamp(), NULL, NULL, NULL, NULL,
                   ",
            $held_back,
            ",
                   ",
            $limited,
            "
              FROM leasehold_lease AS l JOIN t ON t.key = l.key
             WHERE t.key NOT IN (SELECT key FROM claimed)"
        )
    };
}

impl LeaseStore {
    /// The batch claim's statement, public and hidden behind the
    /// `test-util` feature only so scenario tests can run two claims in
    /// transactions of their own and order them.
    #[cfg(feature = "test-util")]
    #[doc(hidden)]
    pub const CLAIM_DUE_SQL: &str = Self::CLAIM_DUE;

    /// [`LeaseStore::CLAIM_DUE_SQL`] without the fleet-wide limits' steps,
    /// for the same tests.
    #[cfg(feature = "test-util")]
    #[doc(hidden)]
    pub const CLAIM_DUE_UNLIMITED_SQL: &str = Self::CLAIM_DUE_UNLIMITED;

    /// The statement of [`LeaseStore::claim_due`], prepared on each connection
    /// of leasehold's own as it opens (`session::prepare`).
    // $1 holder, $2 keys, $3 lease seconds, $4 how many to claim at most,
    // $5 job names, $6 the history ring's length, $7 this runtime's
    // liveness registration (NULL: none), $8 the longest lease a stamp
    // covers (seconds), $9 each key's run time limit (seconds, NULL: none),
    // $10 each key's head start in the due order (seconds: its job's
    // priority, 0 by default): `pick` takes the keys that fell due
    // earliest counting it, so a job of higher priority goes first when
    // there are more due keys than room, and a key that waited longer than
    // the difference goes first whatever its priority.
    // `pick` decides, with the guards of `claim_run` (invariant 3, no
    // re-entrance), evaluated on the latest row version once locked:
    // - expires_at <= now: the lease is free by the server clock —
    //   whoever held it, this holder id included (two processes may
    //   share one id); or (invariant 10) the run was stamped with a
    //   liveness registration that is dead (`dead_owner!`, liveness.rs):
    //   its session was seen gone a grace ago, so its process is dead or
    //   has stopped the run itself;
    // - next_due_at <= now: the key is due by the server clock, so
    //   replicas whose timers fire at different moments still start one
    //   run per slot;
    // - FOR UPDATE SKIP LOCKED: a row another claimer (or any other
    //   transaction) has locked is left to it, never waited for;
    // - not paused (invariant 8): neither the key, nor its job — by the
    //   row's job_name or the one this runtime registers it under. The
    //   rule is behind one look at whether any pause exists
    //   (`paused!(if_any, …)`, evaluated once per statement): with none,
    //   no candidate probes the pause table.
    // `pick` also carries each candidate's lease, job and time limit
    // from `t`, so `claimed` joins the batch once, by key (a primary-key
    // lookup per row picked), and not the batch array again (a nested
    // loop over `t` per row picked: quadratic in the batch).
    // `claimed` writes: a fresh fence per row (invariants 4 and 5),
    // the stamp `owner` ($7 while that registration was confirmed within
    // half its grace — a stamp on a registration about to go silent would
    // leave its holder no time to stop before a takeover, found by the
    // model check — for a lease within $8: the horizon its session
    // outlives a partition),
    // times from clock_timestamp() after the locks were taken, so
    // acquired_at is never before the due time it consumed; the run's
    // number (its history slot), the job's name, the slot it owes, and
    // its time limit (shown only: the replica enforces it).
    // The UNION half reports the unclaimed candidates, paused or not (the
    // same `if_any` rule), so
    // the caller learns when to look again in the same round trip; it
    // leaves out the claimed ones by the candidate's key (`t.key`), so
    // the filter runs before the row lookup, not after it.
    // `lost` (invariant 9) records the run whose tenure this claim takes
    // over when that run was never released (`run_open`, read on the
    // locked row): its replica crashed, froze past its lease or could not
    // write its release. The row is the old tenure's, as the lease row
    // still has it — holder, fence, slot, start — at
    // its ring place ($6 long; 0 records nothing), ended at its expiry
    // or, taken over early, now, replacing only an
    // older run there, so a release that did record the run is never
    // overwritten. The claimed row comes back with the lost run's job.
    // A claimed stored key comes back with its kind, arguments and
    // version as this statement's snapshot has them: the run starts
    // with the version its claim saw (an update committed before the
    // claim reaches this run, a later one the next run), with no
    // statement of its own; a key removed meanwhile has none and is
    // not run.
    // The fleet-wide limits (invariant 11, `limit.rs`): a key of a job
    // with a limit is claimed only with one of its job's places.
    // - `pick` passes over the keys of the jobs in `full_jobs`: limited jobs
    //   none of whose places is free on the statement's snapshot
    //   (`limit_full!`, once per job, not per key): a filter, so the claim
    //   does not lock keys it cannot start; not the guard.
    // - `lim`: the limited jobs among the keys picked, with how many, and
    //   how many runs hold a place above the limit (`above`: started
    //   before it was lowered).
    // - `slot` takes, per limited job, up to that many free places
    //   (`slot_free!`: read on the slot row's own columns) numbered up to
    //   the limit less `above`: after a limit is lowered, the runs still
    //   holding higher places count against it, so no run starts until
    //   fewer than the new limit run. `above` reads the snapshot, but a
    //   place above the limit is never taken again, only freed: the count
    //   can only be too high, which holds a start back, never lets one
    //   through. The places are
    //   locked FOR UPDATE SKIP LOCKED: PostgreSQL re-checks freeness on
    //   the latest version once locked, so a place a concurrent claim took
    //   is skipped, never taken twice (a count of live tenures here would
    //   read the snapshot, and two claims would both see room).
    // - `pair` gives the job's picked keys, oldest due first, a place
    //   each while places last; `go` is what is claimed: every picked key
    //   of a job without a limit, and a limited job's keys with a place.
    //   The others stay due and come back `held_back`: a key picked but
    //   not claimed (it got no place), or one of a job in `full_jobs` —
    //   not a key passed over for the replica's room ($4), which is due
    //   for the next claim; `limited` says the key's job has a limit,
    //   so its replica keeps it in due order.
    // - With no limit anywhere, `any_limit!` (evaluated once per
    //   statement) skips all of this: `go` is `pick`, and no place is
    //   looked for.
    // - `slotted` writes the tenure into its place: key, fence, stamp and
    //   expiry, the lease row's own values from `claimed`, so the place is
    //   free exactly when the tenure is over.
    pub(crate) const CLAIM_DUE: &str = concat!(
        claim_candidates!(),
        "
            , full_jobs AS (
                SELECT m.job_name FROM leasehold_limit AS m
                 WHERE ",
        any_limit!(),
        " AND m.job_name IN (SELECT job FROM t) AND ",
        limit_full!(limit = "m"),
        ")",
        claim_pick!(except = "t.job NOT IN (SELECT job_name FROM full_jobs)"),
        "
            , lim AS (
                SELECT p.new_job AS job, m.fleet_limit, count(*) AS n,
                       (SELECT count(*) FROM leasehold_run_slot AS s
                         WHERE s.job_name = p.new_job AND s.slot_no > m.fleet_limit AND NOT ",
        slot_free!(),
        ") AS above
                  FROM pick AS p JOIN leasehold_limit AS m ON m.job_name = p.new_job
                 WHERE ",
        any_limit!(),
        "
                 GROUP BY p.new_job, m.fleet_limit
            ), slot AS (
                SELECT f.job_name, f.slot_no, row_number() OVER (PARTITION BY f.job_name ORDER BY f.slot_no) AS rn
                  FROM lim, LATERAL (
                      SELECT s.job_name, s.slot_no FROM leasehold_run_slot AS s
                       WHERE s.job_name = lim.job
                         AND /* guard:claim_due.slot_under_limit */ s.slot_no <= lim.fleet_limit - lim.above
                         AND ",
        slot_free!(),
        "
                       ORDER BY s.slot_no
                       LIMIT lim.n
                         /* guard:claim_due.slot_lock */ FOR UPDATE OF s SKIP LOCKED) AS f
            ), pair AS (
                SELECT r.key, f.job_name, f.slot_no
                  FROM (SELECT p.key, p.new_job,
                               row_number() OVER (PARTITION BY p.new_job ORDER BY p.next_due_at NULLS FIRST, p.key) AS rn
                          FROM pick AS p WHERE ",
        any_limit!(),
        " AND p.new_job IN (SELECT job FROM lim)) AS r
                  JOIN slot AS f ON f.job_name = r.new_job AND f.rn = r.rn
            ), go AS (
                SELECT p.* FROM pick AS p
                 WHERE NOT ",
        any_limit!(),
        " OR p.new_job NOT IN (SELECT job FROM lim)
                    OR /* guard:claim_due.slot_needed */ p.key IN (SELECT key FROM pair)
            )",
        claim_write!(from = "go"),
        "
            , slotted AS (
                UPDATE leasehold_run_slot AS s
                   SET key = c.key, fence = c.fence, owner = c.owner, acquired_at = c.acquired_at,
                       expires_at = /* guard:claim_due.slot_expiry */ c.expires_at
                  FROM pair AS pr JOIN claimed AS c ON c.key = pr.key
                 WHERE s.job_name = pr.job_name AND s.slot_no = pr.slot_no
            )",
        claim_lost!(),
        claim_answer!(
            held_back = concat!(
                any_limit!(),
                " AND (t.key IN (SELECT key FROM pick) OR t.job IN (SELECT job_name FROM full_jobs))"
            ),
            limited = concat!(
                any_limit!(),
                " AND EXISTS (SELECT 1 FROM leasehold_limit AS m WHERE m.job_name = t.job)"
            )
        ),
    );

    /// [`LeaseStore::CLAIM_DUE`] without the fleet-wide limits' steps: the
    /// claim a runtime sends when none of its candidates' jobs has a limit
    /// as its last poll read them (invariant 11). A key of a job with a
    /// limit is never claimed by it — a limit set since that poll is
    /// refused here and comes back `held_back` and `limited`, so the
    /// runtime polls and sends the full claim next. Why a second text: the
    /// full one's steps cost each execution their plan nodes even when
    /// skipped (about a fifth of a claim's execution time, measured:
    /// docs/benchmarks/peers-2026-12-06-limits/).
    pub(crate) const CLAIM_DUE_UNLIMITED: &str = concat!(
        claim_candidates!(),
        claim_pick!(
            except = "/* guard:claim_due.limited_refused */ t.job NOT IN (SELECT m.job_name FROM leasehold_limit AS m)"
        ),
        claim_write!(from = "pick"),
        claim_lost!(),
        claim_answer!(
            held_back = "t.job IN (SELECT m.job_name FROM leasehold_limit AS m)",
            limited = "t.job IN (SELECT m.job_name FROM leasehold_limit AS m)"
        ),
    );

    /// Claims, for new runs of `holder`, up to `limit` of `candidates`
    /// `(key, lease)` that are free and due, in **one** statement: each
    /// claimed key gets its own fresh fence. Rows another transaction has
    /// locked are skipped, not waited for. The candidates not claimed come
    /// back as the snapshot saw them; a candidate without a row is in
    /// neither list. A claimed key whose previous run was never released
    /// gets that run's history row, outcome `lost`, in a ring of `ring`
    /// places (0: none). `with_limits`: some candidate's job has a
    /// fleet-wide limit, as far as the caller knows; without, the claim
    /// leaves out the limits' steps and refuses any key of a limited job.
    pub(crate) async fn claim_due(
        &self,
        holder: &str,
        candidates: &[Candidate<'_>],
        limit: usize,
        ring: u32,
        owner: Option<Registration>,
        with_limits: bool,
    ) -> Result<Claimed> {
        // No check of the holder, keys and job names here: they come from
        // the runtime's registry, checked where they entered it (the holder
        // and a job's key at `start` or `add`, a stored key at its kind's
        // sync), and a check per candidate per claim was 3–4 % of the
        // client's time per run.
        let mut keys = Vec::with_capacity(candidates.len());
        let mut jobs = Vec::with_capacity(candidates.len());
        let mut ttls = Vec::with_capacity(candidates.len());
        let mut timeouts: Vec<Option<f64>> = Vec::with_capacity(candidates.len());
        let mut head_starts: Vec<f64> = Vec::with_capacity(candidates.len());
        for candidate in candidates {
            head_starts.push(candidate.head_start.as_secs_f64());
            keys.push(candidate.key);
            jobs.push(candidate.job_name);
            ttls.push(validate::lease_secs("lease duration", candidate.lease)?);
            timeouts.push(candidate.timeout.map(|limit| limit.as_secs_f64()));
        }
        if keys.is_empty() || limit == 0 {
            return Ok(Claimed::default());
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let statement = if with_limits {
            Self::CLAIM_DUE
        } else {
            Self::CLAIM_DUE_UNLIMITED
        };
        let rows: Vec<PgRow> = connection::run!(&self.conns, settling Some(statement), |conn| sqlx::query(statement)
            .bind(holder)
            .bind(&keys)
            .bind(&ttls)
            .bind(limit)
            .bind(&jobs)
            .bind(i64::from(ring))
            .bind(owner.map(|r| r.id))
            .bind(SESSION_HORIZON.as_secs_f64())
            .bind(&timeouts)
            .bind(&head_starts)
            .fetch_all(conn))?;
        // A candidate not claimed is read as a `Sighting` only (its key,
        // expiry and due time), not as a whole lease row: under contention
        // most of a claim's answer is such rows (at the throughput ceiling,
        // 35 of 64), and decoding their every column took a tenth of the
        // client's CPU there.
        let mut claimed = Claimed::default();
        for row in rows {
            if !row.try_get::<bool, _>("acquired")? {
                claimed.seen.push(Sighting::from_row(&row)?);
                continue;
            }
            let ClaimedRow {
                claim: ClaimRow { row, .. },
                args_kind,
                args,
                args_version,
                lost_job,
                owner,
            } = ClaimedRow::from_row(&row)?;
            let (run_no, pending_slot) = (row.runs, row.slot_at);
            let args = match (args_kind, args, args_version) {
                (Some(kind), Some(json), Some(version)) => Some(StoredArgs { kind, json, version }),
                _ => None,
            };
            claimed.acquired.push(ClaimedRun {
                lease: row.into_lease(),
                run_no,
                pending_slot,
                args,
                lost_job,
                owner,
            });
        }
        Ok(claimed)
    }
}
