//! Checks 15–16: a fenced transaction commits within its tenure, and a due
//! key is not stalled behind a transaction that outlived its own (the
//! `stop-in-fence` fault, `stop_in_fence.rs`, aims at both).
//!
//! Tenures come from the lease audit (`commits.rs`): a key's tenure starts
//! with the committed claim that gave it its fence, and ends at the expiry
//! its last committed write left — a claim or renewal extends it, a
//! release or an early expiry lowers it to that instant — or at the key's
//! next claim if that came first. All on the server clock.

use std::collections::BTreeMap;

use super::history::History;
use super::{Check, Input};
use crate::faults::FaultKind;

/// How far after its tenure's end a fenced transaction's recorded commit
/// time may be, in µs. The time recorded is the deferred trigger's
/// `clock_timestamp()` at COMMIT (`chaos_ledger_commit`), which runs after
/// the deferred checks queued before it in the same transaction — so a
/// COMMIT whose checks saw the tenure live an instant before its expiry
/// records a time just past it. 10 ms covers that and a commit in flight
/// at the expiry instant on a loaded machine; a transaction held across a
/// freeze commits seconds late.
pub const COMMIT_TOLERANCE_US: i64 = 10_000;

/// One tenure of a key, as the lease audit saw it.
#[derive(Debug, Clone)]
pub struct Tenure<'a> {
    pub key: &'a str,
    pub fence: i64,
    pub holder: &'a str,
    /// When its claim committed.
    pub claimed: i64,
    /// When it ended (see the module doc).
    pub end: i64,
    /// How it ended: `expired`, `released` (a release or an early
    /// expiry), or `taken over by fence N`.
    pub ended: String,
}

impl Tenure<'_> {
    /// The replica process of its holder (`r<n>-g<generation>`).
    fn replica(&self) -> Option<usize> {
        self.holder.strip_prefix('r')?.split('-').next()?.parse().ok()
    }
}

/// Every tenure of the run, by key and fence (fence order is claim order
/// within a key: invariant 4).
pub struct Tenures<'a> {
    input: &'a Input,
    tenures: BTreeMap<(&'a str, i64), Tenure<'a>>,
}

impl<'a> Tenures<'a> {
    pub fn new(input: &'a Input) -> Tenures<'a> {
        let mut tenures: BTreeMap<(&str, i64), Tenure> = BTreeMap::new();
        for w in &input.lease_writes {
            let id = (w.key.as_str(), w.fence);
            match w.what.as_str() {
                "register" => {}
                "claim" => {
                    tenures.insert(
                        id,
                        Tenure {
                            key: w.key.as_str(),
                            fence: w.fence,
                            holder: w.holder.as_str(),
                            claimed: w.at,
                            end: w.expires_at,
                            ended: "expired".to_owned(),
                        },
                    );
                }
                what => {
                    if let Some(t) = tenures.get_mut(&id) {
                        t.end = w.expires_at;
                        t.ended = if what == "release" { "released" } else { "expired" }.to_owned();
                    }
                }
            }
        }
        // A tenure cannot outlast the next claim of its key.
        let mut next_claim: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
        for t in tenures.values_mut().rev() {
            if let Some(&(at, fence)) = next_claim.get(t.key)
                && at < t.end
            {
                t.end = at;
                t.ended = format!("taken over by fence {fence}");
            }
            next_claim.insert(t.key, (t.claimed, t.fence));
        }
        Tenures { input, tenures }
    }

    pub fn get<'s>(&'s self, key: &'s str, fence: i64) -> Option<&'s Tenure<'s>> {
        self.tenures.get(&(key, fence))
    }

    /// One key's tenures, in fence order.
    pub fn of<'s>(&'s self, key: &'s str) -> impl Iterator<Item = &'s Tenure<'a>> + 's {
        self.tenures.range((key, i64::MIN)..=(key, i64::MAX)).map(|(_, t)| t)
    }

    pub fn len(&self) -> usize {
        self.tenures.len()
    }
}

