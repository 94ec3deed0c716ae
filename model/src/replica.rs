//! A replica: one runtime (`src/runtime/`) with its holder id, its
//! monotonic clock, and its runs.
//!
//! - the scheduler (`src/runtime/scheduler.rs`) claims keys it has no run
//!   of with `claim_due`, at least every `poll` ticks of its clock (forced)
//!   and whenever else it likes (its due-time timers, a `NOTIFY`);
//! - the heartbeat (`src/runtime/heartbeat.rs`) renews every tenure that
//!   wants renewal in one `renew_each` every `heartbeat` ticks, abandoning
//!   an answer that has not come within the tick;
//! - a run may call `FenceGuard::ensure` (`src/guard.rs`) any time;
//! - the supervisor (`src/runtime/supervise.rs`) stops a run at its local
//!   deadline (`Tenure::deadline`: `sent + remaining − margin`,
//!   `src/tenure.rs`) or on a loss, and the stop takes `stop_ticks` of real
//!   time (the `d` of §5); then the finisher (`src/runtime/finish.rs`)
//!   releases it.

/// A replica's process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Running.
    Up,
    /// Stopped by SIGSTOP: its clock runs, its code does not.
    Frozen,
    /// Killed.
    Crashed,
}

/// Why a run was cancelled (`CancelReason`, `src/cancel.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Its local deadline passed (`CancelReason::Deadline`).
    Deadline,
    /// A renewal found the tenure gone (`Stolen`/`Expired`).
    Lost,
    /// The runtime is shutting down: still renewed while it stops.
    Shutdown,
    /// Its liveness session ended and its row was not re-pointed to a new
    /// registration by `last successful confirm's send instant + grace −
    /// margin` (issue 40).
    Session,
}

/// Where a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Its code runs.
    Running,
    /// Cancelled; its code still runs for this many more ticks (the stop
    /// time `d`: the next await, the abort).
    Stopping(u8),
}

/// A run's fenced transaction (`FenceGuard::begin_fenced_on`, then the
/// job's `COMMIT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Txn {
    /// None open.
    None,
    /// Its advance was sent and waits for the fence row's lock, held by
    /// another transaction (F3): the run's code is blocked in
    /// `begin_fenced`; the server runs the advance once the lock is free.
    Waiting,
    /// Its advance went through: as far as the run knows, the transaction
    /// is open and holds the fence row's lock (the server may have ended
    /// it meanwhile, R2).
    Open,
}

/// One run: a `Tenure` (`src/tenure.rs`) and its job's code.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Run {
    /// Ghost: the run's number (order of claims of the key).
    pub run: u8,
    /// Its fence (never changes, invariant 5).
    pub fence: u8,
    /// `Times::valid_until`: local instant by which the server's expiry has
    /// certainly not passed (`sent + remaining`, only ever moved forward,
    /// by `Tenure::renewed`).
    pub valid_until: u16,
    /// The slot a successful release records.
    pub next_slot: u16,
    /// Running or stopping.
    pub phase: Phase,
    /// The cancel reason, set once (`Tenure::cancel`).
    pub reason: Option<Reason>,
    /// Where its fenced transaction is.
    pub txn: Txn,
    /// Writes tried so far: bit 0 a fenced transaction, bit 1 a fenced
    /// `UPDATE` (each run writes each resource at most once — a bound of
    /// the model, not a rule of the protocol).
    pub wrote: u8,
    /// Ghost: its process was frozen when its deadline passed, so no
    /// supervisor could stop it (docs/design.md §2, third assumption of G1).
    /// Cleared if a renewal later moves the deadline back into the future.
    pub outlived: bool,
    /// The registration its row names as `owner`, as far as the runtime
    /// knows (the one its claim sent, or the one it re-pointed the row to).
    pub owner: Option<u8>,
    /// The stop deadline on a lost session (local units): set when the
    /// runtime saw `owner`'s session end, cleared when the row is
    /// re-pointed to a new registration.
    pub cutoff: Option<u16>,
    /// Ghost: its process was frozen when its registration's last
    /// successful confirm became `grace − margin` old — the stop deadline
    /// it would set, should its session end before its next confirm, has
    /// passed. Excused (§2) only if that session does end; cleared by the
    /// next successful confirm.
    pub lapsed: bool,
}

