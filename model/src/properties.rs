//! What the checker checks, in every reachable state.
//!
//! | issue | property | encodes |
//! |---|---|---|
//! | (a) | [`NO_OVERLAP`] | at no real instant do two runs of one key both run (started, not yet stopped: `Running`, or `Stopping` within the stop time `d`) — except a run whose process was frozen past its deadline (§2 excludes it; it is [`crate::replica::Run::outlived`] until a renewal gives it a deadline in the future again, so a resumed run that goes on *because* of a wrong answer is not excused) |
//! | (b) | [`STALE_WRITE_REJECTED`] | no write lands (a fenced transaction commits, a fenced `UPDATE` applies) carrying a fence lower than one accepted before on that resource, nor from a run older (by claim order) than one whose write was accepted — what the fence is for |
//! | (c) | [`FENCES_INCREASE`] | every fence handed out for a key (claims, revokes) is above the previous one |
//! | (d) | [`DUE_KEY_RUNS`] | liveness, as bounded response under fairness: a key that is free and due by the server clock while some replica is live is claimed within [`crate::Config::response_bound`] ticks, unless a fault strikes meanwhile (a fault restarts the wait). Fairness is the tick rule of [`crate::env`]: time does not pass while a message is undelivered or a timer has fired, unless a fault delayed it. Encoded as an `always` property: stateright's `eventually` is only sound on acyclic paths |
//! | (e) | [`ONCE_PER_CLEAN_SLOT`] | at most one run starts per slot of a key unless a fault struck between the first run of the previous slot and the last run of this one |
//! | (f) | [`NO_FENCED_COMMIT_AFTER_TENURE`] | no fenced transaction commits while its tenure is over on the server clock: the key's lease row carries another fence, or `expires_at <= now` (F5, G2′) |
//! | (f′) | [`NO_FENCED_UPDATE_AFTER_TENURE`] | no fenced `UPDATE` applies while its tenure is over (F5's early refusal, G2′) |
//! | (h) | [`KIND_LIMIT_TENURES`] | with a fleet-wide limit N (issue 44): at no instant are more than N tenures of the kind live by the server's lease rows — a holder, `expires_at > now`, an owner not dead ([`crate::db::Db::live_tenures`]) |
//! | (h′) | [`KIND_LIMIT_RUNS`] | with a limit N: at no real instant do more than N runs of the kind run (or stop, within `d`), across replicas and keys — with `no_overlap`'s excuses for a process frozen past its deadline |
//! | (g) | [`FENCE_WAIT_BOUNDED`] | an advance waiting for the fence row's lock is not still blocked once the server clock is more than a lease past the blocking transaction's last statement (F5, R2) |
//!
//! The `sometimes` properties show the checks are not vacuous: the checker
//! must find a state where each holds (a key changed hands, a run was
//! stopped at its deadline, a stale write was refused, a slot completed, a
//! late commit was refused, the server ended an idle transaction that a
//! successor's advance was waiting for; with the liveness session: a dead
//! holder's key taken over before its lease expired, a lost session's runs
//! re-pointed, a run stopped at its lost session's deadline; with a
//! fleet-wide limit: a due key held back by it, a dead holder's slot taken,
//! the kind at its limit). One `sometimes` property is a finding, not a
//! goal: `more_unexpired_rows_than_the_limit` — counted by `expires_at`
//! alone, a dead owner's unexpired row and its slot's next tenure exceed N.

use stateright::Property;

use crate::db::NO_HOLDER;
use crate::replica::{Phase, Txn};
use crate::{LeaseModel, State};

/// (a) no two runs of one key overlap in real time.
pub const NO_OVERLAP: &str = "no_overlap";
/// (b) a stale write is rejected.
pub const STALE_WRITE_REJECTED: &str = "stale_write_rejected";
/// (c) fences of a key strictly increase.
pub const FENCES_INCREASE: &str = "fences_increase";
/// (d) a due key with a live replica runs (bounded response, fair).
pub const DUE_KEY_RUNS: &str = "due_key_runs";
/// (e) once per slot when no fault strikes.
pub const ONCE_PER_CLEAN_SLOT: &str = "once_per_clean_slot";
/// (f) a fenced transaction ends with its tenure: none commits after it.
pub const NO_FENCED_COMMIT_AFTER_TENURE: &str = "no_fenced_commit_after_tenure";
/// (f′) no fenced `UPDATE` applies after its tenure.
pub const NO_FENCED_UPDATE_AFTER_TENURE: &str = "no_fenced_update_after_tenure";
/// (g) an ended tenure's transaction blocks an advance for a lease at most.
pub const FENCE_WAIT_BOUNDED: &str = "fence_wait_bounded";

/// (h) at most N tenures of a limited kind live on the server's rows.
pub const KIND_LIMIT_TENURES: &str = "kind_limit_tenures";
/// (h′) at most N runs of a limited kind at once, in real time.
pub const KIND_LIMIT_RUNS: &str = "kind_limit_runs";

