//! When a job runs: an interval, a cron expression, or only on trigger.
//!
//! Slots are computed from the *server's* time (the claim returns it), never
//! from this machine's wall clock, so every replica agrees on them.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use crate::error::{Error, Result};

/// When a job is due.
///
/// ```
/// use std::time::Duration;
/// use leasehold::Schedule;
///
/// let every_five_minutes = Schedule::every(Duration::from_secs(300));
/// let nightly = Schedule::cron("0 3 * * *").expect("valid cron");
/// assert!(Schedule::cron("0 25 * * *").is_err()); // hour 25
/// # let _ = (every_five_minutes, nightly, Schedule::Manual);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Schedule {
    /// Once per period, in slots aligned on the Unix epoch (server clock):
    /// every replica computes the same slot boundaries.
    Every(Duration),
    /// At the times a cron expression matches, in UTC (5 fields, or 6 with
    /// seconds first).
    Cron(Box<croner::Cron>),
    /// Only when triggered with `Runtime::trigger`.
    Manual,
}

impl Schedule {
    /// Once per `period`.
    pub fn every(period: Duration) -> Schedule {
        Schedule::Every(period)
    }

    /// At the times `expr` matches (UTC). Errors name the expression and
    /// what is wrong with it.
    pub fn cron(expr: &str) -> Result<Schedule> {
        croner::Cron::from_str(expr)
            .map(|cron| Schedule::Cron(Box::new(cron)))
            .map_err(|e| {
                Error::invalid(
                    "cron expression",
                    expr,
                    format!(
                        "{e}; expected 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first"
                    ),
                )
            })
    }

    /// Checks the schedule itself (a zero period, a cron that never fires).
    pub(crate) fn validate(&self) -> Result<()> {
        match self {
            Schedule::Every(period) if *period < Duration::from_millis(100) => Err(Error::invalid(
                "schedule period",
                period,
                "it must be at least 100ms; use a longer period",
            )),
            Schedule::Cron(cron) => self
                .next_after(DateTime::<Utc>::UNIX_EPOCH + TimeDelta::days(365 * 30))
                .map(drop)
                .ok_or_else(|| Error::invalid("cron expression", cron.pattern.to_string(), "it never fires")),
            _ => Ok(()),
        }
    }

    /// The first slot strictly after `server_now`, or `None` for a manual
    /// schedule (or a cron with no future match).
    pub(crate) fn next_after(&self, server_now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Schedule::Every(period) => {
                let period_us = i64::try_from(period.as_micros()).ok()?.max(1);
                let now_us = server_now.timestamp_micros();
                let next = (now_us.div_euclid(period_us) + 1).checked_mul(period_us)?;
                DateTime::from_timestamp_micros(next)
            }
            Schedule::Cron(cron) => cron.find_next_occurrence(&server_now, false).ok(),
            Schedule::Manual => None,
        }
    }
}

/// The due time of a key that only runs when triggered (year 9999): far
/// enough that no slot ever reaches it, and a valid `timestamptz`.
pub(crate) fn never() -> DateTime<Utc> {
    DateTime::from_timestamp(253_402_214_400, 0).unwrap_or_default()
}

/// When a key that has never run is first due: its first slot after
/// `server_now`, so a nightly job does not run at deploy time; never for a
/// manual job.
pub(crate) fn first_due(schedule: &Schedule, server_now: DateTime<Utc>) -> DateTime<Utc> {
    schedule.next_after(server_now).unwrap_or_else(never)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn interval_slots_are_aligned_so_every_replica_agrees() {
        let five_min = Schedule::every(Duration::from_secs(300));
        assert_eq!(
            five_min.next_after(at("2026-11-30T03:02:10Z")),
            Some(at("2026-11-30T03:05:00Z"))
        );
        assert_eq!(
            five_min.next_after(at("2026-11-30T03:05:00Z")),
            Some(at("2026-11-30T03:10:00Z"))
        );
    }

    #[test]
    fn cron_slots_and_errors() {
        let nightly = Schedule::cron("0 3 * * *").unwrap();
        assert_eq!(
            nightly.next_after(at("2026-11-30T03:00:00Z")),
            Some(at("2026-12-01T03:00:00Z"))
        );
        let msg = Schedule::cron("0 3 * *").unwrap_err().to_string();
        assert!(msg.contains("\"0 3 * *\"") && msg.contains("5 fields"), "{msg}");
        assert!(Schedule::Manual.next_after(at("2026-11-30T03:00:00Z")).is_none());
    }

    #[test]
    fn tiny_periods_are_rejected() {
        assert!(Schedule::every(Duration::ZERO).validate().is_err());
        assert!(Schedule::every(Duration::from_secs(1)).validate().is_ok());
    }
}
