//! The recent runs of many keys at once: what a page of keys shows of
//! their history (the console's strips of outcomes and a job's timeline),
//! read in one statement whatever the number of keys.

use chrono::{DateTime, Utc};

use super::Records;
use super::RunRecord;
use super::history::{MAX_HISTORY, MAX_PAGE, RunRow};
use crate::connection;
use crate::error::{Error, Result};
use crate::validate;

impl Records<'_> {
    /// The latest runs of each of `keys` (at most 10,000 keys), newest
    /// first per key, at most `per_key` of each (1 to 10,000) and, with
    /// `since`, only runs that ended at or after it (a server time): what
    /// a page of keys shows of their recent history, in one statement
    /// whatever the number of keys. Keys come back in the order given.
    /// Cancel-safe: one statement.
    ///
    /// ```no_run
    /// # async fn demo(store: leasehold::store::LeaseStore) -> leasehold::Result<()> {
    /// let hour_ago = store.server_now().await? - chrono::TimeDelta::hours(1);
    /// for run in store.records().recent_runs(&["billing:acme", "billing:zeta"], Some(hour_ago), 10).await? {
    ///     println!("{} run {} fence {}: {}", run.key, run.run_no, run.fence, run.outcome);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn recent_runs(
        &self,
        keys: &[&str],
        since: Option<DateTime<Utc>>,
        per_key: usize,
    ) -> Result<Vec<RunRecord>> {
        if per_key == 0 || per_key > MAX_HISTORY {
            return Err(Error::invalid(
                "runs per key",
                per_key,
                format!("ask for 1 to {MAX_HISTORY} runs"),
            ));
        }
        if keys.len() > MAX_PAGE {
            return Err(Error::invalid(
                "number of keys",
                keys.len(),
                format!("ask for at most {MAX_PAGE} keys at once"),
            ));
        }
        for key in keys {
            validate::existing_key(key)?;
        }
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        // $1 the keys, $2 the earliest end or NULL, $3 runs per key. The
        // key clause keeps each key's runs to its own row of the page;
        // `since` bounds what a window reads (a ring holds up to 10,000
        // runs); each key's lookup is its primary key's prefix, so the
        // cost follows the keys asked for, not the table.
        // `earlier_life`: `life_rule.rs`.
        const RECENT: &str = concat!(
            "
            SELECT r.*, ",
            earlier_life!(run = "r"),
            " AS earlier_life FROM unnest($1::text[]) WITH ORDINALITY AS k(key, at)
             CROSS JOIN LATERAL (
                   SELECT * FROM leasehold_run AS run
                    WHERE /* guard:recent_runs.key */ run.key = k.key
                      AND /* guard:recent_runs.since */ ($2::timestamptz IS NULL OR run.ended_at >= $2)
                    ORDER BY run.run_no DESC LIMIT $3) AS r
             ORDER BY k.at, r.run_no DESC"
        );
        let rows: Vec<RunRow> = connection::run!(&self.store.conns, |conn| sqlx::query_as(RECENT)
            .bind(keys)
            .bind(since)
            .bind(i64::try_from(per_key).unwrap_or(i64::MAX))
            .fetch_all(conn))?;
        Ok(rows.into_iter().map(RunRecord::from).collect())
    }
}
