//! How a recorded run is shown: its outcome in words and its JSON form,
//! shared by `history` and `status`.

use chrono::{DateTime, Utc};
use leasehold::{runtime::RunOutcome, store::RunRecord};
use serde::Serialize;

use crate::text;

/// `succeeded`, `failed`, `cancelled (paused)`, `lost (lease expired
/// without a release)`, `lost (its replica's session ended without a
/// release)`; `, earlier life` after it for a run of an earlier
/// life of its key (removed since, or removed and added again).
pub(crate) fn outcome_text(run: &RunRecord) -> String {
    let outcome = match (run.outcome, run.reason.as_deref()) {
        (RunOutcome::Cancelled, Some(reason)) => format!("cancelled ({})", text::cell(reason)),
        (RunOutcome::Lost, Some("session_ended")) => "lost (its replica's session ended without a release)".to_owned(),
        (RunOutcome::Lost, _) => "lost (lease expired without a release)".to_owned(),
        (outcome, _) => outcome.as_str().to_owned(),
    };
    if run.earlier_life {
        format!("{outcome}, {EARLIER_LIFE}")
    } else {
        outcome
    }
}

/// How a run of an earlier life of its key is marked.
pub(crate) const EARLIER_LIFE: &str = "earlier life";

/// One run in `--json` output (`history`, and `status`'s `last_run`).
#[derive(Serialize)]
pub(crate) struct RunJson<'a> {
    run_no: i64,
    job_name: Option<&'a str>,
    fence: i64,
    holder: &'a str,
    /// The schedule slot it ran for; `null` for a triggered or manual run.
    scheduled_for: Option<DateTime<Utc>>,
    started_at: DateTime<Utc>,
    ended_at: DateTime<Utc>,
    duration_seconds: f64,
    /// `succeeded`, `failed`, `cancelled`, `panicked`, `skipped`, or
    /// `lost` (the run ended without a release: its replica crashed, froze
    /// past its lease or could not write its release; recorded by the
    /// replica that took the key over).
    outcome: &'static str,
    /// Why a cancelled run stopped: `stolen`, `expired`, `deadline`,
    /// `shutdown`, `paused`, `removed`; for a lost run, `expired` (taken
    /// over when its lease expired) or `session_ended` (taken over early:
    /// its replica's liveness session ended, docs/design.md invariant 10).
    reason: Option<&'a str>,
    /// The job's error or panic message, in full (at most 2,000 bytes).
    error: Option<&'a str>,
    /// The run belongs to an earlier life of its key: it started before
    /// the key (of a job kind) was removed, or removed and added again.
    earlier_life: bool,
}

impl<'a> From<&'a RunRecord> for RunJson<'a> {
    fn from(run: &'a RunRecord) -> Self {
        RunJson {
            run_no: run.run_no,
            job_name: run.job_name.as_deref(),
            fence: run.fence,
            holder: &run.holder,
            scheduled_for: run.scheduled_for,
            started_at: run.started_at,
            ended_at: run.ended_at,
            duration_seconds: run.duration().as_secs_f64(),
            outcome: run.outcome.as_str(),
            reason: run.reason.as_deref(),
            error: run.error.as_deref(),
            earlier_life: run.earlier_life,
        }
    }
}
