//! Checks on caller input, run before any SQL is sent.
//!
//! The database has matching CHECK constraints, but a constraint violation
//! reads like a database failure; these give an error that names the value,
//! the limit and the fix.

use std::time::Duration;

use crate::error::{Error, Result};

/// Longest lease key or holder id, in bytes (also a CHECK in the schema).
pub const MAX_KEY_BYTES: usize = 255;

/// Shortest lease leasehold accepts. Below this, a single round trip to the
/// database can outlast the lease.
pub const MIN_LEASE: Duration = Duration::from_millis(10);

/// Longest lease leasehold accepts. A lease this long means a dead replica
/// blocks its jobs for a week: it is almost always a unit mistake.
pub const MAX_LEASE: Duration = Duration::from_secs(7 * 24 * 3600);

pub(crate) fn key(key: &str) -> Result<()> {
    identifier("lease key", key)
}

pub(crate) fn holder(holder: &str) -> Result<()> {
    identifier("holder id", holder)
}

pub(crate) fn job_name(name: &str) -> Result<()> {
    identifier("job name", name)
}

/// Who paused a key: free text, shown by `status`.
pub(crate) fn paused_by(by: &str) -> Result<()> {
    identifier("paused by", by)
}

pub(crate) fn resource(resource: &str) -> Result<()> {
    identifier("fenced resource", resource)
}

fn identifier(what: &'static str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(what, value, "it must not be empty"));
    }
    if value.len() > MAX_KEY_BYTES {
        return Err(Error::invalid(
            what,
            value,
            format!("it is {} bytes long, the limit is {MAX_KEY_BYTES} bytes", value.len()),
        ));
    }
    if value.contains('\0') {
        return Err(Error::invalid(
            what,
            value,
            "it contains a NUL byte, which PostgreSQL text cannot store",
        ));
    }
    Ok(())
}

/// A lease duration, checked and converted to the seconds PostgreSQL's
/// `make_interval(secs => …)` takes.
pub(crate) fn lease_secs(what: &'static str, ttl: Duration) -> Result<f64> {
    if ttl < MIN_LEASE {
        return Err(Error::invalid(
            what,
            ttl,
            format!("it must be at least {MIN_LEASE:?} (a lease shorter than a round trip is lost at once)"),
        ));
    }
    if ttl > MAX_LEASE {
        return Err(Error::invalid(
            what,
            ttl,
            format!("it must be at most {MAX_LEASE:?} (a dead replica would block the job that long)"),
        ));
    }
    Ok(ttl.as_secs_f64())
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
        let msg = holder("a\0b").unwrap_err().to_string();
        assert!(msg.contains("holder id") && msg.contains("NUL"), "{msg}");
        assert!(key(&"k".repeat(255)).is_ok());
    }

    #[test]
    fn durations_are_bounded_both_ways() {
        let msg = lease_secs("lease duration", Duration::ZERO).unwrap_err().to_string();
        assert!(msg.contains("0ns") && msg.contains("at least 10ms"), "{msg}");
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
