//! Unregistering a key on this replica: `Runtime::remove`, and the keys of
//! job kinds removed fleet-wide (`fleet.rs`). A run of the key in progress
//! here is cancelled (reason *removed*), given its grace, and released.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::state::{JobEntry, Shared};
use crate::cancel::CancelReason;
use crate::tenure::Tenure;

/// Unregisters `key` and starts stopping its run here, if any. `None` if
/// the key was neither registered nor being removed; otherwise a token
/// cancelled once the key's run (if any) has ended and been released.
///
/// Synchronous: what it starts goes on in a task of its own, so a caller
/// that stops waiting for the token changes nothing.
pub(crate) fn begin(shared: &Arc<Shared>, key: &str) -> Option<Arc<CancellationToken>> {
    // Under this lock, another removal finds the key either still
    // registered or in `removing`, never between the two.
    let mut removing = shared.removing();
    let job = shared.registry().remove(key);
    match job {
        Some(job) => {
            let running = shared.held_tenure(key);
            let ended = Arc::new(CancellationToken::new());
            let Some(tenure) = running else {
                tracing::info!(holder = %shared.holder, key, "job removed from this runtime");
                ended.cancel();
                return Some(ended);
            };
            tenure.cancel(CancelReason::Removed);
            removing.insert(job.key.clone(), ended.clone());
            tokio::spawn(removed_run_ended(shared.clone(), job, tenure, ended.clone()));
            Some(ended)
        }
        None => removing.get(key).cloned(),
    }
}

/// Waits (bounded) for the run of a removed key to end and be released,
/// then lets every `Runtime::remove` of the key that waits for it return.
async fn removed_run_ended(
    shared: Arc<Shared>,
    job: Arc<JobEntry>,
    tenure: Arc<Tenure>,
    ended: Arc<CancellationToken>,
) {
    let limit = job.settings.grace + job.settings.lease.min(Duration::from_secs(5)) + Duration::from_secs(1);
    if tokio::time::timeout(limit, tenure.ended.cancelled()).await.is_err() {
        tracing::warn!(
            key = %job.key,
            "removed key's run did not end in time; its lease will expire on its own"
        );
    }
    tracing::info!(holder = %shared.holder, key = %job.key, "job removed from this runtime");
    let mut removing = shared.removing();
    ended.cancel();
    // Only this removal's entry: the key may have been added and removed
    // again meanwhile.
    if removing.get(&job.key).is_some_and(|e| Arc::ptr_eq(e, &ended)) {
        removing.remove(&job.key);
    }
}
