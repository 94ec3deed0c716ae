//! Check 17: no two runs of a key execute at the same real instant (G1,
//! docs/design.md §5), by the replicas' own logs: each run from its `start`
//! to its end (`done`, `stale`, `cancelled`, `failed`, or `dropped`, logged
//! when the runtime drops its future), on the real clock even for a replica
//! whose clock libfaketime fakes (`clock.rs`).
//!
//! G1 holds only under its assumptions (§2): overlaps that begin while a
//! replica is frozen (`stop`, `stop-in-fence`) or after a lease was expired
//! early on the server (`expire`, the half of the `begin-drop` faults
//! that also expire the replica's leases, and an asynchronous `promote`,
//! whose promoted server lacks the lag window's claims and renewals), up
//! to a lease after such a fault ends,
//! are excused and counted apart; the fence (checks 1–5) is what holds
//! there. Everything else — a clock rate within what the margin covers
//! included — must not overlap. A run with no end (its replica was killed)
//! is left out.

use std::collections::BTreeMap;

use super::{Check, Input, secs};
use crate::faults::FaultKind;

/// What check 17 found besides its violations.
#[derive(Debug, Default)]
pub struct Overlaps {
    /// Overlaps inside a fault outside G1's assumptions.
    pub excused: usize,
    /// Runs with a start and an end in the logs.
    pub runs: usize,
}

/// One run by its replica's log: `(start, end, fence)`.
type Span = (i64, i64, i64);

/// A run's start and end in its replica's log, as far as logged.
type Ends = (Option<i64>, Option<i64>);

pub fn runs_never_overlap(input: &Input, found: &mut Overlaps) -> Check {
    let mut check = Check::new("no two runs of a key overlap in real time");
    let mut spans: BTreeMap<&str, BTreeMap<i64, Ends>> = BTreeMap::new();
    for e in &input.events {
        let run = spans.entry(e.key.as_str()).or_default().entry(e.fence).or_default();
        match e.kind.as_str() {
            "start" => run.0 = Some(e.at),
            "done" | "stale" | "cancelled" | "failed" | "dropped" => {
                run.1 = Some(run.1.map_or(e.at, |end: i64| end.min(e.at)));
            }
            _ => {}
        }
    }
    let excused = |from: i64, to: i64| {
        input.windows.iter().any(|w| {
            (matches!(w.kind, FaultKind::Stop | FaultKind::StopInFence) || w.expires_leases)
                && w.start <= to
                && from <= w.end + input.lease_us
        })
    };
    for (key, runs) in spans {
        let mut runs: Vec<Span> = runs
            .into_iter()
            .filter_map(|(fence, (start, end))| Some((start?, end?, fence)))
            .collect();
        runs.sort();
        found.runs += runs.len();
        let mut latest: Option<Span> = None;
        for run in runs {
            check.checked += 1;
            if let Some((_, end, fence)) = latest
                && run.0 < end
            {
                if excused(run.0, end) {
                    found.excused += 1;
                } else {
                    check.fail(format!(
                        "{key}: fence {} started at {} while fence {fence} ran until {} ({:.1} ms together)",
                        run.2,
                        secs(run.0, input.observe_from),
                        secs(end, input.observe_from),
                        (end - run.0) as f64 / 1e3
                    ));
                }
            }
            if latest.is_none_or(|l| run.1 > l.1) {
                latest = Some(run);
            }
        }
    }
    check
}
