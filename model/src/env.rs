//! The environment: real time, clock rates, the network between replicas
//! and the database, and the faults it can inject.
//!
//! **Time.** Real time advances in whole ticks ([`crate::Action::Tick`]).
//! Every clock — the server's and each replica's monotonic clock — counts
//! `units_per_tick` units per tick at the nominal rate, one `drift` unit less
//! or more at the slow or fast rate: its rate is within `ρ = drift /
//! units_per_tick` of real time, the documented bound (docs/design.md §2;
//! the model magnifies ρ so that the drift shows at tick resolution). The
//! initial rates are chosen by the environment (every combination of slow
//! and fast is an initial state); [`Fault::Skew`] changes one later.
//!
//! **Fairness.** A tick may not pass while something is *urgent*: a
//! request or reply in flight that no fault delayed, a replica's poll or
//! heartbeat timer that has fired, or a run whose local deadline has passed
//! and whose supervisor has not acted on it. So without faults every
//! message is answered in the tick it was sent, and every timer fires on
//! time: the fairness under which liveness is checked.
//!
//! **Faults** each spend one unit of the run's fault budget:
//! lose a request or a reply (a timeout, a cut connection: C3, the
//! statement committed or it did not), delay one past the current tick, cut
//! a replica off the database (every message it sends or is sent is lost
//! until it heals), freeze a replica (SIGSTOP, a paused VM: its clock runs
//! on, its code does not), crash it, shut it down (the runtime cancels its
//! runs and releases them), end its liveness session while it lives, skew
//! a clock's rate, and an operator's forced
//! revoke.

use crate::clock::Rate;
use crate::db::{Claimed, Renewed};

/// Which clock a [`Fault::Skew`] changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Clock {
    /// The database server's.
    Server,
    /// A replica's monotonic clock.
    Replica(u8),
}

/// Why a renewal was sent: who reads its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Via {
    /// The heartbeat (`src/runtime/heartbeat.rs` `beat`): matches the
    /// answer to its tenures by `(key, fence)`.
    Heartbeat,
    /// `FenceGuard::ensure` (`src/guard.rs`) from the run of this key:
    /// takes the row of its own `(key, fence)` (`Variant::RenewUncheckedAnswer`
    /// takes `renewed.pop()`, whatever row it is).
    Ensure(u8),
}

/// A statement on its way to the server.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Request {
    /// `claim_due` for these keys, sent at local instant `sent`.
    Claim {
        /// Local send instant (read before sending, §5 step 1).
        sent: u16,
        /// Keys the replica has no run of.
        keys: Vec<u8>,
        /// Its registration id at sending (`owner = $owner`).
        owner: Option<u8>,
    },
    /// `renew_each` of these tenures `(key, fence)`.
    Renew {
        /// Local send instant.
        sent: u16,
        /// Who reads the answer.
        via: Via,
        /// The tenures.
        tenures: Vec<(u8, u8)>,
    },
    /// `finish_many` of one tenure, with the next due time to record
    /// (`None`: unchanged).
    Release {
        /// The key.
        key: u8,
        /// The tenure's fence.
        fence: u8,
        /// `NextDue::At(slot)` or `NextDue::Unchanged`.
        next: Option<u16>,
    },
}

/// An answer on its way back.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reply {
    /// What a claim acquired.
    Claim {
        /// Local send instant of the request.
        sent: u16,
        /// Tenures acquired.
        acquired: Vec<Claimed>,
        /// The registration the rows name as owner.
        owner: Option<u8>,
    },
    /// What a renewal extended.
    Renew {
        /// Local send instant of the request.
        sent: u16,
        /// Who reads it.
        via: Via,
        /// The tenures asked for.
        asked: Vec<(u8, u8)>,
        /// The rows extended.
        renewed: Vec<Renewed>,
    },
}

/// A message between a replica and the database.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Msg {
    /// The replica.
    pub replica: u8,
    /// Delayed by a fault: no longer urgent, delivered whenever.
    pub delayed: bool,
    /// The replica stopped waiting for it (the heartbeat's or a claim's
    /// time bound passed): its answer is ignored.
    pub abandoned: bool,
    /// Ghost: its replica was frozen while it was in flight.
    pub frozen: bool,
    /// Request or reply.
    pub body: Body,
}

/// A request or a reply.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Body {
    /// To the server.
    Request(Request),
    /// To the replica.
    Reply(Reply),
}

