//! What the settings mean: durations, the cron expression, the key template
//! against the struct's fields, and the rules between settings — the same
//! rules `leasehold` applies when the runtime starts, moved to compile time.
//!
//! Limits mirrored from the library (keep in step with `src/validate.rs` and
//! `src/job.rs` there; `tests/it/derive.rs` checks the constants):
//! `MIN_LEASE` 10ms, `MAX_LEASE` 7 days, `MAX_KEY_BYTES` 255,
//! `MAX_CATCH_UP` 1000, a schedule period of at least 100ms, and the
//! `JobSettings` defaults. Time zones are checked with the `chrono-tz`
//! version the library uses.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use proc_macro2::Span;
use syn::{Data, DeriveInput, Fields, Ident};

use crate::Errors;
use crate::parse::{RawJob, Setting, edit_distance};

/// `leasehold::MIN_LEASE`.
const MIN_LEASE: Duration = Duration::from_millis(10);
/// `leasehold::MAX_LEASE`.
const MAX_LEASE: Duration = Duration::from_secs(7 * 24 * 3600);
/// `leasehold::MAX_KEY_BYTES`.
const MAX_KEY_BYTES: usize = 255;
/// `leasehold::MAX_CATCH_UP`: the largest `N` of `catch_up = "all(N)"`.
const MAX_CATCH_UP: u32 = 1000;
/// The shortest `every` period `Schedule::validate` accepts.
const MIN_PERIOD: Duration = Duration::from_millis(100);
/// `JobSettings::new` defaults.
const DEFAULT_LEASE: Duration = Duration::from_secs(60);
const DEFAULT_RETRY: Duration = Duration::from_secs(1);
const DEFAULT_RETRY_MAX: Duration = Duration::from_secs(300);

/// A job's settings, checked; what `expand` turns into code. `None` means
/// "not given": the library's default applies.
pub(crate) struct Job {
    pub(crate) name: String,
    pub(crate) key: Option<Key>,
    pub(crate) schedule: Schedule,
    pub(crate) lease: Option<Duration>,
    pub(crate) heartbeat: Option<Duration>,
    pub(crate) margin: Option<Duration>,
    pub(crate) grace: Option<Duration>,
    /// `(initial, max)`, present when either `retry` or `retry_max` is given.
    pub(crate) retry: Option<(Duration, Duration)>,
    pub(crate) catch_up: Option<CatchUp>,
}

/// When the job runs.
pub(crate) enum Schedule {
    Manual,
    Every(Duration),
    /// A cron expression, read in the IANA zone `tz` (UTC if `None`).
    Cron {
        expr: String,
        tz: Option<String>,
    },
}

/// `catch_up = "..."`: `leasehold::CatchUp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CatchUp {
    Once,
    Skip,
    All(u32),
}

/// A lease key: literal text and fields of `self`, from `key = "..."`.
pub(crate) struct Key {
    /// The key string, where type errors about its fields should point.
    pub(crate) span: Span,
    pub(crate) segments: Vec<Segment>,
}

/// A piece of a key template.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Segment {
    /// Literal text (braces already unescaped).
    Text(String),
    /// `{field}`: a field of the struct, by the name written.
    Field(String),
}

