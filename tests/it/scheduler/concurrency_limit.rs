//! `max_concurrent_runs`: a replica claims only what it has room for and
//! leaves the rest to the others.

use std::time::Duration;

use leasehold::{Error, Runtime, Schedule};

use crate::support::{self, Runs, job, quick};

/// Replica "small" (limit 2) and "big" (limit 10) register the same six
/// long-running keys, all due at the same second: "small" claims two of
/// them in one statement and never runs more, "big" takes the other four,
/// and all six run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_replica_leaves_keys_to_the_others() {
    let db = support::db().await;
    let runs = Runs::default();
    let keys: Vec<String> = (0..6).map(|k| format!("tenant:{k}")).collect();
    let start = |holder: &'static str, limit: usize| {
        let jobs: Vec<_> = keys
            .iter()
            .map(|k| {
                job(
                    k,
                    quick(Schedule::every(Duration::from_secs(1)), Duration::from_secs(30)),
                    runs.body(Duration::from_secs(600)),
                )
            })
            .collect();
        let db = &db;
        async move {
            let mut builder = Runtime::builder(db.pool_with(2).await)
                .holder(holder)
                .poll_interval(Duration::from_millis(200))
                .max_concurrent_runs(limit);
            for j in jobs {
                builder = builder.register(j);
            }
            builder.start().await.expect("runtime starts")
        }
    };
    let small = start("small", 2).await;
    // At the next second all six are due: "small" claims what it has room for.
    support::eventually(Duration::from_secs(5), || (small.health().running == 2).then_some(())).await;
    let big = start("big", 10).await;
    let mut most = 0;
    let all = support::eventually(Duration::from_secs(10), || {
        most = most.max(small.health().running);
        let all = runs.all();
        (all.len() >= 6).then_some(all)
    })
    .await;
    assert!(most <= 2, "small ran {most} at once");
    let on_small = all.iter().filter(|r| r.holder == "small").count();
    let on_big = all.iter().filter(|r| r.holder == "big").count();
    assert_eq!((on_small, on_big), (2, 4), "{all:?}");
    let health = small.health();
    assert_eq!((health.running, health.max_concurrent_runs), (2, 2));
    small.shutdown().await;
    big.shutdown().await;
}

/// A zero limit is refused at start, naming the setting.
#[tokio::test]
async fn a_zero_limit_is_refused() {
    let db = support::db().await;
    let err = Runtime::builder(db.pool.clone())
        .max_concurrent_runs(0)
        .start()
        .await
        .expect_err("zero is not a limit");
    assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
    assert!(err.to_string().contains("max_concurrent_runs"), "{err}");
}
