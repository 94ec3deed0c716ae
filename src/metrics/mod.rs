//! Every metric leasehold records, through the [`metrics`] facade: whatever
//! recorder the process installs receives them.
//!
//! Labels are the job *name* and fixed outcome/reason words only — never a
//! lease key, which can be per tenant (cardinality).
//!
//! | metric | type | labels | meaning |
//! |---|---|---|---|
//! | `leasehold_lease_claims_total` | counter | job_name, outcome | keys proposed in the scheduler's batch claims (one statement proposes many), by answer: `acquired`, `held_elsewhere` (held, or locked by another claimer), `not_due`, `paused` (the key or its job is paused), `too_late` (acquired, but the answer came after the tenure's local deadline: handed back unrun), `error` |
//! | `leasehold_lease_lost_total` | counter | job_name, reason | runs stopped because their lease was lost: `stolen`, `expired`, `deadline` |
//! | `leasehold_heartbeats_total` | counter | outcome | heartbeat statements (one per tick for all leases): `renewed`, `lost`, `busy` (a lease row locked elsewhere, not renewed), `error` |
//! | `leasehold_heartbeat_duration_seconds` | histogram | | duration of one heartbeat statement |
//! | `leasehold_job_runs_total` | counter | job_name, outcome | finished runs: `succeeded`, `failed`, `cancelled`, `panicked`; and `lost`, counted by the replica whose claim took over a run that ended without a release (a crash, a freeze past its lease, a failed release) |
//! | `leasehold_run_timeouts_total` | counter | job_name | runs cancelled because they went past their time limit (`JobSettings::timeout`, `#[job(timeout = "15m")]`): each also ends as a `cancelled` run, reason `timeout` in the history |
//! | `leasehold_job_duration_seconds` | histogram | job_name | run duration, whatever the outcome |
//! | `leasehold_leases_held` | gauge | job_name | leases this process holds right now |
//! | `leasehold_lease_remaining_seconds` | gauge | job_name | server time left on the lease right after its last renewal |
//! | `leasehold_fence_rejections_total` | counter | job_name | fenced writes refused for a stale fence |
//! | `leasehold_fence_wait_seconds` | histogram | job_name | how long `begin_fenced`'s fence advance took, row-lock wait included: a long one is a successor waiting for an older transaction (a frozen holder is ended by the server within one lease) |
//! | `leasehold_job_last_success_timestamp_seconds` | gauge | job_name | Unix time of the last successful run in this process |
//! | `leasehold_runs_in_progress` | gauge | | runs in progress on this replica |
//! | `leasehold_max_concurrent_runs` | gauge | | this replica's limit on runs at once (`RuntimeBuilder::max_concurrent_runs`) |
//! | `leasehold_jobs_paused` | gauge | job_name | keys of the job paused fleet-wide (by key or by job), as this replica last saw them |
//! | `leasehold_server_timeline` | gauge | | the server's WAL timeline as this replica's latest poll read it: it rises on every promotion of a standby, and a runtime that sees it change logs a warning |
//! | `leasehold_keys_bad_args` | gauge | job_name | stored keys of this job kind whose arguments (or schedule) this replica cannot read: not run until updated |
//! | `leasehold_keys_unknown_kind` | gauge | | stored keys of kinds no live replica registers: they run nowhere (as this replica last saw them) |
//! | `leasehold_poisoned_connections_total` | counter | state | pooled connections found inside someone else's transaction and closed: `in_transaction`, `in_failed_transaction` |
//!
//! # Getting them out
//!
//! - With the `prometheus` feature (on by default),
//!   [`RuntimeBuilder::prometheus`](crate::RuntimeBuilder::prometheus)
//!   installs a Prometheus exporter as the process-wide recorder, with the
//!   histogram buckets of [`buckets`] and the descriptions of [`describe`],
//!   and serves it on a port of its own.
//! - To serve `/metrics` on the service's own router instead (and its own
//!   metrics with them), `prometheus_handle()` installs the same recorder
//!   without a listener and returns its handle; the route renders it:
//!
//! ```no_run
//! # #[cfg(feature = "prometheus")]
//! # fn demo() -> leasehold::Result<axum::Router> {
//! use axum::{Router, routing::get};
//!
//! let metrics = leasehold::metrics::prometheus_handle()?;
//! let app: Router = Router::new().route("/metrics", get(move || async move { metrics.render() }));
//! # Ok(app) }
//! ```
//!
//! - If your service installs its own recorder, leasehold's metrics go to it
//!   as they are. Call [`describe()`] once after installing it to attach the
//!   help texts and units, and give the three histograms the bounds in
//!   [`buckets`] (a Prometheus exporter otherwise renders them as
//!   summaries, which cannot be aggregated across replicas):
//!
//! ```no_run
//! # #[cfg(feature = "prometheus")]
//! # fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use leasehold::metrics::{buckets, names};
//! use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
//!
//! PrometheusBuilder::new()
//!     .set_buckets_for_metric(Matcher::Full(names::HEARTBEAT_DURATION.into()), buckets::HEARTBEAT_DURATION)?
//!     .set_buckets_for_metric(Matcher::Full(names::RUN_DURATION.into()), buckets::RUN_DURATION)?
//!     .set_buckets_for_metric(Matcher::Full(names::FENCE_WAIT.into()), buckets::FENCE_WAIT)?
//!     .set_buckets_for_metric(Matcher::Full(names::FLEET_LIMIT_WAIT.into()), buckets::FLEET_LIMIT_WAIT)?
//!     // ... your own settings ...
//!     .install()?;
//! leasehold::metrics::describe();
//! # Ok(()) }
//! ```
//!
//! The ready-made Grafana dashboard and Prometheus alert rules are in the
//! repository's `grafana/` folder.

