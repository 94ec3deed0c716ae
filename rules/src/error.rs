//! [`RuleError`]: what broke which rule, and how to fix it.

use std::fmt;

/// A value that breaks a rule.
///
/// Displays as `invalid {what} {value}: {problem}`, the wording of
/// `leasehold::Error::InvalidInput`, which it maps to field by field. The
/// derive shows only [`problem`](RuleError::problem), after the attribute as
/// written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleError {
    /// What the value is (`"lease key"`, `"heartbeat interval"`, …).
    pub what: &'static str,
    /// The offending value as shown: a string quoted, a duration in the
    /// attribute syntax (`90s`, `1h30m`); at most 80 bytes (longer values
    /// are cut, with `...`).
    pub value: String,
    /// The rule it breaks and how to fix it.
    pub problem: String,
}

impl RuleError {
    /// An error about `value`, shown with `Debug` (strings quoted), every
    /// [`hidden_char`](crate::hidden_char) escaped (`\u{3164}`, which
    /// `Debug` leaves as is).
    pub fn new(what: &'static str, value: impl fmt::Debug, problem: impl Into<String>) -> RuleError {
        let shown = format!("{value:?}");
        RuleError::shown(what, crate::escape_hidden(&shown).into_owned(), problem)
    }

    /// An error about a value already rendered as `shown`.
    pub(crate) fn shown(what: &'static str, mut shown: String, problem: impl Into<String>) -> RuleError {
        if shown.len() > 80 {
            let cut = (0..=77).rev().find(|i| shown.is_char_boundary(*i)).unwrap_or(0);
            shown.truncate(cut);
            shown.push_str("...");
        }
        RuleError {
            what,
            value: shown,
            problem: problem.into(),
        }
    }
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {} {}: {}", self.what, self.value, self.problem)
    }
}

impl std::error::Error for RuleError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shows_what_value_and_problem_and_shortens_huge_values() {
        let e = RuleError::new("lease key", "", "it must not be empty");
        assert_eq!(e.to_string(), "invalid lease key \"\": it must not be empty");
        let e = RuleError::new("lease key", "é".repeat(100), "too long");
        assert!(e.value.len() <= 80 && e.value.ends_with("..."), "{}", e.value);
    }
}
