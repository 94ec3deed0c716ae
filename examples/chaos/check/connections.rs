//! Checks 11–12: no replica connection is left inside a transaction that
//! nobody owns (`poison.rs` says how one gets there, `backends.rs` how the
//! harness looks).

use super::history::History;
use super::{Check, Input};

/// Check 11: after the quiet tail, before the fleet stops, no replica
/// backend is idle in transaction (with its transaction open for at least
/// the threshold `backends.rs` scans with).
pub fn none_idle_in_transaction_at_end(input: &Input) -> Check {
    let mut check = Check::listing("no replica backend idle in transaction at the end", 100)
        .when_empty("the scan after the quiet tail found no replica backend on the database: no replica was up");
    check.checked = input.backends.backends.len();
    for b in &input.backends.stuck {
        check.fail(b.describe());
    }
    check
}

/// Check 12: during the run (sampled every 250 ms), no replica backend is
/// idle in transaction right after one of leasehold's lease statements or
/// a fenced column write — autocommit statements that then ran inside a
/// transaction nobody owns (`backends.rs`).
pub fn none_orphaned_during_run(h: &History) -> Check {
    let mut check = Check::listing(
        "no replica backend seen idle in transaction after an autocommit statement",
        20,
    )
    .when_empty("pg_stat_activity was never sampled during the run");
    check.checked = h.input.samples;
    for o in &h.input.orphans {
        check.fail(o.describe(|us| h.t(us)));
    }
    check
}
