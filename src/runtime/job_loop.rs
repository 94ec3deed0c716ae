//! The job loop of one registered key: wait until due, claim, run, release,
//! back off after failures and lost runs — until shutdown.
//!
//! Every statement it sends is bounded in time (derived from the job's
//! lease), so a stuck pool or row lock delays this key only, and shows in
//! `Runtime::health`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::builder::never;
use super::{JobEntry, Shared, ShutdownRun};
use crate::connection::bounded;
use crate::error::{CancelReason, Error};
use crate::guard::FenceGuard;
use crate::lease::{Claim, Due, NextDue};
use crate::metrics::{self, RunOutcome};
use crate::tenure::Tenure;

/// How long a release may take before the lease is left to expire.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Consecutive failures and lost runs of one key on this replica.
#[derive(Default)]
struct Streaks {
    /// Runs that failed or panicked in a row (drives the due-time backoff
    /// recorded for the whole fleet).
    failures: u32,
    /// Runs of this replica cancelled by a lost lease (deadline, expiry,
    /// stolen) in a row: from the second one, this replica waits before
    /// claiming the key again, so another replica can take it.
    losses: u32,
    /// Claims that failed in a row.
    claim_errors: u32,
}

/// The job loop: wait until due, claim, run, release, repeat — until
/// shutdown. Returns the outcome of the run that shutdown interrupted, if
/// any.
pub(super) async fn job_loop(shared: Arc<Shared>, job: Arc<JobEntry>) -> Option<ShutdownRun> {
    let mut streaks = Streaks::default();
    // A claim waits at most one lease for a row lock or a connection.
    let claim_limit = job.settings.lease;
    loop {
        if shared.stopping.is_cancelled() {
            return None;
        }
        if shared.faults.partitioned() {
            tokio::select! {
                _ = tokio::time::sleep(shared.poll_interval) => continue,
                _ = shared.stopping.cancelled() => return None,
            }
        }
        let sent = Instant::now();
        let claim = bounded(
            claim_limit,
            "claim",
            shared
                .store
                .claim_run(&job.key, &shared.holder, job.settings.lease, Due::Scheduled),
        )
        .await;
        let wait = match claim {
            Ok(Claim::Acquired(lease)) => {
                shared.health.claim_answered();
                streaks.claim_errors = 0;
                metrics::claim(&job.name, "acquired");
                let tenure = Arc::new(Tenure::new(
                    &job.name,
                    lease,
                    sent,
                    job.settings.lease,
                    job.settings.margin(),
                    shared.store.clone(),
                ));
                let (outcome, released) = run_once(&shared, &job, &tenure, &mut streaks).await;
                if tenure.reason() == Some(CancelReason::Shutdown) || shared.stopping.is_cancelled() {
                    return Some(ShutdownRun { outcome, released });
                }
                match lost_run_backoff(&job, &tenure, &mut streaks) {
                    Some(pause) => pause,
                    None => continue,
                }
            }
            Ok(Claim::HeldElsewhere { current }) => {
                shared.health.claim_answered();
                streaks.claim_errors = 0;
                metrics::claim(&job.name, "held_elsewhere");
                current.map(|c| c.remaining()).unwrap_or(shared.poll_interval)
            }
            Ok(Claim::NotDue { current }) => {
                shared.health.claim_answered();
                streaks.claim_errors = 0;
                metrics::claim(&job.name, "not_due");
                current.due_in()
            }
            Err(error) => {
                streaks.claim_errors += 1;
                shared.health.claim_failed(&error);
                metrics::claim(&job.name, "error");
                tracing::warn!(job = %job.name, key = %job.key, %error, "claim failed; retrying");
                job.settings.backoff(streaks.claim_errors)
            }
        };
        // A pause after lost runs is waited out in full (a trigger does not
        // cut it short): it is what lets another replica take the key.
        let pausing = streaks.losses >= 2;
        tokio::select! {
            _ = tokio::time::sleep(if pausing { wait } else { wait.min(shared.poll_interval) }) => {}
            _ = job.wake.notified(), if !pausing => {}
            _ = shared.stopping.cancelled() => return None,
        }
    }
}

/// After a run that lost its lease: `None` to claim again at once, or how
/// long this replica waits first. The first loss is retried at once (a
/// blip); from the second in a row, this replica backs off like a failing
/// run, so that a replica whose own jobs exhaust its pool, or whose
/// heartbeats cannot get through, hands the key to another one instead of
/// re-claiming it forever. Logged once per streak.
fn lost_run_backoff(job: &JobEntry, tenure: &Tenure, streaks: &mut Streaks) -> Option<Duration> {
    match tenure.reason() {
        Some(CancelReason::Deadline | CancelReason::Expired | CancelReason::Stolen) => {
            streaks.losses += 1;
        }
        _ => {
            if streaks.losses >= 2 {
                tracing::info!(job = %job.name, key = %job.key, lost = streaks.losses,
                    "runs of this key keep their lease again; back-off over");
            }
            streaks.losses = 0;
            return None;
        }
    }
    if streaks.losses < 2 {
        return None;
    }
    let pause = job.settings.backoff(streaks.losses - 1);
    if streaks.losses == 2 {
        tracing::warn!(job = %job.name, key = %job.key, reason = ?tenure.reason(), ?pause,
            "two runs in a row lost their lease; this replica now waits before each claim of this key so \
             another replica can take it (is the pool big enough for the jobs and the heartbeat?)");
    }
    Some(pause)
}

