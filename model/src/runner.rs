//! Running a check.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use stateright::{Checker, HasDiscoveries, Model, Path};

use crate::machine::LeaseModel;
use crate::{Action, Config, State};

/// The result of one check.
#[derive(Debug)]
pub struct Outcome {
    /// States generated.
    pub states: usize,
    /// Distinct states.
    pub unique: usize,
    /// Longest path explored.
    pub max_depth: usize,
    /// Wall time.
    pub elapsed: Duration,
    /// Whether every reachable state was visited.
    pub done: bool,
    /// Counterexamples (and examples of `sometimes` properties) found.
    pub discoveries: BTreeMap<&'static str, Path<State, Action>>,
}

/// Checks `cfg` breadth-first on `threads` threads; with `stop_at`, stops
/// as soon as that property has a discovery.
pub fn check(cfg: Config, threads: usize, stop_at: Option<&'static str>) -> Outcome {
    let start = Instant::now();
    let mut builder = LeaseModel::new(cfg).checker().threads(threads);
    if let Some(name) = stop_at {
        builder = builder.finish_when(HasDiscoveries::AnyOf([name].into_iter().collect()));
    }
    let checker = builder.spawn_bfs().join();
    Outcome {
        states: checker.state_count(),
        unique: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        elapsed: start.elapsed(),
        done: checker.is_done(),
        discoveries: checker.discoveries().into_iter().collect(),
    }
}
