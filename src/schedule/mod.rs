//! When a job runs: an interval, a cron expression (in UTC or in an IANA
//! time zone), or only on trigger — and what happens to the slots missed
//! while no replica ran it ([`CatchUp`]).
//!
//! Slots are computed from the *server's* time (the claim returns it), never
//! from this machine's wall clock, so every replica agrees on them.

// One file per concern:
// - `mod.rs`: `Schedule`, slot arithmetic (`Schedule::next_after`,
//   `Schedule::latest_slots`) and the public view of it
//   (`Schedule::upcoming`);
// - `cron.rs`: `CronSchedule`, cron in a time zone and its
//   daylight-saving rule;
// - `text.rs`: the text forms of both (`every 5m`, `cron 0 3 * * * in
//   Europe/Paris`, `all(24)`), stored with the keys of job kinds;
// - `catch_up.rs`: `CatchUp` and the slot planning the runtime does when
//   it claims a key (`plan`, `next_after_success`, and
//   `next_after_change` for a run whose key's schedule changed meanwhile).

mod catch_up;
mod cron;
mod text;

use std::collections::VecDeque;
use std::time::Duration;

use chrono::{DateTime, Utc};

pub use self::catch_up::{CatchUp, MAX_CATCH_UP};
pub(crate) use self::catch_up::{SlotPlan, next_after_change, next_after_success, plan};
pub use self::cron::CronSchedule;
use crate::error::Result;
use crate::validate;

/// When a job is due.
///
/// ```
/// use std::time::Duration;
/// use leasehold::Schedule;
///
/// let every_five_minutes = Schedule::every(Duration::from_secs(300));
/// let nightly_utc = Schedule::cron("0 3 * * *").expect("valid cron");
/// // 02:30 on the clocks of Paris: once per local day, also on the days
/// // the clocks change (see `Schedule::cron_in`).
/// let nightly_paris = Schedule::cron_in("30 2 * * *", "Europe/Paris").expect("valid cron and zone");
/// assert!(Schedule::cron("0 25 * * *").is_err()); // hour 25
/// assert!(Schedule::cron_in("0 3 * * *", "Europe/Pariss").is_err()); // no such zone
/// # let _ = (every_five_minutes, nightly_utc, nightly_paris, Schedule::Manual);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Schedule {
    /// Once per period, in slots aligned on the Unix epoch (server clock):
    /// every replica computes the same slot boundaries.
    Every(Duration),
    /// At the times a cron expression matches, in UTC or in an IANA time
    /// zone (5 fields, or 6 with seconds first).
    Cron(Box<CronSchedule>),
    /// Only when triggered with `Runtime::trigger`.
    Manual,
}

impl Schedule {
    /// Once per `period`.
    pub fn every(period: Duration) -> Schedule {
        Schedule::Every(period)
    }

    /// At the times `expr` matches, in UTC. Errors name the expression and
    /// what is wrong with it.
    pub fn cron(expr: &str) -> Result<Schedule> {
        CronSchedule::parse(expr, None).map(|cron| Schedule::Cron(Box::new(cron)))
    }

    /// At the times `expr` matches on the clocks of the IANA time zone `tz`
    /// (`"Europe/Paris"`, `"America/New_York"`, `"UTC"`).
    ///
    /// Across daylight-saving changes it follows the rule of Vixie cron and
    /// cronie:
    ///
    /// - an expression with fixed times of day (no `*` in its second, minute
    ///   or hour field, e.g. `30 2 * * *` or `0 2,14 * * *`) runs **once**
    ///   for each matching local time: a time the clocks skip (02:30 on the
    ///   spring-forward night) runs at the first instant after the gap
    ///   (03:00 new time), and a time the clocks show twice (fall-back
    ///   night) runs only at its first occurrence;
    /// - an expression with a `*` in one of those fields (`0 * * * *`,
    ///   `*/15 * * * *`, `@hourly`) is periodic and runs at every real
    ///   instant whose local time matches: an hourly job runs every real hour,
    ///   so none on the skipped hour and twice on the hour shown twice.
    ///
    /// An unknown zone is an error naming it (with the closest known name
    /// when there is one).
    ///
    /// ```
    /// use leasehold::Schedule;
    ///
    /// let nightly = Schedule::cron_in("30 2 * * *", "Europe/Paris")?;
    /// let err = Schedule::cron_in("30 2 * * *", "Europe/Pariss").unwrap_err();
    /// assert!(err.to_string().contains("did you mean \"Europe/Paris\"?"), "{err}");
    /// # let _ = nightly;
    /// # Ok::<(), leasehold::Error>(())
    /// ```
    pub fn cron_in(expr: &str, tz: &str) -> Result<Schedule> {
        CronSchedule::parse(expr, Some(tz)).map(|cron| Schedule::Cron(Box::new(cron)))
    }

