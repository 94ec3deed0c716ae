//! Requests: sending, abandoning and losing them; the server running them
//! (`execute`); a run stopping or cancelled; the ghost's record of writes
//! and fences.

use crate::State;
use crate::env::{Body, Fate, Msg, Reply, Request};
use crate::machine::LeaseModel;
use crate::replica::{Reason, Status, Txn};

impl LeaseModel {
    pub(crate) fn send(s: &mut State, r: u8, q: Request) {
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
    pub(crate) fn abandon(s: &mut State, r: u8, pred: impl Fn(&Body) -> bool) {
        for m in s.net.iter_mut() {
            if m.replica == r && pred(&m.body) {
                m.abandoned = true;
            }
        }
    }

    /// A replica sends a statement, and the environment decides its fate.
    pub(crate) fn statement(&self, s: &mut State, r: u8, q: Request, fate: Fate) {
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
    pub(crate) fn stop_run(&self, s: &mut State, r: u8, k: u8, success: bool) {
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
        if run.reason == Some(Reason::Session) {
            s.ghost.session_stop = true;
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
    pub(crate) fn cancel_run(&self, s: &mut State, r: u8, k: u8, reason: Reason) {
        let d = self.cfg.stop_ticks;
        if let Some(run) = s.replicas[r as usize].runs[k as usize].as_mut() {
            run.cancel(reason, d);
            if d == 0 {
                self.stop_run(s, r, k, false);
            }
        }
    }

    /// A write landed on `resource` of `key` with the run's fence.
    pub(crate) fn landed(s: &mut State, key: u8, resource: usize, fence: u8, run: u8) {
        let acc = &mut s.ghost.accepted[key as usize][resource];
        if fence < acc.0 || run < acc.1 {
            s.ghost.stale_landed = true;
        }
        acc.0 = acc.0.max(fence);
        acc.1 = acc.1.max(run);
    }

    /// A fence was handed out for `key`.
    pub(crate) fn issued(s: &mut State, key: u8, fence: u8) {
        let last = &mut s.ghost.last_fence[key as usize];
        if fence <= *last {
            s.ghost.fence_regressed = true;
        }
        *last = fence;
    }

    /// The server runs a request.
    pub(crate) fn execute(&self, s: &mut State, r: u8, q: Request) -> Option<Reply> {
        let holder = s.replicas[r as usize].holder;
        let v = self.cfg.variant;
        match q {
            Request::Claim { sent, keys, owner } => {
                let liveness = self.cfg.liveness.then_some(self.cfg.grace);
                let (mut acquired, slot_wait) =
                    s.db.claim_due(holder, owner, &keys, self.cfg.lease, self.cfg.period, liveness, v);
                s.ghost.slot_wait |= slot_wait;
                for c in acquired.iter_mut() {
                    s.ghost.took_over |= c.took_over;
                    s.ghost.slot_took_over |= c.slot_took_over;
                    let k = c.key as usize;
                    s.ghost.tenures[k] += 1;
                    c.run = s.ghost.tenures[k];
                    if let Some(row) = s.db.rows[k].as_mut() {
                        row.run = c.run;
                    }
                    Self::issued(s, c.key, c.fence);
                }
                Some(Reply::Claim { sent, acquired, owner })
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
}
