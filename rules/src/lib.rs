//! The rules leasehold checks job settings against, stated once.
//!
//! **Internal crate, not a public API** (the `#[doc(hidden)]` of crates):
//! an implementation detail shared by `leasehold` (which
//! checks settings when the runtime starts and on every call to the lease
//! store) and `leasehold-macros` (which checks `#[job(...)]` at compile time),
//! the way `sqlx-macros-core` serves `sqlx` and `sqlx-macros`. It has no
//! stability guarantee of its own: depend on `leasehold`, which re-exports
//! what is public ([`MIN_LEASE`], [`MAX_LEASE`], [`MAX_KEY_BYTES`],
//! [`MAX_CATCH_UP`]).
//!
//! Plain Rust (no proc-macro, no database, no runtime), so the proc-macro
//! crate can call it at compile time. It holds:
//!
//! - the limits and the `JobSettings` defaults, as constants;
//! - the duration syntax of `#[job(...)]` ([`parse_duration`],
//!   [`format_duration`]);
//! - identifier checks for keys, holder ids and job names ([`identifier`]);
//! - the bounds of a lease ([`lease`]), of a schedule period ([`period`])
//!   and of a run's time limit ([`run_timeout`]),
//!   and the relations between lease, heartbeat, margin and retry backoff
//!   ([`Timing`]);
//! - cron validity ([`cron`], [`cron_fires`]), parsed by the one `croner`
//!   both sides use;
//! - time-zone lookup with a "did you mean" ([`zone`], [`suggest_zone`]);
//! - the bound of a catch-up of every missed slot ([`catch_up_bound`]) and
//!   the text form of a catch-up policy ([`parse_catch_up`]);
//! - the table of every job setting ([`SETTINGS`], in [`settings`]): its
//!   attribute name, value, check, setter, default and doc line, which the
//!   derives and the docs' tables follow.
//!
//! Every check fails with a [`RuleError`] that names the value, the rule and
//! the fix; the library turns it into `leasehold::Error::InvalidInput`, the
//! derive into a compile error at the offending attribute.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod catch_up;
mod cron;
mod duration;
mod error;
mod identifier;
pub mod settings;
mod timing;
mod zone;

use std::time::Duration;

/// The `chrono-tz` both sides look time zones up in.
pub use chrono_tz;
/// The `croner` both sides parse cron expressions with.
pub use croner;

pub use crate::catch_up::{CatchUpText, parse_catch_up};
pub use crate::cron::{CRON_FIELDS, cron, cron_fires};
pub use crate::duration::{DurationError, UNITS_HELP, format_duration, parse_duration};
pub use crate::error::RuleError;
pub use crate::identifier::{
    IdentifierError, actor, check_identifier, escape_hidden, find_hidden, hidden_char, identifier,
};
pub use crate::settings::SETTINGS;
pub use crate::timing::{Timing, catch_up_bound, covered_clock_rate, lease, min_margin, period, run_timeout};
pub use crate::zone::{edit_distance, suggest_zone, zone};

/// Longest lease key, holder id or job name, in bytes (also a CHECK in the
/// schema).
pub const MAX_KEY_BYTES: usize = 255;

/// Shortest lease leasehold accepts. Below this, a single round trip to the
/// database can outlast the lease.
pub const MIN_LEASE: Duration = Duration::from_millis(10);

/// Longest lease leasehold accepts. A lease this long means a dead replica
/// blocks its jobs for a week: it is almost always a unit mistake.
pub const MAX_LEASE: Duration = Duration::from_secs(7 * 24 * 3600);

/// The largest bound of a catch-up of every missed slot (`CatchUp::All`): a
/// key catches up on at most the latest 1000 missed slots.
pub const MAX_CATCH_UP: u32 = 1000;

/// The shortest time limit of a run (`JobSettings::timeout`): below this, a
/// run is cancelled before it has done a round trip to the database.
pub const MIN_TIMEOUT: Duration = Duration::from_millis(100);

/// The longest time limit of a run (`JobSettings::timeout`): a week, like
/// the longest lease; a run that may take longer should have no limit.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// The shortest period of an interval schedule (`Schedule::every`).
pub const MIN_PERIOD: Duration = Duration::from_millis(100);

/// Default lease length (`JobSettings::new`).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// Default grace period of a cancelled run (`JobSettings::new`).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// Default first retry backoff after a failed run (`JobSettings::new`).
pub const DEFAULT_RETRY: Duration = Duration::from_secs(1);

/// Default cap of the retry backoff (`JobSettings::new`).
pub const DEFAULT_RETRY_MAX: Duration = Duration::from_secs(300);

/// The default heartbeat interval for a lease: a third of it.
pub const fn default_heartbeat(lease: Duration) -> Duration {
    lease.checked_div(3).expect("3 is not zero")
}

/// ρ, in percent: the largest error of a clock's *rate* against real time
/// that every job's deadline margin must cover (docs/design.md §5: the
/// margin must exceed `2ρ × lease` plus the time a run takes to stop).
/// NTP slews a clock by at most 500 ppm (0.05 %); 1 % leaves twenty times
/// that for a clock NTP does not discipline. The default margin, lease/10,
/// covers 5 %.
pub const CLOCK_RATE_BOUND_PERCENT: u32 = 1;

/// The default local deadline margin for a lease: a tenth of it.
pub const fn default_margin(lease: Duration) -> Duration {
    lease.checked_div(10).expect("10 is not zero")
}