    /// The slots strictly after `after`, in order: the instants (server
    /// time) at which the runtime makes a key of this schedule due. Nothing
    /// for a manual schedule; ends if a cron has no later match.
    ///
    /// A pure computation — the runtime's own slot arithmetic, with no
    /// database or runtime — to show "next runs" in a service's UI, or to
    /// test a cron in a time zone across its daylight-saving changes. With
    /// a schedule that fires often, bound it with `take`.
    ///
    /// ```
    /// use chrono::{DateTime, Utc};
    /// use leasehold::Schedule;
    ///
    /// // 02:30 on the clocks of Paris, around the night the clocks go from
    /// // 02:00 to 03:00 (29 March 2026): that night's run is at 03:00 CEST.
    /// let nightly = Schedule::cron_in("30 2 * * *", "Europe/Paris")?;
    /// let after: DateTime<Utc> = "2026-03-27T12:00:00Z".parse().unwrap();
    /// let next: Vec<String> = nightly.upcoming(after).take(3).map(|t| t.to_rfc3339()).collect();
    /// assert_eq!(next, [
    ///     "2026-03-28T01:30:00+00:00", // 02:30 CET
    ///     "2026-03-29T01:00:00+00:00", // 03:00 CEST: 02:30 does not exist that night
    ///     "2026-03-30T00:30:00+00:00", // 02:30 CEST
    /// ]);
    /// assert_eq!(Schedule::Manual.upcoming(after).next(), None);
    /// # Ok::<(), leasehold::Error>(())
    /// ```
    pub fn upcoming(&self, after: DateTime<Utc>) -> Upcoming<'_> {
        Upcoming {
            schedule: self,
            cursor: Some(after),
        }
    }

    /// Checks the schedule itself (a period under 100ms, a cron that never
    /// fires).
    pub(crate) fn validate(&self) -> Result<()> {
        match self {
            Schedule::Every(period) => leasehold_rules::period(*period).map(drop).map_err(validate::rule),
            Schedule::Cron(cron) => cron.validate(),
            Schedule::Manual => Ok(()),
        }
    }

    /// The first slot strictly after `server_now`, or `None` for a manual
    /// schedule (or a cron with no future match).
    pub(crate) fn next_after(&self, server_now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Schedule::Every(period) => {
                let period_us = period_micros(*period)?;
                let now_us = server_now.timestamp_micros();
                let next = (now_us.div_euclid(period_us) + 1).checked_mul(period_us)?;
                DateTime::from_timestamp_micros(next)
            }
            Schedule::Cron(cron) => cron.next_after(server_now),
            Schedule::Manual => None,
        }
    }

    /// The latest `n` slots `s` with `after < s <= until`, oldest first
    /// (fewer if there are fewer; none for a manual schedule).
    ///
    /// Bounded work: an interval is computed arithmetically; a cron is
    /// walked forward with [`next_after`](Schedule::next_after) — the same
    /// slots the runtime runs — at most [`MAX_WALK`] steps per walk. A
    /// stretch with more slots than that (a per-second cron down for days)
    /// is narrowed by bisection to a start from which at most `MAX_WALK`
    /// slots lead to `until`, so at most 64 walks more; should that still
    /// fail (it cannot for slots at least a microsecond apart), the slots
    /// from the latest start tried are returned.
    pub(crate) fn latest_slots(&self, after: DateTime<Utc>, until: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        if n == 0 || until <= after {
            return Vec::new();
        }
        match self {
            Schedule::Every(period) => {
                let Some(period_us) = period_micros(*period) else {
                    return Vec::new();
                };
                let first = after.timestamp_micros().div_euclid(period_us) + 1;
                let last = until.timestamp_micros().div_euclid(period_us);
                let n = i64::try_from(n).unwrap_or(i64::MAX);
                let from = first.max(last.saturating_sub(n - 1));
                (from..=last)
                    .filter_map(|k| k.checked_mul(period_us).and_then(DateTime::from_timestamp_micros))
                    .collect()
            }
            Schedule::Cron(_) => {
                let walk = |from| self.walk(from, until, n);
                let (mut lo, mut hi) = match walk(after) {
                    Walk::Done { slots, .. } => return slots.into(),
                    Walk::Capped => (after, until),
                };
                // `walk(lo)` is capped and `walk(hi)` finds fewer than `n`
                // slots; the count falls one slot at a time in between.
                let mut fallback = Vec::new();
                for _ in 0..64 {
                    let mid = lo + (hi - lo) / 2;
                    if mid <= lo {
                        break;
                    }
                    match walk(mid) {
                        Walk::Capped => lo = mid,
                        Walk::Done { slots, count } if count >= n => return slots.into(),
                        Walk::Done { slots, .. } => {
                            hi = mid;
                            fallback = slots.into();
                        }
                    }
                }
                fallback
            }
            Schedule::Manual => Vec::new(),
        }
    }

    /// The slots in `(from, until]`, keeping the latest `n`, or `Capped`
    /// after [`MAX_WALK`] of them without reaching `until`.
    fn walk(&self, from: DateTime<Utc>, until: DateTime<Utc>, n: usize) -> Walk {
        let mut slots = VecDeque::with_capacity(n.min(1024));
        let mut cursor = from;
        for count in 0..MAX_WALK {
            match self.next_after(cursor) {
                Some(slot) if slot <= until => {
                    if slots.len() == n {
                        slots.pop_front();
                    }
                    slots.push_back(slot);
                    cursor = slot;
                }
                _ => return Walk::Done { slots, count },
            }
        }
        Walk::Capped
    }
}

