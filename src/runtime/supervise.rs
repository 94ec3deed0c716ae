//! Run supervision: one task per run — start the job's body, stop it on a
//! lost lease, at its local deadline, at its time limit or at shutdown,
//! then hand the release to the finisher and put the key back in the due
//! queue.

use std::sync::Arc;
use std::time::Duration;

use futures::future::OptionFuture;
use tokio::sync::oneshot;
use tokio::task::{JoinError, JoinHandle};
use tokio::time::Instant;
use tracing::Instrument;

use chrono::{DateTime, Utc};

use super::run_end::{Aftermath, Ending, NextRule, stop_explains_failure};
use super::state::{FinishRequest, JobEntry, RunSlot, Shared};
use crate::cancel::CancelReason;
use crate::error::Error;
use crate::guard::FenceGuard;
use crate::job::JobError;
use crate::lease::{Finish, NextDue, Released, RunOutcome, RunReport, storable_text};
use crate::metrics;
use crate::schedule::{SlotPlan, next_after_change, next_after_success, plan};
use crate::tenure::Tenure;

/// How long a release may take before the lease is left to expire.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Starts supervising the run of `tenure` in a task of its own (tracked, so
/// shutdown waits for it). The key must already be marked running.
/// `run_no` is the key's run number (its history slot); `pending` the
/// schedule slot the key owed when claimed.
pub(crate) fn spawn(
    shared: Arc<Shared>,
    job: Arc<JobEntry>,
    tenure: Arc<Tenure>,
    run_no: i64,
    pending: Option<DateTime<Utc>>,
) {
    let runs = shared.runs.clone();
    // Taken before the task starts: the scheduler's next pass counts it.
    let slot = RunSlot::take(shared, job, tenure);
    // Boxed: the supervising future is about 3 KB, and a task moves its
    // future as it is spawned and as it completes (a measured 12 % of a
    // busy runtime's CPU was such copies); the task then holds a pointer.
    runs.spawn(Box::pin(supervise(slot, run_no, pending)));
}

/// The run's life: plan, run, release, requeue. Cancel-safe in the sense
/// that matters here: dropped at any await (or panicking), its [`RunSlot`]
/// still gives back the concurrency slot and puts the key back in the queue.
async fn supervise(mut slot: RunSlot, run_no: i64, pending: Option<DateTime<Utc>>) {
    let (shared, job, tenure) = (slot.shared().clone(), slot.job().clone(), slot.tenure().clone());
    let settings = &job.settings;
    let (ending, error, planned) = match plan(&settings.schedule, settings.get_catch_up(), pending, tenure.acquired_at)
    {
        SlotPlan::Skip { next } => {
            tenure.set_slot(pending);
            tracing::info!(job = %job.name, key = %job.key, missed = ?pending, ?next,
                "missed slot skipped (catch-up policy \"skip\"): the next run is the next slot");
            (Ending::Skipped, None, Some(next))
        }
        SlotPlan::Run { slot } => {
            tenure.set_slot(slot);
            let (ending, error) = run(&shared, &job, &tenure).await;
            (ending, error, None)
        }
    };
    let after = ending.aftermath();
    let (next, basis) = next_due(&shared, &job, &tenure, &after, planned);
    // Stop renewing before releasing, so a renewal never races the release;
    // the body is over, so its concurrency slot is free for the next claim.
    slot.releasing();
    let report = RunReport {
        job_name: job.name.to_string(),
        run_no,
        scheduled_for: tenure.slot(),
        started_at: tenure.acquired_at,
        outcome: after.outcome,
        reason: after.reason,
        error: error.map(storable_text),
        ring: shared.history,
    };
    // A wake-up heard while the release is out may announce a commit (a
    // trigger) its answer does not see: then the key is claimed again at once.
    let sent = shared.registry().mark();
    let answer = release(&shared, &job, &tenure, next, report).await;
    let next = refile_if_changed(&shared, &job, &tenure, &after, next, basis, answer).await;
    let released = answer.released();
    let reason = after.reason.map_or("", CancelReason::as_str);
    tracing::info!(job = %job.name, key = %job.key, fence = tenure.fence, outcome = after.outcome.as_str(), reason,
        released, "run ended");
    if shared.stopping.is_cancelled() {
        shared.count_stopped_run(after.finished, released);
    }
    let at = requeue_at(&shared, &job, &tenure, &after, next, answer);
    slot.requeue(at, sent);
    // Dropping the slot gives back the concurrency slot and wakes the scheduler.
}

