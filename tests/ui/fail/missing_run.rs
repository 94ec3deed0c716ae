use leasehold::{FenceGuard, FencedJob, JobError};

#[derive(FencedJob)]
#[job(every = "5m")]
struct Forgotten;

impl Forgotten {
    // Named `execute`, not `run`: the derive calls `Self::run`.
    #[allow(dead_code)]
    async fn execute(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