use std::time::Duration;

use crate::outcome::RunOutcome;
use metrics::{counter, gauge, histogram};

use crate::cancel::CancelReason;

/// The handle of a Prometheus recorder: [`PrometheusHandle::render`] is the
/// text a Prometheus scrape expects.
#[cfg(feature = "prometheus")]
pub use metrics_exporter_prometheus::PrometheusHandle;

pub(crate) mod catalog;
#[cfg(feature = "prometheus")]
pub(crate) mod exporter;
pub use catalog::{buckets, describe, names};

/// Installs the process-wide `metrics` recorder for Prometheus, with
/// leasehold's histogram buckets and metric descriptions, and returns its
/// handle: serve [`PrometheusHandle::render`] on a route of your own router
/// (see the module docs). Nothing listens on a port of its own; every
/// `metrics` call of the process (the service's own too) is rendered.
///
/// Once per process: later calls return the same handle, and so does a
/// call after [`RuntimeBuilder::prometheus`](crate::RuntimeBuilder::prometheus)
/// installed the recorder (use one or the other: `.prometheus(..)` after
/// this call fails at start). [`Error::Metrics`](crate::Error::Metrics) if
/// another `metrics` recorder is already installed.
#[cfg(feature = "prometheus")]
pub fn prometheus_handle() -> crate::error::Result<PrometheusHandle> {
    exporter::handle()
}

/// A key's answer in a batch claim: the `outcome` label of
/// `leasehold_lease_claims_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClaimOutcome {
    /// Claimed: its run starts.
    Acquired,
    /// Held by another replica, or locked by another claimer.
    HeldElsewhere,
    /// Free, but not due yet.
    NotDue,
    /// The key or its job is paused.
    Paused,
    /// Free and due, but its job's fleet-wide limit was full.
    Limited,
    /// Acquired, but the answer came after the tenure's local deadline:
    /// handed back unrun.
    TooLate,
    /// The claim statement failed.
    Error,
}

