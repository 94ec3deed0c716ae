//! Bounds on durations and the relations between a job's lease, heartbeat,
//! deadline margin and retry backoff; the bound of a catch-up.

use std::time::Duration;

use crate::{
    CLOCK_RATE_BOUND_PERCENT, DEFAULT_GRACE, DEFAULT_LEASE, DEFAULT_RETRY, DEFAULT_RETRY_MAX, MAX_CATCH_UP, MAX_LEASE,
    MAX_TIMEOUT, MIN_LEASE, MIN_PERIOD, MIN_TIMEOUT, RuleError, default_heartbeat, default_margin, format_duration,
};

/// Checks a lease length (`what`: `"lease duration"`): [`MIN_LEASE`] to
/// [`MAX_LEASE`].
pub fn lease(what: &'static str, lease: Duration) -> Result<Duration, RuleError> {
    if lease < MIN_LEASE {
        return Err(RuleError::shown(
            what,
            format_duration(lease),
            format!(
                "must be at least {}: a lease shorter than a database round trip is lost at once",
                format_duration(MIN_LEASE)
            ),
        ));
    }
    if lease > MAX_LEASE {
        return Err(RuleError::shown(
            what,
            format_duration(lease),
            format!(
                "must be at most 7 days ({}): a dead replica would block the job that long",
                format_duration(MAX_LEASE)
            ),
        ));
    }
    Ok(lease)
}

/// Checks a run's time limit (`what`: `"run timeout"`): [`MIN_TIMEOUT`] to
/// [`MAX_TIMEOUT`], both named in the error.
pub fn run_timeout(what: &'static str, limit: Duration) -> Result<Duration, RuleError> {
    if (MIN_TIMEOUT..=MAX_TIMEOUT).contains(&limit) {
        return Ok(limit);
    }
    let why = if limit < MIN_TIMEOUT {
        "a run would be cancelled before its first round trip to the database"
    } else {
        "a run that may take longer than a week should have no limit (leave it out)"
    };
    Err(RuleError::shown(
        what,
        format_duration(limit),
        format!(
            "must be from {} to {} (`MIN_TIMEOUT`..=`MAX_TIMEOUT`): {why}",
            format_duration(MIN_TIMEOUT),
            format_duration(MAX_TIMEOUT)
        ),
    ))
}

/// The smallest deadline margin that covers clocks whose rates are off by
/// up to ρ ([`CLOCK_RATE_BOUND_PERCENT`]) at this lease: `2ρ × lease`, the
/// server's clock fast and the holder's slow (docs/design.md §5).
pub const fn min_margin(lease: Duration) -> Duration {
    match lease.saturating_mul(2 * CLOCK_RATE_BOUND_PERCENT).checked_div(100) {
        Some(margin) => margin,
        None => Duration::MAX,
    }
}

/// The clock-rate error (a fraction: `0.05` is 5 %) a margin covers at a
/// lease, before the time a run takes to stop: `margin / (2 × lease)`.
pub fn covered_clock_rate(lease: Duration, margin: Duration) -> f64 {
    if lease.is_zero() {
        return 0.0;
    }
    margin.as_secs_f64() / (2.0 * lease.as_secs_f64())
}

/// Checks the period of an interval schedule: at least [`MIN_PERIOD`].
pub fn period(period: Duration) -> Result<Duration, RuleError> {
    if period < MIN_PERIOD {
        return Err(RuleError::shown(
            "schedule period",
            format_duration(period),
            format!(
                "must be at least {} (a period this short would only hammer the database)",
                format_duration(MIN_PERIOD)
            ),
        ));
    }
    Ok(period)
}

/// Checks the bound `max` of a catch-up of every missed slot: 1 to
/// [`MAX_CATCH_UP`].
pub fn catch_up_bound(max: u32) -> Result<u32, RuleError> {
    if !(1..=MAX_CATCH_UP).contains(&max) {
        return Err(RuleError::new(
            "catch-up bound",
            max,
            format!(
                "CatchUp::all(max) runs at most the latest `max` missed slots and needs 1 to {MAX_CATCH_UP}; \
                 use CatchUp::Skip for none or CatchUp::Once for a single run"
            ),
        ));
    }
    Ok(max)
}

