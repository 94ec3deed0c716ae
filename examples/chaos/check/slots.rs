//! Checks 8–10: the schedule's slots ran, once, and every job kept running.

use std::collections::BTreeMap;

use super::history::{History, Run, Schedule};
use super::{Check, QUIET_SLOTS, secs};

/// From how long an observation before the quiet tail check 8 must have
/// judged at least one slot, µs. Its slots depend on the fault schedule:
/// with a fault every 1–6 s (CI's `--gap`), every kind drawn, they come in
/// clumps a couple of times in five minutes, when the faults happen to
/// leave a few seconds free around some jobs (seed 909, 5 min: 78 slots,
/// in two clumps and at the two ends), and a one-minute run may have none.
/// After five minutes, none means the faults were too dense for check 8 to
/// see anything: that run failed to check what check 8 is for.
pub const CALM_REQUIRED_AFTER_US: i64 = 300_000_000;

/// Slots near faults, which check 8 does not judge: at-least-once per slot
/// is all leases give there (for the report).
#[derive(Default)]
pub struct NearFaults {
    /// Slots before the quiet tail within a margin of a fault.
    pub slots: usize,
    /// Of those, the ones completed by more than one run.
    pub doubles: usize,
    /// The first three of them.
    pub examples: Vec<String>,
}

/// What check 10 looked at (for the report).
pub struct QuietTail {
    /// Checkable slots in the quiet tail (per job).
    pub slots: usize,
    /// Slots checked, all jobs together.
    pub checked: usize,
    /// Runs of tail slots that did not succeed (allowed).
    pub attempts: usize,
}

/// Check 8: every schedule slot of a job away from every fault window that
/// could reach that job's runs (a margin of lease + period on both sides;
/// which faults reach which jobs: [`Schedule`]) ran exactly once to
/// completion. A slot may also have runs that did not complete (cancelled,
/// failed, retried): the runtime runs an unfinished slot again, by design.
/// The quiet tail's slots are check 10's, which is stricter. Slots near
/// faults are only counted ([`NearFaults`]).
///
/// With a fault every few seconds no slot is a margin away from *every*
/// fault (each one rules out 10 s or more of slots with a 2 s lease and
/// period), but most faults are aimed at one replica, which had nothing to
/// do with most jobs around most of it: those jobs' slots are judged.
///
/// A run that gives it no slot fails (as every check that examined
/// nothing), unless its observation before the quiet tail was shorter than
/// [`CALM_REQUIRED_AFTER_US`]; the verdict then says so.
pub fn calm_slots_ran_once(h: &History, s: &Schedule) -> (Check, NearFaults) {
    let p = s.period;
    let mut completions: BTreeMap<(&str, i64), Vec<i64>> = BTreeMap::new();
    for ((key, fence), run) in &h.runs {
        if h.complete(run) {
            completions.entry((key, run.slot)).or_default().push(*fence);
        }
    }
    let mut check = Check::new("calm slots during faults ran exactly once to completion").when_empty(
        "every slot of every job before the quiet tail was within lease + period of a fault that could reach \
         the job — a PostgreSQL restart, the promotion, or a fault aimed at a replica that had to do with the \
         job then: the faults were too dense for this check to see anything; spread them (a wider --gap)",
    );
    let before_tail = s.tail_first * p - h.input.observe_from;
    if before_tail < CALM_REQUIRED_AFTER_US {
        check.not_required(format!(
            "the observation before the quiet tail lasted {}, under the {} s from which check 8 must judge a slot",
            secs(before_tail, 0),
            CALM_REQUIRED_AFTER_US / 1_000_000
        ));
    }
    let mut near = NearFaults::default();
    let (first_slot, last_slot) = s.observed();
    for key in &h.input.keys {
        for k in first_slot..=last_slot {
            let done = completions.get(&(key.as_str(), k)).map(Vec::as_slice).unwrap_or(&[]);
            if s.calm(key, k) {
                check.checked += 1;
                match done.len() {
                    1 => {}
                    0 => check.fail(format!("{key}: slot {k} (at {}) never completed", h.t(k * p))),
                    _ => check.fail(format!(
                        "{key}: slot {k} (at {}) completed {} times, fences {done:?}",
                        h.t(k * p),
                        done.len()
                    )),
                }
            } else if k < s.tail_first && (k + 1) * p <= h.input.observe_to {
                near.slots += 1;
                if done.len() > 1 {
                    near.doubles += 1;
                    if near.examples.len() < 3 {
                        near.examples.push(format!(
                            "{key}: slot {k} (at {}) completed by fences {done:?}",
                            h.t(k * p)
                        ));
                    }
                }
            }
        }
    }
    (check, near)
}

