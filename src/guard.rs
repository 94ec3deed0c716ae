//! [`FenceGuard`]: a run's proof of tenure, and the fenced writes that make
//! a stale run harmless.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgArguments;
use sqlx::{Arguments, Encode, PgPool, Postgres, Transaction, Type};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::cancel::CancelReason;
use crate::connection;
use crate::error::{Error, Result};
use crate::lease::StoredArgs;
use crate::lease::fence::{self, Advance, Set};
use crate::tenure::Tenure;
use crate::{metrics, validate};

/// How long a fenced transaction's fence advance may wait for the
/// resource's row before leasehold says so in a WARN line: before sqlx's
/// own slow-statement warning (1 s by default), which names neither the key
/// nor the fence.
const FENCE_WAIT_LOGGED: Duration = Duration::from_millis(500);

/// A run's tenure: its lease key, holder and fencing token, its
/// cancellation, and fenced writes.
///
/// Every run gets a new guard with a new fence (invariant 5), so "same
/// fence" downstream means "same run". Cloning is cheap; clones share the
/// same tenure.
///
/// A fenced resource (a fence row, or a table's `last_fence` column) must
/// belong to **one** lease key: fences are ordered within a key, not across
/// keys. The default resource of [`FenceGuard::begin_fenced`] is the key.
///
/// For downstreams that are not PostgreSQL (an HTTP API, an object store),
/// send [`FenceGuard::fence`] along with each request and have the receiver
/// keep the highest fence it has seen per key and refuse lower ones — the
/// same rule as the helpers below.
#[derive(Clone)]
pub struct FenceGuard {
    tenure: Arc<Tenure>,
}

impl std::fmt::Debug for FenceGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FenceGuard")
            .field("job", &self.tenure.job)
            .field("key", &self.tenure.key)
            .field("holder", &self.tenure.holder)
            .field("fence", &self.tenure.fence)
            .field("reason", &self.tenure.reason())
            .finish()
    }
}

impl FenceGuard {
    pub(crate) fn new(tenure: Arc<Tenure>) -> Self {
        FenceGuard { tenure }
    }

    /// The fencing token of this run. Greater than every fence of earlier
    /// runs of the same key.
    pub fn fence(&self) -> i64 {
        self.tenure.fence
    }

    /// The lease key.
    pub fn key(&self) -> &str {
        &self.tenure.key
    }

    /// For a key of a [`JobKind`](crate::JobKind): the version of the
    /// stored arguments this run was started with (1 when added, one more
    /// per [`update_key`](crate::store::Keys::update)). An update while
    /// the run goes on does not change it: the run keeps its arguments, and
    /// the next run starts with the new ones. `None` for other jobs.
    ///
    /// ```no_run
    /// # fn demo(guard: leasehold::FenceGuard) {
    /// tracing::info!(key = guard.key(), args_version = ?guard.args_version(), "run started");
    /// # }
    /// ```
    pub fn args_version(&self) -> Option<i64> {
        self.tenure.args.as_ref().map(|args| args.version)
    }

    /// The stored key's arguments this run starts with, as its claim read
    /// them (`None`: not a stored key, or removed before the claim).
    pub(crate) fn stored_args(&self) -> Option<&StoredArgs> {
        self.tenure.args.as_ref()
    }

    /// This replica's holder id.
    pub fn holder(&self) -> &str {
        &self.tenure.holder
    }

    /// The job's name (the metrics label).
    pub fn job(&self) -> &str {
        &self.tenure.job
    }

    /// The schedule slot this run is for (server time), or `None` for a
    /// run that is not for a slot: a trigger ahead of the next slot, or a
    /// manual job. While catching up missed slots
    /// ([`CatchUp::All`](crate::CatchUp::All)) each run gets its own, oldest
    /// first — use it as the run's logical time ("bill the hour ending at
    /// `slot`"), not the wall clock.
    ///
    /// ```no_run
    /// # async fn demo(guard: leasehold::FenceGuard) {
    /// let period_end = guard.slot().unwrap_or_else(|| guard.started_at());
    /// # let _ = period_end; }
    /// ```
    pub fn slot(&self) -> Option<DateTime<Utc>> {
        self.tenure.slot()
    }

    /// When this run's lease was claimed, by the server clock.
    pub fn started_at(&self) -> DateTime<Utc> {
        self.tenure.acquired_at
    }

