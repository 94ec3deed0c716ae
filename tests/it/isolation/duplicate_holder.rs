//! Two live runtimes configured with the same holder id.

use std::time::Duration;

use leasehold::Schedule;
use tokio::time::Instant;

use crate::support::{self, Runs, job, quick};

/// Two replicas with `.holder("svc-same")`, a job every second (lease 5 s,
/// 300 ms of work) for 8 s: never two runs of the key at once, and about
/// one run per slot. The failure this guards against (a claim that lets a
/// holder re-enter its own live lease): 47 runs in 8 s, 44 overlapping pairs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runtimes_with_one_holder_id_never_overlap() {
    let db = support::db().await;
    let runs = Runs::default();
    let settings = quick(Schedule::every(Duration::from_secs(1)), Duration::from_secs(5));
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let tick = job("same", settings.clone(), runs.body(Duration::from_millis(300)));
        let pool = db.pool_with(3).await;
        replicas.push(support::replica_on(pool, "svc-same", Duration::from_millis(100), vec![tick]).await);
    }
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let elapsed = started.elapsed().as_secs_f64();
    for r in &replicas {
        r.shutdown().await;
    }
    let all = runs.all();
    let overlaps = support::overlapping_pairs(&all);
    println!(
        "measured: {} runs in {elapsed:.1} s, {} overlapping pairs",
        all.len(),
        overlaps.len()
    );
    assert!(overlaps.is_empty(), "overlapping runs: {overlaps:?}");
    assert!(
        all.len() <= elapsed.ceil() as usize + 1,
        "{} runs in {elapsed:.1} s",
        all.len()
    );
    assert!(
        all.len() + 2 >= elapsed.floor() as usize,
        "{} runs in {elapsed:.1} s",
        all.len()
    );
}
