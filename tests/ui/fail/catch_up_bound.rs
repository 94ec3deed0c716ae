use leasehold::{FenceGuard, FencedJob, JobError};

#[derive(FencedJob)]
#[job(every = "1h", catch_up = "all(0)")]
struct NoCatchUp;

impl NoCatchUp {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(FencedJob)]
#[job(every = "1h", catch_up = "all(5000)")]
struct TooMany;

impl TooMany {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
