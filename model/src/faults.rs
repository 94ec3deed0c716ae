//! Faults the environment injects, and which are enabled.

use crate::clock::Rate;
use crate::env::{Body, Clock, Fault};
use crate::machine::LeaseModel;
use crate::replica::{Reason, Status, Txn};
use crate::{Action, State};

impl LeaseModel {
    /// Applies fault `f`. `true` when it spends the fault budget; healing
    /// a partition and resuming a frozen replica end an earlier fault and
    /// spend nothing.
    pub(crate) fn fault(&self, s: &mut State, f: Fault) -> bool {
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
                // Its liveness session ends with it — unless the close is
                // lost in a partition (a host that dies silently): the
                // server keeps the session, and the key is taken over at
                // expiry.
                if !s.replicas[r as usize].partitioned
                    && let Some(id) = s.replicas[r as usize].reg
                {
                    s.db.end_session(id);
                }
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
            Fault::KillSession(r) => {
                if let Some(id) = s.replicas[r as usize].reg {
                    s.db.end_session(id);
                }
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

    /// The faults enabled in `s`, within the configured kinds and budget.
    pub(crate) fn fault_actions(&self, s: &State, out: &mut Vec<Action>) {
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
            let cut_after_loss = f.cut_after_loss && rep.lost.is_some() && rep.reg.is_none();
            if (f.partition || cut_after_loss) && !rep.partitioned {
                out.push(Action::Fault(Fault::Partition(r)));
            }
            if f.freeze && rep.status == Status::Up {
                out.push(Action::Fault(Fault::Freeze(r)));
            }
            if f.crash {
                out.push(Action::Fault(Fault::Crash(r)));
            }
            if f.kill_session
                && rep
                    .reg
                    .is_some_and(|id| s.db.regs.get(id as usize - 1).is_some_and(|g| g.alive))
            {
                out.push(Action::Fault(Fault::KillSession(r)));
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