/// What the environment may do, each spending one unit of the fault budget
/// ([`crate::Config::fault_budget`]) — except [`Fault::Resume`] and
/// [`Fault::Heal`], which end a fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// Drop message `i` of the network.
    Lose(u8),
    /// Let message `i` wait past this tick.
    Delay(u8),
    /// Cut a replica off the database.
    Partition(u8),
    /// Reconnect it.
    Heal(u8),
    /// SIGSTOP a replica's process.
    Freeze(u8),
    /// SIGCONT it.
    Resume(u8),
    /// Kill it: its runs stop at once, nothing is released; its open
    /// fenced transactions roll back (unless it is cut off: the close of
    /// its connections is lost, and the server's idle bound ends them).
    Crash(u8),
    /// End its liveness session while the process lives
    /// (`pg_terminate_backend`, a pooler, a TCP reset): the server side
    /// is gone at once; the runtime reads an error at its next confirm.
    KillSession(u8),
    /// Shut its runtime down (`Runtime::shutdown`, or dropping the
    /// handle): runs are cancelled (reason shutdown), still renewed while
    /// they stop, then released with the slot still owed.
    Shutdown(u8),
    /// Change a clock's rate.
    Skew(Clock, Rate),
    /// An operator's forced revoke of a key (`leasehold revoke --force`).
    Revoke(u8),
}

/// Which faults a check lets the environment inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Faults {
    /// [`Fault::Lose`].
    pub lose: bool,
    /// [`Fault::Delay`].
    pub delay: bool,
    /// [`Fault::Partition`].
    pub partition: bool,
    /// [`Fault::Freeze`].
    pub freeze: bool,
    /// [`Fault::Crash`].
    pub crash: bool,
    /// [`Fault::Shutdown`].
    pub shutdown: bool,
    /// [`Fault::KillSession`].
    pub kill_session: bool,
    /// [`Fault::Partition`] only of a replica that saw its session end and
    /// has not registered again: the second fault that keeps it from
    /// re-pointing its runs (a bound for the stop deadline's counterexample;
    /// implied by `partition`).
    pub cut_after_loss: bool,
    /// [`Fault::Skew`].
    pub skew: bool,
    /// [`Fault::Revoke`] (off by default: a forced revoke ends a live
    /// tenure by design, see the `revoke` test).
    pub revoke: bool,
}

impl Faults {
    /// Every fault but the operator's revoke.
    pub const ALL: Faults = Faults {
        lose: true,
        delay: true,
        partition: true,
        freeze: true,
        crash: true,
        shutdown: true,
        kill_session: true,
        cut_after_loss: false,
        skew: true,
        revoke: false,
    };
    /// No fault at all.
    pub const NONE: Faults = Faults {
        lose: false,
        delay: false,
        partition: false,
        freeze: false,
        crash: false,
        shutdown: false,
        kill_session: false,
        cut_after_loss: false,
        skew: false,
        revoke: false,
    };
}

/// What becomes of one statement a replica sends. Without a fault the
/// round trip is one step: the server runs the statement and the replica
/// reads the answer at the same instant (the interleavings this leaves out
/// — something happening between the two — are the ones a delay fault
/// brings back).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fate {
    /// Runs, and the answer is read at once.
    RoundTrip,
    /// Never reaches the server (a fault).
    LoseRequest,
    /// Reaches it later, whenever the network delivers it (a fault).
    DelayRequest,
    /// Runs; the answer is lost: a timeout, a cut connection, a dropped
    /// future (a fault; C3: the statement committed).
    LoseReply,
    /// Runs; the answer comes later (a fault).
    DelayReply,
}

impl Fate {
    /// Every fate, the fault-free one first.
    pub const ALL: [Fate; 5] = [
        Fate::RoundTrip,
        Fate::LoseRequest,
        Fate::DelayRequest,
        Fate::LoseReply,
        Fate::DelayReply,
    ];

    /// Whether this fate is a fault, and of which kind is allowed.
    pub fn allowed(self, faults: Faults, faults_left: u8) -> bool {
        match self {
            Fate::RoundTrip => true,
            Fate::LoseRequest | Fate::LoseReply => faults.lose && faults_left > 0,
            Fate::DelayRequest | Fate::DelayReply => faults.delay && faults_left > 0,
        }
    }
}
