use leasehold::{FenceGuard, FencedJob, JobError};

#[derive(FencedJob)]
#[job(cron = "30 2 * * *", tz = "Europe/Pariss")]
struct Nightly;

impl Nightly {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(FencedJob)]
#[job(cron = "30 2 * * *", tz = "CEST")]
struct NoSuchName;

impl NoSuchName {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
