//! The duration syntax of `#[job(...)]`: `"250ms"`, `"60s"`, `"5m"`,
//! `"1h30m"` — and durations printed back in it.

use std::fmt;
use std::time::Duration;

/// What is wrong with a duration string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DurationError {
    /// `""`.
    Empty,
    /// `"-5s"`.
    Negative,
    /// `"s"`: a unit with no number before it.
    NoNumber,
    /// `"1.5s"`.
    Fraction,
    /// `"60"`: a number with no unit (the number).
    NoUnit(String),
    /// `"5d"` (the unit).
    UnknownUnit(String),
    /// `"30m1h"`, `"1s1s"` (the unit out of place).
    UnitOrder(&'static str),
    /// Any other character, e.g. a space.
    Unexpected(char),
    /// More milliseconds than a `u64` holds.
    Overflow,
    /// `"0s"`.
    Zero,
}

/// The syntax, quoted in every message about it.
pub const UNITS_HELP: &str = "units: ms, s, m, h, largest first, e.g. \"250ms\", \"60s\", \"5m\", \"1h30m\"";

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DurationError::Empty => write!(f, "empty duration ({UNITS_HELP})"),
            DurationError::Negative => write!(f, "durations cannot be negative ({UNITS_HELP})"),
            DurationError::NoNumber => write!(f, "expected a number before the unit ({UNITS_HELP})"),
            DurationError::Fraction => write!(f, "fractions are not supported; write 1s500ms, not 1.5s ({UNITS_HELP})"),
            DurationError::NoUnit(n) => write!(f, "`{n}` has no unit; write \"{n}s\" for seconds ({UNITS_HELP})"),
            DurationError::UnknownUnit(u) => {
                let hint = match u.as_str() {
                    "d" | "day" | "days" => "; for days write hours, e.g. \"24h\"",
                    "sec" | "secs" | "second" | "seconds" => "; write \"s\"",
                    "min" | "mins" | "minute" | "minutes" => "; write \"m\"",
                    "hr" | "hrs" | "hour" | "hours" => "; write \"h\"",
                    "us" | "µs" | "ns" => "; the smallest unit is ms",
                    _ => "",
                };
                write!(f, "unknown unit `{u}`{hint} ({UNITS_HELP})")
            }
            DurationError::UnitOrder(u) => {
                write!(
                    f,
                    "unit `{u}` is repeated or out of order; give each unit once, largest first ({UNITS_HELP})"
                )
            }
            DurationError::Unexpected(' ') => write!(f, "spaces are not allowed ({UNITS_HELP})"),
            DurationError::Unexpected(c) => write!(f, "unexpected {c:?} ({UNITS_HELP})"),
            DurationError::Overflow => write!(f, "duration is too large"),
            DurationError::Zero => write!(f, "duration must be above zero"),
        }
    }
}

/// Parses `250ms`, `60s`, `5m`, `1h`, `1h30m`: whole numbers each followed
/// by a unit, units at most once each and largest first. Zero, negative and
/// overflowing values are errors.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    const UNITS: &[(&str, u64)] = &[("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    if text.starts_with('-') {
        return Err(DurationError::Negative);
    }
    let mut rest = text;
    let mut total_ms: u64 = 0;
    // Index into UNITS of the next unit allowed (each one smaller).
    let mut next_unit = 0;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let (number, after) = rest.split_at(digits);
        if number.is_empty() {
            return Err(match after.chars().next() {
                Some(c) if c.is_alphabetic() => DurationError::NoNumber,
                Some('.') => DurationError::Fraction,
                Some('-') => DurationError::Negative,
                Some(c) => DurationError::Unexpected(c),
                None => DurationError::Empty,
            });
        }
        let letters = after.find(|c: char| !c.is_alphabetic()).unwrap_or(after.len());
        let (unit, after) = after.split_at(letters);
        if unit.is_empty() {
            return Err(match after.chars().next() {
                None => DurationError::NoUnit(number.to_owned()),
                Some('.') => DurationError::Fraction,
                Some(c) => DurationError::Unexpected(c),
            });
        }
        let Some(index) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(DurationError::UnknownUnit(unit.to_owned()));
        };
        if index < next_unit {
            return Err(DurationError::UnitOrder(UNITS[index].0));
        }
        next_unit = index + 1;
        let number: u64 = number.parse().map_err(|_| DurationError::Overflow)?;
        let ms = number.checked_mul(UNITS[index].1).ok_or(DurationError::Overflow)?;
        total_ms = total_ms.checked_add(ms).ok_or(DurationError::Overflow)?;
        rest = after;
    }
    if total_ms == 0 {
        return Err(DurationError::Zero);
    }
    Ok(Duration::from_millis(total_ms))
}

impl std::error::Error for DurationError {}

