//! Fixtures for the unit tests of the runtime's state: jobs, the server's
//! answers, and a [`Shared`] whose store never connects (these tests send
//! no statement).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgPoolOptions;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{JobEntry, NameLimits, Priorities, Registry, ServerClock, Setup, Shared};
use crate::guard::FenceGuard;
use crate::health::Tracker;
use crate::job::{FencedJob, JobError, JobSettings};
use crate::lease::{Lease, LeaseStore, Sighting};
use crate::schedule::Schedule;
use crate::tenure::Tenure;

/// The lease of every fixture.
pub(crate) const LEASE: Duration = Duration::from_secs(30);

/// A manual job of `name` that does nothing, under `key`.
struct Idle {
    name: &'static str,
    key: String,
}

impl FencedJob for Idle {
    fn name(&self) -> &str {
        self.name
    }
    fn key(&self) -> String {
        self.key.clone()
    }
    fn settings(&self) -> JobSettings {
        JobSettings::new(Schedule::Manual)
    }
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

/// A registered key of the job "handover".
pub(crate) fn entry(key: &str) -> Arc<JobEntry> {
    entry_of("handover", key)
}

/// A registered key of the job `name`.
pub(crate) fn entry_of(name: &'static str, key: &str) -> Arc<JobEntry> {
    Arc::new(JobEntry::new(Idle {
        name,
        key: key.to_owned(),
    }))
}

/// The server's clock in these tests' answers.
pub(crate) fn server_noon() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-12-01T12:00:00Z").map_or(DateTime::UNIX_EPOCH, |t| t.to_utc())
}

/// What a claim answers about a due key another replica holds for
/// [`LEASE`] more.
pub(crate) fn held_elsewhere(key: &str) -> Sighting {
    let server_now = server_noon();
    Sighting {
        key: key.to_owned(),
        expires_at: server_now + LEASE,
        next_due_at: Some(server_now - chrono::TimeDelta::seconds(1)),
        server_now,
        paused: false,
        held_back: false,
        limited: false,
    }
}

/// What an answer says about a free key due `due_in` from now (past if
/// negative), paused or not.
pub(crate) fn free(key: &str, due_in: chrono::TimeDelta, paused: bool) -> Sighting {
    let server_now = server_noon();
    Sighting {
        key: key.to_owned(),
        expires_at: server_now - chrono::TimeDelta::seconds(60),
        next_due_at: Some(server_now + due_in),
        server_now,
        paused,
        held_back: false,
        limited: false,
    }
}

/// A runtime's shared state with at most `max_concurrent_runs` runs, on a
/// store that never connects, holding `registry`.
pub(crate) fn shared(max_concurrent_runs: usize, registry: Registry) -> Arc<Shared> {
    shared_limited(max_concurrent_runs, registry, NameLimits::default())
}

/// [`shared`], with limits per job name.
pub(crate) fn shared_limited(max_concurrent_runs: usize, registry: Registry, limits: NameLimits) -> Arc<Shared> {
    let pool = PgPoolOptions::new()
        .connect_lazy("postgres://unit-test@127.0.0.1:1/none")
        .expect("a well-formed URL");
    let store = LeaseStore::new(pool);
    let (finishes, _) = mpsc::unbounded_channel();
    Arc::new(Shared::new(Setup {
        holder: "unit-test".to_owned(),
        health: Tracker::new(Duration::from_secs(60), 3, store.poisoned().clone()),
        store,
        registry,
        poll_interval: Duration::from_secs(1),
        max_concurrent_runs,
        limits,
        priorities: Priorities::default(),
        history: 10,
        tick: Duration::from_secs(10),
        clock: ServerClock::default(),
        finishes,
    }))
}

/// A tenure of `job`'s key, claimed just now for [`LEASE`].
pub(crate) fn tenure(shared: &Shared, job: &JobEntry) -> Arc<Tenure> {
    let now = server_noon();
    let lease = Lease {
        key: job.key.to_string(),
        holder: shared.holder.clone(),
        fence: 1,
        acquired_at: now,
        expires_at: now + LEASE,
        remaining: LEASE,
    };
    let margin = LEASE / 10;
    Arc::new(Tenure::new(
        &job.name,
        lease,
        Instant::now(),
        LEASE,
        margin,
        shared.store.clone(),
    ))
}
