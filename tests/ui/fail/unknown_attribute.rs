use leasehold::{FenceGuard, FencedJob, JobError};

#[derive(FencedJob)]
#[job(cron = "0 3 * * *", lese = "60s")]
struct Nightly;

impl Nightly {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
