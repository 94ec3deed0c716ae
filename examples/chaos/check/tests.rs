//! Each check against a small hand-written history: [`healthy`] passes
//! every check, and each test breaks it the way one property is broken and
//! asserts which checks the verdict names. Where a property cannot be
//! broken alone (a stale write is also an interleaving or a commit-order
//! violation), the test names every check that must fail.

use super::*;
use crate::backends::Backend;

pub(super) const S: i64 = 1_000_000;
pub(super) const MS: i64 = 1_000;

const ORDER: &str = "fences never decrease in commit order";
const STALE: &str = "no write accepted after a higher fence";
const INTERLEAVE: &str = "runs' effects never interleave in time";
pub(super) const UNIQUE: &str = "each fence is one run of one key";
const COUNTER: &str = "counter fence never goes back";
pub(super) const LOST_STEPS: &str = "runs reported done have all steps committed";
pub(super) const LOST_WRITES: &str = "runs reported done have all counter writes committed";
const CALM: &str = "calm slots during faults ran exactly once to completion";
const LIVE: &str = "every job ran again after the last fault";
const TAIL: &str = "quiet tail: every slot ran exactly once";
const IDLE: &str = "no replica backend idle in transaction at the end";
const ORPHANED: &str = "no replica backend seen idle in transaction after an autocommit statement";
const ALONE: &str = "leasehold's lease writes commit on their own";
pub(super) const CLAIMED: &str = "every run's claim committed";
const WITHIN_TENURE: &str = "no fenced transaction committed after its tenure ended";
const STALLED: &str = "no due key waited more than two leases for its next fenced commit";
const OVERLAP: &str = "no two runs of a key overlap in real time";
const LIMIT: &str = "runs of the limited job never overlap beyond its fleet-wide limit";

/// One job `a`, two replicas, period, lease and poll interval 1 s, two
/// steps per run, observed from 10 s to 26 s, one fault (replica 0, which
/// runs job `a`, stopped) at [16 s, 16.5 s). So slots 10–13 are calm
/// (check 8), 14–18 near the fault, and 19–23 the quiet tail (check 10).
/// Slot k ran once, as fence 100 + k on replica 0: claimed at +50 ms (for
/// a lease), steps at +100 and +300 ms (each a ledger row committed a
/// millisecond later, and a counter write), released at +400 ms, reported
/// done. The scan at the end found replica 0's backend idle. Beside it, the
/// limited job of [`with_limited_job`].
pub(super) fn healthy() -> Input {
    let mut input = Input {
        keys: vec!["a".to_owned()],
        replicas: 2,
        period_us: S,
        lease_us: S,
        poll_us: S,
        steps: 2,
        observe_from: 10 * S,
        observe_to: 26 * S,
        ledger: Vec::new(),
        counter: Vec::new(),
        lease_writes: Vec::new(),
        events: Vec::new(),
        windows: vec![Window {
            kind: FaultKind::Stop,
            replica: Some(0),
            reach: Reach::Replicas(vec![0]),
            expires_leases: false,
            start: 16 * S,
            end: 16 * S + 500 * MS,
        }],
        skipped: Vec::new(),
        backends: Scan {
            backends: vec![backend(4241, "idle")],
            stuck: Vec::new(),
        },
        orphans: Vec::new(),
        samples: 40,
        promotion: None,
        limited: None,
    };
    for k in 10..=23 {
        let fence = 100 + k;
        let lease = |what: &str, xid: i64, at: i64, expires_at: i64| LeaseWrite {
            key: "a".to_owned(),
            holder: "r0".to_owned(),
            fence,
            what: what.to_owned(),
            xid,
            xact_start: at,
            stmt_start: at,
            at,
            expires_at,
        };
        let claimed = k * S + 50 * MS;
        input.lease_writes.push(lease("claim", 3000 + k, claimed, claimed + S));
        for step in 0..2 {
            let at = k * S + (100 + 200 * step) * MS;
            input
                .ledger
                .push(row(input.ledger.len() as i64 + 1, fence, k, step as i32, at));
            input.counter.push(CounterRow {
                id: input.counter.len() as i64 + 1,
                key: "a".to_owned(),
                old_fence: if step == 0 { fence - 1 } else { fence },
                new_fence: fence,
                run_id: format!("run{k}"),
                at: at + MS,
                xid: 2000 + 10 * k + step,
            });
        }
        let released = k * S + 400 * MS;
        input.lease_writes.push(lease("release", 4000 + k, released, released));
        input
            .events
            .push(event_at(claimed + 10 * MS, "start", fence, &format!("run{k}")));
        input.events.push(event_at(released - 10 * MS, "done", fence, ""));
    }
    with_limited_job(&mut input);
    input
}

