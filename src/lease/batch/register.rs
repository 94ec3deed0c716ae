//! Registration: the lease rows of many keys in one statement, and a
//! removed key's return.

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt, stream};

use super::Sighting;
use crate::connection;
use crate::error::{Error, Result};
use crate::lease::{LeaseStore, WAKE_CHANNEL};
use crate::validate;

/// One row of [`LeaseStore::register_many`]'s answer: either the summary
/// (`ord` NULL: how many rows the statement inserted, how many were there
/// already, and the server's clock), or a row that was there already, due
/// at another time than the key's first due time (`ord`: its key's 1-based
/// place in the keys sent).
type RegisterRow = (
    Option<i64>,
    Option<DateTime<Utc>>,
    Option<DateTime<Utc>>,
    Option<i64>,
    Option<i64>,
    Option<DateTime<Utc>>,
);

/// Fewer keys than this register in one statement; more are split into
/// [`REGISTER_PARALLEL`] chunks of consecutive keys, one statement each,
/// sent at once: the server inserts on as many backends (cores) at once,
/// and the client encodes a chunk while the server inserts the other. Not
/// more chunks: each statement's anti-join and join read the whole table
/// (a hash of every row, the cheapest plan at this size), so with the rows
/// there ten chunks would cost ten times that.
pub(crate) const REGISTER_SPLIT_FROM: usize = 50_000;

/// Registration statements in flight at once (at most the pool's size).
pub(crate) const REGISTER_PARALLEL: usize = 2;

/// Whether a registration statement checks for rows another replica
/// inserted after its snapshot.
#[derive(Clone, Copy)]
enum Check {
    /// No: a conflict fails the statement (SQLSTATE 23505), with no effect.
    None,
    /// `ON CONFLICT DO NOTHING`: such a row is kept and left out of the
    /// answer.
    Conflicts,
}

/// Whether `error` is a unique violation (SQLSTATE 23505).
fn unique_violation(error: &Error) -> bool {
    match error {
        Error::Database(error) => error.as_database_error().is_some_and(|e| e.is_unique_violation()),
        _ => false,
    }
}

/// A lease row's `expires_at` and `next_due_at`: what the scheduler files a
/// key by.
type RowTimes = (DateTime<Utc>, Option<DateTime<Utc>>);

/// What one registration statement answered, in the order the keys were
/// sent to it.
struct Answer {
    server_now: DateTime<Utc>,
    inserted: usize,
    /// How many of the keys sent had their row there already.
    there: usize,
    /// Those of them whose row is due at another time than the first due
    /// time sent: (place in the keys sent, expires_at, next_due_at).
    existing: Vec<(usize, DateTime<Utc>, Option<DateTime<Utc>>)>,
}

/// What [`LeaseStore::register_all`] learned about each key, in the order
/// the caller gave them.
pub(crate) struct Registered {
    /// `None` when no key was sent (no statement either).
    server_now: Option<DateTime<Utc>>,
    /// Per key: its row's `expires_at` and `next_due_at`; `None` when not
    /// known (another replica inserted it meanwhile: look at it at once).
    rows: Vec<Option<RowTimes>>,
}

impl Registered {
    /// What the server says about the `i`-th key, its `key` left empty (the
    /// caller has it); `None` when not known.
    pub(crate) fn sighting(&self, i: usize) -> Option<Sighting> {
        let (expires_at, next_due_at) = (*self.rows.get(i)?)?;
        Some(Sighting {
            key: String::new(),
            expires_at,
            next_due_at,
            server_now: self.server_now?,
            paused: false,
            held_back: false,
            limited: false,
        })
    }

    /// The server's clock when it answered (`None` if no key was sent).
    pub(crate) fn server_now(&self) -> Option<DateTime<Utc>> {
        self.server_now
    }
}

impl LeaseStore {
    /// [`LeaseStore::register_all`], answered as the sightings of the keys
    /// whose row is known, each with its key.
    pub(crate) async fn register_many(
        &self,
        holder: &str,
        keys: &[(&str, &str, DateTime<Utc>)],
    ) -> Result<Vec<Sighting>> {
        let registered = self.register_all(holder, keys).await?;
        Ok(keys
            .iter()
            .enumerate()
            .filter_map(|(i, (key, ..))| {
                registered.sighting(i).map(|seen| Sighting {
                    key: (*key).to_owned(),
                    ..seen
                })
            })
            .collect())
    }