/// The slots of a [`Schedule`] after an instant, in order: see
/// [`Schedule::upcoming`].
#[derive(Debug, Clone)]
#[must_use = "an iterator does nothing until it is consumed"]
pub struct Upcoming<'a> {
    schedule: &'a Schedule,
    /// The latest slot given out (or the start); `None` once there are no
    /// more.
    cursor: Option<DateTime<Utc>>,
}

impl Iterator for Upcoming<'_> {
    type Item = DateTime<Utc>;

    fn next(&mut self) -> Option<DateTime<Utc>> {
        let next = self.schedule.next_after(self.cursor?);
        self.cursor = next;
        next
    }
}

impl std::iter::FusedIterator for Upcoming<'_> {}

/// The most slots [`Schedule::latest_slots`] walks in one go (a cron
/// stretch of more is narrowed first): 100,000 `next_after` steps, a few
/// tens of milliseconds at worst.
pub(crate) const MAX_WALK: usize = 100_000;

/// The outcome of [`Schedule::walk`].
enum Walk {
    /// `until` was reached: the latest slots (at most `n`) and how many
    /// there were in all.
    Done {
        slots: VecDeque<DateTime<Utc>>,
        count: usize,
    },
    /// [`MAX_WALK`] slots without reaching `until`.
    Capped,
}

