use leasehold::{FenceGuard, JobError, JobKind};

#[derive(JobKind)]
#[kind(args = u64, lease = "169h")]
struct Long;

impl Long {
    async fn run(&self, _args: u64, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(JobKind)]
#[kind(args = u64, lease = "10s", margin = "100ms")]
struct ThinMargin;

impl ThinMargin {
    async fn run(&self, _args: u64, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