    /// Creates the rows of `keys` that do not exist yet — a free lease due at
    /// the paired time — and returns every key's row. Existing rows keep
    /// their schedule: a restart never resets it. One statement, or one per
    /// chunk sent at once from [`REGISTER_SPLIT_FROM`] keys on; a chunk
    /// takes more statements only when another replica inserts some of its
    /// keys at the same moment, and a key whose row another replica
    /// inserted during the last of them too is not known (look at it at
    /// once). Keys sorted by name are sent as they are; others are sorted
    /// first.
    ///
    /// Cancel-safe: a chunk whose statement committed keeps its rows, the
    /// others insert nothing; either way a later registration of the same
    /// keys finds what it would have inserted.
    pub(crate) async fn register_all(&self, holder: &str, keys: &[(&str, &str, DateTime<Utc>)]) -> Result<Registered> {
        // The holder, keys and job names are the registry's, checked where
        // they entered it (at `start` or `add`, or a stored key at its
        // kind's sync): not again, key by key, for a million keys.
        if keys.is_empty() {
            return Ok(Registered {
                server_now: None,
                rows: Vec::new(),
            });
        }
        // One order for every replica and every chunk: concurrent inserts of
        // overlapping key sets then wait for each other instead of
        // deadlocking (each statement inserts in this order, so a chain of
        // waits only ever goes to greater keys), and the chunks of one
        // replica are disjoint.
        let order: Option<Vec<usize>> = (!keys.is_sorted_by(|a, b| a.0 <= b.0)).then(|| {
            let mut order: Vec<usize> = (0..keys.len()).collect();
            order.sort_unstable_by(|&a, &b| keys[a].0.cmp(keys[b].0));
            order
        });
        let sent = |place: usize| order.as_ref().map_or(place, |order| order[place]);
        let names: Vec<&str> = (0..keys.len()).map(|p| keys[sent(p)].0).collect();
        let jobs: Vec<&str> = (0..keys.len()).map(|p| keys[sent(p)].1).collect();
        let dues: Vec<DateTime<Utc>> = (0..keys.len()).map(|p| keys[sent(p)].2).collect();
        let parallel = REGISTER_PARALLEL.min(self.conns.pool().options().get_max_connections().max(1) as usize);
        let chunk = if keys.len() < REGISTER_SPLIT_FROM {
            keys.len()
        } else {
            keys.len().div_ceil(parallel)
        };
        let mut chunks = stream::iter((0..keys.len()).step_by(chunk).map(|first| {
            let sent = first..keys.len().min(first + chunk);
            let (names, dues, jobs) = (&names[sent.clone()], &dues[sent.clone()], &jobs[sent]);
            async move { Ok::<_, Error>((first, self.register_chunk(holder, names, dues, jobs).await?)) }
        }))
        .buffer_unordered(parallel);
        let mut rows: Vec<Option<RowTimes>> = vec![None; keys.len()];
        let mut server_now = None;
        while let Some((first, answer)) = chunks.try_next().await? {
            // The latest clock reading for every key: a sighting read
            // earlier is then taken for a little older than it is, so the
            // key is looked at again early, never late.
            server_now = server_now.max(Some(answer.server_now));
            // Every key not in `existing` is one this answer inserted — free
            // (it expired 1 µs after it was "acquired", before server_now)
            // and due at the time sent — or one whose row was there, due at
            // that same time (whether it is still held then, its claim
            // learns): if the counts add up.
            let sent_here = chunk.min(keys.len() - first);
            if answer.inserted + answer.there == sent_here {
                for place in first..first + sent_here {
                    rows[sent(place)] = Some((answer.server_now, Some(dues[place])));
                }
            }
            for (place, expires_at, next_due_at) in answer.existing {
                if place < sent_here {
                    rows[sent(first + place)] = Some((expires_at, next_due_at));
                }
            }
        }
        Ok(Registered { server_now, rows })
    }

    /// Registers one chunk of keys sorted by name: first without the
    /// conflict check, which only a key another replica inserts meanwhile
    /// needs; if one did, that statement had no effect and the chunk goes
    /// again with the check (then twice if the counts do not add up).
    async fn register_chunk(
        &self,
        holder: &str,
        names: &[&str],
        dues: &[DateTime<Utc>],
        jobs: &[&str],
    ) -> Result<Answer> {
        match self.register_sorted(Check::None, holder, names, dues, jobs).await {
            Err(error) if unique_violation(&error) => {}
            optimistic => return optimistic,
        }
        let answer = self
            .register_sorted(Check::Conflicts, holder, names, dues, jobs)
            .await?;
        if answer.inserted + answer.there == names.len() {
            return Ok(answer);
        }
        // Another replica inserted some of these keys after this
        // statement's snapshot: they are in neither half of the answer, and
        // which ones is not known. Once more: they are there now.
        self.register_sorted(Check::Conflicts, holder, names, dues, jobs).await
    }