/// Lets a cancelled run return within its grace, and drops it otherwise.
///
/// A run past its deadline gets no grace: the lease may be claimable
/// elsewhere soon (its loss was logged once already). A run asked to stop
/// for shutdown or pause keeps its lease while it winds down — the
/// heartbeat still renews it — but the grace never outlasts the local
/// deadline: if renewals stop getting through, the run is dropped at the
/// deadline, before another replica can claim the key (§5), and counted as
/// a deadline loss.
async fn wind_down(
    shared: &Shared,
    job: &JobEntry,
    tenure: &Tenure,
    handle: &mut JoinHandle<Result<(), JobError>>,
) -> Option<Result<Result<(), JobError>, JoinError>> {
    let deadline = tenure.reason() == Some(CancelReason::Deadline);
    let grace = if deadline { Duration::ZERO } else { job.settings.grace };
    let grace_end = Instant::now() + grace;
    loop {
        // Re-read each turn: a renewal during the wind-down moves it on.
        // Never in the past: like a zero timeout, that leaves a run already
        // woken by its cancellation the moment it takes to notice it.
        let stop_at = grace_end.min(tenure.deadline()).max(Instant::now());
        if let Ok(result) = tokio::time::timeout_at(stop_at, &mut *handle).await {
            return Some(result);
        }
        let now = Instant::now();
        if now < grace_end && now < tenure.deadline() {
            continue;
        }
        handle.abort();
        if deadline {
            tracing::debug!(job = %job.name, key = %job.key, fence = tenure.fence, "run dropped at its deadline");
        } else if now < grace_end {
            tracing::error!(job = %job.name, key = %job.key, holder = %tenure.holder, fence = tenure.fence,
                reason = ?tenure.reason(), "run winding down reached its deadline (lease not renewed in time); dropped");
            metrics::lost(&job.name, CancelReason::Deadline);
            shared.health.run_lost_at_deadline();
        } else {
            tracing::warn!(job = %job.name, key = %job.key, fence = tenure.fence, ?grace,
                reason = ?tenure.reason(), "cancelled run did not return within its grace period; dropped");
        }
        return None;
    }
}