/// Check 9: liveness — every job completed a run that started after the
/// last fault healed.
pub fn every_job_ran_again(h: &History, s: &Schedule) -> Check {
    let mut check = Check::new("every job ran again after the last fault");
    for key in &h.input.keys {
        check.checked += 1;
        let again = h
            .runs_of(key)
            .any(|(_, run)| h.complete(run) && run.first > s.last_fault);
        if !again {
            check.fail(format!(
                "{key}: no completed run after the last fault ended at {}",
                h.t(s.last_fault)
            ));
        }
    }
    check
}

/// Check 10: the quiet tail — from lease + period after the last fault to
/// the end, every slot of every job ran exactly once: one run that
/// committed all its steps and that its replica reported done. With no
/// fault left, nothing excuses a missed slot or a second run. A tail
/// shorter than [`QUIET_SLOTS`] slots is a violation too.
pub fn quiet_tail_ran_once(h: &History, s: &Schedule) -> (Check, QuietTail) {
    let p = s.period;
    let steps = h.input.steps;
    let mut check = Check::listing("quiet tail: every slot ran exactly once", 30);
    let tail_slots = s.tail_slots();
    if (tail_slots.len() as i64) < QUIET_SLOTS {
        check.fail(format!(
            "the quiet tail has {} checkable slots, {QUIET_SLOTS} are needed (last fault ended at {}; raise --tail)",
            tail_slots.len(),
            h.t(s.last_fault)
        ));
    }
    let mut attempts = 0;
    for key in &h.input.keys {
        for &k in &tail_slots {
            check.checked += 1;
            let fences: Vec<(i64, &Run)> = h.runs_of(key).filter(|(_, run)| run.slot == k).collect();
            let ran: Vec<i64> = fences
                .iter()
                .filter(|(f, run)| h.complete(run) && h.done.contains(&(key.as_str(), *f)))
                .map(|(f, _)| *f)
                .collect();
            attempts += fences.len() - ran.len();
            let others: Vec<String> = fences
                .iter()
                .filter(|(f, _)| !ran.contains(f))
                .map(|(f, run)| {
                    let seen = if h.done.contains(&(key.as_str(), *f)) {
                        ", done"
                    } else {
                        ""
                    };
                    format!("fence {f}: {} of {steps} steps{seen}", run.steps.len())
                })
                .collect();
            let others = if others.is_empty() {
                String::new()
            } else {
                format!("; other attempts: {}", others.join(", "))
            };
            match ran.len() {
                1 => {}
                0 => check.fail(format!(
                    "{key}: tail slot {k} (at {}) ran 0 times{others}; around it: {}",
                    h.t(k * p),
                    around(h, key, (k - 1) * p, (k + 2) * p)
                )),
                n => check.fail(format!(
                    "{key}: tail slot {k} (at {}) ran {n} times, fences {ran:?}{others}",
                    h.t(k * p)
                )),
            }
        }
    }
    let tail = QuietTail {
        slots: tail_slots.len(),
        checked: check.checked,
        attempts,
    };
    (check, tail)
}

/// What the lease audit and the replicas' logs say of `key` in
/// `[from, to)`: enough to tell from the verdict alone whether a missed
/// slot was never claimed, claimed late, or claimed by a run that wrote
/// nothing.
fn around(h: &History, key: &str, from: i64, to: i64) -> String {
    let within = |at: i64| from <= at && at < to;
    let mut seen: Vec<(i64, String)> = h
        .input
        .lease_writes
        .iter()
        .filter(|w| w.key == key && within(w.at))
        .map(|w| (w.at, format!("{} {} {} fence {}", h.t(w.at), w.what, w.holder, w.fence)))
        .chain(
            h.input
                .events
                .iter()
                .filter(|e| e.key == key && within(e.at))
                .map(|e| (e.at, format!("{} {} fence {} {}", h.t(e.at), e.kind, e.fence, e.detail))),
        )
        .collect();
    seen.sort();
    if seen.is_empty() {
        return "nothing".to_owned();
    }
    seen.into_iter().map(|(_, s)| s).collect::<Vec<_>>().join("; ")
}
