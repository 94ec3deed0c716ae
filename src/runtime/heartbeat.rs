//! The heartbeat service: one renewal statement per tick for every lease
//! this replica holds.
//!
//! Zero rows for a tenure is definitive loss: its run is cancelled at once
//! (reason *stolen*, or *expired* when the local clock says the lease may
//! already have run out). A transport error is transient: it is logged and
//! retried a quarter tick later (not a whole tick: a lease holds about
//! three ticks, and connections killed twice in a row would otherwise leave
//! one attempt before the deadline), while each run's local deadline (see
//! [`crate::tenure`]) stops it before another replica could take over.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::state::Shared;
use crate::cancel::CancelReason;
use crate::connection::bounded;
use crate::metrics::{self, HeartbeatOutcome};
use crate::tenure::Tenure;

/// Runs until `stop` is cancelled. The runtime cancels it *last*, after every
/// run has ended, so no lease goes unrenewed while its run is alive.
///
/// Ticks at the shortest heartbeat interval of the registered jobs; a job
/// added with a shorter one lowers it at once (`Shared::lower_tick`).
pub(crate) async fn run(shared: Arc<Shared>, stop: CancellationToken) {
    let mut tick = shared.tick();
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = interval.tick() => {}
            _ = shared.reticked() => {
                tick = shared.tick();
                interval = tokio::time::interval(tick);
                interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                continue;
            }
        }
        if shared.heartbeats_stalled() {
            continue;
        }
        // Counted for tests, so a test can wait for whole ticks (feature
        // `test-util`).
        #[cfg(feature = "test-util")]
        shared.faults.heartbeat_begins();
        let answered = beat(&shared, tick).await;
        #[cfg(feature = "test-util")]
        shared.faults.heartbeat_done();
        if !answered {
            interval.reset_after(retry_after_failure(tick));
        }
    }
}

/// How soon a heartbeat that failed is tried again: a quarter tick, at
/// least 50 ms.
fn retry_after_failure(tick: Duration) -> Duration {
    (tick / 4).max(Duration::from_millis(50))
}

/// One tick: renew every live tenure in one statement, waiting at most one
/// tick for a connection and an answer (a tick that could not finish is
/// abandoned, its connection closed, and the next tick starts fresh).
/// False when the statement failed.
async fn beat(shared: &Shared, tick: Duration) -> bool {
    let tenures: Vec<Arc<Tenure>> = shared.held().into_iter().filter(|t| t.wants_renewal()).collect();
    if tenures.is_empty() {
        shared.health.nothing_to_renew();
        return true;
    }
    let batch: Vec<(&str, i64, Duration)> = tenures.iter().map(|t| (t.key.as_str(), t.fence, t.ttl)).collect();
    let sent = Instant::now();
    let result = bounded(tick, "heartbeat", shared.store.renew_each(&shared.holder, &batch)).await;
    let took = sent.elapsed();
    match result {
        Ok(result) => {
            shared.health.heartbeat_answered(result.busy.is_empty());
            let by_tenure: HashMap<(&str, i64), &Arc<Tenure>> =
                tenures.iter().map(|t| ((t.key.as_str(), t.fence), t)).collect();
            for lease in &result.renewed {
                if let Some(t) = by_tenure.get(&(lease.key.as_str(), lease.fence)) {
                    t.renewed(lease, sent);
                    metrics::remaining(&t.job, lease.remaining);
                }
            }
            for (key, fence) in &result.lost {
                if let Some(t) = by_tenure.get(&(key.as_str(), *fence)) {
                    t.lose(t.loss_reason());
                }
            }
            for (key, fence) in &result.paused {
                if let Some(t) = by_tenure.get(&(key.as_str(), *fence))
                    && t.cancel(CancelReason::Paused)
                {
                    tracing::warn!(job = %t.job, key = %t.key, fence = t.fence,
                        "key paused with --cancel: cancelling its run (it keeps its lease until it returns)");
                }
            }
            if !result.busy.is_empty() {
                tracing::warn!(holder = %shared.holder, keys = ?result.busy,
                    "lease rows locked by another transaction were not renewed this tick; their runs stop at \
                     their local deadline if the lock outlasts it");
            }
            let outcome = if !result.lost.is_empty() {
                HeartbeatOutcome::Lost
            } else if !result.busy.is_empty() {
                HeartbeatOutcome::Busy
            } else {
                HeartbeatOutcome::Renewed
            };
            metrics::heartbeat(outcome, took);
            true
        }
        Err(error) => {
            shared.health.heartbeat_failed(&error);
            tracing::warn!(holder = %shared.holder, leases = tenures.len(), %error,
                "lease heartbeat failed; retrying shortly, runs stop at their local deadline if it keeps failing");
            metrics::heartbeat(HeartbeatOutcome::Error, took);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::retry_after_failure;

    #[test]
    fn a_failed_heartbeat_is_retried_a_quarter_tick_later_and_never_in_a_busy_loop() {
        assert_eq!(retry_after_failure(Duration::from_secs(20)), Duration::from_secs(5));
        assert_eq!(
            retry_after_failure(Duration::from_millis(100)),
            Duration::from_millis(50)
        );
        assert_eq!(retry_after_failure(Duration::ZERO), Duration::from_millis(50));
    }
}
