//! A model of leasehold's lease protocol, checked with
//! [stateright](https://docs.rs/stateright): no two runs of a key overlap
//! in real time, no stale write lands, fences only grow, a due key runs,
//! once per slot — for every interleaving up to a bound.
//!
//! - [`db`]: the database (lease rows, fence sequence, fence table with its
//!   row lock, a `last_fence` column, the server clock, and the rules that
//!   end a fenced transaction with its tenure: the commit check and the idle
//!   bound, F5); every statement is one atomic transition citing its SQL
//!   and the Rust function that sends it.
//! - [`replica`]: a runtime — claims, batched renewal, `ensure`, the local
//!   deadline from the send instant and the server's `remaining`, stop,
//!   release, fenced writes.
//! - [`env`](mod@env): real time, clock rates within ρ, the network, and faults;
//!   [`clock`]: the rate of a clock, shared with the database.
//! - [`properties`]: what is checked, and how liveness is encoded.
//! - [`variants`]: mistakes put back on purpose, for the counterexample
//!   tests.
//!
//! See `model/README.md` for the bounds, state counts and how to run the
//! deeper check.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod clock;
pub mod db;
pub mod env;
pub mod properties;
pub mod replica;
pub mod variants;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use stateright::{Checker, HasDiscoveries, Model, Path, Property};

use clock::Rate;
use db::{Commit, Db, Fenced};
use env::{Body, Clock, Fate, Fault, Faults, Msg, Reply, Request, Via};
use replica::{Phase, Reason, Replica, Run, Status, Txn};
pub use variants::Variant;

/// The parameters of one check. Durations are in ticks of real time unless
/// named `_units` (clock units: `units_per_tick` per tick at nominal rate).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    /// Holder id of each replica (so its length is the replica count); two
    /// equal ids are two processes sharing one (a copied configuration).
    pub holders: Vec<u8>,
    /// Number of keys.
    pub keys: usize,
    /// Clock units per tick at nominal rate.
    pub units_per_tick: u16,
    /// Units a slow or fast clock loses or gains per tick: ρ =
    /// `drift / units_per_tick`.
    pub drift: u16,
    /// The lease, in server units.
    pub lease: u16,
    /// The heartbeat interval, in local units.
    pub heartbeat: u16,
    /// The deadline margin, in local units.
    pub margin: u16,
    /// The stop time `d`: ticks a cancelled run's code goes on.
    pub stop_ticks: u8,
    /// The scheduler's forced poll interval, in local units.
    pub poll: u16,
    /// How long the scheduler waits for a claim's answer, in local units
    /// (`CLAIM_TIMEOUT` in `src/runtime/scheduler.rs`: 10 s whatever the
    /// lease).
    pub claim_timeout: u16,
    /// The schedule's period, in server units.
    pub period: u16,
    /// Last tick of real time explored.
    pub horizon: u16,
    /// Faults the environment may inject in one execution.
    pub fault_budget: u8,
    /// Which faults.
    pub faults: Faults,
    /// Runs may call `FenceGuard::ensure`.
    pub ensure: bool,
    /// Runs may write downstream (fenced transactions and updates).
    pub writes: bool,
    /// The protocol variant.
    pub variant: Variant,
}

impl Config {
    /// The CI bound: 2 replicas sharing one holder id, 1 key, ρ magnified
    /// to 10 %, lease 5 ticks, heartbeat 2, margin 2 (= 2ρ·lease + d with
    /// d = 1 tick), a poll every tick on any clock, period 4, 8 ticks of
    /// real time, 1 fault of any kind but a clock-rate change, a claim timeout of
    /// a sixth of the lease (10 s of the default 60 s).
    pub fn ci() -> Config {
        Config {
            holders: vec![0, 0],
            keys: 1,
            units_per_tick: 10,
            drift: 1,
            lease: 50,
            heartbeat: 20,
            margin: 20,
            stop_ticks: 1,
            poll: 9,
            // 10 s of the default 60 s lease.
            claim_timeout: 8,
            period: 40,
            horizon: 8,
            fault_budget: 1,
            faults: Faults {
                skew: false,
                ..Faults::ALL
            },
            ensure: true,
            writes: true,
            variant: Variant::Correct,
        }
    }

    /// The release-time bounds (`LEASEHOLD_MODEL_DEPTH=deep`), each
    /// [`Config::ci`] pushed further in one direction: clock-rate changes
    /// as faults; two faults (without writes and `ensure`); a third replica
    /// with its own holder id (idem); two keys, so renewals and claims are
    /// batched (idem, 7 ticks). Each stays below ~25 M states (~6 GB).
    pub fn deep() -> Vec<(&'static str, Config)> {
        let ci = Config::ci();
        let lean = Config {
            writes: false,
            ensure: false,
            ..ci.clone()
        };
        vec![
            (
                "deep: clock-rate changes",
                Config {
                    faults: Faults::ALL,
                    ..ci
                },
            ),
            (
                "deep: 2 faults",
                Config {
                    fault_budget: 2,
                    ..lean.clone()
                },
            ),
            (
                "deep: 3 replicas",
                Config {
                    holders: vec![0, 0, 1],
                    ..lean.clone()
                },
            ),
            (
                "deep: 2 keys",
                Config {
                    keys: 2,
                    horizon: 7,
                    ..lean
                },
            ),
        ]
    }

    /// `2ρ × lease + d` in local units: the margin §5 asks for.
    pub fn required_margin(&self) -> u16 {
        let drift_allowance = 2 * self.lease * self.drift / self.units_per_tick;
        drift_allowance + self.stop_ticks as u16 * self.units_per_tick
    }

