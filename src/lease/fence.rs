//! The fence SQL: every statement on `leasehold_fence`, and the fenced
//! `UPDATE` of a caller's table. [`FenceGuard`](crate::FenceGuard) decides
//! what to do with the answers (cancel the run, count the rejection); the
//! rules themselves live here, next to the lease SQL that hands fences out.
//!
//! # Invariants (docs/design.md §4, F1–F4)
//!
//! - **F1** *A fence row only rises*: an advance applies only when the
//!   stored fence is not above the run's (`WHERE f.last_fence <=
//!   EXCLUDED.last_fence`); an operator's revoke (`revoke.rs`) raises rows
//!   with `GREATEST`.
//! - **F2** *The writes of one run share its fence*: `<=`, not `<`, so a
//!   run may open as many fenced transactions as it likes.
//! - **F3** *An older run cannot interleave with a newer one*: the advance
//!   locks the fence row until the caller's transaction ends, so a newer
//!   run's advance waits for the older transaction and then, holding a
//!   larger fence, wins; the older one, arriving later, is refused.
//! - **F4** *A fenced update never touches a row a newer run wrote*:
//!   `… WHERE <filters> AND last_fence <= $fence`.
//! - **F5** *A fenced transaction ends with its tenure*, whatever its
//!   client does: its COMMIT is refused on the server unless the tenure
//!   whose fence it advanced still holds its lease then (the deferred
//!   trigger of `migrations/0005_fence_tenure.sql`, whose function
//!   `leasehold_fence_tenure_live` is `migrations/0015_commit_check_owner.sql`'s,
//!   reads the row's `lease_key` and the run's liveness registration), and
//!   the server ends it once it has sat
//!   idle for a whole lease, so a frozen holder cannot keep the fence row
//!   locked from its successor for longer than that.

use std::time::Duration;

use sqlx::PgConnection;

use crate::error::Result;

/// What [`advance`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Advance {
    /// The resource now carries this run's fence, locked until commit.
    Accepted,
    /// A newer run already wrote: the resource's fence.
    Newer(i64),
    /// The tenure has already ended on the server clock (expired, taken
    /// over or revoked), and no newer fence has reached the resource yet.
    Ended,
}

/// The tenure a fenced transaction writes for: the one whose fence it
/// advances.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tenure<'a> {
    /// The lease key.
    pub(crate) key: &'a str,
    /// The tenure's fence.
    pub(crate) fence: i64,
    /// The job's lease: how long the transaction may sit idle before the
    /// server ends it (F5).
    pub(crate) lease: Duration,
}

/// Checks and advances the fence of `resource` inside the caller's
/// transaction (the first statement of `FenceGuard::begin_fenced_on`), and
/// bounds that transaction by the tenure (F5).
///
/// Two statements only on the refusal path, which is rare: the advance
/// returns nothing when the stored fence is newer or the tenure has ended,
/// and the second tells which, for the error.
pub(crate) async fn advance(conn: &mut PgConnection, resource: &str, tenure: Tenure<'_>) -> Result<Advance> {
    // $1 resource, $2 fence, $3 lease key, $4 lease in milliseconds.
    // - `live`: the tenure still holds its lease when the transaction
    //   begins (F5, early: a run resumed after its lease ended is refused
    //   here rather than at COMMIT). Nothing to insert otherwise.
    // - `set_config(…idle_in_transaction_session_timeout…, true)`: for
    //   this transaction only, the server ends the session if the client
    //   sends nothing for a whole lease (F5: a frozen or vanished holder
    //   releases the fence row lock at most one lease after its last
    //   statement). A shorter setting of the service's own is kept.
    // - `lease_key = $3`: names the tenure for the commit check
    //   (`leasehold_fence_tenure_live`, F5), which runs at COMMIT.
    // - `WHERE f.last_fence <= EXCLUDED.last_fence`: F1 (never lower a
    //   row) and F2 (`<=`: the same run passes again).
    // - ON CONFLICT DO UPDATE locks the row until COMMIT: F3.
    const ADVANCE_FENCE: &str = "
        WITH live AS (
            SELECT /* guard:fence_advance.idle_bound */ set_config('idle_in_transaction_session_timeout',
                              /* guard:fence_advance.shorter_idle_kept */ LEAST(NULLIF(extract(epoch FROM
                                        current_setting('idle_in_transaction_session_timeout')::interval)
                                        * 1000, 0),
                                    $4)::bigint::text,
                              true)
              FROM leasehold_lease AS l
             WHERE l.key = $3 AND l.fence = $2
               AND /* guard:fence_advance.tenure_live */ l.expires_at > clock_timestamp()
        )
        INSERT INTO leasehold_fence AS f (resource, last_fence, lease_key)
        SELECT $1, $2, $3 FROM live
        ON CONFLICT (resource) DO UPDATE
           SET last_fence = EXCLUDED.last_fence, lease_key = EXCLUDED.lease_key, updated_at = clock_timestamp()
         /* guard:fence_advance.never_lower */ WHERE f.last_fence <= EXCLUDED.last_fence
        RETURNING f.last_fence";
    let lease_ms = i64::try_from(tenure.lease.as_millis()).unwrap_or(i64::MAX).max(1);
    let accepted: Option<i64> = sqlx::query_scalar(ADVANCE_FENCE)
        .bind(resource)
        .bind(tenure.fence)
        .bind(tenure.key)
        .bind(lease_ms)
        .fetch_optional(&mut *conn)
        .await?;
    if accepted.is_some() {
        return Ok(Advance::Accepted);
    }
    const NEWER_FENCE: &str = "SELECT last_fence FROM leasehold_fence WHERE resource = $1";
    let newest: Option<i64> = sqlx::query_scalar(NEWER_FENCE)
        .bind(resource)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(match newest {
        Some(newer) if newer > tenure.fence => Advance::Newer(newer),
        _ => Advance::Ended,
    })
}

