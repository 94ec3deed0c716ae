//! # leasehold
//!
//! Scheduled jobs across the replicas of a service, one replica at a time,
//! on PostgreSQL *leases* — a row with a holder, a server-clock expiry and a
//! fencing token — so that a replica that lost its right to run cannot
//! corrupt anything downstream: writes carrying a stale fence are rejected.
//!
//! ```no_run
//! use leasehold::{FenceGuard, FencedJob, JobError, Runtime};
//! use sqlx::PgPool;
//!
//! #[derive(FencedJob)]
//! #[job(key = "nightly-reconcile", cron = "0 3 * * *", lease = "60s")]
//! struct NightlyReconcile { db: PgPool }
//!
//! impl NightlyReconcile {
//!     async fn run(&self, guard: FenceGuard) -> Result<(), JobError> {
//!         let mut tx = guard.begin_fenced(&self.db).await?; // rejects a stale fence
//!         sqlx::query("UPDATE ledger SET reconciled = true").execute(&mut *tx).await?;
//!         tx.commit().await?;
//!         Ok(())
//!     }
//! }
//!
//! # async fn demo(pool: PgPool) -> leasehold::Result<()> {
//! let runtime = Runtime::builder(pool.clone())
//!     .register(NightlyReconcile { db: pool.clone() })
//!     .start()
//!     .await?;
//! // ... on SIGTERM:
//! runtime.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! The pieces, from the top down:
//!
//! - [`FencedJob`] (usually derived) declares a job: name, key, schedule,
//!   lease; [`Runtime`] runs the registered jobs on this replica — once per
//!   slot across the fleet, heartbeating, cancelling on loss;
//! - [`JobKind`] declares a kind of job whose keys live in the database
//!   ([`NewKey`], [`Keys::add`](store::Keys::add)):
//!   every replica that registers the kind runs them;
//! - [`FenceGuard`] is a run's tenure: its fence, its cancellation, and the
//!   fenced writes ([`FenceGuard::begin_fenced`], [`FenceGuard::update`]);
//! - [`migrate`] creates the `leasehold_*` tables (or apply
//!   `migrations/*.sql` with your own tool).
//!
//! The rest is in modules, for operators and tools:
//!
//! - [`store`]: [`store::LeaseStore`] claims, renews and
//!   releases leases, one statement each, never pinning a connection —
//!   usable on its own — and reads keys, history and the fleet;
//! - [`operator`]: [`operator::Operator`], the operators' actions
//!   (trigger, pause, resume, release, forget, keys of job kinds), each
//!   recorded in the history;
//! - [`runtime`]: the runtime's settings and reports (connections, health,
//!   shutdown, run outcomes); [`schedule`]: schedules, cron, catch-up;
//!   [`schema`]: the schema version and its check;
//! - [`metrics`] names every metric; `RuntimeBuilder::prometheus` serves
//!   them; `console` (feature `console`) is the web console.
//!
//! MSRV: Rust 1.94 (sqlx 0.9.0 needs it).
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]
// docs.rs builds with `--cfg docsrs` (Cargo.toml's `package.metadata.docs.rs`):
// each feature-gated item then says which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod cancel;
mod connection;
#[cfg(feature = "console")]
pub mod console;
mod error;
mod fast_hash;
mod guard;
mod health;
mod job;
mod key;
mod kind;
mod lease;
pub mod metrics;
mod migrate;
pub mod operator;
mod outcome;
mod plans;
pub mod runtime;
pub mod schedule;
mod tenure;
mod validate;

// What a job author needs, at the root: the job, its settings and guard,
// the runtime that runs it, the errors.
pub use cancel::CancelReason;
pub use error::{Error, Result};
pub use guard::{FenceGuard, FencedUpdate};
pub use job::{FencedJob, JobError, JobSettings};
pub use key::{IntoKey, Key};
pub use kind::JobKind;
pub use lease::NewKey;
pub use leasehold_macros::{FencedJob, JobKind};
pub use migrate::migrate;
pub use runtime::{Runtime, RuntimeBuilder};
pub use schedule::{CatchUp, Schedule};

/// The lease store: the `leasehold_lease` rows read and changed directly,
/// without a runtime — what the CLI, the console and tools build on — and
/// the limits every key, lease and argument is checked against.
pub mod store {
    #[cfg(feature = "test-util")]
    pub use crate::lease::LockedRow;
    pub use crate::lease::{
        Claim, Controls, Due, Fleet, HolderSeen, KeyFilter, KeyPage, KeyState, KeyStatus, Keys, KindStatus, Lease,
        LeaseInfo, LeaseStore, MAX_ARGS_BYTES, NewKey, Records, Renewal, RenewedMany, RunRecord, StoredKey,
    };
    pub use crate::validate::{MAX_KEY_BYTES, MAX_LEASE, MAX_TIMEOUT, MIN_LEASE, MIN_TIMEOUT};
}

/// The schema leasehold's tables follow, and its migrations.
pub mod schema {
    pub use crate::migrate::{SCHEMA_VERSION, check_schema, migrate, schema_version};
}

// The README's and the operations guide's examples, compiled by
// `cargo test --doc` so that they keep matching the API.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

#[doc = include_str!("../docs/operations.md")]
#[cfg(doctest)]
pub struct OperationsDoctests;

/// The sqlx this leasehold is built on (0.9). Its types (`PgPool`,
/// `Transaction`) are the ones leasehold's API takes and returns: use this
/// re-export, or the same sqlx version, in your service.
pub use sqlx;