/// Checks everything `parse` collected. Pushes one error per mistake and
/// returns `None` if there was any.
pub(crate) fn validate(input: &DeriveInput, raw: &RawJob, errors: &mut Errors) -> Option<Job> {
    let before = errors.len();

    if let Data::Enum(e) = &input.data {
        let ident = &input.ident;
        let enum_token = e.enum_token;
        errors.push(syn::Error::new_spanned(
            quote::quote!(#enum_token #ident),
            "#[derive(FencedJob)] only supports structs: a job is a struct whose fields its `run` uses; \
             for one job per variant, wrap the enum in a struct",
        ));
    }
    if let Data::Union(u) = &input.data {
        let ident = &input.ident;
        let union_token = u.union_token;
        errors.push(syn::Error::new_spanned(
            quote::quote!(#union_token #ident),
            "#[derive(FencedJob)] only supports structs, not unions",
        ));
    }

    if let Some(lifetime) = input.generics.lifetimes().next() {
        errors.push(syn::Error::new_spanned(
            lifetime,
            "a job cannot borrow: `FencedJob` requires `'static` (the runtime keeps the job for its whole life); \
             own the data instead (`String`, `Arc<T>`, a pool handle)",
        ));
    }

    let name = match &raw.name {
        Some(setting) => {
            let name = setting.value.value();
            if let Err(problem) = identifier(&name) {
                errors.push(value_error(setting, format!("job name {problem}")));
            }
            name
        }
        None => snake_case(&input.ident),
    };

    let key = raw.key.as_ref().and_then(|setting| match key(input, setting) {
        Ok(key) => Some(key),
        Err(e) => {
            errors.push(e);
            None
        }
    });

    let every = duration(raw.every.as_ref(), errors, |d| {
        (d < MIN_PERIOD)
            .then(|| format!("must be at least {MIN_PERIOD:?} (a period this short would only hammer the database)"))
    });
    let cron = raw
        .cron
        .as_ref()
        .and_then(|setting| match cron(&setting.value.value()) {
            Ok(()) => Some(setting.value.value()),
            Err(problem) => {
                errors.push(value_error(setting, problem));
                None
            }
        });
    let tz = raw.tz.as_ref().and_then(|setting| {
        if raw.cron.is_none() {
            let problem = if raw.every.is_some() {
                "`tz` is the time zone of a `cron` schedule, and `every` slots are aligned on the Unix epoch, \
                 in no zone; for times of day use `cron = \"0 3 * * *\"` with `tz`, or remove `tz`"
            } else {
                "`tz` is the time zone of a `cron` schedule, and this job has none; \
                 add `cron = \"0 3 * * *\"` (read in this zone), or remove `tz`"
            };
            errors.push(syn::Error::new_spanned(&setting.meta.path, problem));
            return None;
        }
        let name = setting.value.value();
        match zone(&name) {
            Ok(()) => Some(name),
            Err(problem) => {
                errors.push(value_error(setting, problem));
                None
            }
        }
    });
    let catch_up = raw
        .catch_up
        .as_ref()
        .and_then(|setting| match catch_up(&setting.value.value()) {
            Ok(policy) => Some(policy),
            Err(problem) => {
                errors.push(value_error(setting, problem));
                None
            }
        });
    let schedule = match (&raw.every, &raw.cron) {
        (Some(e), Some(c)) => {
            let later = if e.order > c.order { e } else { c };
            errors.push(syn::Error::new_spanned(
                &later.meta,
                "a job has one schedule: give `every` or `cron`, not both \
                 (or neither, for a job that only runs when triggered)",
            ));
            Schedule::Manual
        }
        _ => match (every, cron) {
            (Some(Ok(period)), _) => Schedule::Every(period),
            (_, Some(expr)) => Schedule::Cron { expr, tz },
            _ => Schedule::Manual,
        },
    };

    let lease = duration(raw.lease.as_ref(), errors, |d| {
        if d < MIN_LEASE {
            Some(format!(
                "must be at least {MIN_LEASE:?}: a lease shorter than a database round trip is lost at once"
            ))
        } else if d > MAX_LEASE {
            Some("must be at most 7 days (168h): a dead replica would block the job that long".to_owned())
        } else {
            None
        }
    });
    let heartbeat = duration(raw.heartbeat.as_ref(), errors, |_| None);
    let margin = duration(raw.margin.as_ref(), errors, |_| None);
    let grace = duration(raw.grace.as_ref(), errors, |_| None);
    let retry = duration(raw.retry.as_ref(), errors, |_| None);
    let retry_max = duration(raw.retry_max.as_ref(), errors, |_| None);

    // Rules between settings, checked only when every value involved is
    // itself valid (a bad lease is one mistake, not three).
    if let (Ok(lease_value), Ok(heartbeat_value)) =
        (given_or(lease, DEFAULT_LEASE), given_or(heartbeat, Duration::ZERO))
    {
        let lease_text = shown(raw.lease.as_ref(), lease_value);
        let heartbeat_eff = if raw.heartbeat.is_some() {
            heartbeat_value
        } else {
            lease_value / 3
        };
        if let Some(setting) = &raw.heartbeat
            && heartbeat_eff * 2 >= lease_value
        {
            errors.push(value_error(
                setting,
                format!(
                    "heartbeat must be below half the lease ({lease_text}), so that one late heartbeat \
                     still renews it; leave it out for lease/3 ({})",
                    human(lease_value / 3)
                ),
            ));
        } else if let (Some(setting), Ok(margin_value)) = (&raw.margin, given_or(margin, Duration::ZERO))
            && heartbeat_eff + margin_value >= lease_value
        {
            errors.push(value_error(
                setting,
                format!(
                    "heartbeat ({}) + margin must be below the lease ({lease_text}), or every run is \
                     cancelled before its first renewal; leave it out for lease/10 ({})",
                    shown(raw.heartbeat.as_ref(), heartbeat_eff).replace("the default", "lease/3"),
                    human(lease_value / 10)
                ),
            ));
        }
    }
    if let (Ok(initial), Ok(max)) = (given_or(retry, DEFAULT_RETRY), given_or(retry_max, DEFAULT_RETRY_MAX))
        && max < initial
    {
        // Point at what was written: `retry_max` if given, else the `retry`
        // that exceeds the default maximum.
        match (&raw.retry_max, &raw.retry) {
            (Some(setting), _) => errors.push(value_error(
                setting,
                format!(
                    "retry_max must be at least retry ({}): the backoff after a failure starts at retry \
                     and doubles up to retry_max",
                    shown(raw.retry.as_ref(), initial)
                ),
            )),
            (None, Some(setting)) => errors.push(value_error(
                setting,
                format!(
                    "retry is above the default retry_max ({}): the backoff after a failure starts at retry \
                     and doubles up to retry_max; set `retry_max = \"{}\"` or more too",
                    human(max),
                    setting.value.value()
                ),
            )),
            (None, None) => {}
        }
    }

    if errors.len() > before {
        return None;
    }
    let value = |d: Option<Result<Duration, ()>>| d.and_then(Result::ok);
    let retry = (raw.retry.is_some() || raw.retry_max.is_some()).then(|| {
        (
            value(retry).unwrap_or(DEFAULT_RETRY),
            value(retry_max).unwrap_or(DEFAULT_RETRY_MAX),
        )
    });
    Some(Job {
        name,
        key,
        schedule,
        lease: value(lease),
        heartbeat: value(heartbeat),
        margin: value(margin),
        grace: value(grace),
        retry,
        catch_up,
    })
}

/// `Some(Ok)` for a valid given duration, `Some(Err)` for an invalid one
/// (already reported), `None` if not given.
fn duration(
    setting: Option<&Setting>,
    errors: &mut Errors,
    bounds: impl FnOnce(Duration) -> Option<String>,
) -> Option<Result<Duration, ()>> {
    let setting = setting?;
    let name = setting_name(setting);
    let text = setting.value.value();
    let result = parse_duration(&text)
        .map_err(|e| e.to_string())
        .and_then(|d| bounds(d).map_or(Ok(d), Err));
    Some(result.map_err(|problem| {
        errors.push(syn::Error::new_spanned(
            &setting.value,
            format!("`{name} = {text:?}`: {problem}"),
        ));
    }))
}

/// The given value, or `default` when not given; `Err` when given but invalid.
fn given_or(value: Option<Result<Duration, ()>>, default: Duration) -> Result<Duration, ()> {
    value.unwrap_or(Ok(default))
}

/// `30s` for a given setting (as written), `60s, the default` otherwise.
fn shown(setting: Option<&Setting>, value: Duration) -> String {
    match setting {
        Some(s) => s.value.value(),
        None => format!("{}, the default", human(value)),
    }
}

/// A duration in the attribute syntax (`1h30m`, `16s666ms`), or `Debug`
/// when it is not whole milliseconds.
fn human(d: Duration) -> String {
    if !d.subsec_nanos().is_multiple_of(1_000_000) || d.is_zero() {
        return format!("{d:?}");
    }
    let mut ms = d.as_millis();
    let mut out = String::new();
    for (unit, size) in [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)] {
        if ms >= size {
            out.push_str(&format!("{}{unit}", ms / size));
            ms %= size;
        }
    }
    out
}

fn setting_name(setting: &Setting) -> String {
    setting
        .meta
        .path
        .get_ident()
        .map(ToString::to_string)
        .unwrap_or_default()
}

/// An error on a setting's value, prefixed with the setting as written.
fn value_error(setting: &Setting, problem: String) -> syn::Error {
    syn::Error::new_spanned(
        &setting.value,
        format!("`{} = {:?}`: {problem}", setting_name(setting), setting.value.value()),
    )
}

/// What is wrong with a duration string.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DurationError {
    Empty,
    Negative,
    NoNumber,
    Fraction,
    NoUnit(String),
    UnknownUnit(String),
    UnitOrder(&'static str),
    Unexpected(char),
    Overflow,
    Zero,
}

const UNITS_HELP: &str = "units: ms, s, m, h, largest first, e.g. \"250ms\", \"60s\", \"5m\", \"1h30m\"";

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DurationError::Empty => write!(f, "empty duration ({UNITS_HELP})"),
            DurationError::Negative => write!(f, "durations cannot be negative ({UNITS_HELP})"),
            DurationError::NoNumber => write!(f, "expected a number before the unit ({UNITS_HELP})"),
            DurationError::Fraction => write!(f, "fractions are not supported; write 1s500ms, not 1.5s ({UNITS_HELP})"),
            DurationError::NoUnit(n) => write!(f, "`{n}` has no unit; write \"{n}s\" for seconds ({UNITS_HELP})"),
            DurationError::UnknownUnit(u) => {
                let hint = match u.as_str() {
                    "d" | "day" | "days" => "; for days write hours, e.g. \"24h\"",
                    "sec" | "secs" | "second" | "seconds" => "; write \"s\"",
                    "min" | "mins" | "minute" | "minutes" => "; write \"m\"",
                    "hr" | "hrs" | "hour" | "hours" => "; write \"h\"",
                    "us" | "µs" | "ns" => "; the smallest unit is ms",
                    _ => "",
                };
                write!(f, "unknown unit `{u}`{hint} ({UNITS_HELP})")
            }
            DurationError::UnitOrder(u) => {
                write!(
                    f,
                    "unit `{u}` is repeated or out of order; give each unit once, largest first ({UNITS_HELP})"
                )
            }
            DurationError::Unexpected(' ') => write!(f, "spaces are not allowed ({UNITS_HELP})"),
            DurationError::Unexpected(c) => write!(f, "unexpected {c:?} ({UNITS_HELP})"),
            DurationError::Overflow => write!(f, "duration is too large"),
            DurationError::Zero => write!(f, "duration must be above zero"),
        }
    }
}

