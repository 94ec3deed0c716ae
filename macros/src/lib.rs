//! Procedural macros for [`leasehold`](https://docs.rs/leasehold).
//!
//! Users depend on `leasehold`, which re-exports everything here.
//!
//! The crate is laid out like thiserror's: `parse` reads `#[job(...)]`
//! into raw settings with spans, `validate` checks what they mean (the
//! library's own rules, moved to compile time), `expand` writes the impl.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

use proc_macro::TokenStream;
use syn::{DeriveInput, parse_macro_input};

mod expand;
mod parse;
mod validate;

/// Implements `leasehold::FencedJob` for a struct with an inherent
/// `async fn run`.
///
/// ```no_run
/// use leasehold::{FenceGuard, FencedJob, JobError};
///
/// #[derive(FencedJob)]
/// #[job(key = "reconcile:{tenant}", cron = "0 3 * * *", lease = "60s")]
/// struct Reconcile {
///     tenant: String,
///     db: sqlx::PgPool,
/// }
///
/// impl Reconcile {
///     async fn run(&self, guard: FenceGuard) -> Result<(), JobError> {
///         let mut tx = guard.begin_fenced(&self.db).await?; // a leasehold::Error
///         // ... writes that carry the fence ...
///         tx.commit().await?; // a sqlx::Error
///         Ok(())
///     }
/// }
/// ```
///
/// The inherent `run` takes `&self` and a `FenceGuard` and returns a `Send`
/// future of `Result<(), E>` for any `E: Into<leasehold::JobError>` (any
/// `std::error::Error + Send + Sync + 'static`, `String`, `anyhow::Error`…).
/// `JobError` (a boxed error) takes both leasehold's and sqlx's errors with
/// `?`, and so does `leasehold::Error` (`leasehold::Result<()>`), which
/// wraps a `sqlx::Error` as `Error::Database`; `sqlx::Error` itself does not
/// take leasehold's errors.
///
/// # Attributes
///
/// All optional, in one or several `#[job(...)]` on the struct, each given
/// at most once. Durations are strings of whole numbers with units `ms`,
/// `s`, `m`, `h`, largest first, each unit once: `"250ms"`, `"60s"`, `"5m"`,
/// `"1h30m"`; zero, negative, fractional and unit-less values are errors.
///
/// | attribute | default | meaning and compile-time checks |
/// |---|---|---|
/// | `name = "reconcile"` | struct name in snake_case | label in metrics and logs; not empty, at most 255 bytes, no NUL |
/// | `key = "reconcile:{tenant}"` | the name | lease key; `{field}` is that named field of `self` (`Display`), `{{`/`}}` are braces; unknown fields, positional or formatted placeholders, an empty key and more than 255 literal bytes are errors |
/// | `every = "5m"` | — | run once per period, aligned slots; at least `100ms`; not with `cron` |
/// | `cron = "0 3 * * *"` | — | run when the expression matches (UTC unless `tz`; 5 fields, or 6 with seconds first); parsed by `croner` as the library does, and must fire at least once; not with `every` |
/// | *(neither)* | manual | the job runs only when triggered |
/// | `tz = "Europe/Paris"` | UTC | the IANA time zone `cron` is read in (`Schedule::cron_in`, with its daylight-saving rule); only with `cron`; the zone must exist in the library's `chrono-tz` (the error suggests the closest name) |
/// | `catch_up = "all(24)"` | `"once"` | slots missed while no replica ran the key (`leasehold::CatchUp`): `"once"`, `"skip"` or `"all(N)"` with `N` from 1 to 1000 (`MAX_CATCH_UP`); a bare `"all"` is an error |
/// | `lease = "60s"` | `60s` | lease length; `10ms` to `168h` (`MIN_LEASE`..=`MAX_LEASE`) |
/// | `heartbeat = "20s"` | lease/3 | renewal interval; must be below half the lease |
/// | `margin = "6s"` | lease/10 | local deadline margin; heartbeat + margin must be below the lease |
/// | `grace = "5s"` | `5s` | how long a cancelled run may take to return before it is dropped |
/// | `retry = "1s"` | `1s` | first backoff after a failed run, doubling per failure |
/// | `retry_max = "5m"` | `5m` | backoff cap; must be at least `retry` |
///
/// Errors point at the offending attribute or value and say what is allowed;
/// a mistake is reported once (the impl is still generated, with a manual
/// schedule), so uses of the job elsewhere raise no further errors. Structs
/// with type or const parameters are supported (the impl requires
/// `Self: Send + Sync + 'static`); lifetime parameters, enums and unions are
/// rejected.
///
/// # Expansion
///
/// The example above expands to (simplified):
///
/// ```no_run
/// # use leasehold::{FenceGuard, JobError};
/// # struct Reconcile { tenant: String }
/// # impl Reconcile {
/// #     async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> { Ok(()) }
/// # }
/// impl ::leasehold::FencedJob for Reconcile {
///     fn name(&self) -> &str { "reconcile" }
///     fn key(&self) -> String { format!("reconcile:{}", self.tenant) }
///     fn settings(&self) -> ::leasehold::JobSettings {
///         ::leasehold::JobSettings::new(::leasehold::__private::cron("0 3 * * *"))
///             .lease(::core::time::Duration::from_millis(60000))
///     }
///     fn run(&self, guard: ::leasehold::FenceGuard)
///         -> impl Future<Output = Result<(), ::leasehold::JobError>> + Send
///     {
///         let run = <Self>::run(self, guard); // the inherent method
///         async move { run.await.map_err(Into::into) }
///     }
/// }
/// ```
///
/// Only settings that are given are set; the rest keep `JobSettings`'
/// defaults. `key` is generated only when given (the trait's default is the
/// name). Without an inherent `run` the derive reports
/// "`Reconcile` has no inherent `run` method" at the struct's name, rather
/// than letting `<Self>::run` resolve to the trait method itself.
#[proc_macro_derive(FencedJob, attributes(job))]
pub fn derive_fenced_job(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive(&input).into()
}

/// Errors gathered across attributes, so that independent mistakes are all
/// reported in one build, each once.
#[derive(Default)]
struct Errors {
    errors: Option<syn::Error>,
    count: usize,
}

impl Errors {
    fn push(&mut self, error: syn::Error) {
        self.count += 1;
        match &mut self.errors {
            Some(errors) => errors.combine(error),
            None => self.errors = Some(error),
        }
    }

    fn len(&self) -> usize {
        self.count
    }

    fn into_result(self) -> syn::Result<()> {
        self.errors.map_or(Ok(()), Err)
    }
}
