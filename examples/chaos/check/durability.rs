//! Checks 6–7: what a replica saw succeed reached the database. These are
//! the ones `--async-commit` can break. An asynchronous promotion's lag
//! window loses what was acknowledged in it: runs reported done inside it
//! are not checked, and [`lost_in_promotion`] reports them.

use std::collections::BTreeMap;

use super::Check;
use super::history::History;

/// Check 6: a run its replica saw succeed has every step in the ledger (no
/// acknowledged commit was lost).
pub fn done_runs_have_all_steps(h: &History) -> Check {
    let mut check = Check::new("runs reported done have all steps committed");
    for e in h.input.events.iter().filter(|e| e.kind == "done") {
        if h.input.in_lost_window(e.at) {
            continue;
        }
        check.checked += 1;
        match h.runs.get(&(e.key.as_str(), e.fence)) {
            Some(run) if h.complete(run) => {}
            Some(run) => check.fail(format!(
                "{} fence {}: replica reported done, ledger has steps {:?}",
                e.key, e.fence, run.steps
            )),
            None => check.fail(format!(
                "{} fence {}: replica reported done, ledger has no row",
                e.key, e.fence
            )),
        }
    }
    check
}

/// Check 7: a run its replica saw succeed has every counter write
/// committed: each step's fenced column write returned Ok to the run, so
/// the counter's history has one row per step with the run's fence. A
/// write that ran inside a transaction nobody owns (a connection left in
/// one: `poison.rs`) returns Ok too, and is lost if that transaction is
/// rolled back.
pub fn done_runs_have_all_counter_writes(h: &History) -> Check {
    let input = h.input;
    let mut counter_writes: BTreeMap<(&str, i64), usize> = BTreeMap::new();
    for c in &input.counter {
        *counter_writes.entry((c.key.as_str(), c.new_fence)).or_default() += 1;
    }
    let mut check = Check::new("runs reported done have all counter writes committed");
    for e in input.events.iter().filter(|e| e.kind == "done") {
        if input.in_lost_window(e.at) {
            continue;
        }
        check.checked += 1;
        let n = counter_writes.get(&(e.key.as_str(), e.fence)).copied().unwrap_or(0);
        if n < input.steps as usize {
            check.fail(format!(
                "{} fence {}: replica reported done, counter history has {n} of its {} writes",
                e.key, e.fence, input.steps
            ));
        }
    }
    check
}

/// Runs reported done inside an asynchronous promotion's lag window whose
/// steps the promoted server lacks (some or all): `(key, fence)`, what the
/// promotion lost.
pub fn lost_in_promotion(h: &History) -> Vec<(String, i64)> {
    h.input
        .events
        .iter()
        .filter(|e| e.kind == "done" && h.input.in_lost_window(e.at))
        .filter(|e| {
            h.runs
                .get(&(e.key.as_str(), e.fence))
                .is_none_or(|run| !h.complete(run))
        })
        .map(|e| (e.key.clone(), e.fence))
        .collect()
}