    /// Real ticks within which a due key with a live replica must be
    /// claimed when no fault strikes: one forced poll interval on the
    /// slowest clock, rounded up, plus one tick.
    pub fn response_bound(&self) -> u16 {
        let slow = self.units_per_tick - self.drift;
        self.poll.div_ceil(slow) + 1
    }

    /// The number of replicas.
    pub fn replicas(&self) -> usize {
        self.holders.len()
    }
}

/// What each key's ghost counters record (not part of the protocol: only
/// read by [`properties`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ghost {
    /// Tenures claimed so far per key (the latest run number).
    pub tenures: Vec<u8>,
    /// The last fence handed out per key.
    pub last_fence: Vec<u8>,
    /// A fence was handed out not above the key's previous one.
    pub fence_regressed: bool,
    /// Per key and resource (0: the `leasehold_fence` row, 1: the
    /// `last_fence` column): the highest fence and run number accepted.
    pub accepted: Vec<[(u8, u8); 2]>,
    /// A write landed with a fence below one accepted before, or from a
    /// run older than one whose write was accepted before.
    pub stale_landed: bool,
    /// Some write was refused with `StaleFence`.
    pub stale_rejected: bool,
    /// Some run was stopped at its local deadline.
    pub deadline_stop: bool,
    /// Per key: the slot of the latest run started, how many runs started
    /// for it, and whether a fault struck since the previous slot's first
    /// run.
    pub slot: Vec<(u16, u8, bool)>,
    /// Per key: a fault struck since its current slot's first run.
    pub fault_since_slot: Vec<bool>,
    /// Per key: the tick since which it has been claimable (free and due
    /// by the server clock) with a live replica and no fault.
    pub waiting: Vec<Option<u16>>,
    /// A slot ran to a successful release.
    pub completed: bool,
    /// A fenced transaction committed while its tenure was not live on the
    /// server clock (the lease row's fence differs, or `expires_at <=
    /// now`).
    pub late_commit: bool,
    /// A fenced `UPDATE` applied while its tenure was not live.
    pub late_update: bool,
    /// Some fenced transaction's commit was refused by the commit check
    /// (R1).
    pub late_commit_refused: bool,
    /// The server ended an idle fenced transaction (R2) that another run's
    /// advance was waiting for.
    pub idle_end_freed_advance: bool,
}

/// The whole system's state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Real time, in ticks.
    pub now: u16,
    /// The database.
    pub db: Db,
    /// The replicas.
    pub replicas: Vec<Replica>,
    /// Messages in flight, sorted (so equal states compare equal).
    pub net: Vec<Msg>,
    /// Faults the environment may still inject.
    pub faults_left: u8,
    /// Ghost variables.
    pub ghost: Ghost,
}

/// A transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// One tick of real time passes: clocks advance by their rates, the
    /// supervisors stop runs at their deadlines.
    Tick,
    /// The scheduler's timer fires: it claims the keys it has no run of
    /// (`claim_due`).
    Poll(u8, Fate),
    /// The heartbeat's timer fires: it renews the replica's tenures
    /// (`renew_each`).
    Beat(u8, Fate),
    /// A run calls `FenceGuard::ensure` (replica, key).
    Ensure(u8, u8, Fate),
    /// The network delivers message `i`: the server runs a request, or the
    /// replica reads a reply.
    Deliver(u8),
    /// A run's job returns `Ok` (replica, key): released with its next
    /// slot.
    Finish(u8, u8),
    /// A run opens a fenced transaction on its key's resource
    /// (`begin_fenced`: the advance); it waits if another transaction
    /// holds the fence row's lock.
    Begin(u8, u8),
    /// The server runs a waiting advance (replica, key) now that the fence
    /// row's lock is free — whatever the replica is doing (frozen, cut
    /// off): the statement is already at the server.
    Advance(u8, u8),
    /// It commits: the write lands, or the commit check (R1) refuses it,
    /// or the transaction is gone (ended by the server, R2; or the replica
    /// is cut off and its `COMMIT` never arrives).
    Commit(u8, u8),
    /// A run's fenced `UPDATE` of the `last_fence` column.
    Update(u8, u8),
    /// A resumed replica's supervisor finds a run past its deadline.
    Supervise(u8, u8),
    /// The environment injects a fault.
    Fault(Fault),
}

/// The model: a [`Config`] and the transitions.
#[derive(Clone, Debug)]
pub struct LeaseModel {
    /// Its parameters.
    pub cfg: Config,
}

impl LeaseModel {
    /// A model of `cfg`.
    pub fn new(cfg: Config) -> LeaseModel {
        LeaseModel { cfg }
    }

    fn step(&self, rate: Rate) -> u16 {
        rate.step(self.cfg.units_per_tick, self.cfg.drift)
    }

    /// Whether anything must happen before the next tick (fairness).
    pub fn urgent(&self, s: &State) -> bool {
        let msg_urgent = s.net.iter().any(|m| {
            !m.delayed
                && match m.body {
                    Body::Request(_) => true,
                    Body::Reply(_) => s.replicas[m.replica as usize].status == Status::Up,
                }
        });
        msg_urgent
            || self.server_urgent(s)
            || (0..s.replicas.len()).any(|r| {
                let rep = &s.replicas[r];
                rep.up()
                    && (self.poll_due(s, r as u8)
                        || self.beat_due(rep)
                        || rep.runs.iter().flatten().any(|run| self.past_deadline(rep, run)))
            })
    }