    /// One registration statement for keys sorted by name. Without the
    /// conflict check (`Check::None`) it fails with SQLSTATE 23505, having
    /// done nothing, when another replica inserted one of the keys after
    /// its snapshot.
    async fn register_sorted(
        &self,
        check: Check,
        holder: &str,
        names: &[&str],
        dues: &[DateTime<Utc>],
        jobs: &[&str],
    ) -> Result<Answer> {
        // $1 holder, $2 keys (sorted), $3 first due times, $4 the wake-up
        // channel, $5 job names, $6 and $7 the least and the greatest key
        // sent (byte order).
        // - `seen` looks every key up once (a hash join: the same cost per
        //   key at a million keys as at ten): the rows there in the
        //   statement's snapshot, which the insert skips and the answer
        //   returns. The range, compared byte-wise (`COLLATE "C"`, Rust's
        //   order, whatever the database's collation), only narrows which
        //   rows are hashed: a chunk hashes its own share of the table, not
        //   all of it. Every key sent is in it, and so is its row.
        // - The new row expires 1 µs after it was "acquired", from one clock
        //   reading: free, valid for the CHECK, and marked never run
        //   (`never_claimed`). Its fence still comes from the sequence.
        // - A key whose row is there is not inserted, so a restart never
        //   resets a schedule and only new keys are inserted.
        // - A row another replica inserted after the snapshot: the unique
        //   index makes `REGISTER_NEW` fail (23505) and undo everything, so
        //   it never overwrites; `REGISTER_MANY`'s `ON CONFLICT DO NOTHING`
        //   skips it. The check costs a speculative insertion per new row
        //   (about a third of the statement at a million new keys), so it
        //   is paid only after a conflict.
        // - A new row due already wakes the listeners (`woken`).
        // - The answer is one summary row (how many rows were inserted and
        //   how many were there, the server's clock) and, by their key's
        //   place in $2, the rows that were there due at another time than
        //   the one sent: the caller knows the keys and the rows it inserted,
        //   so neither a key's text nor a new row travels back. Nor does a
        //   row that was there and is due at the first due time sent — a
        //   restart's usual row, since every replica computes the same next
        //   slot: the caller files it at that time, as it files an inserted
        //   one. Its row's due time is then known exactly, and nothing is
        //   worth a claim before it, held or not; whether it is still held
        //   then, that claim learns (a lease still held is filed at its
        //   expiry: one claim more at most). A row due at another time (a
        //   slot owed, a trigger) comes back as the snapshot has it.
        macro_rules! register {
            ($on_conflict:literal) => {
                concat!(
                    "
            WITH seen AS MATERIALIZED (
                SELECT t.key, t.first_due, t.job, t.ord, l.key IS NOT NULL AS there, l.expires_at, l.next_due_at
                  FROM unnest($2::text[], $3::timestamptz[], $5::text[]) WITH ORDINALITY AS t(key, first_due, job, ord)
                  LEFT JOIN leasehold_lease AS l
                    ON l.key = t.key AND l.key COLLATE \"C\" BETWEEN $6 AND $7
            ), inserted AS (
                INSERT INTO leasehold_lease (key, holder, fence, acquired_at, expires_at, next_due_at, slot_at, job_name)
                SELECT s.key, $1, leasehold_next_fence(), c.now, c.now + interval '1 microsecond',
                       s.first_due, s.first_due, s.job
                  FROM seen AS s, (SELECT clock_timestamp() AS now) AS c
                 /* guard:register.existing_kept */ WHERE NOT s.there
                ",
                    $on_conflict,
                    "
                RETURNING key, next_due_at
            ), woken AS (
                SELECT count(*) AS n FROM (
                    SELECT pg_notify($4, i.key) FROM inserted AS i
                     WHERE i.next_due_at <= clock_timestamp()) AS notified
            )
            SELECT NULL::bigint, NULL::timestamptz, NULL::timestamptz,
                   (SELECT count(*) FROM inserted), (SELECT count(*) FROM seen WHERE there), clock_timestamp()
              FROM woken
            UNION ALL
            SELECT s.ord, s.expires_at, s.next_due_at, NULL, NULL, NULL
              FROM seen AS s
             WHERE s.there AND s.next_due_at IS DISTINCT FROM s.first_due"
                )
            };
        }
        const REGISTER_NEW: &str = register!("");
        const REGISTER_MANY: &str = register!(/* guard:register.conflict_kept */ "ON CONFLICT (key) DO NOTHING");
        // The bounds of `seen`'s range, from the keys themselves: right
        // even if a caller's keys were not sorted.
        let least = names.iter().min().copied().unwrap_or_default();
        let greatest = names.iter().max().copied().unwrap_or_default();
        let statement = match check {
            Check::None => REGISTER_NEW,
            Check::Conflicts => REGISTER_MANY,
        };
        let rows: Vec<RegisterRow> = connection::run!(&self.conns, |conn| sqlx::query_as(statement)
            .bind(holder)
            .bind(names)
            .bind(dues)
            .bind(WAKE_CHANNEL)
            .bind(jobs)
            .bind(least)
            .bind(greatest)
            .fetch_all(conn))?;
        let mut summary = None;
        let mut existing = Vec::with_capacity(rows.len().saturating_sub(1));
        for (ord, expires_at, next_due_at, inserted, there, server_now) in rows {
            match (ord, expires_at) {
                (Some(ord), Some(expires_at)) => {
                    let place = usize::try_from(ord.saturating_sub(1)).unwrap_or(usize::MAX);
                    existing.push((place, expires_at, next_due_at));
                }
                _ => summary = server_now.map(|now| (now, inserted.unwrap_or(0), there.unwrap_or(0))),
            }
        }
        // The summary row always comes (`woken` is one aggregate row).
        let (server_now, inserted, there) = summary.ok_or(Error::Database(sqlx::Error::RowNotFound))?;
        Ok(Answer {
            server_now,
            inserted: usize::try_from(inserted).unwrap_or(0),
            there: usize::try_from(there).unwrap_or(0),
            existing,
        })
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
