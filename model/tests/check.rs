//! The model check: the real protocol satisfies every property at the CI
//! bound, and each mistake put back on purpose is found.
//!
//! `cargo test -p leasehold-model --release -- --nocapture` prints the state
//! counts and times. In a debug build (`cargo test --workspace`, the
//! README's test command) the checks are ignored: they run about 3× slower
//! unoptimised, and CI runs them in release (`.ci/run`). The deeper, release-time check:
//! `LEASEHOLD_MODEL_DEPTH=deep cargo test -p leasehold-model --release -- --ignored --nocapture`.

use leasehold_model::env::{Fault, Faults};
use leasehold_model::properties::{
    DUE_KEY_RUNS, FENCE_WAIT_BOUNDED, FENCES_INCREASE, KIND_LIMIT_RUNS, KIND_LIMIT_TENURES,
    NO_FENCED_COMMIT_AFTER_TENURE, NO_FENCED_UPDATE_AFTER_TENURE, NO_OVERLAP, ONCE_PER_CLEAN_SLOT,
    STALE_WRITE_REJECTED,
};
use leasehold_model::{Action, Config, LeaseModel, Outcome, State, Variant, check};
use stateright::{Model, Path};

const SAFETY: [&str; 10] = [
    NO_OVERLAP,
    STALE_WRITE_REJECTED,
    FENCES_INCREASE,
    DUE_KEY_RUNS,
    ONCE_PER_CLEAN_SLOT,
    NO_FENCED_COMMIT_AFTER_TENURE,
    NO_FENCED_UPDATE_AFTER_TENURE,
    FENCE_WAIT_BOUNDED,
    KIND_LIMIT_TENURES,
    KIND_LIMIT_RUNS,
];

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn report(name: &str, cfg: &Config, out: &Outcome) {
    println!(
        "{name}: {} states generated, {} unique, max depth {}, {:.1?} on {} threads (replicas {}, keys {}, horizon {} ticks, {} fault(s), variant {:?})",
        out.states,
        out.unique,
        out.max_depth,
        out.elapsed,
        threads(),
        cfg.replicas(),
        cfg.keys,
        cfg.horizon,
        cfg.fault_budget,
        cfg.variant,
    );
}

/// Prints a counterexample's actions and the runs at its end.
fn print_trace(name: &str, path: &Path<State, Action>) {
    print_steps(name, &path.clone().into_vec());
}

/// Prints the steps of a counterexample: each state and the action taken
/// from it (none from the last).
fn print_steps(name: &str, steps: &[(State, Option<Action>)]) {
    println!("{name}: counterexample of {} steps", steps.len() - 1);
    for (state, action) in steps {
        if let Some(action) = action {
            println!("  t={:>2} S={:>3} {:?}", state.now, state.db.clock, action);
        }
    }
    let last = &steps[steps.len() - 1].0;
    println!("  end t={} S={} rows={:?}", last.now, last.db.clock, last.db.rows);
    if !last.db.slots.is_empty() {
        println!("  slots={:?}", last.db.slots);
    }
    for (i, r) in last.replicas.iter().enumerate() {
        println!("  replica {i}: clock {} {:?} runs {:?}", r.clock, r.status, r.runs);
    }
}

/// Checks the whole bound of `cfg`: it finishes and no safety property
/// is violated (a violation's trace is printed).
fn assert_safe(name: &str, cfg: &Config) -> Outcome {
    let out = check(cfg.clone(), threads(), None);
    report(name, cfg, &out);
    assert!(out.done, "{name}: the check did not finish");
    for p in SAFETY {
        if let Some(path) = out.discoveries.get(p) {
            print_trace(p, path);
            panic!("{name}: property {p} violated");
        }
    }
    out
}

/// [`assert_safe`], and the check is not vacuous: it reached an example
/// of each thing the protocol does.
fn assert_holds(name: &str, cfg: Config) -> Outcome {
    let out = assert_safe(name, &cfg);
    let mut examples = vec!["a_key_changes_hands", "a_run_stops_at_its_deadline", "a_slot_completes"];
    if cfg.writes {
        examples.extend([
            "a_stale_write_is_refused",
            "a_late_commit_is_refused",
            "an_idle_end_frees_a_waiting_advance",
        ]);
    }
    if cfg.liveness && cfg.faults.crash {
        examples.push("a_dead_holders_key_is_taken_over_before_expiry");
    }
    if cfg.liveness && cfg.faults.kill_session {
        examples.push("a_lost_session_is_re_pointed");
    }
    for example in examples {
        assert!(
            out.discoveries.contains_key(example),
            "{name}: no example of {example}: the check is vacuous"
        );
    }
    out
}

