//! The one error type of the crate.

use std::time::Duration;

use crate::cancel::CancelReason;

/// Everything that can go wrong in leasehold.
///
/// Match on the variant to decide what to do: [`Error::StaleFence`] and
/// [`Error::LeaseLost`] mean *stop, someone newer owns this work*;
/// [`Error::Database`] is usually transient; [`Error::InvalidInput`] is a bug
/// or a configuration mistake to fix before retrying.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A value passed to leasehold is out of range. Nothing was sent to the
    /// database.
    #[error("invalid {what} {value}: {problem}")]
    InvalidInput {
        /// What the value is (`"lease key"`, `"lease duration"`, …).
        what: &'static str,
        /// The offending value, as the caller wrote it (shortened if huge).
        value: String,
        /// The rule it breaks and how to fix it.
        problem: String,
    },

    /// The run must stop: it lost its lease (`Stolen`, `Expired`,
    /// `Deadline`: another replica may be running the same job; stop
    /// writing, the work will be redone under a newer fence), or it was
    /// told to stop while it still holds the lease (`Paused`, `Removed`,
    /// `Timeout`: it winds down within its grace, then is released). The
    /// message says which.
    #[error("{}", lease_lost_message(key, holder, *fence, *reason))]
    LeaseLost {
        /// The lease key.
        key: String,
        /// The holder that lost it.
        holder: String,
        /// The fence of the lost tenure.
        fence: i64,
        /// How it was lost.
        reason: CancelReason,
    },

    /// A fenced write was rejected because the resource has already seen a
    /// newer fence: a newer holder of the lease wrote there. Nothing was
    /// written; stop the run.
    #[error(
        "stale fence {fence} for {resource}: it already accepted fence {newer}; \
         a newer holder owns this work, nothing was written"
    )]
    StaleFence {
        /// The resource (fence row or table) that rejected the write.
        resource: String,
        /// The fence the write carried.
        fence: i64,
        /// The newer fence the resource had already accepted.
        newer: i64,
    },

    /// The lease still has less time left than a step needs
    /// (`FenceGuard::ensure`).
    #[error(
        "lease {key:?} has {remaining:?} left but the next step needs {needed:?}: \
         renew more often or use a longer lease"
    )]
    InsufficientLease {
        /// The lease key.
        key: String,
        /// Server-measured time left after the latest renewal.
        remaining: Duration,
        /// What the caller asked for.
        needed: Duration,
    },

    /// leasehold's tables are not in this database.
    #[error(
        "leasehold schema is missing in this database: call leasehold::migrate(&pool), \
         or apply migrations/*.sql with your migration tool, before starting"
    )]
    SchemaMissing,

    /// leasehold's tables exist but are older than this library needs.
    #[error(
        "leasehold schema version {found} in this database is older than this library needs ({needed}): \
         call leasehold::migrate(&pool), or apply the newer migrations/*.sql with your migration tool"
    )]
    SchemaOutdated {
        /// Version recorded in `leasehold_schema_version`.
        found: i32,
        /// Version this library needs.
        needed: i32,
    },

    /// The database was migrated by a newer leasehold than this one.
    #[error(
        "leasehold schema version {found} in the database is newer than this library \
         supports ({supported}): upgrade leasehold in this service"
    )]
    SchemaTooNew {
        /// Version recorded in `leasehold_schema_version`.
        found: i32,
        /// Highest version this library knows.
        supported: i32,
    },

    /// The job's key is not registered in this runtime.
    #[error("no job with key {0:?} is registered in this runtime")]
    UnknownJob(String),

    /// The Prometheus exporter could not start (port taken, bad address,
    /// another recorder installed). `source` is the underlying failure,
    /// when there is one (an I/O or exporter error).
    #[error("metrics exporter: {message}")]
    Metrics {
        /// What failed and what to do about it.
        message: String,
        /// The error it stems from.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    },

    /// A runtime operation (claim, heartbeat, release) did not finish within
    /// its budget, derived from the lease: no pool connection was free, a
    /// row lock was held elsewhere, or the server did not answer. A
    /// connection it held was closed, not returned to the pool. Transient: the runtime retries, and runs stop
    /// at their local deadline if it keeps happening.
    #[error(
        "{operation} did not finish within {limit:?} (no free pool connection, a row lock held \
         elsewhere, or no answer from the server); it was abandoned, and a connection it held was closed. \
         If this repeats, give the pool more connections than the jobs hold at once"
    )]
    Timeout {
        /// What timed out (`"heartbeat"`, `"claim"`, `"release"`).
        operation: &'static str,
        /// The budget it had.
        limit: Duration,
    },

    /// Pooled connections kept coming back inside a transaction: leasehold
    /// closed each one and gave up after `closed` in one call.
    #[error(
        "{closed} pooled connections in a row were inside a transaction: code in this service \
         returns connections to the pool with a transaction open (a raw BEGIN, or a dropped \
         sqlx Pool::begin); leasehold closed them"
    )]
    PoisonedPool {
        /// How many connections were closed in this call.
        closed: usize,
    },

    /// The database failed or could not be reached. Usually transient: the
    /// heartbeat retries it, and callers may retry too.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
}