/// The limited job: keys `limited:0..3`, at most 2 runs at once, set at
/// 9.9 s. Run i (0..8), fence 500 + i, of key `limited:<i mod 3>` on
/// replica 1, in waves of two 0.8 s apart: claimed at 10.05 s + 0.8 s ×
/// (i / 2) + 50 ms × (i mod 2), its two steps 50 ms and 550 ms after its
/// claim (committed a millisecond later), released 600 ms after it. So two
/// runs at once, never three; the run history has the same eight runs.
fn with_limited_job(input: &mut Input) {
    let keys: Vec<String> = (0..3).map(|k| format!("limited:{k}")).collect();
    let mut history = Vec::new();
    for i in 0..8 {
        let claimed = 10 * S + 50 * MS + (i / 2) * 800 * MS + (i % 2) * 50 * MS;
        limited_run(input, &keys[(i % 3) as usize], 500 + i, claimed);
        history.push(RunRecord {
            key: keys[(i % 3) as usize].clone(),
            fence: 500 + i,
            holder: "r1".to_owned(),
            outcome: "succeeded".to_owned(),
            reason: None,
            started_at: claimed,
            ended_at: claimed + 600 * MS,
        });
    }
    input.limited = Some(Limited {
        job: "limited".to_owned(),
        keys,
        limit: 2,
        set_at: 9 * S + 900 * MS,
        history,
    });
}

/// A run of the limited job's `key` with `fence`, claimed at `claimed`, as
/// [`with_limited_job`] lays them out: its claim, two ledger rows (no
/// counter writes and no log lines: only the fence checks, 13 and 15 look
/// at it besides check 18), its release.
fn limited_run(input: &mut Input, key: &str, fence: i64, claimed: i64) {
    let lease = |what: &str, xid: i64, at: i64, expires_at: i64| LeaseWrite {
        key: key.to_owned(),
        holder: "r1".to_owned(),
        fence,
        what: what.to_owned(),
        xid,
        xact_start: at,
        stmt_start: at,
        at,
        expires_at,
    };
    input
        .lease_writes
        .push(lease("claim", 6000 + fence, claimed, claimed + S));
    for step in 0..2 {
        let at = claimed + (50 + 500 * step) * MS;
        input.ledger.push(LedgerRow {
            id: input.ledger.len() as i64 + 1,
            key: key.to_owned(),
            fence,
            run_id: format!("lim{fence}"),
            step: step as i32,
            holder: "r1".to_owned(),
            slot: 1000 + fence,
            at,
            committed: Some(at + MS),
            xid: 7000 + 10 * fence + step,
        });
    }
    let released = claimed + 600 * MS;
    input
        .lease_writes
        .push(lease("release", 8000 + fence, released, released));
}

/// Ledger row `id` of job `a`: step `step` of the run of slot `slot` with
/// fence `fence`, at `at`.
fn row(id: i64, fence: i64, slot: i64, step: i32, at: i64) -> LedgerRow {
    LedgerRow {
        id,
        key: "a".to_owned(),
        fence,
        run_id: format!("run{slot}"),
        step,
        holder: "r0".to_owned(),
        slot,
        at,
        committed: Some(at + MS),
        xid: 1000 + 10 * slot + step as i64,
    }
}

/// A backend of replica 1's pool in `state`, at the end of the run.
fn backend(pid: i32, state: &str) -> Backend {
    Backend {
        pid,
        application_name: "chaos-r1".to_owned(),
        state: state.to_owned(),
        query: "UPDATE leasehold_lease SET expires_at = now()".to_owned(),
        state_change: "2026-01-01 00:00:00+00".to_owned(),
        xact_start: "2026-01-01 00:00:00+00".to_owned(),
        xact_start_us: 25 * S,
        xact_ms: 3000,
    }
}

fn event(kind: &str, fence: i64, detail: &str) -> Event {
    event_at(0, kind, fence, detail)
}

/// A replica's log line for job `a`, logged at `at`.
pub(super) fn event_at(at: i64, kind: &str, fence: i64, detail: &str) -> Event {
    Event {
        at,
        kind: kind.to_owned(),
        key: "a".to_owned(),
        fence,
        holder: "r0".to_owned(),
        detail: detail.to_owned(),
    }
}

/// The ledger row of step `step` of slot `slot`'s run.
fn ledger_row(input: &mut Input, slot: i64, step: i32) -> &mut LedgerRow {
    input
        .ledger
        .iter_mut()
        .find(|r| r.key == "a" && r.slot == slot && r.step == step)
        .unwrap()
}

/// The checks the verdict reports violated, in its order.
pub(super) fn violated(verdict: &Verdict) -> Vec<&str> {
    verdict
        .text
        .lines()
        .filter_map(|l| l.strip_prefix("VIOLATION "))
        .map(|l| l.split(" — ").next().unwrap())
        .collect()
}

/// Asserts that exactly the checks `names` failed, and that the verdict's
/// examples say `example`.
pub(super) fn assert_violates(input: &Input, names: &[&str], example: &str) -> Verdict {
    let verdict = check(input);
    assert_eq!(violated(&verdict), names, "{}", verdict.text);
    assert!(verdict.violations >= names.len(), "{}", verdict.text);
    for name in names {
        assert!(
            verdict.text.contains(&format!("| check: {name} | **")),
            "{name} not in the table: {}",
            verdict.text
        );
    }
    assert!(verdict.text.contains(example), "no {example:?} in {}", verdict.text);
    verdict
}

