//! The connections leasehold sends its statements on: its own, or borrowed
//! from the service's pool and checked first.
//!
//! A [`Conns`] is one of two kinds:
//!
//! - **Owned** ([`Conns::owned`]): a pool leasehold opened itself and hands
//!   to nobody. Every statement on it is one of leasehold's, each its own
//!   implicit transaction, and a connection interrupted mid-statement is
//!   closed (C2), so no connection of it can ever be found inside a
//!   transaction: the probe below would always answer *idle*, and is
//!   skipped. The service's code can neither poison nor exhaust it.
//! - **Shared** ([`Conns::shared`]): the service's pool. Every statement is
//!   preceded by the probe (C1).
//!
//! A shared pool is the service's, not ours: its code may hand a connection back
//! inside a transaction (a `raw_sql("BEGIN")`, or sqlx 0.9.0's `Pool::begin`
//! dropped while `BEGIN` is in flight — upstream issue #4393), and sqlx's
//! return-to-pool check does not look at the transaction status. A lease
//! statement run there would not commit: it would hold row locks, then be
//! rolled back with someone else's work.
//!
//! # Invariants (docs/design.md §4, C1–C3)
//!
//! 1. (C1) Every leasehold statement runs on a connection whose last
//!    `ReadyForQuery` said *idle* (`I`): each one is its own implicit
//!    transaction and commits when it returns. On an owned pool that holds
//!    by construction; on a shared one it is checked. The probe is an empty simple
//!    query sent as a custom `BEGIN` statement: sqlx then reads the status
//!    byte of the `ReadyForQuery` that answers it, and reports
//!    [`sqlx::Error::BeginFailed`] exactly when the connection is *not*
//!    inside a transaction. An empty query starts nothing, runs nothing and
//!    is not a statement in `pg_stat_statements`.
//! 2. (C1) A connection found inside a transaction (`T`) is closed, never handed
//!    back: closing it makes the server roll the foreign transaction back.
//!    A connection inside an *aborted* transaction (`E`) looks idle to the
//!    probe, but then every statement fails with SQLSTATE 25P02 without
//!    effect: that answer marks it poisoned too. Both are counted in
//!    [`crate::metrics::names::POISONED_CONNECTIONS`], logged at WARN, and
//!    the statement is retried on another connection.
//! 3. (C2) A connection whose statement was interrupted (its future dropped by a
//!    timeout or a cancelled caller) is closed rather than returned, so a
//!    statement stuck behind a row lock holds no pool slot.
//!
//! Why this is sound under the extended query protocol and PgBouncer: the
//! status byte is the server's own view at the end of the previous message
//! cycle, and nothing else can write to the connection while we hold it.
//! In-SQL guards such as `statement_timestamp() = transaction_timestamp()`
//! are not: with the extended protocol the transaction starts at `Bind` and
//! the statement at `Execute`, so the two differ inside an implicit
//! transaction too (measured: 0 equal of 2,000, up to 6.8 ms apart). With
//! PgBouncer in transaction mode the client sees the status of the server
//! connection it is linked to; PgBouncer keeps that link exactly while the
//! status is not idle, and only gives out server connections that are idle,
//! so a statement sent after an idle status starts its own transaction.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{Connection, PgConnection, PgPool, Postgres, Transaction};

use crate::error::{Error, Result};
use crate::metrics;

/// How many poisoned connections one operation closes before giving up: a
/// pool whose every connection is poisoned is refilled with fresh ones, so
/// this is only reached if something keeps poisoning them as fast.
pub(crate) const MAX_POISONED_PER_CALL: usize = 16;

/// Counts the poisoned connections one lease store (and the runs of its
/// runtime) closed, for `Runtime::health`. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct PoisonCount(Arc<AtomicU64>);

impl PoisonCount {
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The pool leasehold runs statements on, and whether it must probe each
/// connection first. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Conns {
    pool: PgPool,
    poisoned: PoisonCount,
    /// `false` only for a pool leasehold owns (see the module docs).
    probe: bool,
}

impl Conns {
    /// The service's pool, or any pool others may use too: every statement
    /// is probed (C1).
    pub(crate) fn shared(pool: PgPool, poisoned: PoisonCount) -> Self {
        Conns {
            pool,
            poisoned,
            probe: true,
        }
    }

    /// A pool only leasehold's statements ever use: no probe.
    pub(crate) fn owned(pool: PgPool) -> Self {
        Conns {
            pool,
            poisoned: PoisonCount::default(),
            probe: false,
        }
    }

    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub(crate) fn poisoned(&self) -> &PoisonCount {
        &self.poisoned
    }

    pub(crate) fn is_owned(&self) -> bool {
        !self.probe
    }

