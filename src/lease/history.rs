//! Run history and the per-key overview operators read.
//!
//! Each run's row is written by the statement that releases it
//! (`LeaseStore::finish_many`), into a ring per key (invariant 9 in
//! `lease/mod.rs`): `leasehold_run.slot = run number mod ring length`, so
//! a key never has more rows than its ring, and keeping the table bounded
//! costs no pruning statement and no scan.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{LeaseInfo, LeaseRow, LeaseStore};
use crate::cancel::CancelReason;
use crate::connection;
use crate::error::{Error, Result};
use crate::key::IntoKey;
use crate::outcome::RunOutcome;

/// Longest error message kept in a run's history row, in bytes; longer
/// messages are cut at a character boundary and end with `…`.
pub(crate) const HISTORY_ERROR_BYTES: usize = 2000;

/// One run of a key, as its release recorded it. Times are the server's.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RunRecord {
    /// The lease key.
    pub key: String,
    /// The key's run number (1 for its first run).
    pub run_no: i64,
    /// The job's name.
    pub job_name: Option<String>,
    /// The run's fence.
    pub fence: i64,
    /// The replica that ran it.
    pub holder: String,
    /// The schedule slot it ran for; `None` for a triggered or manual run.
    pub scheduled_for: Option<DateTime<Utc>>,
    /// When its claim took the lease.
    pub started_at: DateTime<Utc>,
    /// When its release was written.
    pub ended_at: DateTime<Utc>,
    /// How it ended.
    pub outcome: RunOutcome,
    /// Why a cancelled run stopped (`stolen`, `expired`, `deadline`,
    /// `shutdown`, `paused`, `removed`, `timeout`: the names of
    /// [`CancelReason`]); `expired` for a lost run.
    pub reason: Option<String>,
    /// The job's error or panic message (at most 2,000 bytes).
    pub error: Option<String>,
    /// The run belongs to an earlier life of its key: it started before
    /// the key (of a job kind) was last removed, or before it was added
    /// again ([`Keys::remove`](crate::store::Keys::remove), [`Keys::add`](crate::store::Keys::add)). Its
    /// arguments, schedule and version were those of that life.
    pub earlier_life: bool,
}

impl RunRecord {
    /// From claim to release, by the server clock.
    pub fn duration(&self) -> Duration {
        (self.ended_at - self.started_at).to_std().unwrap_or(Duration::ZERO)
    }
}

/// A key as operators look at it: its lease row, whether it is paused, and
/// its latest runs.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct KeyStatus {
    /// The lease row, read with the server's clock.
    pub lease: LeaseInfo,
    /// Whether the key is paused, by its own name or by its job.
    pub paused: bool,
    /// The key was a key of a job kind, and was removed
    /// ([`Keys::remove`](crate::store::Keys::remove)) and not added again: no replica runs
    /// it. Its lease row and history stay (fences and run numbers go on if
    /// it is added again) until [`Controls::forget`](crate::store::Controls::forget) drops them.
    pub removed: bool,
    /// The latest recorded run.
    pub last: Option<RunRecord>,
    /// The latest run that succeeded.
    pub last_success: Option<RunRecord>,
    /// The latest run that failed or panicked, with its error.
    pub last_error: Option<RunRecord>,
}

/// What a run's release records about it (`Finish::report`).
#[derive(Debug, Clone)]
pub(crate) struct RunReport {
    pub(crate) job_name: String,
    pub(crate) run_no: i64,
    pub(crate) scheduled_for: Option<DateTime<Utc>>,
    pub(crate) started_at: DateTime<Utc>,
    pub(crate) outcome: RunOutcome,
    pub(crate) reason: Option<CancelReason>,
    pub(crate) error: Option<String>,
    /// Length of the key's history ring; 0 records nothing.
    pub(crate) ring: u32,
}

