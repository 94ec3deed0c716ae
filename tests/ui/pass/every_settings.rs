//! An interval job with every setting given, over several `#[job]`s.
use std::time::Duration;

use leasehold::{FenceGuard, FencedJob, JobError, JobKind, Schedule};

#[derive(FencedJob)]
#[job(name = "sync", every = "5m")]
#[job(lease = "1m30s", heartbeat = "20s", margin = "10s", grace = "2s500ms")]
#[job(retry = "250ms", retry_max = "1h")]
struct SyncInventory;

impl SyncInventory {
    async fn run(&self, guard: FenceGuard) -> Result<(), JobError> {
        guard.cancelled().await;
        Ok(())
    }
}

/// Only `retry` given: the library's default `retry_max` (5m) stays.
#[derive(FencedJob)]
#[job(every = "100ms", lease = "10ms", retry = "2s")]
struct Fast;

impl Fast {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

/// A time limit per run, at both ends of its range, on a job and a kind.
#[derive(FencedJob)]
#[job(every = "1h", timeout = "15m")]
struct Limited;

impl Limited {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(FencedJob)]
#[job(timeout = "100ms")]
struct Shortest;

impl Shortest {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(JobKind)]
#[kind(args = u64, timeout = "168h")]
struct Longest;

impl Longest {
    async fn run(&self, _args: u64, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

/// The longest lease there is: 7 days.
#[derive(FencedJob)]
#[job(every = "24h", lease = "168h")]
struct Weekly;

impl Weekly {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {
    let job = SyncInventory;
    assert_eq!(job.name(), "sync");
    assert_eq!(job.key(), "sync");
    let settings = job.settings();
    assert!(matches!(settings.get_schedule(), Schedule::Every(d) if *d == Duration::from_secs(300)));
    assert_eq!(settings.get_heartbeat(), Duration::from_secs(20));
    assert_eq!(settings.get_margin(), Duration::from_secs(10));
    let debug = format!("{settings:?}");
    for expected in ["lease: 90s", "grace: 2.5s", "retry_initial: 250ms", "retry_max: 3600s"] {
        assert!(debug.contains(expected), "{expected} in {debug}");
    }

    let settings = Fast.settings();
    assert!(matches!(settings.get_schedule(), Schedule::Every(d) if *d == Duration::from_millis(100)));
    let debug = format!("{settings:?}");
    for expected in ["lease: 10ms", "retry_initial: 2s", "retry_max: 300s"] {
        assert!(debug.contains(expected), "{expected} in {debug}");
    }

    assert!(format!("{:?}", Weekly.settings()).contains("lease: 604800s"));
    assert_eq!(Weekly.settings().get_timeout(), None);
    assert_eq!(Limited.settings().get_timeout(), Some(Duration::from_secs(900)));
    assert_eq!(Shortest.settings().get_timeout(), Some(Duration::from_millis(100)));
    assert_eq!(Longest.settings().get_timeout(), Some(Duration::from_secs(168 * 3600)));
}
