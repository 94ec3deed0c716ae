//! How a run ended, and everything that follows from it: the outcome and
//! reason the history records, when the key is next due, the failure and
//! loss streaks, the span's status and the shutdown report's count — all
//! decided in one exhaustive `match` ([`Ending::aftermath`]), so a new
//! [`RunOutcome`] or [`CancelReason`] is a compile error there, not a
//! silent default somewhere else.

use crate::cancel::CancelReason;
use crate::outcome::RunOutcome;

/// How a run ended, with the reason a stopped run was stopped for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// The job returned `Ok`.
    Succeeded,
    /// The job returned an error that is not a fencing error.
    Failed,
    /// The job panicked.
    Panicked,
    /// Not run: its slot was missed, and its catch-up policy skips.
    Skipped,
    /// The run was stopped: for the reason given, or with none (the job
    /// gave up on a stale fence, or its task ended without a result).
    Cancelled(Option<CancelReason>),
}

/// What the key is next due at, as the release records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NextRule {
    /// The slot after the one just run (`schedule::next_after_success`).
    NextSlot,
    /// The slot the catch-up plan named when it skipped this one.
    Planned,
    /// The retry back-off of the failure streak, after the release.
    Backoff,
    /// The due time stays as it is — the key is still due, so the next
    /// claimer (this replica first) runs it again at once.
    Unchanged,
}

/// How a streak of runs in a row changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Streak {
    /// Back to zero: this run broke the streak.
    Reset,
    /// One more.
    Extend,
    /// As it was: this run says nothing about it.
    Keep,
}

impl Streak {
    /// The streak `count` after this change.
    pub(crate) fn apply(self, count: u32) -> u32 {
        match self {
            Streak::Reset => 0,
            Streak::Extend => count.saturating_add(1),
            Streak::Keep => count,
        }
    }
}

/// Everything that follows from how a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Aftermath {
    /// The outcome in the history, `leasehold_job_runs_total` and the logs.
    pub(crate) outcome: RunOutcome,
    /// Why it was stopped, as the history and the span record it; `None`
    /// unless the outcome is [`RunOutcome::Cancelled`].
    pub(crate) reason: Option<CancelReason>,
    pub(crate) next: NextRule,
    /// Runs that failed or panicked in a row: the retry back-off.
    pub(crate) failures: Streak,
    /// Runs of this replica that lost their lease in a row: from the
    /// second, this replica waits before claiming the key again.
    pub(crate) losses: Streak,
    /// Whether the run's span gets an error status for a lost lease.
    pub(crate) lease_lost: bool,
    /// Whether the shutdown report counts it as finished (else cancelled).
    pub(crate) finished: bool,
}

impl Ending {
    /// What follows from this ending.
    ///
    /// The trap: a stopped run is recorded with [`NextRule::Unchanged`]
    /// ("still due: run it again at once"), which is right for a run that
    /// lost its lease or was stopped by shutdown or pause — the slot is
    /// still owed. A reason that means the run itself is at fault must not
    /// map there, or the key would time out and start again forever: a run
    /// past its time limit ([`CancelReason::Timeout`]) gives up its slot —
    /// the key is next due at its next slot, its catch-up policy applying
    /// ([`NextRule::NextSlot`]) — and extends the failure streak, so a
    /// failure after it backs off further.
    pub(crate) fn aftermath(self) -> Aftermath {
        let ended = |outcome, next, failures, losses| Aftermath {
            outcome,
            reason: None,
            next,
            failures,
            losses,
            lease_lost: false,
            finished: false,
        };
        let stopped = |reason, losses, lease_lost| Aftermath {
            outcome: RunOutcome::Cancelled,
            reason,
            next: NextRule::Unchanged,
            failures: Streak::Keep,
            losses,
            lease_lost,
            finished: false,
        };
        match self {
            // Kept its lease to the end: both streaks are broken.
            Ending::Succeeded => Aftermath {
                finished: true,
                ..ended(RunOutcome::Succeeded, NextRule::NextSlot, Streak::Reset, Streak::Reset)
            },
            Ending::Failed => ended(RunOutcome::Failed, NextRule::Backoff, Streak::Extend, Streak::Reset),
            Ending::Panicked => ended(RunOutcome::Panicked, NextRule::Backoff, Streak::Extend, Streak::Reset),
            Ending::Skipped => ended(RunOutcome::Skipped, NextRule::Planned, Streak::Keep, Streak::Keep),
            Ending::Cancelled(Some(
                reason @ (CancelReason::Stolen | CancelReason::Expired | CancelReason::Deadline),
            )) => stopped(Some(reason), Streak::Extend, true),
            Ending::Cancelled(Some(
                reason @ (CancelReason::Shutdown | CancelReason::Paused | CancelReason::Removed),
            )) => stopped(Some(reason), Streak::Reset, false),
            // The run's own fault: its slot is given up, not owed again.
            Ending::Cancelled(Some(CancelReason::Timeout)) => Aftermath {
                next: NextRule::NextSlot,
                failures: Streak::Extend,
                ..stopped(Some(CancelReason::Timeout), Streak::Reset, false)
            },
            Ending::Cancelled(None) => stopped(None, Streak::Reset, false),
        }
    }
}