impl Error {
    /// Builds [`Error::InvalidInput`], shortening huge values for the message.
    pub(crate) fn invalid(what: &'static str, value: impl std::fmt::Debug, problem: impl Into<String>) -> Self {
        let mut value = format!("{value:?}");
        if value.len() > 80 {
            let cut = (0..=77).rev().find(|i| value.is_char_boundary(*i)).unwrap_or(0);
            value.truncate(cut);
            value.push_str("...");
        }
        Error::InvalidInput {
            what,
            value,
            problem: problem.into(),
        }
    }

    /// Builds [`Error::Metrics`].
    #[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
    pub(crate) fn metrics(
        message: impl Into<String>,
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        Error::Metrics {
            message: message.into(),
            source,
        }
    }

    /// True for errors that say "stop: a newer holder owns this work",
    /// including a fenced transaction's `COMMIT` refused because its
    /// tenure had ended (SQLSTATE `LH001`, see
    /// [`FenceGuard::begin_fenced_on`](crate::FenceGuard::begin_fenced_on)).
    pub fn is_fencing(&self) -> bool {
        match self {
            Error::StaleFence { .. } | Error::LeaseLost { .. } => true,
            Error::Database(error) => is_tenure_ended(error),
            _ => false,
        }
    }
}

/// SQLSTATE of the commit check on fenced transactions (F5,
/// `leasehold_fence_tenure_live` in `migrations/0015_commit_check_owner.sql`):
/// the COMMIT of a fenced transaction whose tenure had ended was refused,
/// and nothing it wrote was committed.
pub(crate) const TENURE_ENDED_SQLSTATE: &str = "LH001";

/// Whether `error` is the commit check's refusal (F5).
pub(crate) fn is_tenure_ended(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|e| e.code())
        .is_some_and(|code| code == TENURE_ENDED_SQLSTATE)
}

/// Shorthand for `Result<T, leasehold::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// [`Error::LeaseLost`]'s message: a lost lease warns that a newer tenure
/// may be running; a run told to stop while it holds its lease says why.
fn lease_lost_message(key: &str, holder: &str, fence: i64, reason: CancelReason) -> String {
    let why = match reason {
        CancelReason::Stolen | CancelReason::Expired | CancelReason::Deadline | CancelReason::Shutdown => {
            return format!(
                "lease {key:?} lost ({reason}) by holder {holder} at fence {fence}: stop this run, a newer \
                 tenure may already be running"
            );
        }
        CancelReason::Paused => "an operator paused the key or its job and cancelled its runs",
        CancelReason::Removed => "the key was removed",
        CancelReason::Timeout => "the run went past its time limit",
    };
    format!(
        "run of lease {key:?} stopped ({reason}: {why}) on holder {holder} at fence {fence}: return now; it \
         still holds the lease until it is released, and the key runs again when it is next due"
    )
}

#[cfg(test)]
mod lease_lost_tests {
    use super::*;

    fn lost(reason: CancelReason) -> String {
        Error::LeaseLost {
            key: "billing".to_owned(),
            holder: "web-1".to_owned(),
            fence: 7,
            reason,
        }
        .to_string()
    }

    #[test]
    fn a_lost_lease_warns_of_a_newer_tenure_and_a_stopped_run_says_why_it_stopped() {
        for reason in [CancelReason::Stolen, CancelReason::Expired, CancelReason::Deadline] {
            let text = lost(reason);
            assert!(text.starts_with("lease \"billing\" lost ("), "{text}");
            assert!(text.contains("a newer tenure may already be running"), "{text}");
        }
        for (reason, why) in [
            (CancelReason::Paused, "paused"),
            (CancelReason::Removed, "removed"),
            (CancelReason::Timeout, "past its time limit"),
        ] {
            let text = lost(reason);
            assert!(text.starts_with("run of lease \"billing\" stopped ("), "{text}");
            assert!(text.contains(why) && text.contains("still holds the lease"), "{text}");
            assert!(!text.contains("newer tenure"), "not a lost lease: {text}");
        }
    }
}
