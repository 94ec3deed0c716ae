//! Why a run was cancelled: a leaf type shared by the tenure, the guard,
//! the errors, the metrics and the run history.

/// Why a run lost its right to continue.
///
/// Carried by [`Error::LeaseLost`](crate::Error::LeaseLost) and by a cancelled
/// `FenceGuard`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CancelReason {
    /// Another holder took the lease over (a renewal found a newer tenure,
    /// or a fenced write met a newer fence).
    Stolen,
    /// The lease expired on the server before it could be renewed.
    Expired,
    /// Renewals kept failing and the local safety deadline passed: the run
    /// was stopped *before* any other replica could claim the lease.
    Deadline,
    /// The runtime is shutting down.
    Shutdown,
    /// An operator paused the key (or its job) and asked for the runs in
    /// progress to stop (`leasehold pause --cancel`).
    Paused,
    /// The key was removed while it ran: from this runtime
    /// ([`Runtime::remove`](crate::Runtime::remove)), or as a key of a job
    /// kind removed fleet-wide (`remove_key`, `leasehold kind remove`).
    Removed,
    /// The run went on past its time limit
    /// ([`JobSettings::timeout`](crate::JobSettings::timeout), `#[job(timeout = "15m")]`).
    /// It still holds its lease while it winds down within its grace; the
    /// key runs again at its next slot.
    Timeout,
}

impl CancelReason {
    /// A stable lower-case name, used as a metrics label and in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            CancelReason::Stolen => "stolen",
            CancelReason::Expired => "expired",
            CancelReason::Deadline => "deadline",
            CancelReason::Shutdown => "shutdown",
            CancelReason::Paused => "paused",
            CancelReason::Removed => "removed",
            CancelReason::Timeout => "timeout",
        }
    }
}

impl std::fmt::Display for CancelReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