/// A job's lease, heartbeat, margin, grace and retry backoff; `None` is
/// "not set": the `JobSettings::new` default applies (and messages say so).
///
/// The getters give the values in effect; [`check`](Timing::check) runs the
/// checks the runtime runs when it starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timing {
    /// Lease length (default [`DEFAULT_LEASE`]).
    pub lease: Option<Duration>,
    /// Heartbeat interval (default a third of the lease).
    pub heartbeat: Option<Duration>,
    /// Local deadline margin (default a tenth of the lease).
    pub margin: Option<Duration>,
    /// Grace of a cancelled run (default [`DEFAULT_GRACE`]).
    pub grace: Option<Duration>,
    /// First retry backoff (default [`DEFAULT_RETRY`]).
    pub retry: Option<Duration>,
    /// Cap of the retry backoff (default [`DEFAULT_RETRY_MAX`]).
    pub retry_max: Option<Duration>,
}

impl Timing {
    /// The lease in effect.
    pub fn lease(&self) -> Duration {
        self.lease.unwrap_or(DEFAULT_LEASE)
    }

    /// The heartbeat interval in effect.
    pub fn heartbeat(&self) -> Duration {
        self.heartbeat.unwrap_or_else(|| default_heartbeat(self.lease()))
    }

    /// The local deadline margin in effect.
    pub fn margin(&self) -> Duration {
        self.margin.unwrap_or_else(|| default_margin(self.lease()))
    }

    /// The grace period in effect.
    pub fn grace(&self) -> Duration {
        self.grace.unwrap_or(DEFAULT_GRACE)
    }

    /// The first retry backoff in effect.
    pub fn retry(&self) -> Duration {
        self.retry.unwrap_or(DEFAULT_RETRY)
    }

    /// The cap of the retry backoff in effect.
    pub fn retry_max(&self) -> Duration {
        self.retry_max.unwrap_or(DEFAULT_RETRY_MAX)
    }

    /// Every check, in order: [`lease`], then
    /// [`check_heartbeat`](Timing::check_heartbeat),
    /// [`check_margin`](Timing::check_margin),
    /// [`check_clock_rate`](Timing::check_clock_rate) and
    /// [`check_retry`](Timing::check_retry). The first failure is returned.
    pub fn check(&self) -> Result<(), RuleError> {
        lease("lease duration", self.lease())?;
        self.check_heartbeat()?;
        self.check_margin()?;
        self.check_clock_rate()?;
        self.check_retry()
    }

    /// The margin must cover clocks whose rates are off by up to ρ
    /// ([`CLOCK_RATE_BOUND_PERCENT`]): at least [`min_margin`] of the lease,
    /// or a holder whose clock runs slow could still be running when the
    /// server's clock, running fast, lets another replica claim the key.
    /// Fails with `what` = `"deadline margin"`.
    pub fn check_clock_rate(&self) -> Result<(), RuleError> {
        let (margin, min) = (self.margin(), min_margin(self.lease()));
        if margin < min {
            return Err(RuleError::shown(
                "deadline margin",
                format_duration(margin),
                format!(
                    "must be at least 2ρ × lease = {} (ρ = {CLOCK_RATE_BOUND_PERCENT} %, the clock-rate error the \
                     deadline allows; lease {}), or a holder whose clock runs slow may still run when another \
                     replica claims the key; raise it to {} or more, or leave it out for lease/10 ({})",
                    format_duration(min),
                    self.shown_lease(),
                    format_duration(min),
                    format_duration(default_margin(self.lease()))
                ),
            ));
        }
        Ok(())
    }

    /// The heartbeat must be above zero and below half the lease, so that
    /// one late heartbeat still renews it. Fails with `what` =
    /// `"heartbeat interval"`.
    pub fn check_heartbeat(&self) -> Result<(), RuleError> {
        let heartbeat = self.heartbeat();
        let fail = |problem: String| {
            Err(RuleError::shown(
                "heartbeat interval",
                format_duration(heartbeat),
                problem,
            ))
        };
        if heartbeat.is_zero() {
            return fail(format!(
                "heartbeat must be above zero; leave it out for lease/3 ({})",
                format_duration(default_heartbeat(self.lease()))
            ));
        }
        if heartbeat.saturating_mul(2) >= self.lease() {
            return fail(format!(
                "heartbeat must be below half the lease ({}), so that one late heartbeat still renews it; \
                 leave it out for lease/3 ({})",
                self.shown_lease(),
                format_duration(default_heartbeat(self.lease()))
            ));
        }
        Ok(())
    }

