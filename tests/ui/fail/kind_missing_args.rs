use leasehold::{FenceGuard, JobError, JobKind};

#[derive(JobKind)]
#[kind(name = "invoice", lease = "30s")]
struct Invoice;

impl Invoice {
    async fn run(&self, _args: u64, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(JobKind)]
#[kind(args = "Tenant")]
struct Quoted;

impl Quoted {
    async fn run(&self, _args: u64, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