/// Checks `cfg` until `property` fails, and returns the trace.
fn assert_fails(name: &str, cfg: Config, property: &'static str) -> Path<State, Action> {
    let out = check(cfg.clone(), threads(), Some(property));
    report(name, &cfg, &out);
    let path = out
        .discoveries
        .get(property)
        .unwrap_or_else(|| panic!("{name}: the checker found no violation of {property}"))
        .clone();
    print_trace(property, &path);
    path
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn the_protocol_satisfies_every_property_at_the_ci_bound() {
    let cfg = Config::ci();
    assert_eq!(
        cfg.margin,
        cfg.required_margin(),
        "the CI bound checks the documented margin exactly"
    );
    assert_eq!(
        cfg.liveness_margin,
        cfg.required_liveness_margin(),
        "and the lost session's stop margin exactly"
    );
    assert!(cfg.liveness, "the CI bound has the liveness session");
    let out = assert_holds("ci", cfg);
    assert!(out.unique > 100_000, "suspiciously few states: {}", out.unique);
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn with_the_margin_below_the_clock_rate_bound_two_runs_overlap() {
    let mut cfg = Config::ci();
    cfg.variant = Variant::MarginBelowDrift;
    // Covers the stop time d but not the drift 2ρ·lease.
    cfg.margin = cfg.stop_ticks as u16 * cfg.units_per_tick;
    assert!(cfg.margin < cfg.required_margin());
    assert_fails("margin below 2ρ·lease + d", cfg, NO_OVERLAP);
}

fn renew_config(variant: Variant) -> Config {
    let mut cfg = Config::ci();
    cfg.variant = variant;
    cfg.writes = false;
    cfg.fault_budget = 2;
    // Two freezes suffice (one keeps the other replica from claiming
    // first); with delays too the whole bound is 22 M states, too many for
    // CI.
    cfg.faults = Faults {
        freeze: true,
        ..Faults::NONE
    };
    cfg
}

/// The holder and fence check removed from renewal altogether — from
/// `RENEW_MANY`'s SQL and from the reading of its answer (an `ensure` that
/// takes `renewed.pop()`, whatever row): a resumed run's `ensure` extends the new
/// tenure and takes its row as its own.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn with_the_holder_and_fence_clause_removed_from_renew_two_runs_overlap() {
    assert_fails(
        "renew without holder and fence, answer unchecked",
        renew_config(Variant::RenewUncheckedAnswer),
        NO_OVERLAP,
    );
}

/// With only the SQL clause removed, the runtime's own `(key, fence)`
/// match (heartbeat, `ensure`, `Tenure::renewed`) still stops the old run:
/// the checker finds no overlap in the whole bound. Two lines of defence,
/// each shown to matter only together with the other gone.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn with_only_the_sql_clause_removed_the_runtimes_fence_match_still_holds() {
    let cfg = renew_config(Variant::RenewWithoutHolderFence);
    let out = check(cfg.clone(), threads(), None);
    report("renew without holder and fence in SQL only", &cfg, &out);
    assert!(out.done);
    assert!(
        !out.discoveries.contains_key(NO_OVERLAP),
        "the fence match in the runtime no longer holds"
    );
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn with_same_holder_reentrance_in_run_claims_two_runs_overlap() {
    let mut cfg = Config::ci();
    cfg.variant = Variant::ReentrantRunClaim;
    assert_eq!(cfg.holders[0], cfg.holders[1], "two processes sharing one holder id");
    assert_fails("re-entrant run claim", cfg, NO_OVERLAP);
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn with_releases_that_delete_the_row_and_restart_fences_fences_repeat_and_a_stale_write_lands() {
    let mut cfg = Config::ci();
    cfg.variant = Variant::DeleteOnRelease;
    cfg.ensure = false;
    cfg.faults = Faults {
        freeze: true,
        ..Faults::NONE
    };
    assert_fails("release deletes the row", cfg.clone(), FENCES_INCREASE);
    assert_fails("release deletes the row", cfg, STALE_WRITE_REJECTED);
}

/// Not a mistake: an operator's forced revoke (`leasehold revoke --force`,
/// docs/design.md §7) ends a live tenure on purpose. The holder's run goes
/// on until its next heartbeat reports the loss, and the key — its schedule
/// untouched — can be claimed at once, so two runs do overlap in real time;
/// what still holds is the fence: every write of the revoked run after the
/// revoke is rejected, and fences keep growing.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn a_forced_revoke_lets_runs_overlap_but_the_fence_holds() {
    let mut cfg = Config::ci();
    cfg.faults = Faults {
        revoke: true,
        ..Faults::NONE
    };
    let out = check(cfg.clone(), threads(), None);
    report("forced revoke", &cfg, &out);
    assert!(out.done);
    let overlap = out
        .discoveries
        .get(NO_OVERLAP)
        .expect("a revoked run overlaps the next one");
    print_trace(NO_OVERLAP, overlap);
    for p in [STALE_WRITE_REJECTED, FENCES_INCREASE] {
        assert!(!out.discoveries.contains_key(p), "forced revoke: {p} violated");
    }
}

/// The release-time check: `LEASEHOLD_MODEL_DEPTH=deep cargo test -p
/// leasehold-model --release -- --ignored --nocapture` (tens of minutes,
/// several GB of memory).
#[test]
#[ignore = "release-time depth: LEASEHOLD_MODEL_DEPTH=deep"]
fn the_protocol_satisfies_every_property_at_the_release_bounds() {
    if std::env::var("LEASEHOLD_MODEL_DEPTH").as_deref() != Ok("deep") {
        println!("set LEASEHOLD_MODEL_DEPTH=deep to run the release-time bounds");
        return;
    }
    for (name, cfg) in Config::deep() {
        assert_holds(name, cfg);
    }
}

fn late_claim_config(variant: Variant) -> Config {
    let mut cfg = Config::ci();
    // `CLAIM_TIMEOUT` is 10 s whatever the lease: two leases of 5 s.
    cfg.claim_timeout = 2 * cfg.lease;
    cfg.variant = variant;
    cfg.writes = false;
    cfg.ensure = false;
    cfg.faults = Faults {
        delay: true,
        ..Faults::NONE
    };
    cfg
}

/// The gap this model found in the real protocol
/// (`Variant::LateClaimStarts`): a scheduler that starts a run from a claim's
/// answer without checking that the tenure's local deadline (`sent +
/// remaining − margin`) is still ahead. `CLAIM_TIMEOUT` is 10 s whatever the lease, so
/// with a lease below ~11 s one slow answer (one delay) suffices: the job's
/// task starts after the lease may have been taken over.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn with_late_claim_answers_started_two_runs_overlap() {
    let path = assert_fails(
        "a claim answered after its deadline starts its run",
        late_claim_config(Variant::LateClaimStarts),
        NO_OVERLAP,
    );
    assert!(
        path.into_actions()
            .iter()
            .any(|a| matches!(a, Action::Poll(_, leasehold_model::env::Fate::DelayReply))),
        "the overlap comes from a delayed claim answer"
    );
}

