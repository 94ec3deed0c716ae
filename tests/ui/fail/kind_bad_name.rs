use leasehold::{FenceGuard, JobError, JobKind};

#[derive(JobKind)]
#[kind(name = "", args = u64)]
struct Unnamed;

impl Unnamed {
    async fn run(&self, _args: u64, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(JobKind)]
#[kind(name = "in\0voice", args = u64)]
struct Nul;

impl Nul {
    async fn run(&self, _args: u64, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
