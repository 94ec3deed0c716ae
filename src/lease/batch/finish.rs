//! The runtime's release: many runs' tenures released, their next due
//! times and history rows written, in one statement (invariants 7 and 9).

use std::borrow::Borrow;

use chrono::{DateTime, Utc};

use crate::connection;
use crate::error::Result;
use crate::fast_hash::FastMap;
use crate::lease::{LeaseStore, NextDue, RunReport, WAKE_CHANNEL};
use crate::validate;

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

impl LeaseStore {
    /// The batch release's statement, public and hidden behind the
    /// `test-util` feature only so a scenario test can plan it on a
    /// connection of its own.
    #[cfg(feature = "test-util")]
    #[doc(hidden)]
    pub const FINISH_MANY_SQL: &str = Self::FINISH_MANY;

    /// The statement of [`LeaseStore::finish_many`], prepared on each connection
    /// of leasehold's own as it opens (`session::prepare`).
    // $1 keys, $2 holders, $3 fences, $4 next due (absolute), $5 next due
    // (seconds from now), $6 the wake-up channel; the runs' history:
    // $7 job names, $8 run numbers, $9 slots run for, $10 start times,
    // $11 outcomes (NULL: record nothing), $12 reasons, $13 errors,
    // $14 ring lengths.
    // - `mine` (invariant 7): holder and fence scope each release to the
    //   caller's own tenure, so a late release — after a takeover, or of
    //   the same holder's earlier run — never frees a newer one. It
    //   carries the item's next due time (`at`, `after`) from `t`, so
    //   `released` joins the batch once, by key (a primary-key lookup per
    //   row), and not the batch array again (a nested loop over `t` per
    //   row: quadratic in the batch); the values are those of the item
    //   whose holder and fence matched.
    // - FOR UPDATE SKIP LOCKED: a row locked elsewhere (a service's
    //   `SELECT … FOR UPDATE`, another claimer) is reported `busy`, not
    //   waited for, so one locked row never holds up the batch. `busy`
    //   filters on the item's key (`t.key`) before it looks the row up:
    //   most items are `mine`, and need no second lookup.
    // - `earlier_life`: a run of a key's earlier life (its key was
    //   removed and added again after the run's claim: the stored key's
    //   `created_at` is after the tenure's `acquired_at`) leaves the due
    //   time and the slot owed as they are — the add moved them to the new
    //   life's first slot (`add_keys`), and the old schedule's next slot,
    //   its retry or a "trigger" (the add's due time is after the claim)
    //   must not replace it.
    // - `run_open = false`: the run's release is written, so the claim
    //   that takes the key next records no lost run (`claim_due`).
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
    //   trigger during the run (`Controls::trigger`). The key is then
    //   due again at the release — one more run, however many triggers
    //   came — while `slot_at` still records the next slot, so the
    //   schedule goes on after that run. Due at the release's time,
    //   not the trigger's, so pollers' windows (`due_since`) see it.
    // - A released key that is still due (a cancelled run, a trigger
    //   during the run) is claimable at once: `woken` tells listeners,
    //   and `due` tells the releasing runtime.
    // - `places` (invariant 11): a released tenure's place under its
    //   job's fleet-wide limit, if it holds one, is free when its lease
    //   is (`slots_follow!`), and `woken` sends the job's name on the
    //   places channel, so replicas holding that job's keys back claim
    //   one at once rather than at their next poll.
    // - `history` (invariant 9) is each run's history row, written in
    //   this same statement: a run whose tenure was released, and one
    //   that had lost it already (its release changes nothing else),
    //   but not a busy one — it is recorded when its release goes
    //   through. The row goes to its key's ring at run_no mod ring (the
    //   newest run of the batch for each place), and replaces only an
    //   *older* run there, so a late release never erases a newer run.
    // - `overwritten` writes the places that exist: once a key's ring is
    //   full, every place does. A plain UPDATE of columns no index
    //   covers, so a HOT update in the page's free space (fillfactor
    //   50 since schema v8), with no arbiter lookup and no separate row lock as
    //   `INSERT … ON CONFLICT DO UPDATE` takes. The run-number check is
    //   evaluated on the row's latest version, so a newer run recorded
    //   concurrently is kept. Each place is found through the primary key,
    //   whatever the history table's size was when the statement was
    //   planned: the place is matched with `= ANY (ARRAY[…])`, which an
    //   index scan can use but a hash or merge join cannot. (With `=`, a
    //   connection that planned the statement while the table was a few
    //   pages long — a new schema's first runs — could keep a hash join
    //   over a scan of the whole table until the table's next ANALYZE:
    //   measured, 40 buffers per run against 25.)
    // - `recorded` inserts the places `overwritten` did not write: a
    //   key's first `ring` runs, whose places do not exist yet. A place
    //   that exists — holding a newer run (a late release), or inserted
    //   by another transaction after this statement's snapshot — is a
    //   conflict, resolved by the same rule: replaced only by a newer
    //   run. (Filtering on `overwritten`'s answer, not on a lookup of
    //   the place, costs no second index probe per run.)
    pub(crate) const FINISH_MANY: &str = concat!(
        "
            WITH t AS (
                SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::timestamptz[], $5::float8[],
                                     $7::text[], $8::int8[], $9::timestamptz[], $10::timestamptz[],
                                     $11::text[], $12::text[], $13::text[], $14::int4[])
                           AS t(key, holder, fence, at, after,
                                job, run_no, scheduled_for, started_at, outcome, reason, error, ring)
            ), mine AS (
                SELECT l.key, t.at, t.after,
                       EXISTS (SELECT 1 FROM leasehold_key AS k
                                WHERE k.key = l.key AND k.created_at > l.acquired_at) AS earlier_life
                  FROM leasehold_lease AS l JOIN t ON t.key = l.key
                 WHERE /* guard:finish_many.holder */ l.holder = t.holder
                   AND /* guard:finish_many.fence */ l.fence = t.fence
                   FOR UPDATE OF l /* guard:finish_many.skip_locked */ SKIP LOCKED
            ), released AS (
                UPDATE leasehold_lease AS l
                   SET expires_at  = GREATEST(clock_timestamp(), l.acquired_at + interval '1 microsecond'),
                       next_due_at = CASE /* guard:finish_many.plain_release */ WHEN m.at IS NULL AND m.after IS NULL THEN l.next_due_at
                                          /* guard:finish_many.earlier_life */ WHEN m.earlier_life THEN l.next_due_at
                                          /* guard:finish_many.trigger_kept */ WHEN l.next_due_at > l.acquired_at THEN clock_timestamp()
                                          ELSE COALESCE(m.at, clock_timestamp() + make_interval(secs => m.after)) END,
                       slot_at     = CASE WHEN m.earlier_life THEN l.slot_at
                                          ELSE /* guard:finish_many.slot_owed */ COALESCE(m.at, l.slot_at, l.next_due_at) END,
                       run_open    = false
                  FROM mine AS m
                 WHERE l.key = m.key
                RETURNING l.key, l.fence, l.next_due_at, l.expires_at
            ), places AS (
                ",
            slots_follow!(rows = "released"),
            "
            ), woken AS (
                SELECT count(*) AS n FROM (
                    SELECT pg_notify($6, r.key) FROM released AS r
                     WHERE r.next_due_at IS NULL OR r.next_due_at <= clock_timestamp()
                    UNION ALL
                    SELECT pg_notify('",
            slot_channel!(),
            "', f.job_name) FROM (SELECT DISTINCT job_name FROM places) AS f) AS notified
            ), busy AS (
                SELECT l.key, l.fence FROM leasehold_lease AS l JOIN t ON t.key = l.key
                 WHERE t.key NOT IN (SELECT key FROM mine)
                   AND l.holder = t.holder AND l.fence = t.fence
            ), history AS (
                SELECT DISTINCT ON (t.key, t.run_no % t.ring)
                       t.key, (t.run_no % t.ring)::int AS slot, t.run_no, t.job, t.fence, t.holder,
                       t.scheduled_for, t.started_at, t.outcome, t.reason, t.error
                  FROM t
                 WHERE t.outcome IS NOT NULL AND t.ring > 0
                   AND (t.key, t.fence) NOT IN (SELECT key, fence FROM busy)
                 ORDER BY t.key, t.run_no % t.ring, t.run_no DESC
            ), overwritten AS (
                UPDATE leasehold_run AS r
                   SET run_no = h.run_no, job_name = h.job, fence = h.fence, holder = h.holder,
                       scheduled_for = h.scheduled_for, started_at = h.started_at, ended_at = clock_timestamp(),
                       outcome = h.outcome, reason = h.reason, error = h.error
                  FROM history AS h
                 WHERE r.key = ANY (ARRAY[h.key]) AND r.slot = ANY (ARRAY[h.slot])
                   AND /* guard:finish_many.ring_order */ r.run_no < h.run_no
                RETURNING r.key, r.slot
            ), recorded AS (
                INSERT INTO leasehold_run AS r (key, slot, run_no, job_name, fence, holder, scheduled_for,
                                                started_at, ended_at, outcome, reason, error)
                SELECT h.key, h.slot, h.run_no, h.job, h.fence, h.holder, h.scheduled_for,
                       h.started_at, clock_timestamp(), h.outcome, h.reason, h.error
                  FROM history AS h
                 WHERE (h.key, h.slot) NOT IN (SELECT key, slot FROM overwritten)
                ON CONFLICT (key, slot) DO UPDATE
                   SET run_no = EXCLUDED.run_no, job_name = EXCLUDED.job_name, fence = EXCLUDED.fence,
                       holder = EXCLUDED.holder, scheduled_for = EXCLUDED.scheduled_for,
                       started_at = EXCLUDED.started_at, ended_at = EXCLUDED.ended_at,
                       outcome = EXCLUDED.outcome, reason = EXCLUDED.reason, error = EXCLUDED.error
                 /* guard:finish_many.ring_first */ WHERE r.run_no < EXCLUDED.run_no
            )
            SELECT r.key, r.fence, false AS busy, COALESCE(r.next_due_at <= clock_timestamp(), true) AS due
              FROM released AS r, woken
            UNION ALL
            SELECT b.key, b.fence, true, false FROM busy AS b"
    );

    /// Releases many runs' tenures and records when each key is next due,
    /// in **one** statement. Says, per item, whether that tenure was
    /// released (and whether its key is due now), was not the current one
    /// any more (a late release of an older tenure changes nothing), or is
    /// busy: its row is locked by
    /// another transaction, which a release does not wait for — retry it.
    /// A key left due by its release wakes the listeners. The keys and
    /// holders are runs' (from the registry, checked where they entered
    /// it): not checked again.
    pub(crate) async fn finish_many<F: Borrow<Finish> + Sync>(&self, items: &[F]) -> Result<Vec<Released>> {
        let mut keys = Vec::with_capacity(items.len());
        let mut holders = Vec::with_capacity(items.len());
        let mut fences = Vec::with_capacity(items.len());
        let mut ats: Vec<Option<DateTime<Utc>>> = Vec::with_capacity(items.len());
        let mut afters: Vec<Option<f64>> = Vec::with_capacity(items.len());
        let mut h = HistoryColumns::with_capacity(items.len());
        for item in items {
            let item: &Finish = item.borrow();
            h.push(item.report.as_ref());
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
        let done: Vec<(String, i64, bool, bool)> = connection::run!(&self.conns, settling Some(Self::FINISH_MANY), |conn| sqlx::query_as(Self::FINISH_MANY)
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
        let done: FastMap<(&str, i64), (bool, bool)> = done
            .iter()
            .map(|(key, fence, busy, due)| ((key.as_str(), *fence), (*busy, *due)))
            .collect();
        Ok(items
            .iter()
            .map(|item| {
                let item: &Finish = item.borrow();
                match done.get(&(item.key.as_str(), item.fence)) {
                    Some((false, false)) => Released::Yes,
                    Some((false, true)) => Released::StillDue,
                    Some((true, _)) => Released::Busy,
                    None => Released::NotCurrent,
                }
            })
            .collect())
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
