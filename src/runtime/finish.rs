//! The finisher service: releases the runs that ended close together in
//! one statement (`LeaseStore::finish_many`), so a short run costs about two
//! statements — its share of a batch claim and of a batch release — however
//! many keys run.
//!
//! It batches by draining: whatever ended while the previous statement was
//! in flight goes out in the next one, so an idle runtime releases a single
//! run at once and a busy one sends fewer, larger statements.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::state::{FinishRequest, Shared};
use crate::connection::bounded;
use crate::lease::{Finish, Released};

/// How soon a release whose row was locked elsewhere is tried again.
const BUSY_RETRY: Duration = Duration::from_millis(50);

/// Most releases per statement.
const BATCH: usize = 1024;

/// How long one release statement may take before its runs' leases are left
/// to expire.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Runs until `stop` is cancelled *and* every queued release went out. The
/// runtime stops it after the last run ended.
///
/// A release whose row another transaction has locked is not waited for on
/// the server (that would hold up every release of the batch): it goes out
/// again with a later batch, every [`BUSY_RETRY`], for as long as its run
/// waits for the answer.
pub(crate) async fn run(
    shared: Arc<Shared>,
    mut requests: mpsc::UnboundedReceiver<FinishRequest>,
    stop: CancellationToken,
) {
    let mut batch = Vec::with_capacity(BATCH);
    let mut busy: Vec<FinishRequest> = Vec::new();
    let mut stopping = false;
    loop {
        // A run that stopped waiting (its release timed out) is dropped.
        busy.retain(|r| !r.done.is_closed());
        if stopping {
            while batch.len() < BATCH
                && let Ok(request) = requests.try_recv()
            {
                batch.push(request);
            }
            if batch.is_empty() {
                if busy.is_empty() {
                    return;
                }
                tokio::time::sleep(BUSY_RETRY).await;
            }
        } else {
            let retry = !busy.is_empty();
            tokio::select! {
                biased;
                _ = requests.recv_many(&mut batch, BATCH) => {}
                _ = tokio::time::sleep(BUSY_RETRY), if retry => {}
                _ = stop.cancelled() => {
                    stopping = true;
                    continue;
                }
            }
        }
        batch.append(&mut busy);
        busy = release(&shared, std::mem::take(&mut batch)).await;
    }
}

/// Sends one batch; answers each run; returns the busy ones to retry.
async fn release(shared: &Shared, batch: Vec<FinishRequest>) -> Vec<FinishRequest> {
    if batch.is_empty() {
        return Vec::new();
    }
    let finishes: Vec<&Finish> = batch.iter().map(|r| &r.finish).collect();
    let answer = bounded(TIMEOUT, "release", shared.store.finish_many(&finishes)).await;
    drop(finishes);
    match answer {
        Ok(outcomes) => {
            shared.health.database_answered();
            let mut busy = Vec::new();
            let mut place_freed = false;
            for (request, outcome) in batch.into_iter().zip(outcomes) {
                match outcome {
                    Released::Busy => busy.push(request),
                    outcome => {
                        // A release frees its run's place under its job's
                        // fleet-wide limit: this replica's keys of that job
                        // held back may start now, without waiting for the
                        // release's notification (or, not listening, for
                        // a poll).
                        if outcome.released()
                            && let Some(report) = &request.finish.report
                        {
                            place_freed |= shared.limits.place_freed(&report.job_name);
                        }
                        let _ = request.done.send(outcome);
                    }
                }
            }
            if place_freed {
                shared.wake_scheduler();
            }
            busy
        }
        Err(error) => {
            tracing::warn!(holder = %shared.holder, runs = batch.len(), %error,
                "release failed; those leases will expire on their own");
            // Nothing released: each run's lease expires on its own.
            for request in batch {
                let _ = request.done.send(Released::NotCurrent);
            }
            Vec::new()
        }
    }
}
