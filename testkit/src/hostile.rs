//! Hostile text: every Unicode character that is not seen or that changes
//! how the text around it displays, by class, for the tests that check
//! names refuse them and displays show them escaped.
//!
//! The classes are written out here by hand from the Unicode character
//! database (18.0), independently of the rule they test
//! (`leasehold_rules::hidden_char`, built from `unicode-properties`); a
//! unit test checks that they hold every control (`Cc`) and format (`Cf`)
//! character the data lists, so a new Unicode version that adds one fails
//! here until it is classed.

/// Closes the page's (or the terminal's) isolate, then overrides the
/// direction of everything after it: the text that reordered a console
/// row and a `leasehold status` line.
pub const REORDER: &str = "\u{2069}\u{202e}";

/// `admin` followed by INVISIBLE TIMES: displays as `admin`.
pub const FAKE_ADMIN: &str = "admin\u{2062}";

/// One class of hidden characters: its name and its code point ranges.
pub struct Class {
    /// What the class is, for messages.
    pub name: &'static str,
    /// Its characters, as inclusive ranges.
    pub ranges: &'static [(char, char)],
}

impl Class {
    /// Every character of the class.
    pub fn chars(&self) -> impl Iterator<Item = char> + '_ {
        self.ranges.iter().flat_map(|&(a, b)| a..=b)
    }

    /// A name carrying one character of the class in its middle (the
    /// class's first), e.g. `ops\u{202e}-x`.
    pub fn sample(&self) -> String {
        format!("ops{}-x", self.ranges[0].0)
    }
}

/// Every class, controls and format characters first.
pub const CLASSES: &[Class] = &[
    Class {
        name: "C0 control (Cc)",
        ranges: &[('\u{1}', '\u{1f}'), ('\u{0}', '\u{0}')],
    },
    Class {
        name: "DEL and C1 controls (Cc)",
        ranges: &[('\u{7f}', '\u{9f}')],
    },
    Class {
        name: "bidirectional embedding and override (Cf)",
        ranges: &[('\u{202e}', '\u{202e}'), ('\u{202a}', '\u{202d}')],
    },
    Class {
        name: "bidirectional isolate (Cf)",
        ranges: &[('\u{2069}', '\u{2069}'), ('\u{2066}', '\u{2068}')],
    },
    Class {
        name: "bidirectional mark (Cf)",
        ranges: &[('\u{200e}', '\u{200f}'), ('\u{61c}', '\u{61c}')],
    },
    Class {
        name: "zero-width space, joiners, word joiner, byte order mark (Cf)",
        ranges: &[
            ('\u{200b}', '\u{200d}'),
            ('\u{2060}', '\u{2060}'),
            ('\u{feff}', '\u{feff}'),
        ],
    },
    Class {
        name: "invisible operators (Cf)",
        ranges: &[
            ('\u{2062}', '\u{2062}'),
            ('\u{2061}', '\u{2061}'),
            ('\u{2063}', '\u{2064}'),
        ],
    },
    Class {
        name: "deprecated format characters (Cf)",
        ranges: &[('\u{206a}', '\u{206f}')],
    },
    Class {
        name: "soft hyphen (Cf)",
        ranges: &[('\u{ad}', '\u{ad}')],
    },
    Class {
        name: "prepended concatenation marks (Cf)",
        ranges: &[
            ('\u{600}', '\u{605}'),
            ('\u{6dd}', '\u{6dd}'),
            ('\u{70f}', '\u{70f}'),
            ('\u{890}', '\u{891}'),
            ('\u{8e2}', '\u{8e2}'),
            ('\u{110bd}', '\u{110bd}'),
            ('\u{110cd}', '\u{110cd}'),
        ],
    },
    Class {
        name: "Mongolian vowel separator (Cf)",
        ranges: &[('\u{180e}', '\u{180e}')],
    },
    Class {
        name: "interlinear annotation (Cf)",
        ranges: &[('\u{fff9}', '\u{fffb}')],
    },
    Class {
        name: "Egyptian hieroglyph format controls (Cf)",
        ranges: &[('\u{13430}', '\u{1343f}')],
    },
    Class {
        name: "shorthand format controls (Cf)",
        ranges: &[('\u{1bca0}', '\u{1bca3}')],
    },
    Class {
        name: "musical symbol format controls (Cf)",
        ranges: &[('\u{1d173}', '\u{1d17a}')],
    },
    Class {
        name: "tag characters (Cf)",
        ranges: &[('\u{e0001}', '\u{e0001}'), ('\u{e0020}', '\u{e007f}')],
    },
    Class {
        name: "line and paragraph separators (Zl, Zp)",
        ranges: &[('\u{2028}', '\u{2029}')],
    },
    Class {
        name: "variation selectors (Mn)",
        ranges: &[
            ('\u{fe0f}', '\u{fe0f}'),
            ('\u{fe00}', '\u{fe0e}'),
            ('\u{e0100}', '\u{e01ef}'),
        ],
    },
    Class {
        name: "Mongolian free variation selectors (Mn)",
        ranges: &[('\u{180b}', '\u{180d}'), ('\u{180f}', '\u{180f}')],
    },
    Class {
        name: "marks that display as nothing (Mn)",
        ranges: &[('\u{34f}', '\u{34f}'), ('\u{17b4}', '\u{17b5}')],
    },
    Class {
        name: "fillers (Lo, So)",
        ranges: &[
            ('\u{3164}', '\u{3164}'),
            ('\u{115f}', '\u{1160}'),
            ('\u{ffa0}', '\u{ffa0}'),
            ('\u{2800}', '\u{2800}'),
        ],
    },
];

/// Every character of every class.
pub fn hidden_chars() -> impl Iterator<Item = char> {
    CLASSES.iter().flat_map(Class::chars)
}

/// One name per class ([`Class::sample`]), with [`REORDER`] and
/// [`FAKE_ADMIN`], each with its class's name.
pub fn samples() -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, String)> = CLASSES.iter().map(|c| (c.name, c.sample())).collect();
    out.push((
        "an isolate closed, then the direction overridden",
        format!("k{REORDER}evil"),
    ));
    out.push(("a name that displays as another", FAKE_ADMIN.to_owned()));
    out
}

#[cfg(test)]
mod tests {
    use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

    use super::*;

    #[test]
    fn the_classes_hold_every_control_and_format_character_unicode_lists() {
        let listed: std::collections::BTreeSet<char> = hidden_chars().collect();
        let missing: Vec<String> = (char::MIN..=char::MAX)
            .filter(|c| matches!(c.general_category(), GeneralCategory::Control | GeneralCategory::Format))
            .filter(|c| !listed.contains(c))
            .map(|c| format!("U+{:04X}", u32::from(c)))
            .collect();
        assert!(missing.is_empty(), "not in any class: {missing:?}");
    }
}