impl Run {
    /// `Tenure::wants_renewal`: yes while it runs, and while a shutdown
    /// winds it down.
    pub fn wants_renewal(&self) -> bool {
        matches!(self.reason, None | Some(Reason::Shutdown))
    }

    /// `Tenure::deadline`: `valid_until − margin` (saturating).
    pub fn deadline(&self, margin: u16) -> u16 {
        self.valid_until.saturating_sub(margin)
    }

    /// The earlier of the tenure's deadline and the lost session's cutoff,
    /// and which of the two it is.
    pub fn stop_at(&self, margin: u16) -> (u16, Reason) {
        let deadline = self.deadline(margin);
        match self.cutoff {
            Some(c) if c < deadline => (c, Reason::Session),
            _ => (deadline, Reason::Deadline),
        }
    }

    /// `Tenure::renewed(lease, sent)`: ignored once the tenure is lost;
    /// never moves the deadline back.
    pub fn renewed(&mut self, sent: u16, remaining: u16) {
        if !self.wants_renewal() {
            return;
        }
        self.valid_until = self.valid_until.max(sent + remaining);
    }

    /// `Tenure::cancel`/`lose` then the supervisor's stop: the first reason
    /// wins; the code runs `stop_ticks` more ticks.
    pub fn cancel(&mut self, reason: Reason, stop_ticks: u8) {
        if self.reason.is_none() {
            self.reason = Some(reason);
        }
        if self.phase == Phase::Running {
            self.phase = Phase::Stopping(stop_ticks);
        }
    }
}

/// One replica.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Replica {
    /// Its holder id (two replicas may share one: a copied configuration).
    pub holder: u8,
    /// Up, frozen or crashed.
    pub status: Status,
    /// Cut off the database (every message to or from it is lost).
    pub partitioned: bool,
    /// Its runtime is shutting down: no more claims.
    pub shutting_down: bool,
    /// Its monotonic clock (local units).
    pub clock: u16,
    /// Its clock's rate.
    pub rate: crate::clock::Rate,
    /// The scheduler's next forced poll (local units).
    pub next_poll: u16,
    /// The heartbeat's next tick (local units).
    pub next_beat: u16,
    /// Its run of each key, if any.
    pub runs: Vec<Option<Run>>,
    /// The registration it confirms and names in its claims (`None`: its
    /// session was seen to end and it has not registered again, or
    /// liveness is off).
    pub reg: Option<u8>,
    /// Local send instant of the last successful confirm (or registration)
    /// of `reg`.
    pub confirmed: u16,
    /// The last registration it saw end, and the stop deadline that
    /// follows (`confirmed + grace − margin` at that moment): a claim
    /// answered later that named it gets the same deadline.
    pub lost: Option<(u8, u16)>,
    /// It registered again and has yet to re-point its runs' rows.
    pub repoint: bool,
}

impl Replica {
    /// Whether the replica's code runs.
    pub fn up(&self) -> bool {
        self.status == Status::Up
    }

    /// A replica that can run a due key: up, reachable, not shutting down.
    pub fn live(&self) -> bool {
        self.up() && !self.partitioned && !self.shutting_down
    }

    /// Keys it has no run of (what a poll claims).
    pub fn idle_keys(&self) -> Vec<u8> {
        (0..self.runs.len() as u8)
            .filter(|&k| self.runs[k as usize].is_none())
            .collect()
    }

    /// Tenures the heartbeat renews.
    pub fn renewable(&self) -> Vec<(u8, u8)> {
        self.runs
            .iter()
            .enumerate()
            .filter_map(|(k, r)| r.as_ref().filter(|r| r.wants_renewal()).map(|r| (k as u8, r.fence)))
            .collect()
    }
}
