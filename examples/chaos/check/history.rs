//! What the checks share: the ledger grouped by key and by run, and the
//! schedule's slots placed against the fault windows.

use std::collections::{BTreeMap, BTreeSet};

use super::{Input, LedgerRow, Reach, Window, secs};

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
///
/// A fault can keep a slot of a job from running exactly once only through
/// what it does to that job's runs ([`Reach`]). PostgreSQL restarts and
/// the promotion reach every job, and an `expire` the key it expired: for
/// them a slot must be a margin (lease + period) away from the fault
/// window. A fault aimed at one replica (a stop, a kill, its proxy, its
/// pool, its clock), or a `terminate` of some replicas' backends, reaches a
/// job only through what those replicas did with it while the fault could
/// act on them — from a margin before the window to a margin after it —
/// as the lease audit (each of its tenures of the key, from its claim to
/// the latest expiry it set), the ledger (each row it wrote for the key,
/// to its commit) and its own log (each of its runs of the key, from its
/// first line to its last) show: a slot is near such a fault only if it
/// is within a margin both of the window and of one of those spans. A
/// replica that neither held, claimed, ran nor logged a key then can
/// neither hold that key's lease or its fence row lock through the fault,
/// nor leave a run of it half done.
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
    /// For each job, where faults could reach its runs.
    reached: BTreeMap<&'a str, Vec<Reached>>,
}

/// Where a fault could reach a job's runs: its window, and within a margin
/// of it, the span the fault could act on the job in (the window itself,
/// or what a faulted replica did with the job around it). A slot a margin
/// away from either is calm.
#[derive(Debug, Clone, Copy)]
struct Reached {
    window: (i64, i64),
    span: (i64, i64),
}

/// Spans of the server clock in which one replica had something to do with
/// one key, by (key, replica).
type Activity<'a> = BTreeMap<(&'a str, usize), Vec<(i64, i64)>>;

impl<'a> Schedule<'a> {
    pub fn new(input: &'a Input) -> Schedule<'a> {
        let margin = input.lease_us + input.period_us;
        let p = input.period_us;
        let last_fault = input.windows.iter().map(|w| w.end).max().unwrap_or(input.observe_from);
        let tail_first = (last_fault.max(input.observe_from) + margin + p - 1).div_euclid(p);
        let activity = activity(input);
        let reached = input
            .keys
            .iter()
            .map(|key| {
                let reached = input
                    .windows
                    .iter()
                    .flat_map(|w| reaches(w, key, &activity, margin))
                    .collect();
                (key.as_str(), reached)
            })
            .collect();
        Schedule {
            input,
            period: p,
            margin,
            last_fault,
            tail_first,
            reached,
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

    /// Slot k of job `key` is observed, before the quiet tail, checkable,
    /// and a margin away from everywhere a fault could reach the job's
    /// runs.
    pub fn calm(&self, key: &str, k: i64) -> bool {
        let input = self.input;
        let (start, end) = (k * self.period, (k + 1) * self.period);
        let near = |(from, to): (i64, i64)| end + self.margin > from && start < to + self.margin;
        start >= input.observe_from
            && k < self.tail_first
            && end + self.margin <= input.observe_to
            && self
                .reached
                .get(key)
                .map_or(&[][..], Vec::as_slice)
                .iter()
                .all(|r| !(near(r.window) && near(r.span)))
    }

    /// The quiet tail's checkable slots.
    pub fn tail_slots(&self) -> Vec<i64> {
        (self.tail_first..).take_while(|k| self.checkable(*k)).collect()
    }
}

/// What each replica had to do with each key, by the lease audit (a
/// fence's committed writes, up to the latest expiry they set), the ledger
/// (each row, to its commit) and the replicas' logs (each run, from its
/// first line to its last).
fn activity<'a>(input: &'a Input) -> Activity<'a> {
    let mut spans: BTreeMap<(&'a str, i64, usize), (i64, i64)> = BTreeMap::new();
    let mut widen = |key: &'a str, fence: i64, holder: &str, from: i64, to: i64| {
        if let Some(r) = Window::replica_of(holder) {
            let span = spans.entry((key, fence, r)).or_insert((from, to));
            *span = (span.0.min(from), span.1.max(to));
        }
    };
    // A `register` (the row's first insert) holds nothing.
    for w in input.lease_writes.iter().filter(|w| w.what != "register") {
        widen(&w.key, w.fence, &w.holder, w.at, w.at.max(w.expires_at));
    }
    for e in &input.events {
        widen(&e.key, e.fence, &e.holder, e.at, e.at);
    }
    let mut activity: Activity = BTreeMap::new();
    for ((key, _, r), span) in spans {
        activity.entry((key, r)).or_default().push(span);
    }
    for row in &input.ledger {
        if let Some(r) = Window::replica_of(&row.holder) {
            let to = row.committed.unwrap_or(row.at).max(row.at);
            activity.entry((row.key.as_str(), r)).or_default().push((row.at, to));
        }
    }
    activity
}

/// Where fault window `w` could reach job `key`'s runs (see [`Schedule`]):
/// the whole window for a fault on everything or on the key; for a fault
/// aimed at replicas, each span of what those replicas did with the key
/// from `margin` before the window to `margin` after it, cut to that.
fn reaches(w: &Window, key: &str, activity: &Activity, margin: i64) -> Vec<Reached> {
    let window = (w.start, w.end);
    let (from, to) = (w.start - margin, w.end + margin);
    match &w.reach {
        Reach::All => vec![Reached { window, span: window }],
        Reach::Key(target) if target == key => vec![Reached { window, span: window }],
        Reach::Key(_) => Vec::new(),
        Reach::Replicas(replicas) => replicas
            .iter()
            .flat_map(|&r| activity.get(&(key, r)).map_or(&[][..], Vec::as_slice))
            .map(|&(a, b)| (a.max(from), b.min(to)))
            .filter(|(a, b)| a <= b)
            .map(|span| Reached { window, span })
            .collect(),
    }
}