impl ClaimOutcome {
    /// Every outcome, to create the series at zero.
    const ALL: [ClaimOutcome; 7] = [
        ClaimOutcome::Acquired,
        ClaimOutcome::HeldElsewhere,
        ClaimOutcome::NotDue,
        ClaimOutcome::Paused,
        ClaimOutcome::Limited,
        ClaimOutcome::TooLate,
        ClaimOutcome::Error,
    ];

    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ClaimOutcome::Acquired => "acquired",
            ClaimOutcome::HeldElsewhere => "held_elsewhere",
            ClaimOutcome::NotDue => "not_due",
            ClaimOutcome::Paused => "paused",
            ClaimOutcome::Limited => "limited",
            ClaimOutcome::TooLate => "too_late",
            ClaimOutcome::Error => "error",
        }
    }
}

/// How one heartbeat statement went: the `outcome` label of
/// `leasehold_heartbeats_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeartbeatOutcome {
    /// Every lease renewed.
    Renewed,
    /// At least one lease was lost.
    Lost,
    /// None lost, but a lease row locked elsewhere was not renewed.
    Busy,
    /// The statement failed.
    Error,
}

impl HeartbeatOutcome {
    /// Every outcome, to create the series at zero.
    const ALL: [HeartbeatOutcome; 4] = [
        HeartbeatOutcome::Renewed,
        HeartbeatOutcome::Lost,
        HeartbeatOutcome::Busy,
        HeartbeatOutcome::Error,
    ];

    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            HeartbeatOutcome::Renewed => "renewed",
            HeartbeatOutcome::Lost => "lost",
            HeartbeatOutcome::Busy => "busy",
            HeartbeatOutcome::Error => "error",
        }
    }
}

/// Creates a job's counters (and the heartbeat counters) at zero when the
/// runtime starts, so that Prometheus sees each series *before* its first
/// event: `increase()` cannot count the first event of a series that
/// appears already at 1, and an alert on the first lease loss of a job would
/// never fire. The last-success and remaining-time gauges are not primed: a
/// zero there would read as "never succeeded" or "expired". Priming twice is
/// harmless (it adds zero).
pub(crate) fn prime(job: &str) {
    for outcome in HeartbeatOutcome::ALL {
        counter!(names::HEARTBEATS, "outcome" => outcome.as_str()).increment(0);
    }
    for state in ["in_transaction", "in_failed_transaction"] {
        counter!(names::POISONED_CONNECTIONS, "state" => state).increment(0);
    }
    for outcome in ClaimOutcome::ALL {
        counter!(names::CLAIMS, "job_name" => job.to_owned(), "outcome" => outcome.as_str()).increment(0);
    }
    for reason in [CancelReason::Stolen, CancelReason::Expired, CancelReason::Deadline] {
        counter!(names::LOST, "job_name" => job.to_owned(), "reason" => reason.as_str()).increment(0);
    }
    for outcome in [
        RunOutcome::Succeeded,
        RunOutcome::Failed,
        RunOutcome::Cancelled,
        RunOutcome::Panicked,
        RunOutcome::Lost,
    ] {
        counter!(names::RUNS, "job_name" => job.to_owned(), "outcome" => outcome.as_str()).increment(0);
    }
    counter!(names::FENCE_REJECTIONS, "job_name" => job.to_owned()).increment(0);
    counter!(names::TIMEOUTS, "job_name" => job.to_owned()).increment(0);
    gauge!(names::HELD, "job_name" => job.to_owned()).increment(0.0);
    gauge!(names::JOBS_PAUSED, "job_name" => job.to_owned()).increment(0.0);
}

/// Counts a claim attempt.
pub(crate) fn claim(job: &str, outcome: ClaimOutcome) {
    counter!(names::CLAIMS, "job_name" => job.to_owned(), "outcome" => outcome.as_str()).increment(1);
}

pub(crate) fn lost(job: &str, reason: CancelReason) {
    counter!(names::LOST, "job_name" => job.to_owned(), "reason" => reason.as_str()).increment(1);
}

/// Counts a run cancelled at its time limit.
pub(crate) fn timed_out(job: &str) {
    counter!(names::TIMEOUTS, "job_name" => job.to_owned()).increment(1);
}

