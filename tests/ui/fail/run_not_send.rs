use std::rc::Rc;

use leasehold::{FenceGuard, FencedJob, JobError};

#[derive(FencedJob)]
struct Counter;

impl Counter {
    async fn run(&self, guard: FenceGuard) -> Result<(), JobError> {
        let count = Rc::new(1);
        guard.cancelled().await;
        println!("{count}");
        Ok(())
    }
}

fn main() {}
