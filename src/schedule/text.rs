//! The text forms of [`Schedule`] and [`CatchUp`]: how the keys of job
//! kinds store them (`leasehold_key.schedule`, `.catch_up`) and how the CLI
//! reads them. `Display` writes exactly what `FromStr` reads back.
//!
//! | schedule | text |
//! |---|---|
//! | `Schedule::every(5 min)` | `every 5m` |
//! | `Schedule::cron("0 3 * * *")` | `cron 0 3 * * *` |
//! | `Schedule::cron_in("0 3 * * *", "Europe/Paris")` | `cron 0 3 * * * in Europe/Paris` |
//! | `Schedule::Manual` | `manual` |

use std::fmt;
use std::str::FromStr;

use leasehold_rules as rules;

use super::{CatchUp, Schedule};
use crate::error::{Error, Result};

/// The forms, for error messages.
const SCHEDULE_FORMS: &str = "write \"every 5m\", \"cron 0 3 * * *\", \"cron 0 3 * * * in Europe/Paris\" or \"manual\"";

impl fmt::Display for Schedule {
    /// The text form [`Schedule::from_str`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Every(period) => write!(f, "every {}", rules::format_duration(*period)),
            Schedule::Cron(cron) if cron.is_utc() => write!(f, "cron {}", cron.expression()),
            Schedule::Cron(cron) => write!(f, "cron {} in {}", cron.expression(), cron.time_zone()),
            Schedule::Manual => f.write_str("manual"),
        }
    }
}

impl FromStr for Schedule {
    type Err = Error;

    /// Reads `every <duration>` (the units of `#[job(every = ...)]`),
    /// `cron <expr>`, `cron <expr> in <IANA zone>` or `manual`, and checks
    /// the schedule as the runtime does (a period in range, a cron that
    /// fires).
    ///
    /// ```
    /// use leasehold::Schedule;
    ///
    /// let nightly: Schedule = "cron 30 2 * * * in Europe/Paris".parse()?;
    /// assert_eq!(nightly.to_string(), "cron 30 2 * * * in Europe/Paris");
    /// assert_eq!("every 90s".parse::<Schedule>()?.to_string(), "every 1m30s");
    /// assert!("every day".parse::<Schedule>().is_err());
    /// # Ok::<(), leasehold::Error>(())
    /// ```
    fn from_str(text: &str) -> Result<Schedule> {
        let text = text.trim();
        let schedule = if text == "manual" {
            Schedule::Manual
        } else if let Some(period) = text.strip_prefix("every ") {
            let period = rules::parse_duration(period.trim())
                .map_err(|e| Error::invalid("schedule", text, format!("{e}; {SCHEDULE_FORMS}")))?;
            Schedule::every(period)
        } else if let Some(cron) = text.strip_prefix("cron ") {
            match cron.rsplit_once(" in ") {
                Some((expr, tz)) => Schedule::cron_in(expr.trim(), tz.trim())?,
                None => Schedule::cron(cron.trim())?,
            }
        } else {
            return Err(Error::invalid("schedule", text, SCHEDULE_FORMS));
        };
        schedule.validate()?;
        Ok(schedule)
    }
}

impl fmt::Display for CatchUp {
    /// `once`, `skip` or `all(N)`: the form [`CatchUp::from_str`] and
    /// `#[job(catch_up = "...")]` read.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        rules::CatchUpText::from(*self).fmt(f)
    }
}

impl From<CatchUp> for rules::CatchUpText {
    fn from(policy: CatchUp) -> Self {
        match policy {
            CatchUp::Once => rules::CatchUpText::Once,
            CatchUp::Skip => rules::CatchUpText::Skip,
            CatchUp::All { max } => rules::CatchUpText::All(max),
        }
    }
}

impl FromStr for CatchUp {
    type Err = Error;

    /// Reads `once`, `skip` or `all(N)` (N from 1 to
    /// [`MAX_CATCH_UP`](crate::schedule::MAX_CATCH_UP)), as `#[job(catch_up = ...)]`
    /// does.
    ///
    /// ```
    /// use leasehold::CatchUp;
    ///
    /// assert_eq!("all(24)".parse::<CatchUp>()?, CatchUp::all(24));
    /// assert!("all(0)".parse::<CatchUp>().is_err());
    /// # Ok::<(), leasehold::Error>(())
    /// ```
    fn from_str(text: &str) -> Result<CatchUp> {
        match rules::parse_catch_up(text) {
            Ok(rules::CatchUpText::Once) => Ok(CatchUp::Once),
            Ok(rules::CatchUpText::Skip) => Ok(CatchUp::Skip),
            Ok(rules::CatchUpText::All(max)) => Ok(CatchUp::all(max)),
            Err(problem) => Err(Error::invalid("catch-up policy", text, problem)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn every_form_reads_back_what_it_writes() {
        for text in [
            "every 5m",
            "every 1h30m",
            "cron 0 3 * * *",
            "cron 30 2 * * * in Europe/Paris",
            "manual",
        ] {
            let schedule: Schedule = text.parse().unwrap();
            assert_eq!(schedule.to_string(), text);
        }
        assert_eq!(Schedule::every(Duration::from_secs(300)).to_string(), "every 5m");
        for text in ["once", "skip", "all(24)"] {
            assert_eq!(text.parse::<CatchUp>().unwrap().to_string(), text);
        }
    }

    #[test]
    fn bad_text_names_the_value_and_the_forms() {
        let msg = "weekly".parse::<Schedule>().unwrap_err().to_string();
        assert!(msg.contains("\"weekly\"") && msg.contains("every 5m"), "{msg}");
        let msg = "every 1ms".parse::<Schedule>().unwrap_err().to_string();
        assert!(msg.contains("1ms"), "{msg}");
        let msg = "cron 0 3 * * * in Europe/Pariss"
            .parse::<Schedule>()
            .unwrap_err()
            .to_string();
        assert!(msg.contains("Europe/Paris"), "{msg}");
        let msg = "sometimes".parse::<CatchUp>().unwrap_err().to_string();
        assert!(msg.contains("\"sometimes\"") && msg.contains("all(N)"), "{msg}");
    }
}
