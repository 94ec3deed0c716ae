//! The derive through a renamed import, with the trait not in scope.
use leasehold as lh;

#[derive(lh::FencedJob)]
#[job(every = "10s", lease = "30s")]
struct Renamed;

impl Renamed {
    async fn run(&self, _guard: lh::FenceGuard) -> Result<(), lh::JobError> {
        Ok(())
    }
}

mod nested {
    use leasehold::FencedJob as Job;

    #[derive(Job)]
    pub struct Aliased;

    impl Aliased {
        pub async fn run(&self, _guard: leasehold::FenceGuard) -> Result<(), leasehold::JobError> {
            Ok(())
        }
    }
}

fn main() {
    assert_eq!(lh::FencedJob::name(&Renamed), "renamed");
    assert_eq!(lh::FencedJob::key(&nested::Aliased), "aliased");
}