/// Parses `250ms`, `60s`, `5m`, `1h`, `1h30m`: whole numbers each followed
/// by a unit, units at most once each and largest first. Zero, negative and
/// overflowing values are errors.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    const UNITS: &[(&str, u64)] = &[("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    if text.starts_with('-') {
        return Err(DurationError::Negative);
    }
    let mut rest = text;
    let mut total_ms: u64 = 0;
    // Index into UNITS of the next unit allowed (each one smaller).
    let mut next_unit = 0;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let (number, after) = rest.split_at(digits);
        if number.is_empty() {
            return Err(match after.chars().next() {
                Some(c) if c.is_alphabetic() => DurationError::NoNumber,
                Some('.') => DurationError::Fraction,
                Some('-') => DurationError::Negative,
                Some(c) => DurationError::Unexpected(c),
                None => DurationError::Empty,
            });
        }
        let letters = after.find(|c: char| !c.is_alphabetic()).unwrap_or(after.len());
        let (unit, after) = after.split_at(letters);
        if unit.is_empty() {
            return Err(match after.chars().next() {
                None => DurationError::NoUnit(number.to_owned()),
                Some('.') => DurationError::Fraction,
                Some(c) => DurationError::Unexpected(c),
            });
        }
        let Some(index) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(DurationError::UnknownUnit(unit.to_owned()));
        };
        if index < next_unit {
            return Err(DurationError::UnitOrder(UNITS[index].0));
        }
        next_unit = index + 1;
        let number: u64 = number.parse().map_err(|_| DurationError::Overflow)?;
        let ms = number.checked_mul(UNITS[index].1).ok_or(DurationError::Overflow)?;
        total_ms = total_ms.checked_add(ms).ok_or(DurationError::Overflow)?;
        rest = after;
    }
    if total_ms == 0 {
        return Err(DurationError::Zero);
    }
    Ok(Duration::from_millis(total_ms))
}

