//! Keys built from fields: one lease per tenant, one name for all.
use leasehold::{FenceGuard, FencedJob, JobError};

#[derive(FencedJob)]
#[job(name = "reconcile", key = "reconcile:{tenant}", every = "5m")]
struct Reconcile {
    tenant: String,
}

impl Reconcile {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        println!("reconciling {}", self.tenant);
        Ok(())
    }
}

/// Several fields, any `Display` type, a raw identifier, escaped braces.
#[derive(FencedJob)]
#[job(key = "{{shard}}/{region}/{shard}/{type}")]
struct Partition {
    region: &'static str,
    shard: u32,
    r#type: char,
    unused: Vec<u8>,
}

impl Partition {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        let _ = &self.unused;
        Ok(())
    }
}

fn main() {
    let job = Reconcile {
        tenant: "acme".to_owned(),
    };
    assert_eq!(FencedJob::key(&job), "reconcile:acme");
    assert_eq!(FencedJob::name(&job), "reconcile");
    let other = Reconcile {
        tenant: "globex".to_owned(),
    };
    assert_eq!(other.key(), "reconcile:globex");
    assert_eq!(other.name(), "reconcile");

    let job = Partition {
        region: "eu",
        shard: 7,
        r#type: 'x',
        unused: Vec::new(),
    };
    assert_eq!(job.key(), "{shard}/eu/7/x");
    assert_eq!(job.name(), "partition");
}
