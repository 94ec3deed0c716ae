//! `#[derive(FencedJob)]`: compile-pass and compile-fail cases (trybuild).
//!
//! Pass cases (`tests/ui/pass`) are built and run: their `main`s check the
//! generated `name`, `key` and `settings`. Fail cases (`tests/ui/fail`) must
//! fail with exactly the committed `.stderr`; after a deliberate change to a
//! message, regenerate with `TRYBUILD=overwrite cargo test --test it derive`
//! and read the diff.

use std::fmt;
use std::time::Duration;

use leasehold::{FenceGuard, FencedJob, Runtime};
use tokio::sync::mpsc;

use crate::support;

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}

/// The derive checks settings at compile time against copies of the
/// library's limits (a proc-macro crate cannot import them); this fails when
/// they drift apart. Keep `macros/src/validate.rs` in step.
#[test]
fn derive_limits_match_the_library() {
    assert_eq!(
        leasehold::MIN_LEASE,
        Duration::from_millis(10),
        "update MIN_LEASE in macros/src/validate.rs"
    );
    assert_eq!(
        leasehold::MAX_LEASE,
        Duration::from_secs(7 * 24 * 3600),
        "update MAX_LEASE in macros/src/validate.rs"
    );
    assert_eq!(
        leasehold::MAX_KEY_BYTES,
        255,
        "update MAX_KEY_BYTES in macros/src/validate.rs"
    );
    assert_eq!(
        leasehold::MAX_CATCH_UP,
        1000,
        "update MAX_CATCH_UP in macros/src/validate.rs"
    );

    // `JobSettings::new` defaults, which the derive assumes when it checks
    // the settings that are given against those that are not.
    let settings = leasehold::JobSettings::new(leasehold::Schedule::Manual);
    assert_eq!(
        settings.catch_up_policy(),
        leasehold::CatchUp::Once,
        "the derive sets `catch_up` only when given"
    );
    assert_eq!(
        settings.heartbeat_interval(),
        Duration::from_secs(20),
        "lease 60s, heartbeat lease/3"
    );
    assert_eq!(settings.margin(), Duration::from_secs(6), "margin lease/10");
    let debug = format!("{settings:?}");
    for default in ["lease: 60s", "retry_initial: 1s", "retry_max: 300s"] {
        assert!(
            debug.contains(default),
            "{default} in {debug}: update the defaults in macros/src/validate.rs"
        );
    }
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