    /// How many times a statement that may be sent again (a renewal) is
    /// retried at once after finding its connection gone: an owned pool
    /// does not ping idle connections before handing them out, so after a
    /// server restart each of its idle connections fails one statement
    /// before it is discarded. A shared pool is the service's to configure
    /// (sqlx pings by default), and is not retried.
    pub(crate) fn retries_after_lost_connection(&self) -> u32 {
        if self.probe {
            0
        } else {
            self.pool.options().get_max_connections()
        }
    }
}

/// A pooled connection that was idle when checked. Dropped while a
/// statement is in flight, it is closed instead of returned (C2).
pub(crate) struct Checked {
    conn: Option<PoolConnection<Postgres>>,
    in_flight: bool,
    count: PoisonCount,
}

impl Drop for Checked {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.as_mut()
            && self.in_flight
        {
            conn.close_on_drop();
        }
    }
}

impl Checked {
    fn conn(&mut self) -> &mut PgConnection {
        match self.conn.as_mut() {
            Some(conn) => conn,
            // `conn` is only taken by `into_inner`, which consumes `self`.
            None => unreachable!("a checked connection is used after being given away"),
        }
    }

    /// The connection, for one statement: until [`Checked::finish`], a drop
    /// closes it.
    pub(crate) fn statement(&mut self) -> &mut PgConnection {
        self.in_flight = true;
        self.conn()
    }

    /// The statement's result, or `None` if the connection turned out to be
    /// inside an aborted transaction (then it is closed, nothing took
    /// effect, and the caller retries on another connection).
    pub(crate) fn finish<T>(mut self, result: sqlx::Result<T>) -> Option<Result<T>> {
        match result {
            Err(error) if in_failed_transaction(&error) => {
                self.discard_poisoned("in_failed_transaction");
                None
            }
            result => {
                self.in_flight = false;
                Some(result.map_err(Error::from))
            }
        }
    }

    fn into_inner(mut self) -> Option<PoolConnection<Postgres>> {
        self.conn.take()
    }

    /// Closes a connection found inside someone else's transaction.
    fn discard_poisoned(mut self, state: &'static str) {
        self.count.0.fetch_add(1, Ordering::Relaxed);
        poisoned(state);
        if let Some(conn) = self.conn.as_mut() {
            conn.close_on_drop();
        }
    }
}

fn poisoned(state: &'static str) {
    metrics::poisoned_connection(state);
    tracing::warn!(
        state,
        "a pooled connection came back to the pool inside a transaction (service code that left a \
         transaction open, or a dropped sqlx Pool::begin: sqlx issue #4393); leasehold closed it \
         and retried on another connection"
    );
}

/// Takes a connection from `conns` that is not inside a transaction: on a
/// shared pool, probing each and closing every poisoned one it meets (C1);
/// on an owned pool, as it comes.
///
/// Cancel-safe: dropped during the probe, the connection is closed.
pub(crate) async fn acquire(conns: &Conns) -> Result<Checked> {
    for _ in 0..MAX_POISONED_PER_CALL {
        let mut checked = Checked {
            conn: Some(conns.pool.acquire().await?),
            in_flight: true,
            count: conns.poisoned.clone(),
        };
        if !conns.probe {
            checked.in_flight = false;
            return Ok(checked);
        }
        // Ok(_) means the connection was already in a transaction; dropping
        // the returned handle queues a ROLLBACK, and the connection is then
        // closed anyway.
        let probe = checked.conn().begin_with("").await.map(drop);
        match probe {
            Err(sqlx::Error::BeginFailed) => {
                checked.in_flight = false;
                return Ok(checked);
            }
            Ok(()) | Err(sqlx::Error::InvalidSavePointStatement) => checked.discard_poisoned("in_transaction"),
            Err(other) => return Err(other.into()),
        }
    }
    Err(too_many_poisoned())
}

pub(crate) fn too_many_poisoned() -> Error {
    Error::PoisonedPool {
        closed: MAX_POISONED_PER_CALL,
    }
}

/// Whether `error` says the connection itself is gone (the server closed
/// it: a restart, `pg_terminate_backend`, a dropped network path) rather
/// than anything about the statement. sqlx discards such a connection when
/// it comes back to the pool.
pub(crate) fn connection_lost(error: &Error) -> bool {
    match error {
        Error::Database(sqlx::Error::Io(_)) => true,
        Error::Database(error) => error
            .as_database_error()
            .and_then(|e| e.code())
            // admin_shutdown, crash_shutdown
            .is_some_and(|code| code == "57P01" || code == "57P02"),
        _ => false,
    }
}

/// SQLSTATE 25P02: the connection is inside an aborted transaction.
fn in_failed_transaction(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|e| e.code())
        .is_some_and(|code| code == "25P02")
}

