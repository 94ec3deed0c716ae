//! Limits per job name on this replica
//! ([`RuntimeBuilder::max_concurrent_runs_of`](crate::RuntimeBuilder::max_concurrent_runs_of)):
//! at most N runs of the keys of one job or kind at once here, for jobs that
//! are heavy on the replica itself.
//!
//! # Invariants
//!
//! - Runs of a limited name in progress here never exceed its limit: a
//!   claim proposes at most the room its name has left ([`Admit`], taken
//!   when the proposal is made, and only the scheduler proposes), and a run
//!   counts from its [`RunSlot`](super::RunSlot) until that is dropped.
//! - A key held back by its name's limit stays due in the queue, untouched:
//!   it is proposed as soon as a run of its name ends (the end wakes the
//!   scheduler), and meanwhile the runtime's other slots go to other keys.
//! - Without limits nothing is counted: no lock, no lookup per run.

use std::sync::{Arc, Mutex};

use super::lock;
use crate::fast_hash::FastMap;

/// The limit per job name, and the runs of each limited name in progress.
#[derive(Default)]
pub(crate) struct NameLimits {
    limits: FastMap<Arc<str>, usize>,
    running: Mutex<FastMap<Arc<str>, usize>>,
}

impl NameLimits {
    /// Limits `(name, most runs at once)`, checked by the builder.
    pub(crate) fn new(limits: impl IntoIterator<Item = (Arc<str>, usize)>) -> Self {
        NameLimits {
            limits: limits.into_iter().collect(),
            running: Mutex::default(),
        }
    }

    /// Whether no name is limited (then nothing is counted).
    pub(crate) fn is_empty(&self) -> bool {
        self.limits.is_empty()
    }

    /// A run of `name` started here.
    pub(crate) fn started(&self, name: &Arc<str>) {
        if self.limits.contains_key(name) {
            *lock(&self.running).entry(name.clone()).or_default() += 1;
        }
    }

    /// A run of `name` ended here (its slot was given back).
    pub(crate) fn ended(&self, name: &str) {
        if self.limits.contains_key(name)
            && let Some(n) = lock(&self.running).get_mut(name)
        {
            *n = n.saturating_sub(1);
        }
    }

    /// Each limited name with its runs in progress and its limit, by name.
    pub(crate) fn read(&self) -> Vec<(Arc<str>, usize, usize)> {
        let running = lock(&self.running);
        let mut all: Vec<_> = self
            .limits
            .iter()
            .map(|(name, &limit)| (name.clone(), running.get(name).copied().unwrap_or(0), limit))
            .collect();
        all.sort_unstable();
        all
    }

    /// The room each limited name has left now, for one proposal.
    pub(crate) fn admit(&self) -> Admit {
        let running = lock(&self.running);
        Admit {
            left: self
                .limits
                .iter()
                .map(|(name, &limit)| {
                    (
                        name.clone(),
                        limit.saturating_sub(running.get(name).copied().unwrap_or(0)),
                    )
                })
                .collect(),
        }
    }
}

/// The room limited names have left, as one proposal fills it.
#[derive(Debug, Default)]
pub(crate) struct Admit {
    left: FastMap<Arc<str>, usize>,
}

impl Admit {
    /// Takes one place for a key of `name`; false (and nothing taken) if
    /// its name is limited and full.
    pub(crate) fn take(&mut self, name: &str) -> bool {
        match self.left.get_mut(name) {
            None => true,
            Some(0) => false,
            Some(left) => {
                *left -= 1;
                true
            }
        }
    }

    /// Whether a key of `name` would be held back now.
    pub(crate) fn is_full(&self, name: &str) -> bool {
        self.left.get(name) == Some(&0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> NameLimits {
        NameLimits::new([(Arc::from("report"), 2)])
    }

    #[test]
    fn a_limited_name_admits_its_room_left_and_an_unlimited_one_everything() {
        let limits = limits();
        let report: Arc<str> = Arc::from("report");
        limits.started(&report);
        let mut admit = limits.admit();
        assert!(admit.take("report"), "one of two is running: one more fits");
        assert!(!admit.take("report"), "the second place is taken by this proposal");
        assert!(admit.is_full("report"));
        assert!(
            (0..1000).all(|_| admit.take("billing")),
            "an unlimited name is never held back"
        );
        assert!(!admit.is_full("billing"));
    }

    #[test]
    fn an_ended_run_gives_its_place_back_and_unlimited_names_are_not_counted() {
        let limits = limits();
        let report: Arc<str> = Arc::from("report");
        limits.started(&report);
        limits.started(&report);
        assert!(limits.admit().is_full("report"));
        limits.ended("report");
        assert!(!limits.admit().is_full("report"));
        limits.started(&Arc::from("billing"));
        assert!(lock(&limits.running).get("billing").is_none());
        // More ends than starts (never happens) cannot wrap the count.
        limits.ended("report");
        limits.ended("report");
        assert_eq!(limits.admit().left.get("report"), Some(&2));
    }
}
