use leasehold::{FenceGuard, FencedJob, JobError};

#[derive(FencedJob)]
#[job(key = "reconcile:{tenants}")]
struct Reconcile {
    tenants: Vec<String>,
}

impl Reconcile {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
