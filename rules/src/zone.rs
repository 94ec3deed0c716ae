//! IANA time zones (`chrono-tz` 0.10) and "did you mean".

use std::str::FromStr;

use chrono_tz::Tz;

use crate::RuleError;

const EXPECTED: &str = "expected an IANA name such as \"Europe/Paris\", \"America/New_York\" or \"UTC\"";

/// The zone named `name` (exactly: IANA names are case-sensitive). The
/// error (`what` = `"time zone"`) suggests the closest known name, or
/// explains that an abbreviation (`CEST`) is not a zone.
pub fn zone(name: &str) -> Result<Tz, RuleError> {
    Tz::from_str(name).map_err(|_| {
        let problem = match suggest_zone(name) {
            Some(known) => format!("unknown time zone; did you mean {known:?}? (IANA names, case-sensitive)"),
            None if abbreviation(name) => format!(
                "unknown time zone: an abbreviation names an offset, not a zone with its daylight-saving rules; \
                 {EXPECTED}"
            ),
            None => format!("unknown time zone; {EXPECTED}"),
        };
        RuleError::new("time zone", name, problem)
    })
}

/// `CEST`, `PDT`, `AEST`: what clocks show, not a zone.
fn abbreviation(name: &str) -> bool {
    (2..=5).contains(&name.len()) && name.chars().all(|c| c.is_ascii_uppercase())
}

/// The known zone closest to `name`: the same name in another case, the
/// one whose last part is `name` (`Paris`, `new york`), or one within a few
/// typos.
pub fn suggest_zone(name: &str) -> Option<&'static str> {
    let lower = name.trim().to_ascii_lowercase();
    if lower.is_empty() {
        return None;
    }
    let names = || chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name());
    names()
        .find(|known| known.to_ascii_lowercase() == lower)
        .or_else(|| {
            names().find(|known| {
                known
                    .rsplit('/')
                    .next()
                    .is_some_and(|city| city.to_ascii_lowercase() == lower.replace(' ', "_"))
            })
        })
        .or_else(|| {
            names()
                .map(|known| (edit_distance(&lower, &known.to_ascii_lowercase()), known))
                .filter(|(d, known)| *d <= 3 && *d * 3 < known.len())
                .min()
                .map(|(_, known)| known)
        })
}

/// Levenshtein distance, for "did you mean".
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitute = prev[j] + usize::from(ca != *cb);
            cur.push(substitute.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(name: &str) -> String {
        zone(name).unwrap_err().problem
    }

    #[test]
    fn known_zones_are_found() {
        for name in ["Europe/Paris", "UTC", "America/Argentina/Buenos_Aires", "EST"] {
            assert_eq!(zone(name).unwrap().name(), name);
        }
    }

    #[test]
    fn unknown_zones_are_named_with_a_suggestion() {
        let e = zone("Europe/Pariss").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid time zone \"Europe/Pariss\": unknown time zone; did you mean \"Europe/Paris\"? \
             (IANA names, case-sensitive)"
        );
        assert!(problem("europe/paris").contains("did you mean \"Europe/Paris\"?"));
        assert!(problem("Tokyo").contains("\"Asia/Tokyo\""));
        assert!(problem("New York").contains("\"America/New_York\""));
        let msg = problem("Mars/Olympus");
        assert!(msg.contains("an IANA name such as \"Europe/Paris\""), "{msg}");
        assert!(!msg.contains("did you mean"), "{msg}");
        assert!(problem("").contains("an IANA name"));
        assert!(problem("CEST").contains("an abbreviation"));
        assert_eq!(suggest_zone("paris"), Some("Europe/Paris"));
        assert_eq!(suggest_zone("  "), None);
    }

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("lease", "lease"), 0);
        assert_eq!(edit_distance("lese", "lease"), 1);
        assert_eq!(edit_distance("crn", "cron"), 1);
        assert_eq!(edit_distance("", "key"), 3);
    }
}