    /// Heartbeat + margin must be below the lease, or every run is cancelled
    /// before its first renewal. Fails with `what` = `"deadline margin"`.
    pub fn check_margin(&self) -> Result<(), RuleError> {
        let margin = self.margin();
        if self.heartbeat().saturating_add(margin) >= self.lease() {
            let heartbeat = match self.heartbeat {
                Some(given) => format_duration(given),
                None => format!("{}, lease/3", format_duration(self.heartbeat())),
            };
            return Err(RuleError::shown(
                "deadline margin",
                format_duration(margin),
                format!(
                    "heartbeat ({heartbeat}) + margin must be below the lease ({}), or every run is cancelled \
                     before its first renewal; leave it out for lease/10 ({})",
                    self.shown_lease(),
                    format_duration(default_margin(self.lease()))
                ),
            ));
        }
        Ok(())
    }

    /// The first retry backoff must be above zero and the cap at least the
    /// first backoff. Fails with `what` = `"retry backoff"` and the value
    /// `(first, cap)`.
    pub fn check_retry(&self) -> Result<(), RuleError> {
        let (initial, max) = (self.retry(), self.retry_max());
        let fail = |problem: String| {
            Err(RuleError::shown(
                "retry backoff",
                format!("({}, {})", format_duration(initial), format_duration(max)),
                problem,
            ))
        };
        const WHY: &str = "the backoff after a failed run starts at the first backoff and doubles up to the cap";
        if initial.is_zero() {
            return fail(format!("the first backoff must be above zero: {WHY}"));
        }
        if max < initial {
            return match self.retry_max {
                Some(_) => fail(format!(
                    "the cap ({}) must be at least the first backoff ({}): {WHY}",
                    format_duration(max),
                    format_duration(initial)
                )),
                None => fail(format!(
                    "the first backoff ({}) is above the default cap ({}): {WHY}; raise the cap to {} or more too",
                    format_duration(initial),
                    format_duration(max),
                    format_duration(initial)
                )),
            };
        }
        Ok(())
    }