/// The real scheduler: a claim answered at or after its local
/// deadline is handed back unrun. With the same long claim timeout the
/// whole bound is clean.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn a_claim_answered_after_its_deadline_is_handed_back_unrun() {
    assert_safe("late claim answers handed back", &late_claim_config(Variant::Correct));
}

/// A replica frozen inside its fenced transaction (between the advance and
/// `COMMIT`; its clock runs on), and nothing else: one freeze, writes on,
/// no `ensure`, 6 ticks — the bound where both mistakes below show
/// (a claim at t=1 expires at t≈6; a bigger bound only takes longer).
fn fenced_config(variant: Variant) -> Config {
    let mut cfg = Config::ci();
    cfg.variant = variant;
    cfg.horizon = 6;
    cfg.ensure = false;
    cfg.faults = Faults {
        freeze: true,
        ..Faults::NONE
    };
    cfg
}

/// A counterexample of the `always` property `property`, cut at the first
/// state that violates it (a check that runs to the end keeps the last
/// violating path it visited, and the ghost flags stay set after the
/// violation).
fn first_violation(cfg: &Config, property: &str, path: &Path<State, Action>) -> Vec<(State, Option<Action>)> {
    let model = LeaseModel::new(cfg.clone());
    let holds = model
        .properties()
        .into_iter()
        .find(|p| p.name == property)
        .expect("a property of the model")
        .condition;
    let mut steps = path.clone().into_vec();
    if let Some(i) = steps.iter().position(|(s, _)| !holds(&model, s)) {
        steps.truncate(i + 1);
        steps[i].1 = None;
    }
    steps
}

