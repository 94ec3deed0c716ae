//! # leasehold
//!
//! Scheduled jobs across the replicas of a service, one replica at a time,
//! on PostgreSQL *leases* — a row with a holder, a server-clock expiry and a
//! fencing token — so that a replica that lost its right to run cannot
//! corrupt anything downstream: writes carrying a stale fence are rejected.
//!
//! The pieces, from the bottom up:
//!
//! - [`migrate`] creates the `leasehold_*` tables (or apply `migrations/*.sql`
//!   with your own tool);
//! - [`LeaseStore`] claims, renews and releases leases, one statement each,
//!   never pinning a connection.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod error;
#[cfg(feature = "prometheus")]
mod exporter;
mod guard;
mod heartbeat;
mod job;
mod lease;
pub mod metrics;
mod migrate;
mod runtime;
mod schedule;
mod tenure;
mod validate;

pub use error::{CancelReason, Error, Result};
pub use guard::{FenceGuard, FencedUpdate};
pub use job::{FencedJob, JobError, JobSettings};
pub use lease::{Claim, Due, Lease, LeaseInfo, LeaseStore, Renewal, RenewedMany};
pub use leasehold_macros::FencedJob;
pub use migrate::{SCHEMA_VERSION, check_schema, migrate};
#[doc(hidden)]
pub use runtime::__private;
pub use runtime::{Faults, Health, Runtime, RuntimeBuilder, ShutdownReport};
pub use schedule::Schedule;
pub use validate::{MAX_KEY_BYTES, MAX_LEASE, MIN_LEASE};
