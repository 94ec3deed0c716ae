//! Real time passing, and the server's own steps: advances that waited
//! for a lock, the idle bound; settling a state after each action.

use crate::db::Fenced;
use crate::env::{Body, Reply, Request};
use crate::machine::LeaseModel;
use crate::replica::{Phase, Reason, Replica, Status, Txn};
use crate::{Action, State};

impl LeaseModel {
    pub(crate) fn tick(&self, s: &mut State) {
        s.now += 1;
        s.db.clock += self.step(s.db.rate);
        s.db.snapshot = None;
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
            if status == Status::Up {
                self.confirm(s, r as u8);
            }
            let lapsed = self.liveness_lapsed(&s.replicas[r]);
            for k in 0..self.cfg.keys {
                let Some(run) = s.replicas[r].runs[k].as_mut() else {
                    continue;
                };
                if status == Status::Frozen {
                    // §2: a frozen process cannot be stopped at a
                    // deadline — its tenure's, or its lost session's, or
                    // the one it would set at its next confirm should its
                    // session end before then (its row's owner then dead
                    // at once).
                    if clock >= run.deadline(margin) || run.cutoff.is_some_and(|c| clock >= c) {
                        run.outlived = true;
                    }
                    if lapsed.is_some() && run.owner == lapsed {
                        run.lapsed = true;
                    }
                    continue;
                }
                let (stop_at, reason) = run.stop_at(margin);
                match run.phase {
                    Phase::Stopping(n) if n <= 1 => self.stop_run(s, r as u8, k as u8, false),
                    Phase::Stopping(n) => run.phase = Phase::Stopping(n - 1),
                    Phase::Running if clock >= stop_at => {
                        self.cancel_run(s, r as u8, k as u8, reason);
                    }
                    Phase::Running => {}
                }
            }
        }
    }

    /// The confirm, every tick while the runtime runs and reaches the
    /// server (the interval, 250 ms against a 1 s grace, is below the
    /// model's resolution), on its liveness session: `confirmed_at =
    /// clock_timestamp()` (one round trip, at the tick: the model's
    /// resolution). Cut off, it gets no answer and nothing changes (the
    /// session lives on at the server). On a session that ended, it reads
    /// an error: the runtime drops the registration, and each run whose row
    /// names it must be re-pointed by `last successful confirm's send
    /// instant + grace − margin` or stop then.
    pub(crate) fn confirm(&self, s: &mut State, r: u8) {
        let rep = &mut s.replicas[r as usize];
        let Some(id) = rep.reg else {
            return;
        };
        if rep.partitioned {
            return;
        }
        if s.db.confirm(id) {
            rep.confirmed = rep.clock;
            for run in rep.runs.iter_mut().flatten() {
                run.lapsed = false;
            }
            return;
        }
        let cutoff = (rep.confirmed + self.cfg.grace).saturating_sub(self.cfg.liveness_margin);
        rep.reg = None;
        rep.lost = Some((id, cutoff));
        if self.cfg.variant.session_stop() {
            for run in rep.runs.iter_mut().flatten() {
                if run.owner == Some(id) {
                    run.cutoff = Some(run.cutoff.map_or(cutoff, |c| c.min(cutoff)));
                }
            }
        }
    }

    /// Ghost, for §2's frozen-process exception: the registration of a
    /// replica whose last successful confirm is `grace − margin` old or
    /// more (the stop deadline it would set, were its session to end now,
    /// has passed), when the runtime stops runs on a lost session.
    pub(crate) fn liveness_lapsed(&self, rep: &Replica) -> Option<u8> {
        let id = rep.reg?;
        let cutoff = (rep.confirmed + self.cfg.grace).saturating_sub(self.cfg.liveness_margin);
        (self.cfg.variant.session_stop() && rep.clock >= cutoff).then_some(id)
    }

    /// A fault strikes: liveness waits restart, slots are marked.
    pub(crate) fn struck(s: &mut State) {
        s.faults_left -= 1;
        Self::strikes(s);
    }

    /// A fault's effect lands now (a fault itself, a delayed statement or
    /// answer arriving, a frozen replica resuming, a partition healing):
    /// liveness waits restart, the slot in progress is marked.
    pub(crate) fn strikes(s: &mut State) {
        for w in s.ghost.waiting.iter_mut() {
            *w = None;
        }
        for k in 0..s.ghost.slot.len() {
            s.ghost.slot[k].2 = true;
            s.ghost.fault_since_slot[k] = true;
        }
    }

    /// Updates the liveness ghost after a transition.
    pub(crate) fn track_waiting(&self, s: &mut State) {
        let live = s.replicas.iter().any(Replica::live);
        for k in 0..self.cfg.keys {
            let liveness = self.cfg.liveness.then_some((self.cfg.grace, self.cfg.variant));
            if live && s.db.claimable(k, liveness, self.cfg.limit) {
                if s.ghost.waiting[k].is_none() {
                    s.ghost.waiting[k] = Some(s.now);
                }
            } else {
                s.ghost.waiting[k] = None;
            }
        }
    }

    /// The server runs the advance of the run `(r, k)`: the transaction
    /// holds the fence row's lock, or the run is refused (a newer run
    /// wrote: cancelled and counted), or it waits for the lock.
    pub(crate) fn advance(&self, s: &mut State, r: u8, k: u8) {
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
    pub(crate) fn server_actions(&self, s: &State, out: &mut Vec<Action>) {
        for (r, k) in self.waiting_advances(s) {
            out.push(Action::Advance(r, k));
        }
    }

    /// Runs `(replica, key)` whose advance waits and whose fence row's lock
    /// is now free.
    pub(crate) fn waiting_advances(&self, s: &State) -> Vec<(u8, u8)> {
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
    pub(crate) fn server_urgent(&self, s: &State) -> bool {
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
    pub(crate) fn settle(&self, mut s: State) -> State {
        s.net.sort();
        self.forget_idle_times(&mut s);
        self.forget_confirm_times(&mut s);
        self.track_waiting(&mut s);
        s
    }

    /// Once no session can end any more (no crash or kill fault left) and
    /// the claimer asks that a dead registration's session be gone, the
    /// confirm times of live sessions and the owners naming them can no
    /// longer make a row claimable early: they are forgotten (a state
    /// reduction, as [`Self::forget_idle_times`]).
    pub(crate) fn forget_confirm_times(&self, s: &mut State) {
        let f = self.cfg.faults;
        let can_end = s.faults_left > 0 && (f.crash || f.kill_session);
        if !self.cfg.liveness || can_end || !self.cfg.variant.session_test() {
            return;
        }
        for reg in s.db.regs.iter_mut().filter(|g| g.alive) {
            reg.confirmed = 0;
        }
        let alive = |id: Option<u8>| id.is_some_and(|id| s.db.regs[id as usize - 1].alive);
        for row in s.db.rows.iter_mut().flatten() {
            if alive(row.owner) {
                row.owner = None;
            }
        }
        for slot in s.db.slots.iter_mut() {
            if alive(slot.owner) {
                slot.owner = None;
            }
        }
        for rep in s.replicas.iter_mut() {
            if alive(rep.reg) {
                rep.confirmed = 0;
            }
            for run in rep.runs.iter_mut().flatten() {
                if alive(run.owner) {
                    run.owner = None;
                    run.lapsed = false;
                }
            }
        }
    }

    /// Forgets the idle time of a transaction whose timeout (R2) falls
    /// after the last server instant the horizon can reach (every
    /// remaining tick on the fastest clock): no transition or property can
    /// depend on it any more, and states that differ only in it merge.
    pub(crate) fn forget_idle_times(&self, s: &mut State) {
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
}
