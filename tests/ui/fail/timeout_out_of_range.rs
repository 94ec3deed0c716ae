use leasehold::{FenceGuard, FencedJob, JobError, JobKind};

#[derive(FencedJob)]
#[job(every = "1m", timeout = "50ms")]
struct TooShort;

impl TooShort {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(JobKind)]
#[kind(args = u64, timeout = "169h")]
struct TooLong;

impl TooLong {
    async fn run(&self, _args: u64, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(FencedJob)]
#[job(timeout = "0s")]
struct Zero;

impl Zero {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
