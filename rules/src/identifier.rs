//! Lease keys, holder ids, job names: text PostgreSQL stores in a bounded
//! column.

use std::borrow::Cow;
use std::fmt;

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

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
    /// A character that is not seen, or that changes how the text around
    /// it displays ([`hidden_char`]).
    Hidden(char),
}

impl fmt::Display for IdentifierError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdentifierError::Empty => f.write_str("must not be empty"),
            IdentifierError::TooLong(bytes) => {
                write!(f, "is {bytes} bytes long, the limit is {MAX_KEY_BYTES} bytes")
            }
            IdentifierError::Nul => f.write_str("contains a NUL byte, which PostgreSQL text cannot store"),
            IdentifierError::Hidden(c) => write!(
                f,
                "contains U+{:04X} ({}), {}; remove it",
                u32::from(*c),
                escape_char(*c),
                hidden_kind(*c)
            ),
        }
    }
}

impl std::error::Error for IdentifierError {}

/// Checks an identifier: not empty, at most [`MAX_KEY_BYTES`] bytes, no NUL
/// and no [`hidden_char`] (a key, holder or job name that displays as
/// another, or reorders the line it is shown on, is refused).
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
    if let Some(c) = find_hidden(value) {
        return Err(IdentifierError::Hidden(c));
    }
    Ok(())
}

/// [`check_identifier`], with an error naming `what` (`"lease key"`,
/// `"holder id"`, `"job name"`, …) and the value.
pub fn identifier(what: &'static str, value: &str) -> Result<(), RuleError> {
    check_identifier(value).map_err(|e| RuleError::new(what, value, format!("it {e}")))
}

/// Whether `c` is never shown as is: it is not seen, or it changes how the
/// text around it displays. Built from the Unicode general categories
/// (`unicode-properties`), not a hand list:
///
/// - every control (`Cc`: NUL, newlines, terminal escapes) and format
///   character (`Cf`: the bidirectional controls U+202A–U+202E and
///   U+2066–U+2069 that reorder a line, U+200E/U+200F, the zero-width
///   U+200B–U+200D, U+2060–U+2064 such as INVISIBLE TIMES, U+FEFF, U+00AD,
///   the tag characters U+E0001–U+E007F…);
/// - the line and paragraph separators (`Zl`, `Zp`: U+2028, U+2029);
/// - the variation selectors (U+180B–U+180F, U+FE00–U+FE0F,
///   U+E0100–U+E01EF) and the other marks that display as nothing
///   (U+034F, U+17B4, U+17B5);
/// - the fillers, letters that display as blank space (U+115F, U+1160,
///   U+3164, U+FFA0, and U+2800 BRAILLE PATTERN BLANK);
/// - the code points Unicode reserves as default-ignorable (U+2065,
///   U+FFF0–U+FFF8, U+E0000–U+E0FFF), which a newer font may render as
///   nothing.
pub fn hidden_char(c: char) -> bool {
    matches!(
        c.general_category(),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
            | GeneralCategory::Surrogate
    ) || matches!(
        c,
        // Variation selectors.
        '\u{180b}'..='\u{180f}' | '\u{fe00}'..='\u{fe0f}' | '\u{e0100}'..='\u{e01ef}'
        // Marks that display as nothing.
        | '\u{034f}' | '\u{17b4}' | '\u{17b5}'
        // Fillers.
        | '\u{115f}' | '\u{1160}' | '\u{3164}' | '\u{ffa0}' | '\u{2800}'
        // Reserved default-ignorable code points.
        | '\u{2065}' | '\u{fff0}'..='\u{fff8}' | '\u{e0000}'..='\u{e0fff}'
    )
}

/// What kind of [`hidden_char`] `c` is, for messages.
fn hidden_kind(c: char) -> &'static str {
    match c.general_category() {
        GeneralCategory::Control => "a control character",
        GeneralCategory::Format if matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}') => {
            "a text-direction character that reorders what follows it"
        }
        GeneralCategory::Format => "an invisible format character",
        GeneralCategory::LineSeparator | GeneralCategory::ParagraphSeparator => "a line break",
        _ if matches!(c, '\u{115f}' | '\u{1160}' | '\u{3164}' | '\u{ffa0}' | '\u{2800}') => {
            "a filler that displays as blank space"
        }
        _ => "an invisible character (a variation selector or an ignorable code point)",
    }
}

