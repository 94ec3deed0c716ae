//! Procedural macros for [`leasehold`](https://docs.rs/leasehold).
//!
//! Users depend on `leasehold`, which re-exports everything here.
//!
//! The crate is laid out like thiserror's: `parse` reads `#[job(...)]` (or
//! `#[kind(...)]`) into raw settings with spans, `validate` checks what
//! they mean (the library's own rules, moved to compile time), `expand`
//! writes the impl. Which settings exist, how each is read and checked and
//! which `JobSettings` setter it reaches is the rules crate's settings table
//! (`leasehold_rules::SETTINGS`), which both derives follow.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

use proc_macro::TokenStream;
use syn::{DeriveInput, parse_macro_input};

mod expand;
mod key;
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
/// The last column is for [`#[derive(JobKind)]`](derive@JobKind)'s
/// `#[kind(...)]`; `args` is a kind's only, and required there.
///
/// | attribute | default | meaning and compile-time checks | on a kind |
/// |---|---|---|---|
/// | `name = "reconcile"` | struct name in snake_case | label in metrics and logs (a kind's name is stored with its keys); not empty, at most 255 bytes, no NUL | yes |
/// | `key = "reconcile:{tenant}"` | the name | lease key; `{field}` is that named field of `self` (`Display`), `{{`/`}}` are braces; unknown fields, positional or formatted placeholders, an empty key and more than 255 literal bytes are errors | no: per key |
/// | `args = Tenant` | — (required on a kind) | a kind's `Args`: the type each key's arguments are stored as (JSON) and its `run` takes; a type, not a string; must be `Serialize + DeserializeOwned + Send + 'static` | required (kinds only) |
/// | `every = "5m"` | manual | run once per period, in slots aligned on the epoch; at least `100ms`; not with `cron`; with neither, the job runs only when triggered | no: per key |
/// | `cron = "0 3 * * *"` | manual | run when the expression matches (UTC unless `tz`; 5 fields, or 6 with seconds first); parsed by `croner` as the library does, and must fire at least once; not with `every` | no: per key |
/// | `tz = "Europe/Paris"` | UTC | the IANA time zone `cron` is read in (`Schedule::cron_in`, with its daylight-saving rule); only with `cron`; an unknown zone is an error, with the closest name | no: per key |
/// | `catch_up = "all(24)"` | `"once"` | slots missed while no replica ran the key: `"once"` (one run for the stretch), `"skip"` (none), `"all(N)"` (each of the latest N, oldest first; N from 1 to 1000); a bare `"all"` is an error | no: per key |
/// | `lease = "60s"` | `60s` | lease length; `10ms` to `168h` (`MIN_LEASE`..=`MAX_LEASE`) | yes |
/// | `heartbeat = "20s"` | lease/3 | renewal interval; below half the lease | yes |
/// | `margin = "6s"` | lease/10 | local deadline margin; heartbeat + margin below the lease, and at least lease/50 (2ρ × lease, ρ = 1 %: the clock-rate error it covers) | yes |
/// | `grace = "5s"` | `5s` | how long a cancelled run may take to return before it is dropped | yes |
/// | `timeout = "15m"` | none | time limit of a run: past it the run is cancelled (reason `timeout`), dropped after its grace, and the key runs again at its next slot; `100ms` to `168h` (`MIN_TIMEOUT`..=`MAX_TIMEOUT`) | yes |
/// | `retry = "1s"` | `1s` | first backoff after a failed run, doubling per failure | yes |
/// | `retry_max = "5m"` | `5m` | backoff cap; at least `retry` | yes |
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
///         ::leasehold::JobSettings::new(::leasehold::runtime::__private::cron("0 3 * * *"))
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
    expand::derive(&input, Derive::Job).into()
}

