use leasehold::{FenceGuard, FencedJob, JobError};

#[derive(FencedJob)]
#[job(every = "1h", catch_up = "latest")]
struct Export;

impl Export {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(FencedJob)]
#[job(every = "1h", catch_up = "Skip")]
struct Report;

impl Report {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
