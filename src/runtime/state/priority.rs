//! Priorities between jobs on this replica
//! ([`RuntimeBuilder::priority_of`](crate::RuntimeBuilder::priority_of)):
//! when more keys are due than the replica has room for, the keys of a job
//! of higher priority are claimed first.
//!
//! # The rule, and why nothing starves
//!
//! A priority is worth a head start in the due order: a key of priority `p`
//! competes as if it had fallen due `p × aging` earlier
//! ([`RuntimeBuilder::priority_aging`](crate::RuntimeBuilder::priority_aging),
//! one minute by default). Among the due keys, the one with the earliest
//! *virtual* due time — due time less head start — is claimed first, by the
//! scheduler's proposal and by the claim statement alike; equal priorities
//! keep today's order, oldest due first.
//!
//! So waiting raises a key's standing: a key of priority 0 that has waited
//! longer than `(p − 0) × aging` goes before any key of priority `p` that
//! falls due from then on. A steady flood of high-priority keys delays a
//! low-priority key by at most the difference of their head starts (plus
//! the runs already started): it never starves.
//!
//! Without priorities nothing is computed: proposals take the queue in
//! order, as before.

use std::sync::Arc;
use std::time::Duration;

use crate::fast_hash::FastMap;

/// The highest priority; 0 is the default and the lowest.
pub(crate) const MAX_PRIORITY: u8 = 100;

/// How much waiting one level of priority is worth, unless set.
pub(crate) const DEFAULT_AGING: Duration = Duration::from_secs(60);

/// Each prioritised job's head start in the due order.
#[derive(Debug, Default)]
pub(crate) struct Priorities {
    head_starts: FastMap<Arc<str>, Duration>,
}

impl Priorities {
    /// Priorities `(name, priority)`, checked by the builder, each level
    /// worth `aging` of waiting.
    pub(crate) fn new(priorities: impl IntoIterator<Item = (Arc<str>, u8)>, aging: Duration) -> Self {
        Priorities {
            head_starts: priorities
                .into_iter()
                .filter(|(_, p)| *p > 0)
                .map(|(name, p)| (name, aging.saturating_mul(u32::from(p))))
                .collect(),
        }
    }

    /// Whether every job has the default priority (then nothing is computed).
    pub(crate) fn is_empty(&self) -> bool {
        self.head_starts.is_empty()
    }

    /// How much earlier than its due time a key of `name` competes.
    pub(crate) fn head_start(&self, name: &str) -> Duration {
        self.head_starts.get(name).copied().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_priority_is_a_head_start_of_its_level_times_the_aging() {
        let p = Priorities::new(
            [(Arc::from("billing"), 10), (Arc::from("report"), 0)],
            Duration::from_secs(60),
        );
        assert_eq!(p.head_start("billing"), Duration::from_secs(600));
        assert_eq!(p.head_start("report"), Duration::ZERO);
        assert_eq!(p.head_start("unknown"), Duration::ZERO);
        assert!(!p.is_empty());
        assert!(
            Priorities::new([(Arc::from("report"), 0)], DEFAULT_AGING).is_empty(),
            "priority 0 everywhere: nothing to compute"
        );
    }
}
