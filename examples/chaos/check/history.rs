//! What the checks share: the ledger grouped by key and by run, and the
//! schedule's slots placed against the fault windows.

use std::collections::{BTreeMap, BTreeSet};

use super::{Input, LedgerRow, secs};

/// What one run (a key and a fence) left in the ledger.
#[derive(Default)]
pub struct Run {
    pub run_ids: BTreeSet<String>,
    pub steps: BTreeSet<i32>,
    pub holder: String,
    pub slot: i64,
    pub first: i64,
    pub last: i64,
}

/// The ledger and the replicas' logs, indexed for the checks.
pub struct History<'a> {
    pub input: &'a Input,
    /// Each key's ledger rows in id order (commit order within a key).
    pub by_key: BTreeMap<&'a str, Vec<&'a LedgerRow>>,
    /// Runs as the ledger saw them, by key and fence.
    pub runs: BTreeMap<(&'a str, i64), Run>,
    /// The runs their replica reported done (key, fence).
    pub done: BTreeSet<(&'a str, i64)>,
}

impl<'a> History<'a> {
    pub fn new(input: &'a Input) -> History<'a> {
        let mut by_key: BTreeMap<&str, Vec<&LedgerRow>> = BTreeMap::new();
        for row in &input.ledger {
            by_key.entry(row.key.as_str()).or_default().push(row);
        }
        for rows in by_key.values_mut() {
            rows.sort_by_key(|r| r.id);
        }
        let mut runs: BTreeMap<(&str, i64), Run> = BTreeMap::new();
        for row in &input.ledger {
            let run = runs.entry((row.key.as_str(), row.fence)).or_insert_with(|| Run {
                first: row.at,
                last: row.at,
                holder: row.holder.clone(),
                slot: row.slot,
                ..Run::default()
            });
            run.run_ids.insert(row.run_id.clone());
            run.steps.insert(row.step);
            run.first = run.first.min(row.at);
            run.last = run.last.max(row.at);
        }
        let done = input
            .events
            .iter()
            .filter(|e| e.kind == "done")
            .map(|e| (e.key.as_str(), e.fence))
            .collect();
        History {
            input,
            by_key,
            runs,
            done,
        }
    }

    /// A server time as seconds since the start of the observation.
    pub fn t(&self, us: i64) -> String {
        secs(us, self.input.observe_from)
    }

    /// The run committed every one of its steps.
    pub fn complete(&self, run: &Run) -> bool {
        run.steps.len() == self.input.steps as usize
    }

    /// One key's runs, in fence order.
    pub fn runs_of<'s>(&'s self, key: &'s str) -> impl Iterator<Item = (i64, &'s Run)> + 's {
        self.runs
            .range((key, i64::MIN)..=(key, i64::MAX))
            .map(|((_, fence), run)| (*fence, run))
    }
}

/// The schedule's slots (slot k is [k × period, (k + 1) × period) on the
/// server clock) against the fault windows.
pub struct Schedule<'a> {
    input: &'a Input,
    /// The period, µs.
    pub period: i64,
    /// lease + period: how far from a fault a slot must be to be calm.
    pub margin: i64,
    /// When the last fault window ended (the start of the observation when
    /// there was none).
    pub last_fault: i64,
    /// The quiet tail's first slot: a margin after the last fault.
    pub tail_first: i64,
}

impl<'a> Schedule<'a> {
    pub fn new(input: &'a Input) -> Schedule<'a> {
        let margin = input.lease_us + input.period_us;
        let p = input.period_us;
        let last_fault = input.windows.iter().map(|w| w.end).max().unwrap_or(input.observe_from);
        let tail_first = (last_fault.max(input.observe_from) + margin + p - 1).div_euclid(p);
        Schedule {
            input,
            period: p,
            margin,
            last_fault,
            tail_first,
        }
    }

    /// The first and last slot the observation touches.
    pub fn observed(&self) -> (i64, i64) {
        let p = self.period;
        (
            self.input.observe_from.div_euclid(p),
            self.input.observe_to.div_euclid(p),
        )
    }

    /// Slot k ended a margin before the observation did, so its run had
    /// time to commit.
    pub fn checkable(&self, k: i64) -> bool {
        (k + 1) * self.period + self.margin <= self.input.observe_to
    }

    /// Slot k is observed, before the quiet tail, checkable, and a margin
    /// away from every fault window.
    pub fn calm(&self, k: i64) -> bool {
        let input = self.input;
        let (start, end) = (k * self.period, (k + 1) * self.period);
        start >= input.observe_from
            && k < self.tail_first
            && end + self.margin <= input.observe_to
            && input
                .windows
                .iter()
                .all(|w| end + self.margin <= w.start || start >= w.end + self.margin)
    }

    /// The quiet tail's checkable slots.
    pub fn tail_slots(&self) -> Vec<i64> {
        (self.tail_first..).take_while(|k| self.checkable(*k)).collect()
    }
}