/// `message` as a text column can store it: each NUL (which PostgreSQL's
/// `text` refuses, failing the whole statement — every run released with
/// it) shown as `␀` (U+2400), then cut to [`HISTORY_ERROR_BYTES`] at a
/// character boundary. What a job or an operator's tool wrote never fails
/// the statement that records it.
pub(crate) fn storable_text(message: String) -> String {
    let mut message = if message.contains('\0') {
        message.replace('\0', "\u{2400}")
    } else {
        message
    };
    if message.len() > HISTORY_ERROR_BYTES {
        let mut end = HISTORY_ERROR_BYTES - '…'.len_utf8();
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}

#[derive(sqlx::FromRow)]
pub(super) struct RunRow {
    key: String,
    run_no: i64,
    job_name: Option<String>,
    fence: i64,
    holder: String,
    scheduled_for: Option<DateTime<Utc>>,
    started_at: DateTime<Utc>,
    ended_at: DateTime<Utc>,
    outcome: String,
    reason: Option<String>,
    error: Option<String>,
    earlier_life: bool,
}

impl From<RunRow> for RunRecord {
    fn from(row: RunRow) -> Self {
        RunRecord {
            key: row.key,
            run_no: row.run_no,
            job_name: row.job_name,
            fence: row.fence,
            holder: row.holder,
            scheduled_for: row.scheduled_for,
            started_at: row.started_at,
            ended_at: row.ended_at,
            outcome: RunOutcome::parse(&row.outcome),
            reason: row.reason,
            error: row.error,
            earlier_life: row.earlier_life,
        }
    }
}

#[derive(sqlx::FromRow)]
struct StatusRow {
    paused: bool,
    removed: bool,
    #[sqlx(flatten)]
    row: LeaseRow,
}

/// Most runs one `history` call returns.
pub(super) const MAX_HISTORY: usize = 10_000;

/// A run row with the kind of "latest" it is (`last`, `success`, `error`).
#[derive(sqlx::FromRow)]
struct Latest {
    kind: String,
    #[sqlx(flatten)]
    run: RunRow,
}

/// Joins key rows with their latest runs, keeping the keys' order.
fn assemble(keys: Vec<StatusRow>, latest: Vec<Latest>) -> Vec<KeyStatus> {
    let mut runs: HashMap<String, [Option<RunRecord>; 3]> = HashMap::new();
    for Latest { kind, run } in latest {
        let at = match kind.as_str() {
            "last" => 0,
            "success" => 1,
            _ => 2,
        };
        let key = run.key.clone();
        runs.entry(key).or_default()[at] = Some(run.into());
    }
    keys.into_iter()
        .map(|StatusRow { paused, removed, row }| {
            let [last, last_success, last_error] = runs.remove(&row.key).unwrap_or_default();
            KeyStatus {
                lease: row.into_info(),
                paused,
                removed,
                last,
                last_success,
                last_error,
            }
        })
        .collect()
}

/// Most keys one [`Records::list_page`](crate::store::Records::list_page) call returns.
pub(super) const MAX_PAGE: usize = 10_000;

/// A key's state as operators read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum KeyState {
    /// Any state (a filter only).
    #[default]
    All,
    /// Paused, by its own name or its job's (held or not: a run may still
    /// be finishing).
    Paused,
    /// Not paused, and held by the server clock: a run is in progress.
    Held,
    /// Not paused, not held, and claimed at least once.
    Free,
    /// Not paused, and never claimed: a runtime registered the key and no
    /// run has taken place yet (its holder and fence are placeholders).
    NeverRun,
    /// Not held, and its key (of a job kind) was removed and not added
    /// again ([`KeyStatus::removed`]): not a live key, whether or not a
    /// pause names it. `leasehold forget` drops its row and history.
    Removed,
}

impl KeyState {
    /// `all`, `paused`, `held`, `free`, `never-run` or `removed`.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyState::All => "all",
            KeyState::Paused => "paused",
            KeyState::Held => "held",
            KeyState::Free => "free",
            KeyState::NeverRun => "never-run",
            KeyState::Removed => "removed",
        }
    }

    /// Reads `all`, `paused`, `held`, `free`, `never-run` or `removed`.
    pub fn parse(text: &str) -> Result<Self> {
        match text {
            "" | "all" => Ok(KeyState::All),
            "paused" => Ok(KeyState::Paused),
            "held" => Ok(KeyState::Held),
            "free" => Ok(KeyState::Free),
            "never-run" => Ok(KeyState::NeverRun),
            "removed" => Ok(KeyState::Removed),
            other => Err(Error::invalid(
                "key state",
                other,
                "use all, paused, held or free, never-run for keys no run has claimed yet, or removed for \
                 removed keys of job kinds",
            )),
        }
    }
}

impl std::fmt::Display for KeyState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl KeyStatus {
    /// Removed (a removed key of a job kind, not held), else paused
    /// (whether or not a run is finishing), else the lease's own state
    /// ([`LeaseInfo::state`]): held, free or never-run.
    pub fn state(&self) -> KeyState {
        if self.removed && !self.lease.is_held() {
            KeyState::Removed
        } else if self.paused {
            KeyState::Paused
        } else {
            self.lease.state()
        }
    }
}

