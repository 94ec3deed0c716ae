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

/// Most releases per statement.
const BATCH: usize = 1024;

/// How long one release statement may take before its runs' leases are left
/// to expire.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Runs until `stop` is cancelled *and* every queued release went out. The
/// runtime stops it after the last run ended.
pub(crate) async fn run(
    shared: Arc<Shared>,
    mut requests: mpsc::UnboundedReceiver<FinishRequest>,
    stop: CancellationToken,
) {
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        tokio::select! {
            biased;
            received = requests.recv_many(&mut batch, BATCH) => {
                if received == 0 {
                    return;
                }
            }
            _ = stop.cancelled() => {
                if requests.try_recv().map(|r| batch.push(r)).is_err() {
                    return;
                }
                while batch.len() < BATCH && let Ok(request) = requests.try_recv() {
                    batch.push(request);
                }
            }
        }
        release(&shared, std::mem::take(&mut batch)).await;
    }
}

async fn release(shared: &Shared, batch: Vec<FinishRequest>) {
    let (finishes, answers): (Vec<_>, Vec<_>) = batch.into_iter().map(|r| (r.finish, r.done)).unzip();
    match bounded(TIMEOUT, "release", shared.store.finish_many(&finishes)).await {
        Ok(released) => {
            shared.health.database_answered();
            for (done, released) in answers.into_iter().zip(released) {
                let _ = done.send(released);
            }
        }
        Err(error) => {
            tracing::warn!(holder = %shared.holder, runs = finishes.len(), %error,
                "release failed; those leases will expire on their own");
            for done in answers {
                let _ = done.send(false);
            }
        }
    }
}
