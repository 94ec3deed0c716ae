//! The PostgreSQL a chaos run uses: one throwaway cluster, or a primary
//! with a streaming standby that the `promote` fault promotes once
//! (`promote.rs`); the restart faults act on whichever takes writes now.

use std::sync::atomic::{AtomicBool, Ordering};

use leasehold_testkit::PgCluster;
use leasehold_testkit::standby::Replicated;

/// The PostgreSQL the run uses: one cluster, or a primary with a standby.
pub enum Servers {
    Single(PgCluster),
    Pair { pair: Replicated, promoted: AtomicBool },
}

impl Servers {
    pub fn pair(pair: Replicated) -> Servers {
        Servers::Pair {
            pair,
            promoted: AtomicBool::new(false),
        }
    }

    /// The server that takes writes now: the single cluster, the primary,
    /// or, once promoted, the standby. The PostgreSQL-restart faults restart
    /// this one.
    pub fn current(&self) -> &PgCluster {
        match self {
            Servers::Single(single) => single,
            Servers::Pair { pair, promoted } if promoted.load(Ordering::SeqCst) => &pair.standby,
            Servers::Pair { pair, .. } => &pair.primary,
        }
    }

    /// The primary and standby, while the standby is not promoted yet.
    pub(crate) fn unpromoted(&self) -> Option<&Replicated> {
        match self {
            Servers::Pair { pair, promoted } if !promoted.load(Ordering::SeqCst) => Some(pair),
            _ => None,
        }
    }

    pub(crate) fn mark_promoted(&self) {
        if let Servers::Pair { promoted, .. } = self {
            promoted.store(true, Ordering::SeqCst);
        }
    }
}

/// When the promotion happened (µs since the epoch: on this machine's
/// clock as `promote.rs` records it, on the server's once
/// [`shifted`](Self::shifted)), and how.
#[derive(Debug, Clone)]
pub struct Promotion {
    pub synchronous: bool,
    /// Replication cut.
    pub cut: i64,
    /// The primary crashed.
    pub crash: i64,
    /// The standby promoted and every proxy pointed at it.
    pub switched: i64,
}

impl Promotion {
    /// The same moments on a clock `offset` µs ahead of this one.
    pub fn shifted(&self, offset: i64) -> Self {
        Self {
            synchronous: self.synchronous,
            cut: self.cut + offset,
            crash: self.crash + offset,
            switched: self.switched + offset,
        }
    }
}
