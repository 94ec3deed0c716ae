use leasehold::{FenceGuard, FencedJob};

#[derive(Debug)]
struct NotAnError;

#[derive(FencedJob)]
struct Report;

impl Report {
    async fn run(&self, _guard: FenceGuard) -> Result<(), NotAnError> {
        Err(NotAnError)
    }
}

fn main() {}
