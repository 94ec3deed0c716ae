//! What a job kind is: the [`JobKind`] trait. A kind is code (how to run a
//! key from its stored arguments); its keys are data, stored once in the
//! database ([`Keys::add`](crate::store::Keys::add)) and run
//! by every replica that registers the kind
//! ([`RuntimeBuilder::register_kind`](crate::RuntimeBuilder::register_kind)).

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::guard::FenceGuard;
use crate::job::{JobError, JobSettings};
use crate::schedule::Schedule;

/// A kind of job whose keys live in the database: each key has its own
/// arguments ([`Args`](JobKind::Args), stored as JSON), schedule and
/// catch-up; every replica that registers the kind runs them, one replica
/// at a time per key, with a fresh fence per run, like a [`FencedJob`](crate::FencedJob).
///
/// Each run reads the key's arguments when it starts: an update takes
/// effect at the next run, wherever it is claimed, and a run in progress
/// keeps its arguments ([`FenceGuard::args_version`] says which). Arguments
/// that no longer deserialize (the type changed incompatibly) are not run:
/// the key is reported (an ERROR log, `leasehold_keys_bad_args`, `leasehold
/// status`) until it is updated. To evolve `Args`, add fields with
/// `#[serde(default)]`, or update the stored keys first.
///
/// Usually derived: `#[derive(JobKind)] #[kind(name = "invoice", args =
/// Tenant, lease = "30s")]` on a struct with an inherent
/// `async fn run(&self, args: Tenant, guard: FenceGuard)`, with its settings
/// checked at compile time (see [`derive@crate::JobKind`]). By hand, as below, when
/// the settings come from configuration at run time:
///
/// ```no_run
/// use leasehold::{FenceGuard, JobError, JobKind, JobSettings, NewKey, Runtime, Schedule};
/// use std::time::Duration;
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Tenant { id: i64 }
///
/// struct Invoice { db: sqlx::PgPool }
///
/// impl JobKind for Invoice {
///     type Args = Tenant;
///     fn name(&self) -> &str { "invoice" }
///     fn settings(&self) -> JobSettings {
///         JobSettings::new(Schedule::Manual).lease(Duration::from_secs(30))
///     }
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
/// // Any replica, once: every replica that registers "invoice" runs it.
/// let key = NewKey::new("invoice", "invoice:42", &Tenant { id: 42 }, "every 1h".parse()?)?;
/// runtime.store().keys().add(&[key]).await?;
/// # Ok(()) }
/// ```
pub trait JobKind: Send + Sync + 'static {
    /// A key's arguments: what the run needs to find its work.
    type Args: DeserializeOwned + Serialize + Send + 'static;

    /// The kind's name: stored with each key, the `job_name` label in
    /// metrics and the `job` field in logs.
    fn name(&self) -> &str;

    /// Lease length, heartbeat, grace and retry policy of every key of the
    /// kind. The schedule and catch-up here are not used: each key has its
    /// own.
    fn settings(&self) -> JobSettings {
        JobSettings::new(Schedule::Manual)
    }

    /// Runs one key, with the arguments its run started with, under
    /// `guard`'s lease and fence. Watch [`FenceGuard::cancelled`] as in
    /// [`FencedJob::run`](crate::FencedJob::run).
    fn run(&self, args: Self::Args, guard: FenceGuard) -> impl Future<Output = Result<(), JobError>> + Send;
}
