//! `#[derive(JobKind)]`: the name, the `Args` type and the settings come
//! from `#[kind(...)]`; `run` is the struct's own, with the key's arguments.
use std::time::Duration;

use leasehold::{FenceGuard, JobError, JobKind, JobSettings, Schedule};

#[derive(serde::Serialize, serde::Deserialize)]
struct Tenant {
    id: i64,
}

#[derive(JobKind)]
#[kind(name = "invoice", args = Tenant, lease = "30s", heartbeat = "5s", retry = "2s")]
struct Invoice {
    prefix: String,
}

impl Invoice {
    async fn run(&self, tenant: Tenant, guard: FenceGuard) -> Result<(), JobError> {
        guard.check()?;
        let _ = format!("{}{}", self.prefix, tenant.id);
        Ok(())
    }
}

/// No settings but `args`: named after the struct, the library's defaults;
/// a generic `Args` and any error type that converts to `JobError`.
#[derive(JobKind)]
#[kind(args = Vec<String>)]
struct PurgeCaches;

impl PurgeCaches {
    async fn run(&self, caches: Vec<String>, _guard: FenceGuard) -> Result<(), std::io::Error> {
        let _ = caches.len();
        Ok(())
    }
}

fn main() {
    let kind = Invoice { prefix: "inv-".into() };
    assert_eq!(kind.name(), "invoice");
    let by_hand = JobSettings::new(Schedule::Manual)
        .lease(Duration::from_secs(30))
        .heartbeat(Duration::from_secs(5))
        .retry(Duration::from_secs(2), Duration::from_secs(300));
    assert_eq!(format!("{:?}", kind.settings()), format!("{by_hand:?}"));
    let _: fn(Tenant) -> <Invoice as JobKind>::Args = |tenant| tenant;

    assert_eq!(PurgeCaches.name(), "purge_caches");
    let defaults = JobSettings::new(Schedule::Manual);
    assert_eq!(format!("{:?}", PurgeCaches.settings()), format!("{defaults:?}"));
    let _: Vec<String> = <<PurgeCaches as JobKind>::Args>::default();
}