/// Runs the body to its end, or stops it. Returns the outcome, and the
/// error or panic message of a run that failed or panicked.
async fn run(shared: &Shared, job: &JobEntry, tenure: &Arc<Tenure>) -> (Ending, Option<String>) {
    // DEBUG: the run's INFO line is "run ended", one per run; losses,
    // failures and rejections log on their own at WARN or ERROR.
    tracing::debug!(job = %job.name, key = %job.key, holder = %tenure.holder, fence = tenure.fence, "lease acquired; run starting");
    let span = run_span(job, tenure);
    let started = Instant::now();
    // The run's time limit, on the local monotonic clock, counted from the
    // body's first poll — not from here: under load the spawned task may
    // start milliseconds later, and the body is owed its whole limit.
    // `None` until the body begins, or with no limit, or one too far ahead
    // to represent. Only a run with a limit asks its body when it began
    // (`body_began`, `None` once answered).
    let mut limit_at = None;
    let (began, mut body_began) = match job.settings.timeout {
        Some(_) => {
            let (began, body_began) = oneshot::channel();
            (Some(began), Some(body_began))
        }
        None => (None, None),
    };
    let body = job.body.clone().run_owned(FenceGuard::new(tenure.clone()));
    let mut handle = tokio::spawn(
        async move {
            // The receiver is gone only once the run is over.
            if let Some(began) = began {
                let _ = began.send(Instant::now());
            }
            body.await
        }
        .instrument(span.clone()),
    );

    let finished = loop {
        tokio::select! {
            result = &mut handle => break Some(result),
            // Once: a oneshot is not polled again after its answer.
            Some(at) = OptionFuture::from(body_began.as_mut()), if body_began.is_some() => {
                body_began = None;
                limit_at = at.ok().zip(job.settings.timeout).and_then(|(at, limit)| at.checked_add(limit));
            }
            _ = tenure.token().cancelled() => break wind_down(shared, job, tenure, &mut handle).await,
            // Only until the run is cancelled: a deadline in the past stays
            // ready on every later turn, and `select!` picks among ready
            // branches at random, so without the guard it could be taken
            // again before the cancellation branch ends the loop.
            _ = tokio::time::sleep_until(tenure.deadline()), if !tenure.token().is_cancelled() => {
                // Counted in health only by the call that stopped the run:
                // the heartbeat may have found the lease lost at the same
                // moment, and a loss counts once whoever notices it.
                if Instant::now() >= tenure.deadline() && tenure.lose(CancelReason::Deadline) {
                    shared.health.run_lost_at_deadline();
                }
            }
            _ = shared.stopping.cancelled(), if !tenure.token().is_cancelled() => {
                tenure.cancel(CancelReason::Shutdown);
            }
            // Past its time limit: asked to stop like a shutdown (it keeps
            // its lease while it winds down within its grace), then dropped.
            _ = until(limit_at), if !tenure.token().is_cancelled() => {
                if tenure.cancel(CancelReason::Timeout) {
                    tracing::warn!(job = %job.name, key = %job.key, holder = %tenure.holder, fence = tenure.fence,
                        limit = ?job.settings.timeout, reason = CancelReason::Timeout.as_str(),
                        "run went past its time limit; cancelling it");
                    metrics::timed_out(&job.name);
                }
            }
        }
    };

    let (ending, message) = match finished {
        // A run an operator's pause cancelled is recorded as cancelled even
        // if it returned Ok: most jobs return early when cancelled, and the
        // slot must stay owed so it runs again once resumed. Likewise a run
        // stopped at its time limit: returning early is not success.
        Some(Ok(Ok(())))
            if matches!(
                tenure.reason(),
                Some(CancelReason::Paused | CancelReason::Removed | CancelReason::Timeout)
            ) =>
        {
            (Ending::Cancelled(tenure.reason()), None)
        }
        Some(Ok(Ok(()))) => (Ending::Succeeded, None),
        _ if tenure.reason().is_some_and(stop_explains_failure) => (Ending::Cancelled(tenure.reason()), None),
        Some(Ok(Err(error))) => {
            if is_fencing(&*error) || tenure.reason().is_some() {
                (Ending::Cancelled(tenure.reason()), None)
            } else {
                // The job's own text: shown with its hidden characters
                // escaped, so a log line cannot be reordered or hidden.
                let shown = crate::validate::shown(&error.to_string()).into_owned();
                tracing::error!(job = %job.name, key = %job.key, fence = tenure.fence, error = %shown, "run failed");
                (Ending::Failed, Some(error_chain(&*error)))
            }
        }
        Some(Err(join)) if join.is_panic() => {
            let panic = join.into_panic();
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(job = %job.name, key = %job.key, fence = tenure.fence,
                message = %crate::validate::shown(&message), "run panicked");
            (Ending::Panicked, Some(message))
        }
        Some(Err(_)) | None => (Ending::Cancelled(tenure.reason()), None),
    };
    let after = ending.aftermath();
    metrics::run_finished(&job.name, after.outcome, started.elapsed());
    record_end(&span, &after, message.as_deref());
    (ending, message)
}