/// Which keys [`Records::list_page`](crate::store::Records::list_page) returns: built with
/// [`KeyFilter::new`] and its setters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyFilter {
    /// Keys starting with this (taken literally; `""` for all).
    pub prefix: String,
    /// Only the keys of this job.
    pub job: Option<String>,
    /// Only keys in this state.
    pub state: KeyState,
    /// Only keys after this one (the previous page's [`KeyPage::next`]).
    pub after: Option<String>,
    /// At most this many keys (1 to 10,000).
    pub limit: usize,
    /// Only this key (`Records::status`).
    only: Option<String>,
}

impl Default for KeyFilter {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyFilter {
    /// Every key, first page of 100.
    pub fn new() -> Self {
        KeyFilter {
            prefix: String::new(),
            job: None,
            state: KeyState::All,
            after: None,
            limit: 100,
            only: None,
        }
    }

    /// Keys starting with `prefix`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Keys of the job named `job`.
    pub fn job(mut self, job: impl Into<String>) -> Self {
        self.job = Some(job.into());
        self
    }

    /// Keys in `state`.
    pub fn state(mut self, state: KeyState) -> Self {
        self.state = state;
        self
    }

    /// Keys after `key`, by key.
    pub fn after(mut self, key: impl Into<String>) -> Self {
        self.after = Some(key.into());
        self
    }

    /// At most `limit` keys.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }
}

/// One page of [`Records::list_page`](crate::store::Records::list_page).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct KeyPage {
    /// The keys, by key.
    pub keys: Vec<KeyStatus>,
    /// The last key of this page when more keys match: pass it to
    /// [`KeyFilter::after`] for the next page.
    pub next: Option<String>,
}

/// What ran and who did what: each key's run history, the per-key overview
/// operators list, and the audit trail of operators' actions. Got from
/// [`LeaseStore::records`]; each method is one statement and cancel-safe.
#[derive(Debug, Clone, Copy)]
pub struct Records<'s> {
    pub(super) store: &'s LeaseStore,
}

