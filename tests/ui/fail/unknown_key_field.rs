use leasehold::{FenceGuard, FencedJob, JobError};

#[derive(FencedJob)]
#[job(key = "reconcile:{tenat}", every = "5m")]
struct Reconcile {
    tenant: String,
}

impl Reconcile {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