/// Whether a run stopped for `reason` is recorded as cancelled even when
/// its body failed or panicked meanwhile: a run that lost its lease, was
/// paused or went past its time limit may fail *because* it was stopped. A shutdown is not the run's
/// business: its failure or panic is recorded as such.
pub(crate) fn stop_explains_failure(reason: CancelReason) -> bool {
    match reason {
        CancelReason::Stolen
        | CancelReason::Expired
        | CancelReason::Deadline
        | CancelReason::Paused
        | CancelReason::Removed
        | CancelReason::Timeout => true,
        CancelReason::Shutdown => false,
    }
}

#[cfg(test)]
mod tests {
    use super::{Ending, NextRule, Streak, stop_explains_failure};
    use crate::cancel::CancelReason;
    use crate::outcome::RunOutcome;

    const REASONS: [CancelReason; 7] = [
        CancelReason::Stolen,
        CancelReason::Expired,
        CancelReason::Deadline,
        CancelReason::Shutdown,
        CancelReason::Paused,
        CancelReason::Removed,
        CancelReason::Timeout,
    ];

    #[test]
    fn a_stopped_run_stays_due_and_only_a_lost_lease_extends_the_loss_streak() {
        for reason in REASONS.into_iter().filter(|r| *r != CancelReason::Timeout) {
            let after = Ending::Cancelled(Some(reason)).aftermath();
            assert_eq!(after.outcome, RunOutcome::Cancelled);
            assert_eq!(after.reason, Some(reason), "the history records why");
            assert_eq!(after.next, NextRule::Unchanged, "{reason}: the slot is still owed");
            assert_eq!(after.failures, Streak::Keep, "{reason}: not the job's failure");
            let loss = [CancelReason::Stolen, CancelReason::Expired, CancelReason::Deadline].contains(&reason);
            assert_eq!(after.losses == Streak::Extend, loss, "{reason}");
            assert_eq!(after.lease_lost, loss, "{reason}");
            assert!(!after.finished);
        }
    }

    #[test]
    fn a_run_past_its_time_limit_gives_up_its_slot_and_counts_as_a_failure() {
        let after = Ending::Cancelled(Some(CancelReason::Timeout)).aftermath();
        assert_eq!(
            (after.outcome, after.reason),
            (RunOutcome::Cancelled, Some(CancelReason::Timeout))
        );
        assert_eq!(
            after.next,
            NextRule::NextSlot,
            "not still due: it would time out again at once, forever"
        );
        assert_eq!((after.failures, after.losses), (Streak::Extend, Streak::Reset));
        assert!(!after.lease_lost && !after.finished);
    }

    #[test]
    fn failures_back_off_and_successes_break_both_streaks() {
        let success = Ending::Succeeded.aftermath();
        assert_eq!(
            (success.next, success.failures, success.losses, success.finished),
            (NextRule::NextSlot, Streak::Reset, Streak::Reset, true)
        );
        for ending in [Ending::Failed, Ending::Panicked] {
            let after = ending.aftermath();
            assert_eq!(
                (after.next, after.failures),
                (NextRule::Backoff, Streak::Extend),
                "{ending:?}"
            );
            assert_eq!(after.reason, None);
        }
        let skipped = Ending::Skipped.aftermath();
        assert_eq!(
            (skipped.outcome, skipped.next, skipped.failures, skipped.losses),
            (RunOutcome::Skipped, NextRule::Planned, Streak::Keep, Streak::Keep)
        );
    }

    #[test]
    fn only_a_shutdown_leaves_a_failure_recorded_as_a_failure() {
        let explained: Vec<_> = REASONS.into_iter().filter(|r| !stop_explains_failure(*r)).collect();
        assert_eq!(explained, [CancelReason::Shutdown]);
    }
}