impl Records<'_> {
    /// The recorded runs of `key`, newest first, at most `limit` (1 to
    /// 10,000). The ring keeps the last runs of each key (100 by default,
    /// [`RuntimeBuilder::history`](crate::RuntimeBuilder::history)); a run
    /// whose release never reached the database (a crash) has no row.
    /// Cancel-safe.
    ///
    /// ```no_run
    /// # async fn demo(store: leasehold::store::LeaseStore) -> leasehold::Result<()> {
    /// for run in store.records().history("nightly-reconcile", 10).await? {
    ///     println!("{} fence {} {} in {:?} {}", run.started_at, run.fence, run.outcome,
    ///              run.duration(), run.error.unwrap_or_default());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn history(self, key: impl IntoKey, limit: usize) -> Result<Vec<RunRecord>> {
        let key = key.into_key()?;
        if limit == 0 || limit > MAX_HISTORY {
            return Err(Error::invalid(
                "history limit",
                limit,
                format!("ask for 1 to {MAX_HISTORY} runs"),
            ));
        }
        // `earlier_life`: `life_rule.rs`.
        const HISTORY: &str = concat!(
            "
            SELECT run.*, ",
            earlier_life!(run = "run"),
            " AS earlier_life FROM leasehold_run AS run WHERE run.key = $1 ORDER BY run.run_no DESC LIMIT $2"
        );
        let rows: Vec<RunRow> = connection::run!(&self.store.conns, |conn| sqlx::query_as(HISTORY)
            .bind(key.as_str())
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(conn))?;
        Ok(rows.into_iter().map(RunRecord::from).collect())
    }

    /// Every key whose name starts with `prefix` (taken literally; all keys
    /// for `""`), by key: its lease row, whether it is paused, and its
    /// latest run, success and error. Two statements; cancel-safe.
    pub async fn list(self, prefix: &str) -> Result<Vec<KeyStatus>> {
        let keys = self.key_rows(&KeyFilter::new().prefix(prefix), None).await?;
        self.with_latest(keys).await
    }

    /// One key as [`list`](Self::list) reads it (lease row, paused, latest
    /// runs), or `None` if it has no lease row. Two statements; cancel-safe.
    pub async fn status(self, key: impl IntoKey) -> Result<Option<KeyStatus>> {
        let mut filter = KeyFilter::new().limit(1);
        filter.only = Some(key.into_key()?.into_string());
        Ok(self.list_page(&filter).await?.keys.pop())
    }

    /// One page of the keys that `filter` selects, by key, as
    /// [`list`](Self::list) reads them. Its cost follows the page, not the
    /// table: a console over 100,000 tenant keys reads only the rows it
    /// shows. Pass [`KeyPage::next`] as [`KeyFilter::after`] for the next
    /// page. Two statements; cancel-safe.
    ///
    /// ```no_run
    /// # async fn demo(store: leasehold::store::LeaseStore) -> leasehold::Result<()> {
    /// use leasehold::store::{KeyFilter, KeyState};
    /// let page = store.records().list_page(&KeyFilter::new().prefix("tenant-").state(KeyState::Held).limit(50)).await?;
    /// for key in &page.keys {
    ///     println!("{} held by {} (fence {})", key.lease.key, key.lease.holder, key.lease.fence);
    /// }
    /// if let Some(after) = page.next { println!("more after {after}"); }
    /// # Ok(()) }
    /// ```
    pub async fn list_page(self, filter: &KeyFilter) -> Result<KeyPage> {
        if filter.limit == 0 || filter.limit > MAX_PAGE {
            return Err(Error::invalid(
                "page limit",
                filter.limit,
                format!("ask for 1 to {MAX_PAGE} keys"),
            ));
        }
        let mut keys = self.key_rows(filter, Some(filter.limit + 1)).await?;
        let next = if keys.len() > filter.limit {
            keys.truncate(filter.limit);
            keys.last().map(|k| k.row.key.clone())
        } else {
            None
        };
        Ok(KeyPage {
            keys: self.with_latest(keys).await?,
            next,
        })
    }

    /// The lease rows `filter` selects, by key, at most `limit` (`None`:
    /// all), with whether each is paused.
    async fn key_rows(self, filter: &KeyFilter, limit: Option<usize>) -> Result<Vec<StatusRow>> {
        // $1 prefix, $2 job or NULL, $3 the last key of the previous page
        // or NULL, $4 state, $5 limit or NULL (none), $6 the only key
        // wanted or NULL. `paused` is the claims' own rule (invariant 8);
        // the state's precedence (paused, then held, then never-run or
        // free) is `KeyStatus::state`'s, and never-run is `never_claimed`
        // (in `lease/mod.rs`) in SQL: a registration row, never a tenure.
        // `removed` is `KeyStatus::removed`: a key of a job kind whose
        // life ended (`leasehold_key_life`, schema v10) and that is not
        // stored again. Not held, it is `KeyState::Removed`, which comes
        // before every state but held, so a removed key is never listed as
        // a live paused, free or never-run key.
        const KEYS: &str = concat!(
            "
            SELECT * FROM (
                SELECT l.*, clock_timestamp() AS server_now,
                       ",
            paused!(key = "l.key", jobs = "l.job_name"),
            " AS paused,
                       EXISTS (SELECT 1 FROM leasehold_key_life AS d WHERE d.key = l.key)
                       AND NOT EXISTS (SELECT 1 FROM leasehold_key AS k WHERE k.key = l.key) AS removed
                  FROM leasehold_lease AS l
                 WHERE starts_with(l.key, $1)
                   AND ($2::text IS NULL OR l.job_name = $2)
                   AND /* guard:list_page.cursor */ ($3::text IS NULL OR l.key > $3)
                   AND ($6::text IS NULL OR l.key = $6)
            ) AS s
             WHERE $4 = 'all'
                OR ($4 = 'paused' AND s.paused AND NOT (s.removed AND s.expires_at <= s.server_now))
                OR ($4 = 'held' AND /* guard:list_page.held_not_paused */ NOT s.paused AND s.expires_at > s.server_now)
                OR ($4 = 'free' AND NOT s.paused AND s.expires_at <= s.server_now
                    AND /* guard:list_page.free_not_removed */ NOT s.removed
                    AND /* guard:list_page.free_was_claimed */ s.expires_at - s.acquired_at > interval '1 microsecond')
                OR ($4 = 'never-run' AND NOT s.paused AND s.expires_at <= s.server_now AND NOT s.removed
                    AND /* guard:list_page.never_claimed */ s.expires_at - s.acquired_at <= interval '1 microsecond')
                OR ($4 = 'removed' AND s.removed AND s.expires_at <= s.server_now)
             ORDER BY s.key
             LIMIT $5"
        );
        connection::run!(&self.store.conns, |conn| sqlx::query_as(KEYS)
            .bind(&filter.prefix)
            .bind(filter.job.as_deref())
            .bind(filter.after.as_deref())
            .bind(filter.state.as_str())
            .bind(limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX)))
            .bind(filter.only.as_deref())
            .fetch_all(conn))
    }

    /// `keys` with their latest run, success and error.
    async fn with_latest(self, keys: Vec<StatusRow>) -> Result<Vec<KeyStatus>> {
        // $1 the keys. Each key's ring holds a bounded number of rows, so
        // this reads at most (keys x ring length) rows.
        // `earlier_life`: `life_rule.rs`.
        const LATEST: &str = concat!(
            "
            SELECT s.*, ",
            earlier_life!(run = "s"),
            " AS earlier_life FROM (
            (SELECT DISTINCT ON (key) 'last' AS kind, * FROM leasehold_run
              WHERE key = ANY($1) ORDER BY key, run_no DESC)
            UNION ALL
            (SELECT DISTINCT ON (key) 'success', * FROM leasehold_run
              WHERE key = ANY($1) AND outcome = 'succeeded' ORDER BY key, run_no DESC)
            UNION ALL
            (SELECT DISTINCT ON (key) 'error', * FROM leasehold_run
              WHERE key = ANY($1) AND outcome IN ('failed', 'panicked') ORDER BY key, run_no DESC)
            ) AS s"
        );
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let names: Vec<&str> = keys.iter().map(|k| k.row.key.as_str()).collect();
        let latest: Vec<Latest> = connection::run!(&self.store.conns, |conn| sqlx::query_as(LATEST)
            .bind(&names)
            .fetch_all(conn))?;
        Ok(assemble(keys, latest))
    }
}