/// Every property of the model.
pub fn all() -> Vec<Property<LeaseModel>> {
    vec![
        Property::always(NO_OVERLAP, no_overlap),
        Property::always(STALE_WRITE_REJECTED, |_, s: &State| !s.ghost.stale_landed),
        Property::always(FENCES_INCREASE, |_, s: &State| !s.ghost.fence_regressed),
        Property::always(DUE_KEY_RUNS, due_key_runs),
        Property::always(ONCE_PER_CLEAN_SLOT, once_per_clean_slot),
        Property::always(NO_FENCED_COMMIT_AFTER_TENURE, |_, s: &State| !s.ghost.late_commit),
        Property::always(NO_FENCED_UPDATE_AFTER_TENURE, |_, s: &State| !s.ghost.late_update),
        Property::always(FENCE_WAIT_BOUNDED, fence_wait_bounded),
        Property::always(KIND_LIMIT_TENURES, kind_limit_tenures),
        Property::always(KIND_LIMIT_RUNS, kind_limit_runs),
        Property::sometimes("a_key_changes_hands", |_, s: &State| {
            s.ghost.tenures.iter().any(|&n| n >= 2)
        }),
        Property::sometimes("a_run_stops_at_its_deadline", |_, s: &State| s.ghost.deadline_stop),
        Property::sometimes("a_stale_write_is_refused", |_, s: &State| s.ghost.stale_rejected),
        Property::sometimes("a_slot_completes", |_, s: &State| s.ghost.completed),
        Property::sometimes("a_late_commit_is_refused", |_, s: &State| s.ghost.late_commit_refused),
        Property::sometimes("an_idle_end_frees_a_waiting_advance", |_, s: &State| {
            s.ghost.idle_end_freed_advance
        }),
        Property::sometimes("a_dead_holders_key_is_taken_over_before_expiry", |_, s: &State| {
            s.ghost.took_over
        }),
        Property::sometimes("a_lost_session_is_re_pointed", |_, s: &State| s.ghost.repointed),
        Property::sometimes("a_run_stops_at_its_lost_sessions_deadline", |_, s: &State| {
            s.ghost.session_stop
        }),
        Property::sometimes("a_due_key_waits_for_a_slot", |_, s: &State| s.ghost.slot_wait),
        Property::sometimes("a_dead_holders_slot_is_taken", |_, s: &State| s.ghost.slot_took_over),
        Property::sometimes("more_unexpired_rows_than_the_limit", |m: &LeaseModel, s: &State| {
            m.cfg.limit.is_some_and(|n| {
                let unexpired =
                    s.db.rows
                        .iter()
                        .flatten()
                        .filter(|r| r.holder != NO_HOLDER && r.expires > s.db.clock);
                unexpired.count() > n as usize
            })
        }),
        Property::sometimes("the_kind_runs_at_its_limit", |m: &LeaseModel, s: &State| {
            m.cfg.limit.is_some_and(|n| kind_runs(m, s) == n as usize)
        }),
    ]
}

/// Runs of `key` that are active and not excused, across replicas.
pub fn active_runs(s: &State, key: usize) -> usize {
    s.replicas
        .iter()
        .filter_map(|r| r.runs[key].as_ref())
        .filter(|run| {
            matches!(run.phase, Phase::Running | Phase::Stopping(_))
                && !run.outlived
                && !(run.lapsed && session_gone(s, run.owner))
        })
        .count()
}

/// Whether registration `id`'s session has ended on the server.
fn session_gone(s: &State, id: Option<u8>) -> bool {
    id.and_then(|id| s.db.regs.get(id as usize - 1))
        .is_some_and(|g| !g.alive)
}

fn no_overlap(m: &LeaseModel, s: &State) -> bool {
    (0..m.cfg.keys).all(|k| active_runs(s, k) <= 1)
}

/// Runs of the kind at once, across keys and replicas (as [`active_runs`]).
pub fn kind_runs(m: &LeaseModel, s: &State) -> usize {
    (0..m.cfg.keys).map(|k| active_runs(s, k)).sum()
}

fn kind_limit_tenures(m: &LeaseModel, s: &State) -> bool {
    let liveness = m.cfg.liveness.then_some((m.cfg.grace, m.cfg.variant));
    m.cfg.limit.is_none_or(|n| s.db.live_tenures(liveness) <= n as usize)
}

fn kind_limit_runs(m: &LeaseModel, s: &State) -> bool {
    m.cfg.limit.is_none_or(|n| kind_runs(m, s) <= n as usize)
}

fn due_key_runs(m: &LeaseModel, s: &State) -> bool {
    let bound = m.cfg.response_bound();
    s.ghost
        .waiting
        .iter()
        .all(|w| w.is_none_or(|since| s.now - since <= bound))
}

fn once_per_clean_slot(_: &LeaseModel, s: &State) -> bool {
    s.ghost.slot.iter().all(|&(_, starts, faulted)| starts <= 1 || faulted)
}

/// No run's advance waits on a fence row locked by a transaction whose last
/// statement is more than a lease behind the server clock.
fn fence_wait_bounded(m: &LeaseModel, s: &State) -> bool {
    s.replicas.iter().all(|rep| {
        rep.runs.iter().enumerate().all(|(k, run)| {
            let waiting = run.as_ref().is_some_and(|run| run.txn == Txn::Waiting);
            !waiting
                || s.db.fence_rows[k]
                    .lock
                    .and_then(|l| l.idle_since)
                    .is_none_or(|since| s.db.clock <= since + m.cfg.lease)
        })
    })
}