/// A duration in the attribute syntax (`1h30m`, `16s666ms`), or `Debug`
/// (`16.666666666s`, `0ns`) when it is zero or not whole milliseconds.
pub fn format_duration(d: Duration) -> String {
    if !d.subsec_nanos().is_multiple_of(1_000_000) || d.is_zero() {
        return format!("{d:?}");
    }
    let mut ms = d.as_millis();
    let mut out = String::new();
    for (unit, size) in [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)] {
        if ms >= size {
            out.push_str(&format!("{}{unit}", ms / size));
            ms %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("250ms"), Ok(ms(250)));
        assert_eq!(parse_duration("60s"), Ok(ms(60_000)));
        assert_eq!(parse_duration("5m"), Ok(ms(300_000)));
        assert_eq!(parse_duration("1h"), Ok(ms(3_600_000)));
        assert_eq!(parse_duration("1h30m"), Ok(ms(5_400_000)));
        assert_eq!(parse_duration("1m30s"), Ok(ms(90_000)));
        assert_eq!(parse_duration("1s500ms"), Ok(ms(1_500)));
        assert_eq!(parse_duration("2h3m4s5ms"), Ok(ms(7_384_005)));
        assert_eq!(parse_duration("168h"), Ok(crate::MAX_LEASE));
        assert_eq!(parse_duration("1h0m"), Ok(ms(3_600_000)));
        assert_eq!(parse_duration("007s"), Ok(ms(7_000)));
    }

    #[test]
    fn bad_durations_say_why() {
        use DurationError::*;
        assert_eq!(parse_duration(""), Err(Empty));
        assert_eq!(parse_duration("60"), Err(NoUnit("60".into())));
        assert_eq!(parse_duration("1h30"), Err(NoUnit("30".into())));
        assert_eq!(parse_duration("0s"), Err(Zero));
        assert_eq!(parse_duration("0h0m"), Err(Zero));
        assert_eq!(parse_duration("-5s"), Err(Negative));
        assert_eq!(parse_duration("1.5s"), Err(Fraction));
        assert_eq!(parse_duration("1."), Err(Fraction));
        assert_eq!(parse_duration("s"), Err(NoNumber));
        assert_eq!(parse_duration("5d"), Err(UnknownUnit("d".into())));
        assert_eq!(parse_duration("5sec"), Err(UnknownUnit("sec".into())));
        assert_eq!(parse_duration("5S"), Err(UnknownUnit("S".into())));
        assert_eq!(parse_duration("30m1h"), Err(UnitOrder("h")));
        assert_eq!(parse_duration("1s1s"), Err(UnitOrder("s")));
        assert_eq!(parse_duration("1ms1s"), Err(UnitOrder("s")));
        assert_eq!(parse_duration("1h 30m"), Err(Unexpected(' ')));
        assert_eq!(parse_duration(" 1h"), Err(Unexpected(' ')));
        assert_eq!(parse_duration("1_000ms"), Err(Unexpected('_')));
        assert_eq!(parse_duration("99999999999999999999s"), Err(Overflow));
        assert_eq!(parse_duration("18446744073709551615s"), Err(Overflow));
        assert_eq!(parse_duration("5124095576031h"), Err(Overflow));
        assert_eq!(parse_duration("5124095576030h59m"), Err(Overflow));
        assert!(parse_duration("5124095576030h").is_ok());
        assert!(parse_duration("18446744073709551615ms").is_ok());
    }

    #[test]
    fn duration_errors_name_the_fix() {
        let msg = parse_duration("60").unwrap_err().to_string();
        assert!(msg.contains("\"60s\"") && msg.contains("units: ms, s, m, h"), "{msg}");
        let msg = parse_duration("2d").unwrap_err().to_string();
        assert!(msg.contains("\"24h\""), "{msg}");
        let msg = parse_duration("1.5s").unwrap_err().to_string();
        assert!(msg.contains("1s500ms"), "{msg}");
        let msg = parse_duration("1h 30m").unwrap_err().to_string();
        assert!(msg.contains("spaces are not allowed"), "{msg}");
    }

    #[test]
    fn durations_print_in_attribute_syntax() {
        assert_eq!(format_duration(ms(5_400_000)), "1h30m");
        assert_eq!(format_duration(ms(300_000)), "5m");
        assert_eq!(format_duration(ms(20_000)), "20s");
        assert_eq!(format_duration(ms(16_666)), "16s666ms");
        assert_eq!(format_duration(crate::MAX_LEASE), "168h");
        assert_eq!(format_duration(Duration::from_secs(50) / 3), "16.666666666s");
        assert_eq!(format_duration(Duration::ZERO), "0ns");
        for text in ["1h30m", "16s666ms", "250ms", "168h"] {
            assert_eq!(format_duration(parse_duration(text).unwrap()), text, "round trip");
        }
    }
}
