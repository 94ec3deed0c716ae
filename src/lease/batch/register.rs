//! Registration: the lease rows of many keys in one statement, and a
//! removed key's return.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::Sighting;
use crate::connection;
use crate::error::Result;
use crate::lease::{LeaseStore, WAKE_CHANNEL};
use crate::validate;

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
}