    /// `30s`, or `60s, the default`.
    fn shown_lease(&self) -> String {
        match self.lease {
            Some(given) => format_duration(given),
            None => format!("{}, the default", format_duration(self.lease())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn leases_are_bounded_both_ways() {
        let e = lease("lease duration", Duration::ZERO).unwrap_err();
        assert_eq!(e.what, "lease duration");
        let msg = e.to_string();
        assert!(msg.contains("0ns") && msg.contains("at least 10ms"), "{msg}");
        let msg = lease("lease duration", s(30 * 24 * 3600)).unwrap_err().to_string();
        assert!(msg.contains("720h") && msg.contains("at most 7 days (168h)"), "{msg}");
        assert_eq!(lease("lease duration", MIN_LEASE), Ok(MIN_LEASE));
        assert_eq!(lease("lease duration", MAX_LEASE), Ok(MAX_LEASE));
    }

    #[test]
    fn periods_are_at_least_100ms() {
        let msg = period(Duration::from_millis(50)).unwrap_err().to_string();
        assert!(
            msg.contains("schedule period 50ms") && msg.contains("at least 100ms"),
            "{msg}"
        );
        assert!(period(Duration::ZERO).is_err());
        assert_eq!(period(MIN_PERIOD), Ok(MIN_PERIOD));
    }

    #[test]
    fn catch_up_bounds_are_1_to_1000() {
        for bad in [0, MAX_CATCH_UP + 1] {
            let msg = catch_up_bound(bad).unwrap_err().to_string();
            assert!(
                msg.contains(&format!("catch-up bound {bad}")) && msg.contains("1 to 1000") && msg.contains("Skip"),
                "{msg}"
            );
        }
        assert_eq!(catch_up_bound(1), Ok(1));
        assert_eq!(catch_up_bound(MAX_CATCH_UP), Ok(MAX_CATCH_UP));
    }

    #[test]
    fn defaults_are_those_of_job_settings_and_valid() {
        let t = Timing::default();
        assert_eq!(
            (
                t.lease(),
                t.heartbeat(),
                t.margin(),
                t.grace(),
                t.retry(),
                t.retry_max()
            ),
            (s(60), s(20), s(6), s(5), s(1), s(300))
        );
        t.check().unwrap();
        // Whatever the lease, the default heartbeat and margin fit.
        for lease in [MIN_LEASE, s(1), s(60), MAX_LEASE] {
            let t = Timing {
                lease: Some(lease),
                ..Timing::default()
            };
            t.check().unwrap();
        }
    }

    #[test]
    fn a_heartbeat_of_half_the_lease_is_refused_with_the_default_as_fix() {
        let t = Timing {
            lease: Some(s(30)),
            heartbeat: Some(s(15)),
            ..Timing::default()
        };
        let e = t.check().unwrap_err();
        assert_eq!((e.what, e.value.as_str()), ("heartbeat interval", "15s"));
        assert_eq!(
            e.problem,
            "heartbeat must be below half the lease (30s), so that one late heartbeat still renews it; \
             leave it out for lease/3 (10s)"
        );
        let t = Timing {
            heartbeat: Some(s(30)),
            ..Timing::default()
        };
        let msg = t.check_heartbeat().unwrap_err().problem;
        assert!(msg.contains("half the lease (1m, the default)"), "{msg}");
        let t = Timing {
            heartbeat: Some(Duration::ZERO),
            ..Timing::default()
        };
        assert!(t.check_heartbeat().unwrap_err().problem.contains("above zero"));
        let t = Timing {
            heartbeat: Some(Duration::from_millis(29_999)),
            ..Timing::default()
        };
        t.check().unwrap();
    }

    #[test]
    fn heartbeat_plus_margin_must_leave_time_to_run() {
        let t = Timing {
            heartbeat: Some(s(20)),
            margin: Some(s(40)),
            ..Timing::default()
        };
        let e = t.check().unwrap_err();
        assert_eq!((e.what, e.value.as_str()), ("deadline margin", "40s"));
        assert_eq!(
            e.problem,
            "heartbeat (20s) + margin must be below the lease (1m, the default), or every run is cancelled \
             before its first renewal; leave it out for lease/10 (6s)"
        );
        let t = Timing {
            margin: Some(s(45)),
            ..Timing::default()
        };
        assert!(
            t.check()
                .unwrap_err()
                .problem
                .starts_with("heartbeat (20s, lease/3) + margin")
        );
        let t = Timing {
            margin: Some(Duration::from_millis(39_999)),
            ..Timing::default()
        };
        t.check().unwrap();
    }

    #[test]
    fn a_margin_below_two_rho_of_the_lease_is_refused_naming_the_minimum() {
        let t = Timing {
            lease: Some(s(60)),
            margin: Some(Duration::from_millis(1_199)),
            ..Timing::default()
        };
        let e = t.check().unwrap_err();
        assert_eq!((e.what, e.value.as_str()), ("deadline margin", "1s199ms"));
        assert_eq!(
            e.problem,
            "must be at least 2ρ × lease = 1s200ms (ρ = 1 %, the clock-rate error the deadline allows; \
             lease 1m), or a holder whose clock runs slow may still run when another replica claims the key; \
             raise it to 1s200ms or more, or leave it out for lease/10 (6s)"
        );
        let t = Timing {
            margin: Some(Duration::from_millis(1_200)),
            ..t
        };
        t.check().unwrap();
        // The default margin, lease/10, covers 5 % whatever the lease.
        for lease in [MIN_LEASE, s(1), s(60), MAX_LEASE] {
            let t = Timing {
                lease: Some(lease),
                ..Timing::default()
            };
            t.check_clock_rate().unwrap();
            let covered = covered_clock_rate(t.lease(), t.margin());
            assert!((covered - 0.05).abs() < 1e-9, "{lease:?}: {covered}");
        }
        assert_eq!(min_margin(MAX_LEASE), MAX_LEASE / 50);
    }

    #[test]
    fn the_retry_cap_is_at_least_the_first_backoff() {
        let t = Timing {
            retry: Some(s(10)),
            retry_max: Some(s(5)),
            ..Timing::default()
        };
        let e = t.check().unwrap_err();
        assert_eq!((e.what, e.value.as_str()), ("retry backoff", "(10s, 5s)"));
        assert!(
            e.problem
                .starts_with("the cap (5s) must be at least the first backoff (10s)"),
            "{}",
            e.problem
        );
        let t = Timing {
            retry: Some(s(600)),
            ..Timing::default()
        };
        let problem = t.check().unwrap_err().problem;
        assert!(
            problem.contains("(10m) is above the default cap (5m)") && problem.contains("raise the cap to 10m"),
            "{problem}"
        );
        let t = Timing {
            retry: Some(Duration::ZERO),
            ..Timing::default()
        };
        assert!(t.check().unwrap_err().problem.contains("above zero"));
        let t = Timing {
            retry: Some(s(5)),
            retry_max: Some(s(5)),
            ..Timing::default()
        };
        t.check().unwrap();
    }
}
