use leasehold::{FenceGuard, FencedJob, JobError};

#[derive(FencedJob)]
#[job(every = "1h", tz = "Europe/Paris")]
struct Hourly;

impl Hourly {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(FencedJob)]
#[job(tz = "Europe/Paris")]
struct Manual;

impl Manual {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