/// What checks 15–16 measured (for the report).
#[derive(Default)]
pub struct Measured {
    /// The latest a fenced commit landed after its tenure's end, µs
    /// (negative: every commit landed before its tenure ended).
    pub latest_commit: Option<i64>,
    /// The longest judged wait of a due key, µs, and its key.
    pub longest_wait: Option<(i64, String)>,
}

/// Check 15: no fenced write committed after its tenure ended. Every ledger
/// row is written in a fenced transaction (checks 1–5 judge its fence); its
/// commit time, on the server clock, must not be later than the end of the
/// tenure whose fence it carries, give or take [`COMMIT_TOLERANCE_US`]. A
/// run frozen inside its fenced transaction past its lease, then thawed,
/// commits after another replica could have claimed the key. Rows without
/// a committed claim for their fence are check 14's.
///
/// The fenced column writes (the counter) are not judged: a single
/// autocommit `UPDATE … WHERE last_fence <= $fence` is ordered by its
/// fence alone, and may land after its tenure's end as long as no newer run
/// wrote the row (G2).
pub fn fenced_commits_within_tenure(t: &Tenures, measured: &mut Measured) -> Check {
    let input = t.input;
    let mut check = Check::listing("no fenced transaction committed after its tenure ended", 20);
    for row in &input.ledger {
        let (Some(committed), Some(tenure)) = (row.committed, t.get(&row.key, row.fence)) else {
            continue;
        };
        check.checked += 1;
        let late = committed - tenure.end;
        measured.latest_commit = Some(measured.latest_commit.map_or(late, |l| l.max(late)));
        if late > COMMIT_TOLERANCE_US {
            check.fail(format!(
                "{} fence {} ({}, step {}): committed at {}, {:.3} s after its tenure ended at {} ({})",
                row.key,
                row.fence,
                row.holder,
                row.step,
                secs(committed, input),
                late as f64 / 1e6,
                secs(tenure.end, input),
                tenure.ended
            ));
        }
    }
    check
}

