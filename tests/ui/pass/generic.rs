//! Generic structs: the impl holds for instantiations that are
//! `Send + Sync + 'static`.
use std::fmt::Display;
use std::marker::PhantomData;

use leasehold::{FenceGuard, FencedJob, JobError};

#[derive(FencedJob)]
#[job(name = "per-tenant", key = "tenant:{tenant}", every = "1m")]
struct PerTenant<T: Display, S = ()>
where
    S: Default,
{
    tenant: T,
    state: PhantomData<S>,
}

impl<T: Display, S: Default> PerTenant<T, S> {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        let _ = S::default();
        Ok(())
    }
}

#[derive(FencedJob)]
struct Batch<const N: usize>;

impl<const N: usize> Batch<N> {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {
    let job: PerTenant<u64> = PerTenant {
        tenant: 42,
        state: PhantomData,
    };
    assert_eq!(job.key(), "tenant:42");
    assert_eq!(job.name(), "per-tenant");
    assert_eq!(Batch::<3>.name(), "batch");
}