#[test]
fn the_healthy_history_passes_every_check() {
    let verdict = check(&healthy());
    assert_eq!(verdict.violations, 0, "{}", verdict.text);
    assert_eq!(verdict.text.matches("| check: ").count(), 18, "{}", verdict.text);
    for name in [
        ORDER,
        STALE,
        INTERLEAVE,
        UNIQUE,
        COUNTER,
        LOST_STEPS,
        LOST_WRITES,
        CALM,
        LIVE,
        TAIL,
        IDLE,
        ORPHANED,
        ALONE,
        CLAIMED,
        WITHIN_TENURE,
        STALLED,
        OVERLAP,
        LIMIT,
    ] {
        assert!(
            verdict.text.contains(&format!("| check: {name} | ok (")),
            "{name}: {}",
            verdict.text
        );
    }
    assert!(
        verdict
            .text
            .contains("| slots near faults: checked loosely / completed twice | 5 / 0 |"),
        "{}",
        verdict.text
    );
    assert!(
        verdict.text.contains(
            "| quiet tail: slots per job / slots checked / extra attempts that did not succeed | 5 / 5 / 0 |"
        ),
        "{}",
        verdict.text
    );
}

/// Check 1: slot 12's first step committed before slot 11's last one.
#[test]
fn a_lower_fence_committed_later_violates_commit_order() {
    let mut input = healthy();
    let (a, b) = (ledger_row(&mut input, 11, 1).id, ledger_row(&mut input, 12, 0).id);
    ledger_row(&mut input, 11, 1).id = b;
    ledger_row(&mut input, 12, 0).id = a;
    assert_violates(
        &input,
        &[ORDER],
        "a: ledger id 5 (fence 111, r0, step 1, at 1.300s) committed after id 4 (fence 112, r0, at 2.100s)",
    );
}

/// Check 2: fence 111's last step carries the same server time as fence
/// 112's first one but committed after it. That is a lower fence accepted
/// after a higher one, and out of commit order too; the two runs' write
/// intervals only touch, so they do not interleave.
#[test]
fn a_lower_fence_written_after_a_higher_one_is_stale() {
    let mut input = healthy();
    let at = ledger_row(&mut input, 12, 0).at;
    let (a, b) = (ledger_row(&mut input, 11, 1).id, ledger_row(&mut input, 12, 0).id);
    let stale = ledger_row(&mut input, 11, 1);
    stale.at = at;
    stale.id = b;
    ledger_row(&mut input, 12, 0).id = a;
    assert_violates(
        &input,
        &[ORDER, STALE],
        "a: fence 111 (r0, step 1) written at 2.100s after fence 112 wrote at 2.100s",
    );
}

/// Check 3: fence 111's last step lands after fence 112 started writing (in
/// commit order: ids follow time). Every write that interleaves is also a
/// stale one (check 2).
#[test]
fn a_lower_fence_writing_inside_a_higher_fences_run_interleaves() {
    let mut input = healthy();
    ledger_row(&mut input, 11, 1).at = 12 * S + 200 * MS;
    let verdict = assert_violates(
        &input,
        &[STALE, INTERLEAVE],
        "a: fence 111 wrote until 2.200s but fence 112 (r0) had started writing at 2.100s",
    );
    assert_eq!(verdict.violations, 2, "{}", verdict.text);
}

/// Check 4: job `b` wrote with fence 110, which is job `a`'s run of slot 10.
#[test]
fn a_fence_used_by_two_runs_violates_uniqueness() {
    let mut input = healthy();
    input.ledger.push(LedgerRow {
        key: "b".to_owned(),
        run_id: "other".to_owned(),
        xid: 9000,
        ..row(999, 110, 10, 0, 10 * S + 200 * MS)
    });
    assert_violates(
        &input,
        &[UNIQUE],
        r#"fence 110 was used by {("a", "run10"), ("b", "other")}"#,
    );
}

/// Check 5: a counter write set fence 112 over fence 999.
#[test]
fn a_counter_write_over_a_higher_fence_violates_the_counter_check() {
    let mut input = healthy();
    let c = input.counter.iter_mut().find(|c| c.new_fence == 112).unwrap();
    c.old_fence = 999;
    assert_violates(
        &input,
        &[COUNTER],
        "a: counter history id 5 set fence 112 (run run12) over fence 999",
    );
}

/// Check 6: a run of slot 9 (before the observation, so no slot check sees
/// it) was reported done, and both its counter writes committed, but only
/// its first step is in the ledger.
#[test]
fn a_done_run_missing_a_step_is_a_lost_commit() {
    let mut input = healthy();
    input.ledger.insert(0, row(0, 109, 9, 0, 9 * S + 100 * MS));
    for step in 0..2 {
        input.counter.push(CounterRow {
            id: 100 + step,
            key: "a".to_owned(),
            old_fence: 108,
            new_fence: 109,
            run_id: "run9".to_owned(),
            at: 9 * S + 200 * MS,
            xid: 8000 + step,
        });
    }
    input.events.push(event("done", 109, ""));
    assert_violates(
        &input,
        &[LOST_STEPS],
        "a fence 109: replica reported done, ledger has steps {0}",
    );
}

/// Check 7: slot 12's run was reported done, but one of its two counter
/// writes is not in the counter's history.
#[test]
fn a_done_run_missing_a_counter_write_lost_it() {
    let mut input = healthy();
    let i = input.counter.iter().position(|c| c.new_fence == 112).unwrap();
    input.counter.remove(i);
    assert_violates(
        &input,
        &[LOST_WRITES],
        "a fence 112: replica reported done, counter history has 1 of its 2 writes",
    );
}

