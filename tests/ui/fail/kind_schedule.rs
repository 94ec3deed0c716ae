//! A kind's keys each have their own schedule and catch-up: the kind
//! refuses them, and its key.
use leasehold::{FenceGuard, JobError, JobKind};

#[derive(JobKind)]
#[kind(args = u64, every = "5m", catch_up = "skip")]
#[kind(key = "invoice:{id}", lease = "30s")]
struct Invoice;

impl Invoice {
    async fn run(&self, _args: u64, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn register<K: JobKind>(kind: K) -> K {
    kind
}

fn main() {
    // The impl is still generated: no further errors here.
    let _ = register(Invoice).settings();
}