/// Sleeps until `at`, or forever when there is none.
async fn until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The span the job's body runs in: its job, key, holder and fence, and
/// how it ended, recorded by [`record_end`] (the fields declared empty
/// here). `otel.status_code` and `otel.status_description` are the names
/// `tracing-opentelemetry` maps to the span's OpenTelemetry status.
fn run_span(job: &JobEntry, tenure: &Tenure) -> tracing::Span {
    use tracing::field::Empty;
    tracing::info_span!("leasehold.run", job = %job.name, key = %job.key, holder = %tenure.holder,
        fence = tenure.fence, outcome = Empty, reason = Empty, otel.status_code = Empty,
        otel.status_description = Empty)
}

/// Records how the run ended on its span: the outcome (the names of the
/// history and of `leasehold_job_runs_total`), why a cancelled run was
/// stopped (the names of `leasehold_lease_lost_total`'s reasons, plus
/// `shutdown`, `paused`, `removed` and `timeout`), and an error status for
/// a run that failed, panicked, lost its lease or went past its time limit
/// — not for one stopped by shutdown or pause, which did nothing wrong.
fn record_end(span: &tracing::Span, after: &Aftermath, error: Option<&str>) {
    // Nothing to format for a span no subscriber wants.
    if span.is_disabled() {
        return;
    }
    span.record("outcome", after.outcome.as_str());
    if let Some(reason) = after.reason {
        span.record("reason", reason.as_str());
    }
    let status = match (after.outcome, after.reason) {
        // A panic with a payload other than a string has no message.
        (RunOutcome::Failed | RunOutcome::Panicked, _) => Some(
            error
                .filter(|e| !e.is_empty())
                .unwrap_or(after.outcome.as_str())
                .to_owned(),
        ),
        (RunOutcome::Cancelled, Some(reason)) if after.lease_lost => Some(format!("lease lost ({reason})")),
        (RunOutcome::Cancelled, Some(CancelReason::Timeout)) => Some("run timed out".to_owned()),
        (RunOutcome::Cancelled | RunOutcome::Succeeded | RunOutcome::Skipped | RunOutcome::Lost, _) => None,
    };
    if let Some(description) = status {
        span.record("otel.status_code", "ERROR");
        span.record("otel.status_description", description.as_str());
    }
}

/// An error and its sources, `outer: inner: innermost`, for the history,
/// each cause said once.
///
/// Many errors already print their source in their own `Display`
/// (leasehold's `database error: {0}`, sqlx's `error returned from
/// database: {0}`, `anyhow` contexts with `{:#}`), so a source whose text
/// is already there is not appended again.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(e) = next {
        let cause = e.to_string();
        if !cause.is_empty() && !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
        next = e.source();
    }
    text
}

/// What the release records about the schedule ([`Aftermath::next`]), and
/// the failure streak; with the key's job entry as registered when it was
/// decided (`None`: removed), for [`refile_if_changed`]. `planned` is the
/// slot the catch-up plan named.
///
/// A key whose schedule changed during the run (the sync replaced its
/// entry, `Registry::replace`) is next due at the new schedule's first
/// slot after the change ([`next_after_change`]): the old schedule's next
/// slot may be one the new schedule does not have, or come after slots of
/// the new one.
fn next_due(
    shared: &Shared,
    job: &Arc<JobEntry>,
    tenure: &Tenure,
    after: &Aftermath,
    planned: Option<DateTime<Utc>>,
) -> (NextDue, Option<Arc<JobEntry>>) {
    let (failures, current) = {
        let mut registry = shared.registry();
        let failures = registry.update_failures(&job.key, after.failures).unwrap_or(1);
        (failures, registry.job(&job.key))
    };
    let next = match (after.next, after_change(job, current.as_ref(), tenure, after)) {
        (NextRule::NextSlot | NextRule::Planned, Some(at)) => NextDue::At(at),
        (NextRule::NextSlot, None) => NextDue::At(next_after_success(
            &job.settings.schedule,
            job.settings.get_catch_up(),
            tenure.slot(),
            tenure.acquired_at,
        )),
        (NextRule::Planned, None) => planned.map_or(NextDue::Unchanged, NextDue::At),
        // A retry is for the slot still owed, whatever the schedule now.
        (NextRule::Backoff, _) => NextDue::After(job.settings.backoff(failures.max(1))),
        // Still due: the next claimer runs it again at once (see the trap
        // documented at `Ending::aftermath`).
        (NextRule::Unchanged, _) => NextDue::Unchanged,
    };
    (next, current)
}

