//! What the settings mean: durations, the cron expression, the key template
//! against the struct's fields, and the rules between settings — the rules
//! `leasehold` applies when the runtime starts, from the crate both use
//! (`leasehold-rules`), moved to compile time: a `RuleError` becomes a
//! compile error at the attribute's value.
//!
//! [`validate`] runs one function per concern (the item's shape, the name,
//! the key, the schedule, the durations, the rules between them, a kind's
//! arguments); each reports its own mistakes.

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold_rules::settings::{self as table, SETTINGS, Setter};
use leasehold_rules::{self as rules, Timing};
use syn::{Data, DeriveInput, Ident};

use crate::key::{Key, key, unraw};
use crate::parse::{RawJob, Setting};
use crate::{Derive, Errors};

/// A job's (or kind's) settings, checked; what `expand` turns into code.
/// Settings not given keep the library's defaults.
pub(crate) struct Job {
    pub(crate) name: String,
    pub(crate) key: Option<Key>,
    pub(crate) schedule: Schedule,
    /// The durations given, each with its row of the table (which names
    /// its `JobSettings` setter), in the table's order.
    pub(crate) durations: Vec<(&'static table::Setting, Duration)>,
    pub(crate) catch_up: Option<CatchUp>,
    /// A kind's `Args`.
    pub(crate) args: Option<syn::Type>,
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

/// Each given duration: `Ok` if valid, `Err` if invalid (already reported).
type Durations = BTreeMap<&'static str, Result<Duration, ()>>;

/// Checks everything `parse` collected. Pushes one error per mistake and
/// returns `None` if there was any.
pub(crate) fn validate(input: &DeriveInput, derive: Derive, raw: &RawJob, errors: &mut Errors) -> Option<Job> {
    let before = errors.len();
    shape(input, derive, errors);
    let name = name(input, raw, errors);
    let key = raw.get("key").and_then(|setting| match key(input, setting) {
        Ok(key) => Some(key),
        Err(e) => {
            errors.push(e);
            None
        }
    });
    let durations = durations(raw, errors);
    let schedule = schedule(raw, &durations, errors);
    let catch_up = raw
        .get("catch_up")
        .and_then(|setting| match rules::parse_catch_up(&setting.text) {
            Ok(policy) => Some(policy),
            Err(problem) => {
                errors.push(value_error(setting, problem));
                None
            }
        });
    timing_relations(raw, &durations, errors);
    let args = args(input, derive, raw, errors);
    if errors.len() > before {
        return None;
    }
    let durations = SETTINGS
        .iter()
        .filter(|def| !matches!(def.setter, Setter::Schedule))
        .filter_map(|def| Some((def, *durations.get(def.name)?.as_ref().ok()?)))
        .collect();
    Some(Job {
        name,
        key,
        schedule,
        durations,
        catch_up,
        args,
    })
}

/// Only structs without lifetimes can be jobs or kinds.
fn shape(input: &DeriveInput, derive: Derive, errors: &mut Errors) {
    let ident = &input.ident;
    let (what, trait_name) = (derive.what(), derive.name());
    if let Data::Enum(e) = &input.data {
        let enum_token = e.enum_token;
        errors.push(syn::Error::new_spanned(
            quote::quote!(#enum_token #ident),
            format!(
                "#[derive({trait_name})] only supports structs: a {what} is a struct whose fields its `run` uses; \
                 for one {what} per variant, wrap the enum in a struct"
            ),
        ));
    }
    if let Data::Union(u) = &input.data {
        let union_token = u.union_token;
        errors.push(syn::Error::new_spanned(
            quote::quote!(#union_token #ident),
            format!("#[derive({trait_name})] only supports structs, not unions"),
        ));
    }
    if let Some(lifetime) = input.generics.lifetimes().next() {
        errors.push(syn::Error::new_spanned(
            lifetime,
            format!(
                "a {what} cannot borrow: `{trait_name}` requires `'static` (the runtime keeps the {what} for its \
                 whole life); own the data instead (`String`, `Arc<T>`, a pool handle)"
            ),
        ));
    }
}

/// `name = "..."`, or the struct's name in snake_case.
fn name(input: &DeriveInput, raw: &RawJob, errors: &mut Errors) -> String {
    match raw.get("name") {
        Some(setting) => {
            if let Err(problem) = rules::check_identifier(&setting.text) {
                errors.push(value_error(setting, format!("job name {problem}")));
            }
            setting.text.clone()
        }
        None => snake_case(&input.ident),
    }
}

/// Every duration setting of the table that was given: parsed, then
/// checked against its own bound.
fn durations(raw: &RawJob, errors: &mut Errors) -> Durations {
    SETTINGS
        .iter()
        .filter(|def| def.value == table::Value::Duration)
        .filter_map(|def| {
            let setting = raw.get(def.name)?;
            let text = &setting.text;
            let result = rules::parse_duration(text)
                .map_err(|e| e.to_string())
                .and_then(|d| match def.bound {
                    Some(bound) => bound(d).map_err(|e| e.problem),
                    None => Ok(d),
                });
            let result = result.map_err(|problem| {
                errors.push(syn::Error::new_spanned(
                    &setting.meta.value,
                    format!("`{} = {text:?}`: {problem}", def.name),
                ));
            });
            Some((def.name, result))
        })
        .collect()
}

/// `every`, `cron` and `tz`: one schedule, its zone only with `cron`.
fn schedule(raw: &RawJob, durations: &Durations, errors: &mut Errors) -> Schedule {
    let (every, cron_setting) = (raw.get("every"), raw.get("cron"));
    let cron = cron_setting.and_then(|setting| match cron(&setting.text) {
        Ok(()) => Some(setting.text.clone()),
        Err(problem) => {
            errors.push(value_error(setting, problem));
            None
        }
    });
    let tz = raw.get("tz").and_then(|setting| tz(setting, raw, errors));
    match (every, cron_setting) {
        (Some(e), Some(c)) => {
            let later = if e.order > c.order { e } else { c };
            errors.push(syn::Error::new_spanned(
                &later.meta,
                "a job has one schedule: give `every` or `cron`, not both \
                 (or neither, for a job that only runs when triggered)",
            ));
            Schedule::Manual
        }
        _ => match (durations.get("every"), cron) {
            (Some(Ok(period)), _) => Schedule::Every(*period),
            (_, Some(expr)) => Schedule::Cron { expr, tz },
            _ => Schedule::Manual,
        },
    }
}

/// `tz = "..."`: a known zone, and only with `cron`.
fn tz(setting: &Setting, raw: &RawJob, errors: &mut Errors) -> Option<String> {
    if raw.get("cron").is_none() {
        let problem = if raw.get("every").is_some() {
            "`tz` is the time zone of a `cron` schedule, and `every` slots are aligned on the Unix epoch, \
             in no zone; for times of day use `cron = \"0 3 * * *\"` with `tz`, or remove `tz`"
        } else {
            "`tz` is the time zone of a `cron` schedule, and this job has none; \
             add `cron = \"0 3 * * *\"` (read in this zone), or remove `tz`"
        };
        errors.push(syn::Error::new_spanned(&setting.meta.path, problem));
        return None;
    }
    match zone(&setting.text) {
        Ok(()) => Some(setting.text.clone()),
        Err(problem) => {
            errors.push(value_error(setting, problem));
            None
        }
    }
}

/// The rules between lease, heartbeat, margin and retry ([`Timing`]),
/// checked only when every value involved is itself valid (a bad lease is
/// one mistake, not three), and reported at the setting that was given.
fn timing_relations(raw: &RawJob, durations: &Durations, errors: &mut Errors) {
    // `Ok(None)`: not given; `Err`: given but invalid (already reported).
    let given = |name: &str| durations.get(name).copied().transpose();
    if let (Ok(lease), Ok(heartbeat)) = (given("lease"), given("heartbeat")) {
        let timing = Timing {
            lease,
            heartbeat,
            margin: given("margin").unwrap_or(None),
            ..Timing::default()
        };
        if let (Some(setting), Err(e)) = (raw.get("heartbeat"), timing.check_heartbeat()) {
            errors.push(value_error(setting, e.problem));
        } else if let (Some(setting), Ok(Some(_)), Err(e)) = (
            raw.get("margin"),
            given("margin"),
            timing.check_margin().and_then(|()| timing.check_clock_rate()),
        ) {
            errors.push(value_error(setting, e.problem));
        }
    }
    if let (Ok(retry), Ok(retry_max)) = (given("retry"), given("retry_max")) {
        let timing = Timing {
            retry,
            retry_max,
            ..Timing::default()
        };
        if let Err(e) = timing.check_retry() {
            // Point at what was written: `retry_max` if given, else the
            // `retry` that exceeds the default maximum.
            match (raw.get("retry_max"), raw.get("retry")) {
                (Some(setting), _) => errors.push(value_error(setting, e.problem)),
                (None, Some(setting)) => {
                    let fix = format!("{} (`retry_max = \"{}\"`)", e.problem, setting.text);
                    errors.push(value_error(setting, fix));
                }
                (None, None) => {}
            }
        }
    }
}

/// A kind's `args = Type`, which it must have.
fn args(input: &DeriveInput, derive: Derive, raw: &RawJob, errors: &mut Errors) -> Option<syn::Type> {
    let ty = raw.get("args").and_then(|setting| setting.ty.clone());
    // An `args` written with a bad value is already reported.
    if derive == Derive::Kind && !raw.written("args") {
        errors.push(syn::Error::new_spanned(
            &input.ident,
            format!(
                "a job kind needs the type of its keys' arguments: add `#[kind(args = YourArgs)]`, the \
                 `Serialize + Deserialize` type stored with each key and passed to \
                 `{}::run(&self, args: YourArgs, guard: FenceGuard)`",
                input.ident
            ),
        ));
    }
    ty
}

/// An error on a setting's value, prefixed with the setting as written.
fn value_error(setting: &Setting, problem: String) -> syn::Error {
    syn::Error::new_spanned(
        &setting.meta.value,
        format!("`{} = {:?}`: {problem}", setting.def.name, setting.text),
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_with_a_bad_args_is_one_error_and_without_args_is_one_error() {
        let errors = |src: &str| {
            let input: DeriveInput = syn::parse_str(src).unwrap();
            let mut errors = Errors::default();
            let raw = crate::parse::parse(&input, Derive::Kind, &mut errors);
            validate(&input, Derive::Kind, &raw, &mut errors);
            errors.len()
        };
        assert_eq!(errors(r#"#[kind(args = "Tenant")] struct S;"#), 1);
        assert_eq!(errors(r#"#[kind(lease = "30s")] struct S;"#), 1);
        assert_eq!(errors(r#"#[kind(args = Tenant)] struct S;"#), 0);
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

    fn catch_up(text: &str) -> Result<CatchUp, String> {
        rules::parse_catch_up(text)
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
