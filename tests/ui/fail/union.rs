use leasehold::{FenceGuard, FencedJob, JobError};

#[derive(FencedJob)]
union Bits {
    int: u32,
    float: f32,
}

impl Bits {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
