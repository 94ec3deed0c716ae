//! Cron expressions, in UTC or on the clocks of an IANA time zone, and what
//! they do when those clocks change.
//!
//! # The daylight-saving rule
//!
//! The rule of Vixie cron and cronie (Quartz does the same for fixed
//! times), decided by the expression's time-of-day fields:
//!
//! - **Fixed times of day** — no `*` in the second, minute or hour field
//!   (`30 2 * * *`, `0 2,14 * * *`, `@daily`): each matching local time runs
//!   once. A time inside a spring-forward gap (02:30 when the clocks jump
//!   from 02:00 to 03:00) runs at the first instant after the gap (03:00 new
//!   time; several skipped times collapse into that one run); a time the
//!   clocks show twice (fall-back) runs at its first occurrence only.
//! - **Periodic** — a `*` (or `*/n`) in one of those fields (`0 * * * *`,
//!   `*/15 * * * *`, `@hourly`): the job runs at every real instant whose
//!   local time matches. An hourly job runs every real hour: the skipped
//!   hour has no run (it does not exist), the hour shown twice runs twice.
//!
//! croner 4 applies the same two behaviours natively to a zoned
//! `DateTime`, but it calls "fixed" only an expression with a single
//! second, minute and hour: `0 2,14 * * *` would be periodic there, skipped
//! on the spring-forward night and run twice on the fall-back one. So
//! periodic expressions go to croner with the zone, and fixed ones are
//! matched on the local wall clock here ([`next_wall_clock`]) and mapped to
//! instants by the rule above ([`first_instant`]).

use std::fmt;

use chrono::{DateTime, LocalResult, NaiveDateTime, TimeDelta, TimeZone, Utc};
use leasehold_rules::chrono_tz::Tz;
use leasehold_rules::croner;

use crate::error::Result;
use crate::validate;

/// A cron schedule: the expression and the time zone its times are read
/// in. Made by [`Schedule::cron`](crate::Schedule::cron) (UTC) or
/// [`Schedule::cron_in`](crate::Schedule::cron_in).
#[derive(Clone)]
pub struct CronSchedule {
    cron: croner::Cron,
    /// `None`: UTC.
    tz: Option<Tz>,
    /// Fixed times of day (no wildcard in the time fields): see the module
    /// docs.
    fixed: bool,
}

impl CronSchedule {
    /// Parses `expr`, read in `tz` (UTC if `None`).
    pub(super) fn parse(expr: &str, tz: Option<&str>) -> Result<CronSchedule> {
        let cron = leasehold_rules::cron(expr).map_err(validate::rule)?;
        let tz = tz.map(leasehold_rules::zone).transpose().map_err(validate::rule)?;
        let time = [&cron.pattern.seconds, &cron.pattern.minutes, &cron.pattern.hours];
        let fixed = !time.iter().any(|field| field.from_wildcard);
        Ok(CronSchedule { cron, tz, fixed })
    }

    /// Checks that the expression fires at all (`0 0 30 2 *` never does).
    pub(super) fn validate(&self) -> Result<()> {
        leasehold_rules::cron_fires(&self.cron).map_err(validate::rule)
    }

    /// The expression, as written.
    pub fn expression(&self) -> &str {
        self.cron.as_str()
    }

    /// The IANA name of the zone the expression is read in (`"UTC"` for
    /// [`Schedule::cron`](crate::Schedule::cron)).
    pub fn time_zone(&self) -> &'static str {
        self.tz.map_or("UTC", Tz::name)
    }

    /// Whether the expression is read in UTC ([`Schedule::cron`](crate::Schedule::cron)).
    pub(super) fn is_utc(&self) -> bool {
        self.tz.is_none()
    }

    /// The first slot strictly after `after`.
    pub(super) fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self.tz {
            None => self.cron.find_next_occurrence(&after, false).ok(),
            Some(tz) if self.fixed => next_wall_clock(&self.cron, tz, after),
            Some(tz) => self
                .cron
                .find_next_occurrence(&after.with_timezone(&tz), false)
                .ok()
                .map(|t| t.with_timezone(&Utc)),
        }
    }
}

impl fmt::Debug for CronSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CronSchedule")
            .field("expr", &self.expression())
            .field("tz", &self.time_zone())
            .finish()
    }
}

/// The most local matches [`next_wall_clock`] looks at that map to
/// instants at or before its start: they can only lie in one fall-back
/// overlap (at most 3,600 for a per-second expression in a one-hour one).
const MAX_BEHIND: u32 = 100_000;

