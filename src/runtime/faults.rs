//! Fault injection for tests and chaos runs (feature `test-util`), reached
//! through `Runtime::faults`. Nothing here is needed in production, and
//! without the feature none of it is compiled.

use std::sync::atomic::{AtomicBool, Ordering};

/// Fault injection for tests and chaos runs, reached through
/// [`Runtime::faults`](crate::Runtime::faults). Needs the `test-util`
/// feature.
#[derive(Debug, Default)]
pub struct Faults {
    stall_heartbeats: AtomicBool,
    partitioned: AtomicBool,
}

impl Faults {
    /// While `true`, heartbeat ticks send nothing, as if the replica were
    /// paused or partitioned from the database: runs then stop at their
    /// local deadline.
    pub fn stall_heartbeats(&self, stalled: bool) {
        self.stall_heartbeats.store(stalled, Ordering::SeqCst);
    }

    pub(crate) fn heartbeats_stalled(&self) -> bool {
        self.stall_heartbeats.load(Ordering::SeqCst) || self.partitioned()
    }

    /// While `true`, the runtime sends nothing at all — no heartbeat, no
    /// claim, no release — as if a partition cut it off from the database.
    /// Runs in progress carry on (their own queries are not affected) until
    /// their local deadline stops them.
    pub fn partition(&self, partitioned: bool) {
        self.partitioned.store(partitioned, Ordering::SeqCst);
    }

    pub(crate) fn partitioned(&self) -> bool {
        self.partitioned.load(Ordering::SeqCst)
    }
}
