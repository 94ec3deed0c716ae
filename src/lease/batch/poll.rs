//! The poll: keys that became claimable since the last one, the pauses,
//! the WAL timeline and the kinds' generations, in one statement.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::Sighting;
use crate::connection;
use crate::error::Result;
use crate::lease::{KindGenerations, LeaseStore, Target};

/// What a poll ([`LeaseStore::due_since`]) learned.
#[derive(Debug)]
pub(crate) struct Polled {
    pub(crate) server_now: DateTime<Utc>,
    /// Keys that became claimable since the window's start.
    pub(crate) seen: Vec<Sighting>,
    /// Every pause in force.
    pub(crate) paused: Vec<Target>,
    /// The server's WAL timeline (`leasehold_timeline_id()`): it rises on
    /// every promotion of a standby.
    pub(crate) timeline: Option<i64>,
    /// The generations of the kinds the poll vouched for, and the keys of
    /// kinds no live replica runs.
    pub(crate) kinds: KindGenerations,
    /// Every fleet-wide limit in force: (job, limit).
    pub(crate) limits: Vec<(String, u32)>,
}

impl LeaseStore {
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
        // the runtime's gauges, and so do the fleet-wide limits (a small
        // table), so a replica knows which of its jobs are limited.
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
                   c.limit_jobs, c.limit_values, d.key, d.expires_at, d.next_due_at
              FROM (SELECT clock_timestamp() AS now, leasehold_timeline_id() AS timeline,
                           ARRAY(SELECT scope FROM leasehold_pause ORDER BY scope, name) AS scopes,
                           ARRAY(SELECT name FROM leasehold_pause ORDER BY scope, name) AS names,
                           ARRAY(SELECT job_name FROM leasehold_limit ORDER BY job_name) AS limit_jobs,
                           ARRAY(SELECT fleet_limit FROM leasehold_limit ORDER BY job_name) AS limit_values,
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
            limit_jobs: Vec<String>,
            limit_values: Vec<i32>,
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
        let limits = match rows.first_mut() {
            Some(first) => std::mem::take(&mut first.limit_jobs)
                .into_iter()
                .zip(std::mem::take(&mut first.limit_values))
                .map(|(job, limit)| (job, u32::try_from(limit).unwrap_or(0)))
                .collect(),
            None => Vec::new(),
        };
        let (paused, kinds) = match rows.first_mut() {
            Some(first) => (
                std::mem::take(&mut first.scopes)
                    .into_iter()
                    .zip(std::mem::take(&mut first.names))
                    .map(|(scope, name)| Target::from_row(&scope, name))
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
                    held_back: false,
                    limited: false,
                })
            })
            .collect();
        Ok(Polled {
            server_now,
            seen,
            paused,
            timeline,
            kinds,
            limits,
        })
    }
}
