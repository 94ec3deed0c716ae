//! `#[job(...)]` / `#[kind(...)]` attributes → raw settings that keep their
//! spans.
//!
//! Only the shape is checked here, against the settings table
//! (`leasehold_rules::SETTINGS`): which attribute names exist for this
//! derive, that each is given once, as `name = "string"` (or `name = Type`
//! for a type). What the strings mean (durations, cron expressions, key
//! templates) is `validate`'s business.

use std::collections::BTreeMap;

use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::ParseStream;
use syn::punctuated::Punctuated;
use syn::{Attribute, Data, DeriveInput, Expr, ExprLit, Ident, Lit, LitStr, Meta, MetaNameValue, Token};

use leasehold_rules::edit_distance;
use leasehold_rules::settings::{self, ALIASES, Applies, SETTINGS, Value};

use crate::{Derive, Errors};

/// One `name = "value"` setting, as written.
pub(crate) struct Setting {
    /// The setting's row in the table.
    pub(crate) def: &'static settings::Setting,
    /// The whole `name = "value"`, for errors about the setting as a whole;
    /// errors about the value point at `meta.value`.
    pub(crate) meta: MetaNameValue,
    /// The string value (empty for a type).
    pub(crate) text: String,
    /// The value, for a setting whose value is a type.
    pub(crate) ty: Option<syn::Type>,
    /// Position among all settings of the struct, in source order.
    pub(crate) order: usize,
}

/// The settings of one struct, by attribute name; absent where not given.
#[derive(Default)]
pub(crate) struct RawJob {
    given: BTreeMap<&'static str, Setting>,
    /// Settings written, valid or not (an invalid one is already reported).
    written: Vec<&'static str>,
    /// Settings seen so far, for [`Setting::order`].
    seen: usize,
}

impl RawJob {
    /// The setting called `name`, if given.
    pub(crate) fn get(&self, name: &str) -> Option<&Setting> {
        self.given.get(name)
    }

    /// Whether the setting called `name` was written at all, even with an
    /// invalid value.
    pub(crate) fn written(&self, name: &str) -> bool {
        self.written.contains(&name)
    }
}

/// Whether `derive` takes the setting `def`.
fn takes(derive: Derive, def: &settings::Setting) -> bool {
    match def.applies {
        Applies::Both => true,
        Applies::JobOnly(_) => derive == Derive::Job,
        Applies::KindOnly => derive == Derive::Kind,
    }
}