/// Check 8: the run that served calm slot 11 says it served slot 10: slot
/// 10 completed twice and slot 11 never.
#[test]
fn a_calm_slot_run_twice_or_never_violates_the_calm_slots_check() {
    let mut input = healthy();
    for r in input.ledger.iter_mut().filter(|r| r.slot == 11) {
        r.slot = 10;
    }
    let verdict = assert_violates(
        &input,
        &[CALM],
        "a: slot 10 (at 0.000s) completed 2 times, fences [110, 111]",
    );
    assert!(
        verdict.text.contains("a: slot 11 (at 1.000s) never completed"),
        "{}",
        verdict.text
    );
}

/// Near the fault, a slot completed twice is at-least-once, allowed: it is
/// only counted.
#[test]
fn a_slot_near_a_fault_may_complete_twice() {
    let mut input = healthy();
    for r in input.ledger.iter_mut().filter(|r| r.slot == 15) {
        r.slot = 14;
    }
    let verdict = check(&input);
    assert_eq!(verdict.violations, 0, "{}", verdict.text);
    assert!(
        verdict
            .text
            .contains("| slots near faults: checked loosely / completed twice | 5 / 1 |"),
        "{}",
        verdict.text
    );
    assert!(
        verdict
            .text
            .contains("a: slot 14 (at 4.000s) completed by fences [114, 115]"),
        "{}",
        verdict.text
    );
}

/// Check 9: every run's writes carry server times from before the fault
/// healed (10 s earlier than the slots they served, as if the server's
/// clock had stepped back): job `a` never ran again after the fault.
#[test]
fn no_completed_run_after_the_last_fault_violates_liveness() {
    let mut input = healthy();
    for r in &mut input.ledger {
        r.at -= 10 * S;
    }
    assert_violates(
        &input,
        &[LIVE],
        "a: no completed run after the last fault ended at 6.500s",
    );
}

/// Check 10: tail slot 21's run committed both steps, but its replica never
/// reported it done.
#[test]
fn a_tail_slot_without_a_successful_run_violates_the_quiet_tail() {
    let mut input = healthy();
    input.events.retain(|e| !(e.kind == "done" && e.fence == 121));
    let verdict = assert_violates(
        &input,
        &[TAIL],
        "a: tail slot 21 (at 11.000s) ran 0 times; other attempts: fence 121: 2 of 2 steps; around it: ",
    );
    // The lease audit around the slot, so the verdict alone says whether
    // the slot was claimed at all.
    let line = verdict
        .text
        .lines()
        .find(|l| l.contains("tail slot 21"))
        .unwrap_or_default();
    assert!(line.contains(" claim ") && line.contains("fence 121"), "{line}");
}

/// Check 10: a tail slot that two runs completed and their replicas
/// reported done.
#[test]
fn a_tail_slot_run_twice_violates_the_quiet_tail() {
    let mut input = healthy();
    for r in input.ledger.iter_mut().filter(|r| r.slot == 21) {
        r.slot = 20;
    }
    let verdict = assert_violates(
        &input,
        &[TAIL],
        "a: tail slot 20 (at 10.000s) ran 2 times, fences [120, 121]",
    );
    assert!(
        verdict.text.contains("a: tail slot 21 (at 11.000s) ran 0 times"),
        "{}",
        verdict.text
    );
}

/// Check 10: the observation ends a slot early, so the tail has four
/// checkable slots where five are needed.
#[test]
fn a_quiet_tail_too_short_to_check_is_a_violation() {
    let mut input = healthy();
    input.observe_to -= S;
    assert_violates(
        &input,
        &[TAIL],
        "the quiet tail has 4 checkable slots, 5 are needed (last fault ended at 6.500s; raise --tail)",
    );
}

/// Check 11: the final scan found a backend idle in transaction.
#[test]
fn a_backend_idle_in_transaction_at_the_end_is_a_violation() {
    let mut input = healthy();
    let stuck = backend(4242, "idle in transaction");
    input.backends.backends.push(stuck.clone());
    input.backends.stuck.push(stuck);
    assert_violates(&input, &[IDLE], "pid 4242 (chaos-r1) \"idle in transaction\"");
}

/// Check 12: the watcher saw a transaction idle after a lease statement.
#[test]
fn a_backend_seen_idle_after_an_autocommit_statement_is_a_violation() {
    let mut input = healthy();
    input.orphans.push(Orphan {
        pid: 77,
        application_name: "chaos-r2".to_owned(),
        xact_start: 12 * S,
        first_seen: 12 * S + 250 * MS,
        last_seen: 13 * S,
        samples: 4,
        queries: vec!["UPDATE leasehold_lease".to_owned()],
    });
    assert_violates(
        &input,
        &[ORPHANED],
        "pid 77 (chaos-r2): transaction open since 2.000s, seen idle in it after autocommit statements from 2.250s to 3.000s",
    );
}

/// Check 13 (`commits.rs`): a renewal of fence 112 committed in the
/// transaction of that run's first ledger row.
#[test]
fn a_lease_write_committed_with_a_jobs_write_is_a_violation() {
    let mut input = healthy();
    let xid = ledger_row(&mut input, 12, 0).xid;
    input.lease_writes.push(LeaseWrite {
        key: "a".to_owned(),
        holder: "r0".to_owned(),
        fence: 112,
        what: "renewal".to_owned(),
        xid,
        xact_start: 12 * S + 90 * MS,
        stmt_start: 12 * S + 200 * MS,
        at: 12 * S + 200 * MS,
        expires_at: 13 * S + 200 * MS,
    });
    assert_violates(
        &input,
        &[ALONE],
        r#"1 statement(s) [renewal a fence 112 by r0 at 2.200s], committed with 1 ledger rows of {("a", 112)}"#,
    );
}