    /// The scheduler's loop polls when its timer fired and it is not
    /// waiting for a claim (it awaits each claim, bounded by
    /// `CLAIM_TIMEOUT`, before looking again).
    fn poll_due(&self, s: &State, r: u8) -> bool {
        let rep = &s.replicas[r as usize];
        !rep.shutting_down
            && rep.clock >= rep.next_poll
            && rep.runs.iter().any(Option::is_none)
            && !Self::claim_in_flight(s, r)
    }

    fn claim_in_flight(s: &State, r: u8) -> bool {
        s.net.iter().any(|m| {
            m.replica == r
                && !m.abandoned
                && matches!(
                    m.body,
                    Body::Request(Request::Claim { .. }) | Body::Reply(Reply::Claim { .. })
                )
        })
    }

    fn beat_due(&self, rep: &Replica) -> bool {
        rep.clock >= rep.next_beat && !rep.renewable().is_empty()
    }

    fn past_deadline(&self, rep: &Replica, run: &Run) -> bool {
        run.phase == Phase::Running && rep.clock >= run.deadline(self.cfg.margin)
    }

    fn ensure_in_flight(s: &State, r: u8, k: u8) -> bool {
        let ensure = Via::Ensure(k);
        s.net.iter().any(|m| {
            m.replica == r
                && match &m.body {
                    Body::Request(Request::Renew { via, .. }) | Body::Reply(Reply::Renew { via, .. }) => *via == ensure,
                    _ => false,
                }
        })
    }

    /// Sends a request (lost at once if the replica is cut off).
    fn send(s: &mut State, r: u8, q: Request) {
        if s.replicas[r as usize].partitioned {
            return;
        }
        s.net.push(Msg {
            replica: r,
            delayed: false,
            abandoned: false,
            frozen: false,
            body: Body::Request(q),
        });
    }

    /// Abandons the replica's outstanding messages matching `pred` (a
    /// bounded wait that ran out: the statement may still run, its answer
    /// is ignored).
    fn abandon(s: &mut State, r: u8, pred: impl Fn(&Body) -> bool) {
        for m in s.net.iter_mut() {
            if m.replica == r && pred(&m.body) {
                m.abandoned = true;
            }
        }
    }

    /// A replica sends a statement, and the environment decides its fate.
    fn statement(&self, s: &mut State, r: u8, q: Request, fate: Fate) {
        if fate != Fate::RoundTrip {
            Self::struck(s);
        }
        if s.replicas[r as usize].partitioned {
            return;
        }
        let msg = |body| Msg {
            replica: r,
            delayed: true,
            abandoned: false,
            frozen: false,
            body,
        };
        match fate {
            Fate::LoseRequest => {}
            Fate::DelayRequest => s.net.push(msg(Body::Request(q))),
            Fate::RoundTrip | Fate::LoseReply | Fate::DelayReply => {
                let Some(reply) = self.execute(s, r, q) else {
                    return;
                };
                match fate {
                    Fate::RoundTrip => self.receive(s, r, reply, false),
                    Fate::DelayReply => s.net.push(msg(Body::Reply(reply))),
                    _ => {}
                }
            }
        }
    }

    /// The run of `(r, k)` stops: its open transaction rolls back, the
    /// finisher releases it (`finish_many`) — with its next slot if it
    /// succeeded, the slot still owed otherwise.
    fn stop_run(&self, s: &mut State, r: u8, k: u8, success: bool) {
        let Some(run) = s.replicas[r as usize].runs[k as usize].take() else {
            return;
        };
        // A waiting advance is cancelled with its connection (C2). An open
        // transaction rolls back — unless the replica is cut off: its
        // closed connection never reaches the server, which keeps the
        // transaction (and the fence row's lock) until its idle timeout
        // (R2) ends it.
        if run.txn == Txn::Open && !s.replicas[r as usize].partitioned {
            s.db.rollback(k, r, run.fence);
        }
        if run.reason == Some(Reason::Deadline) {
            s.ghost.deadline_stop = true;
        }
        if s.replicas[r as usize].status != Status::Crashed {
            let next = success.then_some(run.next_slot);
            Self::send(
                s,
                r,
                Request::Release {
                    key: k,
                    fence: run.fence,
                    next,
                },
            );
        }
    }

    /// Cancels a run (and stops it at once when the stop time is zero).
    fn cancel_run(&self, s: &mut State, r: u8, k: u8, reason: Reason) {
        let d = self.cfg.stop_ticks;
        if let Some(run) = s.replicas[r as usize].runs[k as usize].as_mut() {
            run.cancel(reason, d);
            if d == 0 {
                self.stop_run(s, r, k, false);
            }
        }
    }

    /// A write landed on `resource` of `key` with the run's fence.
    fn landed(s: &mut State, key: u8, resource: usize, fence: u8, run: u8) {
        let acc = &mut s.ghost.accepted[key as usize][resource];
        if fence < acc.0 || run < acc.1 {
            s.ghost.stale_landed = true;
        }
        acc.0 = acc.0.max(fence);
        acc.1 = acc.1.max(run);
    }

    /// A fence was handed out for `key`.
    fn issued(s: &mut State, key: u8, fence: u8) {
        let last = &mut s.ghost.last_fence[key as usize];
        if fence <= *last {
            s.ghost.fence_regressed = true;
        }
        *last = fence;
    }

