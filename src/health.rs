//! What the runtime knows about its own health, kept up to date by the job
//! loops and the heartbeat, read by `Runtime::health` without a database
//! round trip.
//!
//! # Invariants
//!
//! - Every reason is *current*: a failure streak is cleared by the next
//!   success of the same kind; a one-off event (a run lost at its deadline,
//!   a poisoned connection) counts for one health window after it happened.
//! - The window is three heartbeat or poll intervals, whichever is longer:
//!   long enough that a probe polling every few seconds sees a blip, short
//!   enough that health returns within a tick or two of recovery.
//! - A failure streak (claims, heartbeats) is a reason only once it reaches
//!   the threshold (`RuntimeBuilder::degraded_after`, default
//!   `DEFAULT_DEGRADED_AFTER`): every replica shares one database, so one network
//!   blip failing one statement on each of them must not take the whole
//!   fleet out of a load balancer at once.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::connection::PoisonCount;

/// `n` and the noun, plural unless `n` is 1: "1 claim", "2 claims".
fn counted(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A failure streak: "1 claim failed", "3 claims in a row failed".
fn failed_in_a_row(n: u32, one: &str, many: &str) -> String {
    match n {
        1 => format!("1 {one} failed"),
        n => format!("{n} {many} in a row failed"),
    }
}

/// Why the runtime is not healthy, as reported by
/// [`Health::degraded`](crate::runtime::Health::degraded).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Degraded {
    /// No claim or heartbeat got an answer from the database for this long.
    DatabaseSilent {
        /// Time since the last answer.
        since: Duration,
    },
    /// Claims keep failing (an error or a timeout each time): at least the
    /// threshold of [`RuntimeBuilder::degraded_after`](crate::RuntimeBuilder::degraded_after)
    /// in a row.
    ClaimsFailing {
        /// Failed claims in a row.
        consecutive: u32,
        /// The latest error.
        last_error: String,
    },
    /// Heartbeats keep failing, or cannot renew a lease whose row another
    /// transaction holds locked: at least the threshold of
    /// [`RuntimeBuilder::degraded_after`](crate::RuntimeBuilder::degraded_after)
    /// ticks in a row.
    HeartbeatsFailing {
        /// Failed heartbeat ticks in a row.
        consecutive: u32,
        /// The latest error.
        last_error: String,
    },
    /// Runs were stopped at their local deadline recently: their lease could
    /// not be renewed in time (database slow or unreachable, pool exhausted
    /// by the jobs themselves, lease row locked).
    RunsLostAtDeadline {
        /// Runs stopped at their deadline in the health window, each
        /// counted once (as in `leasehold_lease_lost_total`, reason
        /// `deadline`).
        count: u32,
        /// Time since the latest one.
        ago: Duration,
    },
    /// Pooled connections were found inside someone else's transaction and
    /// closed recently: code in this service leaves transactions open.
    PoisonedConnections {
        /// Connections closed in the health window.
        closed: u64,
    },
    /// A run's fenced transaction has waited for its resource's row lock
    /// for longer than a quarter of its lease: an older run's fenced
    /// transaction still holds it (one whose process froze inside it is
    /// ended by the server at most one lease after its last statement).
    FencedTransactionWaiting {
        /// The key of the waiting run.
        key: String,
        /// How long its fence advance has waited so far.
        waited: Duration,
    },
    /// Shutdown has begun.
    ShuttingDown,
}

impl std::fmt::Display for Degraded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Degraded::DatabaseSilent { since } => write!(f, "no answer from the database for {since:?}"),
            Degraded::ClaimsFailing {
                consecutive,
                last_error,
            } => write!(
                f,
                "{}; last: {last_error}",
                failed_in_a_row(*consecutive, "claim", "claims")
            ),
            Degraded::HeartbeatsFailing {
                consecutive,
                last_error,
            } => write!(
                f,
                "{}; last: {last_error}",
                failed_in_a_row(*consecutive, "heartbeat", "heartbeats")
            ),
            Degraded::RunsLostAtDeadline { count, ago } => write!(
                f,
                "{} at {} deadline (lease not renewed in time), the latest {ago:?} ago",
                counted(*count, "run stopped", "runs stopped"),
                if *count == 1 { "its" } else { "their" }
            ),
            Degraded::PoisonedConnections { closed } => write!(
                f,
                "{} found inside a transaction and closed: service code leaves transactions open on the \
                 shared pool",
                counted(*closed, "pooled connection was", "pooled connections were")
            ),
            Degraded::FencedTransactionWaiting { key, waited } => write!(
                f,
                "a fenced transaction of key {key:?} has waited {waited:?} for an older run's transaction on \
                 its fence row"
            ),
            Degraded::ShuttingDown => f.write_str("shutting down"),
        }
    }
}

