use leasehold::{FenceGuard, FencedJob, JobError};

#[derive(FencedJob)]
#[job(cron = "0 0 30 2 *")]
struct Leap;

impl Leap {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