    /// The server runs a request.
    fn execute(&self, s: &mut State, r: u8, q: Request) -> Option<Reply> {
        let holder = s.replicas[r as usize].holder;
        let v = self.cfg.variant;
        match q {
            Request::Claim { sent, keys } => {
                let mut acquired = s.db.claim_due(holder, &keys, self.cfg.lease, self.cfg.period, v);
                for c in acquired.iter_mut() {
                    let k = c.key as usize;
                    s.ghost.tenures[k] += 1;
                    c.run = s.ghost.tenures[k];
                    if let Some(row) = s.db.rows[k].as_mut() {
                        row.run = c.run;
                    }
                    Self::issued(s, c.key, c.fence);
                }
                Some(Reply::Claim { sent, acquired })
            }
            Request::Renew { sent, via, tenures } => {
                let renewed = s.db.renew_many(holder, &tenures, self.cfg.lease, v);
                Some(Reply::Renew {
                    sent,
                    via,
                    asked: tenures,
                    renewed,
                })
            }
            Request::Release { key, fence, next } => {
                if s.db.finish(key, holder, fence, next, v) && next.is_some() {
                    s.ghost.completed = true;
                }
                None
            }
        }
    }

    /// The replica reads a reply; `frozen`: its process was frozen while
    /// the statement was in flight.
    fn receive(&self, s: &mut State, r: u8, reply: Reply, frozen: bool) {
        match reply {
            // The scheduler starts a run per acquired key
            // (`src/runtime/scheduler.rs` `claim`, then `supervise::spawn`),
            // with a `Tenure` whose `valid_until = sent + remaining` — unless
            // the answer came at or after that tenure's deadline (then it is
            // handed back unrun), or it is shutting down.
            // With `Variant::LateClaimStarts` (no deadline check) a
            // late answer starts the run, which the supervisor stops right
            // after (`past_deadline` at once); a run started so by a
            // process frozen meanwhile is §1's exception (`outlived`).
            Reply::Claim { sent, acquired } => {
                for c in acquired {
                    let rep = &mut s.replicas[r as usize];
                    if rep.runs[c.key as usize].is_some() {
                        continue; // the lease is left to expire
                    }
                    // An answer read at or after the
                    // tenure's local deadline is handed back unrun (outcome
                    // `too_late`), as one claimed during shutdown is
                    // (`store.release`, the slot still owed).
                    let too_late = rep.clock >= (sent + c.remaining).saturating_sub(self.cfg.margin)
                        && self.cfg.variant != Variant::LateClaimStarts;
                    if too_late || rep.shutting_down {
                        Self::send(
                            s,
                            r,
                            Request::Release {
                                key: c.key,
                                fence: c.fence,
                                next: None,
                            },
                        );
                        continue;
                    }
                    if rep.renewable().is_empty() {
                        rep.next_beat = rep.clock + self.cfg.heartbeat;
                    }
                    rep.runs[c.key as usize] = Some(Run {
                        run: c.run,
                        fence: c.fence,
                        valid_until: sent + c.remaining,
                        next_slot: c.next_slot,
                        phase: Phase::Running,
                        reason: None,
                        txn: Txn::None,
                        wrote: 0,
                        outlived: frozen && rep.clock >= (sent + c.remaining).saturating_sub(self.cfg.margin),
                    });
                    let k = c.key as usize;
                    let g = &mut s.ghost;
                    if g.slot[k].0 == c.slot && g.slot[k].1 > 0 {
                        g.slot[k].1 = g.slot[k].1.saturating_add(1);
                    } else {
                        g.slot[k] = (c.slot, 1, g.fault_since_slot[k]);
                        g.fault_since_slot[k] = false;
                    }
                }
            }
            // `heartbeat::beat`: renewed rows are matched to tenures by
            // `(key, fence)`; a tenure asked for and not renewed is lost
            // (`renew_each`'s `lost`).
            Reply::Renew {
                sent,
                via: Via::Heartbeat,
                asked,
                renewed,
            } => {
                for (k, fence) in asked {
                    let Some(run) = s.replicas[r as usize].runs[k as usize].as_mut() else {
                        continue;
                    };
                    if run.fence != fence {
                        continue;
                    }
                    match renewed.iter().find(|x| x.key == k && x.fence == fence) {
                        Some(x) => {
                            run.renewed(sent, x.remaining);
                            let clock = s.replicas[r as usize].clock;
                            let run = s.replicas[r as usize].runs[k as usize].as_mut().unwrap();
                            if run.outlived && run.deadline(self.cfg.margin) > clock {
                                run.outlived = false;
                            }
                        }
                        None => self.cancel_run(s, r, k, Reason::Lost),
                    }
                }
            }
            // `FenceGuard::ensure`: the row of its own `(key, fence)` →
            // `Tenure::renewed`; none (and not busy) → `lose`.
            Reply::Renew {
                sent,
                via: Via::Ensure(k),
                asked,
                mut renewed,
            } => {
                let Some(run) = s.replicas[r as usize].runs[k as usize].as_mut() else {
                    return;
                };
                if asked.first().map(|a| a.1) != Some(run.fence) {
                    return;
                }
                // `FenceGuard::ensure` takes the row of its own tenure,
                // `(key, fence)`; `Variant::RenewUncheckedAnswer` takes
                // `renewed.pop()`, whatever row came back.
                let fence = run.fence;
                let mine = match self.cfg.variant {
                    Variant::RenewUncheckedAnswer => renewed.pop(),
                    _ => renewed.into_iter().find(|x| x.key == k && x.fence == fence),
                };
                match mine {
                    Some(x) => {
                        run.renewed(sent, x.remaining);
                        let clock = s.replicas[r as usize].clock;
                        let run = s.replicas[r as usize].runs[k as usize].as_mut().unwrap();
                        if run.outlived && run.deadline(self.cfg.margin) > clock {
                            run.outlived = false;
                        }
                    }
                    None => self.cancel_run(s, r, k, Reason::Lost),
                }
            }
        }
    }

