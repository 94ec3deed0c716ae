//! The checks around a promotion (`promote.rs`), against [`healthy`]: the
//! promoted server lacks slot 16's run (its claim, steps, counter writes
//! and release), as after an asynchronous promotion whose lag window held
//! it.

use super::tests::{CLAIMED, LOST_STEPS, LOST_WRITES, MS, S, UNIQUE, assert_violates, event_at, healthy, violated};
use super::*;
use crate::commits::LeaseWrite;

/// [`healthy`] with a promotion whose window is [15.9 s, 16.9 s] and which
/// lost slot 16's run, fence 116, from every table.
fn promoted(synchronous: bool) -> Input {
    let mut input = healthy();
    input.ledger.retain(|r| r.fence != 116);
    input.counter.retain(|c| c.new_fence != 116);
    input.lease_writes.retain(|w| w.fence != 116);
    input.windows.push(Window {
        kind: FaultKind::Promote,
        replica: None,
        reach: Reach::All,
        expires_leases: !synchronous,
        start: 15 * S + 900 * MS,
        end: 16 * S + 900 * MS,
    });
    input.promotion = Some(Promotion {
        at: crate::servers::Promotion {
            synchronous,
            cut: 16 * S,
            crash: 16 * S + 600 * MS,
            switched: 16 * S + 900 * MS,
        },
        timeline: Some(2),
        jump: Some((120, 120 + (1 << 32))),
    });
    input
}

/// An asynchronous promotion: what its lag window acknowledged is lost,
/// reported, and not a violation.
#[test]
fn an_asynchronous_promotion_loses_its_lag_window_without_a_violation() {
    let verdict = check(&promoted(false));
    assert_eq!(violated(&verdict), Vec::<&str>::new(), "{}", verdict.text);
    assert!(
        verdict.text.contains(
            "| lost with the lag window (not violations): runs reported done without all their steps | 1 (a fence 116) |"
        ),
        "{}",
        verdict.text
    );
}

/// A synchronous promotion must lose nothing: the same loss is a lost
/// commit and a run without a claim.
#[test]
fn a_synchronous_promotion_that_lost_a_run_is_a_violation() {
    assert_violates(
        &promoted(true),
        &[LOST_STEPS, LOST_WRITES, CLAIMED],
        "a fence 116: replica reported done, ledger has no row",
    );
}

/// The promoted server hands out the lost run's fence 116 again, to a run
/// of job `b`: the ledger holds only the second run, but the replica logs
/// hold both.
#[test]
fn a_fence_handed_out_again_after_a_promotion_violates_uniqueness() {
    let mut input = promoted(false);
    let at = 17 * S + 600 * MS;
    input.lease_writes.push(LeaseWrite {
        key: "b".to_owned(),
        holder: "r1".to_owned(),
        fence: 116,
        what: "claim".to_owned(),
        xid: 7000,
        xact_start: at,
        stmt_start: at,
        at,
        expires_at: at + S,
    });
    input.events.push(Event {
        key: "b".to_owned(),
        ..event_at(at + 10 * MS, "start", 116, "run-b")
    });
    assert_violates(
        &input,
        &[UNIQUE],
        r#"fence 116 was used by {("a", "run16"), ("b", "run-b")}"#,
    );
}
