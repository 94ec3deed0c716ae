//! A registered key: its job, type-erased, with its name, key and settings.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;

use crate::error::{Error, Result};
use crate::guard::FenceGuard;
use crate::job::{FencedJob, JobError, JobSettings};
use crate::validate;

/// A registered job's body, type-erased: the job itself is the only
/// allocation, shared by its runs.
pub(crate) trait Body: Send + Sync {
    /// A run of the job with `guard`, holding the job for as long as it
    /// lasts.
    fn run_owned(self: Arc<Self>, guard: FenceGuard) -> BoxFuture<'static, Result<(), JobError>>;
}

impl<J: FencedJob> Body for J {
    fn run_owned(self: Arc<Self>, guard: FenceGuard) -> BoxFuture<'static, Result<(), JobError>> {
        Box::pin(async move { FencedJob::run(&*self, guard).await })
    }
}

/// One registered key.
pub(crate) struct JobEntry {
    pub(crate) name: Arc<str>,
    pub(crate) key: Arc<str>,
    /// Shared by keys of one job registered with the same settings: a
    /// fleet registers many keys of a few jobs.
    pub(crate) settings: Arc<JobSettings>,
    pub(crate) body: Arc<dyn Body>,
    /// When (server time) the key's schedule changed to this entry's, for
    /// an entry that replaced another one of the key's
    /// (`Registry::replace`); `None` for a key registered with it. A run
    /// that started under an earlier entry files its next due time from
    /// this one's schedule, from this instant on (`supervise::next_due`).
    pub(crate) changed_at: Option<DateTime<Utc>>,
}

impl JobEntry {
    /// Erases a job's type; reads its name, key and settings once.
    pub(crate) fn new<J: FencedJob>(job: J) -> Self {
        let (name, key, settings) = (Arc::from(job.name()), Arc::from(job.key()), Arc::new(job.settings()));
        JobEntry {
            name,
            key,
            settings,
            body: Arc::new(job),
            changed_at: None,
        }
    }

    /// Checks the key and the settings, naming the key in any error.
    pub(crate) fn check(&self) -> Result<()> {
        validate::key(&self.key)?;
        self.settings.validate(&self.key)
    }
}

/// The error for a key registered twice in one runtime.
pub(crate) fn duplicate_key(key: &str) -> Error {
    Error::invalid(
        "job key",
        key,
        "it is registered twice in this runtime; give each instance its own key (e.g. \"reconcile:{tenant}\"), or remove the old one first",
    )
}
