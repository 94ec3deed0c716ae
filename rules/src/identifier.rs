//! Lease keys, holder ids, job names: text PostgreSQL stores in a bounded
//! column.

use std::fmt;

use crate::{MAX_KEY_BYTES, RuleError};

/// What is wrong with an identifier. Displays as a predicate (`must not be
/// empty`), so that it reads after the identifier's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentifierError {
    /// `""`.
    Empty,
    /// More than [`MAX_KEY_BYTES`] bytes (the length in bytes).
    TooLong(usize),
    /// A NUL byte, which PostgreSQL text cannot store.
    Nul,
}

impl fmt::Display for IdentifierError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdentifierError::Empty => f.write_str("must not be empty"),
            IdentifierError::TooLong(bytes) => {
                write!(f, "is {bytes} bytes long, the limit is {MAX_KEY_BYTES} bytes")
            }
            IdentifierError::Nul => f.write_str("contains a NUL byte, which PostgreSQL text cannot store"),
        }
    }
}

impl std::error::Error for IdentifierError {}

/// Checks an identifier: not empty, at most [`MAX_KEY_BYTES`] bytes, no NUL.
pub fn check_identifier(value: &str) -> Result<(), IdentifierError> {
    if value.is_empty() {
        return Err(IdentifierError::Empty);
    }
    if value.len() > MAX_KEY_BYTES {
        return Err(IdentifierError::TooLong(value.len()));
    }
    if value.contains('\0') {
        return Err(IdentifierError::Nul);
    }
    Ok(())
}

/// [`check_identifier`], with an error naming `what` (`"lease key"`,
/// `"holder id"`, `"job name"`, …) and the value.
pub fn identifier(what: &'static str, value: &str) -> Result<(), RuleError> {
    check_identifier(value).map_err(|e| RuleError::new(what, value, format!("it {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_identifiers_name_the_value_the_limit_and_the_fix() {
        let msg = identifier("lease key", "").unwrap_err().to_string();
        assert_eq!(msg, "invalid lease key \"\": it must not be empty");
        let long = "k".repeat(300);
        let msg = identifier("lease key", &long).unwrap_err().to_string();
        assert!(msg.contains("300 bytes long, the limit is 255 bytes"), "{msg}");
        assert!(msg.len() < 300, "huge values are shortened: {msg}");
        let msg = identifier("holder id", "a\0b").unwrap_err().to_string();
        assert!(msg.contains("holder id \"a\\0b\"") && msg.contains("NUL"), "{msg}");
        assert_eq!(check_identifier(&"k".repeat(MAX_KEY_BYTES)), Ok(()));
        assert_eq!(
            check_identifier(&"é".repeat(128)),
            Err(IdentifierError::TooLong(256)),
            "bytes, not characters"
        );
        assert_eq!(IdentifierError::Empty.to_string(), "must not be empty");
    }
}
