//! A replica reads a reply: a claim starts runs, a renewal renews or
//! loses tenures.

use crate::db::{Claimed, Renewed};
use crate::env::{Reply, Request, Via};
use crate::machine::LeaseModel;
use crate::replica::{Phase, Reason, Run, Txn};
use crate::{State, Variant};

impl LeaseModel {
    /// The replica reads a reply; `frozen`: its process was frozen while
    /// the statement was in flight.
    pub(crate) fn receive(&self, s: &mut State, r: u8, reply: Reply, frozen: bool) {
        match reply {
            Reply::Claim { sent, acquired, owner } => {
                for c in acquired {
                    self.claimed(s, r, sent, c, owner, frozen);
                }
            }
            Reply::Renew {
                sent,
                via: Via::Heartbeat,
                asked,
                renewed,
            } => self.heartbeat_answered(s, r, sent, asked, &renewed),
            Reply::Renew {
                sent,
                via: Via::Ensure(k),
                asked,
                renewed,
            } => self.ensure_answered(s, r, k, sent, asked, renewed),
        }
    }

    /// The scheduler starts a run per acquired key
    /// (`src/runtime/scheduler.rs` `claim`, then `supervise::spawn`), with a
    /// `Tenure` whose `valid_until = sent + remaining` — unless the answer
    /// came at or after that tenure's deadline (then it is handed back
    /// unrun, outcome `too_late`), or it is shutting down (`store.release`,
    /// the slot still owed). With `Variant::LateClaimStarts` (no deadline
    /// check) a late answer starts the run, which the supervisor stops right
    /// after (`past_deadline` at once); a run started so by a process frozen
    /// meanwhile is §2's exception (`outlived`).
    ///
    /// The run's row names `owner`; if the runtime has already seen that
    /// registration's session end (the claim was answered after), the run
    /// gets the same stop deadline as the runs it had then.
    fn claimed(&self, s: &mut State, r: u8, sent: u16, c: Claimed, owner: Option<u8>, frozen: bool) {
        let rep = &mut s.replicas[r as usize];
        if rep.runs[c.key as usize].is_some() {
            return; // the lease is left to expire
        }
        let late = rep.clock >= (sent + c.remaining).saturating_sub(self.cfg.margin);
        let too_late = late && self.cfg.variant != Variant::LateClaimStarts;
        if too_late || rep.shutting_down {
            let release = Request::Release {
                key: c.key,
                fence: c.fence,
                next: None,
            };
            Self::send(s, r, release);
            return;
        }
        if rep.renewable().is_empty() {
            rep.next_beat = rep.clock + self.cfg.heartbeat;
        }
        let cutoff = match rep.lost {
            Some((old, cutoff)) if owner == Some(old) && self.cfg.variant.session_stop() => Some(cutoff),
            _ => None,
        };
        rep.runs[c.key as usize] = Some(Run {
            run: c.run,
            fence: c.fence,
            valid_until: sent + c.remaining,
            next_slot: c.next_slot,
            phase: Phase::Running,
            reason: None,
            txn: Txn::None,
            wrote: 0,
            outlived: frozen && late,
            owner,
            cutoff,
            lapsed: false,
        });
        Self::count_slot_run(s, &c);
    }

    /// The ghost counts the runs of each slot (for "once per slot").
    fn count_slot_run(s: &mut State, c: &Claimed) {
        let k = c.key as usize;
        let g = &mut s.ghost;
        if g.slot[k].0 == c.slot && g.slot[k].1 > 0 {
            g.slot[k].1 = g.slot[k].1.saturating_add(1);
        } else {
            g.slot[k] = (c.slot, 1, g.fault_since_slot[k]);
            g.fault_since_slot[k] = false;
        }
    }

    /// `heartbeat::beat`: renewed rows are matched to tenures by
    /// `(key, fence)`; a tenure asked for and not renewed is lost
    /// (`renew_each`'s `lost`).
    fn heartbeat_answered(&self, s: &mut State, r: u8, sent: u16, asked: Vec<(u8, u8)>, renewed: &[Renewed]) {
        for (k, fence) in asked {
            match s.replicas[r as usize].runs[k as usize].as_ref() {
                Some(run) if run.fence == fence => {}
                _ => continue,
            }
            match renewed.iter().find(|x| x.key == k && x.fence == fence) {
                Some(x) => self.renew_run(s, r, k, sent, x.remaining),
                None => self.cancel_run(s, r, k, Reason::Lost),
            }
        }
    }

    /// `FenceGuard::ensure`: the row of its own `(key, fence)` →
    /// `Tenure::renewed`; none (and not busy) → `lose`.
    /// `Variant::RenewUncheckedAnswer` takes `renewed.pop()`, whatever row
    /// came back.
    fn ensure_answered(&self, s: &mut State, r: u8, k: u8, sent: u16, asked: Vec<(u8, u8)>, mut renewed: Vec<Renewed>) {
        let Some(run) = s.replicas[r as usize].runs[k as usize].as_ref() else {
            return;
        };
        if asked.first().map(|a| a.1) != Some(run.fence) {
            return;
        }
        let fence = run.fence;
        let mine = match self.cfg.variant {
            Variant::RenewUncheckedAnswer => renewed.pop(),
            _ => renewed.into_iter().find(|x| x.key == k && x.fence == fence),
        };
        match mine {
            Some(x) => self.renew_run(s, r, k, sent, x.remaining),
            None => self.cancel_run(s, r, k, Reason::Lost),
        }
    }

    /// `Tenure::renewed`: the deadline moves to `sent + remaining`; a run
    /// that had outlived its deadline is back within it.
    fn renew_run(&self, s: &mut State, r: u8, k: u8, sent: u16, remaining: u16) {
        let clock = s.replicas[r as usize].clock;
        let Some(run) = s.replicas[r as usize].runs[k as usize].as_mut() else {
            return;
        };
        run.renewed(sent, remaining);
        if run.outlived && run.deadline(self.cfg.margin) > clock {
            run.outlived = false;
        }
    }
}
