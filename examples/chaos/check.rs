//! The checker: reads the ledger, the counter history and the replicas' own
//! logs after the run, and judges them. Every time here is the server's
//! clock in µs since the epoch (fault windows are converted to it).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use crate::backends::{Orphan, Scan};
use crate::commits::LeaseWrite;
use crate::faults::FaultKind;

/// The quiet tail after the last fault has at least this many slots in
/// which every job must run exactly once (the orchestrator's `--tail` is
/// sized for it: see [`min_tail`]).
pub const QUIET_SLOTS: i64 = 5;

/// The shortest tail that leaves [`QUIET_SLOTS`] checkable slots: a margin
/// of lease + period after the last fault (its leases expire, its
/// interrupted slots run again), the slots, one more period for slot
/// alignment, and the same margin again before the end, so the last slot's
/// run has committed before the fleet stops.
pub fn min_tail(lease: std::time::Duration, period: std::time::Duration) -> std::time::Duration {
    (lease + period) * 2 + period * (QUIET_SLOTS as u32 + 1)
}

/// A row of `chaos_ledger`: one accepted step of one run.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LedgerRow {
    pub id: i64,
    pub key: String,
    pub fence: i64,
    pub run_id: String,
    pub step: i32,
    pub holder: String,
    pub slot: i64,
    pub at: i64,
    /// The transaction that wrote it (`pg_current_xact_id()`).
    pub xid: i64,
}

/// A row of `chaos_counter_history`: one accepted counter write.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CounterRow {
    pub id: i64,
    pub key: String,
    pub old_fence: i64,
    pub new_fence: i64,
    pub run_id: String,
    pub at: i64,
    /// The transaction that wrote it (`pg_current_xact_id()`).
    pub xid: i64,
}

/// A line of a replica's event log.
#[derive(Debug, Clone)]
pub struct Event {
    pub kind: String,
    pub key: String,
    pub fence: i64,
    pub detail: String,
}

impl Event {
    /// `unix_us kind key fence holder slot detail`
    pub fn parse(line: &str) -> Option<Event> {
        let mut f = line.splitn(7, '\t');
        let _at: i64 = f.next()?.parse().ok()?;
        let kind = f.next()?.to_owned();
        let key = f.next()?.to_owned();
        let fence = f.next()?.parse().ok()?;
        let _holder = f.next()?;
        let _slot = f.next()?;
        let detail = f.next().unwrap_or("").to_owned();
        Some(Event {
            kind,
            key,
            fence,
            detail,
        })
    }
}

/// A fault window on the server clock.
#[derive(Debug, Clone)]
pub struct Window {
    pub kind: FaultKind,
    pub start: i64,
    pub end: i64,
}

pub struct Input {
    pub keys: Vec<String>,
    pub period_us: i64,
    pub lease_us: i64,
    pub steps: u32,
    pub observe_from: i64,
    pub observe_to: i64,
    pub ledger: Vec<LedgerRow>,
    pub counter: Vec<CounterRow>,
    /// Every committed write to `leasehold_lease` (`commits.rs`).
    pub lease_writes: Vec<LeaseWrite>,
    pub events: Vec<Event>,
    pub windows: Vec<Window>,
    pub skipped: Vec<FaultKind>,
    /// `pg_stat_activity` after the quiet tail, before the fleet stops.
    pub backends: Scan,
    /// Transactions seen idle after an autocommit statement during the run
    /// (times on the server clock), and how many samples were taken.
    pub orphans: Vec<Orphan>,
    pub samples: usize,
}

/// One check: its name, what it found, and its first examples (five,
/// unless [`Check::listing`] raised the limit).
pub struct Check {
    name: &'static str,
    pub checked: usize,
    violations: usize,
    examples: Vec<String>,
    limit: usize,
}

impl Check {
    pub fn new(name: &'static str) -> Check {
        Check {
            name,
            checked: 0,
            violations: 0,
            examples: Vec::new(),
            limit: 5,
        }
    }

    /// A check whose violations are worth listing one by one, up to `limit`.
    pub fn listing(name: &'static str, limit: usize) -> Check {
        Check {
            limit,
            ..Check::new(name)
        }
    }

    pub fn fail(&mut self, example: String) {
        self.violations += 1;
        if self.examples.len() < self.limit {
            self.examples.push(example);
        }
    }
}

/// What one run left in the ledger.
#[derive(Default)]
struct Run {
    run_ids: BTreeSet<String>,
    steps: BTreeSet<i32>,
    holder: String,
    slot: i64,
    first: i64,
    last: i64,
}

