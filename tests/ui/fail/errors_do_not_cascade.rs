//! A mistake in `#[job]` is one error: the impl is still generated, so the
//! job can be used as a `FencedJob` without further errors.
use leasehold::{FenceGuard, FencedJob, JobError};

#[derive(FencedJob)]
#[job(every = "5 minutes")]
struct SyncInventory;

impl SyncInventory {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn register<J: FencedJob>(job: J) -> J {
    job
}

fn main() {
    let job = register(SyncInventory);
    let _ = (job.name(), job.key(), job.settings());
}