/// Checks the whole of `cfg`, asserting that each property in `found` is
/// violated (its counterexample, cut at the violation, is printed and
/// returned) and none in `clean` is.
fn assert_violations(
    name: &str,
    cfg: Config,
    found: &[&'static str],
    clean: &[&'static str],
) -> Vec<Vec<(State, Option<Action>)>> {
    let out = check(cfg.clone(), threads(), None);
    report(name, &cfg, &out);
    assert!(out.done, "{name}: the check did not finish");
    let mut traces = Vec::new();
    for &p in found {
        let path = out
            .discoveries
            .get(p)
            .unwrap_or_else(|| panic!("{name}: the checker found no violation of {p}"));
        let steps = first_violation(&cfg, p, path);
        print_steps(p, &steps);
        traces.push(steps);
    }
    for &p in clean {
        if let Some(path) = out.discoveries.get(p) {
            print_steps(p, &first_violation(&cfg, p, path));
            panic!("{name}: property {p} violated");
        }
    }
    traces
}

/// Fenced writes as they were before schema version 5: no check of the
/// tenure at `COMMIT` (R1), no idle timeout (R2), no early refusal of the
/// advance or the fenced `UPDATE`. A replica frozen between its advance
/// and its `COMMIT` resumes after its lease expired and commits; while it
/// stays frozen it holds the fence row's lock, so the successor's advance
/// waits past a lease (for as long as the freeze lasts); and a resumed
/// run's fenced `UPDATE` applies after its lease expired too.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn with_fenced_transactions_unbounded_by_their_tenure_a_frozen_holder_commits_late_and_stalls_its_successor() {
    let traces = assert_violations(
        "fenced transaction unbounded by its tenure",
        fenced_config(Variant::UnboundedFencedTransaction),
        &[
            NO_FENCED_COMMIT_AFTER_TENURE,
            FENCE_WAIT_BOUNDED,
            NO_FENCED_UPDATE_AFTER_TENURE,
        ],
        &[],
    );
    for steps in &traces[..2] {
        let actions: Vec<Action> = steps.iter().filter_map(|(_, a)| *a).collect();
        let begin = actions.iter().position(|a| matches!(a, Action::Begin(..)));
        let freeze = actions
            .iter()
            .position(|a| matches!(a, Action::Fault(Fault::Freeze(_))));
        assert!(
            begin.zip(freeze).is_some_and(|(b, f)| b < f),
            "the violation comes from a replica frozen inside its transaction"
        );
    }
}

/// The idle timeout (R2) and the advance's early refusal without the
/// commit check (R1): the stall is bounded by a lease, but a replica that
/// resumes after its lease expired and before the server's timeout fires
/// still commits. R1 is what makes the commit safe.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn with_only_the_commit_check_removed_a_frozen_holder_still_commits_after_its_tenure() {
    assert_violations(
        "no commit check",
        fenced_config(Variant::NoCommitCheck),
        &[NO_FENCED_COMMIT_AFTER_TENURE],
        &[
            NO_FENCED_UPDATE_AFTER_TENURE,
            FENCE_WAIT_BOUNDED,
            NO_OVERLAP,
            STALE_WRITE_REJECTED,
        ],
    );
}

/// The commit check (R1) without the idle timeout (R2): no late commit
/// lands, but the frozen transaction keeps the fence row locked, so the
/// successor's advance waits past a lease. R2 is what bounds the stall.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn with_only_the_idle_timeout_removed_no_late_commit_lands_but_the_successor_stalls() {
    assert_violations(
        "no idle timeout",
        fenced_config(Variant::NoIdleTimeout),
        &[FENCE_WAIT_BOUNDED],
        &[
            NO_FENCED_COMMIT_AFTER_TENURE,
            NO_FENCED_UPDATE_AFTER_TENURE,
            NO_OVERLAP,
            STALE_WRITE_REJECTED,
        ],
    );
}