/// Check 14 (`commits.rs`): slot 13's run started, but no committed claim
/// gave the lease fence 113.
#[test]
fn a_run_without_a_committed_claim_is_a_violation() {
    let mut input = healthy();
    input.lease_writes.retain(|w| !(w.what == "claim" && w.fence == 113));
    assert_violates(
        &input,
        &[CLAIMED],
        "a fence 113 (run run13): started, but no committed claim ever gave the lease that fence",
    );
}

/// Check 15: slot 12's run committed its last step at 12.45 s, after it
/// had released its lease at 12.4 s (as a run frozen inside its fenced
/// transaction and thawed after its tenure commits). Slot 13's last step
/// committed 5 ms after its release: a commit in flight at the tenure's
/// end, within the tolerance.
#[test]
fn a_fenced_commit_after_its_tenure_ended_is_a_violation() {
    let mut input = healthy();
    ledger_row(&mut input, 12, 1).committed = Some(12 * S + 450 * MS);
    ledger_row(&mut input, 13, 1).committed = Some(13 * S + 405 * MS);
    let verdict = assert_violates(
        &input,
        &[WITHIN_TENURE],
        "a fence 112 (r0, step 1): committed at 2.450s, 0.050 s after its tenure ended at 2.400s (released)",
    );
    assert_eq!(verdict.violations, 1, "{}", verdict.text);
}

/// Check 15: slot 12's run froze inside its last fenced transaction and
/// was never released; its lease expired at 13.05 s, and the transaction
/// committed at 13.2 s, when slot 13's run had already claimed the key.
#[test]
fn a_fenced_commit_after_its_lease_expired_is_a_violation() {
    let mut input = healthy();
    input.lease_writes.retain(|w| !(w.what == "release" && w.fence == 112));
    ledger_row(&mut input, 12, 1).committed = Some(13 * S + 200 * MS);
    assert_violates(
        &input,
        &[WITHIN_TENURE],
        "a fence 112 (r0, step 1): committed at 3.200s, 0.150 s after its tenure ended at 3.050s (expired)",
    );
}

/// Replica 0 froze inside slot 14's last fenced transaction after
/// committing its first step, so fence 114 was never released and expired
/// at 15.05 s. Fence 115 claimed the key at once, renewing its lease while
/// its first fenced transaction waited for the frozen one's row lock; it
/// committed at 18.5 s, 3.45 s after the key was due, and slots 16–18 never
/// ran.
fn stalled_behind_a_frozen_transaction() -> Input {
    let mut input = healthy();
    let gone = |fence: i64| (116..=118).contains(&fence);
    input.ledger.retain(|r| !gone(r.fence));
    input.counter.retain(|c| !gone(c.new_fence));
    input.events.retain(|e| !gone(e.fence));
    input
        .lease_writes
        .retain(|w| !gone(w.fence) && !(w.what == "release" && (w.fence == 114 || w.fence == 115)));
    for (step, at) in [(0, 18 * S + 500 * MS), (1, 18 * S + 700 * MS)] {
        let r = ledger_row(&mut input, 15, step);
        r.at = at;
        r.committed = Some(at + MS);
    }
    let lease = |xid: i64, at: i64, expires_at: i64, what: &str| LeaseWrite {
        key: "a".to_owned(),
        holder: "r0".to_owned(),
        fence: 115,
        what: what.to_owned(),
        xid,
        xact_start: at,
        stmt_start: at,
        at,
        expires_at,
    };
    input
        .lease_writes
        .push(lease(5001, 15 * S + 500 * MS, 19 * S + 500 * MS, "renewal"));
    input
        .lease_writes
        .push(lease(5002, 18 * S + 800 * MS, 18 * S + 800 * MS, "release"));
    input
}

/// Check 16: the key waited 3.45 s; the limit is two leases and a poll
/// interval, 3 s.
#[test]
fn a_due_key_stalled_behind_a_frozen_transaction_is_a_violation() {
    let input = stalled_behind_a_frozen_transaction();
    let verdict = assert_violates(
        &input,
        &[STALLED],
        "a: due at 5.050s after fence 114 (r0) expired at 5.050s; next fenced commit at 8.501s (fence 115): \
         waited 3.451 s, 3.451 s of it with a replica live and PostgreSQL up (limit 3.000 s)",
    );
    assert_eq!(verdict.violations, 1, "{}", verdict.text);
}

/// Check 16: the same wait, but PostgreSQL was restarting for a second of
/// it: that second is not counted, and the wait is within the limit.
#[test]
fn a_wait_during_a_postgresql_restart_is_not_counted() {
    let mut input = stalled_behind_a_frozen_transaction();
    input.windows.push(Window {
        kind: FaultKind::PgFast,
        replica: None,
        reach: Reach::All,
        expires_leases: false,
        start: 15 * S + 800 * MS,
        end: 16 * S + 800 * MS,
    });
    let verdict = check(&input);
    assert_eq!(verdict.violations, 0, "{}", verdict.text);
}

/// Moves the `done` of the run with `fence` to `at`.
fn end_run_at(input: &mut Input, fence: i64, at: i64) {
    let done = input
        .events
        .iter_mut()
        .find(|e| e.fence == fence && e.kind == "done")
        .unwrap();
    done.at = at;
}

