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
//!
//! The same holding back serves the fleet-wide limits
//! ([`Controls::set_limit`](crate::store::Controls::set_limit)), which the
//! server enforces: a claim that answers a key *held back* (its job's
//! places were all taken) holds that job's keys back here too
//! ([`NameLimits::hold_fleet`]), so the replica neither proposes them
//! again and again nor spends its claims on them, until a place frees (a
//! release sends the job's name: [`NameLimits::place_freed`]) or the hold
//! ends, one poll interval later, in case that notification is not heard.

use std::sync::{Arc, Mutex};

use tokio::time::Instant;

use super::lock;
use crate::fast_hash::FastMap;

/// The limit per job name, and the runs of each limited name in progress.
#[derive(Default)]
pub(crate) struct NameLimits {
    limits: FastMap<Arc<str>, usize>,
    running: Mutex<FastMap<Arc<str>, usize>>,
    /// Names whose fleet-wide limit the server said was full, each held
    /// back until the instant given.
    fleet_full: Mutex<FastMap<Arc<str>, Instant>>,
    /// The fleet-wide limits in force, as the last poll read them.
    fleet: Mutex<FastMap<Arc<str>, u32>>,
}

impl NameLimits {
    /// Limits `(name, most runs at once)`, checked by the builder.
    pub(crate) fn new(limits: impl IntoIterator<Item = (Arc<str>, usize)>) -> Self {
        NameLimits {
            limits: limits.into_iter().collect(),
            running: Mutex::default(),
            fleet_full: Mutex::default(),
            fleet: Mutex::default(),
        }
    }

    /// The fleet-wide limits in force, as a poll read them; their gauge
    /// follows (0 for a limit lifted since the last poll).
    pub(crate) fn fleet_seen(&self, limits: Vec<(String, u32)>) {
        let limits: FastMap<Arc<str>, u32> = limits.into_iter().map(|(job, n)| (Arc::from(job), n)).collect();
        let mut known = lock(&self.fleet);
        // A name whose limit was lifted is not held back any more; nor is
        // one whose limit this poll reads for the first time: its keys were
        // refused by a claim without the limits' steps, not for want of a
        // place, and the next claim takes places for them.
        lock(&self.fleet_full).retain(|name, _| limits.contains_key(name) && known.contains_key(name));
        for name in known.keys().filter(|name| !limits.contains_key(*name)) {
            crate::metrics::fleet_limit(name, 0);
        }
        for (name, limit) in &limits {
            if known.get(name) != Some(limit) {
                crate::metrics::fleet_limit(name, *limit);
            }
        }
        *known = limits;
    }

    /// Whether `name` has a fleet-wide limit, as the last poll read it.
    pub(crate) fn fleet_limited(&self, name: &str) -> bool {
        lock(&self.fleet).contains_key(name)
    }

    /// Whether any of `names` has a fleet-wide limit, as the last poll read
    /// them: one look, for a claim's candidates.
    pub(crate) fn any_fleet_limited<'a>(&self, mut names: impl Iterator<Item = &'a str>) -> bool {
        let fleet = lock(&self.fleet);
        !fleet.is_empty() && names.any(|name| fleet.contains_key(name))
    }

    /// The fleet-wide limits in force, by name, as the last poll read them.
    pub(crate) fn fleet_limits(&self) -> Vec<(Arc<str>, u32)> {
        let mut all: Vec<_> = lock(&self.fleet).iter().map(|(n, l)| (n.clone(), *l)).collect();
        all.sort_unstable();
        all
    }

    /// Whether no name is limited here nor held back by its fleet-wide
    /// limit (then nothing is counted).
    pub(crate) fn is_empty(&self) -> bool {
        self.limits.is_empty() && lock(&self.fleet_full).is_empty()
    }

    /// Holds the keys of `name` back until `until`: the server answered
    /// one of them held back by its fleet-wide limit.
    pub(crate) fn hold_fleet(&self, name: &Arc<str>, until: Instant) {
        lock(&self.fleet_full).insert(name.clone(), until);
    }

    /// A place of `name`'s fleet-wide limit was freed: its keys may be
    /// proposed again. Whether they were held back.
    pub(crate) fn place_freed(&self, name: &str) -> bool {
        lock(&self.fleet_full).remove(name).is_some()
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

    /// The room each limited name has left now, for one proposal: none for
    /// a name held back by its fleet-wide limit (a hold that has ended is
    /// dropped).
    pub(crate) fn admit(&self) -> Admit {
        let mut left: FastMap<Arc<str>, usize> = {
            let running = lock(&self.running);
            self.limits
                .iter()
                .map(|(name, &limit)| {
                    (
                        name.clone(),
                        limit.saturating_sub(running.get(name).copied().unwrap_or(0)),
                    )
                })
                .collect()
        };
        let now = Instant::now();
        let mut held = lock(&self.fleet_full);
        held.retain(|_, until| *until > now);
        for name in held.keys() {
            left.insert(name.clone(), 0);
        }
        Admit { left }
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

    #[tokio::test(start_paused = true)]
    async fn a_name_held_by_its_fleet_limit_is_admitted_again_when_a_place_frees_or_the_hold_ends() {
        let limits = NameLimits::default();
        let report: Arc<str> = Arc::from("report");
        assert!(limits.is_empty(), "no limit here, nothing held: nothing counted");
        let hold = std::time::Duration::from_secs(5);
        limits.hold_fleet(&report, Instant::now() + hold);
        assert!(!limits.is_empty());
        assert!(limits.admit().is_full("report"), "held: not proposed");
        assert!(!limits.admit().is_full("billing"));
        assert!(limits.place_freed("report"), "a place freed: the hold is lifted");
        assert!(!limits.admit().is_full("report"));
        assert!(!limits.place_freed("report"), "nothing held any more");

        limits.hold_fleet(&report, Instant::now() + hold);
        tokio::time::advance(hold).await;
        assert!(
            !limits.admit().is_full("report"),
            "no place freed was heard: the hold ends by itself"
        );
        assert!(limits.is_empty(), "an ended hold is dropped");
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
