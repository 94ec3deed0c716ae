//! How a run ended: one vocabulary for the history, the metrics and the
//! logs. A leaf module, so the lease store and the metrics both use it
//! without using each other.

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RunOutcome {
    /// The job returned `Ok`.
    Succeeded,
    /// The job returned an error (not a fencing error).
    Failed,
    /// The run was stopped: lease lost, deadline, shutdown or pause (the
    /// reason is recorded), or the job gave up on a stale fence.
    Cancelled,
    /// The job panicked.
    Panicked,
    /// Not run: its slot was missed and the job's catch-up policy is
    /// [`CatchUp::Skip`](crate::CatchUp::Skip).
    Skipped,
    /// The run ended without a release: its replica crashed, froze past
    /// its lease, or could not write its release. Recorded by the claim
    /// that took the key over, with the tenure's holder, fence and start,
    /// ended at the lease's expiry (reason `expired`).
    Lost,
}

impl RunOutcome {
    /// A stable lower-case name, used in the history table, metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            RunOutcome::Succeeded => "succeeded",
            RunOutcome::Failed => "failed",
            RunOutcome::Cancelled => "cancelled",
            RunOutcome::Panicked => "panicked",
            RunOutcome::Skipped => "skipped",
            RunOutcome::Lost => "lost",
        }
    }

    /// Reads a stored outcome; anything unknown reads as cancelled.
    pub(crate) fn parse(s: &str) -> RunOutcome {
        match s {
            "succeeded" => RunOutcome::Succeeded,
            "failed" => RunOutcome::Failed,
            "panicked" => RunOutcome::Panicked,
            "skipped" => RunOutcome::Skipped,
            "lost" => RunOutcome::Lost,
            _ => RunOutcome::Cancelled,
        }
    }
}

impl std::fmt::Display for RunOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
