//! `#[job(...)]` attributes → raw settings that keep their spans.
//!
//! Only the shape is checked here: which attribute names exist, that each is
//! given once, as `name = "string"`. What the strings mean (durations, cron
//! expressions, key templates) is `validate`'s business.

use syn::punctuated::Punctuated;
use syn::{Attribute, Data, DeriveInput, Expr, ExprLit, Lit, LitStr, Meta, MetaNameValue, Token};

use leasehold_rules::edit_distance;

use crate::Errors;

/// Every attribute `#[job(...)]` accepts, in the order the docs list them.
pub(crate) const ATTRIBUTES: &[&str] = &[
    "name",
    "key",
    "every",
    "cron",
    "tz",
    "catch_up",
    "lease",
    "heartbeat",
    "margin",
    "grace",
    "retry",
    "retry_max",
];

/// Names people reach for, mapped to the attribute they mean.
const SYNONYMS: &[(&str, &str)] = &[
    ("deadline_margin", "margin"),
    ("deadline", "margin"),
    ("heartbeat_interval", "heartbeat"),
    ("interval", "every"),
    ("period", "every"),
    ("schedule", "every` or `cron"),
    ("ttl", "lease"),
    ("lease_ttl", "lease"),
    ("timeout", "lease"),
    ("grace_period", "grace"),
    ("retry_initial", "retry"),
    ("backoff", "retry"),
    ("max_retry", "retry_max"),
    ("retry_backoff_max", "retry_max"),
    ("label", "name"),
    ("lease_key", "key"),
    ("timezone", "tz"),
    ("time_zone", "tz"),
    ("zone", "tz"),
    ("tzid", "tz"),
    ("misfire", "catch_up"),
    ("missed", "catch_up"),
    ("backfill", "catch_up"),
    ("catchup", "catch_up"),
];

/// One `name = "value"` setting, as written.
pub(crate) struct Setting {
    /// The whole `name = "value"`, for errors about the setting as a whole.
    pub(crate) meta: MetaNameValue,
    /// The value.
    pub(crate) value: LitStr,
    /// Position among all settings of the struct, in source order.
    pub(crate) order: usize,
}

/// The `#[job(...)]` settings of one struct; `None` where not given.
#[derive(Default)]
pub(crate) struct RawJob {
    pub(crate) name: Option<Setting>,
    pub(crate) key: Option<Setting>,
    pub(crate) every: Option<Setting>,
    pub(crate) cron: Option<Setting>,
    pub(crate) tz: Option<Setting>,
    pub(crate) catch_up: Option<Setting>,
    pub(crate) lease: Option<Setting>,
    pub(crate) heartbeat: Option<Setting>,
    pub(crate) margin: Option<Setting>,
    pub(crate) grace: Option<Setting>,
    pub(crate) retry: Option<Setting>,
    pub(crate) retry_max: Option<Setting>,
    /// Settings seen so far, for [`Setting::order`].
    seen: usize,
}

impl RawJob {
    fn slot(&mut self, name: &str) -> Option<&mut Option<Setting>> {
        Some(match name {
            "name" => &mut self.name,
            "key" => &mut self.key,
            "every" => &mut self.every,
            "cron" => &mut self.cron,
            "tz" => &mut self.tz,
            "catch_up" => &mut self.catch_up,
            "lease" => &mut self.lease,
            "heartbeat" => &mut self.heartbeat,
            "margin" => &mut self.margin,
            "grace" => &mut self.grace,
            "retry" => &mut self.retry,
            "retry_max" => &mut self.retry_max,
            _ => return None,
        })
    }
}

/// Reads every `#[job(...)]` on the struct (several are merged) and rejects
/// `#[job]` on fields or variants, where it would otherwise be ignored.
pub(crate) fn parse(input: &DeriveInput, errors: &mut Errors) -> RawJob {
    let mut job = RawJob::default();
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("job")) {
        parse_attr(attr, &mut job, errors);
    }
    let misplaced = match &input.data {
        Data::Struct(s) => s.fields.iter().flat_map(|f| &f.attrs).collect::<Vec<_>>(),
        Data::Enum(e) => e
            .variants
            .iter()
            .flat_map(|v| v.attrs.iter().chain(v.fields.iter().flat_map(|f| &f.attrs)))
            .collect(),
        Data::Union(u) => u.fields.named.iter().flat_map(|f| &f.attrs).collect(),
    };
    for attr in misplaced.into_iter().filter(|a| a.path().is_ident("job")) {
        errors.push(syn::Error::new_spanned(
            attr,
            "`#[job(...)]` goes on the struct itself, not on a field: \
             `#[derive(FencedJob)] #[job(...)] struct MyJob { .. }`",
        ));
    }
    job
}

fn parse_attr(attr: &Attribute, job: &mut RawJob, errors: &mut Errors) {
    let items = match &attr.meta {
        // `#[job]` alone: nothing to set.
        Meta::Path(_) => return,
        Meta::NameValue(nv) => {
            errors.push(syn::Error::new_spanned(
                nv,
                "expected `#[job(name = \"value\", ...)]`, e.g. `#[job(cron = \"0 3 * * *\", lease = \"60s\")]`",
            ));
            return;
        }
        Meta::List(list) => match list.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated) {
            Ok(items) => items,
            Err(e) => {
                errors.push(syn::Error::new(
                    e.span(),
                    format!("{e}; expected `#[job(name = \"value\", ...)]`, e.g. `#[job(every = \"5m\")]`"),
                ));
                return;
            }
        },
    };
    for item in items {
        parse_item(item, job, errors);
    }
}