    /// Real time passes one tick.
    fn tick(&self, s: &mut State) {
        s.now += 1;
        s.db.clock += self.step(s.db.rate);
        // R2: the server ends a fenced transaction idle for a lease
        // (`idle_in_transaction_session_timeout`) within the tick its idle
        // time reaches the lease, whatever its client is doing.
        if self.cfg.variant.idle_timeout() {
            for k in 0..self.cfg.keys as u8 {
                if s.db.idle_expired(k, self.cfg.lease) {
                    s.db.end_idle(k);
                    let waiting = s
                        .replicas
                        .iter()
                        .any(|rep| rep.runs[k as usize].as_ref().is_some_and(|run| run.txn == Txn::Waiting));
                    s.ghost.idle_end_freed_advance |= waiting;
                }
            }
        }
        let margin = self.cfg.margin;
        for r in 0..s.replicas.len() {
            let rate = s.replicas[r].rate;
            let status = s.replicas[r].status;
            if status == Status::Crashed {
                continue;
            }
            s.replicas[r].clock += self.step(rate);
            let clock = s.replicas[r].clock;
            if status == Status::Up {
                // `bounded(CLAIM_TIMEOUT, "claim", …)` runs out: the claim's
                // future is dropped (it may still commit: C3).
                let timeout = self.cfg.claim_timeout;
                Self::abandon(s, r as u8, |b| match b {
                    Body::Request(Request::Claim { sent, .. }) | Body::Reply(Reply::Claim { sent, .. }) => {
                        clock >= sent + timeout
                    }
                    _ => false,
                });
            }
            for k in 0..self.cfg.keys {
                let Some(run) = s.replicas[r].runs[k].as_mut() else {
                    continue;
                };
                if status == Status::Frozen {
                    if clock >= run.deadline(margin) {
                        run.outlived = true;
                    }
                    continue;
                }
                match run.phase {
                    Phase::Stopping(n) if n <= 1 => self.stop_run(s, r as u8, k as u8, false),
                    Phase::Stopping(n) => run.phase = Phase::Stopping(n - 1),
                    Phase::Running if clock >= run.deadline(margin) => {
                        self.cancel_run(s, r as u8, k as u8, Reason::Deadline);
                    }
                    Phase::Running => {}
                }
            }
        }
    }

    /// A fault strikes: liveness waits restart, slots are marked.
    fn struck(s: &mut State) {
        s.faults_left -= 1;
        Self::strikes(s);
    }

    /// A fault's effect lands now (a fault itself, a delayed statement or
    /// answer arriving, a frozen replica resuming, a partition healing):
    /// liveness waits restart, the slot in progress is marked.
    fn strikes(s: &mut State) {
        for w in s.ghost.waiting.iter_mut() {
            *w = None;
        }
        for k in 0..s.ghost.slot.len() {
            s.ghost.slot[k].2 = true;
            s.ghost.fault_since_slot[k] = true;
        }
    }

    /// Updates the liveness ghost after a transition.
    fn track_waiting(&self, s: &mut State) {
        let live = s.replicas.iter().any(Replica::live);
        for k in 0..self.cfg.keys {
            if live && s.db.claimable(k) {
                if s.ghost.waiting[k].is_none() {
                    s.ghost.waiting[k] = Some(s.now);
                }
            } else {
                s.ghost.waiting[k] = None;
            }
        }
    }

    fn fault(&self, s: &mut State, f: Fault) -> bool {
        match f {
            Fault::Lose(i) => {
                s.net.remove(i as usize);
            }
            Fault::Delay(i) => s.net[i as usize].delayed = true,
            Fault::Partition(r) => {
                s.replicas[r as usize].partitioned = true;
                s.net.retain(|m| m.replica != r);
            }
            Fault::Heal(r) => {
                s.replicas[r as usize].partitioned = false;
                Self::strikes(s);
                return false;
            }
            Fault::Freeze(r) => {
                s.replicas[r as usize].status = Status::Frozen;
                for m in s.net.iter_mut().filter(|m| m.replica == r) {
                    m.frozen = true;
                }
            }
            Fault::Resume(r) => {
                s.replicas[r as usize].status = Status::Up;
                Self::strikes(s);
                return false;
            }
            Fault::Crash(r) => {
                s.replicas[r as usize].status = Status::Crashed;
                for k in 0..self.cfg.keys {
                    // The kernel closes its connections: the server rolls an
                    // open transaction back, unless the close is lost in a
                    // partition (then R2 ends it).
                    if let Some(run) = s.replicas[r as usize].runs[k].take()
                        && run.txn == Txn::Open
                        && !s.replicas[r as usize].partitioned
                    {
                        s.db.rollback(k as u8, r, run.fence);
                    }
                }
                s.net.retain(|m| !(m.replica == r && matches!(m.body, Body::Reply(_))));
            }
            Fault::Shutdown(r) => {
                s.replicas[r as usize].shutting_down = true;
                for k in 0..self.cfg.keys {
                    self.cancel_run(s, r, k as u8, Reason::Shutdown);
                }
            }
            Fault::Skew(Clock::Server, rate) => s.db.rate = rate,
            Fault::Skew(Clock::Replica(r), rate) => s.replicas[r as usize].rate = rate,
            Fault::Revoke(k) => {
                if let Some(fence) = s.db.revoke(k) {
                    Self::issued(s, k, fence);
                }
            }
        }
        true
    }