/// Crash takeover (issue 40) with only the given faults, `budget` of them:
/// no writes, no `ensure` (the takeover is about runs; fenced writes after
/// a takeover are refused by F5 like any other lost tenure, and the CI
/// bound checks that with writes on).
fn liveness_config(variant: Variant, faults: Faults, budget: u8) -> Config {
    let mut cfg = Config::ci();
    cfg.variant = variant;
    cfg.writes = false;
    cfg.ensure = false;
    cfg.faults = faults;
    cfg.fault_budget = budget;
    cfg
}

fn took_over(path: &Path<State, Action>) -> bool {
    path.last_state().ghost.took_over
}

/// Without the session test, `pick` takes over a holder that only went
/// silent: cut off (or frozen), its session lives on at the server and its
/// runs go on, but after the grace its key is claimed again.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn without_the_session_test_a_partitioned_holder_is_taken_over_while_it_runs() {
    let faults = Faults {
        partition: true,
        ..Faults::NONE
    };
    let path = assert_fails(
        "takeover without the session test",
        liveness_config(Variant::NoSessionDeadTest, faults, 1),
        NO_OVERLAP,
    );
    assert!(took_over(&path), "the overlap comes from an early takeover");
}

/// Without the grace, `pick` takes over as soon as the holder's session
/// is gone — before the holder, whose process lives, has even read the
/// error of its next confirm.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn without_the_grace_a_killed_session_is_taken_over_before_its_holder_notices() {
    let faults = Faults {
        kill_session: true,
        ..Faults::NONE
    };
    let path = assert_fails(
        "takeover without the grace",
        liveness_config(Variant::NoGrace, faults, 1),
        NO_OVERLAP,
    );
    assert!(took_over(&path), "the overlap comes from an early takeover");
}

/// A killed session and a freeze (2 faults, 5 ticks: a claim at t=1, the
/// grace 2 ticks): the holder may fail to re-point its run (frozen right
/// after it read the error), or come back from a freeze to find its session
/// gone. With the stop deadline on a lost session the run is stopped (or,
/// frozen, excused as §2 excuses a frozen process past its deadline)
/// before anyone can take the key over; without it, the run goes on after
/// the takeover.
fn kill_and_freeze(variant: Variant) -> Config {
    let faults = Faults {
        kill_session: true,
        freeze: true,
        ..Faults::NONE
    };
    let mut cfg = liveness_config(variant, faults, 2);
    cfg.horizon = 5;
    cfg
}

/// A killed session, and the holder cut off right after it read the error,
/// so it cannot register again nor re-point its run (2 faults, 5 ticks).
fn kill_then_cut(variant: Variant) -> Config {
    let faults = Faults {
        kill_session: true,
        cut_after_loss: true,
        ..Faults::NONE
    };
    let mut cfg = liveness_config(variant, faults, 2);
    cfg.horizon = 5;
    cfg
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn without_the_stop_deadline_on_a_lost_session_a_holder_that_could_not_re_point_runs_on() {
    let path = assert_fails(
        "no stop deadline on a lost session",
        kill_then_cut(Variant::NoSessionStop),
        NO_OVERLAP,
    );
    assert!(took_over(&path), "the overlap comes from an early takeover");
    let actions = path.into_actions();
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::Fault(Fault::KillSession(_)))),
        "the holder's session was killed"
    );
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn with_the_stop_deadline_a_holder_that_could_not_re_point_stops_before_the_takeover() {
    let cfg = kill_then_cut(Variant::Correct);
    let out = assert_safe("lost session, re-point prevented", &cfg);
    assert!(
        out.discoveries
            .contains_key("a_run_stops_at_its_lost_sessions_deadline"),
        "no run stopped at its lost session's deadline"
    );
}

/// The same with a freeze instead: the holder frozen before it re-points,
/// or resumed to find its session gone (its claims then name no
/// registration: `a_claim_naming_…` below), is stopped or excused (§2).
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn a_holder_frozen_around_its_lost_session_is_stopped_or_excused() {
    let cfg = kill_and_freeze(Variant::Correct);
    let out = assert_safe("lost session and a freeze", &cfg);
    for example in [
        "a_dead_holders_key_is_taken_over_before_expiry",
        "a_lost_session_is_re_pointed",
        "a_run_stops_at_its_lost_sessions_deadline",
    ] {
        assert!(out.discoveries.contains_key(example), "no example of {example}");
    }
}

