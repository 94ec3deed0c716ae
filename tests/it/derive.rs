//! `#[derive(FencedJob)]` and `#[derive(JobKind)]`: compile-pass and
//! compile-fail cases (trybuild), and derived jobs and kinds run for real.
//!
//! Pass cases (`tests/ui/pass`) are built and run: their `main`s check the
//! generated `name`, `key` and `settings`. Fail cases (`tests/ui/fail`) must
//! fail with exactly the committed `.stderr`; after a deliberate change to a
//! message, regenerate with `TRYBUILD=overwrite cargo test --test it derive`
//! and read the diff.

use std::fmt;
use std::time::Duration;

use leasehold::{CatchUp, FenceGuard, FencedJob, JobKind, JobSettings, NewKey, Runtime, Schedule, store::LeaseStore};
use tokio::sync::mpsc;

use crate::support;

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}

#[derive(FencedJob)]
struct Bare;

impl Bare {
    async fn run(&self, _guard: FenceGuard) -> Result<(), ReconcileError> {
        Ok(())
    }
}

#[derive(FencedJob)]
#[job(
    every = "5m",
    lease = "30s",
    heartbeat = "5s",
    margin = "2s",
    grace = "1s",
    timeout = "15m",
    retry = "2s",
    retry_max = "1m",
    catch_up = "all(3)"
)]
struct Everything;

impl Everything {
    async fn run(&self, _guard: FenceGuard) -> Result<(), ReconcileError> {
        Ok(())
    }
}

/// The derive sets only the settings its attribute gives; the others are
/// `JobSettings::new`'s defaults (the derive checks relations against the
/// same defaults, from the same `leasehold-rules` crate).
#[test]
fn a_derived_job_without_settings_has_the_library_defaults() {
    let derived = Bare.settings();
    let library = JobSettings::new(Schedule::Manual);
    assert!(matches!(derived.get_schedule(), Schedule::Manual));
    assert_eq!(format!("{derived:?}"), format!("{library:?}"));
    assert_eq!(derived.get_heartbeat(), Duration::from_secs(20), "lease/3");
    assert_eq!(derived.get_margin(), Duration::from_secs(6), "lease/10");
    assert_eq!(derived.get_catch_up(), CatchUp::Once);
}

/// Each attribute maps to the `JobSettings` setter of the same name.
#[test]
fn each_attribute_sets_the_setting_of_the_same_name() {
    let secs = Duration::from_secs;
    let by_hand = JobSettings::new(Schedule::every(secs(300)))
        .lease(secs(30))
        .heartbeat(secs(5))
        .margin(secs(2))
        .grace(secs(1))
        .timeout(secs(15 * 60))
        .retry(secs(2), secs(60))
        .catch_up(CatchUp::all(3));
    assert_eq!(format!("{:?}", Everything.settings()), format!("{by_hand:?}"));
    assert_eq!(Everything.settings().get_timeout(), Some(secs(900)));
    assert_eq!(Bare.settings().get_timeout(), None, "no time limit by default");
}

/// What a run of [`Reconcile`] saw.
#[derive(Debug)]
struct Seen {
    key: String,
    job: String,
    fence: i64,
}

#[derive(Debug)]
struct ReconcileError;

impl fmt::Display for ReconcileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("reconcile failed on purpose")
    }
}

impl std::error::Error for ReconcileError {}

#[derive(FencedJob)]
#[job(name = "reconcile", key = "reconcile:{tenant}", lease = "10s", retry = "100ms")]
struct Reconcile {
    tenant: String,
    seen: mpsc::UnboundedSender<Seen>,
}

impl Reconcile {
    async fn run(&self, guard: FenceGuard) -> Result<(), ReconcileError> {
        guard.check().map_err(|_| ReconcileError)?;
        let seen = Seen {
            key: guard.key().to_owned(),
            job: guard.job().to_owned(),
            fence: guard.fence(),
        };
        let _ = self.seen.send(seen);
        Ok(())
    }
}

/// The generated `run` calls the struct's own `run` (not a stub), under
/// the lease of the generated key, with the generated name as the job label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn derived_jobs_run_their_inherent_run_under_their_key() {
    let db = support::db().await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let job = |tenant: &str| Reconcile {
        tenant: tenant.to_owned(),
        seen: tx.clone(),
    };
    let rt = Runtime::builder(db.pool.clone())
        .holder("derive-test")
        .register(job("acme"))
        .register(job("globex"))
        .start()
        .await
        .expect("runtime starts");

    rt.trigger("reconcile:globex").await.expect("trigger");
    let seen = tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("the derived job ran within 30s")
        .expect("sender alive");
    assert_eq!(seen.key, "reconcile:globex");
    assert_eq!(seen.job, "reconcile");
    assert!(seen.fence > 0, "{seen:?}");
    rt.shutdown().await;
    assert!(rx.try_recv().is_err(), "only the triggered key ran");
}

/// The arguments of [`DerivedInvoice`]'s keys.
#[derive(serde::Serialize, serde::Deserialize)]
struct Customer {
    id: i64,
}

#[derive(JobKind)]
#[kind(name = "derived_invoice", args = Customer, lease = "10s", retry = "100ms")]
struct DerivedInvoice {
    seen: mpsc::UnboundedSender<(Seen, i64)>,
}

impl DerivedInvoice {
    async fn run(&self, customer: Customer, guard: FenceGuard) -> Result<(), ReconcileError> {
        guard.check().map_err(|_| ReconcileError)?;
        let seen = Seen {
            key: guard.key().to_owned(),
            job: guard.job().to_owned(),
            fence: guard.fence(),
        };
        let _ = self.seen.send((seen, customer.id));
        Ok(())
    }
}

/// A derived kind's generated `run` calls the struct's own `run` with the
/// stored key's arguments, under the key's lease, with the kind's name as
/// the job label; its settings are the attribute's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_derived_kind_runs_its_inherent_run_with_each_keys_arguments() {
    let db = support::db().await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let kind = DerivedInvoice { seen: tx };
    assert_eq!(kind.settings().get_lease(), Duration::from_secs(10));
    let store = LeaseStore::new(db.pool.clone());
    let key = |key: &str, id| NewKey::new("derived_invoice", key, &Customer { id }, Schedule::Manual).expect("key");
    store
        .keys()
        .add(&[key("invoice:7", 7), key("invoice:42", 42)])
        .await
        .expect("add keys");
    let rt = Runtime::builder(db.pool.clone())
        .holder("derive-kind-test")
        .poll_interval(Duration::from_millis(100))
        .register_kind(kind)
        .start()
        .await
        .expect("runtime starts");
    support::eventually(Duration::from_secs(10), || (rt.health().registered == 2).then_some(())).await;

    store.controls().trigger("invoice:42").await.expect("trigger");
    let (seen, id) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("the derived kind ran within 30s")
        .expect("sender alive");
    assert_eq!(
        (seen.key.as_str(), seen.job.as_str(), id),
        ("invoice:42", "derived_invoice", 42)
    );
    assert!(seen.fence > 0, "{seen:?}");
    rt.shutdown().await;
    assert!(rx.try_recv().is_err(), "only the triggered key ran");
}