    /// The server runs the advance of the run `(r, k)`: the transaction
    /// holds the fence row's lock, or the run is refused (a newer run
    /// wrote: cancelled and counted), or it waits for the lock.
    fn advance(&self, s: &mut State, r: u8, k: u8) {
        let Some(run) = s.replicas[r as usize].runs[k as usize].as_mut() else {
            return;
        };
        match s.db.advance(k, run.fence, r) {
            Fenced::Accepted => run.txn = Txn::Open,
            Fenced::Waits => run.txn = Txn::Waiting,
            Fenced::Rejected => {
                run.txn = Txn::None;
                s.ghost.stale_rejected = true;
                self.cancel_run(s, r, k, Reason::Lost);
            }
        }
    }

    /// Waiting advances whose fence row's lock is free: a server
    /// transition, whatever the replica is doing.
    fn server_actions(&self, s: &State, out: &mut Vec<Action>) {
        for (r, k) in self.waiting_advances(s) {
            out.push(Action::Advance(r, k));
        }
    }

    /// Runs `(replica, key)` whose advance waits and whose fence row's lock
    /// is now free.
    fn waiting_advances(&self, s: &State) -> Vec<(u8, u8)> {
        let mut out = Vec::new();
        for (r, rep) in s.replicas.iter().enumerate() {
            for (k, run) in rep.runs.iter().enumerate() {
                if let Some(run) = run
                    && run.txn == Txn::Waiting
                    && !s.db.locked_by_other(k as u8, r as u8, run.fence)
                {
                    out.push((r as u8, k as u8));
                }
            }
        }
        out
    }

    /// Whether the server has something to do before the next tick: a
    /// waiting advance whose lock is free. And the job's side of R2: a job
    /// on a running, reachable replica does not leave its fenced
    /// transaction idle for a whole lease (the server would end it and the
    /// run fail: a job that needs longer is outside the protocol's
    /// contract), so it commits before the tick that would reach the idle
    /// timeout.
    fn server_urgent(&self, s: &State) -> bool {
        let lease = self.cfg.lease;
        if !self.waiting_advances(s).is_empty() {
            return true;
        }
        self.cfg.variant.idle_timeout()
            && s.db.fence_rows.iter().flat_map(|f| f.lock).any(|l| {
                let rep = &s.replicas[l.replica as usize];
                let next = s.db.clock + self.step(s.db.rate);
                rep.up()
                    && !rep.partitioned
                    && rep
                        .runs
                        .iter()
                        .flatten()
                        .any(|run| run.fence == l.fence && run.txn == Txn::Open)
                    && l.idle_since.is_some_and(|since| next >= since + lease)
            })
    }

    /// Normalises a state after a transition and updates the liveness
    /// ghost.
    fn settle(&self, mut s: State) -> State {
        s.net.sort();
        self.forget_idle_times(&mut s);
        self.track_waiting(&mut s);
        s
    }

    /// Forgets the idle time of a transaction whose timeout (R2) falls
    /// after the last server instant the horizon can reach (every
    /// remaining tick on the fastest clock): no transition or property can
    /// depend on it any more, and states that differ only in it merge.
    fn forget_idle_times(&self, s: &mut State) {
        let fastest = self.cfg.units_per_tick + self.cfg.drift;
        let reach = s.db.clock + (self.cfg.horizon - s.now) * fastest;
        for row in s.db.fence_rows.iter_mut() {
            if let Some(l) = row.lock.as_mut()
                && l.idle_since.is_some_and(|since| since + self.cfg.lease > reach)
            {
                l.idle_since = None;
            }
        }
    }

    fn fault_actions(&self, s: &State, out: &mut Vec<Action>) {
        let f = self.cfg.faults;
        for r in 0..s.replicas.len() as u8 {
            let rep = &s.replicas[r as usize];
            if rep.partitioned {
                out.push(Action::Fault(Fault::Heal(r)));
            }
            if rep.status == Status::Frozen {
                out.push(Action::Fault(Fault::Resume(r)));
            }
        }
        if s.faults_left == 0 {
            return;
        }
        for (i, m) in s.net.iter().enumerate() {
            if f.lose {
                out.push(Action::Fault(Fault::Lose(i as u8)));
            }
            if f.delay && !m.delayed {
                out.push(Action::Fault(Fault::Delay(i as u8)));
            }
        }
        for r in 0..s.replicas.len() as u8 {
            let rep = &s.replicas[r as usize];
            if rep.status == Status::Crashed {
                continue;
            }
            if f.partition && !rep.partitioned {
                out.push(Action::Fault(Fault::Partition(r)));
            }
            if f.freeze && rep.status == Status::Up {
                out.push(Action::Fault(Fault::Freeze(r)));
            }
            if f.crash {
                out.push(Action::Fault(Fault::Crash(r)));
            }
            if f.shutdown && rep.up() && !rep.shutting_down {
                out.push(Action::Fault(Fault::Shutdown(r)));
            }
            if f.skew {
                for rate in [Rate::Slow, Rate::Nominal, Rate::Fast] {
                    if rate != rep.rate {
                        out.push(Action::Fault(Fault::Skew(Clock::Replica(r), rate)));
                    }
                }
            }
        }
        if f.skew {
            for rate in [Rate::Slow, Rate::Nominal, Rate::Fast] {
                if rate != s.db.rate {
                    out.push(Action::Fault(Fault::Skew(Clock::Server, rate)));
                }
            }
        }
        if f.revoke {
            for k in 0..self.cfg.keys as u8 {
                if s.db.fence_rows[k as usize].lock.is_none() && s.db.rows[k as usize].is_some() {
                    out.push(Action::Fault(Fault::Revoke(k)));
                }
            }
        }
    }
}

