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
//! | `leasehold_job_runs_total` | counter | job_name, outcome | finished runs: `succeeded`, `failed`, `cancelled`, `panicked` |
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
use metrics::{Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};

use crate::cancel::CancelReason;

/// The handle of a Prometheus recorder: [`PrometheusHandle::render`] is the
/// text a Prometheus scrape expects.
#[cfg(feature = "prometheus")]
pub use metrics_exporter_prometheus::PrometheusHandle;

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
pub fn prometheus_handle() -> crate::Result<PrometheusHandle> {
    crate::exporter::handle()
}

/// Metric names, exported so dashboards and tests name them once.
pub mod names {
    /// Counter: claims by `job_name` and `outcome` (acquired, held_elsewhere, not_due, paused, too_late, error).
    pub const CLAIMS: &str = "leasehold_lease_claims_total";
    /// Counter: lost leases by `job_name` and `reason` (stolen, expired, deadline).
    pub const LOST: &str = "leasehold_lease_lost_total";
    /// Counter: heartbeat statements by `outcome` (renewed, lost, busy, error).
    pub const HEARTBEATS: &str = "leasehold_heartbeats_total";
    /// Histogram: duration of one heartbeat statement, in seconds.
    pub const HEARTBEAT_DURATION: &str = "leasehold_heartbeat_duration_seconds";
    /// Counter: finished runs by `job_name` and `outcome` (succeeded, failed, cancelled, panicked).
    pub const RUNS: &str = "leasehold_job_runs_total";
    /// Histogram: run duration by `job_name`, in seconds.
    pub const RUN_DURATION: &str = "leasehold_job_duration_seconds";
    /// Gauge: leases this replica holds, by `job_name`.
    pub const HELD: &str = "leasehold_leases_held";
    /// Gauge: server time left on the lease at the last renewal, by `job_name`.
    pub const REMAINING: &str = "leasehold_lease_remaining_seconds";
    /// Counter: fenced writes rejected for a stale fence, by `job_name`.
    pub const FENCE_REJECTIONS: &str = "leasehold_fence_rejections_total";
    /// Histogram: how long a fenced transaction's fence advance took,
    /// row-lock wait included, by `job_name`, in seconds.
    pub const FENCE_WAIT: &str = "leasehold_fence_wait_seconds";
    /// Gauge: Unix time of the last successful run, by `job_name`.
    pub const LAST_SUCCESS: &str = "leasehold_job_last_success_timestamp_seconds";
    /// Counter: pooled connections found inside a transaction leasehold did
    /// not open, and closed, by `state` (in_transaction, in_failed_transaction).
    pub const POISONED_CONNECTIONS: &str = "leasehold_poisoned_connections_total";
    /// Gauge: runs in progress on this replica.
    pub const RUNS_IN_PROGRESS: &str = "leasehold_runs_in_progress";
    /// Gauge: this replica's limit on runs at once.
    pub const MAX_CONCURRENT_RUNS: &str = "leasehold_max_concurrent_runs";
    /// Gauge: keys of a job registered on this replica that are paused (by
    /// key or by job), as of its latest poll. Take `max by (job_name)`
    /// across replicas.
    pub const JOBS_PAUSED: &str = "leasehold_jobs_paused";
    /// Gauge: the server's WAL timeline as this replica's latest poll read
    /// it; it rises on every promotion of a standby (`changes()` > 0 is a
    /// failover).
    pub const SERVER_TIMELINE: &str = "leasehold_server_timeline";
    /// Gauge: stored keys of a job kind whose arguments or schedule this
    /// replica cannot read (not run until updated).
    pub const KEYS_BAD_ARGS: &str = "leasehold_keys_bad_args";
    /// Gauge: stored keys of job kinds no live replica registers. Take
    /// `max` across replicas.
    pub const KEYS_UNKNOWN_KIND: &str = "leasehold_keys_unknown_kind";

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
        FENCE_WAIT,
        LAST_SUCCESS,
        POISONED_CONNECTIONS,
        RUNS_IN_PROGRESS,
        MAX_CONCURRENT_RUNS,
        JOBS_PAUSED,
        SERVER_TIMELINE,
        KEYS_BAD_ARGS,
        KEYS_UNKNOWN_KIND,
    ];
}

/// Histogram bucket upper bounds, in seconds, as the Prometheus exporter of
/// [`RuntimeBuilder::prometheus`](crate::RuntimeBuilder::prometheus) uses
/// them. Reuse them if you install your own recorder.
pub mod buckets {
    /// For [`super::names::HEARTBEAT_DURATION`]: 1 ms to 5 s. One renewal
    /// statement normally takes a few milliseconds; anything near the
    /// deadline margin (lease/10 by default) puts runs at risk.
    pub const HEARTBEAT_DURATION: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