/// Runs one leasehold statement on a checked connection of `$conns` (a
/// [`Conns`]), retrying on another connection if this one turns out to be
/// poisoned: `run!(conns, |conn| sqlx::query(..).execute(conn))` evaluates
/// to `Result<T>`.
///
/// A macro rather than a function taking a closure: the statement borrows
/// its arguments and the connection, and such a closure cannot be proven
/// `Send` for every connection lifetime, which the runtime's tasks need.
///
/// Cancel-safe: the statement either committed or did not, and a
/// connection dropped mid-statement is closed rather than returned.
macro_rules! run {
    ($conns:expr, |$conn:ident| $statement:expr) => {
        $crate::connection::run!($conns, settling None, |$conn| $statement)
    };
    // `settling Some(text)`: `$statement` runs the prepared statement
    // `text`. The first time it runs on a connection — any connection of
    // the service's pool, or one of leasehold's own opened before the
    // schema existed (`lease::session` prepares and settles the others as
    // they open) — its plans are settled there (`plans::settle_if_new`).
    ($conns:expr, settling $text:expr, |$conn:ident| $statement:expr) => {{
        let text: Option<&'static str> = $text;
        let mut outcome = None;
        for _ in 0..$crate::connection::MAX_POISONED_PER_CALL {
            let mut checked = match $crate::connection::acquire($conns).await {
                Ok(checked) => checked,
                Err(error) => {
                    outcome = Some(Err(error));
                    break;
                }
            };
            let cached = text.map(|_| sqlx::Connection::cached_statements_size(checked.statement()));
            let $conn = checked.statement();
            let result = $statement.await;
            if let (Some(text), Some(cached), Ok(_)) = (text, cached, &result) {
                $crate::plans::settle_if_new(checked.statement(), cached, text).await;
            }
            if let Some(done) = checked.finish(result) {
                outcome = Some(done);
                break;
            }
        }
        outcome.unwrap_or_else(|| Err($crate::connection::too_many_poisoned()))
    }};
}
pub(crate) use run;

/// [`run!`] for a statement that is safe to send twice (it changes nothing
/// the second time, or nothing at all): a connection found gone is
/// replaced at once, up to [`Conns::retries_after_lost_connection`] times.
/// After a server restart or a mass `pg_terminate_backend`, every idle
/// connection of an owned pool is dead and each fails one statement before
/// sqlx discards it; the runtime's liveness session must be registered
/// again within its grace, so the statements on that path cannot wait for
/// a later retry.
macro_rules! run_resending {
    ($conns:expr, |$conn:ident| $statement:expr) => {
        $crate::connection::run_resending!($conns, settling None, |$conn| $statement)
    };
    ($conns:expr, settling $text:expr, |$conn:ident| $statement:expr) => {{
        let mut retries = ($conns).retries_after_lost_connection();
        loop {
            match $crate::connection::run!($conns, settling $text, |$conn| $statement) {
                Err(error) if retries > 0 && $crate::connection::connection_lost(&error) => retries -= 1,
                result => break result,
            }
        }
    }};
}
pub(crate) use run_resending;

/// Opens a transaction on a checked connection of `conns`.
///
/// Cancel-safe in fact, unlike sqlx 0.9.0's `Pool::begin`: the `BEGIN`
/// round trip runs in a task of its own, so the caller's future can be
/// dropped at any point without leaving an open transaction on a pooled
/// connection. A transaction the caller no longer waits for is dropped by
/// that task, which rolls it back (sqlx queues the `ROLLBACK` and flushes it
/// before the connection is reused).
pub(crate) async fn begin(conns: &Conns) -> Result<Transaction<'static, Postgres>> {
    let conns = conns.clone();
    let task = tokio::spawn(async move {
        // A `BEGIN` that found its connection gone began nothing: it is
        // sent again on another (`run_resending!`).
        let mut retries = conns.retries_after_lost_connection();
        loop {
            let checked = acquire(&conns).await?;
            let Some(conn) = checked.into_inner() else {
                unreachable!("a checked connection always holds one");
            };
            // `Transaction::begin` is what `Pool::begin` runs, on a
            // connection we checked first.
            match Transaction::begin(conn, None).await.map_err(Error::from) {
                Err(error) if retries > 0 && connection_lost(&error) => retries -= 1,
                result => break result,
            }
        }
    });
    match task.await {
        Ok(result) => result,
        Err(join) => Err(Error::Database(sqlx::Error::Protocol(format!(
            "opening a transaction was interrupted: {join}"
        )))),
    }
}

/// Runs `operation` with a time limit: an operation of the runtime never
/// waits longer than its budget for a pool connection, a row lock or an
/// answer, so one stuck statement cannot hold every later tick.
pub(crate) async fn bounded<T>(
    limit: Duration,
    what: &'static str,
    operation: impl Future<Output = Result<T>>,
) -> Result<T> {
    match tokio::time::timeout(limit, operation).await {
        Ok(result) => result,
        Err(_) => Err(Error::Timeout { operation: what, limit }),
    }
}