/// Health events, recorded by the runtime's tasks.
pub(crate) struct Tracker {
    window: Duration,
    /// Failures in a row that make a streak a reason (at least 1).
    degraded_after: u32,
    poisoned: PoisonCount,
    state: Mutex<State>,
}

struct State {
    last_ok: Instant,
    claim_failures: u32,
    last_claim_error: String,
    heartbeat_failures: u32,
    last_heartbeat_error: String,
    deadline_losses: Vec<Instant>,
    /// (when, process-wide count of poisoned connections then)
    poisoned_marks: Vec<(Instant, u64)>,
}

impl Tracker {
    pub(crate) fn new(window: Duration, degraded_after: u32, poisoned: PoisonCount) -> Self {
        Tracker {
            window,
            degraded_after: degraded_after.max(1),
            poisoned: poisoned.clone(),
            state: Mutex::new(State {
                last_ok: Instant::now(),
                claim_failures: 0,
                last_claim_error: String::new(),
                heartbeat_failures: 0,
                last_heartbeat_error: String::new(),
                deadline_losses: Vec::new(),
                poisoned_marks: vec![(Instant::now(), poisoned.get())],
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Plain counters: still consistent after a panic elsewhere.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn claim_answered(&self) {
        let mut s = self.state();
        s.last_ok = Instant::now();
        s.claim_failures = 0;
    }

    pub(crate) fn claim_failed(&self, error: &dyn std::fmt::Display) {
        let mut s = self.state();
        s.claim_failures += 1;
        s.last_claim_error = error.to_string();
    }

    /// A heartbeat answered; `complete` if every lease it tried was renewed
    /// or definitively lost (none skipped because its row was locked).
    pub(crate) fn heartbeat_answered(&self, complete: bool) {
        let mut s = self.state();
        s.last_ok = Instant::now();
        if complete {
            s.heartbeat_failures = 0;
        } else {
            s.heartbeat_failures += 1;
            s.last_heartbeat_error = "a lease row was locked by another transaction; not renewed".to_owned();
        }
    }

    pub(crate) fn heartbeat_failed(&self, error: &dyn std::fmt::Display) {
        let mut s = self.state();
        s.heartbeat_failures += 1;
        s.last_heartbeat_error = error.to_string();
    }

    /// Nothing to renew: no heartbeat problem can matter.
    pub(crate) fn nothing_to_renew(&self) {
        self.state().heartbeat_failures = 0;
    }

    /// Some other statement (a release) got an answer.
    pub(crate) fn database_answered(&self) {
        self.state().last_ok = Instant::now();
    }

    /// A run was stopped at its deadline: called once per run.
    pub(crate) fn run_lost_at_deadline(&self) {
        self.state().deadline_losses.push(Instant::now());
    }

    /// The reasons the runtime is degraded right now (empty if healthy),
    /// and how long ago the database last answered.
    pub(crate) fn read(&self, shutting_down: bool) -> (Vec<Degraded>, Duration) {
        let now = Instant::now();
        let mut s = self.state();
        let window = self.window;
        s.deadline_losses.retain(|t| now.duration_since(*t) <= window);
        let seen = self.poisoned.get();
        if s.poisoned_marks.last().is_none_or(|(_, count)| *count != seen) {
            s.poisoned_marks.push((now, seen));
        }
        // Keep the newest mark older than the window as the baseline.
        while s.poisoned_marks.len() > 1 && now.duration_since(s.poisoned_marks[1].0) > window {
            s.poisoned_marks.remove(0);
        }
        let mut reasons = Vec::new();
        if shutting_down {
            reasons.push(Degraded::ShuttingDown);
        }
        let silent = now.duration_since(s.last_ok);
        if silent > window {
            reasons.push(Degraded::DatabaseSilent { since: silent });
        }
        if s.claim_failures >= self.degraded_after {
            reasons.push(Degraded::ClaimsFailing {
                consecutive: s.claim_failures,
                last_error: s.last_claim_error.clone(),
            });
        }
        if s.heartbeat_failures >= self.degraded_after {
            reasons.push(Degraded::HeartbeatsFailing {
                consecutive: s.heartbeat_failures,
                last_error: s.last_heartbeat_error.clone(),
            });
        }
        if let Some(latest) = s.deadline_losses.last() {
            reasons.push(Degraded::RunsLostAtDeadline {
                count: s.deadline_losses.len() as u32,
                ago: now.duration_since(*latest),
            });
        }
        let baseline = s.poisoned_marks.first().map_or(seen, |(_, count)| *count);
        if seen > baseline {
            reasons.push(Degraded::PoisonedConnections {
                closed: seen - baseline,
            });
        }
        (reasons, silent)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Degraded, Tracker};
    use crate::connection::PoisonCount;

    fn tracker(degraded_after: u32) -> Tracker {
        Tracker::new(Duration::from_secs(60), degraded_after, PoisonCount::default())
    }

    fn heartbeats_failing(tracker: &Tracker) -> Option<u32> {
        tracker.read(false).0.into_iter().find_map(|reason| match reason {
            Degraded::HeartbeatsFailing { consecutive, .. } => Some(consecutive),
            _ => None,
        })
    }

    /// A network blip fails one heartbeat on every replica at once: that
    /// alone must not make any of them unready; the threshold in a row does,
    /// and one answer clears the streak.
    #[test]
    fn one_failed_heartbeat_is_a_blip_a_streak_of_three_is_degraded() {
        let health = tracker(3);
        health.heartbeat_failed(&"connection reset by peer");
        assert_eq!(health.read(false).0, vec![], "one failure is not a reason");
        health.heartbeat_answered(true);
        health.heartbeat_failed(&"connection reset by peer");
        health.heartbeat_failed(&"connection reset by peer");
        assert_eq!(heartbeats_failing(&health), None, "two in a row are not either");
        health.heartbeat_failed(&"connection reset by peer");
        assert_eq!(heartbeats_failing(&health), Some(3), "three in a row are");
        health.heartbeat_answered(true);
        assert_eq!(health.read(false).0, vec![], "an answer clears the streak");
    }

    /// Claims follow the same threshold, and it can be set to report the
    /// first failure.
    #[test]
    fn claims_count_only_from_the_threshold_which_is_configurable() {
        let health = tracker(3);
        health.claim_failed(&"pool timed out");
        health.claim_failed(&"pool timed out");
        assert_eq!(health.read(false).0, vec![]);
        health.claim_failed(&"pool timed out");
        assert!(matches!(
            health.read(false).0.as_slice(),
            [Degraded::ClaimsFailing { consecutive: 3, .. }]
        ));

        let strict = tracker(1);
        strict.heartbeat_failed(&"connection reset by peer");
        assert_eq!(heartbeats_failing(&strict), Some(1));
    }

    #[test]
    fn reasons_say_one_thing_in_the_singular() {
        let one = |reason: Degraded| reason.to_string();
        assert_eq!(
            one(Degraded::HeartbeatsFailing {
                consecutive: 1,
                last_error: "reset".into()
            }),
            "1 heartbeat failed; last: reset"
        );
        assert_eq!(
            one(Degraded::ClaimsFailing {
                consecutive: 1,
                last_error: "reset".into()
            }),
            "1 claim failed; last: reset"
        );
        assert!(
            one(Degraded::ClaimsFailing {
                consecutive: 4,
                last_error: "reset".into()
            })
            .starts_with("4 claims in a row failed")
        );
        assert!(
            one(Degraded::RunsLostAtDeadline {
                count: 1,
                ago: Duration::from_secs(1)
            })
            .starts_with("1 run stopped at its deadline")
        );
        assert!(
            one(Degraded::RunsLostAtDeadline {
                count: 2,
                ago: Duration::from_secs(1)
            })
            .starts_with("2 runs stopped at their deadline")
        );
        assert!(one(Degraded::PoisonedConnections { closed: 1 }).starts_with("1 pooled connection was found"));
        assert!(one(Degraded::PoisonedConnections { closed: 2 }).starts_with("2 pooled connections were found"));
    }
}
