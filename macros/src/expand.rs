//! Code generation: a checked [`Job`] → `impl ::leasehold::FencedJob` or
//! `impl ::leasehold::JobKind`.
//!
//! Generated code names only `::leasehold::…`, `::core::…` and `::std::…`
//! paths. On any error the caller still gets an impl ([`fallback`]) next to
//! the `compile_error!`s, so one mistake in the attribute is one error and
//! not also a cascade of "`FencedJob` is not implemented" wherever the job
//! is used.

use std::time::Duration;

use leasehold_rules::settings::Setter;
use proc_macro2::{Literal, TokenStream};
use quote::{quote, quote_spanned};
use syn::{Data, DeriveInput, Fields, Ident, LitStr};

use crate::Derive;
use crate::key::{Key, Segment, unraw};
use crate::validate::{CatchUp, Job, Schedule, snake_case};

/// The whole derive: parse, check, generate.
pub(crate) fn derive(input: &DeriveInput, derive: Derive) -> TokenStream {
    let mut errors = crate::Errors::default();
    let raw = crate::parse::parse(input, derive, &mut errors);
    let job = crate::validate::validate(input, derive, &raw, &mut errors);
    match (errors.into_result(), job) {
        (Ok(()), Some(job)) => implement(input, derive, &job),
        (result, _) => {
            let errors = result.err().map(|e| e.to_compile_error());
            let name = raw
                .get("name")
                .map_or_else(|| snake_case(&input.ident), |s| s.text.clone());
            let args = raw.get("args").and_then(|s| s.ty.as_ref());
            // A borrowing struct cannot be a job at all: an impl would only
            // add errors about lifetimes to the one that says so.
            let fallback = input
                .generics
                .lifetimes()
                .next()
                .is_none()
                .then(|| fallback(input, derive, &name, args));
            quote!(#errors #fallback)
        }
    }
}

/// The impl for valid settings.
fn implement(input: &DeriveInput, derive: Derive, job: &Job) -> TokenStream {
    let key = job.key.as_ref().map(|key| key_fn(input, key));
    let settings = settings_fn(job);
    match derive {
        Derive::Job => job_impl(input, &job.name, key, settings),
        Derive::Kind => kind_impl(input, &job.name, job.args.as_ref(), settings),
    }
}

/// `fn settings`: `JobSettings::new(schedule)` and the setter the table
/// names for each setting given; the rest keep `JobSettings`' defaults.
fn settings_fn(job: &Job) -> TokenStream {
    let schedule = match &job.schedule {
        Schedule::Manual => quote!(::leasehold::Schedule::Manual),
        Schedule::Every(period) => {
            let period = duration(*period);
            quote!(::leasehold::Schedule::every(#period))
        }
        Schedule::Cron { expr, tz: None } => quote!(::leasehold::runtime::__private::cron(#expr)),
        // Both checked at compile time; a failure here means mismatched
        // leasehold and leasehold-macros versions.
        Schedule::Cron { expr, tz: Some(tz) } => quote! {
            match ::leasehold::Schedule::cron_in(#expr, #tz) {
                ::core::result::Result::Ok(schedule) => schedule,
                ::core::result::Result::Err(e) => ::core::panic!(
                    "leasehold-macros accepted cron {:?} in {:?} but leasehold rejects it ({}): use matching versions",
                    #expr, #tz, e
                ),
            }
        },
    };
    let mut setters = Vec::new();
    let (mut retry, mut retry_max) = (None, None);
    for (def, value) in &job.durations {
        match def.setter {
            Setter::Duration(method) => {
                let method = Ident::new(method, proc_macro2::Span::call_site());
                let value = duration(*value);
                setters.push(quote!(.#method(#value)));
            }
            Setter::RetryInitial => retry = Some(*value),
            Setter::RetryMax => retry_max = Some(*value),
            Setter::Trait | Setter::Schedule | Setter::CatchUp => {}
        }
    }
    // `retry(initial, max)` takes both: the one not given is its default.
    if retry.is_some() || retry_max.is_some() {
        let initial = duration(retry.unwrap_or(leasehold_rules::DEFAULT_RETRY));
        let max = duration(retry_max.unwrap_or(leasehold_rules::DEFAULT_RETRY_MAX));
        setters.push(quote!(.retry(#initial, #max)));
    }
    if let Some(policy) = job.catch_up {
        let policy = match policy {
            CatchUp::Once => quote!(::leasehold::CatchUp::Once),
            CatchUp::Skip => quote!(::leasehold::CatchUp::Skip),
            CatchUp::All(max) => {
                let max = Literal::u32_suffixed(max);
                quote!(::leasehold::CatchUp::all(#max))
            }
        };
        setters.push(quote!(.catch_up(#policy)));
    }
    quote! {
        fn settings(&self) -> ::leasehold::JobSettings {
            ::leasehold::JobSettings::new(#schedule) #(#setters)*
        }
    }
}

/// The impl emitted next to errors: the struct's name, a manual schedule,
/// and the real `run` (or the error about a missing one: a second mistake).
/// A kind without a valid `args` gets `()` and a `run` that calls nothing,
/// so the missing type is one error.
fn fallback(input: &DeriveInput, derive: Derive, name: &str, args: Option<&syn::Type>) -> TokenStream {
    let settings = quote! {
        fn settings(&self) -> ::leasehold::JobSettings {
            ::leasehold::JobSettings::new(::leasehold::Schedule::Manual)
        }
    };
    match derive {
        Derive::Job => job_impl(input, name, None, settings),
        Derive::Kind => kind_impl(input, name, args, settings),
    }
}

/// The impl's generics: a generic job is a job for the instantiations that
/// can be one.
fn impl_generics(input: &DeriveInput) -> syn::Generics {
    let ident = &input.ident;
    let mut generics = input.generics.clone();
    if !generics.params.is_empty() {
        let (_, ty_generics, _) = input.generics.split_for_impl();
        generics
            .make_where_clause()
            .predicates
            .push(syn::parse_quote!(#ident #ty_generics: ::core::marker::Send + ::core::marker::Sync + 'static));
    }
    generics
}

fn job_impl(input: &DeriveInput, name: &str, key: Option<TokenStream>, settings: TokenStream) -> TokenStream {
    let ident = &input.ident;
    let generics = impl_generics(input);
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let run = run_fn(ident, Derive::Job, !input.generics.params.is_empty());
    quote! {
        #[automatically_derived]
        impl #impl_generics ::leasehold::FencedJob for #ident #ty_generics #where_clause {
            fn name(&self) -> &::core::primitive::str {
                #name
            }
            #key
            #settings
            #run
        }
    }
}

fn kind_impl(input: &DeriveInput, name: &str, args: Option<&syn::Type>, settings: TokenStream) -> TokenStream {
    let ident = &input.ident;
    let generics = impl_generics(input);
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let (args, run) = match args {
        Some(args) => (
            quote!(#args),
            run_fn(ident, Derive::Kind, !input.generics.params.is_empty()),
        ),
        // Already an error: `args` is missing.
        None => (
            quote!(()),
            quote! {
                fn run(
                    &self,
                    _: (),
                    _: ::leasehold::FenceGuard,
                ) -> impl ::core::future::Future<Output = ::core::result::Result<(), ::leasehold::JobError>>
                       + ::core::marker::Send {
                    ::core::future::ready(::core::result::Result::Ok(()))
                }
            },
        ),
    };
    quote! {
        #[automatically_derived]
        impl #impl_generics ::leasehold::JobKind for #ident #ty_generics #where_clause {
            type Args = #args;
            fn name(&self) -> &::core::primitive::str {
                #name
            }
            #settings
            #run
        }
    }
}

/// `fn key`: a literal, or `format!` over fields of `self`.
fn key_fn(input: &DeriveInput, key: &Key) -> TokenStream {
    let fields = named_fields(input);
    let mut format = String::new();
    let mut args = Vec::new();
    for segment in &key.segments {
        match segment {
            Segment::Text(text) => format.push_str(&text.replace('{', "{{").replace('}', "}}")),
            Segment::Field(name) => {
                format.push_str("{}");
                // `validate` checked that the field exists.
                if let Some(field) = fields.iter().find(|f| unraw(f) == *name) {
                    let mut field = (*field).clone();
                    field.set_span(key.span);
                    // Type errors (a field that is not `Display`) point at the key string.
                    args.push(quote_spanned!(key.span=> self.#field));
                }
            }
        }
    }
    let body = if args.is_empty() {
        let text: String = key
            .segments
            .iter()
            .map(|s| match s {
                Segment::Text(t) => t.as_str(),
                Segment::Field(_) => "",
            })
            .collect();
        quote!(::std::string::String::from(#text))
    } else {
        let format = LitStr::new(&format, key.span);
        quote!(::std::format!(#format, #(#args),*))
    };
    quote! {
        fn key(&self) -> ::std::string::String {
            #body
        }
    }
}

fn named_fields(input: &DeriveInput) -> Vec<&Ident> {
    match &input.data {
        Data::Struct(s) => match &s.fields {
            Fields::Named(named) => named.named.iter().filter_map(|f| f.ident.as_ref()).collect(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// `fn run`: calls the struct's inherent `run` and converts its error.
///
/// Inside this impl, `<Self>::run` is the inherent method when there is one
/// (inherent items win) and otherwise *this* trait method — which would
/// recurse. The probe tells the two apart: the function item types of
/// `<Self>::run` and `<Self as FencedJob>::run` (or `JobKind`) are equal
/// only when there is no inherent `run`, and then `PickMissing` (a by-value
/// match) wins over `PickFound` (an autoref match). A missing method becomes
/// one error, with a message saying what to write, pointing at the struct's
/// name. A kind's `run` takes the key's arguments before the guard.
fn run_fn(ident: &Ident, derive: Derive, generic: bool) -> TokenStream {
    let span = ident.span();
    let trait_name = derive.name();
    let signature = match derive {
        Derive::Job => "&self, guard: FenceGuard",
        Derive::Kind => "&self, args: Args, guard: FenceGuard",
    };
    let mut note = format!(
        "add `impl {{J}} {{ async fn run({signature}) -> Result<(), E> {{ .. }} }}`, \
         with any error type `E: Into<leasehold::JobError>`"
    )
    .replace('{', "{{")
    .replace('}', "}}")
    .replace("{{J}}", "{J}");
    if derive == Derive::Kind {
        note.push_str(" and `Args` the type of `#[kind(args = ...)]`");
    }
    if generic {
        note.push_str(&format!(
            "; if `run` exists, the bounds of its `impl` block must hold for every type \
             `#[derive({trait_name})]` covers (the struct's own bounds)"
        ));
    }
    let message = format!("`{{J}}` has no inherent `run` method for `#[derive({trait_name})]` to call");
    let trait_path = match derive {
        Derive::Job => quote!(::leasehold::FencedJob),
        Derive::Kind => quote!(::leasehold::JobKind),
    };
    // The kind's arguments, between `self` and the guard.
    let (param, found_param, arg, arg_type, arg_generic) = match derive {
        Derive::Job => (quote!(), quote!(), quote!(), quote!(), quote!()),
        Derive::Kind => (
            quote!(args: <Self as ::leasehold::JobKind>::Args,),
            quote!(args: A,),
            quote!(args,),
            quote!(_: A,),
            quote!(A,),
        ),
    };
    let inherent = quote_spanned!(span=> <Self>::run);
    let found = quote_spanned!(span=> require_inherent_run::<Self, _>((&__probe).__leasehold_probe()));
    let call = quote_spanned!(span=> __leasehold_run.__leasehold_call(self, #arg guard));
    let output =
        quote_spanned!(span=> ::core::result::Result::map_err(__leasehold_future.await, ::core::convert::Into::into));
    quote! {
        fn run(
            &self,
            #param
            guard: ::leasehold::FenceGuard,
        ) -> impl ::core::future::Future<Output = ::core::result::Result<(), ::leasehold::JobError>>
               + ::core::marker::Send {
            #[allow(dead_code)]
            struct Probe<A, B>(A, B);
            #[allow(dead_code)]
            struct Found<F>(F);
            #[allow(dead_code)]
            struct MissingRun;
            #[diagnostic::on_unimplemented(
                message = #message,
                label = "`{J}` needs an inherent `run` method",
                note = #note
            )]
            trait InherentRun<J: ?::core::marker::Sized> {}
            #[diagnostic::do_not_recommend]
            impl<J: ?::core::marker::Sized, F> InherentRun<J> for Found<F> {}
            #[allow(dead_code)]
            trait PickMissing {
                fn __leasehold_probe(&self) -> MissingRun {
                    MissingRun
                }
            }
            impl<F> PickMissing for Probe<F, F> {}
            #[allow(dead_code)]
            trait PickFound<F> {
                fn __leasehold_probe(&self) -> Found<F>;
            }
            impl<F: ::core::marker::Copy, G> PickFound<F> for &Probe<F, G> {
                fn __leasehold_probe(&self) -> Found<F> {
                    Found(self.0)
                }
            }
            #[allow(dead_code)]
            fn require_inherent_run<J: ?::core::marker::Sized, P: InherentRun<J>>(probe: P) -> P {
                probe
            }
            #[allow(dead_code)]
            impl MissingRun {
                fn __leasehold_call<J, #arg_generic>(
                    self,
                    _: &J,
                    #arg_type
                    _: ::leasehold::FenceGuard,
                ) -> ::core::future::Ready<::core::result::Result<(), ::leasehold::JobError>> {
                    ::core::future::ready(::core::result::Result::Ok(()))
                }
            }
            #[allow(dead_code)]
            impl<F> Found<F> {
                fn __leasehold_call<'a, J, #arg_generic Fut, E>(
                    self,
                    job: &'a J,
                    #found_param
                    guard: ::leasehold::FenceGuard,
                ) -> Fut
                where
                    F: ::core::ops::FnOnce(&'a J, #arg_generic ::leasehold::FenceGuard) -> Fut,
                    Fut: ::core::future::Future<Output = ::core::result::Result<(), E>>,
                {
                    (self.0)(job, #arg guard)
                }
            }

            let __probe = Probe(#inherent, <Self as #trait_path>::run);
            let __leasehold_run = #found;
            let __leasehold_future = #call;
            async move { #output }
        }
    }
}

/// `::core::time::Duration::from_millis(n)` (every parsed duration is whole
/// milliseconds).
fn duration(d: Duration) -> TokenStream {
    let ms = Literal::u64_suffixed(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    quote!(::core::time::Duration::from_millis(#ms))
}
