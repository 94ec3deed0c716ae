use leasehold::{FencedJob, JobError};

#[derive(FencedJob)]
struct Report;

impl Report {
    async fn run(&self) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