/// Implements `leasehold::JobKind` for a struct with an inherent
/// `async fn run(&self, args, guard)`: the kind's keys live in the
/// database, each with its own arguments (`args = Type`, stored as JSON)
/// and schedule, and every replica that registers the kind runs them.
///
/// ```no_run
/// use leasehold::{FenceGuard, JobError, JobKind, NewKey, Runtime};
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Tenant { id: i64 }
///
/// #[derive(JobKind)]
/// #[kind(name = "invoice", args = Tenant, lease = "30s")]
/// struct Invoice { db: sqlx::PgPool }
///
/// impl Invoice {
///     async fn run(&self, tenant: Tenant, guard: FenceGuard) -> Result<(), JobError> {
///         let mut tx = guard.begin_fenced(&self.db).await?;
///         sqlx::query("UPDATE invoices SET sent = true WHERE tenant = $1")
///             .bind(tenant.id).execute(&mut *tx).await?;
///         tx.commit().await?;
///         Ok(())
///     }
/// }
///
/// # async fn demo(pool: sqlx::PgPool) -> leasehold::Result<()> {
/// let runtime = Runtime::builder(pool.clone()).register_kind(Invoice { db: pool.clone() }).start().await?;
/// let key = NewKey::new("invoice", "invoice:42", &Tenant { id: 42 }, "every 1h".parse()?)?;
/// runtime.store().keys().add(&[key]).await?;
/// # Ok(()) }
/// ```
///
/// The attribute `#[kind(...)]` takes the settings of
/// [`#[derive(FencedJob)]`](derive@FencedJob)'s table marked "yes" in its
/// last column, with the same compile-time checks (lease bounds, heartbeat
/// below half the lease, the margin's clock-rate rule, retry against its
/// cap), plus the required `args = Type`. A kind's keys each have their own
/// schedule and catch-up, given when the key is added, so `every`, `cron`,
/// `tz`, `catch_up` and `key` are refused on a kind, saying so. The name
/// defaults to the struct's name in snake_case.
///
/// The inherent `run` takes `&self`, the key's arguments (the `args` type)
/// and a `FenceGuard`, and returns a `Send` future of `Result<(), E>` for
/// any `E: Into<leasehold::JobError>`, as for `#[derive(FencedJob)]`; a
/// missing `run` is one error at the struct's name. The expansion is
///
/// ```no_run
/// # use leasehold::{FenceGuard, JobError};
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Tenant { id: i64 }
/// # struct Invoice;
/// # impl Invoice {
/// #     async fn run(&self, _tenant: Tenant, _guard: FenceGuard) -> Result<(), JobError> { Ok(()) }
/// # }
/// impl ::leasehold::JobKind for Invoice {
///     type Args = Tenant;
///     fn name(&self) -> &str { "invoice" }
///     fn settings(&self) -> ::leasehold::JobSettings {
///         ::leasehold::JobSettings::new(::leasehold::Schedule::Manual)
///             .lease(::core::time::Duration::from_millis(30000))
///     }
///     fn run(&self, args: Tenant, guard: ::leasehold::FenceGuard)
///         -> impl Future<Output = Result<(), ::leasehold::JobError>> + Send
///     {
///         let run = <Self>::run(self, args, guard); // the inherent method
///         async move { run.await.map_err(Into::into) }
///     }
/// }
/// ```
///
/// Implementing `JobKind` by hand stays possible (see its docs), for
/// settings read from configuration at run time.
#[proc_macro_derive(JobKind, attributes(kind))]
pub fn derive_job_kind(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive(&input, Derive::Kind).into()
}

/// Which derive is expanding: the trait, its attribute and its words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Derive {
    /// `#[derive(FencedJob)]`, `#[job(...)]`.
    Job,
    /// `#[derive(JobKind)]`, `#[kind(...)]`.
    Kind,
}

impl Derive {
    /// The trait (and derive) name.
    fn name(self) -> &'static str {
        match self {
            Derive::Job => "FencedJob",
            Derive::Kind => "JobKind",
        }
    }

    /// The attribute's name.
    fn attr(self) -> &'static str {
        match self {
            Derive::Job => "job",
            Derive::Kind => "kind",
        }
    }

    /// What the struct is, in messages.
    fn what(self) -> &'static str {
        match self {
            Derive::Job => "job",
            Derive::Kind => "job kind",
        }
    }

    /// A struct name in examples.
    fn example_struct(self) -> &'static str {
        match self {
            Derive::Job => "MyJob",
            Derive::Kind => "MyKind",
        }
    }

    /// A whole attribute, in messages.
    fn example_attr(self) -> &'static str {
        match self {
            Derive::Job => "#[job(cron = \"0 3 * * *\", lease = \"60s\")]",
            Derive::Kind => "#[kind(args = Tenant, lease = \"60s\")]",
        }
    }

    /// A short attribute, in messages.
    fn example_short(self) -> &'static str {
        match self {
            Derive::Job => "#[job(every = \"5m\")]",
            Derive::Kind => "#[kind(args = Tenant)]",
        }
    }
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
