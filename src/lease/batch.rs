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

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::keys::KindGenerations;
use super::{ClaimRow, Lease, LeaseInfo, LeaseRow, LeaseStore, NextDue, PauseTarget, RunReport, StoredArgs};
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
    /// Paused (by key or job): not claimable until resumed.
    #[sqlx(default)]
    pub(crate) paused: bool,
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
}

/// One row of [`LeaseStore::claim_due`]'s answer.
#[derive(sqlx::FromRow)]
struct DueRow {
    #[sqlx(flatten)]
    claim: ClaimRow,
    args_kind: Option<String>,
    args: Option<String>,
    args_version: Option<i64>,
}

/// One key to claim with [`LeaseStore::claim_due`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate<'a> {
    pub(crate) key: &'a str,
    pub(crate) job_name: &'a str,
    pub(crate) lease: Duration,
}

/// What a poll ([`LeaseStore::due_since`]) learned.
#[derive(Debug)]
pub(crate) struct Polled {
    pub(crate) server_now: DateTime<Utc>,
    /// Keys that became claimable since the window's start.
    pub(crate) seen: Vec<Sighting>,
    /// Every pause in force.
    pub(crate) paused: Vec<PauseTarget>,
    /// The server's WAL timeline (`leasehold_timeline_id()`): it rises on
    /// every promotion of a standby.
    pub(crate) timeline: Option<i64>,
    /// The generations of the kinds the poll vouched for, and the keys of
    /// kinds no live replica runs.
    pub(crate) kinds: KindGenerations,
}

/// The answer to a batch claim.
#[derive(Debug, Default)]
pub(crate) struct Claimed {
    /// Keys this statement claimed, each with its own fresh fence.
    pub(crate) acquired: Vec<ClaimedRun>,
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
    /// The run's history row; `None` records nothing (a plain
    /// [`LeaseStore::release`]).
    pub(crate) report: Option<RunReport>,
}

/// What one release of [`LeaseStore::finish_many`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// The tenure was the current one and is released; the key is next
    /// due later.
    Yes,
    /// The tenure was the current one and is released, and the key is due
    /// now: a trigger came during the run, or the run left its slot owed
    /// (cancelled).
    StillDue,
    /// The tenure was not the current one any more: nothing changed.
    NotCurrent,
    /// Its row is locked by another transaction: nothing changed yet.
    Busy,
}