fn parse_item(item: Meta, job: &mut RawJob, errors: &mut Errors) {
    let name = match item.path().get_ident() {
        Some(ident) => ident.to_string(),
        None => {
            errors.push(syn::Error::new_spanned(item.path(), unknown(&path_text(item.path()))));
            return;
        }
    };
    job.seen += 1;
    let order = job.seen;
    let Some(slot) = job.slot(&name) else {
        errors.push(syn::Error::new_spanned(item.path(), unknown(&name)));
        return;
    };
    let meta = match item {
        Meta::NameValue(meta) => meta,
        other => {
            errors.push(syn::Error::new_spanned(
                &other,
                format!("`{name}` takes a value: `{name} = {}`", example(&name)),
            ));
            return;
        }
    };
    let value = match &meta.value {
        Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => s.clone(),
        Expr::Lit(ExprLit { lit: Lit::Int(i), .. }) if is_duration(&name) => {
            errors.push(syn::Error::new_spanned(
                &meta.value,
                format!(
                    "`{name}` is a duration string with a unit: `{name} = \"{}s\"` \
                     (units: ms, s, m, h, e.g. \"250ms\", \"60s\", \"5m\", \"1h30m\")",
                    i.base10_digits()
                ),
            ));
            return;
        }
        other => {
            errors.push(syn::Error::new_spanned(
                other,
                format!("`{name}` takes a string literal: `{name} = {}`", example(&name)),
            ));
            return;
        }
    };
    if let Some(first) = slot {
        errors.push(syn::Error::new_spanned(
            &meta,
            format!(
                "`{name}` is given twice; keep one (the first is `{name} = {:?}`)",
                first.value.value()
            ),
        ));
        return;
    }
    *slot = Some(Setting { meta, value, order });
}

fn is_duration(name: &str) -> bool {
    matches!(
        name,
        "every" | "lease" | "heartbeat" | "margin" | "grace" | "retry" | "retry_max"
    )
}

fn example(name: &str) -> &'static str {
    match name {
        "name" => "\"reconcile\"",
        "key" => "\"reconcile:{tenant}\"",
        "cron" => "\"0 3 * * *\"",
        "tz" => "\"Europe/Paris\"",
        "catch_up" => "\"all(24)\"",
        "every" => "\"5m\"",
        "heartbeat" => "\"20s\"",
        "margin" => "\"6s\"",
        "grace" => "\"5s\"",
        "retry" => "\"1s\"",
        "retry_max" => "\"5m\"",
        _ => "\"60s\"",
    }
}

fn path_text(path: &syn::Path) -> String {
    let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
    segments.join("::")
}

/// The message for an attribute name `#[job]` does not know, with a guess.
fn unknown(name: &str) -> String {
    let list = ATTRIBUTES.join(", ");
    let guess = SYNONYMS
        .iter()
        .find(|(alias, _)| *alias == name)
        .map(|(_, meant)| *meant)
        .or_else(|| {
            ATTRIBUTES
                .iter()
                .map(|known| (edit_distance(name, known), *known))
                .filter(|(d, known)| *d <= 2 && *d < known.len())
                .min()
                .map(|(_, known)| known)
        });
    match guess {
        Some(meant) => format!("unknown `job` attribute `{name}`; did you mean `{meant}`? (expected one of: {list})"),
        None => format!("unknown `job` attribute `{name}` (expected one of: {list})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_get_a_guess() {
        assert!(unknown("lese").contains("did you mean `lease`?"), "{}", unknown("lese"));
        assert!(unknown("deadline_margin").contains("did you mean `margin`?"));
        assert!(unknown("retrymax").contains("did you mean `retry_max`?"));
        assert!(!unknown("frobnicate").contains("did you mean"));
        assert!(unknown("frobnicate").contains("expected one of: name, key, every, cron, tz, catch_up"));
        assert!(unknown("timezone").contains("did you mean `tz`?"));
        assert!(unknown("catchup").contains("did you mean `catch_up`?"));
        assert!(unknown("catch_upp").contains("did you mean `catch_up`?"));
    }

    fn parse_str(src: &str) -> (RawJob, Option<String>) {
        let input: DeriveInput = syn::parse_str(src).unwrap();
        let mut errors = Errors::default();
        let job = parse(&input, &mut errors);
        (job, errors.into_result().err().map(|e| e.to_string()))
    }

    #[test]
    fn attributes_merge_and_are_checked_once_each() {
        let (job, err) = parse_str(r#"#[job(cron = "0 3 * * *")] #[job(lease = "60s",)] struct S;"#);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(job.cron.unwrap().value.value(), "0 3 * * *");
        assert_eq!(job.lease.unwrap().value.value(), "60s");

        let (_, err) = parse_str(r#"#[job(lease = "60s", lease = "30s")] struct S;"#);
        assert!(err.unwrap().contains("`lease` is given twice"));
        let (_, err) = parse_str(r#"#[job(lease = 60)] struct S;"#);
        assert!(err.unwrap().contains("lease = \"60s\""));
        let (_, err) = parse_str(r#"#[job(name = reconcile)] struct S;"#);
        assert!(err.unwrap().contains("takes a string literal"));
        let (_, err) = parse_str(r#"struct S { #[job(key = "x")] tenant: String }"#);
        assert!(err.unwrap().contains("goes on the struct itself"));
    }
}
