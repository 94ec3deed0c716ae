//! Checks on caller input, run before any SQL is sent.
//!
//! The database has matching CHECK constraints, but a constraint violation
//! reads like a database failure; these give an error that names the value,
//! the limit and the fix.

use std::fmt;
use std::time::Duration;

use leasehold_rules::RuleError;
pub use leasehold_rules::{MAX_KEY_BYTES, MAX_LEASE, MAX_TIMEOUT, MIN_LEASE, MIN_TIMEOUT};

use crate::error::{Error, Result};

/// A broken rule as [`Error::InvalidInput`], with the same what, value and
/// problem.
pub(crate) fn rule(e: RuleError) -> Error {
    /// The value as the rule showed it (already quoted or formatted).
    struct Shown(String);
    impl fmt::Debug for Shown {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(&self.0)
        }
    }
    Error::invalid(e.what, Shown(e.value), e.problem)
}

/// A key a row is made for (a claim, a registration, a stored key): the
/// whole identifier rule, hidden characters refused.
pub(crate) fn key(key: &str) -> Result<()> {
    identifier("lease key", key)
}

/// A key looked up or acted on (status, history, revoke, forget,
/// trigger, pause…): only what a row can hold (not empty, at most 255
/// bytes, no NUL), so a row stored before hidden characters were refused
/// can still be read, shown (escaped) and acted on, down to forgetting it.
pub(crate) fn existing_key(key: &str) -> Result<()> {
    stored("lease key", key)
}

/// A job name looked up or acted on: as [`existing_key`].
pub(crate) fn existing_job_name(name: &str) -> Result<()> {
    stored("job name", name)
}

/// Not empty, at most [`MAX_KEY_BYTES`] bytes, no NUL: what PostgreSQL's
/// column takes.
fn stored(what: &'static str, value: &str) -> Result<()> {
    match leasehold_rules::check_identifier(value) {
        Ok(()) | Err(leasehold_rules::IdentifierError::Hidden(_)) => Ok(()),
        Err(e) => Err(rule(leasehold_rules::RuleError::new(what, value, format!("it {e}")))),
    }
}

pub(crate) fn holder(holder: &str) -> Result<()> {
    identifier("holder id", holder)
}

pub(crate) fn job_name(name: &str) -> Result<()> {
    identifier("job name", name)
}

/// Who did something — an operator's actor, who paused a key — recorded
/// and shown as given: the one rule for it ([`leasehold_rules::actor`]):
/// it says who, in at most 255 bytes, and displays as itself, so a name
/// that displays as another (`"admin\u{2062}"`) is refused everywhere.
/// `what` names the value in the error (`"actor"`, `"paused by"`).
pub(crate) fn actor(what: &'static str, name: &str) -> Result<()> {
    leasehold_rules::actor(name).map_err(|e| rule(leasehold_rules::RuleError { what, ..e }))
}

/// Text that may hold hidden characters (a job's error, a row stored
/// before names were checked), as the console and the log fields show it:
/// each one escaped (`\u{202e}`), see [`leasehold_rules::escape_hidden`].
pub(crate) fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    leasehold_rules::escape_hidden(text)
}

pub(crate) fn resource(resource: &str) -> Result<()> {
    identifier("fenced resource", resource)
}

fn identifier(what: &'static str, value: &str) -> Result<()> {
    leasehold_rules::identifier(what, value).map_err(rule)
}

/// A lease duration, checked and converted to the seconds PostgreSQL's
/// `make_interval(secs => …)` takes.
pub(crate) fn lease_secs(what: &'static str, ttl: Duration) -> Result<f64> {
    leasehold_rules::lease(what, ttl)
        .map(|ttl| ttl.as_secs_f64())
        .map_err(rule)
}

/// A fence as handed out by the lease table: always positive.
pub(crate) fn fence(fence: i64) -> Result<()> {
    if fence <= 0 {
        return Err(Error::invalid(
            "fence",
            fence,
            "fences handed out by leasehold are positive",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_keys_name_the_value_and_the_limit() {
        let msg = key("").unwrap_err().to_string();
        assert!(msg.contains("lease key") && msg.contains("empty"), "{msg}");
        let long = "k".repeat(300);
        let msg = key(&long).unwrap_err().to_string();
        assert!(msg.contains("300 bytes") && msg.contains("255"), "{msg}");
        assert!(msg.len() < 300, "huge values are shortened: {msg}");
        assert!(
            msg.contains("\"kkkk") && msg.contains("kkk...: "),
            "the value is quoted, then cut: {msg}"
        );
        let msg = holder("a\0b").unwrap_err().to_string();
        assert!(msg.contains("holder id") && msg.contains("NUL"), "{msg}");
        assert!(key(&"k".repeat(255)).is_ok());
    }

    #[test]
    fn durations_are_bounded_both_ways() {
        let msg = lease_secs("lease duration", Duration::ZERO).unwrap_err().to_string();
        assert!(msg.contains("0ns") && msg.contains("at least 10ms"), "{msg}");
        assert!(msg.starts_with("invalid lease duration 0ns: "), "{msg}");
        let msg = lease_secs("lease duration", Duration::from_secs(30 * 24 * 3600))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("at most"), "{msg}");
        assert_eq!(lease_secs("lease duration", Duration::from_millis(1500)).unwrap(), 1.5);
    }

    #[test]
    fn fences_are_positive() {
        assert!(fence(0).is_err());
        assert!(fence(-3).is_err());
        assert!(fence(1).is_ok());
    }
}
