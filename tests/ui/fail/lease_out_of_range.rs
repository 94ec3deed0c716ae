use leasehold::{FenceGuard, FencedJob, JobError};

#[derive(FencedJob)]
#[job(lease = "5ms")]
struct Short;

impl Short {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(FencedJob)]
#[job(lease = "169h")]
struct Long;

impl Long {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
