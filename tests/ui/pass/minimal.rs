//! No `#[job]` at all: a manual job named after the struct, with the
//! library's default settings.
use std::time::Duration;

use leasehold::{FenceGuard, FencedJob, JobError, Schedule};

#[derive(FencedJob)]
struct CleanupTempFiles;

impl CleanupTempFiles {
    async fn run(&self, guard: FenceGuard) -> Result<(), JobError> {
        guard.check()?;
        Ok(())
    }
}

/// `#[job]` and `#[job()]` with nothing in them are fine.
#[derive(FencedJob)]
#[job]
#[job()]
struct Empty;

impl Empty {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {
    // A struct local to a function, as in tests.
    #[derive(FencedJob)]
    #[job(every = "1s")]
    struct Local;

    impl Local {
        async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
            Ok(())
        }
    }

    assert_eq!(Local.name(), "local");
    assert_eq!(Empty.name(), "empty");

    let job = CleanupTempFiles;
    assert_eq!(job.name(), "cleanup_temp_files");
    assert_eq!(job.key(), "cleanup_temp_files");
    let settings = job.settings();
    assert!(matches!(settings.get_schedule(), Schedule::Manual));
    assert_eq!(settings.get_heartbeat(), Duration::from_secs(20));
    assert_eq!(settings.get_margin(), Duration::from_secs(6));
}