/// A claim that names a registration the runtime cannot vouch for (its last
/// successful confirm older than `grace − margin`): a process resumed from
/// a freeze during which its session was killed claims a free key naming a
/// dead registration, and another runtime takes it over at once, before
/// the resumed one's next confirm reads the error. The real rule writes a
/// NULL owner then (the key falls back to expiry); the clean check of the
/// same bound is `a_holder_frozen_around_its_lost_session_is_stopped_or_excused` above.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn a_claim_naming_a_registration_silent_for_the_grace_is_taken_over_at_once() {
    let path = assert_fails(
        "claim names a stale registration",
        kill_and_freeze(Variant::ClaimNamesStaleRegistration),
        NO_OVERLAP,
    );
    assert!(took_over(&path), "the overlap comes from an early takeover");
}

/// The fleet-wide limit (issue 44) at its own bound, `Config::limited`:
/// two keys of one kind limited to 1, two replicas with distinct holder
/// ids, one fault among freeze, crash, session kill, lose or delay a
/// message; 7 ticks. Every property holds, and the check reaches a key
/// held back by the limit, a dead holder's slot taken before it expired,
/// the kind at its limit.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn the_fleet_limit_holds_at_its_bound() {
    let cfg = Config::limited();
    assert_eq!(cfg.limit, Some(1));
    let out = assert_safe("fleet limit", &cfg);
    for example in [
        "a_key_changes_hands",
        "a_run_stops_at_its_deadline",
        "a_slot_completes",
        "a_dead_holders_key_is_taken_over_before_expiry",
        "a_lost_session_is_re_pointed",
        "a_due_key_waits_for_a_slot",
        "a_dead_holders_slot_is_taken",
        "the_kind_runs_at_its_limit",
    ] {
        assert!(
            out.discoveries.contains_key(example),
            "fleet limit: no example of {example}: the check is vacuous"
        );
    }
    // A finding, not a failure: counted by `expires_at` alone, a dead
    // owner's unexpired row and the next tenure on its slot exceed N (its
    // holder has stopped: `kind_limit_runs` holds).
    let name = "more_unexpired_rows_than_the_limit";
    let path = out
        .discoveries
        .get(name)
        .expect("a dead owner's slot reused before its row expires");
    let model = LeaseModel::new(cfg.clone());
    let example = model
        .properties()
        .into_iter()
        .find(|p| p.name == name)
        .expect("a property of the model")
        .condition;
    let mut steps = path.clone().into_vec();
    if let Some(i) = steps.iter().position(|(s, _)| example(&model, s)) {
        steps.truncate(i + 1);
        steps[i].1 = None;
    }
    print_steps(name, &steps);
    assert!(steps[steps.len() - 1].0.ghost.slot_took_over);
}

/// The control of (b): the same predicate on the lease rows' latest
/// versions holds — the counterexample of (b) is the snapshot's. The
/// faults that end a session (crash, kill: the predicate's dead-owner
/// part), 6 ticks.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn the_slots_freeness_read_from_the_latest_lease_rows_holds() {
    let faults = Faults {
        crash: true,
        kill_session: true,
        ..Faults::NONE
    };
    assert_safe(
        "slot free by the latest lease row",
        &limit_config(Variant::SlotFreeFromLatestLeaseRow, faults),
    );
}

/// [`Config::limited`] with `variant`, only the given faults, 6 ticks.
fn limit_config(variant: Variant, faults: Faults) -> Config {
    let mut cfg = Config::limited();
    cfg.variant = variant;
    cfg.faults = faults;
    cfg.horizon = 6;
    cfg
}

/// [`assert_fails`] for the limit's variants: checks `cfg` until `property`
/// fails, prints the trace cut at its first violating state, and returns
/// that trace (its last state violates `property`).
fn assert_limit_fails(name: &str, cfg: &Config, property: &'static str) -> Vec<(State, Option<Action>)> {
    let out = check(cfg.clone(), threads(), Some(property));
    report(name, cfg, &out);
    let path = out
        .discoveries
        .get(property)
        .unwrap_or_else(|| panic!("{name}: the checker found no violation of {property}"));
    let steps = first_violation(cfg, property, path);
    print_steps(property, &steps);
    steps
}

