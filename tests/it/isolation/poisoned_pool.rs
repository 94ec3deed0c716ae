//! A connection left inside a transaction on the shared pool.

use std::time::Duration;

use leasehold::{
    Schedule,
    runtime::{Connections, Degraded},
    store::{Claim, LeaseStore},
};
use tokio::time::Instant;

use crate::support::{self, Runs, in_both_connection_modes, job, quick};

/// The only connection of the service's pool was left inside a transaction
/// (plain, then aborted): leasehold's claim still commits — another
/// connection sees it. A store over that pool closed the poisoned
/// connection, so no backend is left inside a transaction; a store on
/// connections of its own never touched it, so the service's transaction
/// is the only one left.
async fn a_claim_on_a_poisoned_connection_commits_on_a_clean_one(mode: Connections) {
    let db = support::db().await;
    let pool = db.pool_with(1).await;
    let store = support::store_in(mode, &pool).await;
    for (key, poison) in [("plain", false), ("aborted", true)] {
        if poison {
            support::poison_one_aborted(&pool).await;
        } else {
            support::poison_one(&pool).await;
        }
        let claim = store.claim(key, "a", support::LONG).await.expect("claim");
        assert!(matches!(claim, Claim::Acquired(_)), "{key}: {claim:?}");
        // Seen from another pool: committed, not inside someone's transaction.
        let other = LeaseStore::new(db.pool.clone());
        let row = other.get(key).await.unwrap().expect("the claim committed");
        assert!(row.is_held() && row.holder == "a", "{key}: {row:?}");
        if mode == Connections::SharedWithService {
            support::assert_no_backend_in_transaction(&db.pool, key).await;
        } else {
            let left = support::backends_in_transaction(&db.pool).await;
            assert_eq!(left.len(), 1, "{key}: only the service's own transaction: {left:?}");
        }
    }
}
in_both_connection_modes!(a_claim_on_a_poisoned_connection_commits_on_a_clean_one);

/// The deterministic form of the field failure: two replicas (pools of 3),
/// a job every second (lease 3 s, poll 200 ms), and service code that
/// leaves a connection of each replica's pool inside a transaction before
/// start and every 2 s. Every slot still runs exactly once, no two runs
/// overlap, and shutdown returns. On the service's pool, health names the
/// poisoned connections it closed; on connections of its own, the runtime
/// never meets one.
///
/// The failure this guards against: one run in 12 slots, and a shutdown
/// that hangs.
async fn two_replicas_run_once_per_slot_while_the_service_poisons_the_pool(mode: Connections) {
    let db = support::db().await;
    let runs = Runs::default();
    let settings = quick(Schedule::every(Duration::from_secs(1)), Duration::from_secs(3));
    let mut pools = Vec::new();
    let mut replicas = Vec::new();
    for r in 0..2 {
        let pool = db.pool_with(3).await;
        support::poison_one(&pool).await;
        let tick = job("tick", settings.clone(), runs.body(Duration::from_millis(50)));
        replicas.push(
            support::replica_in(
                mode,
                pool.clone(),
                &format!("r{r}"),
                Duration::from_millis(200),
                vec![tick],
            )
            .await,
        );
        pools.push(pool);
    }
    let start_unix = now_unix();
    let window = Instant::now();
    let mut saw_poison = false;
    while window.elapsed() < Duration::from_secs(13) {
        for pool in &pools {
            support::poison_one(pool).await;
        }
        for step in 0..10 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if step % 2 == 0 {
                saw_poison |= replicas.iter().any(|r| {
                    r.health()
                        .degraded
                        .iter()
                        .any(|d| matches!(d, Degraded::PoisonedConnections { .. }))
                });
            }
        }
    }
    let end_unix = now_unix();
    for r in &replicas {
        tokio::time::timeout(Duration::from_secs(10), r.shutdown())
            .await
            .expect("shutdown returns within 10 s");
    }
    let all = runs.all();
    // Whole slots strictly inside the window.
    let first_slot = start_unix.ceil() as i64 + 1;
    let last_slot = end_unix.floor() as i64 - 2;
    let mut per_slot = std::collections::BTreeMap::<i64, usize>::new();
    for r in all.iter().filter(|r| r.cancelled.is_none()) {
        *per_slot.entry(r.started_unix.floor() as i64).or_default() += 1;
    }
    let counts: Vec<usize> = (first_slot..=last_slot)
        .map(|s| per_slot.get(&s).copied().unwrap_or(0))
        .collect();
    println!(
        "measured: {} slots, runs per slot {counts:?}, {} runs in all",
        counts.len(),
        all.len()
    );
    assert!(counts.len() >= 10, "at least 10 slots: {counts:?}");
    assert!(counts.iter().all(|&c| c == 1), "every slot exactly once: {counts:?}");
    assert!(support::overlapping_pairs(&all).is_empty(), "runs overlap");
    if mode == Connections::SharedWithService {
        assert!(saw_poison, "health never named the poisoned connections");
    } else {
        assert!(!saw_poison, "the runtime's own connections were never poisoned");
    }
}
in_both_connection_modes!(two_replicas_run_once_per_slot_while_the_service_poisons_the_pool);

fn now_unix() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64()
}
