//! The service's own code exhausts its pool. On connections of
//! its own the runtime does not notice; sharing the service's pool, the
//! heartbeat starves and the replica backs off.

use std::time::Duration;

use leasehold::{
    CancelReason, FenceGuard, Schedule,
    runtime::{Connections, Degraded},
};
use sqlx::PgPool;

use crate::support::{self, Runs, eventually, in_both_connection_modes, job, quick};

/// The service holds every connection of its pool (2) for 5 s while a run
/// with a 2 s lease works for 4 s. On connections of its own, the runtime
/// keeps renewing: the run keeps its lease and finishes. Sharing the
/// service's pool, the heartbeat cannot get a connection and the run stops
/// at its deadline — the price of `Connections::SharedWithService`.
async fn a_service_holding_every_connection_of_its_pool_costs_no_run(mode: Connections) {
    let db = support::db().await;
    let runs = Runs::default();
    let pool = db.pool_with(2).await;
    let rt = support::replica_in(
        mode,
        pool.clone(),
        "r0",
        Duration::from_millis(100),
        vec![job(
            "k",
            quick(Schedule::Manual, Duration::from_secs(2)),
            runs.body(Duration::from_secs(4)),
        )],
    )
    .await;
    rt.trigger("k").await.unwrap();
    runs.wait_started(1, Duration::from_secs(5)).await;
    let held = (pool.acquire().await.unwrap(), pool.acquire().await.unwrap());
    let run = eventually(Duration::from_secs(10), || {
        runs.all()[0].ended.map(|_| runs.all().remove(0))
    })
    .await;
    println!("measured ({mode:?}): {run:?}");
    if mode == Connections::SharedWithService {
        assert_eq!(run.cancelled.map(|c| c.1), Some(CancelReason::Deadline), "{run:?}");
    } else {
        assert!(run.cancelled.is_none(), "the run kept its lease and finished: {run:?}");
        let info = support::until_free(&leasehold::store::LeaseStore::new(db.pool.clone()), "k").await;
        assert_eq!(info.fence, run.fence, "released by the run itself");
    }
    drop(held);
    rt.shutdown().await;
}
in_both_connection_modes!(a_service_holding_every_connection_of_its_pool_costs_no_run);

/// Sharing the service's pool: replica "hog" (pool of 2) runs a job that
/// takes both connections and never gives them back until dropped: its
/// heartbeat cannot renew, so each run stops at its deadline. After two such losses in a row it waits
/// before claiming again, reports degraded, and replica "good" takes the
/// key and runs it. The failure this guards against: "hog" re-claims at
/// once, forever, and stays healthy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_job_exhausts_its_pool_backs_off_and_hands_the_key_over() {
    let db = support::db().await;
    let runs = Runs::default();
    let settings = quick(Schedule::every(Duration::from_millis(500)), Duration::from_secs(2))
        .retry(Duration::from_secs(2), Duration::from_secs(4));
    let hog_pool = db.pool_with(2).await;
    let hog_body = {
        let (runs, pool) = (runs.clone(), hog_pool.clone());
        move |guard: FenceGuard| {
            let (runs, pool): (Runs, PgPool) = (runs.clone(), pool.clone());
            async move {
                runs.start(&guard);
                let _a = pool.acquire().await?;
                let _b = pool.acquire().await?;
                std::future::pending::<()>().await;
                Ok(())
            }
        }
    };
    let hog = support::replica_in(
        Connections::SharedWithService,
        hog_pool.clone(),
        "hog",
        Duration::from_millis(100),
        vec![job("hogged", settings.clone(), hog_body)],
    )
    .await;
    // Two losses in a row on "hog", then its health says why.
    eventually(Duration::from_secs(15), || {
        (runs.all().iter().filter(|r| r.holder == "hog").count() >= 2).then_some(())
    })
    .await;
    let degraded = eventually(Duration::from_secs(10), || {
        hog.health()
            .degraded
            .into_iter()
            .find(|d| matches!(d, Degraded::RunsLostAtDeadline { .. }))
    })
    .await;
    println!("measured: hog degraded: {degraded}");
    let good = support::replica(
        &db,
        "good",
        3,
        vec![job("hogged", settings, runs.body(Duration::from_millis(10)))],
    )
    .await;
    let good_run = eventually(Duration::from_secs(10), || {
        runs.all().into_iter().find(|r| r.holder == "good" && r.ended.is_some())
    })
    .await;
    let all = runs.all();
    let hog_fences: Vec<i64> = all.iter().filter(|r| r.holder == "hog").map(|r| r.fence).collect();
    println!(
        "measured: hog runs (fences) {hog_fences:?}; good ran fence {}",
        good_run.fence
    );
    hog.shutdown().await;
    good.shutdown().await;
}
