use leasehold::{FenceGuard, FencedJob, JobError};

#[derive(FencedJob)]
#[job(key = "")]
struct Nightly;

impl Nightly {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
