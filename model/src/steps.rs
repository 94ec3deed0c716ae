//! Each action's transition, one function each; `next_state` (in
//! `model`) dispatches to them. A function returns `None` when the action
//! no longer applies (its run is gone).

use crate::db::{Commit, Fenced};
use crate::env::{Body, Fate, Msg, Reply, Request, Via};
use crate::machine::LeaseModel;
use crate::replica::{Reason, Status, Txn};
use crate::{State, Variant};

impl LeaseModel {
    /// The scheduler polls: one claim of the replica's idle keys.
    pub(crate) fn poll(&self, s: &mut State, r: u8, fate: Fate) {
        let rep = &mut s.replicas[r as usize];
        let keys = rep.idle_keys();
        let sent = rep.clock;
        // A registration is named only while the runtime can vouch for it:
        // its last successful confirm is less than `grace − margin` old.
        // Otherwise (a process just resumed from a freeze, its session
        // perhaps ended meanwhile) the claim writes a NULL owner: takeover
        // at expiry only. `Variant::ClaimNamesStaleRegistration` names it
        // anyway.
        let fresh = rep.clock < (rep.confirmed + self.cfg.grace).saturating_sub(self.cfg.liveness_margin);
        let owner = rep
            .reg
            .filter(|_| fresh || self.cfg.variant == Variant::ClaimNamesStaleRegistration);
        rep.next_poll = rep.clock + self.cfg.poll;
        self.statement(s, r, Request::Claim { sent, keys, owner }, fate);
    }

    /// The runtime registers again after it saw its session end: a new
    /// session takes its advisory lock and inserts a row (one round trip
    /// on the new session; it cannot reach a cut-off server, so it is not
    /// enabled then).
    pub(crate) fn register(&self, s: &mut State, r: u8) {
        let id = s.db.register(r, self.cfg.variant);
        let rep = &mut s.replicas[r as usize];
        rep.reg = Some(id);
        rep.confirmed = rep.clock;
        let lost = rep.lost.map(|(old, _)| old);
        rep.repoint = lost.is_some() && rep.runs.iter().flatten().any(|run| run.owner == lost);
    }

    /// The runtime re-points its runs' rows from the registration it lost
    /// to its new one: one guarded `UPDATE` (`Db::repoint`). A run whose
    /// row moved is free of the lost session's stop deadline; one whose
    /// row did not (taken over, or its old registration already dead)
    /// keeps it.
    pub(crate) fn repoint(&self, s: &mut State, r: u8) {
        let (grace, v) = (self.cfg.grace, self.cfg.variant);
        let rep = &mut s.replicas[r as usize];
        rep.repoint = false;
        let (Some((old, _)), Some(new)) = (rep.lost, rep.reg) else {
            return;
        };
        for (k, run) in rep.runs.iter_mut().enumerate() {
            let Some(run) = run.as_mut().filter(|run| run.owner == Some(old)) else {
                continue;
            };
            if s.db.repoint(k as u8, run.fence, old, new, grace, v) {
                run.owner = Some(new);
                run.cutoff = None;
                s.ghost.repointed = true;
            }
        }
    }

    /// The heartbeat: one renewal of every renewable tenure; an earlier
    /// heartbeat still in flight is abandoned.
    pub(crate) fn beat(&self, s: &mut State, r: u8, fate: Fate) {
        let rep = &mut s.replicas[r as usize];
        let tenures = rep.renewable();
        let sent = rep.clock;
        rep.next_beat = rep.clock + self.cfg.heartbeat;
        Self::abandon(s, r, |b| {
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
        self.statement(s, r, q, fate);
    }

    /// `FenceGuard::ensure` of the run `(r, k)`.
    pub(crate) fn ensure(&self, s: &mut State, r: u8, k: u8, fate: Fate) -> Option<()> {
        let rep = &s.replicas[r as usize];
        let fence = rep.runs[k as usize].as_ref()?.fence;
        let sent = rep.clock;
        let q = Request::Renew {
            sent,
            via: Via::Ensure(k),
            tenures: vec![(k, fence)],
        };
        self.statement(s, r, q, fate);
        Some(())
    }

    /// Message `i` arrives: the server runs a request (its reply read at
    /// once, later if the replica is frozen, never if it is gone), or the
    /// replica reads a reply.
    pub(crate) fn deliver(&self, s: &mut State, i: u8) {
        let m = s.net.remove(i as usize);
        let r = m.replica;
        if m.delayed || m.frozen {
            Self::strikes(s);
        }
        match m.body {
            Body::Request(q) => {
                if let Some(reply) = self.execute(s, r, q) {
                    let rep = &s.replicas[r as usize];
                    if m.abandoned || rep.status == Status::Crashed || rep.partitioned {
                        // nobody reads the answer
                    } else if rep.status == Status::Up {
                        self.receive(s, r, reply, m.frozen);
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
                    self.receive(s, r, reply, m.frozen);
                }
            }
        }
    }

    /// The run `(r, k)` begins a fenced transaction (`begin_fenced`).
    pub(crate) fn begin(&self, s: &mut State, r: u8, k: u8) -> Option<()> {
        let run = s.replicas[r as usize].runs[k as usize].as_mut()?;
        run.wrote |= 1;
        let fence = run.fence;
        if s.replicas[r as usize].partitioned {
            // `begin_fenced` fails to reach the server: the job
            // returns the error.
            self.stop_run(s, r, k, false);
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
            self.cancel_run(s, r, k, Reason::Lost);
        } else {
            self.advance(s, r, k);
        }
        Some(())
    }

    /// The run `(r, k)` commits its fenced transaction.
    pub(crate) fn commit(&self, s: &mut State, r: u8, k: u8) -> Option<()> {
        let run = s.replicas[r as usize].runs[k as usize].as_mut()?;
        run.txn = Txn::None;
        let (fence, n) = (run.fence, run.run);
        if s.replicas[r as usize].partitioned {
            // The `COMMIT` never arrives; the transaction stays open
            // on the server until R2 ends it. The job returns the
            // error.
            self.stop_run(s, r, k, false);
        } else {
            let live = s.db.tenure_live(k, fence);
            match s.db.commit(k, r, fence, self.cfg.variant.commit_check()) {
                Commit::Committed => {
                    if !live {
                        s.ghost.late_commit = true;
                    }
                    Self::landed(s, k, 0, fence, n);
                }
                Commit::Refused => {
                    s.ghost.late_commit_refused = true;
                    self.stop_run(s, r, k, false);
                }
                Commit::Gone => self.stop_run(s, r, k, false),
            }
        }
        Some(())
    }

    /// The run `(r, k)` sends its fenced `UPDATE` of a `last_fence` column.
    pub(crate) fn update(&self, s: &mut State, r: u8, k: u8) -> Option<()> {
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
            self.cancel_run(s, r, k, Reason::Lost);
            return Some(());
        }
        match s.db.fenced_update(k, fence) {
            Fenced::Accepted => {
                if !live {
                    s.ghost.late_update = true;
                }
                Self::landed(s, k, 1, fence, n);
            }
            _ => {
                s.ghost.stale_rejected = true;
                self.cancel_run(s, r, k, Reason::Lost);
            }
        }
        Some(())
    }
}