/// A run that starts while the previous run of its key still runs (a
/// holder whose clock ran slow past its lease) is an overlap; the same
/// overlap during a fault outside G1's assumptions (a frozen replica) is
/// excused and counted, and a run with no end is left out.
#[test]
fn runs_that_overlap_in_real_time_are_caught_unless_a_freeze_excuses_them() {
    let mut input = healthy();
    // Slot 12's run (fence 112) ends 100 ms into slot 13's, which started at
    // 13.06 s.
    end_run_at(&mut input, 112, 13 * S + 160 * MS);
    assert_violates(
        &input,
        &[OVERLAP],
        "a: fence 113 started at 3.060s while fence 112 ran until 3.160s (100.0 ms together)",
    );

    // Around the stop of replica 1 at 16 s, the same overlap is excused.
    let mut input = healthy();
    end_run_at(&mut input, 116, 17 * S + 160 * MS);
    let verdict = check(&input);
    assert_eq!(verdict.violations, 0, "{}", verdict.text);
    assert!(
        verdict
            .text
            .contains("| runs with a start and an end / overlaps excused (freezes, early expiries) | 14 / 1 |"),
        "{}",
        verdict.text
    );

    // After a begin-drop that also expired the replica's leases on the
    // server (outside G1), the same overlap is excused too.
    let mut input = healthy();
    input.windows.push(Window {
        kind: FaultKind::BeginDrop,
        replica: Some(0),
        reach: Reach::Replicas(vec![0]),
        expires_leases: true,
        start: 12 * S + 500 * MS,
        end: 12 * S + 600 * MS,
    });
    end_run_at(&mut input, 112, 13 * S + 160 * MS);
    assert!(!violated(&check(&input)).contains(&OVERLAP));

    // A killed run has no end: nothing to compare.
    let mut input = healthy();
    input.events.retain(|e| !(e.fence == 112 && e.kind == "done"));
    let verdict = check(&input);
    assert!(!violated(&verdict).contains(&OVERLAP), "{}", verdict.text);
}

/// The verdict table's row of check `name`.
fn table_row<'v>(verdict: &'v Verdict, name: &str) -> &'v str {
    let prefix = format!("| check: {name} | ");
    verdict
        .text
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no row for {name}: {}", verdict.text))
}

/// A fault at `[start, start + len)` whose record named `target`
/// (`faults.rs`: `r1 …`, `chaos:3`, `2 backends of r0,r1`, `postgres`).
fn window(kind: FaultKind, target: &str, start: i64, len: i64) -> Window {
    Window {
        kind,
        replica: Window::replica_of(target),
        reach: Reach::of(kind, target),
        expires_leases: kind == FaultKind::Expire,
        start,
        end: start + len,
    }
}

/// Hands slot `slot`'s run (its ledger rows, lease writes and log lines)
/// to replica `r`.
fn run_on(input: &mut Input, slot: i64, r: usize) {
    let (fence, holder) = (100 + slot, format!("r{r}"));
    for row in input.ledger.iter_mut().filter(|row| row.fence == fence) {
        row.holder = holder.clone();
    }
    for w in input.lease_writes.iter_mut().filter(|w| w.fence == fence) {
        w.holder = holder.clone();
    }
    for e in input.events.iter_mut().filter(|e| e.fence == fence) {
        e.holder = holder.clone();
    }
}

/// A check that examined nothing is a violation, not `ok (0 checked)`:
/// PostgreSQL restarted every two seconds through an observation of more
/// than five minutes before the quiet tail, so no slot of `a` is a margin
/// away from a fault that reaches it, and check 8 has nothing to judge.
/// In a short run (the 16 s of [`healthy`]) that is allowed, and the
/// verdict says so instead of `ok`.
#[test]
fn a_calm_slot_check_with_no_calm_slot_fails() {
    let restarts = |from: i64| {
        let mut input = healthy();
        input.observe_from = from;
        for at in (from + 500 * MS..15 * S).step_by(2 * S as usize) {
            input.windows.push(window(FaultKind::PgFast, "postgres", at, 100 * MS));
        }
        input
    };
    let verdict = assert_violates(
        &restarts(10 * S - 300 * S),
        &[CALM],
        "examined nothing (every slot of every job before the quiet tail was within lease + period of a fault",
    );
    assert_eq!(verdict.violations, 1, "{}", verdict.text);
    assert_eq!(
        table_row(&verdict, CALM),
        format!("| check: {CALM} | **1 VIOLATIONS** — examined nothing (0 checked) |"),
    );

    let verdict = check(&restarts(10 * S));
    assert_eq!(verdict.violations, 0, "{}", verdict.text);
    assert_eq!(
        table_row(&verdict, CALM),
        format!(
            "| check: {CALM} | examined nothing, not required: the observation before the quiet tail lasted \
             9.000s, under the 300 s from which check 8 must judge a slot (0 checked) |"
        ),
    );
}

/// The same for any check: the scan at the end found no replica backend
/// (check 11 looked at nothing), which says nothing about them.
#[test]
fn a_check_that_examined_nothing_fails() {
    let mut input = healthy();
    input.backends = Scan::default();
    let verdict = assert_violates(
        &input,
        &[IDLE],
        "examined nothing (the scan after the quiet tail found no replica backend on the database",
    );
    assert_eq!(verdict.violations, 1, "{}", verdict.text);
}

