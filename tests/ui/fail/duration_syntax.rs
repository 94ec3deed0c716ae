use leasehold::{FenceGuard, FencedJob, JobError};

macro_rules! job {
    ($name:ident) => {
        impl $name {
            async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
                Ok(())
            }
        }
    };
}

#[derive(FencedJob)]
#[job(lease = "1.5s")]
struct Fraction;
job!(Fraction);

#[derive(FencedJob)]
#[job(lease = "30m1h")]
struct Order;
job!(Order);

#[derive(FencedJob)]
#[job(lease = "2d")]
struct Days;
job!(Days);

#[derive(FencedJob)]
#[job(lease = "-5s")]
struct Negative;
job!(Negative);

#[derive(FencedJob)]
#[job(lease = "1h 30m")]
struct Space;
job!(Space);

fn main() {}