pub(crate) fn heartbeat(outcome: HeartbeatOutcome, took: Duration) {
    counter!(names::HEARTBEATS, "outcome" => outcome.as_str()).increment(1);
    histogram!(names::HEARTBEAT_DURATION).record(took.as_secs_f64());
}

pub(crate) fn run_finished(job: &str, outcome: RunOutcome, took: Duration) {
    counter!(names::RUNS, "job_name" => job.to_owned(), "outcome" => outcome.as_str()).increment(1);
    histogram!(names::RUN_DURATION, "job_name" => job.to_owned()).record(took.as_secs_f64());
    if outcome == RunOutcome::Succeeded {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        gauge!(names::LAST_SUCCESS, "job_name" => job.to_owned()).set(now.as_secs_f64());
    }
}

/// A run of `job` that ended without a release, as the claim that took its
/// key over recorded it: counted with the finished runs, outcome `lost`
/// (its duration is not known, so none is recorded).
pub(crate) fn run_lost(job: &str) {
    counter!(names::RUNS, "job_name" => job.to_owned(), "outcome" => RunOutcome::Lost.as_str()).increment(1);
}

pub(crate) fn held(job: &str, delta: f64) {
    gauge!(names::HELD, "job_name" => job.to_owned()).increment(delta);
}

pub(crate) fn remaining(job: &str, left: Duration) {
    gauge!(names::REMAINING, "job_name" => job.to_owned()).set(left.as_secs_f64());
}

pub(crate) fn fence_wait(job: &str, took: Duration) {
    histogram!(names::FENCE_WAIT, "job_name" => job.to_owned()).record(took.as_secs_f64());
}

pub(crate) fn fence_rejected(job: &str) {
    counter!(names::FENCE_REJECTIONS, "job_name" => job.to_owned()).increment(1);
}

/// The concurrency limit, set at start (and runs in progress, from zero).
pub(crate) fn concurrency_limit(limit: usize) {
    gauge!(names::MAX_CONCURRENT_RUNS).set(limit as f64);
    gauge!(names::RUNS_IN_PROGRESS).increment(0.0);
}

/// How many of this replica's keys of `job` are paused.
pub(crate) fn jobs_paused(job: &str, keys: usize) {
    gauge!(names::JOBS_PAUSED, "job_name" => job.to_owned()).set(keys as f64);
}

/// A job's fleet-wide limit as a poll read it (0: lifted).
pub(crate) fn fleet_limit(job: &str, limit: u32) {
    gauge!(names::FLEET_LIMIT, "job_name" => job.to_owned()).set(f64::from(limit));
}

/// How long a key of a job with a fleet-wide limit waited for its claim.
pub(crate) fn fleet_limit_wait(job: &str, waited: Duration) {
    histogram!(names::FLEET_LIMIT_WAIT, "job_name" => job.to_owned()).record(waited.as_secs_f64());
}

/// Keys of `job` the latest claim found held back longer than their interval.
pub(crate) fn fleet_limit_overdue(job: &str, keys: usize) {
    gauge!(names::FLEET_LIMIT_OVERDUE, "job_name" => job.to_owned()).set(keys as f64);
}

/// The server's WAL timeline, as a poll read it.
pub(crate) fn server_timeline(timeline: i64) {
    gauge!(names::SERVER_TIMELINE).set(timeline as f64);
}

/// One more (`1.0`) or one fewer (`-1.0`) run in progress.
pub(crate) fn runs_in_progress(delta: f64) {
    gauge!(names::RUNS_IN_PROGRESS).increment(delta);
}

/// How many stored keys of the kind `job` this replica cannot run.
pub(crate) fn keys_bad_args(job: &str, keys: usize) {
    gauge!(names::KEYS_BAD_ARGS, "job_name" => job.to_owned()).set(keys as f64);
}

/// How many stored keys belong to kinds no live replica registers.
pub(crate) fn keys_unknown_kind(keys: i64) {
    gauge!(names::KEYS_UNKNOWN_KIND).set(keys as f64);
}

pub(crate) fn poisoned_connection(state: &'static str) {
    counter!(names::POISONED_CONNECTIONS, "state" => state).increment(1);
}