/// Faults every second or two from 10 s to 16 s, each aimed at replica 1,
/// which had nothing to do with job `a` (or at its backends, or at job
/// `b`): none of them can
/// reach `a`'s runs, so its slots 10–13 are still judged — with faults
/// that frequent no slot is a margin away from every fault, and check 8
/// used to examine nothing. A calm slot that completed twice is still a
/// violation there.
#[test]
fn calm_slots_under_frequent_faults_elsewhere_are_checked() {
    let mut input = healthy();
    input.windows.extend([
        window(FaultKind::ProxyDelay, "r1 +300ms", 10 * S + 200 * MS, 2 * S),
        window(FaultKind::Terminate, "2 backends of r1", 11 * S + 500 * MS, 10 * MS),
        window(FaultKind::Kill, "r1", 12 * S + 500 * MS, 200 * MS),
        window(FaultKind::Expire, "b", 13 * S + 200 * MS, 10 * MS),
        window(FaultKind::RawBegin, "r1", 14 * S, 100 * MS),
        window(FaultKind::ProxyReset, "r1", 15 * S, 0),
    ]);
    let verdict = check(&input);
    assert_eq!(verdict.violations, 0, "{}", verdict.text);
    assert_eq!(table_row(&verdict, CALM), format!("| check: {CALM} | ok (4 checked) |"));

    for r in input.ledger.iter_mut().filter(|r| r.slot == 11) {
        r.slot = 10;
    }
    assert_violates(
        &input,
        &[CALM],
        "a: slot 10 (at 0.000s) completed 2 times, fences [110, 111]",
    );
}

/// A fault aimed at a replica reaches the jobs that replica had something
/// to do with within a margin of it: replica 1 killed at 10 s reaches `a`
/// when replica 1 ran `a`'s slot 11 (slots 10–12 are then near a fault,
/// only 13 is calm), not when it ran slot 13 (slots 10–13 are calm). An
/// `expire` reaches the key it expired, a `terminate` the jobs of the
/// replicas whose backends it ended (all of them if it does not say).
#[test]
fn a_replica_fault_reaches_the_jobs_its_replica_had_to_do_with() {
    let killed = |ran: i64| {
        let mut input = healthy();
        run_on(&mut input, ran, 1);
        input.windows.push(window(FaultKind::Kill, "r1", 10 * S, 100 * MS));
        check(&input)
    };
    let verdict = killed(11);
    assert_eq!(verdict.violations, 0, "{}", verdict.text);
    assert_eq!(table_row(&verdict, CALM), format!("| check: {CALM} | ok (1 checked) |"));
    assert!(
        verdict
            .text
            .contains("| slots near faults: checked loosely / completed twice | 8 / 0 |"),
        "{}",
        verdict.text
    );
    let verdict = killed(13);
    assert_eq!(verdict.violations, 0, "{}", verdict.text);
    assert_eq!(table_row(&verdict, CALM), format!("| check: {CALM} | ok (4 checked) |"));

    // The key an `expire` expired, the backends of a `terminate` whose
    // replica ran slot 11, and a `terminate` of backends nobody knows whose.
    for (kind, target) in [
        (FaultKind::Expire, "a"),
        (FaultKind::Terminate, "1 backends of r0"),
        (FaultKind::Terminate, "3 backends"),
    ] {
        let mut input = healthy();
        input.windows.push(window(kind, target, 10 * S + 200 * MS, 10 * MS));
        let verdict = check(&input);
        assert_eq!(
            table_row(&verdict, CALM),
            format!("| check: {CALM} | ok (1 checked) |"),
            "{target}"
        );
    }
}

/// A `kill-holder` (target: the replica, then the key its run held) is a
/// kill: it reaches the jobs its replica had to do with, as a `kill` of
/// that replica does (check 8), and counts as that replica down (check 16).
#[test]
fn a_kill_of_the_holder_reaches_and_excuses_as_a_kill_does() {
    assert_eq!(Reach::of(FaultKind::KillHolder, "r1 a"), Reach::Replicas(vec![1]));
    for (ran, calm) in [(11, 1), (13, 4)] {
        let mut input = healthy();
        run_on(&mut input, ran, 1);
        input
            .windows
            .push(window(FaultKind::KillHolder, "r1 a", 10 * S, 100 * MS));
        let verdict = check(&input);
        assert_eq!(verdict.violations, 0, "{}", verdict.text);
        assert_eq!(
            table_row(&verdict, CALM),
            format!("| check: {CALM} | ok ({calm} checked) |")
        );
    }
    // Check 16's 3.45 s wait, a second of it with both replicas killed
    // (replica 0 by `kill`, replica 1 by `kill-holder`): not counted.
    let mut input = stalled_behind_a_frozen_transaction();
    input.windows.extend([
        window(FaultKind::Kill, "r0", 15 * S + 800 * MS, S),
        window(FaultKind::KillHolder, "r1 a", 15 * S + 800 * MS, S),
    ]);
    let verdict = check(&input);
    assert_eq!(verdict.violations, 0, "{}", verdict.text);
}

/// The limited job's row of the measures, from its second figure on.
fn limited_measures(verdict: &Verdict) -> &str {
    let row = verdict
        .text
        .lines()
        .find(|l| l.starts_with("| limited job `limited`"))
        .unwrap_or_else(|| panic!("no limited job row: {}", verdict.text));
    row.split_once("by the run history | ")
        .map_or(row, |(_, figures)| figures)
}

