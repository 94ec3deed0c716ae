//! The verdict: a table of what the run did, then one row per check, then
//! the first examples of each violated check.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::history::History;
use super::limit::LimitCount;
use super::overlap::Overlaps;
use super::slots::{NearFaults, QuietTail};
use super::tenures::{Measured, Tenures};
use super::{Check, Verdict};
use crate::faults::FaultKind;

/// The verdict on `checks`, with the run's numbers from the history and
/// what checks 8, 10, 15–16, 17 and 18 counted.
pub fn verdict(
    h: &History,
    checks: &[Check],
    near: &NearFaults,
    tail: &QuietTail,
    (tenures, measured): (&Tenures, &Measured),
    (overlaps, limited): (&Overlaps, &LimitCount),
) -> Verdict {
    let input = h.input;
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
    let complete_runs = h.runs.values().filter(|r| h.complete(r)).count();
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
        h.runs.len()
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
        "| stop-in-fence: fenced transactions held open / frozen | {} / {} |",
        count("hold"),
        fault_count(FaultKind::StopInFence)
    );
    let ms = |us: Option<i64>| us.map_or("-".to_owned(), |us| format!("{:.1} ms", us as f64 / 1e3));
    let _ = writeln!(
        s,
        "| tenures (lease audit) / latest fenced commit after its tenure's end / longest wait of a due key | {} / {} / {} |",
        tenures.len(),
        ms(measured.latest_commit),
        measured
            .longest_wait
            .as_ref()
            .map_or("-".to_owned(), |(w, key)| format!("{} ({key})", ms(Some(*w))))
    );
    let _ = writeln!(
        s,
        "| runs with a start and an end / overlaps excused (freezes, early expiries) | {} / {} |",
        overlaps.runs, overlaps.excused
    );
    if let Some(l) = &input.limited {
        let runs = limited.counted;
        let at = |m: Option<(usize, i64)>| m.map_or("-".to_owned(), |(n, at)| format!("{n} (from {})", h.t(at)));
        let (tenures, tenures_of) = limited.tenures;
        let (history, history_of) = limited.history;
        let _ = writeln!(
            s,
            "| limited job `{}` ({} keys, at most {} at once): runs counted / claimed before the limit (not counted) \
             / most at once by the ledger / not judged: by the lease audit's tenures, by the run history \
             | {runs} / {} / {} / {tenures} (of {tenures_of}), {history} (of {history_of}) |",
            l.job,
            l.keys.len(),
            l.limit,
            limited.before,
            at(limited.most),
        );
    }
    let _ = writeln!(
        s,
        "| slots near faults: checked loosely / completed twice | {} / {} |",
        near.slots, near.doubles
    );
    let _ = writeln!(
        s,
        "| quiet tail: slots per job / slots checked / extra attempts that did not succeed | {} / {} / {} |",
        tail.slots, tail.checked, tail.attempts
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
    if let Some(p) = &input.promotion {
        let lost = super::durability::lost_in_promotion(h);
        let shown: Vec<String> = lost.iter().take(8).map(|(k, f)| format!("{k} fence {f}")).collect();
        let _ = writeln!(
            s,
            "| promotion: replication / cut / primary crashed / proxies switched / timeline after / fence jump | {} / {} / {} / {} / {} / {} |",
            if p.at.synchronous {
                "synchronous"
            } else {
                "asynchronous"
            },
            super::secs(p.at.cut, input.observe_from),
            super::secs(p.at.crash, input.observe_from),
            super::secs(p.at.switched, input.observe_from),
            p.timeline.map_or("-".to_owned(), |t| t.to_string()),
            p.jump.map_or("none".to_owned(), |(from, to)| format!("{from} → {to}")),
        );
        let _ = writeln!(
            s,
            "| lost with the lag window (not violations): runs reported done without all their steps | {}{} |",
            lost.len(),
            if shown.is_empty() {
                String::new()
            } else {
                format!(
                    " ({}{})",
                    shown.join(", "),
                    if lost.len() > shown.len() { ", …" } else { "" }
                )
            }
        );
    }
    let _ = writeln!(
        s,
        "| leasehold lease writes (committed): claims / renewals / releases | {} |",
        crate::commits::summary(&input.lease_writes)
    );
    let violations: usize = checks.iter().map(|c| c.violations).sum();
    for c in checks {
        let verdict = match (c.violations, c.examined_nothing(), c.exempt()) {
            (0, true, Some(why)) => format!("examined nothing, not required: {why}"),
            (0, _, _) => "ok".to_owned(),
            (n, true, _) => format!("**{n} VIOLATIONS** — examined nothing"),
            (n, false, _) => format!("**{n} VIOLATIONS**"),
        };
        let _ = writeln!(s, "| check: {} | {verdict} ({} checked) |", c.name, c.checked);
    }
    let _ = writeln!(s, "| **violations** | **{violations}** |");
    if !near.examples.is_empty() {
        let _ = writeln!(
            s,
            "\nnear faults, slots completed twice (at-least-once, allowed), e.g.:"
        );
        for e in &near.examples {
            let _ = writeln!(s, "  - {e}");
        }
    }
    if !limited.notes.is_empty() {
        let _ = writeln!(
            s,
            "\nlimited job, server-side counts above the limit (not violations: see check/limit.rs):"
        );
        for n in &limited.notes {
            let _ = writeln!(s, "  - {n}");
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