    /// Server-side expiry after the latest successful renewal.
    pub fn expires_at(&self) -> DateTime<Utc> {
        self.tenure.expires_at()
    }

    /// Time left before the local safety deadline, measured on the local
    /// monotonic clock from the latest renewal.
    pub fn remaining(&self) -> Duration {
        self.tenure.remaining()
    }

    /// Resolves when the run is cancelled (lease lost, deadline, shutdown,
    /// pause, removal, its time limit: [`reason`](FenceGuard::reason) says which).
    /// Cancel-safe.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.tenure.token().cancelled()
    }

    /// Whether the run has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.tenure.token().is_cancelled()
    }

    /// Why the run was cancelled, once it was.
    pub fn reason(&self) -> Option<CancelReason> {
        self.tenure.reason()
    }

    /// A child token, cancelled with the run, to hand to code that takes a
    /// `CancellationToken`.
    pub fn token(&self) -> CancellationToken {
        self.tenure.token().child_token()
    }

    /// `Ok` while the run may go on; [`Error::LeaseLost`] once the lease was
    /// lost (stolen, expired, or past the local deadline) or the run was
    /// told to stop (paused, removed, past its time limit: the error's
    /// reason says which). A run cancelled for shutdown still holds its
    /// lease and may finish its writes.
    pub fn check(&self) -> Result<()> {
        match self.tenure.reason() {
            None | Some(CancelReason::Shutdown) => Ok(()),
            Some(reason) => Err(self.lost(reason)),
        }
    }

    fn lost(&self, reason: CancelReason) -> Error {
        Error::LeaseLost {
            key: self.tenure.key.clone(),
            holder: self.tenure.holder.clone(),
            fence: self.tenure.fence,
            reason,
        }
    }

    /// Confirms the lease has at least `needed` left before a step that
    /// cannot be fenced, renewing it now if it has less. Fails with
    /// [`Error::InsufficientLease`] if even a fresh renewal cannot give that
    /// much, or [`Error::LeaseLost`] if the lease is gone.
    ///
    /// Cancel-safe: dropping it at most skips a renewal.
    pub async fn ensure(&self, needed: Duration) -> Result<()> {
        self.check()?;
        if self.remaining() >= needed {
            return Ok(());
        }
        let t = &self.tenure;
        let sent = tokio::time::Instant::now();
        let renewal = t.store.renew_each(&t.holder, &[(&t.key, t.fence, t.ttl)]).await?;
        let mine = renewal.renewed.iter().find(|r| r.key == t.key && r.fence == t.fence);
        match mine {
            Some(renewed) => t.renewed(renewed, sent),
            // The row is locked elsewhere: still ours, just not renewed now.
            None if !renewal.busy.is_empty() => {}
            None => {
                let reason = t.loss_reason();
                t.lose(reason);
                return Err(self.lost(reason));
            }
        }
        let remaining = self.remaining();
        if remaining < needed {
            return Err(Error::InsufficientLease {
                key: self.tenure.key.clone(),
                remaining,
                needed,
            });
        }
        Ok(())
    }

    /// Opens a transaction fenced on the job's key: see
    /// [`FenceGuard::begin_fenced_on`].
    pub async fn begin_fenced(&self, pool: &PgPool) -> Result<Transaction<'static, Postgres>> {
        self.begin_fenced_on(pool, &self.tenure.key).await
    }

    /// Opens a transaction whose first statement checks and advances the
    /// fence of `resource` (a row in `leasehold_fence`) and keeps that row
    /// locked until commit. Every write in the transaction, to any table, is
    /// then fenced: if a newer run has already written to `resource`, this
    /// returns [`Error::StaleFence`], the transaction is rolled back and
    /// nothing is written. Writes of one run share its fence, so a run may
    /// open as many fenced transactions as it likes.
    ///
    /// A stale fence also cancels the run (a newer holder exists) and is
    /// counted in `leasehold_fence_rejections_total`.
    ///
    /// **The transaction ends with the tenure (F5)**, whatever this process
    /// does — frozen by a pause or a stopped VM, partitioned, dead behind a
    /// half-open connection:
    ///
    /// - if the tenure has already ended when the transaction begins, this
    ///   returns [`Error::LeaseLost`] and cancels the run;
    /// - its `COMMIT` is checked on the server: if the tenure no longer
    ///   holds its lease at that instant (expired, taken over, revoked),
    ///   the commit fails with SQLSTATE `LH001` and nothing the transaction
    ///   wrote is committed ([`Error::is_fencing`] is true for that error
    ///   once converted into an [`Error`]);
    /// - the server ends the transaction (closing its connection) once it
    ///   has sat idle — no statement running — for a whole lease, so a
    ///   frozen holder keeps the resource locked from a newer run for at
    ///   most one lease after its last statement. Keep slow work that is not
    ///   a database statement (an HTTP call) outside the transaction.
    ///
    /// The wait for the resource's row lock is recorded in
    /// `leasehold_fence_wait_seconds`; one that lasts half a second is
    /// logged (WARN, with the key, the fence and the resource, and an INFO
    /// line when it is over), and one in progress for longer than a quarter
    /// of the lease shows in [`Runtime::health`](crate::Runtime::health).
    /// sqlx logs the same statement as a `slow statement` after 1 s; quiet
    /// it with `sqlx::query=error` in your log filter, or raise its
    /// threshold with `ConnectOptions::log_slow_statements`.
    ///
    /// The connection is checked before `BEGIN`: one that service code left
    /// inside a transaction is closed and another one taken.
    ///
    /// Cancel-safe, at every await: dropped before it returns, it leaves no
    /// transaction open on any pooled connection (the `BEGIN` round trip
    /// runs in a task of its own, unlike sqlx 0.9.0's `Pool::begin`, which
    /// can return a connection to the pool inside a transaction — sqlx issue
    /// #4393); once it has returned, dropping the transaction rolls it back.
    ///
    /// ```no_run
    /// # async fn demo(guard: leasehold::FenceGuard, pool: sqlx::PgPool) -> Result<(), leasehold::JobError> {
    /// let mut tx = guard.begin_fenced_on(&pool, "ledger").await?;
    /// sqlx::query("UPDATE ledger SET balance = balance + 1 WHERE id = 7").execute(&mut *tx).await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn begin_fenced_on(&self, pool: &PgPool, resource: &str) -> Result<Transaction<'static, Postgres>> {
        validate::resource(resource)?;
        let t = &self.tenure;
        // The job's pool is the service's: probed, whatever the runtime's
        // own statements run on.
        let conns = connection::Conns::shared(pool.clone(), t.store.poisoned().clone());
        let mut tx = connection::begin(&conns).await?;
        let tenure = fence::Tenure {
            key: &t.key,
            fence: t.fence,
            lease: t.ttl,
        };
        let waiting = t.fence_wait();
        let advance = {
            let advance = fence::advance(&mut tx, resource, tenure);
            tokio::pin!(advance);
            tokio::select! {
            biased;
            done = &mut advance => done,
            () = tokio::time::sleep(FENCE_WAIT_LOGGED) => {
                tracing::warn!(key = %t.key, fence = t.fence, resource = ?resource, waited_ms = FENCE_WAIT_LOGGED.as_millis() as u64,
                    "fenced transaction waits for the resource's row: an older tenure's fenced transaction on it is \
                     still open (the server ends it once it sits idle for a whole lease)");
                let done = advance.await;
                tracing::info!(key = %t.key, fence = t.fence, resource = ?resource,
                    waited_ms = u64::try_from(waiting.waited().as_millis()).unwrap_or(u64::MAX), "fence wait over");
                done
            }
            }
        };
        drop(waiting);
        match advance? {
            Advance::Accepted => Ok(tx),
            Advance::Newer(newer) => {
                tx.rollback().await?;
                Err(self.rejected(format!("fenced resource {resource:?}"), newer))
            }
            Advance::Ended => {
                tx.rollback().await?;
                Err(self.ended())
            }
        }
    }

    /// A fenced `UPDATE` of `table`, whose rows carry a `last_fence BIGINT`
    /// column:
    /// `UPDATE table SET …, last_fence = fence WHERE … AND last_fence <= fence`.
    ///
    /// Identifiers are validated and quoted; values are always bound
    /// parameters. A row that a newer run already wrote gives
    /// [`Error::StaleFence`] (and cancels this run), distinct from "no row
    /// matched" (`Ok(0)`). The statement also checks that this run's tenure
    /// still holds its lease on the server clock when it starts, so a run
    /// resumed after its lease ended writes nothing even where no newer run
    /// has written yet ([`Error::LeaseLost`]).
    ///
    /// [`set`](FencedUpdate::set) assigns a value;
    /// [`add`](FencedUpdate::add) adds to the column's current value
    /// (`balance = balance + $n`), computed by the server on the row it
    /// locked, so concurrent increments all count:
    ///
    /// ```no_run
    /// # async fn demo(guard: leasehold::FenceGuard, pool: sqlx::PgPool) -> leasehold::Result<()> {
    /// let updated = guard
    ///     .update("accounts")
    ///     .add("balance", 20_i64) // balance = balance + 20
    ///     .set("status", "billed")
    ///     .filter("id", 7_i64)
    ///     .execute(&pool)
    ///     .await?;
    /// assert_eq!(updated, 1);
    /// # Ok(()) }
    /// ```
    ///
    /// One statement on one table's matching rows is all it can write. Use
    /// [`begin_fenced`](Self::begin_fenced) instead when the new value
    /// depends on something read first (reading a balance and then
    /// `.set`ting it loses any write made in between), when several
    /// statements or tables must change together, or when the write must
    /// happen once per slot even if the run is redone: a run redone under a
    /// newer fence after its lease was lost repeats its `add`s, while a
    /// transaction can record the slot it applied (`guard.slot()`) and skip
    /// it the second time.
    pub fn update(&self, table: &str) -> FencedUpdate<'_> {
        FencedUpdate {
            guard: self,
            table: table.to_owned(),
            sets: Vec::new(),
            filters: Vec::new(),
            filter_args: PgArguments::default(),
            set_values: Vec::new(),
            error: quote_ident("table", table).err(),
        }
    }

    /// The tenure has ended on the server clock (F5): cancel the run and
    /// say so.
    fn ended(&self) -> Error {
        let t = &self.tenure;
        let reason = t.loss_reason();
        t.lose(reason);
        self.lost(reason)
    }

    /// Records a stale-fence rejection: log, count, cancel the run.
    fn rejected(&self, resource: String, newer: i64) -> Error {
        let t = &self.tenure;
        tracing::error!(job = %t.job, key = %t.key, holder = %t.holder, fence = t.fence, newer, %resource,
            "fenced write rejected: the resource has accepted a newer fence (a newer run of this key, or an \
             operator's `leasehold revoke --force`); cancelling this run");
        metrics::fence_rejected(&t.job);
        t.lose(CancelReason::Stolen);
        Error::StaleFence {
            resource,
            fence: t.fence,
            newer,
        }
    }
}

