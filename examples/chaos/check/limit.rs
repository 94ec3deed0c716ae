//! Check 18: the fleet-wide limit (invariant 11, docs/design.md §4) — at
//! no instant do more than N runs of the limited job overlap, counted from
//! the ledger on the server clock.
//!
//! What is provable from the ledger: a run's rows are its fenced steps that
//! committed, and each row's `at` is the server's `clock_timestamp()` at
//! its `INSERT`, inside its transaction. That transaction's COMMIT passed
//! the fence's commit check (F5), which reads the clock after the `INSERT`
//! and requires the tenure's lease to be live then; and the run started
//! after its claim committed. So every row's `at` lies strictly inside its
//! run's tenure, and so does the interval [first row's `at`, last row's
//! `at`] of a run (a key and a fence). A place under the limit is taken
//! only once its previous tenure's expiry has passed on the server clock,
//! so at no instant may more than N of these intervals overlap. The
//! recorded commit time (`committed`) would be a little wider, but it is
//! read after the commit check, up to check 15's tolerance past the
//! tenure's end: the statement time needs no tolerance.
//!
//! Under the harness's faults: a run frozen (`stop`, `stop-in-fence`) or
//! cut off past its lease has its later commits refused (the lease expired,
//! or a newer claim moved the fence), so they leave no row; a revoked or
//! expired lease refuses its run's commits from then on; after an
//! asynchronous promotion the ledger and the places are the same prefix of
//! the history. Nothing is excused. Runs claimed before the limit was set
//! are not counted (a limit set over runs in progress lets them finish):
//! the run's claim is read from the lease audit; a run with no recorded
//! claim counts if its first row is after the limit was set.
//!
//! Two server-side counts are reported beside it, not judged, with the
//! runs at their highest when it is above the limit (there a tenure or
//! run ending at the instant another starts does not overlap it: a
//! takeover's claim carries the instant of the tenure it ends):
//! - the tenures of the lease audit (`commits.rs`; from the claim's commit
//!   to the lease's last expiry written, or the key's next claim): a run
//!   whose replica's liveness session ended frees its place a grace after
//!   that (invariant 10) while its lease row runs on to its expiry, so
//!   this count may exceed the limit without a violation;
//! - the run history (`leasehold_run`): from the run's claim to when its
//!   release reached the server, also for a run that had lost its lease
//!   long before (frozen, cut off, stopped at its deadline), so it may too.

use std::collections::{BTreeMap, BTreeSet};

use super::history::History;
use super::tenures::Tenures;
use super::{Check, secs};

/// What check 18 measured (for the report).
#[derive(Debug, Default)]
pub struct LimitCount {
    /// Runs of the limited job counted (claimed after the limit was set).
    pub counted: usize,
    /// Runs of the limited job claimed before the limit was set (not
    /// counted).
    pub before: usize,
    /// The most runs at once by the ledger, and when that began.
    pub most: Option<(usize, i64)>,
    /// The most at once by the lease audit's tenures, of how many tenures
    /// claimed after the limit was set.
    pub tenures: (usize, usize),
    /// The most runs at once by the run history, of how many runs claimed
    /// after the limit was set.
    pub history: (usize, usize),
    /// For each server-side count above the limit, the first stretch above
    /// it with its tenures or runs (for the verdict; not violations).
    pub notes: Vec<String>,
}

/// A limited run's interval on the server clock: `[from, to]`, its key,
/// fence and holder.
struct Span<'a> {
    from: i64,
    to: i64,
    key: &'a str,
    fence: i64,
    holder: &'a str,
}

/// Where more than the limit overlapped: from when to when, and the runs
/// overlapping at the highest count.
struct Excess {
    from: i64,
    to: i64,
    most: Vec<usize>,
}

/// Whether an interval that ends at the instant another starts overlaps it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ends {
    /// `[from, to]`: the ledger's rows, each strictly inside its tenure.
    Closed,
    /// `[from, to)`: tenures and history rows, where a takeover's claim
    /// and the tenure it ends carry the same instant.
    Open,
}

/// Sweeps intervals and returns the most at once with when it began, and
/// every stretch with more than `limit`.
fn sweep(spans: &[(i64, i64)], limit: usize, ends: Ends) -> (Option<(usize, i64)>, Vec<Excess>) {
    // At one instant, the lower order first: starts before ends when
    // closed, ends before starts when open.
    let (start, end) = match ends {
        Ends::Closed => (0, 1),
        Ends::Open => (1, 0),
    };
    let mut points: Vec<(i64, u8, usize)> = spans
        .iter()
        .enumerate()
        .flat_map(|(i, &(from, to))| [(from, start, i), (to, end, i)])
        .collect();
    points.sort_unstable();
    let mut active: BTreeSet<usize> = BTreeSet::new();
    let mut most: Option<(usize, i64)> = None;
    let mut excess: Vec<Excess> = Vec::new();
    let mut open: Option<Excess> = None;
    for (at, kind, i) in points {
        if kind == start {
            active.insert(i);
            if most.is_none_or(|(n, _)| active.len() > n) {
                most = Some((active.len(), at));
            }
            if active.len() > limit {
                let e = open.get_or_insert_with(|| Excess {
                    from: at,
                    to: at,
                    most: Vec::new(),
                });
                if active.len() > e.most.len() {
                    e.most = active.iter().copied().collect();
                }
            }
        } else {
            active.remove(&i);
            if active.len() <= limit
                && let Some(mut e) = open.take()
            {
                e.to = at;
                excess.push(e);
            }
        }
    }
    (most, excess)
}

