use leasehold::{FenceGuard, FencedJob, JobError};

#[derive(FencedJob)]
#[job(key = "reconcile:{0}")]
struct Reconcile(String);

impl Reconcile {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