/// A value to bind later, type-erased so one builder holds many types.
type Bind = Box<dyn FnOnce(&mut PgArguments) -> std::result::Result<(), sqlx::error::BoxDynError> + Send>;

/// A fenced `UPDATE` being built by [`FenceGuard::update`].
#[must_use = "a fenced update does nothing until `.execute()`"]
pub struct FencedUpdate<'g> {
    guard: &'g FenceGuard,
    table: String,
    sets: Vec<Set>,
    filters: Vec<String>,
    filter_args: PgArguments,
    set_values: Vec<Bind>,
    error: Option<Error>,
}

impl std::fmt::Debug for FencedUpdate<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedUpdate")
            .field("table", &self.table)
            .field("sets", &self.sets)
            .field("filters", &self.filters)
            .finish_non_exhaustive()
    }
}

impl<'g> FencedUpdate<'g> {
    /// Sets `column` to `value` (bound as a parameter).
    pub fn set<T>(self, column: &str, value: T) -> Self
    where
        T: for<'q> Encode<'q, Postgres> + Type<Postgres> + Send + 'static,
    {
        self.write(column, Set::Assign, value)
    }

    /// Adds `value` (bound as a parameter) to `column`:
    /// `column = column + value`, on the value the row has when the update
    /// locks it, so increments running at the same time all count. A
    /// negative value subtracts; a `NULL` column stays `NULL` (SQL's `+`).
    /// The column's type must have a `+` with `value`'s type (an `INT`
    /// column takes an `i64`: the sum is cast back on assignment).
    pub fn add<T>(self, column: &str, value: T) -> Self
    where
        T: for<'q> Encode<'q, Postgres> + Type<Postgres> + Send + 'static,
    {
        self.write(column, Set::Add, value)
    }

