//! The model ([`LeaseModel`]) and the predicates that decide which actions
//! are enabled: whose poll, heartbeat or deadline is due, what is in flight.
//! The transitions are in the sibling files: `statements` (requests and
//! the server), `receive` (replies), `time` (ticks and the server's own
//! steps), `faults`, `steps` (one function per action).

use crate::clock::Rate;
use crate::env::{Body, Reply, Request, Via};
use crate::replica::{Phase, Replica, Run, Status};
use crate::{Config, State};

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

    pub(crate) fn step(&self, rate: Rate) -> u16 {
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
                        || self.register_due(rep)
                        || self.repoint_due(rep)
                        || rep.runs.iter().flatten().any(|run| self.past_deadline(rep, run)))
            })
    }

    /// The scheduler's loop polls when its timer fired and it is not
    /// waiting for a claim (it awaits each claim, bounded by
    /// `CLAIM_TIMEOUT`, before looking again).
    pub(crate) fn poll_due(&self, s: &State, r: u8) -> bool {
        let rep = &s.replicas[r as usize];
        !rep.shutting_down
            && rep.clock >= rep.next_poll
            && rep.runs.iter().any(Option::is_none)
            && !Self::claim_in_flight(s, r)
    }

    pub(crate) fn claim_in_flight(s: &State, r: u8) -> bool {
        s.net.iter().any(|m| {
            m.replica == r
                && !m.abandoned
                && matches!(
                    m.body,
                    Body::Request(Request::Claim { .. }) | Body::Reply(Reply::Claim { .. })
                )
        })
    }

    pub(crate) fn beat_due(&self, rep: &Replica) -> bool {
        rep.clock >= rep.next_beat && !rep.renewable().is_empty()
    }

    /// A running run whose tenure's deadline, or its lost session's stop
    /// deadline, has passed.
    pub(crate) fn past_deadline(&self, rep: &Replica, run: &Run) -> bool {
        run.phase == Phase::Running && rep.clock >= run.stop_at(self.cfg.margin).0
    }

    /// A runtime that saw its session end registers again as soon as it
    /// can reach the server.
    pub(crate) fn register_due(&self, rep: &Replica) -> bool {
        self.cfg.liveness && rep.up() && !rep.partitioned && rep.reg.is_none()
    }

    /// Then it re-points its runs' rows.
    pub(crate) fn repoint_due(&self, rep: &Replica) -> bool {
        rep.repoint && rep.up() && !rep.partitioned
    }

    pub(crate) fn ensure_in_flight(s: &State, r: u8, k: u8) -> bool {
        let ensure = Via::Ensure(k);
        s.net.iter().any(|m| {
            m.replica == r
                && match &m.body {
                    Body::Request(Request::Renew { via, .. }) | Body::Reply(Reply::Renew { via, .. }) => *via == ensure,
                    _ => false,
                }
        })
    }
}
