//! Checks 1–5: the fences order the accepted writes. These are the ones
//! `--unsafe-unfenced` must break.

use std::collections::{BTreeMap, BTreeSet};

use super::history::History;
use super::{Check, Input, LedgerRow};

/// Check 1: in commit order, a key's fences never decrease. Within a key,
/// ledger id order is commit order: each fenced transaction first locks
/// the key's `leasehold_fence` row and keeps it until commit.
pub fn commit_order(h: &History) -> Check {
    let mut check = Check::new("fences never decrease in commit order");
    for (key, rows) in &h.by_key {
        for w in rows.windows(2) {
            check.checked += 1;
            if w[1].fence < w[0].fence {
                check.fail(format!(
                    "{key}: ledger id {} (fence {}, {}, step {}, at {}) committed after id {} (fence {}, {}, at {})",
                    w[1].id,
                    w[1].fence,
                    w[1].holder,
                    w[1].step,
                    h.t(w[1].at),
                    w[0].id,
                    w[0].fence,
                    w[0].holder,
                    h.t(w[0].at)
                ));
            }
        }
    }
    check
}

/// Check 2: by server time, no write of a key is accepted after a write
/// with a higher fence.
pub fn no_write_after_higher_fence(h: &History) -> Check {
    let mut check = Check::new("no write accepted after a higher fence");
    for (key, rows) in &h.by_key {
        let mut by_time = rows.clone();
        by_time.sort_by_key(|r| (r.at, r.id));
        let mut highest: Option<&LedgerRow> = None;
        for r in by_time {
            check.checked += 1;
            if let Some(h_row) = highest
                && r.fence < h_row.fence
            {
                check.fail(format!(
                    "{key}: fence {} ({}, step {}) written at {} after fence {} wrote at {}",
                    r.fence,
                    r.holder,
                    r.step,
                    h.t(r.at),
                    h_row.fence,
                    h.t(h_row.at)
                ));
            }
            if highest.is_none_or(|h_row| r.fence > h_row.fence) {
                highest = Some(r);
            }
        }
    }
    check
}

/// Check 3: the accepted effects of two runs of a key never interleave:
/// once a run with a higher fence wrote, no lower fence writes again (the
/// [first, last] write intervals of different fences do not interleave).
pub fn runs_never_interleave(h: &History) -> Check {
    let mut check = Check::new("runs' effects never interleave in time");
    for key in h.by_key.keys() {
        let mut latest: Option<(i64, i64)> = None; // (last write, fence) of the runs so far
        for (fence, run) in h.runs_of(key) {
            check.checked += 1;
            if let Some((last, f)) = latest
                && run.first < last
            {
                check.fail(format!(
                    "{key}: fence {f} wrote until {} but fence {fence} ({}) had started writing at {}",
                    h.t(last),
                    run.holder,
                    h.t(run.first)
                ));
            }
            if latest.is_none_or(|(last, _)| run.last > last) {
                latest = Some((run.last, fence));
            }
        }
    }
    check
}

/// Check 4: a fence is one run of one key (fences never repeat), by the
/// ledger and by the replicas' logs: after an asynchronous promotion the
/// ledger has lost the lag window's runs, but a replica that started one
/// logged its fence, so a fence handed out again shows there.
pub fn one_run_per_fence(input: &Input) -> Check {
    let mut check = Check::new("each fence is one run of one key");
    let mut owners: BTreeMap<i64, BTreeSet<(&str, &str)>> = BTreeMap::new();
    for row in &input.ledger {
        owners
            .entry(row.fence)
            .or_default()
            .insert((row.key.as_str(), row.run_id.as_str()));
    }
    for e in input.events.iter().filter(|e| e.kind == "start") {
        owners
            .entry(e.fence)
            .or_default()
            .insert((e.key.as_str(), e.detail.as_str()));
    }
    for (fence, who) in &owners {
        check.checked += 1;
        if who.len() > 1 {
            check.fail(format!("fence {fence} was used by {who:?}"));
        }
    }
    check
}

/// Check 5: the fenced column write — the counter's fence never goes back.
pub fn counter_never_goes_back(h: &History) -> Check {
    let mut check = Check::new("counter fence never goes back");
    for c in &h.input.counter {
        check.checked += 1;
        if c.new_fence < c.old_fence {
            check.fail(format!(
                "{}: counter history id {} set fence {} (run {}) over fence {} at {}",
                c.key,
                c.id,
                c.new_fence,
                c.run_id,
                c.old_fence,
                h.t(c.at)
            ));
        }
    }
    check
}