/// Check 16: no due key waited more than two leases (plus the replicas'
/// poll interval) for its next fenced commit while a replica could have
/// run it. After each tenure the key is due again at the tenure's end —
/// or, when its run completed, at the next slot if that is later — and it
/// waits until the first ledger commit with a higher fence. If the next
/// tenure ends before that without having committed anything (its own
/// holder was stopped or cut off), the wait stops there and the next
/// tenure's wait is judged on its own.
///
/// Not counted in the wait: time with PostgreSQL restarting, time with
/// every replica stopped or killed, and time with the previous or the next
/// tenure's holder behind a slow proxy (`proxy-delay`, `begin-drop`: its
/// statements are slow, not stuck, and it holds the fence row lock while
/// they travel). A key whose previous holder is frozen inside a fenced
/// transaction waits for the lock only until the server ends that
/// transaction, at most a lease after its last statement: the tenure ended
/// at most a lease after the freeze began, and a replica claims it within
/// a poll interval.
pub fn no_due_key_stalled(h: &History, t: &Tenures, measured: &mut Measured) -> Check {
    let input = h.input;
    let p = input.period_us;
    let limit = 2 * input.lease_us + input.poll_us;
    let mut check = Check::listing("no due key waited more than two leases for its next fenced commit", 20);
    for key in &input.keys {
        // The key's commits by fence, and the earliest commit of any fence
        // above each.
        let mut commits: Vec<(i64, i64)> = h
            .by_key
            .get(key.as_str())
            .map(|rows| rows.iter().filter_map(|r| Some((r.fence, r.committed?))).collect())
            .unwrap_or_default();
        commits.sort_unstable();
        let mut earliest_from = vec![i64::MAX; commits.len() + 1];
        for i in (0..commits.len()).rev() {
            earliest_from[i] = earliest_from[i + 1].min(commits[i].1);
        }
        let first_commit_above = |fence: i64| {
            let i = commits.partition_point(|(f, _)| *f <= fence);
            let at = earliest_from[i];
            (at != i64::MAX).then(|| (at, commits[i..].iter().find(|c| c.1 == at).map_or(0, |c| c.0)))
        };
        let tenures: Vec<&Tenure> = t.of(key).collect();
        for (i, tenure) in tenures.iter().enumerate() {
            let completed = h
                .runs
                .get(&(key.as_str(), tenure.fence))
                .is_some_and(|run| h.complete(run));
            let due = if completed {
                tenure.end.max((tenure.claimed.div_euclid(p) + 1) * p)
            } else {
                tenure.end
            };
            let next = tenures.get(i + 1);
            let (mut until, mut what) = match first_commit_above(tenure.fence) {
                Some((at, fence)) => (at, format!("next fenced commit at {} (fence {fence})", secs(at, input))),
                None => (input.observe_to, "no fenced commit since".to_owned()),
            };
            if let Some(n) = next
                && n.end < until
            {
                until = n.end;
                what = format!(
                    "fence {} ({}) {} at {} without a commit",
                    n.fence,
                    n.holder,
                    n.ended,
                    secs(n.end, input)
                );
            }
            let (from, to) = (due.max(input.observe_from), until.min(input.observe_to));
            if to <= from {
                continue;
            }
            check.checked += 1;
            let slow = [Some(*tenure), next.copied()]
                .into_iter()
                .flatten()
                .filter_map(|t| t.replica());
            let excused = excused(input, from, to, &slow.collect::<Vec<_>>());
            let judged = to - from - excused;
            if measured.longest_wait.as_ref().is_none_or(|(w, _)| judged > *w) {
                measured.longest_wait = Some((judged, key.clone()));
            }
            if judged > limit {
                check.fail(format!(
                    "{key}: due at {} after fence {} ({}) {} at {}; {what}: waited {:.3} s, {:.3} s of it with a replica live \
                     and PostgreSQL up (limit {:.3} s)",
                    secs(due, input),
                    tenure.fence,
                    tenure.holder,
                    tenure.ended,
                    secs(tenure.end, input),
                    (to - from) as f64 / 1e6,
                    judged as f64 / 1e6,
                    limit as f64 / 1e6
                ));
            }
        }
    }
    check
}

/// How much of [from, to) falls in time check 16 does not count: a
/// PostgreSQL restart or a promotion (replication cut to switch), every replica stopped or killed, or one of the
/// `slow` replicas behind a slow proxy.
fn excused(input: &Input, from: i64, to: i64, slow: &[usize]) -> i64 {
    let mut spans: Vec<(i64, i64)> = Vec::new();
    let mut down: Vec<(i64, i64)> = Vec::new(); // +1 / -1 replica down
    for w in &input.windows {
        match w.kind {
            FaultKind::PgFast | FaultKind::PgImmediate | FaultKind::Promote => spans.push((w.start, w.end)),
            FaultKind::ProxyDelay | FaultKind::BeginDrop if w.replica.is_some_and(|r| slow.contains(&r)) => {
                spans.push((w.start, w.end))
            }
            FaultKind::Stop | FaultKind::StopInFence | FaultKind::Kill | FaultKind::KillHolder
                if w.replica.is_some() =>
            {
                down.push((w.start, 1));
                down.push((w.end, -1));
            }
            _ => {}
        }
    }
    down.sort_unstable();
    let mut count = 0;
    let mut since = 0;
    for (at, delta) in down {
        if count == input.replicas as i64 {
            spans.push((since, at));
        }
        count += delta;
        since = at;
    }
    let mut clipped: Vec<(i64, i64)> = spans
        .into_iter()
        .map(|(a, b)| (a.max(from), b.min(to)))
        .filter(|(a, b)| a < b)
        .collect();
    clipped.sort_unstable();
    let mut total = 0;
    let mut reach = from;
    for (a, b) in clipped {
        let a = a.max(reach);
        if b > a {
            total += b - a;
            reach = b;
        }
    }
    total
}

fn secs(us: i64, input: &Input) -> String {
    super::secs(us, input.observe_from)
}