/// A period in microseconds, at least 1; `None` if it does not fit.
fn period_micros(period: Duration) -> Option<i64> {
    Some(i64::try_from(period.as_micros()).ok()?.max(1))
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
pub(crate) fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;

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
    fn upcoming_slots_of_an_interval_and_of_a_manual_schedule() {
        let five_min = Schedule::every(Duration::from_secs(300));
        let got: Vec<_> = five_min.upcoming(at("2026-11-30T03:02:10Z")).take(3).collect();
        let want = ["03:05", "03:10", "03:15"].map(|t| at(&format!("2026-11-30T{t}:00Z")));
        assert_eq!(got, want);
        // Strictly after: a slot itself is not upcoming.
        assert_eq!(
            five_min.upcoming(at("2026-11-30T03:05:00Z")).next(),
            Some(at("2026-11-30T03:10:00Z"))
        );
        assert_eq!(Schedule::Manual.upcoming(at("2026-11-30T03:00:00Z")).count(), 0);
    }

    #[test]
    fn upcoming_slots_of_a_zoned_cron_follow_both_clock_changes() {
        // New York, 2026: clocks go 02:00 -> 03:00 on 8 March, 02:00 -> 01:00
        // on 1 November.
        let at_0230 = Schedule::cron_in("30 2 * * *", "America/New_York").unwrap();
        let got: Vec<_> = at_0230.upcoming(at("2026-03-07T12:00:00Z")).take(3).collect();
        // 02:30 EST, then the skipped 02:30 runs at 03:00 EDT, then 02:30 EDT.
        let want = ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z"];
        assert_eq!(got, want.map(at));
        let at_0130 = Schedule::cron_in("30 1 * * *", "America/New_York").unwrap();
        let got: Vec<_> = at_0130.upcoming(at("2026-10-31T12:00:00Z")).take(3).collect();
        // 01:30 EDT; on 1 November 01:30 is shown twice and runs at the first.
        let want = ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z", "2026-11-03T06:30:00Z"];
        assert_eq!(got, want.map(at));
        // Hourly is periodic: every real hour, so two slots at 01:00 local
        // (EDT, then EST) on the autumn night.
        let hourly = Schedule::cron_in("0 * * * *", "America/New_York").unwrap();
        let got: Vec<_> = hourly.upcoming(at("2026-11-01T04:30:00Z")).take(3).collect();
        let want = ["2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"];
        assert_eq!(got, want.map(at));
    }

    #[test]
    fn tiny_periods_are_rejected() {
        assert!(Schedule::every(Duration::ZERO).validate().is_err());
        assert!(Schedule::every(Duration::from_secs(1)).validate().is_ok());
    }

    #[test]
    fn latest_slots_of_an_interval_are_computed() {
        let five_min = Schedule::every(Duration::from_secs(300));
        let got = five_min.latest_slots(at("2026-11-30T03:00:00Z"), at("2026-11-30T03:20:00Z"), 3);
        let want = ["03:10", "03:15", "03:20"].map(|t| at(&format!("2026-11-30T{t}:00Z")));
        assert_eq!(got, want);
        // `after` is excluded, `until` included; fewer when there are fewer.
        let got = five_min.latest_slots(at("2026-11-30T03:00:00Z"), at("2026-11-30T03:09:59Z"), 3);
        assert_eq!(got, vec![at("2026-11-30T03:05:00Z")]);
        assert!(
            five_min
                .latest_slots(at("2026-11-30T03:00:00Z"), at("2026-11-30T03:04:59Z"), 3)
                .is_empty()
        );
        assert!(
            five_min
                .latest_slots(at("2026-11-30T03:00:00Z"), at("2026-11-30T03:20:00Z"), 0)
                .is_empty()
        );
        assert!(
            Schedule::Manual
                .latest_slots(at("2026-11-30T03:00:00Z"), at("2027-11-30T03:20:00Z"), 3)
                .is_empty()
        );
        // A year of seconds is arithmetic, not a walk.
        let second = Schedule::every(Duration::from_secs(1));
        let got = second.latest_slots(at("2025-01-01T00:00:00Z"), at("2026-01-01T00:00:00Z"), 2);
        assert_eq!(got, vec![at("2025-12-31T23:59:59Z"), at("2026-01-01T00:00:00Z")]);
    }

    #[test]
    fn latest_slots_of_a_cron_match_its_next_after() {
        let nightly = Schedule::cron("0 3 * * *").unwrap();
        let got = nightly.latest_slots(at("2026-11-01T03:00:00Z"), at("2026-11-05T12:00:00Z"), 2);
        assert_eq!(got, vec![at("2026-11-04T03:00:00Z"), at("2026-11-05T03:00:00Z")]);
        let got = nightly.latest_slots(at("2026-11-01T03:00:00Z"), at("2026-11-05T12:00:00Z"), 10);
        assert_eq!(got.len(), 4);
        assert_eq!(got[0], at("2026-11-02T03:00:00Z"));
    }

    #[test]
    fn a_stretch_longer_than_the_walk_cap_is_narrowed() {
        // Every second for three days: 259,200 slots, more than MAX_WALK.
        let per_second = Schedule::cron("* * * * * *").unwrap();
        let until = at("2026-03-04T00:00:00Z");
        let got = per_second.latest_slots(at("2026-03-01T00:00:00Z"), until, 3);
        let want: Vec<_> = (0..3).rev().map(|s| until - TimeDelta::seconds(s)).collect();
        assert_eq!(got, want);
        let got = per_second.latest_slots(at("2026-03-01T00:00:00Z"), until, 1);
        assert_eq!(got, vec![until]);
    }
}