/// Check 18 on [`healthy`]: its eight limited runs, two at once at most,
/// by the ledger and by the run history.
#[test]
fn the_limited_job_within_its_limit_passes() {
    let verdict = check(&healthy());
    assert_eq!(
        table_row(&verdict, LIMIT),
        format!("| check: {LIMIT} | ok (8 checked) |")
    );
    assert_eq!(
        limited_measures(&verdict),
        "8 / 0 / 2 (from 0.150s) / 2 (of 8), 2 (of 8) |",
        "{}",
        verdict.text
    );
}

/// Check 18: the run of fence 502 claimed 450 ms early, while both runs of
/// the first wave still write: three runs of the limited job at once from
/// its first step (10.45 s) until fence 500's last one (10.6 s). Its own
/// rows are within its tenure, so only check 18 fails. A run that starts
/// the instant another ends overlaps it (closed intervals).
#[test]
fn more_limited_runs_at_once_than_the_limit_is_a_violation() {
    let early = |by: i64| {
        let mut input = healthy();
        for w in input.lease_writes.iter_mut().filter(|w| w.fence == 502) {
            w.at -= by;
            w.xact_start -= by;
            w.stmt_start -= by;
            w.expires_at -= by;
        }
        for r in input.ledger.iter_mut().filter(|r| r.fence == 502) {
            r.at -= by;
            r.committed = r.committed.map(|c| c - by);
        }
        input
    };
    let verdict = assert_violates(
        &early(450 * MS),
        &[LIMIT],
        "3 runs of limited at once (limit 2) from 0.450s to 0.600s: limited:0 fence 500 (r1) 0.100s–0.600s; \
         limited:1 fence 501 (r1) 0.150s–0.650s; limited:2 fence 502 (r1) 0.450s–0.950s",
    );
    assert_eq!(verdict.violations, 1, "{}", verdict.text);
    assert!(
        limited_measures(&verdict).starts_with("8 / 0 / 3 (from 0.450s)"),
        "{}",
        verdict.text
    );
    // Its first step at 10.6 s, the instant fence 500's last one was written.
    assert_violates(
        &early(300 * MS),
        &[LIMIT],
        "3 runs of limited at once (limit 2) from 0.600s to 0.600s",
    );
}

/// Runs claimed before the limit was set are not counted: with the limit
/// set at 10.2 s, the first wave's two runs are left out, and fence 502,
/// claimed 450 ms early (at 10.4 s), overlaps none but fence 503.
#[test]
fn runs_claimed_before_the_limit_was_set_are_not_counted() {
    let mut input = healthy();
    for w in input.lease_writes.iter_mut().filter(|w| w.fence == 502) {
        w.at -= 450 * MS;
        w.expires_at -= 450 * MS;
    }
    for r in input.ledger.iter_mut().filter(|r| r.fence == 502) {
        r.at -= 450 * MS;
        r.committed = r.committed.map(|c| c - 450 * MS);
    }
    input.limited.as_mut().unwrap().set_at = 10 * S + 200 * MS;
    let verdict = check(&input);
    assert_eq!(verdict.violations, 0, "{}", verdict.text);
    assert_eq!(
        table_row(&verdict, LIMIT),
        format!("| check: {LIMIT} | ok (6 checked) |")
    );
    assert_eq!(
        limited_measures(&verdict),
        "6 / 2 / 2 (from 0.950s) / 2 (of 6), 2 (of 6) |",
        "{}",
        verdict.text
    );
}

/// A run without a limited job has nothing for check 18, and says why; a
/// run with one whose runs all began before the limit examined nothing.
#[test]
fn check_18_without_a_limited_run() {
    let mut input = healthy();
    input.limited = None;
    let verdict = check(&input);
    assert_eq!(verdict.violations, 0, "{}", verdict.text);
    assert_eq!(
        table_row(&verdict, LIMIT),
        format!(
            "| check: {LIMIT} | examined nothing, not required: the run had no limited job (--limited-jobs 0) \
             (0 checked) |"
        )
    );
    assert!(!verdict.text.contains("| limited job"), "{}", verdict.text);

    let mut input = healthy();
    input.limited.as_mut().unwrap().set_at = 20 * S;
    let verdict = assert_violates(
        &input,
        &[LIMIT],
        "examined nothing (no run of the limited job wrote a step after its limit was set)",
    );
    assert_eq!(verdict.violations, 1, "{}", verdict.text);
}

/// The server-side counts are reported, not judged: fence 500's history
/// row ends when its release reached the server, 400 ms after its lease
/// (a run that lost its lease and released late), so the history shows
/// three runs at once — a note, no violation.
#[test]
fn a_server_side_count_above_the_limit_is_a_note() {
    let mut input = healthy();
    let limited = input.limited.as_mut().unwrap();
    limited.history[0].ended_at += 400 * MS;
    let verdict = check(&input);
    assert_eq!(verdict.violations, 0, "{}", verdict.text);
    assert_eq!(
        limited_measures(&verdict),
        "8 / 0 / 2 (from 0.150s) / 2 (of 8), 3 (of 8) |",
        "{}",
        verdict.text
    );
    assert!(
        verdict.text.contains(
            "  - run history: 3 runs at once from 0.900s to 1.050s (1 stretches above the limit): limited:0 fence 500 \
             (r1) 0.050s–1.050s succeeded; "
        ),
        "{}",
        verdict.text
    );
}