/// Reads every `#[job(...)]` (or `#[kind(...)]`) on the struct (several are
/// merged) and rejects one on a field or variant, where it would otherwise
/// be ignored.
pub(crate) fn parse(input: &DeriveInput, derive: Derive, errors: &mut Errors) -> RawJob {
    let mut job = RawJob::default();
    let attr_name = derive.attr();
    for attr in input.attrs.iter().filter(|a| a.path().is_ident(attr_name)) {
        parse_attr(attr, derive, &mut job, errors);
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
    for attr in misplaced.into_iter().filter(|a| a.path().is_ident(attr_name)) {
        errors.push(syn::Error::new_spanned(
            attr,
            format!(
                "`#[{attr_name}(...)]` goes on the struct itself, not on a field: \
                 `#[derive({})] #[{attr_name}(...)] struct {} {{ .. }}`",
                derive.name(),
                derive.example_struct()
            ),
        ));
    }
    job
}

fn parse_attr(attr: &Attribute, derive: Derive, job: &mut RawJob, errors: &mut Errors) {
    let attr_name = derive.attr();
    let items = match &attr.meta {
        // `#[job]` alone: nothing to set.
        Meta::Path(_) => return,
        Meta::NameValue(nv) => {
            errors.push(syn::Error::new_spanned(
                nv,
                format!(
                    "expected `#[{attr_name}(name = \"value\", ...)]`, e.g. `{}`",
                    derive.example_attr()
                ),
            ));
            return;
        }
        Meta::List(list) => {
            match list
                .parse_args_with(|input: ParseStream| Punctuated::<Meta, Token![,]>::parse_terminated_with(input, item))
            {
                Ok(items) => items,
                Err(e) => {
                    errors.push(syn::Error::new(
                        e.span(),
                        format!(
                            "{e}; expected `#[{attr_name}(name = \"value\", ...)]`, e.g. `{}`",
                            derive.example_short()
                        ),
                    ));
                    return;
                }
            }
        }
    };
    for item in items {
        parse_item(item, derive, job, errors);
    }
}

/// One item of the list: a `Meta`, except that the value of a setting
/// whose value is a type is read as a type (`args = Vec<Tenant>` is not an
/// expression).
fn item(input: ParseStream) -> syn::Result<Meta> {
    let is_type = input.peek(Ident::peek_any)
        && input.peek2(Token![=])
        && !input.peek3(LitStr)
        && input
            .fork()
            .parse::<Ident>()
            .ok()
            .and_then(|name| settings::setting(&name.to_string()))
            .is_some_and(|def| def.value == Value::Type);
    if !is_type {
        return input.parse();
    }
    let path = syn::Path::from(input.call(Ident::parse_any)?);
    let eq_token = input.parse()?;
    let ty: syn::Type = input.parse()?;
    Ok(Meta::NameValue(MetaNameValue {
        path,
        eq_token,
        value: Expr::Verbatim(ty.into_token_stream()),
    }))
}

fn parse_item(item: Meta, derive: Derive, job: &mut RawJob, errors: &mut Errors) {
    let name = match item.path().get_ident() {
        Some(ident) => ident.to_string(),
        None => {
            errors.push(syn::Error::new_spanned(
                item.path(),
                unknown(derive, &path_text(item.path())),
            ));
            return;
        }
    };
    job.seen += 1;
    let order = job.seen;
    let Some(def) = settings::setting(&name) else {
        errors.push(syn::Error::new_spanned(item.path(), unknown(derive, &name)));
        return;
    };
    if !takes(derive, def) {
        errors.push(syn::Error::new_spanned(item.path(), not_here(derive, def)));
        return;
    }
    job.written.push(def.name);
    let meta = match item {
        Meta::NameValue(meta) => meta,
        other => {
            errors.push(syn::Error::new_spanned(
                &other,
                format!("`{name}` takes a value: `{name} = {}`", def.example),
            ));
            return;
        }
    };
    let Some((text, ty)) = value(def, &meta, errors) else {
        return;
    };
    if let Some(first) = job.given.get(def.name) {
        let first = if first.ty.is_some() {
            format!("{} = {}", def.name, first.meta.value.to_token_stream())
        } else {
            format!("{} = {:?}", def.name, first.text)
        };
        errors.push(syn::Error::new_spanned(
            &meta,
            format!("`{name}` is given twice; keep one (the first is `{first}`)"),
        ));
        return;
    }
    job.given.insert(
        def.name,
        Setting {
            def,
            meta,
            text,
            ty,
            order,
        },
    );
}

/// The value of `name = value` in the form the table says: a string
/// literal, or a type.
fn value(def: &settings::Setting, meta: &MetaNameValue, errors: &mut Errors) -> Option<(String, Option<syn::Type>)> {
    let name = def.name;
    match (&meta.value, def.value) {
        (Expr::Lit(ExprLit { lit: Lit::Str(s), .. }), Value::Type) => {
            errors.push(syn::Error::new_spanned(
                &meta.value,
                format!("`{name}` takes a type, not a string: `{name} = {}`", s.value().trim()),
            ));
            None
        }
        (value, Value::Type) => match syn::parse2::<syn::Type>(value.to_token_stream()) {
            Ok(ty) => Some((String::new(), Some(ty))),
            Err(_) => {
                errors.push(syn::Error::new_spanned(
                    value,
                    format!("`{name}` takes a type: `{name} = {}`", def.example),
                ));
                None
            }
        },
        (Expr::Lit(ExprLit { lit: Lit::Str(s), .. }), _) => Some((s.value(), None)),
        (Expr::Lit(ExprLit { lit: Lit::Int(i), .. }), Value::Duration) => {
            errors.push(syn::Error::new_spanned(
                &meta.value,
                format!(
                    "`{name}` is a duration string with a unit: `{name} = \"{}s\"` \
                     (units: ms, s, m, h, e.g. \"250ms\", \"60s\", \"5m\", \"1h30m\")",
                    i.base10_digits()
                ),
            ));
            None
        }
        (other, _) => {
            errors.push(syn::Error::new_spanned(
                other,
                format!("`{name}` takes a string literal: `{name} = {}`", def.example),
            ));
            None
        }
    }
}

fn path_text(path: &syn::Path) -> String {
    let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
    segments.join("::")
}

/// The message for a setting this derive refuses: why, and what instead.
fn not_here(derive: Derive, def: &settings::Setting) -> String {
    let name = def.name;
    match def.applies {
        Applies::JobOnly(why) => format!("a job kind takes no `{name}`: {why}"),
        _ => format!(
            "`{name}` is a setting of `#[derive(JobKind)]`; a `#[derive({})]` job keeps what its `run` needs in \
             its own fields",
            derive.name()
        ),
    }
}

/// The message for an attribute name this derive does not know, with a
/// guess.
fn unknown(derive: Derive, name: &str) -> String {
    let known: Vec<&str> = SETTINGS.iter().filter(|s| takes(derive, s)).map(|s| s.name).collect();
    let list = known.join(", ");
    let synonym = SETTINGS
        .iter()
        .filter(|s| takes(derive, s))
        .find(|s| s.synonyms.contains(&name))
        .map(|s| s.name);
    let alias = || {
        ALIASES
            .iter()
            .filter(|_| derive == Derive::Job)
            .find(|(alias, _)| *alias == name)
            .map(|(_, meant)| *meant)
    };
    let close = || {
        known
            .iter()
            .map(|known| (edit_distance(name, known), *known))
            .filter(|(d, known)| *d <= 2 && *d < known.len())
            .min()
            .map(|(_, known)| known)
    };
    let attr = derive.attr();
    match synonym.or_else(alias).or_else(close) {
        Some(meant) => {
            format!("unknown `{attr}` attribute `{name}`; did you mean `{meant}`? (expected one of: {list})")
        }
        None => format!("unknown `{attr}` attribute `{name}` (expected one of: {list})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_get_a_guess() {
        let unknown = |name| unknown(Derive::Job, name);
        assert!(unknown("lese").contains("did you mean `lease`?"), "{}", unknown("lese"));
        assert!(unknown("deadline_margin").contains("did you mean `margin`?"));
        assert!(unknown("retrymax").contains("did you mean `retry_max`?"));
        assert!(!unknown("frobnicate").contains("did you mean"));
        assert!(unknown("frobnicate").contains("expected one of: name, key, every, cron, tz, catch_up"));
        assert!(unknown("timezone").contains("did you mean `tz`?"));
        assert!(unknown("catchup").contains("did you mean `catch_up`?"));
        assert!(unknown("catch_upp").contains("did you mean `catch_up`?"));
        assert!(unknown("schedule").contains("did you mean `every` or `cron`?"));
        assert!(!unknown("arg").contains("args"), "{}", unknown("arg"));
    }

    #[test]
    fn a_kind_knows_its_own_settings() {
        let msg = unknown(Derive::Kind, "arg");
        assert!(
            msg.starts_with("unknown `kind` attribute `arg`; did you mean `args`?"),
            "{msg}"
        );
        assert!(msg.contains("expected one of: name, args, lease"), "{msg}");
        assert!(!msg.contains("every"), "{msg}");
        let every = settings::setting("every").unwrap();
        assert!(not_here(Derive::Kind, every).contains("own schedule"));
    }

    fn parse_str(derive: Derive, src: &str) -> (RawJob, Option<String>) {
        let input: DeriveInput = syn::parse_str(src).unwrap();
        let mut errors = Errors::default();
        let job = parse(&input, derive, &mut errors);
        (job, errors.into_result().err().map(|e| e.to_string()))
    }

    #[test]
    fn attributes_merge_and_are_checked_once_each() {
        let parse_str = |src| parse_str(Derive::Job, src);
        let (job, err) = parse_str(r#"#[job(cron = "0 3 * * *")] #[job(lease = "60s",)] struct S;"#);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(job.get("cron").unwrap().text, "0 3 * * *");
        assert_eq!(job.get("lease").unwrap().text, "60s");

        let (_, err) = parse_str(r#"#[job(lease = "60s", lease = "30s")] struct S;"#);
        assert!(err.unwrap().contains("`lease` is given twice"));
        let (_, err) = parse_str(r#"#[job(lease = 60)] struct S;"#);
        assert!(err.unwrap().contains("lease = \"60s\""));
        let (_, err) = parse_str(r#"#[job(name = reconcile)] struct S;"#);
        assert!(err.unwrap().contains("takes a string literal"));
        let (_, err) = parse_str(r#"struct S { #[job(key = "x")] tenant: String }"#);
        assert!(err.unwrap().contains("goes on the struct itself"));
        let (_, err) = parse_str(r#"#[job(args = Tenant)] struct S;"#);
        assert!(err.unwrap().contains("setting of `#[derive(JobKind)]`"));
    }

    #[test]
    fn a_kind_takes_its_args_as_a_type() {
        let (job, err) = parse_str(Derive::Kind, r#"#[kind(args = Vec<u8>, lease = "30s")] struct S;"#);
        assert!(err.is_none(), "{err:?}");
        assert!(job.get("args").unwrap().ty.is_some());
        let (_, err) = parse_str(Derive::Kind, r#"#[kind(args = "Tenant")] struct S;"#);
        assert!(err.unwrap().contains("takes a type, not a string: `args = Tenant`"));
        let (_, err) = parse_str(Derive::Kind, r#"#[kind(cron = "0 3 * * *")] struct S;"#);
        assert!(err.unwrap().contains("a job kind takes no `cron`"));
    }
}