    /// For [`super::names::RUN_DURATION`]: 10 ms to 8 hours, roughly
    /// ×2–×3 per step.
    pub const RUN_DURATION: &[f64] = &[
        0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0,
        3600.0, 7200.0, 14400.0, 28800.0,
    ];

    /// For [`super::names::FENCE_WAIT`]: 1 ms to 5 min. An uncontended
    /// advance takes a millisecond or two; waits of seconds mean a fenced
    /// transaction of an older run held the fence row.
    pub const FENCE_WAIT: &[f64] = &[
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    ];
}

/// Describes every leasehold metric (help text and unit) to the recorder
/// installed now.
///
/// The Prometheus exporter of
/// [`RuntimeBuilder::prometheus`](crate::RuntimeBuilder::prometheus) calls
/// it for you. If you install your own `metrics` recorder, call it once,
/// after installing it; calling it again only repeats the same
/// descriptions.
pub fn describe() {
    describe_counter!(
        names::CLAIMS,
        Unit::Count,
        "Keys proposed in the scheduler's batch claims, by job and answer (acquired, held_elsewhere, not_due, \
         paused, too_late, error); one claim statement proposes many keys."
    );
    describe_counter!(
        names::LOST,
        Unit::Count,
        "Runs stopped because their lease was lost, by job and reason (stolen, expired, deadline)."
    );
    describe_counter!(
        names::HEARTBEATS,
        Unit::Count,
        "Heartbeat statements (one per tick renews every lease of this replica) by outcome (renewed, lost, busy, error)."
    );
    describe_histogram!(
        names::HEARTBEAT_DURATION,
        Unit::Seconds,
        "Duration of one heartbeat (renewal) statement, in seconds."
    );
    describe_counter!(
        names::RUNS,
        Unit::Count,
        "Finished runs by job and outcome (succeeded, failed, cancelled, panicked)."
    );
    describe_histogram!(
        names::RUN_DURATION,
        Unit::Seconds,
        "Run duration by job, in seconds, whatever the outcome."
    );
    describe_gauge!(names::HELD, Unit::Count, "Leases this replica holds right now, by job.");
    describe_gauge!(
        names::REMAINING,
        Unit::Seconds,
        "Server time left on the lease right after its last successful renewal, by job, in seconds."
    );
    describe_counter!(
        names::FENCE_REJECTIONS,
        Unit::Count,
        "Fenced writes rejected because a newer run of the key already wrote, by job."
    );
    describe_histogram!(
        names::FENCE_WAIT,
        Unit::Seconds,
        "How long a fenced transaction's fence advance took, row-lock wait included, by job, in seconds: a long \
         one is a run waiting for an older run's open fenced transaction."
    );
    describe_counter!(
        names::POISONED_CONNECTIONS,
        Unit::Count,
        "Pooled connections found inside a transaction leasehold did not open (service code or a dropped \
         sqlx Pool::begin), closed and replaced, by state (in_transaction, in_failed_transaction)."
    );
    describe_gauge!(
        names::LAST_SUCCESS,
        Unit::Seconds,
        "Unix time of the last successful run of the job in this replica, in seconds."
    );
    describe_gauge!(
        names::RUNS_IN_PROGRESS,
        Unit::Count,
        "Runs in progress on this replica."
    );
    describe_gauge!(
        names::MAX_CONCURRENT_RUNS,
        Unit::Count,
        "This replica's limit on runs at once (RuntimeBuilder::max_concurrent_runs); the scheduler leaves \
         keys beyond it to other replicas."
    );
    describe_gauge!(
        names::JOBS_PAUSED,
        Unit::Count,
        "Keys of this job registered on this replica that are paused (leasehold pause), as of the latest poll."
    );
    describe_gauge!(
        names::SERVER_TIMELINE,
        Unit::Count,
        "The server's WAL timeline as this replica's latest poll read it; it rises on every promotion of a \
         standby (a failover)."
    );
    describe_gauge!(
        names::KEYS_BAD_ARGS,
        Unit::Count,
        "Stored keys of this job kind whose arguments or schedule this replica cannot read; they are not run \
         until updated."
    );
    describe_gauge!(
        names::KEYS_UNKNOWN_KIND,
        Unit::Count,
        "Stored keys of job kinds that no live replica registers: they run nowhere."
    );
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
    /// Acquired, but the answer came after the tenure's local deadline:
    /// handed back unrun.
    TooLate,
    /// The claim statement failed.
    Error,
}

impl ClaimOutcome {
    /// Every outcome, to create the series at zero.
    const ALL: [ClaimOutcome; 6] = [
        ClaimOutcome::Acquired,
        ClaimOutcome::HeldElsewhere,
        ClaimOutcome::NotDue,
        ClaimOutcome::Paused,
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
    ] {
        counter!(names::RUNS, "job_name" => job.to_owned(), "outcome" => outcome.as_str()).increment(0);
    }
    counter!(names::FENCE_REJECTIONS, "job_name" => job.to_owned()).increment(0);
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
