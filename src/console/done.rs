//! What an operator's action did, said once on the page it returns to:
//! left by the action's POST with [`Access::flash`](super::access::Access::flash),
//! taken by the actor's next view of that page.

/// What an action did, for the key's (or job's) page to say once: the POST
/// that took the action leaves it for the actor ([`Access::flash`](super::access::Access::flash)),
/// the next view of that page by the same actor takes it. Nothing in a URL
/// picks it, so a link cannot make the console say an action was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Done {
    Triggered,
    TriggeredPaused,
    NotRegistered,
    PausedCancelled,
    PausedRunning,
    Paused,
    Resumed,
    ResumedOverdue,
    NotPaused,
    Revoked,
    StillHeld,
    NoRow,
    JobNotPaused,
    TriggeredJob,
}

impl Done {
    pub(super) fn text(self) -> &'static str {
        match self {
            Done::Triggered => "Triggered: the first replica to claim it runs it now.",
            Done::TriggeredPaused => "Triggered, but the key is paused: it runs once resumed.",
            Done::NotRegistered => "Not found: no runtime registered this key.",
            Done::PausedCancelled => "Paused; the run in progress is cancelled at its next heartbeat.",
            Done::PausedRunning => "Paused; the run in progress finishes.",
            Done::Paused => "Paused.",
            Done::Resumed => "Resumed: it runs at its next slot.",
            Done::ResumedOverdue => "Resumed: it was overdue and runs now.",
            Done::NotPaused => "Not paused by its own name (is its job paused? `leasehold resume --job`).",
            Done::Revoked => {
                "Revoked: the tenure is over and its holder fenced out; the new fence is in the table below."
            }
            Done::StillHeld => "Still held: nothing changed.",
            Done::NoRow => "Not found: no lease row.",
            Done::JobNotPaused => "Not paused: this job had no pause in force.",
            Done::TriggeredJob => {
                "Triggered every key of the job: the first replica to claim each runs it now (a paused key once \
                 resumed)."
            }
        }
    }
}
