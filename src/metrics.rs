//! Every metric leasehold records, through the `metrics` facade: whatever
//! recorder the process installs receives them.
//!
//! Labels are the job *name* and fixed outcome/reason words only — never a
//! lease key, which can be per tenant (cardinality).

use std::time::Duration;

use metrics::{counter, gauge, histogram};

use crate::error::CancelReason;

/// Metric names, exported so dashboards and tests name them once.
pub mod names {
    /// Counter: claims by `job` and `outcome` (acquired, held_elsewhere, not_due, error).
    pub const CLAIMS: &str = "leasehold_lease_claims_total";
    /// Counter: lost leases by `job` and `reason` (stolen, expired, deadline).
    pub const LOST: &str = "leasehold_lease_lost_total";
    /// Counter: heartbeat statements by `outcome` (renewed, lost, error).
    pub const HEARTBEATS: &str = "leasehold_heartbeats_total";
    /// Histogram: duration of one heartbeat statement, in seconds.
    pub const HEARTBEAT_DURATION: &str = "leasehold_heartbeat_duration_seconds";
    /// Counter: finished runs by `job` and `outcome` (succeeded, failed, cancelled, panicked).
    pub const RUNS: &str = "leasehold_job_runs_total";
    /// Histogram: run duration by `job`, in seconds.
    pub const RUN_DURATION: &str = "leasehold_job_duration_seconds";
    /// Gauge: leases this replica holds, by `job`.
    pub const HELD: &str = "leasehold_leases_held";
    /// Gauge: server time left on the lease at the last renewal, by `job`.
    pub const REMAINING: &str = "leasehold_lease_remaining_seconds";
    /// Counter: fenced writes rejected for a stale fence, by `job`.
    pub const FENCE_REJECTIONS: &str = "leasehold_fence_rejections_total";
    /// Gauge: Unix time of the last successful run, by `job`.
    pub const LAST_SUCCESS: &str = "leasehold_job_last_success_timestamp_seconds";

    /// All of the above.
    pub const ALL: &[&str] = &[
        CLAIMS,
        LOST,
        HEARTBEATS,
        HEARTBEAT_DURATION,
        RUNS,
        RUN_DURATION,
        HELD,
        REMAINING,
        FENCE_REJECTIONS,
        LAST_SUCCESS,
    ];
}

/// How a run ended, as counted in [`names::RUNS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunOutcome {
    Succeeded,
    Failed,
    Cancelled,
    Panicked,
}

impl RunOutcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RunOutcome::Succeeded => "succeeded",
            RunOutcome::Failed => "failed",
            RunOutcome::Cancelled => "cancelled",
            RunOutcome::Panicked => "panicked",
        }
    }
}

pub(crate) fn claim(job: &str, outcome: &'static str) {
    counter!(names::CLAIMS, "job" => job.to_owned(), "outcome" => outcome).increment(1);
}

pub(crate) fn lost(job: &str, reason: CancelReason) {
    counter!(names::LOST, "job" => job.to_owned(), "reason" => reason.as_str()).increment(1);
}

pub(crate) fn heartbeat(outcome: &'static str, took: Duration) {
    counter!(names::HEARTBEATS, "outcome" => outcome).increment(1);
    histogram!(names::HEARTBEAT_DURATION).record(took.as_secs_f64());
}

pub(crate) fn run_finished(job: &str, outcome: RunOutcome, took: Duration) {
    counter!(names::RUNS, "job" => job.to_owned(), "outcome" => outcome.as_str()).increment(1);
    histogram!(names::RUN_DURATION, "job" => job.to_owned()).record(took.as_secs_f64());
    if outcome == RunOutcome::Succeeded {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        gauge!(names::LAST_SUCCESS, "job" => job.to_owned()).set(now.as_secs_f64());
    }
}

pub(crate) fn held(job: &str, delta: f64) {
    gauge!(names::HELD, "job" => job.to_owned()).increment(delta);
}

pub(crate) fn remaining(job: &str, left: Duration) {
    gauge!(names::REMAINING, "job" => job.to_owned()).set(left.as_secs_f64());
}

pub(crate) fn fence_rejected(job: &str) {
    counter!(names::FENCE_REJECTIONS, "job" => job.to_owned()).increment(1);
}
