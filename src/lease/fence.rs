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

use sqlx::PgConnection;

use crate::error::Result;

/// What [`advance`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Advance {
    /// The resource now carries this run's fence, locked until commit.
    Accepted,
    /// A newer run already wrote: the resource's fence.
    Newer(i64),
}

/// Checks and advances the fence of `resource` inside the caller's
/// transaction (the first statement of `FenceGuard::begin_fenced_on`).
///
/// Two statements only on the rejection path, which is rare: the advance
/// returns nothing when the stored fence is newer, and the second reads it
/// for the error message.
pub(crate) async fn advance(conn: &mut PgConnection, resource: &str, fence: i64) -> Result<Advance> {
    // $1 resource, $2 fence.
    // - `WHERE f.last_fence <= EXCLUDED.last_fence`: F1 (never lower a
    //   row) and F2 (`<=`: the same run passes again).
    // - ON CONFLICT DO UPDATE locks the row until COMMIT: F3.
    const ADVANCE_FENCE: &str = "
        INSERT INTO leasehold_fence AS f (resource, last_fence) VALUES ($1, $2)
        ON CONFLICT (resource) DO UPDATE
           SET last_fence = EXCLUDED.last_fence, updated_at = clock_timestamp()
         WHERE f.last_fence <= EXCLUDED.last_fence
        RETURNING f.last_fence";
    let accepted: Option<i64> = sqlx::query_scalar(ADVANCE_FENCE)
        .bind(resource)
        .bind(fence)
        .fetch_optional(&mut *conn)
        .await?;
    if accepted.is_some() {
        return Ok(Advance::Accepted);
    }
    const NEWER_FENCE: &str = "SELECT last_fence FROM leasehold_fence WHERE resource = $1";
    let newer: i64 = sqlx::query_scalar(NEWER_FENCE)
        .bind(resource)
        .fetch_one(&mut *conn)
        .await?;
    Ok(Advance::Newer(newer))
}

/// The two statements of a fenced `UPDATE` of a caller's table.
pub(crate) struct FencedUpdateSql {
    /// `UPDATE … SET <sets>, last_fence = $fence WHERE <filters> AND
    /// last_fence <= $fence`. Parameters: the filter values `$1..$n`, then
    /// the set values, then the fence.
    pub(crate) update: String,
    /// Run only when the update touched no row: the newest fence among the
    /// rows the filters match (`NULL`: no such row), to tell "a newer run
    /// wrote" from "no row matched". Parameters: the filter values.
    pub(crate) newest: String,
}

/// Builds the fenced update of `table` (already quoted) setting `sets` and
/// filtering on `filters` (quoted column names).
pub(crate) fn fenced_update(table: &str, sets: &[String], filters: &[String]) -> FencedUpdateSql {
    let n = filters.len();
    let filter_sql: String = filters
        .iter()
        .enumerate()
        .map(|(i, col)| format!("{col} = ${} AND ", i + 1))
        .collect();
    let set_sql: String = sets
        .iter()
        .enumerate()
        .map(|(i, col)| format!("{col} = ${}, ", n + i + 1))
        .collect();
    let fence = n + sets.len() + 1;
    FencedUpdateSql {
        // `last_fence <= $fence`: F4, the whole point. `<=`: F2.
        update: format!("UPDATE {table} SET {set_sql}last_fence = ${fence} WHERE {filter_sql}last_fence <= ${fence}"),
        newest: format!("SELECT max(last_fence) FROM {table} WHERE {filter_sql}true"),
    }
}

#[cfg(test)]
mod tests {
    use super::fenced_update;

    #[test]
    fn the_update_is_guarded_by_the_fence_and_binds_every_value() {
        let sql = fenced_update("\"accounts\"", &["\"balance\"".into()], &["\"id\"".into()]);
        assert_eq!(
            sql.update,
            "UPDATE \"accounts\" SET \"balance\" = $2, last_fence = $3 WHERE \"id\" = $1 AND last_fence <= $3"
        );
        assert_eq!(
            sql.newest,
            "SELECT max(last_fence) FROM \"accounts\" WHERE \"id\" = $1 AND true"
        );
    }
}