/// The checks `leasehold` runs on a lease key or a job name.
fn identifier(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if value.len() > MAX_KEY_BYTES {
        return Err(format!(
            "is {} bytes long; the limit is {MAX_KEY_BYTES} bytes",
            value.len()
        ));
    }
    if value.contains('\0') {
        return Err("contains a NUL byte, which PostgreSQL text cannot store".to_owned());
    }
    Ok(())
}

/// `key = "..."`: parses the template and resolves `{field}`s.
fn key(input: &DeriveInput, setting: &Setting) -> syn::Result<Key> {
    let lit = &setting.value;
    let text = lit.value();
    let err = |problem: String| syn::Error::new_spanned(lit, format!("`key = {text:?}`: {problem}"));
    let segments = parse_template(&text).map_err(|e| err(e.to_string()))?;
    let literal: String = segments
        .iter()
        .filter_map(|s| match s {
            Segment::Text(t) => Some(t.as_str()),
            Segment::Field(_) => None,
        })
        .collect();
    let has_fields = segments.iter().any(|s| matches!(s, Segment::Field(_)));
    if text.is_empty() {
        return Err(err(
            "the lease key must not be empty; leave `key` out to use the job name".to_owned(),
        ));
    }
    if let Err(problem) = identifier(&literal)
        && (!has_fields || !literal.is_empty())
    {
        return Err(err(format!("the lease key {problem}")));
    }
    if has_fields {
        let fields: Vec<String> = match &input.data {
            Data::Struct(s) => match &s.fields {
                Fields::Named(named) => named.named.iter().filter_map(|f| f.ident.as_ref()).map(unraw).collect(),
                _ => {
                    return Err(err(format!(
                        "`{{field}}` placeholders name fields, and `{}` has no named fields",
                        input.ident
                    )));
                }
            },
            // Enums and unions are reported once, elsewhere.
            _ => {
                return Ok(Key {
                    span: lit.span(),
                    segments,
                });
            }
        };
        for segment in &segments {
            if let Segment::Field(name) = segment
                && !fields.contains(name)
            {
                let known = if fields.is_empty() {
                    "it has no fields".to_owned()
                } else {
                    format!("its fields are: {}", fields.join(", "))
                };
                return Err(err(format!(
                    "`{{{name}}}` names no field of `{}`; {known}",
                    input.ident
                )));
            }
        }
    }
    Ok(Key {
        span: lit.span(),
        segments,
    })
}

