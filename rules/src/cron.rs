//! Cron expressions: parsed by `croner` 4 with its default options (5
//! fields, or 6 with seconds first; `@daily` and friends), as
//! `Schedule::cron` reads them, and required to fire at least once.

use std::str::FromStr;

use croner::Cron;

use crate::RuleError;

/// The five fields of a cron expression, in order.
pub const CRON_FIELDS: &str = "minute hour day-of-month month day-of-week";

/// Parses `expr`. The error (`what` = `"cron expression"`) names the field
/// at fault when one is invalid on its own, or the field count.
pub fn cron(expr: &str) -> Result<Cron, RuleError> {
    Cron::from_str(expr).map_err(|e| {
        let e = e.to_string();
        let e = e.trim_end_matches('.');
        let problem = match culprit(expr) {
            Some(culprit) => format!("{culprit} ({e})"),
            None => format!(
                "{e}; expected 5 fields ({CRON_FIELDS}) or 6 with seconds first, \
                 e.g. \"0 3 * * *\" for 03:00 UTC daily"
            ),
        };
        RuleError::new("cron expression", expr, problem)
    })
}

/// Checks that `cron` matches at least one date (`0 0 30 2 *` never does).
///
/// Looked for from 2000 on, on the wall clock: a time zone only moves
/// matches, never removes them (a local time the clocks skip still runs, at
/// the end of the gap).
pub fn cron_fires(cron: &Cron) -> Result<(), RuleError> {
    let start = chrono::DateTime::from_timestamp(365 * 30 * 86_400, 0)
        .expect("a valid timestamp")
        .naive_utc();
    cron.find_next_occurrence(&start, false)
        .map(drop)
        .map_err(|_| RuleError::new("cron expression", cron.as_str(), "it never fires (no date matches it)"))
}

/// Which part of an invalid expression is wrong: the field count, or the
/// first field that is invalid on its own (the others set to `*`).
fn culprit(expr: &str) -> Option<String> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    if fields.first().is_some_and(|f| f.starts_with('@')) {
        return None;
    }
    let names: &[(&str, &str)] = &[
        ("second", "0-59"),
        ("minute", "0-59"),
        ("hour", "0-23"),
        ("day-of-month", "1-31"),
        ("month", "1-12 or JAN-DEC"),
        ("day-of-week", "0-7 or SUN-SAT"),
        ("year", ""),
    ];
    let names = match fields.len() {
        5 => &names[1..6],
        6 => &names[..6],
        7 => names,
        n => {
            return Some(format!(
                "it has {n} field{}; expected 5 fields ({CRON_FIELDS}) or 6 with seconds first",
                if n == 1 { "" } else { "s" }
            ));
        }
    };
    fields.iter().enumerate().find_map(|(i, field)| {
        let alone: Vec<&str> = (0..fields.len()).map(|j| if i == j { field } else { "*" }).collect();
        Cron::from_str(&alone.join(" ")).err().map(|_| {
            let (name, range) = names[i];
            let range = if range.is_empty() {
                String::new()
            } else {
                format!(" ({range})")
            };
            let list: Vec<&str> = names.iter().map(|(name, _)| *name).collect();
            format!(
                "the {name} field `{field}` is invalid{range}; the fields are {}",
                list.join(" ")
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(expr: &str) -> String {
        cron(expr).unwrap_err().problem
    }

    #[test]
    fn valid_expressions_parse() {
        for expr in [
            "0 3 * * *",
            "*/10 * * * * *",
            "@daily",
            "30 2 * * MON-FRI",
            "0 0 1 JAN *",
        ] {
            cron_fires(&cron(expr).unwrap()).unwrap();
        }
    }

    #[test]
    fn bad_expressions_name_the_field_and_its_range() {
        let e = cron("0 25 * * *").unwrap_err();
        assert_eq!((e.what, e.value.as_str()), ("cron expression", "\"0 25 * * *\""));
        assert!(
            e.problem.starts_with(
                "the hour field `25` is invalid (0-23); the fields are minute hour day-of-month month day-of-week ("
            ),
            "{}",
            e.problem
        );
        assert!(problem("0 0 1 13 *").contains("the month field `13`"));
        assert!(problem("61 * * * * *").contains("the second field `61`"));
        let msg = problem("0 3 * *");
        assert!(msg.contains("it has 4 fields; expected 5 fields"), "{msg}");
        assert!(problem("0").contains("it has 1 field;"));
        assert!(problem("@fortnightly").contains("expected 5 fields"));
        assert!(cron("").is_err());
    }

    #[test]
    fn an_expression_that_never_fires_is_refused() {
        let e = cron_fires(&cron("0 0 30 2 *").unwrap()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid cron expression \"0 0 30 2 *\": it never fires (no date matches it)"
        );
        cron_fires(&cron("0 0 29 2 *").unwrap()).unwrap();
    }
}
