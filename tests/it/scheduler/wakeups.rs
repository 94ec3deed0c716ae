//! Wake-ups: with `LISTEN`, a released or triggered key starts on another
//! replica at once, long before its lease or the poll would say; without
//! it, polling still hands the key over within a poll interval.

use std::time::Duration;

use leasehold::{Runtime, Schedule};
use tokio::time::Instant;

use crate::support::{self, Runs, job, quick};

/// Two replicas register one manual key (lease 30 s) and poll only every
/// 60 s. `listen` as given.
async fn pair(db: &support::TestDb, runs: &Runs, listen: bool, poll: Duration) -> (Runtime, Runtime) {
    let start = |holder: &'static str| {
        let key = job(
            "handover",
            quick(Schedule::Manual, Duration::from_secs(30)),
            runs.body(Duration::from_secs(600)),
        );
        async move {
            Runtime::builder(db.pool_with(2).await)
                .holder(holder)
                .poll_interval(poll)
                .listen(listen)
                .register(key)
                .start()
                .await
                .expect("runtime starts")
        }
    };
    (start("a").await, start("b").await)
}

/// With `LISTEN` (the default): a trigger on one replica runs the key; the
/// holder's graceful shutdown releases it, and the *other* replica starts
/// it within a few seconds — not at the lease's expiry (30 s) nor at its
/// next poll (60 s), which is what it would wait for without the
/// notification.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_key_starts_on_another_replica_by_notification() {
    let db = support::db().await;
    let runs = Runs::default();
    let (a, b) = pair(&db, &runs, true, Duration::from_secs(60)).await;
    support::eventually(Duration::from_secs(10), || {
        (a.health().listening && b.health().listening).then_some(())
    })
    .await;
    a.trigger("handover").await.unwrap();
    let first = runs.wait_started(1, Duration::from_secs(5)).await[0].clone();
    let (holder, other) = if first.holder == "a" { (&a, &b) } else { (&b, &a) };
    let released = Instant::now();
    let report = holder.shutdown().await;
    assert_eq!(report.leases_released, 1);
    let second = runs.wait_started(2, Duration::from_secs(20)).await[1].clone();
    let took = second.started - released;
    println!("measured: handover by notification in {took:?}");
    assert_eq!(second.holder, other.holder());
    assert!(second.fence > first.fence);
    assert!(
        took < Duration::from_secs(5),
        "handover took {took:?}: the notification did not wake the replica"
    );
    other.shutdown().await;
}

/// The notification of a release arrives while the other replica has a
/// claim in flight whose answer (read before the release committed) says
/// "held for 30 s": that replica still starts the key at once — the answer
/// does not park the key until a lease that is already released would
/// have expired. The claim is held in flight with a test hook; nothing
/// here waits on time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_during_a_claim_in_flight_still_starts_the_key() {
    let db = support::db().await;
    let runs = Runs::default();
    let (a, b) = pair(&db, &runs, true, Duration::from_secs(60)).await;
    support::eventually(Duration::from_secs(10), || {
        (a.health().listening && b.health().listening).then_some(())
    })
    .await;
    a.trigger("handover").await.unwrap();
    let first = runs.wait_started(1, Duration::from_secs(5)).await[0].clone();
    let (holder, other) = if first.holder == "a" { (&a, &b) } else { (&b, &a) };

    // The other replica claims while the key is held, and its answer
    // ("held for 30 s") is kept in flight; its trigger's own notification
    // is heard before the release.
    other.faults().hold_claim_answers(true);
    let heard = other.faults().notifications_heard();
    other.trigger("handover").await.unwrap();
    support::eventually(Duration::from_secs(10), || {
        (other.faults().claim_answers_held() >= 1 && other.faults().notifications_heard() > heard).then_some(())
    })
    .await;

    // The holder releases the key; the other replica hears of it while its
    // claim's answer is still out, then acts on that answer.
    let heard = other.faults().notifications_heard();
    let report = holder.shutdown().await;
    assert_eq!(report.leases_released, 1);
    support::eventually(Duration::from_secs(10), || {
        (other.faults().notifications_heard() > heard).then_some(())
    })
    .await;
    other.faults().hold_claim_answers(false);

    let second = runs.wait_started(2, Duration::from_secs(5)).await[1].clone();
    assert_eq!(second.holder, other.holder());
    assert!(second.fence > first.fence);
    other.shutdown().await;
}