/// What is wrong with a key template.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TemplateError {
    Unclosed,
    Unmatched,
    Empty,
    NotAField(String),
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TemplateError::Unclosed => write!(f, "unclosed `{{`; write `{{{{` for a literal brace"),
            TemplateError::Unmatched => write!(f, "unmatched `}}`; write `}}}}` for a literal brace"),
            TemplateError::Empty => write!(f, "empty `{{}}`; name a field, as in \"reconcile:{{tenant}}\""),
            TemplateError::NotAField(inner) => write!(
                f,
                "`{{{inner}}}` is not a field name; placeholders are `{{field}}` only (no positions or format specs), \
                 and `{{{{`/`}}}}` are literal braces"
            ),
        }
    }
}

/// Splits `"reconcile:{tenant}"` into text and field names; `{{` and `}}`
/// are literal braces.
pub(crate) fn parse_template(text: &str) -> Result<Vec<Segment>, TemplateError> {
    let mut segments = Vec::new();
    let mut literal = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                literal.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                literal.push('}');
            }
            '}' => return Err(TemplateError::Unmatched),
            '{' => {
                let mut inner = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some('{') | None => return Err(TemplateError::Unclosed),
                        Some(c) => inner.push(c),
                    }
                }
                let name = inner.trim();
                if name.is_empty() {
                    return Err(TemplateError::Empty);
                }
                let bare = name.strip_prefix("r#").unwrap_or(name);
                let is_ident = bare.chars().next().is_some_and(|c| c == '_' || c.is_alphabetic())
                    && bare.chars().all(|c| c == '_' || c.is_alphanumeric())
                    && bare != "_";
                if !is_ident {
                    return Err(TemplateError::NotAField(inner));
                }
                if !literal.is_empty() {
                    segments.push(Segment::Text(std::mem::take(&mut literal)));
                }
                segments.push(Segment::Field(bare.to_owned()));
            }
            c => literal.push(c),
        }
    }
    if !literal.is_empty() {
        segments.push(Segment::Text(literal));
    }
    Ok(segments)
}

const CRON_FIELDS: &str = "minute hour day-of-month month day-of-week";

/// Parses `expr` exactly as `leasehold::Schedule::cron` does and, like the
/// runtime's check, rejects an expression that never fires.
fn cron(expr: &str) -> Result<(), String> {
    let cron = croner::Cron::from_str(expr).map_err(|e| {
        let e = e.to_string();
        let e = e.trim_end_matches('.');
        match cron_culprit(expr) {
            Some(culprit) => format!("invalid cron expression: {culprit} ({e})"),
            None => format!(
                "invalid cron expression ({e}); expected 5 fields ({CRON_FIELDS}) or 6 with seconds first, \
                 e.g. \"0 3 * * *\" for 03:00 UTC daily"
            ),
        }
    })?;
    // The same starting point as the library's `Schedule::validate`.
    let start = chrono::DateTime::from_timestamp(365 * 30 * 86_400, 0)
        .expect("a valid timestamp")
        .naive_utc();
    cron.find_next_occurrence(&start, false)
        .map(drop)
        .map_err(|_| "this cron expression never fires (no date matches it)".to_owned())
}

