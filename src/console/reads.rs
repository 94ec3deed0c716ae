//! The console's share of the database: at most `max_concurrent_reads`
//! requests use it at once, each waiting at most `read_wait` for its turn.
//!
//! Invariants:
//! - a request's statements run only while it holds a permit, and it holds
//!   at most one pool connection at a time (its statements run one after
//!   the other), so the console never has more than the permits' worth of
//!   the pool's connections checked out or waited for;
//! - a request that gets no permit in time, or whose statement the pool
//!   cannot serve (`PoolTimedOut`), is answered with the busy page, never
//!   with the pool's or the database's error text.

use std::future::Future;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::ConsoleOptions;

/// Why a request's database work did not give its answer.
pub(super) enum ReadError {
    /// No turn on the database in time: answer "busy, retry".
    Busy,
    /// The work itself failed.
    Failed(crate::Error),
}

impl From<crate::Error> for ReadError {
    fn from(err: crate::Error) -> Self {
        match err {
            // The pool had no connection for the console in time: the
            // service (or the runtime) is using them, which is the busy
            // case, not a fault of the database.
            crate::Error::Database(sqlx::Error::PoolTimedOut) => ReadError::Busy,
            err => ReadError::Failed(err),
        }
    }
}

/// The permits.
pub(super) struct Reads {
    permits: Semaphore,
    wait: Duration,
}

impl Reads {
    pub(super) fn new(options: &ConsoleOptions) -> Self {
        Reads {
            permits: Semaphore::new(options.max_concurrent_reads.max(1)),
            wait: options.read_wait,
        }
    }

    /// Runs `work` (all of one request's statements) once a permit is
    /// free; [`ReadError::Busy`] if none is within the wait.
    pub(super) async fn run<T>(&self, work: impl Future<Output = crate::Result<T>>) -> Result<T, ReadError> {
        // Waiters are served in arrival order (tokio's semaphore is fair),
        // so a request that waits is not overtaken by later ones.
        let Ok(Ok(_permit)) = tokio::time::timeout(self.wait, self.permits.acquire()).await else {
            return Err(ReadError::Busy);
        };
        Ok(work.await?)
    }
}
