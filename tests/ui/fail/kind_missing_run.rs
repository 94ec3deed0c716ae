use leasehold::{FenceGuard, JobError, JobKind};

#[derive(JobKind)]
#[kind(args = u64)]
struct Forgotten;

impl Forgotten {
    // Named `execute`, not `run`: the derive calls `Self::run`.
    #[allow(dead_code)]
    async fn execute(&self, _args: u64, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
