use leasehold::{FenceGuard, FencedJob, JobError};

#[derive(FencedJob)]
#[job(lease = 60, name = sync)]
struct SyncInventory;

impl SyncInventory {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
