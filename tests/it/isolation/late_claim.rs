//! A claim answered after its tenure's local deadline starts no run.
//!
//! A claim is bounded by the scheduler's 10 s timeout, not by the lease, so
//! with a short lease a slow answer can come back after `sent + remaining −
//! margin`: by then the lease may have expired on the server and another
//! replica's run started. The model check found that such a claim still
//! spawned the job's task until the supervisor noticed the deadline
//! (`model/README.md`); now it is handed back unrun.

use std::time::Duration;

use leasehold::{Schedule, store::LeaseStore};
use leasehold_testkit::proxy::{Mode, Proxy};

use crate::support::{self, Runs, eventually_async, job, proxied_pool, quick, replica_on};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_answered_after_its_deadline_starts_no_run() {
    let db = support::db().await;
    let proxy = Proxy::start("127.0.0.1", db.options.get_port()).await.expect("proxy");
    let pool = proxied_pool(&db, &proxy, 2).await;
    let direct = LeaseStore::new(db.pool.clone());
    let runs = Runs::default();
    // Lease 1 s, margin 100 ms: an answer later than 900 ms is too late.
    let settings = quick(Schedule::Manual, Duration::from_secs(1));
    let slow = job("late:k", settings, runs.body(Duration::from_millis(50)));
    let runtime = replica_on(pool, "slow-replica", Duration::from_millis(100), vec![slow]).await;
    let before = direct.get("late:k").await.expect("get").expect("registered").fence;

    // Every chunk held 600 ms each way: each claim answer arrives ≥ 1.2 s
    // after it was sent.
    proxy.set(Mode::Delay(Duration::from_millis(600)));
    direct.controls().trigger("late:k").await.expect("trigger");
    let claimed_late = eventually_async(Duration::from_secs(15), || async {
        let fence = direct.get("late:k").await.ok()??.fence;
        (fence > before).then_some(fence)
    })
    .await;
    // A poll begun after the claim was seen: the pass that claimed has
    // ended by then, and any run it started was spawned.
    support::wait_polls(&runtime, 1).await;
    assert!(claimed_late > before, "the slow replica did claim the key");
    assert_eq!(
        runs.all().len(),
        0,
        "no run started from an answer that came after its deadline"
    );

    // Answers on time again: the key, still due, runs.
    proxy.set(Mode::Normal);
    runs.wait_started(1, Duration::from_secs(15)).await;
    runtime.shutdown().await;
}