/// The two statements of a fenced `UPDATE` of a caller's table.
pub(crate) struct FencedUpdateSql {
    /// `UPDATE … SET <sets>, last_fence = $fence WHERE <filters> AND
    /// last_fence <= $fence AND <the tenure is live>`. Parameters: the
    /// filter values `$1..$n`, then the set values, then the fence, then the
    /// lease key.
    pub(crate) update: String,
    /// Run only when the update touched no row: the newest fence among the
    /// rows the filters match (`NULL`: no such row), to tell "a newer run
    /// wrote" from "no row matched", and whether the tenure is still live,
    /// to tell "the tenure ended" from both. Parameters: the filter values,
    /// then the fence, then the lease key.
    pub(crate) newest: String,
}

/// One column a fenced update writes, its name already quoted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Set {
    /// `col = $n`.
    Assign(String),
    /// `col = col + $n`: computed by the server on the row the update has
    /// locked, so concurrent increments all count.
    Add(String),
}

/// Builds the fenced update of `table` (already quoted) writing `sets` and
/// filtering on `filters` (quoted column names).
pub(crate) fn fenced_update(table: &str, sets: &[Set], filters: &[String]) -> FencedUpdateSql {
    let n = filters.len();
    let filter_sql: String = filters
        .iter()
        .enumerate()
        .map(|(i, col)| format!("{col} = ${} AND ", i + 1))
        .collect();
    let set_sql: String = sets
        .iter()
        .enumerate()
        .map(|(i, set)| match set {
            Set::Assign(col) => format!("{col} = ${}, ", n + i + 1),
            Set::Add(col) => format!("{col} = {col} + ${}, ", n + i + 1),
        })
        .collect();
    let fence = n + sets.len() + 1;
    let live = |fence: usize| {
        format!(
            "EXISTS (SELECT 1 FROM leasehold_lease AS l WHERE l.key = ${} AND l.fence = ${fence} \
             AND /* guard:fenced_update.tenure_live */ l.expires_at > clock_timestamp())",
            fence + 1
        )
    };
    FencedUpdateSql {
        // `last_fence <= $fence`: F4, the whole point. `<=`: F2.
        // `EXISTS (… live …)`: F5, the tenure still holds its lease when
        // the statement starts.
        update: format!(
            "UPDATE {table} SET {set_sql}last_fence = ${fence} WHERE {filter_sql}/* guard:fenced_update.fence */ last_fence <= ${fence} AND {}",
            live(fence)
        ),
        newest: format!(
            "SELECT max(last_fence), {} FROM {table} WHERE {filter_sql}true",
            live(n + 1)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::{Set, fenced_update};

    #[test]
    fn the_update_is_guarded_by_the_fence_and_binds_every_value() {
        let sql = fenced_update("\"accounts\"", &[Set::Assign("\"balance\"".into())], &["\"id\"".into()]);
        assert_eq!(
            sql.update,
            "UPDATE \"accounts\" SET \"balance\" = $2, last_fence = $3 WHERE \"id\" = $1 AND \
             /* guard:fenced_update.fence */ last_fence <= $3 \
             AND EXISTS (SELECT 1 FROM leasehold_lease AS l WHERE l.key = $4 AND l.fence = $3 \
             AND /* guard:fenced_update.tenure_live */ l.expires_at > clock_timestamp())"
        );
        assert_eq!(
            sql.newest,
            "SELECT max(last_fence), EXISTS (SELECT 1 FROM leasehold_lease AS l \
             WHERE l.key = $3 AND l.fence = $2 AND /* guard:fenced_update.tenure_live */ \
             l.expires_at > clock_timestamp()) FROM \"accounts\" WHERE \"id\" = $1 AND true"
        );
    }

    #[test]
    fn an_increment_adds_its_bound_value_to_the_column() {
        let sets = [Set::Add("\"balance\"".into()), Set::Assign("\"note\"".into())];
        let sql = fenced_update("\"accounts\"", &sets, &["\"id\"".into()]);
        assert!(
            sql.update.starts_with(
                "UPDATE \"accounts\" SET \"balance\" = \"balance\" + $2, \"note\" = $3, last_fence = $4 \
                 WHERE \"id\" = $1 AND /* guard:fenced_update.fence */ last_fence <= $4 AND EXISTS ("
            ),
            "{}",
            sql.update
        );
    }
}
