//! The text form of a catch-up policy (`leasehold::CatchUp`): `once`,
//! `skip` or `all(N)`.

use std::fmt;

/// A catch-up policy read from its text form; `leasehold::CatchUp` and the
/// derive map it to their own type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUpText {
    /// `once`: one run for a missed stretch (the default).
    Once,
    /// `skip`: no run for missed slots.
    Skip,
    /// `all(N)`: a run for each of the latest N missed slots.
    All(u32),
}

impl fmt::Display for CatchUpText {
    /// The form [`parse_catch_up`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CatchUpText::Once => f.write_str("once"),
            CatchUpText::Skip => f.write_str("skip"),
            CatchUpText::All(n) => write!(f, "all({n})"),
        }
    }
}

/// The forms of `catch_up`.
fn catch_up_forms() -> String {
    format!(
        "expected \"once\" (the default: one run for a missed stretch), \"skip\" (no run for missed slots) or \
         \"all(N)\" (a run for each of the latest N missed slots, 1 to {}, e.g. \"all(24)\")",
        crate::MAX_CATCH_UP
    )
}

/// Parses the text form of `leasehold::CatchUp`: `once`, `skip` or
/// `all(N)`, `N` checked by [`catch_up_bound`](crate::catch_up_bound). The
/// one parser of it: the derive's `catch_up = "..."`, the stored keys of
/// job kinds and the CLI all read it here. Errors say the forms.
pub fn parse_catch_up(text: &str) -> Result<CatchUpText, String> {
    const MAX_CATCH_UP: u32 = crate::MAX_CATCH_UP;
    match text {
        "once" => return Ok(CatchUpText::Once),
        "skip" => return Ok(CatchUpText::Skip),
        _ => {}
    }
    let bare = text.trim().to_ascii_lowercase();
    let bare: String = bare.chars().filter(|c| !c.is_whitespace()).collect();
    if bare == "all" || bare == "all()" {
        return Err(format!(
            "`all` needs a bound: how many of the latest missed slots may run (1 to {MAX_CATCH_UP}), \
             e.g. `catch_up = \"all(24)\"`"
        ));
    }
    if let Some(inner) = text.trim().strip_prefix("all(").and_then(|rest| rest.strip_suffix(')')) {
        let inner = inner.trim();
        if !inner.is_empty() && inner.chars().all(|c| c.is_ascii_digit()) {
            return match inner.parse::<u32>().map(crate::catch_up_bound) {
                Ok(Ok(n)) => Ok(CatchUpText::All(n)),
                Ok(Err(_)) if inner.trim_start_matches('0').is_empty() => Err(format!(
                    "the bound of `all` must be 1 to {MAX_CATCH_UP}; for no runs for missed slots, write \"skip\""
                )),
                _ => Err(format!(
                    "the bound of `all` must be 1 to {MAX_CATCH_UP}, the most missed slots a key catches up on"
                )),
            };
        }
        return Err(format!(
            "the bound of `all` is a whole number from 1 to {MAX_CATCH_UP}, e.g. \"all(24)\""
        ));
    }
    if matches!(bare.as_str(), "once" | "skip") || bare.starts_with("all(") {
        return Err(format!("write it as {bare:?}"));
    }
    Err(format!("unknown catch-up policy; {}", catch_up_forms()))
}