/// The next due time after the run when `current`, the key's entry
/// registered now, replaced the run's own (a stored key's new schedule):
/// the new schedule's first slot after the change and after the run's
/// slot ([`next_after_change`]; a skipped slot was not run, so from the
/// claim). `None` if `current` is the run's entry, or the key was removed
/// (or removed and added back: its run was cancelled).
fn after_change(
    job: &Arc<JobEntry>,
    current: Option<&Arc<JobEntry>>,
    tenure: &Tenure,
    after: &Aftermath,
) -> Option<DateTime<Utc>> {
    let now = current.filter(|now| !Arc::ptr_eq(now, job))?;
    let slot = if after.next == NextRule::NextSlot {
        tenure.slot()
    } else {
        None
    };
    Some(next_after_change(
        &now.settings.schedule,
        now.settings.get_catch_up(),
        slot,
        tenure.acquired_at,
        now.changed_at?,
    ))
}

/// The next due time to file the key at, once its release answered.
/// Usually `next` as the release sent it. But a schedule change the sync
/// applied after [`next_due`] read the registry (`basis`) may have moved
/// the row (`Keys::reschedule`) before the release landed and
/// overwrote it with a slot of the old schedule: then the release's next
/// due time is decided again from the new entry and written the way the
/// sync writes it (only to a pending slot not due yet, or sooner), and the
/// key is filed at that. A failure to write it is logged: the key then
/// runs once at the old schedule's slot, as before the change.
async fn refile_if_changed(
    shared: &Shared,
    job: &Arc<JobEntry>,
    tenure: &Tenure,
    after: &Aftermath,
    next: NextDue,
    basis: Option<Arc<JobEntry>>,
    answer: Released,
) -> NextDue {
    if !answer.released() || !matches!(next, NextDue::At(_)) {
        return next;
    }
    let current = shared.registry().job(&job.key);
    let moved = match (&basis, &current) {
        (Some(basis), Some(current)) => !Arc::ptr_eq(basis, current),
        _ => false,
    };
    let Some(again) = after_change(job, current.as_ref(), tenure, after).filter(|_| moved) else {
        return next;
    };
    let limit = RELEASE_TIMEOUT.min(job.settings.lease);
    match tokio::time::timeout(limit, shared.store.keys().reschedule(&job.key, again)).await {
        Ok(Ok(_)) => NextDue::At(again),
        Ok(Err(error)) => {
            tracing::warn!(job = %job.name, key = %job.key, %error,
                "could not move the key's due time to its new schedule after its release");
            next
        }
        Err(_) => {
            tracing::warn!(job = %job.name, key = %job.key,
                "moving the key's due time to its new schedule after its release did not complete");
            next
        }
    }
}

/// Hands the release to the finisher and waits for its answer (bounded).
/// [`Released::NotCurrent`] when nothing was released.
async fn release(shared: &Shared, job: &JobEntry, tenure: &Tenure, next: NextDue, report: RunReport) -> Released {
    if shared.partitioned() {
        tracing::warn!(job = %job.name, key = %job.key, "partitioned (fault injection): release skipped, the lease will expire");
        return Released::NotCurrent;
    }
    let (done, answer) = oneshot::channel();
    let request = FinishRequest {
        finish: Finish {
            key: job.key.to_string(),
            holder: tenure.holder.clone(),
            fence: tenure.fence,
            next,
            report: Some(report),
        },
        done,
    };
    if shared.finishes.send(request).is_err() {
        return Released::NotCurrent;
    }
    let limit = RELEASE_TIMEOUT.min(job.settings.lease);
    match tokio::time::timeout(limit, answer).await {
        Ok(Ok(released)) => released,
        _ => {
            tracing::warn!(job = %job.name, key = %job.key, "release did not complete; the lease will expire on its own");
            Released::NotCurrent
        }
    }
}

