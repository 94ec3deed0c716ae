use leasehold::{FenceGuard, FencedJob, JobError};

#[derive(FencedJob)]
#[job(every = "1h", catch_up = "all")]
struct Export;

impl Export {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