/// Which part of an invalid cron expression is wrong: the field count, or
/// the first field that is invalid on its own (the others set to `*`).
fn cron_culprit(expr: &str) -> Option<String> {
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
                "it has {n} field{}; expected 5 ({CRON_FIELDS}) or 6 with seconds first",
                if n == 1 { "" } else { "s" }
            ));
        }
    };
    fields.iter().enumerate().find_map(|(i, field)| {
        let alone: Vec<&str> = (0..fields.len()).map(|j| if i == j { field } else { "*" }).collect();
        croner::Cron::from_str(&alone.join(" ")).err().map(|_| {
            let (name, range) = names[i];
            let range = if range.is_empty() {
                String::new()
            } else {
                format!(" ({range})")
            };
            format!(
                "the {name} field `{field}` is invalid{range}; the fields are {}",
                field_list(names)
            )
        })
    })
}

fn field_list(names: &[(&str, &str)]) -> String {
    names.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(" ")
}

/// Checks a time zone name as `leasehold::Schedule::cron_in` does (the
/// same `chrono-tz`), suggesting the closest known name.
fn zone(name: &str) -> Result<(), String> {
    if chrono_tz::Tz::from_str(name).is_ok() {
        return Ok(());
    }
    Err(match suggest_zone(name) {
        Some(known) => format!("unknown time zone; did you mean {known:?}? (IANA names, case-sensitive)"),
        None if abbreviation(name) => "unknown time zone: an abbreviation names an offset, not a zone with its \
             daylight-saving rules; expected an IANA name such as \"Europe/Paris\", \"America/New_York\" or \"UTC\""
            .to_owned(),
        None => "unknown time zone; expected an IANA name such as \"Europe/Paris\", \"America/New_York\" or \"UTC\""
            .to_owned(),
    })
}

/// `CEST`, `PDT`, `AEST`: what clocks show, not a zone.
fn abbreviation(name: &str) -> bool {
    (2..=5).contains(&name.len()) && name.chars().all(|c| c.is_ascii_uppercase())
}

/// The known zone closest to `name`: the same name in another case, the
/// one whose last part is `name` (`Paris`), or one within a few typos
/// (the library's `suggest_zone`).
fn suggest_zone(name: &str) -> Option<&'static str> {
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

const CATCH_UP_FORMS: &str = "expected \"once\" (the default: one run for a missed stretch), \"skip\" \
     (no run for missed slots) or \"all(N)\" (a run for each of the latest N missed slots, 1 to 1000, \
     e.g. \"all(24)\")";

