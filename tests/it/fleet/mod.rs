//! Keys that belong to the fleet: keys of job kinds, stored once and run by
//! every replica that registers their kind.
//!
//! The kind here, `tenant`, records every run (key, arguments, version,
//! holder, fence, the second its tenure began); each scenario file arranges
//! replicas and changes to the stored keys, and reads the record.

mod arguments;
mod churn;
mod clauses;
mod handover;
mod key_life;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{CancelReason, FenceGuard, JobError, JobKind, JobSettings, NewKey, Runtime, Schedule};
use serde::{Deserialize, Serialize};

use crate::support::{TestDb, quick};

/// The lease of the test kind.
pub const LEASE: Duration = Duration::from_secs(5);

/// A tenant's arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tenant {
    pub plan: String,
}

/// One run, as the kind saw it.
#[derive(Debug, Clone)]
pub struct Ran {
    pub key: String,
    pub plan: String,
    pub version: Option<i64>,
    pub holder: String,
    /// The slot it ran for (`None` when triggered out of schedule).
    pub slot: Option<chrono::DateTime<chrono::Utc>>,
    /// When it started, on this process's clock.
    pub started: tokio::time::Instant,
    /// Why the run was cancelled, if it was (it waits for it).
    pub cancelled: Option<CancelReason>,
}

/// The runs of every replica.
pub type Log = Arc<Mutex<Vec<Ran>>>;

/// The `tenant` kind: records its run, then works for `work` (or until
/// cancelled).
#[derive(Clone)]
pub struct TenantKind {
    pub log: Log,
    pub work: Duration,
}

impl TenantKind {
    /// A kind whose runs each take `work`, with an empty log.
    pub fn working(work: Duration) -> Self {
        TenantKind {
            log: Default::default(),
            work,
        }
    }
}

impl JobKind for TenantKind {
    type Args = Tenant;

    fn name(&self) -> &str {
        "tenant"
    }

    fn settings(&self) -> JobSettings {
        quick(Schedule::Manual, LEASE)
    }

    async fn run(&self, args: Tenant, guard: FenceGuard) -> Result<(), JobError> {
        let i = {
            let mut log = self.log.lock().unwrap();
            log.push(Ran {
                key: guard.key().to_owned(),
                plan: args.plan,
                version: guard.args_version(),
                holder: guard.holder().to_owned(),
                slot: guard.slot(),
                started: tokio::time::Instant::now(),
                cancelled: None,
            });
            log.len() - 1
        };
        tokio::select! {
            _ = tokio::time::sleep(self.work) => {}
            _ = guard.cancelled() => self.log.lock().unwrap()[i].cancelled = guard.reason(),
        }
        Ok(())
    }
}

/// A replica named `holder` registering the `tenant` kind, polling every
/// `poll`, listening for notifications or not.
pub async fn replica(db: &TestDb, holder: &str, kind: &TenantKind, poll: Duration, listen: bool) -> Runtime {
    Runtime::builder(db.pool_with(2).await)
        .holder(holder)
        .poll_interval(poll)
        .listen(listen)
        .register_kind(kind.clone())
        .start()
        .await
        .expect("runtime starts")
}

/// A key of the `tenant` kind.
pub fn tenant(key: &str, plan: &str, schedule: &str) -> NewKey {
    NewKey::new(
        "tenant",
        key,
        &Tenant { plan: plan.to_owned() },
        schedule.parse().expect("schedule"),
    )
    .expect("key")
}

/// The runs of `key` so far.
pub fn runs_of(log: &Log, key: &str) -> Vec<Ran> {
    log.lock().unwrap().iter().filter(|r| r.key == key).cloned().collect()
}
