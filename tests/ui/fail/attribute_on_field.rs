use leasehold::{FenceGuard, FencedJob, JobError};

#[derive(FencedJob)]
struct Reconcile {
    #[job(key = "reconcile:{tenant}")]
    tenant: String,
}

impl Reconcile {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