/// Check 18: at no instant do more than N runs of the limited job overlap,
/// each run from its first fenced step to its last by the ledger (see the
/// module doc for why that is within its tenure).
pub fn never_above_the_limit(h: &History, tenures: &Tenures, count: &mut LimitCount) -> Check {
    let input = h.input;
    let mut check = Check::listing("runs of the limited job never overlap beyond its fleet-wide limit", 10)
        .when_empty("no run of the limited job wrote a step after its limit was set");
    let Some(limited) = &input.limited else {
        check.not_required("the run had no limited job (--limited-jobs 0)".to_owned());
        return check;
    };
    let keys: BTreeSet<&str> = limited.keys.iter().map(String::as_str).collect();
    let claims: BTreeMap<(&str, i64), i64> = input
        .lease_writes
        .iter()
        .filter(|w| w.what == "claim" && keys.contains(w.key.as_str()))
        .map(|w| ((w.key.as_str(), w.fence), w.at))
        .collect();
    let mut spans: Vec<Span> = Vec::new();
    for ((key, fence), run) in h.runs.iter().filter(|((key, _), _)| keys.contains(key)) {
        let began = claims.get(&(*key, *fence)).copied().unwrap_or(run.first);
        if began < limited.set_at {
            count.before += 1;
            continue;
        }
        spans.push(Span {
            from: run.first,
            to: run.last,
            key,
            fence: *fence,
            holder: &run.holder,
        });
    }
    check.checked = spans.len();
    count.counted = spans.len();
    let n = limited.limit as usize;
    let (most, excess) = sweep(
        &spans.iter().map(|s| (s.from, s.to)).collect::<Vec<_>>(),
        n,
        Ends::Closed,
    );
    count.most = most;
    let t = |us: i64| secs(us, input.observe_from);
    for e in excess {
        let runs: Vec<String> = e
            .most
            .iter()
            .map(|&i| {
                let s = &spans[i];
                format!("{} fence {} ({}) {}–{}", s.key, s.fence, s.holder, t(s.from), t(s.to))
            })
            .collect();
        check.fail(format!(
            "{} runs of {} at once (limit {}) from {} to {}: {}",
            e.most.len(),
            limited.job,
            limited.limit,
            t(e.from),
            t(e.to),
            runs.join("; ")
        ));
    }
    // The server-side counts.
    let tenures: Vec<_> = limited
        .keys
        .iter()
        .flat_map(|key| tenures.of(key))
        .filter(|t| t.claimed >= limited.set_at)
        .collect();
    let spans: Vec<(i64, i64)> = tenures.iter().map(|t| (t.claimed, t.end.max(t.claimed))).collect();
    let (most, excess) = sweep(&spans, n, Ends::Open);
    count.tenures = (most.map_or(0, |m| m.0), spans.len());
    if let Some(e) = excess.first() {
        let what: Vec<String> = e
            .most
            .iter()
            .map(|&i| {
                let x = tenures[i];
                format!(
                    "{} fence {} ({}) {}–{} {}",
                    x.key,
                    x.fence,
                    x.holder,
                    t(x.claimed),
                    t(x.end),
                    x.ended
                )
            })
            .collect();
        count.notes.push(format!(
            "lease audit: {} tenures at once from {} to {} ({} stretches above the limit): {}",
            e.most.len(),
            t(e.from),
            t(e.to),
            excess.len(),
            what.join("; ")
        ));
    }
    let runs: Vec<_> = limited
        .history
        .iter()
        .filter(|r| r.started_at >= limited.set_at)
        .collect();
    let spans: Vec<(i64, i64)> = runs
        .iter()
        .map(|r| (r.started_at, r.ended_at.max(r.started_at)))
        .collect();
    let (most, excess) = sweep(&spans, n, Ends::Open);
    count.history = (most.map_or(0, |m| m.0), spans.len());
    if let Some(e) = excess.first() {
        let what: Vec<String> = e
            .most
            .iter()
            .map(|&i| {
                let r = runs[i];
                format!(
                    "{} fence {} ({}) {}–{} {}{}",
                    r.key,
                    r.fence,
                    r.holder,
                    t(r.started_at),
                    t(r.ended_at),
                    r.outcome,
                    r.reason.as_deref().map_or(String::new(), |why| format!(" ({why})"))
                )
            })
            .collect();
        count.notes.push(format!(
            "run history: {} runs at once from {} to {} ({} stretches above the limit): {}",
            e.most.len(),
            t(e.from),
            t(e.to),
            excess.len(),
            what.join("; ")
        ));
    }
    check
}

#[cfg(test)]
mod tests {
    use super::{Ends, sweep};

    /// Closed intervals that touch overlap at that instant; open ones (a
    /// takeover's claim at its predecessor's end) do not.
    #[test]
    fn touching_intervals_overlap_only_when_closed() {
        let spans = [(0, 10), (10, 20), (5, 12)];
        let (most, excess) = sweep(&spans, 2, Ends::Closed);
        assert_eq!(most, Some((3, 10)));
        assert_eq!(
            excess.iter().map(|e| (e.from, e.to, e.most.len())).collect::<Vec<_>>(),
            [(10, 10, 3)]
        );
        let (most, excess) = sweep(&spans, 2, Ends::Open);
        assert_eq!(most, Some((2, 5)));
        assert!(excess.is_empty());
    }
}