impl Released {
    /// Whether the tenure was released (the key due later or now).
    pub(crate) fn released(self) -> bool {
        matches!(self, Released::Yes | Released::StillDue)
    }
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
    pub(crate) async fn register_many(
        &self,
        holder: &str,
        keys: &[(&str, &str, DateTime<Utc>)],
    ) -> Result<Vec<Sighting>> {
        validate::holder(holder)?;
        let mut sorted: Vec<(&str, &str, DateTime<Utc>)> = keys.to_vec();
        for (key, job, _) in &sorted {
            validate::key(key)?;
            validate::job_name(job)?;
        }
        // One order for every replica: concurrent inserts of overlapping
        // key sets then wait for each other instead of deadlocking.
        sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let mut names = Vec::with_capacity(sorted.len());
        let mut jobs = Vec::with_capacity(sorted.len());
        let mut dues = Vec::with_capacity(sorted.len());
        for (key, job, due) in sorted {
            names.push(key);
            jobs.push(job);
            dues.push(due);
        }
        // $1 holder, $2 keys, $3 first due times, $4 the wake-up channel,
        // $5 job names.
        // - The new row expires 1 µs after it was "acquired", from one clock
        //   reading: free, valid for the CHECK, and marked never run
        //   (`never_claimed`). Its fence still comes from the sequence.
        // - `existing` reads the rows already there once (a hash join, the
        //   same cost per key at a million keys as at ten), and only the
        //   other keys are inserted: on a restart nothing is, and no key
        //   pays for a conflict check. An anti-join, not `NOT IN`: a large
        //   `NOT IN` list that outgrows work_mem is searched row by row.
        // - ON CONFLICT DO NOTHING: a row another replica inserted after
        //   this statement's snapshot keeps its schedule too (it is in
        //   neither half of the answer: the caller looks at it at once).
        // - A new row due already wakes the listeners (the notify half).
        const REGISTER_MANY: &str = "
            WITH t AS (
                SELECT * FROM unnest($2::text[], $3::timestamptz[], $5::text[]) AS t(key, first_due, job)
            ), existing AS (
                SELECT l.key, l.expires_at, l.next_due_at FROM leasehold_lease AS l JOIN t ON t.key = l.key
            ), inserted AS (
                INSERT INTO leasehold_lease (key, holder, fence, acquired_at, expires_at, next_due_at, slot_at, job_name)
                SELECT t.key, $1, leasehold_next_fence(), c.now, c.now + interval '1 microsecond',
                       t.first_due, t.first_due, t.job
                  FROM t, (SELECT clock_timestamp() AS now) AS c
                 /* guard:register_many.existing_kept */ WHERE NOT EXISTS (SELECT 1 FROM existing AS e WHERE e.key = t.key)
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
            SELECT e.key, e.expires_at, e.next_due_at, clock_timestamp() FROM existing AS e";
        if names.is_empty() {
            return Ok(Vec::new());
        }
        connection::run!(&self.conns, |conn| sqlx::query_as(REGISTER_MANY)
            .bind(holder)
            .bind(&names)
            .bind(&dues)
            .bind(WAKE_CHANNEL)
            .bind(&jobs)
            .fetch_all(conn))
    }

    /// A key this runtime removed `away` ago comes back: if no replica
    /// claimed it since, it is due at `first` (its next slot), like a new
    /// key — the slots that passed while it was away are not missed slots.
    /// Returns whether its due time was reset; a key without a row is left
    /// to [`LeaseStore::register_many`].
    pub(crate) async fn readd(&self, key: &str, job: &str, first: DateTime<Utc>, away: Duration) -> Result<bool> {
        validate::key(key)?;
        validate::job_name(job)?;
        let away = away.as_secs_f64();
        // $1 key, $2 first due time, $3 job name, $4 seconds since this
        // runtime removed the key (measured here, subtracted on the server:
        // invariant 1).
        // - acquired_at before the removal: no replica claimed the key
        //   since. One that did still registers it, and the slots it could
        //   not run (its fleet down, say) stay owed, as for any key.
        // - expires_at <= now: a run in progress — claimed before the
        //   removal, by a replica that still registers the key — keeps the
        //   due time its release writes (a cancelled run's slot stays owed).
        // - Not paused (invariant 8's rule): the slots a pause holds back
        //   stay owed to its resume, whoever registers the key.
        const READD: &str = concat!(
            "
            UPDATE leasehold_lease AS l
               SET next_due_at = $2, slot_at = $2
             WHERE l.key = $1
               AND /* guard:readd.unclaimed_since */ l.acquired_at <= clock_timestamp() - make_interval(secs => $4)
               AND /* guard:readd.not_running */ l.expires_at <= clock_timestamp()
               AND NOT ",
            /* guard:readd.pause */ paused!(key = "l.key", jobs = "l.job_name, $3")
        );
        let done = connection::run!(&self.conns, |conn| sqlx::query(READD)
            .bind(key)
            .bind(first)
            .bind(job)
            .bind(away)
            .execute(conn))?;
        Ok(done.rows_affected() > 0)
    }

    /// Claims, for new runs of `holder`, up to `limit` of `candidates`
    /// `(key, lease)` that are free and due, in **one** statement: each
    /// claimed key gets its own fresh fence. Rows another transaction has
    /// locked are skipped, not waited for. The candidates not claimed come
    /// back as the snapshot saw them; a candidate without a row is in
    /// neither list.
    pub(crate) async fn claim_due(&self, holder: &str, candidates: &[Candidate<'_>], limit: usize) -> Result<Claimed> {
        validate::holder(holder)?;
        let mut keys = Vec::with_capacity(candidates.len());
        let mut jobs = Vec::with_capacity(candidates.len());
        let mut ttls = Vec::with_capacity(candidates.len());
        for candidate in candidates {
            validate::key(candidate.key)?;
            validate::job_name(candidate.job_name)?;
            keys.push(candidate.key);
            jobs.push(candidate.job_name);
            ttls.push(validate::lease_secs("lease duration", candidate.lease)?);
        }
        if keys.is_empty() || limit == 0 {
            return Ok(Claimed::default());
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        // $1 holder, $2 keys, $3 lease seconds, $4 how many to claim at most,
        // $5 job names.
        // `pick` decides, with the guards of `claim_run` (invariant 3, no
        // re-entrance), evaluated on the latest row version once locked:
        // - expires_at <= now: the lease is free by the server clock —
        //   whoever held it, this holder id included (two processes may
        //   share one id);
        // - next_due_at <= now: the key is due by the server clock, so
        //   replicas whose timers fire at different moments still start one
        //   run per slot;
        // - FOR UPDATE SKIP LOCKED: a row another claimer (or any other
        //   transaction) has locked is left to it, never waited for;
        // - not paused (invariant 8): neither the key, nor its job — by the
        //   row's job_name or the one this runtime registers it under.
        // `claimed` writes: a fresh fence per row (invariants 4 and 5),
        // times from clock_timestamp() after the locks were taken, so
        // acquired_at is never before the due time it consumed; the run's
        // number (its history slot), the job's name, and the slot it owes.
        // The UNION half reports the unclaimed candidates, paused or not, so
        // the caller learns when to look again in the same round trip.
        // A claimed stored key comes back with its kind, arguments and
        // version as this statement's snapshot has them: the run starts
        // with the version its claim saw (an update committed before the
        // claim reaches this run, a later one the next run), with no
        // statement of its own; a key removed meanwhile has none and is
        // not run.
        const CLAIM_DUE: &str = concat!(
            "
            WITH t AS (
                SELECT * FROM unnest($2::text[], $3::float8[], $5::text[]) AS t(key, ttl, job)
            ), pick AS (
                SELECT l.key FROM leasehold_lease AS l JOIN t ON t.key = l.key
                 WHERE /* guard:claim_due.expiry */ l.expires_at <= clock_timestamp()
                   AND /* guard:claim_due.due */ (l.next_due_at IS NULL OR l.next_due_at <= clock_timestamp())
                   AND NOT ",
            /* guard:claim_due.pause */ paused!(key = "l.key", jobs = "l.job_name, t.job"),
            "
                 ORDER BY l.next_due_at NULLS FIRST, l.key
                 LIMIT /* guard:claim_due.limit */ $4
                   FOR UPDATE OF l /* guard:claim_due.skip_locked */ SKIP LOCKED
            ), claimed AS (
                UPDATE leasehold_lease AS l
                   SET holder      = $1,
                       fence       = /* guard:claim_due.fresh_fence */ leasehold_next_fence(),
                       acquired_at = clock_timestamp(),
                       expires_at  = clock_timestamp() + make_interval(secs => t.ttl),
                       job_name    = t.job,
                       runs        = l.runs + 1,
                       slot_at     = COALESCE(l.slot_at, l.next_due_at)
                  FROM pick, t
                 WHERE l.key = pick.key AND t.key = pick.key
                RETURNING l.*
            )
            SELECT true AS acquired, false AS paused, c.*, clock_timestamp() AS server_now,
                   k.kind AS args_kind, k.args::text AS args, k.version AS args_version
              FROM claimed AS c LEFT JOIN leasehold_key AS k ON k.key = c.key
            UNION ALL
            SELECT false,
                   ",
            paused!(key = "l.key", jobs = "l.job_name, t.job"),
            ",
                   l.*, clock_timestamp(), NULL, NULL, NULL
              FROM leasehold_lease AS l JOIN t ON t.key = l.key
             WHERE l.key NOT IN (SELECT key FROM claimed)"
        );
        let rows: Vec<DueRow> = connection::run!(&self.conns, |conn| sqlx::query_as(CLAIM_DUE)
            .bind(holder)
            .bind(&keys)
            .bind(&ttls)
            .bind(limit)
            .bind(&jobs)
            .fetch_all(conn))?;
        let mut claimed = Claimed::default();
        for DueRow {
            claim: ClaimRow { acquired, paused, row },
            args_kind,
            args,
            args_version,
        } in rows
        {
            if acquired {
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
                });
            } else {
                claimed.seen.push(Sighting {
                    key: row.key,
                    expires_at: row.expires_at,
                    next_due_at: row.next_due_at,
                    server_now: row.server_now,
                    paused,
                });
            }
        }
        Ok(claimed)
    }

    /// Releases many runs' tenures and records when each key is next due,
    /// in **one** statement. Says, per item, whether that tenure was
    /// released (and whether its key is due now), was not the current one
    /// any more (a late release of an older tenure changes nothing), or is
    /// busy: its row is locked by
    /// another transaction, which a release does not wait for — retry it.
    /// A key left due by its release wakes the listeners.
    pub(crate) async fn finish_many(&self, items: &[Finish]) -> Result<Vec<Released>> {
        let mut keys = Vec::with_capacity(items.len());
        let mut holders = Vec::with_capacity(items.len());
        let mut fences = Vec::with_capacity(items.len());
        let mut ats: Vec<Option<DateTime<Utc>>> = Vec::with_capacity(items.len());
        let mut afters: Vec<Option<f64>> = Vec::with_capacity(items.len());
        let mut h = HistoryColumns::with_capacity(items.len());
        for item in items {
            h.push(item.report.as_ref());
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
        // (seconds from now), $6 the wake-up channel; the runs' history:
        // $7 job names, $8 run numbers, $9 slots run for, $10 start times,
        // $11 outcomes (NULL: record nothing), $12 reasons, $13 errors,
        // $14 ring lengths.
        // - `mine` (invariant 7): holder and fence scope each release to the
        //   caller's own tenure, so a late release — after a takeover, or of
        //   the same holder's earlier run — never frees a newer one.
        // - FOR UPDATE SKIP LOCKED: a row locked elsewhere (a service's
        //   `SELECT … FOR UPDATE`, another claimer) is reported `busy`, not
        //   waited for, so one locked row never holds up the batch.
        // - Expiring at "now" rather than deleting keeps the schedule;
        //   GREATEST keeps the CHECK true even if the server clock stepped
        //   back. A new due time is also the slot the next run owes; a
        //   retry (`after`) or no change keeps the slot still owed.
        // - A release that records nothing about the schedule (`at` and
        //   `after` NULL: `LeaseStore::release`, a cancelled run) leaves the
        //   due time as it is, a trigger included. A tenure claimed without
        //   the due check (`claim`, `claim_run` with `Due::Now`) may hold a
        //   key not due yet: its release must not take that for a trigger.
        // - A trigger accepted after this run's claim is never overwritten:
        //   a scheduled claim consumes a due time no later than its
        //   `acquired_at`, so a due time *after* it was written by a
        //   trigger during the run (`LeaseStore::trigger`). The key is then
        //   due again at the release — one more run, however many triggers
        //   came — while `slot_at` still records the next slot, so the
        //   schedule goes on after that run. Due at the release's time,
        //   not the trigger's, so pollers' windows (`due_since`) see it.
        // - A released key that is still due (a cancelled run, a trigger
        //   during the run) is claimable at once: `woken` tells listeners,
        //   and `due` tells the releasing runtime.
        // - `recorded` (invariant 9) writes each run's history row, in this
        //   same statement: a run whose tenure was released, and one that
        //   had lost it already (its release changes nothing else), but not
        //   a busy one — it is recorded when its release goes through. The
        //   row goes to its key's ring at run_no mod ring, and replaces
        //   only an *older* run there, so a late release never erases a
        //   newer run.
        const FINISH_MANY: &str = "
            WITH t AS (
                SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::timestamptz[], $5::float8[],
                                     $7::text[], $8::int8[], $9::timestamptz[], $10::timestamptz[],
                                     $11::text[], $12::text[], $13::text[], $14::int4[])
                           AS t(key, holder, fence, at, after,
                                job, run_no, scheduled_for, started_at, outcome, reason, error, ring)
            ), mine AS (
                SELECT l.key FROM leasehold_lease AS l JOIN t ON t.key = l.key
                 WHERE /* guard:finish_many.holder */ l.holder = t.holder
                   AND /* guard:finish_many.fence */ l.fence = t.fence
                   FOR UPDATE OF l /* guard:finish_many.skip_locked */ SKIP LOCKED
            ), released AS (
                UPDATE leasehold_lease AS l
                   SET expires_at  = GREATEST(clock_timestamp(), l.acquired_at + interval '1 microsecond'),
                       next_due_at = CASE /* guard:finish_many.plain_release */ WHEN t.at IS NULL AND t.after IS NULL THEN l.next_due_at
                                          /* guard:finish_many.trigger_kept */ WHEN l.next_due_at > l.acquired_at THEN clock_timestamp()
                                          ELSE COALESCE(t.at, clock_timestamp() + make_interval(secs => t.after)) END,
                       slot_at     = /* guard:finish_many.slot_owed */ COALESCE(t.at, l.slot_at, l.next_due_at)
                  FROM t
                 WHERE l.key = t.key
                   AND l.key IN (SELECT key FROM mine)
                RETURNING l.key, l.fence, l.next_due_at
            ), woken AS (
                SELECT count(*) AS n FROM (
                    SELECT pg_notify($6, r.key) FROM released AS r
                     WHERE r.next_due_at IS NULL OR r.next_due_at <= clock_timestamp()) AS notified
            ), busy AS (
                SELECT l.key, l.fence FROM leasehold_lease AS l JOIN t ON t.key = l.key
                 WHERE l.holder = t.holder AND l.fence = t.fence
                   AND l.key NOT IN (SELECT key FROM mine)
            ), recorded AS (
                INSERT INTO leasehold_run AS r (key, slot, run_no, job_name, fence, holder, scheduled_for,
                                                started_at, ended_at, outcome, reason, error)
                SELECT DISTINCT ON (t.key, t.run_no % t.ring)
                       t.key, (t.run_no % t.ring)::int, t.run_no, t.job, t.fence, t.holder, t.scheduled_for,
                       t.started_at, clock_timestamp(), t.outcome, t.reason, t.error
                  FROM t
                 WHERE t.outcome IS NOT NULL AND t.ring > 0
                   AND (t.key, t.fence) NOT IN (SELECT key, fence FROM busy)
                 ORDER BY t.key, t.run_no % t.ring, t.run_no DESC
                ON CONFLICT (key, slot) DO UPDATE
                   SET run_no = EXCLUDED.run_no, job_name = EXCLUDED.job_name, fence = EXCLUDED.fence,
                       holder = EXCLUDED.holder, scheduled_for = EXCLUDED.scheduled_for,
                       started_at = EXCLUDED.started_at, ended_at = EXCLUDED.ended_at,
                       outcome = EXCLUDED.outcome, reason = EXCLUDED.reason, error = EXCLUDED.error
                 /* guard:finish_many.ring_order */ WHERE r.run_no < EXCLUDED.run_no
            )
            SELECT r.key, r.fence, false AS busy, COALESCE(r.next_due_at <= clock_timestamp(), true) AS due
              FROM released AS r, woken
            UNION ALL
            SELECT b.key, b.fence, true, false FROM busy AS b";
        let done: Vec<(String, i64, bool, bool)> = connection::run!(&self.conns, |conn| sqlx::query_as(FINISH_MANY)
            .bind(&keys)
            .bind(&holders)
            .bind(&fences)
            .bind(&ats)
            .bind(&afters)
            .bind(WAKE_CHANNEL)
            .bind(&h.jobs)
            .bind(&h.run_nos)
            .bind(&h.slots)
            .bind(&h.started)
            .bind(&h.outcomes)
            .bind(&h.reasons)
            .bind(&h.errors)
            .bind(&h.rings)
            .fetch_all(conn))?;
        // Looked up by (key, fence), not searched: a batch can hold a
        // thousand releases.
        let done: HashMap<(&str, i64), (bool, bool)> = done
            .iter()
            .map(|(key, fence, busy, due)| ((key.as_str(), *fence), (*busy, *due)))
            .collect();
        Ok(items
            .iter()
            .map(|item| match done.get(&(item.key.as_str(), item.fence)) {
                Some((false, false)) => Released::Yes,
                Some((false, true)) => Released::StillDue,
                Some((true, _)) => Released::Busy,
                None => Released::NotCurrent,
            })
            .collect())
    }

    /// Keys that became claimable (free, and due) since the server time
    /// `since` because their due time passed or a trigger set it: the
    /// polling side of wake-ups, for when `LISTEN` cannot be used or a
    /// notification was lost. At most `limit` keys, oldest due first; the
    /// server's clock and the pauses in force come back even when no key
    /// did. In the same statement, vouches for `kinds` (this replica runs
    /// them) for `vouch`, and reads their generations and the number of
    /// stored keys of kinds no live replica vouches for: a poll is one
    /// statement, stored keys or not.
    pub(crate) async fn due_since(
        &self,
        since: DateTime<Utc>,
        limit: usize,
        kinds: &[&str],
        vouch: Duration,
    ) -> Result<Polled> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        // $1 since, $2 limit, $3 this replica's kinds, $4 seconds vouched.
        // Reads the next_due_at index, so its cost follows the keys that
        // became due, not the size of the table. A LEFT JOIN on one clock
        // row, so an empty answer still reads the server clock the next
        // window starts from. The pauses (a small table) and the server's
        // WAL timeline (a read of the WAL insert position) ride along for
        // the runtime's gauges.
        // - `vouched` writes this replica's vouch for its kinds (a
        //   data-modifying CTE runs whether or not it is read; with no
        //   kinds it inserts nothing and writes no WAL).
        // - The kinds' rows are read on the statement's snapshot, so a
        //   kind `vouched` inserts has no generation yet (the replica loads
        //   it anyway: it never loaded it).
        // - The kinds of $3 are live by this very statement: never counted
        //   unknown, although the snapshot may show their vouch lapsed (a
        //   replica's first poll, or one after a pause longer than it).
        const DUE_SINCE: &str = "
            WITH vouched AS (
                INSERT INTO leasehold_kind AS k (kind, seen_until)
                SELECT kind, clock_timestamp() + make_interval(secs => $4)
                  FROM unnest($3::text[]) AS kind ORDER BY kind
                ON CONFLICT (kind) DO UPDATE SET seen_until = excluded.seen_until
            )
            SELECT c.now AS server_now, c.scopes, c.names, c.timeline, c.kinds, c.generations, c.unknown_keys,
                   d.key, d.expires_at, d.next_due_at
              FROM (SELECT clock_timestamp() AS now, leasehold_timeline_id() AS timeline,
                           ARRAY(SELECT scope FROM leasehold_pause ORDER BY scope, name) AS scopes,
                           ARRAY(SELECT name FROM leasehold_pause ORDER BY scope, name) AS names,
                           ARRAY(SELECT k.kind FROM leasehold_kind AS k
                                  WHERE k.kind = ANY($3) ORDER BY k.kind) AS kinds,
                           ARRAY(SELECT k.generation FROM leasehold_kind AS k
                                  WHERE k.kind = ANY($3) ORDER BY k.kind) AS generations,
                           (SELECT coalesce(sum(k.keys), 0)::bigint FROM leasehold_kind AS k
                             WHERE /* guard:due_since.own_kinds */ k.kind <> ALL($3)
                               AND (k.seen_until IS NULL OR k.seen_until <= clock_timestamp())) AS unknown_keys
                   ) AS c
              LEFT JOIN LATERAL (
                  SELECT l.key, l.expires_at, l.next_due_at FROM leasehold_lease AS l
                   WHERE l.next_due_at > $1
                     AND l.next_due_at <= c.now
                     AND l.expires_at <= c.now
                   ORDER BY l.next_due_at
                   LIMIT $2) AS d ON true";
        #[derive(sqlx::FromRow)]
        struct Row {
            server_now: DateTime<Utc>,
            scopes: Vec<String>,
            names: Vec<String>,
            timeline: i64,
            kinds: Vec<String>,
            generations: Vec<i64>,
            unknown_keys: i64,
            key: Option<String>,
            expires_at: Option<DateTime<Utc>>,
            next_due_at: Option<DateTime<Utc>>,
        }
        let mut rows: Vec<Row> = connection::run!(&self.conns, |conn| sqlx::query_as(DUE_SINCE)
            .bind(since)
            .bind(limit)
            .bind(kinds)
            .bind(vouch.as_secs_f64())
            .fetch_all(conn))?;
        let server_now = rows.first().map(|r| r.server_now).unwrap_or(since);
        let timeline = rows.first().map(|r| r.timeline);
        let (paused, kinds) = match rows.first_mut() {
            Some(first) => (
                std::mem::take(&mut first.scopes)
                    .into_iter()
                    .zip(std::mem::take(&mut first.names))
                    .map(|(scope, name)| match scope.as_str() {
                        "job" => PauseTarget::Job(name),
                        _ => PauseTarget::Key(name),
                    })
                    .collect(),
                KindGenerations {
                    generations: std::mem::take(&mut first.kinds)
                        .into_iter()
                        .zip(std::mem::take(&mut first.generations))
                        .collect(),
                    unknown_keys: first.unknown_keys,
                },
            ),
            None => (Vec::new(), KindGenerations::default()),
        };
        let seen = rows
            .into_iter()
            .filter_map(|row| {
                Some(Sighting {
                    key: row.key?,
                    expires_at: row.expires_at?,
                    next_due_at: row.next_due_at,
                    server_now: row.server_now,
                    paused: false,
                })
            })
            .collect();
        Ok(Polled {
            server_now,
            seen,
            paused,
            timeline,
            kinds,
        })
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
            let mut tx = connection::begin(&self.conns).await?;
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
        connection::run!(&self.conns, |conn| sqlx::query("SELECT pg_notify($1, $2)")
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
        // run goes on. The key's history goes with it: its run numbers
        // start again from 1 if it is registered again, and the ring never
        // lets a lower run number overwrite a higher one. The UNION half
        // reports the row that was kept.
        const FORGET: &str = "
            WITH gone AS (
                DELETE FROM leasehold_lease WHERE key = $1 AND /* guard:forget.expiry */ expires_at <= clock_timestamp() RETURNING key
            ), history AS (
                /* guard:forget.history */ DELETE FROM leasehold_run WHERE key IN (SELECT key FROM gone)
            )
            SELECT true AS deleted, l.*, clock_timestamp() AS server_now
              FROM leasehold_lease AS l WHERE l.key IN (SELECT key FROM gone)
            UNION ALL
            SELECT false, l.*, clock_timestamp() FROM leasehold_lease AS l
             WHERE l.key = $1 AND NOT EXISTS (SELECT 1 FROM gone)";
        let row: Option<ForgetRow> = connection::run!(&self.conns, |conn| sqlx::query_as(FORGET)
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

/// The history columns of a [`LeaseStore::finish_many`] batch, one array
/// per column (NULLs where a release records nothing).
struct HistoryColumns<'a> {
    jobs: Vec<Option<&'a str>>,
    run_nos: Vec<Option<i64>>,
    slots: Vec<Option<DateTime<Utc>>>,
    started: Vec<Option<DateTime<Utc>>>,
    outcomes: Vec<Option<&'static str>>,
    reasons: Vec<Option<&'static str>>,
    errors: Vec<Option<&'a str>>,
    rings: Vec<i32>,
}

impl<'a> HistoryColumns<'a> {
    fn with_capacity(n: usize) -> Self {
        HistoryColumns {
            jobs: Vec::with_capacity(n),
            run_nos: Vec::with_capacity(n),
            slots: Vec::with_capacity(n),
            started: Vec::with_capacity(n),
            outcomes: Vec::with_capacity(n),
            reasons: Vec::with_capacity(n),
            errors: Vec::with_capacity(n),
            rings: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, report: Option<&'a RunReport>) {
        self.jobs.push(report.map(|r| r.job_name.as_str()));
        self.run_nos.push(report.map(|r| r.run_no));
        self.slots.push(report.and_then(|r| r.scheduled_for));
        self.started.push(report.map(|r| r.started_at));
        self.outcomes.push(report.map(|r| r.outcome.as_str()));
        self.reasons.push(report.and_then(|r| r.reason).map(|r| r.as_str()));
        self.errors.push(report.and_then(|r| r.error.as_deref()));
        self.rings
            .push(report.map_or(0, |r| i32::try_from(r.ring).unwrap_or(i32::MAX)));
    }
}
