//! What registering and idling cost: one statement to register every key,
//! and a few statements per poll interval however many keys.

use std::time::Duration;

use leasehold::Schedule;

use crate::support::{self, job, quick};

/// Statements run in this database since the last reset, all kinds.
async fn all_statements(pool: &sqlx::PgPool) -> i64 {
    support::statement_calls(pool, "").await
}

/// Two replicas register the same 1,000 keys (due hourly): each start
/// registers them in one statement; then, with nothing due, 3 s of idling
/// at a 500 ms poll sends no claim at all and a few dozen statements in all
/// — where one task per key would have sent thousands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_keys_register_in_one_statement_and_idle_for_almost_nothing() {
    let db = support::db().await;
    support::reset_statement_stats(&db.pool).await;
    let hourly = quick(Schedule::every(Duration::from_secs(3600)), Duration::from_secs(30));
    let tenants = || -> Vec<_> {
        (0..1000)
            .map(|k| job(&format!("tenant:{k}"), hourly.clone(), |_| async { Ok(()) }))
            .collect()
    };
    let poll = Duration::from_millis(500);
    let a = support::replica_on(db.pool.clone(), "a", poll, tenants()).await;
    let b = support::replica_on(db.pool.clone(), "b", poll, tenants()).await;
    let registrations = support::statement_calls(
        &db.pool,
        "INSERT INTO leasehold_lease (key, holder, fence, acquired_at, expires_at, next_due_at, slot_at, job_name)",
    )
    .await;
    assert_eq!(
        registrations, 2,
        "one registration statement per replica for 1,000 keys"
    );
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM leasehold_lease")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 1000);

    // Listeners settle: both listen, and the poll each asks for once it
    // listens has ended.
    support::eventually(Duration::from_secs(10), || {
        (a.health().listening && b.health().listening).then_some(())
    })
    .await;
    for rt in [&a, &b] {
        support::wait_polls(rt, 1).await;
    }
    support::reset_statement_stats(&db.pool).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = all_statements(&db.pool).await;
    let claims = support::statement_calls(&db.pool, "SKIP LOCKED\n            ), claimed AS").await;
    println!("measured: 2 replicas × 1,000 keys idle for 3 s at a 500 ms poll: {idle} statements, {claims} claims");
    assert_eq!(claims, 0, "nothing is due: no claim is sent");
    assert!(
        idle <= 40,
        "{idle} statements in 3 s of idling (expected about one poll per replica per interval)"
    );
    a.shutdown().await;
    b.shutdown().await;
}

/// An idle runtime — nothing due, nothing held, so no claim and no
/// heartbeat — still hears from the database at every poll (100 ms) and
/// stays healthy long past the health window (3 × the longer of heartbeat
/// and poll: 3 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_runtime_stays_healthy() {
    let db = support::db().await;
    let manual = job("idle", quick(Schedule::Manual, Duration::from_secs(3)), |_| async {
        Ok(())
    });
    let rt = support::replica(&db, "idle", 2, vec![manual]).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let health = rt.health();
    assert!(health.healthy, "{health:?}");
    assert!(
        health.last_database_contact.is_some_and(|d| d < Duration::from_secs(3)),
        "{health:?}"
    );
    rt.shutdown().await;
}

/// Another replica inserts one of the same new keys while this one registers
/// them (its transaction commits after this registration's snapshot, the
/// registration waiting on that key): its row keeps the other replica's
/// schedule, every key has one row, and this replica still learns every
/// key's due time — none of the keys, due in an hour or in a day, is
/// proposed for a claim (a key whose due time it did not learn would be).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_another_replica_inserts_during_registration_keeps_its_schedule_and_nothing_is_claimed() {
    let db = support::db().await;
    let hourly = quick(Schedule::every(Duration::from_secs(3600)), Duration::from_secs(30));
    let tenants: Vec<_> = (0..100)
        .map(|k| job(&format!("tenant:{k}"), hourly.clone(), |_| async { Ok(()) }))
        .collect();
    let mut other = db.pool.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO leasehold_lease (key, holder, fence, acquired_at, expires_at, next_due_at, slot_at)
         VALUES ('tenant:7', 'other', nextval('leasehold_fence_seq'), clock_timestamp(),
                 clock_timestamp() + interval '1 microsecond', now() + interval '1 day', now() + interval '1 day')",
    )
    .execute(&mut *other)
    .await
    .unwrap();
    support::reset_statement_stats(&db.pool).await;
    let poll = Duration::from_millis(100);
    let starting = tokio::spawn(support::replica_on(db.pool.clone(), "a", poll, tenants));
    support::until_a_session_waits_for_a_lock(&db.pool).await;
    other.commit().await.unwrap();
    let a = starting.await.unwrap();

    let (rows, theirs): (i64, bool) = sqlx::query_as(
        "SELECT count(*), bool_or(key = 'tenant:7' AND holder = 'other' AND next_due_at > now() + interval '23 hours')
           FROM leasehold_lease",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows, 100, "one row per key");
    assert!(theirs, "the other replica's row keeps its holder and schedule");
    // Three polls later, still no claim: every key was filed at its due time.
    support::eventually_async(Duration::from_secs(10), || async {
        let polls = support::statement_calls(&db.pool, "leasehold_timeline_id() AS timeline").await;
        (polls >= 3).then_some(())
    })
    .await;
    let claims = support::statement_calls(&db.pool, "SKIP LOCKED\n            ), claimed AS").await;
    assert_eq!(claims, 0, "no key is due: no claim is sent");
    a.shutdown().await;
}