#[cfg(feature = "test-util")]
impl LeaseStore {
    /// Records runs `run_nos` of `key` as the release statement does for
    /// runs that lost their lease (holder `test-recorder`, fence = run
    /// number, outcome succeeded), in one statement: for tests of the
    /// history ring at volumes a real run rate would take minutes to reach.
    #[doc(hidden)]
    pub async fn record_runs_for_test(
        &self,
        key: &str,
        run_nos: std::ops::RangeInclusive<i64>,
        ring: u32,
    ) -> Result<()> {
        crate::validate::key(key)?;
        let now = DateTime::<Utc>::UNIX_EPOCH;
        let items: Vec<super::Finish> = run_nos
            .map(|run_no| super::Finish {
                key: key.to_owned(),
                holder: "test-recorder".to_owned(),
                fence: run_no,
                next: super::NextDue::Unchanged,
                report: Some(RunReport {
                    job_name: "test".to_owned(),
                    run_no,
                    scheduled_for: None,
                    started_at: now,
                    outcome: RunOutcome::Succeeded,
                    reason: None,
                    error: None,
                    ring,
                }),
            })
            .collect();
        self.finish_many(&items).await.map(drop)
    }

    /// Releases `lease` with the runtime's batched release statement,
    /// recording nothing: what [`LeaseStore::release`] sent before it had a
    /// statement of its own. For the benchmark that compares the two.
    #[doc(hidden)]
    pub async fn release_batched(&self, lease: &super::Lease) -> Result<bool> {
        let item = super::Finish {
            key: lease.key.clone(),
            holder: lease.holder.clone(),
            fence: lease.fence,
            next: super::NextDue::Unchanged,
            report: None,
        };
        Ok(self.finish_many(&[item]).await?.first().is_some_and(|r| r.released()))
    }

    /// Releases `lease` as the runtime releases a run that succeeded:
    /// the release statement writing the run's history row (run `run_no`,
    /// ring `ring`). For the benchmark that compares it with
    /// [`LeaseStore::release`], which records nothing.
    #[doc(hidden)]
    pub async fn release_recorded(&self, lease: &super::Lease, run_no: i64, ring: u32) -> Result<bool> {
        let item = super::Finish {
            key: lease.key.clone(),
            holder: lease.holder.clone(),
            fence: lease.fence,
            next: super::NextDue::Unchanged,
            report: Some(RunReport {
                job_name: "bench".to_owned(),
                run_no,
                scheduled_for: None,
                started_at: lease.acquired_at,
                outcome: RunOutcome::Succeeded,
                reason: None,
                error: None,
                ring,
            }),
        };
        Ok(self.finish_many(&[item]).await?.first().is_some_and(|r| r.released()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_errors_are_cut_at_a_character_boundary() {
        let long = "é".repeat(HISTORY_ERROR_BYTES);
        let cut = storable_text(long);
        assert!(cut.len() <= HISTORY_ERROR_BYTES, "{}", cut.len());
        assert!(cut.ends_with('…'));
        assert_eq!(storable_text("short".into()), "short");
    }

    #[test]
    fn nul_bytes_are_shown_not_stored() {
        assert_eq!(storable_text("a\0b\0".into()), "a\u{2400}b\u{2400}");
        // A megabyte of NULs: shown, then cut to the column's limit.
        let cut = storable_text("\0".repeat(1 << 20));
        assert!(cut.len() <= HISTORY_ERROR_BYTES && !cut.contains('\0'), "{}", cut.len());
    }
}
