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
mod lease;
mod migrate;
mod validate;

pub use error::{CancelReason, Error, Result};
pub use lease::{Claim, Due, Lease, LeaseInfo, LeaseStore, Renewal, RenewedMany};
pub use migrate::{SCHEMA_VERSION, check_schema, migrate};
pub use validate::{MAX_KEY_BYTES, MAX_LEASE, MIN_LEASE};
