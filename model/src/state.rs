//! The state of the whole system, its ghost counters, and the actions
//! between states.

use crate::db::Db;
use crate::env::{Fate, Fault, Msg};
use crate::replica::Replica;

/// What each key's ghost counters record (not part of the protocol: only
/// read by [`properties`](crate::properties)).
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
    /// A key was taken over before its lease expired, its owner's
    /// registration dead (crash takeover, issue 40).
    pub took_over: bool,
    /// A runtime that saw its liveness session end re-pointed a running
    /// run's row to its new registration.
    pub repointed: bool,
    /// A run was stopped at its lost session's deadline.
    pub session_stop: bool,
    /// A claim left a free, due key for want of a free slot (the limit
    /// held a start back).
    pub slot_wait: bool,
    /// A claim took a slot row before it expired, its owner dead.
    pub slot_took_over: bool,
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
    /// A runtime that saw its liveness session end registers again: a new
    /// session, its advisory lock, a new `leasehold_replica` row.
    Register(u8),
    /// It re-points its running runs' rows from the lost registration to
    /// the new one (one guarded `UPDATE`).
    Repoint(u8),
    /// The environment injects a fault.
    Fault(Fault),
}
