//! What the settings mean: durations, the cron expression, the key template
//! against the struct's fields, and the rules between settings — the rules
//! `leasehold` applies when the runtime starts, from the crate both use
//! (`leasehold-rules`), moved to compile time: a `RuleError` becomes a
//! compile error at the attribute's value.

use std::fmt;
use std::time::Duration;

use leasehold_rules::{self as rules, RuleError, Timing};
use proc_macro2::Span;
use syn::{Data, DeriveInput, Fields, Ident};

use crate::Errors;
use crate::parse::{RawJob, Setting};

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
pub(crate) use rules::CatchUpText as CatchUp;

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
            if let Err(problem) = rules::check_identifier(&name) {
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

    let every = duration(raw.every.as_ref(), errors, |d| rules::period(d).err());
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

    let lease = duration(raw.lease.as_ref(), errors, |d| rules::lease("lease duration", d).err());
    let heartbeat = duration(raw.heartbeat.as_ref(), errors, |_| None);
    let margin = duration(raw.margin.as_ref(), errors, |_| None);
    let grace = duration(raw.grace.as_ref(), errors, |_| None);
    let retry = duration(raw.retry.as_ref(), errors, |_| None);
    let retry_max = duration(raw.retry_max.as_ref(), errors, |_| None);

    // Rules between settings, checked only when every value involved is
    // itself valid (a bad lease is one mistake, not three), and reported at
    // the setting that was given.
    if let (Ok(lease), Ok(heartbeat)) = (given(lease), given(heartbeat)) {
        let timing = Timing {
            lease,
            heartbeat,
            margin: given(margin).unwrap_or(None),
            ..Timing::default()
        };
        if let (Some(setting), Err(e)) = (&raw.heartbeat, timing.check_heartbeat()) {
            errors.push(value_error(setting, e.problem));
        } else if let (Some(setting), Ok(Some(_)), Err(e)) = (
            &raw.margin,
            given(margin),
            timing.check_margin().and_then(|()| timing.check_clock_rate()),
        ) {
            errors.push(value_error(setting, e.problem));
        }
    }
    if let (Ok(retry), Ok(retry_max)) = (given(retry), given(retry_max)) {
        let timing = Timing {
            retry,
            retry_max,
            ..Timing::default()
        };
        if let Err(e) = timing.check_retry() {
            // Point at what was written: `retry_max` if given, else the
            // `retry` that exceeds the default maximum.
            match (&raw.retry_max, &raw.retry) {
                (Some(setting), _) => errors.push(value_error(setting, e.problem)),
                (None, Some(setting)) => {
                    let fix = format!("{} (`retry_max = \"{}\"`)", e.problem, setting.value.value());
                    errors.push(value_error(setting, fix));
                }
                (None, None) => {}
            }
        }
    }

    if errors.len() > before {
        return None;
    }
    let value = |d: Option<Result<Duration, ()>>| d.and_then(Result::ok);
    let retry = (raw.retry.is_some() || raw.retry_max.is_some()).then(|| {
        (
            value(retry).unwrap_or(rules::DEFAULT_RETRY),
            value(retry_max).unwrap_or(rules::DEFAULT_RETRY_MAX),
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
    bounds: impl FnOnce(Duration) -> Option<RuleError>,
) -> Option<Result<Duration, ()>> {
    let setting = setting?;
    let name = setting_name(setting);
    let text = setting.value.value();
    let result = rules::parse_duration(&text)
        .map_err(|e| e.to_string())
        .and_then(|d| bounds(d).map_or(Ok(d), |e| Err(e.problem)));
    Some(result.map_err(|problem| {
        errors.push(syn::Error::new_spanned(
            &setting.value,
            format!("`{name} = {text:?}`: {problem}"),
        ));
    }))
}

/// A duration as [`Timing`] takes it: `Ok(None)` when not given, `Err` when
/// given but invalid (already reported).
fn given(value: Option<Result<Duration, ()>>) -> Result<Option<Duration>, ()> {
    value.transpose()
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
    if let Err(problem) = rules::check_identifier(&literal)
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

/// Parses `expr` exactly as `leasehold::Schedule::cron` does and, like the
/// runtime's check, rejects an expression that never fires.
fn cron(expr: &str) -> Result<(), String> {
    let cron = rules::cron(expr).map_err(|e| format!("invalid cron expression: {}", e.problem))?;
    rules::cron_fires(&cron).map_err(|e| e.problem)
}

/// Checks a time zone name as `leasehold::Schedule::cron_in` does,
/// suggesting the closest known name.
fn zone(name: &str) -> Result<(), String> {
    rules::zone(name).map(drop).map_err(|e| e.problem)
}

/// Parses `once`, `skip` or `all(N)` as `leasehold::CatchUp`, by the
/// library's own rule.
fn catch_up(text: &str) -> Result<CatchUp, String> {
    rules::parse_catch_up(text)
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
        assert_eq!(catch_up("all(1000)"), Ok(CatchUp::All(rules::MAX_CATCH_UP)));
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
}
