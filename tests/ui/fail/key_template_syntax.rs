use leasehold::{FenceGuard, FencedJob, JobError};

macro_rules! job {
    ($name:ident) => {
        impl $name {
            async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
                Ok(())
            }
        }
    };
}

#[derive(FencedJob)]
#[job(key = "reconcile:{}")]
struct Empty {
    tenant: String,
}
job!(Empty);

#[derive(FencedJob)]
#[job(key = "reconcile:{tenant:>8}")]
struct Spec {
    tenant: String,
}
job!(Spec);

#[derive(FencedJob)]
#[job(key = "reconcile:{tenant")]
struct Unclosed {
    tenant: String,
}
job!(Unclosed);

#[derive(FencedJob)]
#[job(key = "reconcile}")]
struct Unmatched;
job!(Unmatched);

fn main() {}
