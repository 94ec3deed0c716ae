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

/// The first character of `value` that changes how the text around it
/// displays while not being seen itself: a bidirectional control (U+202A–
/// U+202E, U+2066–U+2069, U+200E, U+200F, U+061C) or an invisible one
/// (U+200B–U+200D, U+2060, U+FEFF, U+00AD). In a name shown as who did
/// something they let one name pass for another (`"\u{202e}nimda"`
/// displays as "admin").
pub fn deceptive_char(value: &str) -> Option<char> {
    value.chars().find(|c| {
        matches!(
            c,
            '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                | '\u{200b}'..='\u{200f}'
                | '\u{061c}'
                | '\u{2060}'
                | '\u{feff}'
                | '\u{00ad}'
        )
    })
}

/// Checks a name recorded as who acted (an operator, a console user):
/// not blank, at most [`MAX_KEY_BYTES`] bytes, no control character, and
/// nothing that displays it as another name ([`deceptive_char`]).
pub fn actor(value: &str) -> Result<(), RuleError> {
    let problem = if value.trim().is_empty() {
        "must name who acts (e.g. user@host)".to_owned()
    } else if value.len() > MAX_KEY_BYTES {
        format!("is {} bytes long, the limit is {MAX_KEY_BYTES} bytes", value.len())
    } else if let Some(c) = value.chars().find(|c| c.is_control()) {
        format!("contains the control character U+{:04X}", u32::from(c))
    } else if let Some(c) = deceptive_char(value) {
        format!(
            "contains U+{:04X}, an invisible or text-direction character that makes a name display as another",
            u32::from(c)
        )
    } else {
        return Ok(());
    };
    Err(RuleError::new("actor", value, problem))
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

    #[test]
    fn actors_cannot_display_as_someone_else() {
        assert_eq!(actor("alice@ops"), Ok(()));
        assert_eq!(actor("Zoë Ångström"), Ok(()));
        for fake in [
            "\u{202e}nimda",
            "ad\u{200b}min",
            "admin\u{2066}",
            "\u{feff}admin",
            "ad\u{200f}min",
        ] {
            let msg = actor(fake).unwrap_err().to_string();
            assert!(msg.contains("text-direction"), "{fake:?}: {msg}");
        }
        assert!(actor("a\nb").unwrap_err().to_string().contains("U+000A"));
        assert!(actor("  ").is_err());
        assert!(actor(&"a".repeat(256)).is_err());
    }
}