    fn write<T>(mut self, column: &str, set: fn(String) -> Set, value: T) -> Self
    where
        T: for<'q> Encode<'q, Postgres> + Type<Postgres> + Send + 'static,
    {
        match quote_ident("column", column) {
            Ok(col) if col == "\"last_fence\"" => {
                self.error.get_or_insert(Error::invalid(
                    "column",
                    column,
                    "last_fence is set by the guard itself",
                ));
            }
            Ok(col) => {
                self.sets.push(set(col));
                self.set_values.push(Box::new(move |args| args.add(value)));
            }
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
        self
    }

    /// Adds `column = value` to the `WHERE` clause (all filters are ANDed).
    pub fn filter<T>(mut self, column: &str, value: T) -> Self
    where
        T: for<'q> Encode<'q, Postgres> + Type<Postgres> + Send + 'static,
    {
        match quote_ident("column", column) {
            Ok(col) => {
                if let Err(e) = self.filter_args.add(value) {
                    self.error
                        .get_or_insert(Error::invalid("filter value", column, e.to_string()));
                }
                self.filters.push(col);
            }
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
        self
    }

    /// Runs the update on a pooled connection; returns the number of rows
    /// updated. [`Error::StaleFence`] if a matching row already carries a
    /// newer fence; [`Error::LeaseLost`] if the run's tenure no longer holds
    /// its lease when the statement starts (F5: nothing is written, and the
    /// run is cancelled).
    ///
    /// Cancel-safe in the sense that the update either committed or did not.
    pub async fn execute(self, pool: &PgPool) -> Result<u64> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.sets.is_empty() {
            return Err(Error::invalid(
                "fenced update",
                &self.table,
                "it sets no column: call .set(column, value) or .add(column, value)",
            ));
        }
        let table = quote_ident("table", &self.table)?;
        let sql = fence::fenced_update(&table, &self.sets, &self.filters);
        let mut args = self.filter_args.clone();
        for bind in self.set_values {
            bind(&mut args).map_err(|e| Error::invalid("set value", &self.table, e.to_string()))?;
        }
        let (fence, key) = (self.guard.fence(), self.guard.key().to_owned());
        args.add(fence)
            .and_then(|()| args.add(key.clone()))
            .map_err(|e| Error::invalid("fence", fence, e.to_string()))?;
        let conns = connection::Conns::shared(pool.clone(), self.guard.tenure.store.poisoned().clone());
        let done = connection::run!(&conns, |conn| sqlx::query_with(
            sqlx::AssertSqlSafe(sql.update.clone()),
            args.clone()
        )
        .execute(conn))?;
        if done.rows_affected() > 0 {
            return Ok(done.rows_affected());
        }
        // Nothing updated: no such row, a newer fence, or the tenure ended.
        // Only this (rare) path pays for a second statement.
        let mut read_args = self.filter_args.clone();
        read_args
            .add(fence)
            .and_then(|()| read_args.add(key))
            .map_err(|e| Error::invalid("fence", fence, e.to_string()))?;
        let (newest, live): (Option<i64>, bool) = connection::run!(&conns, |conn| {
            sqlx::query_as_with(sqlx::AssertSqlSafe(sql.newest.clone()), read_args.clone()).fetch_one(conn)
        })?;
        match newest {
            Some(newer) if newer > fence => Err(self.guard.rejected(format!("table {table}"), newer)),
            _ if !live => Err(self.guard.ended()),
            _ => Ok(0),
        }
    }
}

/// Validates an identifier and quotes it for SQL (`"` doubled), so names
/// with spaces, capitals or quotes work and nothing can be injected.
fn quote_ident(what: &'static str, ident: &str) -> Result<String> {
    if ident.is_empty() || ident.len() > 63 || ident.contains('\0') {
        return Err(Error::invalid(
            what,
            ident,
            "identifiers must be 1 to 63 bytes without NUL (PostgreSQL's limit); \
             pass one name, unquoted, and set search_path for other schemas",
        ));
    }
    Ok(format!("\"{}\"", ident.replace('"', "\"\"")))
}

#[cfg(test)]
mod tests {
    use super::quote_ident;

    #[test]
    fn identifiers_are_quoted_never_injected() {
        assert_eq!(quote_ident("table", "accounts").unwrap(), "\"accounts\"");
        assert_eq!(quote_ident("table", "my table").unwrap(), "\"my table\"");
        assert_eq!(
            quote_ident("table", "x\"; DROP TABLE y; --").unwrap(),
            "\"x\"\"; DROP TABLE y; --\""
        );
        assert!(quote_ident("table", "").is_err());
        assert!(quote_ident("table", &"t".repeat(64)).is_err());
    }
}