pub struct Verdict {
    pub text: String,
    pub violations: usize,
}

pub fn secs(us: i64, origin: i64) -> String {
    format!("{:.3}s", (us - origin) as f64 / 1e6)
}

pub fn check(input: &Input) -> Verdict {
    let origin = input.observe_from;
    let t = |us: i64| secs(us, origin);
    let mut by_key: BTreeMap<&str, Vec<&LedgerRow>> = BTreeMap::new();
    for row in &input.ledger {
        by_key.entry(row.key.as_str()).or_default().push(row);
    }
    for rows in by_key.values_mut() {
        rows.sort_by_key(|r| r.id);
    }

    // 1. In commit order (ledger id order within a key: the fence row lock
    //    serializes a key's fenced transactions), fences never decrease.
    let mut order = Check::new("fences never decrease in commit order");
    for (key, rows) in &by_key {
        for w in rows.windows(2) {
            order.checked += 1;
            if w[1].fence < w[0].fence {
                order.fail(format!(
                    "{key}: ledger id {} (fence {}, {}, step {}, at {}) committed after id {} (fence {}, {}, at {})",
                    w[1].id,
                    w[1].fence,
                    w[1].holder,
                    w[1].step,
                    t(w[1].at),
                    w[0].id,
                    w[0].fence,
                    w[0].holder,
                    t(w[0].at)
                ));
            }
        }
    }

    // 2. By server time: no write is accepted after a write with a higher
    //    fence.
    let mut stale = Check::new("no write accepted after a higher fence");
    for (key, rows) in &by_key {
        let mut by_time = rows.clone();
        by_time.sort_by_key(|r| (r.at, r.id));
        let mut highest: Option<&LedgerRow> = None;
        for r in by_time {
            stale.checked += 1;
            if let Some(h) = highest
                && r.fence < h.fence
            {
                stale.fail(format!(
                    "{key}: fence {} ({}, step {}) written at {} after fence {} wrote at {}",
                    r.fence,
                    r.holder,
                    r.step,
                    t(r.at),
                    h.fence,
                    t(h.at)
                ));
            }
            if highest.is_none_or(|h| r.fence > h.fence) {
                highest = Some(r);
            }
        }
    }

    // Runs as the ledger saw them.
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
    let complete = |run: &Run| run.steps.len() == input.steps as usize;

    // 3. The accepted effects of two runs of a key never interleave: once a
    //    run with a higher fence wrote, no lower fence writes again.
    let mut overlap = Check::new("runs' effects never interleave in time");
    for key in by_key.keys() {
        let mut latest: Option<(i64, i64)> = None; // (last write, fence) of the runs so far
        for ((_, fence), run) in runs.range((*key, i64::MIN)..=(*key, i64::MAX)) {
            overlap.checked += 1;
            if let Some((last, f)) = latest
                && run.first < last
            {
                overlap.fail(format!(
                    "{key}: fence {f} wrote until {} but fence {fence} ({}) had started writing at {}",
                    t(last),
                    run.holder,
                    t(run.first)
                ));
            }
            if latest.is_none_or(|(last, _)| run.last > last) {
                latest = Some((run.last, *fence));
            }
        }
    }

    // 4. A fence is one run of one key (fences never repeat).
    let mut unique = Check::new("each fence is one run of one key");
    let mut owners: BTreeMap<i64, BTreeSet<(&str, &str)>> = BTreeMap::new();
    for row in &input.ledger {
        owners
            .entry(row.fence)
            .or_default()
            .insert((row.key.as_str(), row.run_id.as_str()));
    }
    for (fence, who) in &owners {
        unique.checked += 1;
        if who.len() > 1 {
            unique.fail(format!("fence {fence} was used by {who:?}"));
        }
    }

    // 5. The fenced column write: the counter's fence never goes back.
    let mut counter = Check::new("counter fence never goes back");
    for c in &input.counter {
        counter.checked += 1;
        if c.new_fence < c.old_fence {
            counter.fail(format!(
                "{}: counter history id {} set fence {} (run {}) over fence {} at {}",
                c.key,
                c.id,
                c.new_fence,
                c.run_id,
                c.old_fence,
                t(c.at)
            ));
        }
    }

    // 6. A run its replica saw succeed has every step in the ledger (no
    //    acknowledged commit was lost).
    let mut lost = Check::new("runs reported done have all steps committed");
    for e in input.events.iter().filter(|e| e.kind == "done") {
        lost.checked += 1;
        match runs.get(&(e.key.as_str(), e.fence)) {
            Some(run) if complete(run) => {}
            Some(run) => lost.fail(format!(
                "{} fence {}: replica reported done, ledger has steps {:?}",
                e.key, e.fence, run.steps
            )),
            None => lost.fail(format!(
                "{} fence {}: replica reported done, ledger has no row",
                e.key, e.fence
            )),
        }
    }

    // 7. A run its replica saw succeed has every counter write committed:
    //    each step's fenced column write returned Ok to the run, so the
    //    counter's history has one row per step with the run's fence. A
    //    write that ran inside a transaction nobody owns (a connection left
    //    in one: `poison.rs`) returns Ok too, and is lost if that
    //    transaction is rolled back.
    let mut counter_writes: BTreeMap<(&str, i64), usize> = BTreeMap::new();
    for c in &input.counter {
        *counter_writes.entry((c.key.as_str(), c.new_fence)).or_default() += 1;
    }
    let mut lost_writes = Check::new("runs reported done have all counter writes committed");
    for e in input.events.iter().filter(|e| e.kind == "done") {
        lost_writes.checked += 1;
        let n = counter_writes.get(&(e.key.as_str(), e.fence)).copied().unwrap_or(0);
        if n < input.steps as usize {
            lost_writes.fail(format!(
                "{} fence {}: replica reported done, counter history has {n} of its {} writes",
                e.key, e.fence, input.steps
            ));
        }
    }

    // 8. Schedule slots away from every fault window (margin lease+period
    //    on both sides) ran exactly once to completion. A slot may also
    //    have runs that did not complete (cancelled, failed, retried): the
    //    runtime runs an unfinished slot again, by design. The quiet tail's
    //    slots are check 10's, which is stricter.
    let margin = input.lease_us + input.period_us;
    let p = input.period_us;
    let last_fault = input.windows.iter().map(|w| w.end).max().unwrap_or(input.observe_from);
    let tail_first = (last_fault.max(input.observe_from) + margin + p - 1).div_euclid(p);
    let checkable = |k: i64| (k + 1) * p + margin <= input.observe_to;
    let calm = |k: i64| {
        let (start, end) = (k * p, (k + 1) * p);
        start >= input.observe_from
            && k < tail_first
            && end + margin <= input.observe_to
            && input
                .windows
                .iter()
                .all(|w| end + margin <= w.start || start >= w.end + margin)
    };
    let mut completions: BTreeMap<(&str, i64), Vec<i64>> = BTreeMap::new();
    for ((key, fence), run) in &runs {
        if complete(run) {
            completions.entry((key, run.slot)).or_default().push(*fence);
        }
    }
    let mut slots = Check::new("calm slots during faults ran exactly once to completion");
    let (first_slot, last_slot) = (input.observe_from.div_euclid(p), input.observe_to.div_euclid(p));
    let mut fault_slots = 0;
    let mut fault_doubles = 0;
    let mut double_examples = Vec::new();
    for key in &input.keys {
        for k in first_slot..=last_slot {
            let done = completions.get(&(key.as_str(), k)).map(Vec::as_slice).unwrap_or(&[]);
            if calm(k) {
                slots.checked += 1;
                match done.len() {
                    1 => {}
                    0 => slots.fail(format!("{key}: slot {k} (at {}) never completed", t(k * p))),
                    _ => slots.fail(format!(
                        "{key}: slot {k} (at {}) completed {} times, fences {done:?}",
                        t(k * p),
                        done.len()
                    )),
                }
            } else if k < tail_first && (k + 1) * p <= input.observe_to {
                fault_slots += 1;
                if done.len() > 1 {
                    fault_doubles += 1;
                    if double_examples.len() < 3 {
                        double_examples.push(format!(
                            "{key}: slot {k} (at {}) completed by fences {done:?}",
                            t(k * p)
                        ));
                    }
                }
            }
        }
    }

    // 9. Liveness: every job completed a run that started after the last
    //    fault healed.
    let mut live = Check::new("every job ran again after the last fault");
    for key in &input.keys {
        live.checked += 1;
        let again = runs
            .range((key.as_str(), i64::MIN)..=(key.as_str(), i64::MAX))
            .any(|(_, run)| complete(run) && run.first > last_fault);
        if !again {
            live.fail(format!(
                "{key}: no completed run after the last fault ended at {}",
                t(last_fault)
            ));
        }
    }

    // 10. The quiet tail: from lease + period after the last fault to the
    //     end, every slot of every job ran exactly once — one run that
    //     committed all its steps and that its replica reported done. With
    //     no fault left, nothing excuses a missed slot or a second run.
    let done: BTreeSet<(&str, i64)> = input
        .events
        .iter()
        .filter(|e| e.kind == "done")
        .map(|e| (e.key.as_str(), e.fence))
        .collect();
    let mut tail = Check::listing("quiet tail: every slot ran exactly once", 30);
    let tail_slots: Vec<i64> = (tail_first..).take_while(|k| checkable(*k)).collect();
    if (tail_slots.len() as i64) < QUIET_SLOTS {
        tail.fail(format!(
            "the quiet tail has {} checkable slots, {QUIET_SLOTS} are needed (last fault ended at {}; raise --tail)",
            tail_slots.len(),
            t(last_fault)
        ));
    }
    let mut tail_attempts = 0;
    for key in &input.keys {
        for &k in &tail_slots {
            tail.checked += 1;
            let fences: Vec<(i64, &Run)> = runs
                .range((key.as_str(), i64::MIN)..=(key.as_str(), i64::MAX))
                .filter(|(_, run)| run.slot == k)
                .map(|((_, f), run)| (*f, run))
                .collect();
            let ran: Vec<i64> = fences
                .iter()
                .filter(|(f, run)| complete(run) && done.contains(&(key.as_str(), *f)))
                .map(|(f, _)| *f)
                .collect();
            tail_attempts += fences.len() - ran.len();
            let others: Vec<String> = fences
                .iter()
                .filter(|(f, _)| !ran.contains(f))
                .map(|(f, run)| {
                    let seen = if done.contains(&(key.as_str(), *f)) {
                        ", done"
                    } else {
                        ""
                    };
                    format!("fence {f}: {} of {} steps{seen}", run.steps.len(), input.steps)
                })
                .collect();
            let others = if others.is_empty() {
                String::new()
            } else {
                format!("; other attempts: {}", others.join(", "))
            };
            match ran.len() {
                1 => {}
                0 => tail.fail(format!("{key}: tail slot {k} (at {}) ran 0 times{others}", t(k * p))),
                n => tail.fail(format!(
                    "{key}: tail slot {k} (at {}) ran {n} times, fences {ran:?}{others}",
                    t(k * p)
                )),
            }
        }
    }

    // 11. After the tail, before the fleet stops: no replica backend is
    //     idle in transaction (see `backends.rs` for the threshold).
    let mut idle = Check::listing("no replica backend idle in transaction at the end", 100);
    idle.checked = input.backends.backends.len();
    for b in &input.backends.stuck {
        idle.fail(b.describe());
    }

    // 12. During the run (sampled every 250 ms): no replica backend is
    //     idle in transaction right after one of leasehold's lease
    //     statements or a fenced column write — autocommit statements that
    //     then ran inside a transaction nobody owns (`backends.rs`).
    let mut orphaned = Check::listing(
        "no replica backend seen idle in transaction after an autocommit statement",
        20,
    );
    orphaned.checked = input.samples;
    for o in &input.orphans {
        orphaned.fail(o.describe(t));
    }

    // The report.
    let count = |kind: &str| input.events.iter().filter(|e| e.kind == kind).count();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for e in input
        .events
        .iter()
        .filter(|e| e.kind == "cancelled" || e.kind == "dropped")
    {
        let reason = e.detail.split_whitespace().next().unwrap_or("?").to_owned();
        *reasons.entry(format!("{} {reason}", e.kind)).or_default() += 1;
    }
    let mut faults: BTreeMap<&str, usize> = BTreeMap::new();
    for w in &input.windows {
        *faults.entry(w.kind.name()).or_default() += 1;
    }
    let started = count("start");
    let ended = count("done") + count("stale") + count("cancelled") + count("failed") + count("dropped");
    let complete_runs = runs.values().filter(|r| complete(r)).count();
    let fault_count = |kind: FaultKind| input.windows.iter().filter(|w| w.kind == kind).count();
    let dropped = count("dropped");
    let dropped_in_begin = input
        .events
        .iter()
        .filter(|e| e.kind == "dropped" && e.detail.ends_with(" in begin_fenced"))
        .count();
    let raw_begins = input
        .events
        .iter()
        .filter(|e| e.kind == "raw-begin" && e.detail == "ok")
        .count();

    let mut s = String::new();
    let _ = writeln!(s, "| measure | value |");
    let _ = writeln!(s, "|---|---|");
    let _ = writeln!(s, "| runs started (replica logs) | {started} |");
    let _ = writeln!(s, "| runs succeeded | {} |", count("done"));
    let reasons_text: Vec<String> = reasons.iter().map(|(r, n)| format!("{r} {n}")).collect();
    let _ = writeln!(
        s,
        "| runs cancelled / dropped | {} ({}) |",
        count("cancelled") + count("dropped"),
        if reasons_text.is_empty() {
            "-".to_owned()
        } else {
            reasons_text.join(", ")
        }
    );
    let _ = writeln!(s, "| runs failed (database errors) | {} |", count("failed"));
    let _ = writeln!(
        s,
        "| runs with no end (replica killed) | {} |",
        started.saturating_sub(ended)
    );
    let _ = writeln!(
        s,
        "| ledger: rows / runs / complete runs | {} / {} / {complete_runs} |",
        input.ledger.len(),
        runs.len()
    );
    let faults_text: Vec<String> = FaultKind::ALL
        .iter()
        .map(|k| format!("{} {}", k.name(), faults.get(k.name()).copied().unwrap_or(0)))
        .collect();
    let _ = writeln!(
        s,
        "| faults injected ({}) | {} |",
        input.windows.len(),
        faults_text.join(", ")
    );
    if !input.skipped.is_empty() {
        let _ = writeln!(s, "| faults skipped (target busy) | {} |", input.skipped.len());
    }
    let _ = writeln!(
        s,
        "| connection-poisoning faults: begin-drop / raw-begin | {} ({dropped_in_begin} of {dropped} dropped runs were in begin_fenced) / {} ({raw_begins} BEGINs left on a pool) |",
        fault_count(FaultKind::BeginDrop),
        fault_count(FaultKind::RawBegin)
    );
    let _ = writeln!(s, "| stale writes rejected (StaleFence) | {} |", count("stale"));
    let _ = writeln!(
        s,
        "| slots near faults: checked loosely / completed twice | {fault_slots} / {fault_doubles} |"
    );
    let _ = writeln!(
        s,
        "| quiet tail: slots per job / slots checked / extra attempts that did not succeed | {} / {} / {tail_attempts} |",
        tail_slots.len(),
        tail.checked
    );
    let _ = writeln!(
        s,
        "| replica backends at the end: scanned / idle in transaction | {} / {} |",
        input.backends.backends.len(),
        input.backends.stuck.len()
    );
    let longest = input
        .orphans
        .iter()
        .map(|o| o.last_seen - o.first_seen)
        .max()
        .unwrap_or(0);
    let _ = writeln!(
        s,
        "| during the run: samples / transactions seen idle after an autocommit statement (longest seen) | {} / {} ({:.1} s) |",
        input.samples,
        input.orphans.len(),
        longest as f64 / 1e6
    );
    let alone = crate::commits::lease_writes_alone(input);
    let claimed = crate::commits::runs_claims_committed(input);
    let _ = writeln!(
        s,
        "| leasehold lease writes (committed): claims / renewals / releases | {} |",
        crate::commits::summary(&input.lease_writes)
    );
    let checks = [
        order,
        stale,
        overlap,
        unique,
        counter,
        lost,
        lost_writes,
        slots,
        live,
        tail,
        idle,
        orphaned,
        alone,
        claimed,
    ];
    let violations: usize = checks.iter().map(|c| c.violations).sum();
    for c in &checks {
        let _ = writeln!(
            s,
            "| check: {} | {} ({} checked) |",
            c.name,
            if c.violations == 0 {
                "ok".to_owned()
            } else {
                format!("**{} VIOLATIONS**", c.violations)
            },
            c.checked
        );
    }
    let _ = writeln!(s, "| **violations** | **{violations}** |");
    if !double_examples.is_empty() {
        let _ = writeln!(
            s,
            "\nnear faults, slots completed twice (at-least-once, allowed), e.g.:"
        );
        for e in &double_examples {
            let _ = writeln!(s, "  - {e}");
        }
    }
    for c in checks.iter().filter(|c| c.violations > 0) {
        let _ = writeln!(s, "\nVIOLATION {} — first examples:", c.name);
        for e in &c.examples {
            let _ = writeln!(s, "  - {e}");
        }
        if c.violations > c.examples.len() {
            let _ = writeln!(s, "  - … and {} more", c.violations - c.examples.len());
        }
    }
    Verdict { text: s, violations }
}
