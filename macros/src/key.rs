//! `key = "..."`: the lease key template of a job, `"reconcile:{tenant}"`,
//! split into literal text and fields of `self`, each field checked against
//! the struct's named fields.

use std::fmt;

use leasehold_rules as rules;
use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields, Ident};

use crate::parse::Setting;

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

/// `key = "..."`: parses the template and resolves `{field}`s.
pub(crate) fn key(input: &DeriveInput, setting: &Setting) -> syn::Result<Key> {
    let lit = &setting.meta.value;
    let text = &setting.text;
    let err = |problem: String| syn::Error::new_spanned(lit, format!("`key = {text:?}`: {problem}"));
    let segments = parse_template(text).map_err(|e| err(e.to_string()))?;
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
}
