//! The heartbeat service: one renewal statement per tick for every lease
//! this replica holds.
//!
//! Zero rows for a tenure is definitive loss: its run is cancelled at once
//! (reason *stolen*, or *expired* when the local clock says the lease may
//! already have run out). A transport error is transient: it is logged and
//! retried on the next tick, while each run's local deadline (see
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
        beat(&shared, tick).await;
        #[cfg(feature = "test-util")]
        shared.faults.heartbeat_done();
    }
}

/// One tick: renew every live tenure in one statement, waiting at most one
/// tick for a connection and an answer (a tick that could not finish is
/// abandoned, its connection closed, and the next tick starts fresh).
async fn beat(shared: &Shared, tick: Duration) {
    let tenures: Vec<Arc<Tenure>> = shared.held().into_iter().filter(|t| t.wants_renewal()).collect();
    if tenures.is_empty() {
        shared.health.nothing_to_renew();
        return;
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
        }
        Err(error) => {
            shared.health.heartbeat_failed(&error);
            tracing::warn!(holder = %shared.holder, leases = tenures.len(), %error,
                "lease heartbeat failed; retrying next tick, runs stop at their local deadline if it keeps failing");
            metrics::heartbeat(HeartbeatOutcome::Error, took);
        }
    }
}
