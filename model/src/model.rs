//! `stateright::Model` for [`LeaseModel`]: the initial states, the enabled
//! actions, and each action's transition (in `steps`).

use stateright::{Model, Property};

use crate::clock::Rate;
use crate::db::{Db, Reg};
use crate::env::{Body, Fate};
use crate::machine::LeaseModel;
use crate::properties;
use crate::replica::{Phase, Replica, Status, Txn};
use crate::{Action, Ghost, State};

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
            // Each runtime listens and registers before it claims.
            let regs = if self.cfg.liveness {
                (0..self.cfg.replicas() as u8)
                    .map(|replica| Reg {
                        replica,
                        alive: true,
                        registered: 0,
                        confirmed: 0,
                        gone_seen: (!self.cfg.variant.session_test()).then_some(0),
                    })
                    .collect()
            } else {
                Vec::new()
            };
            out.push(State {
                now: 0,
                db: Db::new(keys, rate(0), regs, self.cfg.limit),
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
                        reg: self.cfg.liveness.then_some(i as u8 + 1),
                        confirmed: 0,
                        lost: None,
                        repoint: false,
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
                    took_over: false,
                    repointed: false,
                    session_stop: false,
                    slot_wait: false,
                    slot_took_over: false,
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
            if self.register_due(rep) {
                out.push(Action::Register(r));
            }
            if self.repoint_due(rep) {
                out.push(Action::Repoint(r));
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
            Action::Poll(r, fate) => self.poll(&mut s, r, fate),
            Action::Beat(r, fate) => self.beat(&mut s, r, fate),
            Action::Ensure(r, k, fate) => self.ensure(&mut s, r, k, fate)?,
            Action::Deliver(i) => self.deliver(&mut s, i),
            Action::Finish(r, k) => self.stop_run(&mut s, r, k, true),
            Action::Begin(r, k) => self.begin(&mut s, r, k)?,
            Action::Advance(r, k) => self.advance(&mut s, r, k),
            Action::Commit(r, k) => self.commit(&mut s, r, k)?,
            Action::Update(r, k) => self.update(&mut s, r, k)?,
            Action::Supervise(r, k) => {
                let run = s.replicas[r as usize].runs[k as usize].as_ref()?;
                let reason = run.stop_at(self.cfg.margin).1;
                self.cancel_run(&mut s, r, k, reason);
            }
            Action::Register(r) => self.register(&mut s, r),
            Action::Repoint(r) => self.repoint(&mut s, r),
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