/// Runs one tenure to its end and releases it. Returns the outcome and
/// whether the lease was released.
async fn run_once(shared: &Shared, job: &JobEntry, tenure: &Arc<Tenure>, streaks: &mut Streaks) -> (RunOutcome, bool) {
    shared
        .held
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(job.key.clone(), tenure.clone());
    metrics::held(&job.name, 1.0);
    tracing::info!(job = %job.name, key = %job.key, holder = %tenure.holder, fence = tenure.fence, "lease acquired; run starting");
    let span = tracing::info_span!("leasehold.run", job = %job.name, key = %job.key, holder = %tenure.holder, fence = tenure.fence);
    let started = Instant::now();
    let mut handle = tokio::spawn((job.run)(FenceGuard::new(tenure.clone())).instrument(span));

    let finished = loop {
        tokio::select! {
            result = &mut handle => break Some(result),
            _ = tenure.token().cancelled() => {
                // A run past its deadline gets no grace: the lease may be
                // claimable elsewhere soon. Its loss was logged once already.
                let deadline = tenure.reason() == Some(CancelReason::Deadline);
                let grace = if deadline { Duration::ZERO } else { job.settings.grace };
                match tokio::time::timeout(grace, &mut handle).await {
                    Ok(result) => break Some(result),
                    Err(_) => {
                        handle.abort();
                        if deadline {
                            tracing::debug!(job = %job.name, key = %job.key, fence = tenure.fence,
                                "run dropped at its deadline");
                        } else {
                            tracing::warn!(job = %job.name, key = %job.key, fence = tenure.fence, ?grace,
                                reason = ?tenure.reason(), "cancelled run did not return within its grace period; dropped");
                        }
                        break None;
                    }
                }
            }
            _ = tokio::time::sleep_until(tenure.deadline()) => {
                if Instant::now() >= tenure.deadline() {
                    tenure.lose(CancelReason::Deadline);
                    shared.health.run_lost_at_deadline();
                }
            }
            _ = shared.stopping.cancelled(), if !tenure.token().is_cancelled() => {
                tenure.cancel(CancelReason::Shutdown);
            }
        }
    };

    let outcome = match finished {
        Some(Ok(Ok(()))) => RunOutcome::Succeeded,
        _ if tenure.reason().is_some_and(|r| r != CancelReason::Shutdown) => RunOutcome::Cancelled,
        Some(Ok(Err(error))) => {
            if is_fencing(&*error) || tenure.reason().is_some() {
                RunOutcome::Cancelled
            } else {
                tracing::error!(job = %job.name, key = %job.key, fence = tenure.fence, %error, "run failed");
                RunOutcome::Failed
            }
        }
        Some(Err(join)) if join.is_panic() => {
            let panic = join.into_panic();
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(job = %job.name, key = %job.key, fence = tenure.fence, %message, "run panicked");
            RunOutcome::Panicked
        }
        Some(Err(_)) | None => RunOutcome::Cancelled,
    };
    let next = match outcome {
        RunOutcome::Succeeded => {
            streaks.failures = 0;
            NextDue::At(job.settings.schedule.next_after(tenure.acquired_at).unwrap_or(never()))
        }
        RunOutcome::Failed | RunOutcome::Panicked => {
            streaks.failures += 1;
            NextDue::After(job.settings.backoff(streaks.failures))
        }
        // Not done: still due, so the next claimer runs it again at once.
        RunOutcome::Cancelled => NextDue::Unchanged,
    };
    metrics::run_finished(&job.name, outcome, started.elapsed());

    // Stop renewing before releasing, so a renewal can never race the release.
    shared.held.lock().unwrap_or_else(|p| p.into_inner()).remove(&job.key);
    metrics::held(&job.name, -1.0);
    let released = if shared.faults.partitioned() {
        tracing::warn!(job = %job.name, key = %job.key, "partitioned (fault injection): release skipped, the lease will expire");
        false
    } else {
        let limit = RELEASE_TIMEOUT.min(job.settings.lease);
        let release = shared.store.finish(&job.key, &tenure.holder, tenure.fence, next);
        match bounded(limit, "release", release).await {
            Ok(released) => {
                shared.health.database_answered();
                released
            }
            Err(error) => {
                tracing::warn!(job = %job.name, key = %job.key, %error, "release failed; the lease will expire on its own");
                false
            }
        }
    };
    tracing::info!(job = %job.name, key = %job.key, fence = tenure.fence, outcome = outcome.as_str(), released,
        "run ended");
    (outcome, released)
}

/// Whether a job's error is, or wraps, leasehold's "stop: a newer holder
/// owns this work" (a stale fence or a lost lease), however deep in the
/// user's own error chain (`anyhow`, `thiserror` sources).
fn is_fencing(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if e.downcast_ref::<Error>().is_some_and(Error::is_fencing) {
            return true;
        }
        next = e.source();
    }
    false
}