/// Parses `once`, `skip` or `all(N)` as `leasehold::CatchUp`.
fn catch_up(text: &str) -> Result<CatchUp, String> {
    match text {
        "once" => return Ok(CatchUp::Once),
        "skip" => return Ok(CatchUp::Skip),
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
            return match inner.parse::<u32>() {
                Ok(n) if (1..=MAX_CATCH_UP).contains(&n) => Ok(CatchUp::All(n)),
                Ok(0) => Err(format!(
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
    Err(format!("unknown catch-up policy; {CATCH_UP_FORMS}"))
}

/// The struct name as a snake_case job name: `NightlyReconcile` →
/// `nightly_reconcile`, `HTTPPoller` → `http_poller`.
pub(crate) fn snake_case(ident: &Ident) -> String {
    let name = unraw(ident);
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::with_capacity(name.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() {
            let prev = i.checked_sub(1).map(|p| chars[p]);
            let next = chars.get(i + 1).copied();
            let boundary = match prev {
                None | Some('_') => false,
                Some(p) if p.is_lowercase() || p.is_ascii_digit() => true,
                // The last capital of an acronym starts the next word: HTTPPoller.
                Some(p) if p.is_uppercase() => next.is_some_and(char::is_lowercase),
                Some(_) => false,
            };
            if boundary {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// An identifier's name without `r#`.
pub(crate) fn unraw(ident: &Ident) -> String {
    let s = ident.to_string();
    s.strip_prefix("r#").map(str::to_owned).unwrap_or(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("250ms"), Ok(ms(250)));
        assert_eq!(parse_duration("60s"), Ok(ms(60_000)));
        assert_eq!(parse_duration("5m"), Ok(ms(300_000)));
        assert_eq!(parse_duration("1h"), Ok(ms(3_600_000)));
        assert_eq!(parse_duration("1h30m"), Ok(ms(5_400_000)));
        assert_eq!(parse_duration("1m30s"), Ok(ms(90_000)));
        assert_eq!(parse_duration("1s500ms"), Ok(ms(1_500)));
        assert_eq!(parse_duration("2h3m4s5ms"), Ok(ms(7_384_005)));
        assert_eq!(parse_duration("168h"), Ok(MAX_LEASE));
        assert_eq!(parse_duration("1h0m"), Ok(ms(3_600_000)));
        assert_eq!(parse_duration("007s"), Ok(ms(7_000)));
    }

    #[test]
    fn bad_durations_say_why() {
        use DurationError::*;
        assert_eq!(parse_duration(""), Err(Empty));
        assert_eq!(parse_duration("60"), Err(NoUnit("60".into())));
        assert_eq!(parse_duration("1h30"), Err(NoUnit("30".into())));
        assert_eq!(parse_duration("0s"), Err(Zero));
        assert_eq!(parse_duration("0h0m"), Err(Zero));
        assert_eq!(parse_duration("-5s"), Err(Negative));
        assert_eq!(parse_duration("1.5s"), Err(Fraction));
        assert_eq!(parse_duration("1."), Err(Fraction));
        assert_eq!(parse_duration("s"), Err(NoNumber));
        assert_eq!(parse_duration("5d"), Err(UnknownUnit("d".into())));
        assert_eq!(parse_duration("5sec"), Err(UnknownUnit("sec".into())));
        assert_eq!(parse_duration("5S"), Err(UnknownUnit("S".into())));
        assert_eq!(parse_duration("30m1h"), Err(UnitOrder("h")));
        assert_eq!(parse_duration("1s1s"), Err(UnitOrder("s")));
        assert_eq!(parse_duration("1ms1s"), Err(UnitOrder("s")));
        assert_eq!(parse_duration("1h 30m"), Err(Unexpected(' ')));
        assert_eq!(parse_duration(" 1h"), Err(Unexpected(' ')));
        assert_eq!(parse_duration("1_000ms"), Err(Unexpected('_')));
        assert_eq!(parse_duration("99999999999999999999s"), Err(Overflow));
        assert_eq!(parse_duration("18446744073709551615s"), Err(Overflow));
        assert_eq!(parse_duration("5124095576031h"), Err(Overflow));
        assert_eq!(parse_duration("5124095576030h59m"), Err(Overflow));
        assert!(parse_duration("5124095576030h").is_ok());
        assert!(parse_duration("18446744073709551615ms").is_ok());
    }

    #[test]
    fn duration_errors_name_the_fix() {
        let msg = parse_duration("60").unwrap_err().to_string();
        assert!(msg.contains("\"60s\"") && msg.contains("units: ms, s, m, h"), "{msg}");
        let msg = parse_duration("2d").unwrap_err().to_string();
        assert!(msg.contains("\"24h\""), "{msg}");
    }

    #[test]
    fn templates_parse() {
        use Segment::*;
        assert_eq!(parse_template("nightly"), Ok(vec![Text("nightly".into())]));
        assert_eq!(
            parse_template("reconcile:{tenant}"),
            Ok(vec![Text("reconcile:".into()), Field("tenant".into())])
        );
        assert_eq!(
            parse_template("{a}/{b}"),
            Ok(vec![Field("a".into()), Text("/".into()), Field("b".into())])
        );
        assert_eq!(
            parse_template("{{x}}:{ x }"),
            Ok(vec![Text("{x}:".into()), Field("x".into())])
        );
        assert_eq!(parse_template("{r#type}"), Ok(vec![Field("type".into())]));
        assert_eq!(parse_template(""), Ok(vec![]));
    }

    #[test]
    fn bad_templates_say_why() {
        use TemplateError::*;
        assert_eq!(parse_template("a{b"), Err(Unclosed));
        assert_eq!(parse_template("a{b{c}}"), Err(Unclosed));
        assert_eq!(parse_template("a}b"), Err(Unmatched));
        assert_eq!(parse_template("a{}"), Err(Empty));
        assert_eq!(parse_template("a{0}"), Err(NotAField("0".into())));
        assert_eq!(parse_template("a{t:>5}"), Err(NotAField("t:>5".into())));
        assert_eq!(parse_template("{_}"), Err(NotAField("_".into())));
        assert!(parse_template("a{0}").unwrap_err().to_string().contains("`{{`"));
    }

    #[test]
    fn snake_case_names() {
        let name = |s: &str| snake_case(&syn::parse_str::<Ident>(s).unwrap());
        assert_eq!(name("NightlyReconcile"), "nightly_reconcile");
        assert_eq!(name("Job"), "job");
        assert_eq!(name("HTTPPoller"), "http_poller");
        assert_eq!(name("SyncV2Job"), "sync_v2_job");
        assert_eq!(name("Already_Snake"), "already_snake");
        assert_eq!(name("r#Match"), "match");
        assert_eq!(name("ABC"), "abc");
    }

    #[test]
    fn cron_is_checked_like_the_library() {
        assert!(cron("0 3 * * *").is_ok());
        assert!(cron("*/10 * * * * *").is_ok());
        assert!(cron("@daily").is_ok());
        let msg = cron("0 25 * * *").unwrap_err();
        assert!(msg.contains("the hour field `25` is invalid (0-23)"), "{msg}");
        let msg = cron("0 0 1 13 *").unwrap_err();
        assert!(msg.contains("the month field `13`"), "{msg}");
        let msg = cron("61 * * * * *").unwrap_err();
        assert!(msg.contains("the second field `61`"), "{msg}");
        let msg = cron("0 3 * *").unwrap_err();
        assert!(msg.contains("it has 4 fields; expected 5"), "{msg}");
        let msg = cron("@fortnightly").unwrap_err();
        assert!(msg.contains("expected 5 fields"), "{msg}");
        assert!(cron("").is_err());
        assert!(cron("0 0 30 2 *").unwrap_err().contains("never fires"));
    }

    #[test]
    fn zones_are_checked_like_the_library() {
        assert!(zone("Europe/Paris").is_ok());
        assert!(zone("UTC").is_ok());
        assert!(zone("America/Argentina/Buenos_Aires").is_ok());
        let msg = zone("Europe/Pariss").unwrap_err();
        assert!(msg.contains("did you mean \"Europe/Paris\"?"), "{msg}");
        assert!(zone("europe/paris").unwrap_err().contains("\"Europe/Paris\""));
        assert!(zone("Tokyo").unwrap_err().contains("\"Asia/Tokyo\""));
        let msg = zone("Mars/Olympus").unwrap_err();
        assert!(msg.contains("an IANA name such as \"Europe/Paris\""), "{msg}");
        assert!(zone("").is_err());
        assert!(zone("CEST").unwrap_err().contains("an abbreviation"));
    }

    #[test]
    fn catch_up_forms() {
        assert_eq!(catch_up("once"), Ok(CatchUp::Once));
        assert_eq!(catch_up("skip"), Ok(CatchUp::Skip));
        assert_eq!(catch_up("all(24)"), Ok(CatchUp::All(24)));
        assert_eq!(catch_up("all( 3 )"), Ok(CatchUp::All(3)));
        assert_eq!(catch_up("all(1)"), Ok(CatchUp::All(1)));
        assert_eq!(catch_up("all(1000)"), Ok(CatchUp::All(MAX_CATCH_UP)));
        let err = |text: &str| catch_up(text).unwrap_err();
        assert!(
            err("all").contains("needs a bound") && err("all").contains("all(24)"),
            "{}",
            err("all")
        );
        assert!(err("all()").contains("needs a bound"));
        assert!(
            err("all(0)").contains("1 to 1000") && err("all(0)").contains("\"skip\""),
            "{}",
            err("all(0)")
        );
        assert!(err("all(1001)").contains("1 to 1000"));
        assert!(err("all(99999999999)").contains("1 to 1000"));
        assert!(err("all(-1)").contains("whole number"));
        assert!(err("all(x)").contains("whole number"));
        assert!(err("Skip").contains("write it as \"skip\""), "{}", err("Skip"));
        assert!(err("ALL(3)").contains("\"all(3)\""));
        let msg = err("latest");
        assert!(
            msg.contains("\"once\"") && msg.contains("\"skip\"") && msg.contains("\"all(N)\""),
            "{msg}"
        );
    }

    #[test]
    fn durations_print_in_attribute_syntax() {
        assert_eq!(human(ms(5_400_000)), "1h30m");
        assert_eq!(human(ms(300_000)), "5m");
        assert_eq!(human(ms(20_000)), "20s");
        assert_eq!(human(ms(16_666)), "16s666ms");
        assert_eq!(human(Duration::from_secs(50) / 3), "16.666666666s");
    }

    #[test]
    fn library_limits_are_mirrored() {
        assert_eq!(MIN_LEASE, ms(10));
        assert_eq!(MAX_LEASE, Duration::from_secs(604_800));
        assert_eq!(MAX_CATCH_UP, 1000);
        assert!(DEFAULT_LEASE / 3 * 2 < DEFAULT_LEASE);
    }
}
