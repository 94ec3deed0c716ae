//! Forgetting a key: its row and history deleted, unless its lease is held.

use super::{Controls, LeaseInfo, LeaseRow, Record};
use crate::connection;
use crate::error::Result;
use crate::key::{IntoKey, Key};

/// What [`Controls::forget`](crate::store::Controls::forget) did.
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

impl Controls<'_> {
    /// Deletes the row of `key` — its schedule and last holder — unless
    /// its lease is held right now. For keys no replica registers any more
    /// (a removed tenant); a runtime that still registers the key creates
    /// the row again. Fences stay monotonic across forget and re-add: they
    /// come from the sequence, not from the row.
    ///
    /// Cancel-safe as described on [`LeaseStore`](super::LeaseStore).
    ///
    /// ```no_run
    /// # async fn demo(store: leasehold::store::LeaseStore) -> leasehold::Result<()> {
    /// use leasehold::operator::Forgotten;
    /// match store.controls().forget("reconcile:tenant-42").await? {
    ///     Forgotten::Deleted | Forgotten::NotFound => {}
    ///     Forgotten::Held(info) => eprintln!("held by {} for {:?}; stop it first", info.holder, info.remaining()),
    ///     _ => {}
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn forget(self, key: impl IntoKey) -> Result<Forgotten> {
        Ok(self.forget_recorded(&key.into_key()?, None).await?.0)
    }

    /// [`forget`](Self::forget) of a key checked where it entered, writing
    /// `record` (if any) in the same statement; and whether the statement
    /// wrote it. It does not when it found the row free yet did not delete
    /// it (a claim committed while it ran): the answer then comes from a
    /// read after it, which the statement cannot know, and the caller
    /// records that answer itself.
    pub(crate) async fn forget_recorded(self, key: &Key, record: Option<&Record<'_>>) -> Result<(Forgotten, bool)> {
        // $1 key. The expiry clause is the whole safety of this statement:
        // deleting a live lease would let another replica claim it while its
        // run goes on. The key's history goes with it: its run numbers
        // start again from 1 if it is registered again, and the ring never
        // lets a lower run number overwrite a higher one. The UNION half
        // reports the row that was kept.
        // `recorded` (the record: $2 action, $3 actor, $4 words: [1]
        // deleted, [2] not found, [3] `refused: held by %s (fence %s)`; $5
        // the schema version asked for (`leasehold_schema_is`, NULL: none)): the
        // action's row, in the statement that deletes, so the two commit
        // together — a deleted row always has its record. Not written for a
        // row found free but kept (see `forget_recorded`).
        const FORGET: &str = "
            WITH gone AS (
                DELETE FROM leasehold_lease WHERE key = $1 AND /* guard:forget.expiry */ expires_at <= clock_timestamp() RETURNING key
            ), history AS (
                /* guard:forget.history */ DELETE FROM leasehold_run WHERE key IN (SELECT key FROM gone)
            ), recorded AS (
                INSERT INTO leasehold_action (scope, name, action, actor, outcome)
                SELECT 'key', $1, $2, $3,
                       CASE WHEN EXISTS (SELECT 1 FROM gone) THEN format(($4::text[])[1])
                            WHEN k.key IS NULL THEN format(($4::text[])[2])
                            ELSE format(($4::text[])[3], k.holder, k.fence) END
                  FROM (VALUES (1)) AS one(n) LEFT JOIN leasehold_lease AS k ON k.key = $1
                 WHERE /* guard:forget.recorded */ $2::text IS NOT NULL AND leasehold_schema_is($5::int)
                   AND (EXISTS (SELECT 1 FROM gone) OR k.key IS NULL OR k.expires_at > clock_timestamp())
            )
            SELECT true AS deleted, l.*, clock_timestamp() AS server_now
              FROM leasehold_lease AS l WHERE l.key IN (SELECT key FROM gone)
            UNION ALL
            SELECT false, l.*, clock_timestamp() FROM leasehold_lease AS l
             WHERE l.key = $1 AND NOT EXISTS (SELECT 1 FROM gone)";
        let (action, actor, words, schema) = Record::binds(record);
        let row: Option<ForgetRow> = connection::run!(&self.store.conns, |conn| sqlx::query_as(FORGET)
            .bind(key.as_str())
            .bind(action)
            .bind(actor)
            .bind(words)
            .bind(schema)
            .fetch_optional(conn))?;
        Ok(match row {
            Some(ForgetRow { deleted: true, .. }) => (Forgotten::Deleted, true),
            Some(ForgetRow { deleted: false, row }) => {
                let info = row.into_info();
                if info.is_held() {
                    (Forgotten::Held(info), true)
                } else {
                    // Free on the statement's snapshot, yet not deleted: a
                    // claim committed before the DELETE reached the row, and
                    // its re-check saw the new tenure. Read that tenure.
                    let now = match self.store.get(key).await? {
                        Some(now) => Forgotten::Held(now),
                        None => Forgotten::NotFound,
                    };
                    (now, false)
                }
            }
            None => (Forgotten::NotFound, true),
        })
    }
}