/// The first [`hidden_char`] in `value`.
pub fn find_hidden(value: &str) -> Option<char> {
    value.chars().find(|c| hidden_char(*c))
}

/// `c` as Rust writes it in a string: `\n`, `\t`, `\0` for those, else
/// `\u{202e}`.
fn escape_char(c: char) -> String {
    match c {
        '\n' | '\r' | '\t' | '\0' => c.escape_debug().collect(),
        _ => format!("\\u{{{:x}}}", u32::from(c)),
    }
}

/// `value` with every [`hidden_char`] written out visibly, as Rust writes
/// it in a string (`\u{202e}`, `\n`): what the console, the CLI and the
/// log fields operators read show of text that may hold them (job error
/// texts, rows stored before the rule). Borrowed when there is none.
///
/// Escaping is not reversible (a literal backslash stays as it is); it
/// serves reading, never as a value to act on.
pub fn escape_hidden(value: &str) -> Cow<'_, str> {
    if find_hidden(value).is_none() {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len() + 16);
    for c in value.chars() {
        if hidden_char(c) {
            out.push_str(&escape_char(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Checks a name recorded as who acted (an operator, a console user, who
/// paused a key): not blank, at most [`MAX_KEY_BYTES`] bytes, no control
/// character, and nothing that displays it as another name
/// ([`hidden_char`]: `"admin\u{2062}"` would display as "admin"). The one
/// rule for "who did this": `Operator`, `Controls::pause`, the console's
/// actors and the CLI's `--by` all check it.
pub fn actor(value: &str) -> Result<(), RuleError> {
    let problem = if value.trim().is_empty() {
        "must name who acts (e.g. user@host)".to_owned()
    } else if value.len() > MAX_KEY_BYTES {
        format!("is {} bytes long, the limit is {MAX_KEY_BYTES} bytes", value.len())
    } else if let Some(c) = value.chars().find(|c| c.is_control()) {
        format!("contains the control character U+{:04X}; remove it", u32::from(c))
    } else if let Some(c) = find_hidden(value) {
        format!(
            "contains U+{:04X} ({}), an invisible or text-direction character that makes a name display as \
             another; remove it",
            u32::from(c),
            escape_char(c)
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
            "admin\u{2062}",
            "admin\u{3164}",
            "admin\u{fe0f}",
            "admin\u{e0041}",
        ] {
            let msg = actor(fake).unwrap_err().to_string();
            assert!(msg.contains("text-direction"), "{fake:?}: {msg}");
        }
        assert!(actor("a\nb").unwrap_err().to_string().contains("U+000A"));
        assert!(actor("  ").is_err());
        assert!(actor(&"a".repeat(256)).is_err());
    }

    #[test]
    fn identifiers_refuse_what_displays_as_something_else() {
        for (value, shown) in [
            ("a\u{2069}\u{202e}b", "\\u{2069}"),
            ("admin\u{2062}", "\\u{2062}"),
            ("job\u{3164}", "\\u{3164}"),
            ("k\u{fe0f}", "\\u{fe0f}"),
            ("line\u{2028}break", "\\u{2028}"),
            ("tab\there", "\\t"),
        ] {
            let e = identifier("lease key", value).unwrap_err();
            assert!(e.value.contains(shown), "the value is shown escaped: {e}");
            assert!(
                !e.to_string().chars().any(hidden_char),
                "the message holds no hidden character: {e:?}"
            );
            assert!(e.problem.contains("; remove it"), "{e}");
        }
        assert_eq!(check_identifier("Zoë/東京:β-1 ok"), Ok(()));
        assert_eq!(escape_hidden("plain"), Cow::Borrowed("plain"));
        assert_eq!(escape_hidden("a\u{202e}b\n"), "a\\u{202e}b\\n");
    }
}
