//! What leasehold's metrics are called, how their histograms are bucketed
//! and how they are described to a recorder: read by the recording
//! functions and by the Prometheus exporter alike.

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};

/// Metric names, exported so dashboards and tests name them once.
pub mod names {
    /// Counter: claims by `job_name` and `outcome` (acquired, held_elsewhere, not_due, paused, limited, too_late, error).
    pub const CLAIMS: &str = "leasehold_lease_claims_total";
    /// Counter: lost leases by `job_name` and `reason` (stolen, expired, deadline).
    pub const LOST: &str = "leasehold_lease_lost_total";
    /// Counter: heartbeat statements by `outcome` (renewed, lost, busy, error).
    pub const HEARTBEATS: &str = "leasehold_heartbeats_total";
    /// Histogram: duration of one heartbeat statement, in seconds.
    pub const HEARTBEAT_DURATION: &str = "leasehold_heartbeat_duration_seconds";
    /// Counter: finished runs by `job_name` and `outcome` (succeeded, failed, cancelled, panicked, lost).
    pub const RUNS: &str = "leasehold_job_runs_total";
    /// Counter: runs cancelled because they went past their time limit
    /// (`JobSettings::timeout`), by `job_name`.
    pub const TIMEOUTS: &str = "leasehold_run_timeouts_total";
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
    /// Gauge: a job's fleet-wide limit (`Controls::set_limit`) as this
    /// replica's latest poll read it, by `job_name`; 0 once lifted. Take
    /// `max by (job_name)` across replicas.
    pub const FLEET_LIMIT: &str = "leasehold_fleet_limit";
    /// Histogram: how long a key of a job with a fleet-wide limit waited,
    /// from falling due to its claim, by `job_name`, in seconds.
    pub const FLEET_LIMIT_WAIT: &str = "leasehold_fleet_limit_wait_seconds";
    /// Gauge: keys of a job with a fleet-wide limit that this replica's
    /// latest claim of them found held back for longer than their schedule's
    /// interval, by `job_name`: the limit is too low for the schedule.
    pub const FLEET_LIMIT_OVERDUE: &str = "leasehold_fleet_limit_overdue_keys";

    /// All of the above.
    pub const ALL: &[&str] = &[
        CLAIMS,
        LOST,
        HEARTBEATS,
        HEARTBEAT_DURATION,
        RUNS,
        TIMEOUTS,
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
        FLEET_LIMIT,
        FLEET_LIMIT_WAIT,
        FLEET_LIMIT_OVERDUE,
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

    /// For [`super::names::FLEET_LIMIT_WAIT`]: 10 ms to 1 day. A key whose
    /// job is not at its limit waits for its replica's claim (milliseconds);
    /// one held back waits for runs of its job to end.
    pub const FLEET_LIMIT_WAIT: &[f64] = &[
        0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 14400.0, 86400.0,
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
         paused, limited, too_late, error); one claim statement proposes many keys."
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
        "Finished runs by job and outcome (succeeded, failed, cancelled, panicked; lost: ended without a release, counted by the replica that took the key over)."
    );
    describe_counter!(
        names::TIMEOUTS,
        Unit::Count,
        "Runs cancelled because they went past their time limit (JobSettings::timeout), by job; each is also \
         a cancelled run with reason timeout in the history."
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
        names::FLEET_LIMIT,
        Unit::Count,
        "A job's fleet-wide limit on runs at once (leasehold limit set), as this replica's latest poll read it; \
         0 once lifted."
    );
    describe_histogram!(
        names::FLEET_LIMIT_WAIT,
        Unit::Seconds,
        "How long a key of a job with a fleet-wide limit waited from falling due to its claim, by job, in \
         seconds."
    );
    describe_gauge!(
        names::FLEET_LIMIT_OVERDUE,
        Unit::Count,
        "Keys of a job with a fleet-wide limit that this replica's latest claim of them found held back for \
         longer than their schedule's interval, by job: the limit is too low for the schedule."
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