/// When this replica should next look at the key, after its run.
fn requeue_at(
    shared: &Shared,
    job: &JobEntry,
    tenure: &Tenure,
    after: &Aftermath,
    next: NextDue,
    answer: Released,
) -> Instant {
    let now = Instant::now();
    if !answer.released() {
        // Still ours on the server until it expires (or someone else's).
        return shared.clock.local(tenure.expires_at()).min(now + shared.poll_interval);
    }
    let pause = lost_run_backoff(shared, job, after);
    match next {
        // Triggered during the run: the release left it due now.
        NextDue::At(_) | NextDue::After(_) if answer == Released::StillDue => now,
        NextDue::At(at) => shared.clock.local(at),
        NextDue::After(delay) => now + delay,
        NextDue::Unchanged => now + pause.unwrap_or(Duration::ZERO),
    }
}

/// After a released run: `None` to claim again at once, or how long this
/// replica waits first. The first loss is retried at once (a blip); from
/// the second in a row, this replica backs off like a failing run, so that
/// a replica whose own jobs exhaust its pool, or whose heartbeats cannot
/// get through, hands the key to another one instead of re-claiming it
/// forever. Logged once per streak.
fn lost_run_backoff(shared: &Shared, job: &JobEntry, after: &Aftermath) -> Option<Duration> {
    let (before, losses) = shared.registry().update_losses(&job.key, after.losses)?;
    if before >= 2 && losses == 0 {
        tracing::info!(job = %job.name, key = %job.key, lost = before,
            "runs of this key keep their lease again; back-off over");
    }
    if losses < 2 {
        return None;
    }
    let pause = job.settings.backoff(losses - 1);
    if losses == 2 && before == 1 {
        tracing::warn!(job = %job.name, key = %job.key, reason = ?after.reason, ?pause,
            "two runs in a row lost their lease; this replica now waits before each claim of this key so \
             another replica can take it (is the pool big enough for the jobs and the heartbeat?)");
    }
    Some(pause)
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

#[cfg(test)]
mod tests {
    use std::fmt;

    use super::{error_chain, is_fencing};
    use crate::error::Error;

    /// A service's own error type wrapping another, as `thiserror`'s
    /// `#[source]` or an `anyhow` context does.
    #[derive(Debug)]
    struct Wrapped(&'static str, Box<dyn std::error::Error + Send + Sync>);

    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&*self.1)
        }
    }

    fn stale() -> Error {
        Error::StaleFence {
            resource: "ledger".into(),
            fence: 3,
            newer: 4,
        }
    }

    #[test]
    fn a_stale_fence_is_recognised_however_deep_in_the_users_error_chain() {
        assert!(is_fencing(&stale()));
        let once = Wrapped("posting the ledger", Box::new(stale()));
        assert!(is_fencing(&once));
        let twice = Wrapped("nightly billing", Box::new(once));
        assert!(is_fencing(&twice), "two levels down");
    }

    #[test]
    fn other_errors_are_failures_whatever_they_wrap() {
        let timeout = Error::Timeout {
            operation: "claim",
            limit: std::time::Duration::from_secs(1),
        };
        assert!(!is_fencing(&Wrapped("billing", Box::new(timeout))));
        let io = std::io::Error::other("disk full");
        assert!(!is_fencing(&Wrapped("billing", Box::new(io))));
    }

    #[test]
    fn a_chain_says_each_cause_once() {
        let io = std::io::Error::other("disk full");
        let layered = Wrapped("nightly billing", Box::new(Wrapped("posting the ledger", Box::new(io))));
        assert_eq!(error_chain(&layered), "nightly billing: posting the ledger: disk full");

        // leasehold's and sqlx's messages each print their source already.
        let database = Error::Database(sqlx::Error::Io(std::io::Error::other("connection reset")));
        let wrapped = Wrapped("posting the ledger", Box::new(database));
        assert_eq!(
            error_chain(&wrapped),
            "posting the ledger: database error: error communicating with database: connection reset"
        );
    }
}
