use leasehold::{FenceGuard, FencedJob, JobError};

#[derive(FencedJob)]
#[job(key = "region:{region}")]
struct Regional<'a> {
    region: &'a str,
}

impl Regional<'_> {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
