//! Human-readable durations, times and aligned tables.

use chrono::{DateTime, TimeDelta, Utc};
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// Seconds in a signed time difference, with microsecond precision.
pub(crate) fn secs(d: TimeDelta) -> f64 {
    match d.num_microseconds() {
        Some(us) => us as f64 / 1e6,
        None => d.num_seconds() as f64,
    }
}

/// A length of time, rounded for reading: `0.4s`, `41s`, `4m 10s`, `3h 12m`,
/// `2d 4h`. The sign is dropped: callers say "in" or "ago".
pub(crate) fn span(seconds: f64) -> String {
    let s = seconds.abs();
    if s < 10.0 {
        return format!("{s:.1}s");
    }
    let whole = s.round() as u64;
    let (d, h, m, sec) = (whole / 86_400, whole / 3600 % 24, whole / 60 % 60, whole % 60);
    if whole < 60 {
        format!("{sec}s")
    } else if whole < 3600 {
        format!("{m}m {sec}s")
    } else if whole < 86_400 {
        format!("{h}h {m}m")
    } else {
        format!("{d}d {h}h")
    }
}

/// `in 41s` / `41s ago`, from a signed number of seconds.
pub(crate) fn relative(seconds: f64) -> String {
    if seconds >= 0.0 {
        format!("in {}", span(seconds))
    } else {
        format!("{} ago", span(seconds))
    }
}

/// A server timestamp as `2025-06-01 03:00:00Z`.
pub(crate) fn time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%SZ").to_string()
}

/// A character the CLI never prints as is: every hidden character
/// ([`leasehold_rules::hidden_char`], from the Unicode general categories):
/// controls (newlines, terminal escapes), format characters (U+2069 then
/// U+202E would reorder the rest of a `status` line, INVISIBLE TIMES hide
/// in a name), separators, variation selectors and fillers.
pub(crate) fn unsafe_char(c: char) -> bool {
    leasehold_rules::hidden_char(c)
}

/// A value from the database made safe for one table cell: when it holds
/// a hidden character it is shown quoted, as Rust writes a string, with
/// every hidden character escaped (`"\u{202e}nimda"`; `Debug` alone
/// leaves fillers and variation selectors as they are); otherwise as is.
pub(crate) fn cell(value: &str) -> String {
    if !value.chars().any(unsafe_char) {
        return value.to_owned();
    }
    let mut out = String::with_capacity(value.len() + 8);
    out.push('"');
    for c in value.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
            out.push(c);
        } else if unsafe_char(c) {
            out.push_str(&leasehold_rules::escape_hidden(c.encode_utf8(&mut [0; 4])));
        } else {
            out.push(c);
        }
    }
    out.push('"');
    out
}

/// A value as one shell word, for commands the CLI suggests: as is when it
/// is plain (`billing:acme`), single-quoted otherwise (`'a b'`,
/// `'it'\''s'`). A value with control characters is shown escaped, as
/// [`cell`] does: safe to print, to be retyped by hand.
pub(crate) fn shell_word(value: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "@%+=:,./_-".contains(c);
    if !value.is_empty() && value.chars().all(plain) {
        value.to_owned()
    } else if value.chars().any(unsafe_char) {
        cell(value)
    } else {
        format!("'{}'", value.replace('\'', r"'\''"))
    }
}

/// A message on one line: every run of whitespace (newlines included)
/// becomes one space, other control characters are shown escaped.
pub(crate) fn one_line(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut space = false;
    for c in value.trim().chars() {
        if c.is_whitespace() {
            space = true;
            continue;
        }
        if space {
            out.push(' ');
            space = false;
        }
        if unsafe_char(c) {
            out.push_str(&leasehold_rules::escape_hidden(c.encode_utf8(&mut [0; 4])));
        } else {
            out.push(c);
        }
    }
    out
}

/// How many terminal columns `value` takes: two for a CJK character, none
/// for a combining mark.
pub(crate) fn width(value: &str) -> usize {
    value.width()
}

/// At most `max` terminal columns (at least one), ending with `…` when
/// cut; never cuts between a character and its combining marks.
pub(crate) fn cut(value: &str, max: usize) -> String {
    let max = max.max(1);
    if width(value) <= max {
        return value.to_owned();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in value.chars() {
        let w = c.width().unwrap_or(0);
        if used + w > max - 1 {
            break;
        }
        used += w;
        out.push(c);
    }
    out.truncate(out.trim_end().len());
    out.push('…');
    out
}

/// `1 key`, `2 keys`.
pub(crate) fn plural(n: u64, one: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {one}s")
    }
}

/// The terminal's width in characters, from `COLUMNS` when the shell
/// exports it; `None` otherwise (output to a pipe, or not exported).
pub(crate) fn terminal_width() -> Option<usize> {
    std::env::var("COLUMNS").ok()?.trim().parse().ok().filter(|w| *w >= 20)
}

/// [`table`], with the last column's cells cut (ending with `…`) so the
/// lines fit `terminal` columns, leaving it at least 20; without a
/// terminal width, to `fallback` columns.
pub(crate) fn table_fitted(
    header: &[(&str, Align)],
    mut rows: Vec<Vec<String>>,
    terminal: Option<usize>,
    fallback: usize,
) -> String {
    let last = header.len().saturating_sub(1);
    let budget = match terminal {
        Some(terminal) => {
            let mut widths: Vec<usize> = header[..last].iter().map(|(h, _)| width(h)).collect();
            for row in &rows {
                for (w, value) in widths.iter_mut().zip(row) {
                    *w = (*w).max(width(value));
                }
            }
            let others: usize = widths.iter().map(|w| w + 2).sum();
            terminal.saturating_sub(others).max(20)
        }
        None => fallback,
    };
    for row in &mut rows {
        if let Some(cell) = row.get_mut(last) {
            *cell = cut(cell, budget);
        }
    }
    table(header, &rows)
}