/// The first instant strictly after `after` of a fixed-time expression in
/// `tz`: local matches in wall-clock order, each mapped by
/// [`first_instant`].
///
/// That map never decreases along the wall clock (a repeated time maps to
/// its earlier instant, a skipped one to the end of the gap), so no local
/// time before `after`'s own maps past `after`, and the first match from
/// there that maps past it is the answer.
fn next_wall_clock(cron: &croner::Cron, tz: Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let mut local = after.with_timezone(&tz).naive_local();
    let mut inclusive = true;
    for _ in 0..MAX_BEHIND {
        let matched = cron.find_next_occurrence(&local, inclusive).ok()?;
        let instant = first_instant(tz, matched)?;
        if instant > after {
            return Some(instant);
        }
        local = matched;
        inclusive = false;
    }
    None
}

/// When the local time `local` in `tz` first happens: itself, the earlier
/// of its two instants in a fall-back overlap, or the end of the gap it
/// falls in.
fn first_instant(tz: Tz, local: NaiveDateTime) -> Option<DateTime<Utc>> {
    match tz.from_local_datetime(&local) {
        LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => Some(t.with_timezone(&Utc)),
        LocalResult::None => gap_end(tz, local),
    }
}

/// The first instant after the gap that `local` falls in: a minute at a
/// time to the first local time that exists, then back a second at a time
/// to the exact end of the gap (historical offsets are not whole minutes).
/// Gaps are at most a day (Samoa skipped 2011-12-30); the search gives up
/// after three.
fn gap_end(tz: Tz, local: NaiveDateTime) -> Option<DateTime<Utc>> {
    let exists = |t: NaiveDateTime| tz.from_local_datetime(&t).earliest();
    let mut probe = local;
    for _ in 0..3 * 24 * 60 {
        probe = probe.checked_add_signed(TimeDelta::minutes(1))?;
        if let Some(mut first) = exists(probe) {
            for back in 1..60 {
                match exists(probe - TimeDelta::seconds(back)) {
                    Some(earlier) => first = earlier,
                    None => break,
                }
            }
            return Some(first.with_timezone(&Utc));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use chrono::NaiveDate;

    use super::super::{Schedule, at};
    use super::*;

    /// The slots of `schedule` from `from` on, up to `until`.
    fn slots(schedule: &Schedule, from: &str, until: &str) -> Vec<DateTime<Utc>> {
        let until = at(until);
        let mut out = Vec::new();
        let mut cursor = at(from);
        while let Some(next) = schedule.next_after(cursor).filter(|t| *t <= until) {
            assert!(next > cursor, "slots move forward: {next} after {cursor}");
            out.push(next);
            cursor = next;
        }
        out
    }

    /// Walks a daily job day by day across a transition and checks one slot
    /// per local day, at the `expected` instants (one per day, in order).
    fn daily(expr: &str, tz: &str, from: &str, until: &str, expected: &[&str]) {
        let schedule = Schedule::cron_in(expr, tz).unwrap();
        let got = slots(&schedule, from, until);
        let zone: Tz = tz.parse().unwrap();
        let mut days: Vec<NaiveDate> = got.iter().map(|t| t.with_timezone(&zone).date_naive()).collect();
        let n = days.len();
        days.dedup();
        assert_eq!(days.len(), n, "{expr} in {tz}: one slot per local day: {got:?}");
        let expected: Vec<_> = expected.iter().map(|t| at(t)).collect();
        assert_eq!(got, expected, "{expr} in {tz}");
        // Starting from any instant between two slots gives the later one.
        for pair in expected.windows(2) {
            let mid = pair[0] + (pair[1] - pair[0]) / 2;
            assert_eq!(schedule.next_after(mid), Some(pair[1]), "{expr} in {tz} after {mid}");
            assert_eq!(schedule.next_after(pair[1] - TimeDelta::microseconds(1)), Some(pair[1]));
        }
    }

    #[test]
    fn paris_daily_jobs_run_once_per_local_day_across_2026_transitions() {
        // Spring forward: 2026-03-29 02:00 CET -> 03:00 CEST (01:00Z).
        let spring = ("2026-03-27T12:00:00Z", "2026-03-31T12:00:00Z");
        // 02:30 does not exist on the 29th: it runs when the gap ends.
        daily(
            "30 2 * * *",
            "Europe/Paris",
            spring.0,
            spring.1,
            &[
                "2026-03-28T01:30:00Z",
                "2026-03-29T01:00:00Z",
                "2026-03-30T00:30:00Z",
                "2026-03-31T00:30:00Z",
            ],
        );
        daily(
            "0 3 * * *",
            "Europe/Paris",
            spring.0,
            spring.1,
            &[
                "2026-03-28T02:00:00Z",
                "2026-03-29T01:00:00Z",
                "2026-03-30T01:00:00Z",
                "2026-03-31T01:00:00Z",
            ],
        );
        // Fall back: 2026-10-25 03:00 CEST -> 02:00 CET (01:00Z).
        let fall = ("2026-10-23T12:00:00Z", "2026-10-27T12:00:00Z");
        // 02:30 happens twice on the 25th: only the first (CEST) runs.
        daily(
            "30 2 * * *",
            "Europe/Paris",
            fall.0,
            fall.1,
            &[
                "2026-10-24T00:30:00Z",
                "2026-10-25T00:30:00Z",
                "2026-10-26T01:30:00Z",
                "2026-10-27T01:30:00Z",
            ],
        );
        daily(
            "0 3 * * *",
            "Europe/Paris",
            fall.0,
            fall.1,
            &[
                "2026-10-24T01:00:00Z",
                "2026-10-25T02:00:00Z",
                "2026-10-26T02:00:00Z",
                "2026-10-27T02:00:00Z",
            ],
        );
    }

    #[test]
    fn new_york_daily_jobs_run_once_per_local_day_across_2026_transitions() {
        // Spring forward: 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z).
        let spring = ("2026-03-06T12:00:00Z", "2026-03-10T12:00:00Z");
        daily(
            "30 2 * * *",
            "America/New_York",
            spring.0,
            spring.1,
            &[
                "2026-03-07T07:30:00Z",
                "2026-03-08T07:00:00Z",
                "2026-03-09T06:30:00Z",
                "2026-03-10T06:30:00Z",
            ],
        );
        daily(
            "0 3 * * *",
            "America/New_York",
            spring.0,
            spring.1,
            &[
                "2026-03-07T08:00:00Z",
                "2026-03-08T07:00:00Z",
                "2026-03-09T07:00:00Z",
                "2026-03-10T07:00:00Z",
            ],
        );
        // Fall back: 2026-11-01 02:00 EDT -> 01:00 EST (06:00Z); 01:xx
        // happens twice, 02:30 and 03:00 once.
        let fall = ("2026-10-30T12:00:00Z", "2026-11-03T12:00:00Z");
        daily(
            "30 2 * * *",
            "America/New_York",
            fall.0,
            fall.1,
            &[
                "2026-10-31T06:30:00Z",
                "2026-11-01T07:30:00Z",
                "2026-11-02T07:30:00Z",
                "2026-11-03T07:30:00Z",
            ],
        );
        daily(
            "0 3 * * *",
            "America/New_York",
            fall.0,
            fall.1,
            &[
                "2026-10-31T07:00:00Z",
                "2026-11-01T08:00:00Z",
                "2026-11-02T08:00:00Z",
                "2026-11-03T08:00:00Z",
            ],
        );
        daily(
            "30 1 * * *",
            "America/New_York",
            fall.0,
            fall.1,
            &[
                "2026-10-31T05:30:00Z",
                "2026-11-01T05:30:00Z",
                "2026-11-02T06:30:00Z",
                "2026-11-03T06:30:00Z",
            ],
        );
    }

    #[test]
    fn sydney_daily_jobs_run_once_per_local_day_across_2026_transitions() {
        // Fall back: 2026-04-05 03:00 AEDT -> 02:00 AEST (16:00Z on the 4th).
        let fall = ("2026-04-02T12:00:00Z", "2026-04-06T12:00:00Z");
        daily(
            "30 2 * * *",
            "Australia/Sydney",
            fall.0,
            fall.1,
            &[
                "2026-04-02T15:30:00Z",
                "2026-04-03T15:30:00Z",
                "2026-04-04T15:30:00Z",
                "2026-04-05T16:30:00Z",
            ],
        );
        daily(
            "0 3 * * *",
            "Australia/Sydney",
            fall.0,
            fall.1,
            &[
                "2026-04-02T16:00:00Z",
                "2026-04-03T16:00:00Z",
                "2026-04-04T17:00:00Z",
                "2026-04-05T17:00:00Z",
            ],
        );
        // Spring forward: 2026-10-04 02:00 AEST -> 03:00 AEDT (16:00Z on the 3rd).
        let spring = ("2026-10-01T12:00:00Z", "2026-10-05T12:00:00Z");
        daily(
            "30 2 * * *",
            "Australia/Sydney",
            spring.0,
            spring.1,
            &[
                "2026-10-01T16:30:00Z",
                "2026-10-02T16:30:00Z",
                "2026-10-03T16:00:00Z",
                "2026-10-04T15:30:00Z",
            ],
        );
        daily(
            "0 3 * * *",
            "Australia/Sydney",
            spring.0,
            spring.1,
            &[
                "2026-10-01T17:00:00Z",
                "2026-10-02T17:00:00Z",
                "2026-10-03T16:00:00Z",
                "2026-10-04T16:00:00Z",
            ],
        );
    }

    #[test]
    fn lists_of_fixed_times_follow_the_fixed_time_rule() {
        // Two fixed times: croner alone would skip 02:00 on the spring night
        // and run it twice on the fall one.
        let spring = slots(
            &Schedule::cron_in("0 2,14 * * *", "Europe/Paris").unwrap(),
            "2026-03-28T12:00:00Z",
            "2026-03-29T23:00:00Z",
        );
        let want = ["2026-03-28T13:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T12:00:00Z"];
        assert_eq!(spring, want.map(at));
        let fall = slots(
            &Schedule::cron_in("0 2,14 * * *", "Europe/Paris").unwrap(),
            "2026-10-24T11:00:00Z",
            "2026-10-25T23:00:00Z",
        );
        let want = ["2026-10-24T12:00:00Z", "2026-10-25T00:00:00Z", "2026-10-25T13:00:00Z"];
        assert_eq!(fall, want.map(at));
        // Two skipped times collapse into one run at the end of the gap.
        let spring = slots(
            &Schedule::cron_in("0,30 2 * * *", "Europe/Paris").unwrap(),
            "2026-03-28T12:00:00Z",
            "2026-03-30T12:00:00Z",
        );
        let want = ["2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z", "2026-03-30T00:30:00Z"];
        assert_eq!(spring, want.map(at));
    }

    #[test]
    fn hourly_jobs_run_every_real_hour_across_transitions() {
        for (tz, from, until) in [
            ("Europe/Paris", "2026-03-28T20:00:00Z", "2026-03-29T06:00:00Z"),
            ("Europe/Paris", "2026-10-24T20:00:00Z", "2026-10-25T06:00:00Z"),
            ("America/New_York", "2026-03-08T02:00:00Z", "2026-03-08T12:00:00Z"),
            ("America/New_York", "2026-11-01T02:00:00Z", "2026-11-01T12:00:00Z"),
            ("Australia/Sydney", "2026-04-04T10:00:00Z", "2026-04-04T20:00:00Z"),
            ("Australia/Sydney", "2026-10-03T10:00:00Z", "2026-10-03T20:00:00Z"),
        ] {
            for expr in ["0 * * * *", "@hourly"] {
                let got = slots(&Schedule::cron_in(expr, tz).unwrap(), from, until);
                let want: Vec<_> = (1..=10).map(|h| at(from) + TimeDelta::hours(h)).collect();
                assert_eq!(got, want, "{expr} in {tz}");
            }
            // Every 15 minutes: every real quarter hour too.
            let got = slots(&Schedule::cron_in("*/15 * * * *", tz).unwrap(), from, until);
            let want: Vec<_> = (1..=40).map(|q| at(from) + TimeDelta::minutes(15 * q)).collect();
            assert_eq!(got, want, "*/15 in {tz}");
        }
        // A periodic job on the repeated hour only runs at both of its
        // occurrences (New York, 01:xx twice on 2026-11-01).
        let got = slots(
            &Schedule::cron_in("*/30 1 * * *", "America/New_York").unwrap(),
            "2026-11-01T00:00:00Z",
            "2026-11-01T12:00:00Z",
        );
        let want = [
            "2026-11-01T05:00:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T06:30:00Z",
        ];
        assert_eq!(got, want.map(at));
    }

    #[test]
    fn cron_without_zone_is_utc_and_utc_zone_is_the_same() {
        let utc = Schedule::cron("30 2 * * *").unwrap();
        let named = Schedule::cron_in("30 2 * * *", "UTC").unwrap();
        let from = at("2026-03-28T00:00:00Z");
        assert_eq!(utc.next_after(from), Some(at("2026-03-28T02:30:00Z")));
        assert_eq!(named.next_after(from), utc.next_after(from));
    }

    #[test]
    fn unknown_zones_are_named_with_a_suggestion() {
        let msg = |tz: &str| Schedule::cron_in("0 3 * * *", tz).unwrap_err().to_string();
        let m = msg("Europe/Pariss");
        assert!(
            m.contains("time zone \"Europe/Pariss\"") && m.contains("did you mean \"Europe/Paris\"?"),
            "{m}"
        );
        assert!(msg("europe/paris").contains("did you mean \"Europe/Paris\"?"));
        assert!(
            msg("New York").contains("did you mean \"America/New_York\"?"),
            "{}",
            msg("New York")
        );
        let m = msg("Mars/Olympus");
        assert!(m.contains("an IANA name such as \"Europe/Paris\""), "{m}");
        assert!(msg("").contains("an IANA name"));
        assert!(msg("CEST").contains("an abbreviation"), "{}", msg("CEST"));
        Schedule::cron_in("0 3 * * *", "EST").unwrap(); // a real (fixed-offset) zone
        // The expression is checked first, with its own message.
        let m = Schedule::cron_in("0 25 * * *", "Nowhere").unwrap_err().to_string();
        assert!(m.contains("cron expression"), "{m}");
        assert_eq!(leasehold_rules::suggest_zone("paris"), Some("Europe/Paris"));
    }

    #[test]
    fn debug_shows_expression_and_zone() {
        let debug = format!("{:?}", Schedule::cron_in("30 2 * * *", "Europe/Paris").unwrap());
        assert_eq!(
            debug,
            r#"Cron(CronSchedule { expr: "30 2 * * *", tz: "Europe/Paris" })"#
        );
        let debug = format!("{:?}", Schedule::cron("0 3 * * *").unwrap());
        assert!(debug.contains(r#"tz: "UTC""#), "{debug}");
        let Schedule::Cron(cron) = Schedule::cron_in("0 3 * * *", "Asia/Tokyo").unwrap() else {
            unreachable!()
        };
        assert_eq!((cron.expression(), cron.time_zone()), ("0 3 * * *", "Asia/Tokyo"));
    }

    #[test]
    fn gaps_that_are_not_an_hour_are_handled() {
        // Lord Howe moves by 30 minutes: 2026-10-04 02:00 -> 02:30 local
        // (+10:30 -> +11, at 15:30Z on the 3rd).
        let got = slots(
            &Schedule::cron_in("15 2 * * *", "Australia/Lord_Howe").unwrap(),
            "2026-10-02T12:00:00Z",
            "2026-10-04T12:00:00Z",
        );
        assert_eq!(got, ["2026-10-02T15:45:00Z", "2026-10-03T15:30:00Z"].map(at));
        // Samoa skipped all of 2011-12-30: a daily job ran once, when the
        // 31st began.
        let got = slots(
            &Schedule::cron_in("0 12 * * *", "Pacific/Apia").unwrap(),
            "2011-12-28T12:00:00Z",
            "2011-12-31T12:00:00Z",
        );
        assert_eq!(
            got,
            [
                "2011-12-28T22:00:00Z",
                "2011-12-29T22:00:00Z",
                "2011-12-30T10:00:00Z",
                "2011-12-30T22:00:00Z"
            ]
            .map(at)
        );
    }
    /// Why fixed times are not left to croner: it handles a single time
    /// (`30 2 * * *`) as the rule says, but treats a list of hours as
    /// periodic. If croner changes this, the module docs need a look.
    #[test]
    fn croner_alone_treats_a_list_of_hours_as_periodic() {
        let zone: Tz = "Europe/Paris".parse().unwrap();
        let next = |expr: &str, from: &str| {
            let cron = croner::Cron::from_str(expr).unwrap();
            let mut t = at(from).with_timezone(&zone);
            (0..3)
                .map(|_| {
                    t = cron.find_next_occurrence(&t, false).unwrap();
                    t.with_timezone(&Utc)
                })
                .collect::<Vec<_>>()
        };
        let single = ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z", "2026-10-27T01:30:00Z"];
        assert_eq!(next("30 2 * * *", "2026-10-24T11:00:00Z"), single.map(at));
        // 02:00 twice on the fall-back night...
        let list = ["2026-10-24T12:00:00Z", "2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z"];
        assert_eq!(next("0 2,14 * * *", "2026-10-24T11:00:00Z"), list.map(at));
        // ... and not at all on the spring-forward one.
        let list = ["2026-03-28T13:00:00Z", "2026-03-29T12:00:00Z", "2026-03-30T00:00:00Z"];
        assert_eq!(next("0 2,14 * * *", "2026-03-28T12:00:00Z"), list.map(at));
    }
}