/// (a) The claim takes a due key of the limited kind without a slot row:
/// both keys run at once.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn without_the_slot_a_limited_kind_runs_over_its_limit() {
    for p in [KIND_LIMIT_TENURES, KIND_LIMIT_RUNS] {
        assert_limit_fails("no slot", &limit_config(Variant::NoKindSlot, Faults::NONE), p);
    }
}

/// (b) The slot's freeness read from the lease row through a subquery,
/// which reads the statement's snapshot: a claim concurrent with the one
/// that just took the slot sees the key's older, expired tenure there and
/// takes the slot a second time.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn with_the_slots_freeness_read_from_the_lease_rows_snapshot_two_claims_share_a_slot() {
    let cfg = limit_config(Variant::SlotFreeFromLeaseRow, Faults::NONE);
    for p in [KIND_LIMIT_TENURES, KIND_LIMIT_RUNS] {
        let steps = assert_limit_fails("slot free by the lease row's snapshot", &cfg, p);
        // The two claims that took the slot ran at one server instant.
        let last = &steps[steps.len() - 1].0;
        let acquired: Vec<u16> = last.db.rows.iter().flatten().map(|r| r.acquired).collect();
        assert_eq!(acquired[0], acquired[1], "two concurrent claims: {acquired:?}");
    }
}

/// (c) Renewal extends the lease row but not its slot: the slot expires
/// under a run that goes on, and the other key takes it.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn with_slots_not_renewed_a_renewed_run_loses_its_slot() {
    for p in [KIND_LIMIT_TENURES, KIND_LIMIT_RUNS] {
        assert_limit_fails(
            "slot not renewed",
            &limit_config(Variant::SlotNotRenewed, Faults::NONE),
            p,
        );
    }
}

/// (d) The release frees the lease row but not its slot: the other key,
/// free and due with no tenure of the kind live, waits for the slot's
/// expiry — liveness fails, the limit holds.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn with_slots_not_released_a_due_key_waits_for_a_finished_run() {
    assert_violations(
        "slot not released",
        limit_config(Variant::SlotNotReleased, Faults::NONE),
        &[DUE_KEY_RUNS],
        &[KIND_LIMIT_TENURES, KIND_LIMIT_RUNS, NO_OVERLAP],
    );
}

/// (e) No dead-owner rule on the slot: a crashed holder's slot is free
/// only at its expiry, so the due keys wait past the response bound —
/// liveness (latency) fails, the limit holds.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn without_the_dead_owner_rule_on_the_slot_a_crashed_holders_slot_waits_for_expiry() {
    let faults = Faults {
        crash: true,
        ..Faults::NONE
    };
    let mut cfg = limit_config(Variant::NoSlotTakeover, faults);
    // The CI bound's grace (2 ticks): the holder, crashed at t=1, is dead
    // at t=3 and its slot expires at t=6, three ticks later — past the
    // response bound within 6 ticks.
    let ci = Config::ci();
    (cfg.grace, cfg.liveness_margin) = (ci.grace, ci.liveness_margin);
    assert_violations(
        "no slot takeover",
        cfg,
        &[DUE_KEY_RUNS],
        &[KIND_LIMIT_TENURES, KIND_LIMIT_RUNS, NO_OVERLAP],
    );
}

/// (f) The re-point moves the lease row's owner but not the slot's: the
/// slot names the lost registration, dead a grace later, and is taken
/// while its run — re-pointed, legitimately going on — still runs.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "model check: run it in release, cargo test -p leasehold-model --release"
)]
fn with_the_slot_not_re_pointed_a_re_registered_holder_loses_its_slot() {
    let faults = Faults {
        kill_session: true,
        ..Faults::NONE
    };
    let mut cfg = limit_config(Variant::SlotNotRepointed, faults);
    // A grace whose stop deadline (`grace − liveness_margin`) outlasts a
    // confirm interval, so a holder that reads the error at its next
    // confirm re-points its run before stopping it.
    cfg.grace = 30;
    cfg.liveness_margin = cfg.required_liveness_margin();
    for p in [KIND_LIMIT_TENURES, KIND_LIMIT_RUNS] {
        let steps = assert_limit_fails("slot not re-pointed", &cfg, p);
        let last = &steps[steps.len() - 1].0;
        assert!(last.ghost.repointed, "the holder re-pointed its run");
        assert!(last.ghost.slot_took_over, "the slot was taken as dead");
    }
}