/// The listeners' connections drop, and the holder releases the key while
/// no one listens: its notification is lost. Once the other replica
/// listens again it polls at once, and starts the key — not at its next
/// poll (60 s) nor when the released lease would have expired (30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_notified_while_the_listener_was_down_is_found_when_it_listens_again() {
    let db = support::db().await;
    let runs = Runs::default();
    let (a, b) = pair(&db, &runs, true, Duration::from_secs(60)).await;
    support::eventually(Duration::from_secs(10), || {
        (a.health().listening && b.health().listening).then_some(())
    })
    .await;
    a.trigger("handover").await.unwrap();
    let first = runs.wait_started(1, Duration::from_secs(5)).await[0].clone();
    let (holder, other) = if first.holder == "a" { (&a, &b) } else { (&b, &a) };

    // The other replica stays down until the release is out (its listener
    // waits before registering its session again).
    other.faults().freeze_liveness(true);
    // The listeners' sessions are the registered liveness sessions.
    let killed: i64 =
        sqlx::query_scalar("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM leasehold_replica")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(killed, 2, "both listeners' connections dropped");
    support::eventually(Duration::from_secs(10), || (!other.health().listening).then_some(())).await;
    let report = holder.shutdown().await;
    assert_eq!(report.leases_released, 1);
    let released = Instant::now();
    other.faults().freeze_liveness(false);

    let second = runs.wait_started(2, Duration::from_secs(20)).await[1].clone();
    let took = second.started - released;
    println!("measured: handover after the listener came back in {took:?}");
    assert_eq!(second.holder, other.holder());
    assert!(other.health().listening, "listening again");
    assert!(
        took < Duration::from_secs(10),
        "handover took {took:?}: what was notified while no one listened waited for the lease or the poll"
    );
    other.shutdown().await;
}

/// With `listen(false)`: no listener connection, `health().listening` stays
/// false, and the other replica still takes the released key over — at its
/// next poll (here 1 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_listening_a_released_key_starts_at_the_next_poll() {
    let db = support::db().await;
    let runs = Runs::default();
    let (a, b) = pair(&db, &runs, false, Duration::from_secs(1)).await;
    a.trigger("handover").await.unwrap();
    let first = runs.wait_started(1, Duration::from_secs(5)).await[0].clone();
    let (holder, other) = if first.holder == "a" { (&a, &b) } else { (&b, &a) };
    let report = holder.shutdown().await;
    assert_eq!(report.leases_released, 1);
    let second = runs.wait_started(2, Duration::from_secs(10)).await[1].clone();
    assert_eq!(second.holder, other.holder());
    assert!(!other.health().listening, "listening was turned off");
    let listeners: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(listeners, 0, "no connection listens");
    other.shutdown().await;
}

/// The listener never takes a connection from the service's pool: a
/// runtime on a pool of 1 leaves that connection free while it listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_uses_its_own_connection() {
    let db = support::db().await;
    let pool = db.pool_with(1).await;
    let rt = Runtime::builder(pool.clone())
        .register(job(
            "idle",
            quick(Schedule::Manual, Duration::from_secs(30)),
            |_| async { Ok(()) },
        ))
        .start()
        .await
        .unwrap();
    support::eventually(Duration::from_secs(10), || rt.health().listening.then_some(())).await;
    for _ in 0..3 {
        let one: i32 = tokio::time::timeout(Duration::from_secs(2), sqlx::query_scalar("SELECT 1").fetch_one(&pool))
            .await
            .expect("the pool's only connection is free")
            .unwrap();
        assert_eq!(one, 1);
    }
    rt.shutdown().await;
}