/// Left or right alignment of a column.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Align {
    Left,
    Right,
}

/// Renders rows under a header, columns separated by two spaces and
/// measured in terminal columns ([`width`]), trailing spaces trimmed.
pub(crate) fn table(header: &[(&str, Align)], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|(h, _)| width(h)).collect();
    for row in rows {
        for (w, value) in widths.iter_mut().zip(row) {
            *w = (*w).max(width(value));
        }
    }
    let line = |values: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for ((value, (_, align)), column) in values.zip(header).zip(&widths) {
            let pad = column.saturating_sub(width(value));
            if !out.is_empty() {
                out.push_str("  ");
            }
            if *align == Align::Right {
                out.extend(std::iter::repeat_n(' ', pad));
                out.push_str(value);
            } else {
                out.push_str(value);
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        out
    };
    let mut out = line(&mut header.iter().map(|(h, _)| *h));
    for row in rows {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_naturally() {
        assert_eq!(span(0.42), "0.4s");
        assert_eq!(span(-41.2), "41s");
        assert_eq!(span(250.0), "4m 10s");
        assert_eq!(span(3.0 * 3600.0 + 12.0 * 60.0 + 5.0), "3h 12m");
        assert_eq!(span(2.0 * 86_400.0 + 4.0 * 3600.0), "2d 4h");
        assert_eq!(relative(5.0), "in 5.0s");
        assert_eq!(relative(-75.0), "1m 15s ago");
    }

    #[test]
    fn shell_words_paste_back() {
        assert_eq!(shell_word("billing:acme/tenant-42"), "billing:acme/tenant-42");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's $HOME"), r"'it'\''s $HOME'");
        assert_eq!(shell_word("two\nlines"), r#""two\nlines""#);
    }

    #[test]
    fn messages_fit_on_one_line() {
        assert_eq!(
            one_line("  connection refused\n\tat line 3\r\n "),
            "connection refused at line 3"
        );
        assert_eq!(one_line("bell\u{7}"), "bell\\u{7}");
        assert_eq!(cut("abcdef", 6), "abcdef");
        assert_eq!(cut("abcdefg", 6), "abcde…");
        assert_eq!(cut("ab  cdefg", 4), "ab…");
        assert_eq!(plural(1, "key"), "1 key");
        assert_eq!(plural(0, "key"), "0 keys");
    }

    #[test]
    fn text_direction_and_invisible_characters_are_never_printed_raw() {
        assert_eq!(cell("\u{202e}nimda"), "\"\\u{202e}nimda\"");
        assert_eq!(cell("ad\u{200b}min"), "\"ad\\u{200b}min\"");
        assert_eq!(one_line("failed \u{2066}x"), "failed \\u{2066}x");
        assert_eq!(shell_word("\u{202e}key"), "\"\\u{202e}key\"");
        assert_eq!(cell("Zoë"), "Zoë");
        // Fillers and variation selectors, which `Debug` prints as is.
        assert_eq!(cell("admin\u{3164}"), "\"admin\\u{3164}\"");
        assert_eq!(cell("ok\u{fe0f}\"q\""), "\"ok\\u{fe0f}\\\"q\\\"\"");
        assert_eq!(one_line("a\u{2069}\u{202e}b"), "a\\u{2069}\\u{202e}b");
    }

    #[test]
    fn fitted_tables_cut_the_last_column() {
        let header = [("KEY", Align::Left), ("ERROR", Align::Left)];
        let rows = vec![vec!["k".to_owned(), "x".repeat(100)]];
        let out = table_fitted(&header, rows.clone(), None, 10);
        assert_eq!(out.lines().nth(1), Some(format!("k    {}…", "x".repeat(9)).as_str()));
        let out = table_fitted(&header, rows.clone(), Some(40), 10);
        assert!(out.lines().all(|l| l.chars().count() <= 40), "{out}");
        let out = table_fitted(&header, rows, Some(10), 10);
        assert!(
            out.lines().nth(1).unwrap().ends_with(&format!("{}…", "x".repeat(19))),
            "{out}"
        );
    }

    #[test]
    fn wide_and_combining_characters_are_measured_as_displayed() {
        assert_eq!(width("東京"), 4);
        assert_eq!(width("e\u{301}"), 1);
        assert_eq!(cut("東京大阪", 5), "東京…");
        assert_eq!(cut("e\u{301}e\u{301}e\u{301}", 2), "e\u{301}…");
        let header = [("KEY", Align::Left), ("FENCE", Align::Right)];
        let rows = vec![
            vec!["東京".to_owned(), "7".to_owned()],
            vec!["cafe\u{301}".to_owned(), "12".to_owned()],
        ];
        assert_eq!(table(&header, &rows), "KEY   FENCE\n東京      7\ncafe\u{301}     12\n");
    }

    #[test]
    fn tables_align_and_escape() {
        let header = [("KEY", Align::Left), ("FENCE", Align::Right)];
        let rows = vec![
            vec!["a".to_owned(), "7".to_owned()],
            vec![cell("long\nkey"), "12345".to_owned()],
        ];
        let out = table(&header, &rows);
        assert_eq!(out, "KEY          FENCE\na                7\n\"long\\nkey\"  12345\n");
    }
}