impl Model for LeaseModel {
    type State = State;
    type Action = Action;

    /// Every combination of slow and fast clocks; rows registered, free,
    /// due at 0; every replica up, about to poll.
    fn init_states(&self) -> Vec<State> {
        let n = self.cfg.replicas() + 1;
        let mut out = Vec::new();
        for bits in 0..(1u32 << n) {
            let rate = |i: usize| if bits & (1 << i) != 0 { Rate::Fast } else { Rate::Slow };
            let keys = self.cfg.keys;
            out.push(State {
                now: 0,
                db: Db::new(keys, rate(0)),
                replicas: self
                    .cfg
                    .holders
                    .iter()
                    .enumerate()
                    .map(|(i, &holder)| Replica {
                        holder,
                        status: Status::Up,
                        partitioned: false,
                        shutting_down: false,
                        clock: 0,
                        rate: rate(i + 1),
                        next_poll: 0,
                        next_beat: 0,
                        runs: vec![None; keys],
                    })
                    .collect(),
                net: Vec::new(),
                faults_left: self.cfg.fault_budget,
                ghost: Ghost {
                    tenures: vec![0; keys],
                    last_fence: (1..=keys as u8).collect(),
                    fence_regressed: false,
                    accepted: vec![[(0, 0); 2]; keys],
                    stale_landed: false,
                    stale_rejected: false,
                    deadline_stop: false,
                    slot: vec![(0, 0, false); keys],
                    fault_since_slot: vec![false; keys],
                    waiting: vec![Some(0); keys],
                    completed: false,
                    late_commit: false,
                    late_update: false,
                    late_commit_refused: false,
                    idle_end_freed_advance: false,
                },
            });
        }
        out
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        if s.now < self.cfg.horizon && !self.urgent(s) {
            out.push(Action::Tick);
        }
        for (i, m) in s.net.iter().enumerate() {
            let deliverable = match m.body {
                Body::Request(_) => true,
                Body::Reply(_) => s.replicas[m.replica as usize].status != Status::Frozen,
            };
            if deliverable {
                out.push(Action::Deliver(i as u8));
            }
        }
        for r in 0..s.replicas.len() as u8 {
            let rep = &s.replicas[r as usize];
            if !rep.up() {
                continue;
            }
            let fates = Fate::ALL
                .into_iter()
                .filter(|f| f.allowed(self.cfg.faults, s.faults_left));
            if self.poll_due(s, r) {
                out.extend(fates.clone().map(|f| Action::Poll(r, f)));
            }
            if self.beat_due(rep) {
                out.extend(fates.clone().map(|f| Action::Beat(r, f)));
            }
            for k in 0..self.cfg.keys as u8 {
                let Some(run) = &rep.runs[k as usize] else {
                    continue;
                };
                if self.past_deadline(rep, run) {
                    out.push(Action::Supervise(r, k));
                }
                // A run whose advance waits is blocked in `begin_fenced`:
                // its code does nothing else until the server answers.
                if run.txn == Txn::Waiting {
                    continue;
                }
                if run.phase == Phase::Running && run.reason.is_none() {
                    if run.txn == Txn::None {
                        out.push(Action::Finish(r, k));
                    }
                    if self.cfg.ensure && !Self::ensure_in_flight(s, r, k) {
                        out.extend(fates.clone().map(|f| Action::Ensure(r, k, f)));
                    }
                }
                if self.cfg.writes {
                    if run.txn == Txn::Open {
                        out.push(Action::Commit(r, k));
                    } else if run.wrote & 1 == 0 {
                        out.push(Action::Begin(r, k));
                    }
                    if run.wrote & 2 == 0 {
                        out.push(Action::Update(r, k));
                    }
                }
            }
        }
        self.server_actions(s, out);
        self.fault_actions(s, out);
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick => self.tick(&mut s),
            Action::Poll(r, fate) => {
                let rep = &mut s.replicas[r as usize];
                let keys = rep.idle_keys();
                let sent = rep.clock;
                rep.next_poll = rep.clock + self.cfg.poll;
                self.statement(&mut s, r, Request::Claim { sent, keys }, fate);
            }
            Action::Beat(r, fate) => {
                let rep = &mut s.replicas[r as usize];
                let tenures = rep.renewable();
                let sent = rep.clock;
                rep.next_beat = rep.clock + self.cfg.heartbeat;
                Self::abandon(&mut s, r, |b| {
                    matches!(
                        b,
                        Body::Request(Request::Renew {
                            via: Via::Heartbeat,
                            ..
                        }) | Body::Reply(Reply::Renew {
                            via: Via::Heartbeat,
                            ..
                        })
                    )
                });
                let q = Request::Renew {
                    sent,
                    via: Via::Heartbeat,
                    tenures,
                };
                self.statement(&mut s, r, q, fate);
            }
            Action::Ensure(r, k, fate) => {
                let rep = &s.replicas[r as usize];
                let fence = rep.runs[k as usize].as_ref()?.fence;
                let sent = rep.clock;
                let q = Request::Renew {
                    sent,
                    via: Via::Ensure(k),
                    tenures: vec![(k, fence)],
                };
                self.statement(&mut s, r, q, fate);
            }
            Action::Deliver(i) => {
                let m = s.net.remove(i as usize);
                let r = m.replica;
                if m.delayed || m.frozen {
                    Self::strikes(&mut s);
                }
                match m.body {
                    Body::Request(q) => {
                        if let Some(reply) = self.execute(&mut s, r, q) {
                            let rep = &s.replicas[r as usize];
                            if m.abandoned || rep.status == Status::Crashed || rep.partitioned {
                                // nobody reads the answer
                            } else if rep.status == Status::Up {
                                self.receive(&mut s, r, reply, m.frozen);
                            } else {
                                // frozen: read once it resumes
                                s.net.push(Msg {
                                    replica: r,
                                    delayed: false,
                                    abandoned: false,
                                    frozen: true,
                                    body: Body::Reply(reply),
                                });
                            }
                        }
                    }
                    Body::Reply(reply) => {
                        if !m.abandoned && s.replicas[r as usize].status == Status::Up {
                            self.receive(&mut s, r, reply, m.frozen);
                        }
                    }
                }
            }
            Action::Finish(r, k) => self.stop_run(&mut s, r, k, true),
            Action::Begin(r, k) => {
                let run = s.replicas[r as usize].runs[k as usize].as_mut()?;
                run.wrote |= 1;
                let fence = run.fence;
                if s.replicas[r as usize].partitioned {
                    // `begin_fenced` fails to reach the server: the job
                    // returns the error.
                    self.stop_run(&mut s, r, k, false);
                } else if self.cfg.variant.early_check() && !s.db.tenure_live(k, fence) {
                    // The advance refuses to start for an ended tenure,
                    // checked when it is sent: `live` is read in the
                    // statement's snapshot, before it waits for the fence
                    // row's lock — R1 decides at commit. The run is
                    // cancelled; the error is `StaleFence` when the row's
                    // committed fence is newer, `LeaseLost` otherwise.
                    if s.db.committed_fence(k) > fence {
                        s.ghost.stale_rejected = true;
                    }
                    self.cancel_run(&mut s, r, k, Reason::Lost);
                } else {
                    self.advance(&mut s, r, k);
                }
            }
            Action::Advance(r, k) => self.advance(&mut s, r, k),
            Action::Commit(r, k) => {
                let run = s.replicas[r as usize].runs[k as usize].as_mut()?;
                run.txn = Txn::None;
                let (fence, n) = (run.fence, run.run);
                if s.replicas[r as usize].partitioned {
                    // The `COMMIT` never arrives; the transaction stays open
                    // on the server until R2 ends it. The job returns the
                    // error.
                    self.stop_run(&mut s, r, k, false);
                } else {
                    let live = s.db.tenure_live(k, fence);
                    match s.db.commit(k, r, fence, self.cfg.variant.commit_check()) {
                        Commit::Committed => {
                            if !live {
                                s.ghost.late_commit = true;
                            }
                            Self::landed(&mut s, k, 0, fence, n);
                        }
                        Commit::Refused => {
                            s.ghost.late_commit_refused = true;
                            self.stop_run(&mut s, r, k, false);
                        }
                        Commit::Gone => self.stop_run(&mut s, r, k, false),
                    }
                }
            }
            Action::Update(r, k) => {
                let run = s.replicas[r as usize].runs[k as usize].as_mut()?;
                run.wrote |= 2;
                let (fence, n) = (run.fence, run.run);
                let live = s.db.tenure_live(k, fence);
                if self.cfg.variant.early_check() && !live {
                    // `EXISTS (… live …)`: an ended tenure updates nothing;
                    // the run is cancelled, with `StaleFence` when the
                    // column's fence is newer, `LeaseLost` otherwise. The
                    // statement is one atomic step here, so its check and
                    // its commit fall at the same instant.
                    if s.db.column[k as usize] > fence {
                        s.ghost.stale_rejected = true;
                    }
                    self.cancel_run(&mut s, r, k, Reason::Lost);
                    return Some(self.settle(s));
                }
                match s.db.fenced_update(k, fence) {
                    Fenced::Accepted => {
                        if !live {
                            s.ghost.late_update = true;
                        }
                        Self::landed(&mut s, k, 1, fence, n);
                    }
                    _ => {
                        s.ghost.stale_rejected = true;
                        self.cancel_run(&mut s, r, k, Reason::Lost);
                    }
                }
            }
            Action::Supervise(r, k) => self.cancel_run(&mut s, r, k, Reason::Deadline),
            Action::Fault(f) => {
                if self.fault(&mut s, f) {
                    Self::struck(&mut s);
                }
            }
        }
        Some(self.settle(s))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::all()
    }
}

/// The result of one check.
#[derive(Debug)]
pub struct Outcome {
    /// States generated.
    pub states: usize,
    /// Distinct states.
    pub unique: usize,
    /// Longest path explored.
    pub max_depth: usize,
    /// Wall time.
    pub elapsed: Duration,
    /// Whether every reachable state was visited.
    pub done: bool,
    /// Counterexamples (and examples of `sometimes` properties) found.
    pub discoveries: BTreeMap<&'static str, Path<State, Action>>,
}

/// Checks `cfg` breadth-first on `threads` threads; with `stop_at`, stops
/// as soon as that property has a discovery.
pub fn check(cfg: Config, threads: usize, stop_at: Option<&'static str>) -> Outcome {
    let start = Instant::now();
    let mut builder = LeaseModel::new(cfg).checker().threads(threads);
    if let Some(name) = stop_at {
        builder = builder.finish_when(HasDiscoveries::AnyOf([name].into_iter().collect()));
    }
    let checker = builder.spawn_bfs().join();
    Outcome {
        states: checker.state_count(),
        unique: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        elapsed: start.elapsed(),
        done: checker.is_done(),
        discoveries: checker.discoveries().into_iter().collect(),
    }
}
