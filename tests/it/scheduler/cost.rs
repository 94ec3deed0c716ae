//! What registering and idling cost: one statement to register every key,
//! and a few statements per poll interval however many keys.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{JobSettings, Schedule};

use crate::support::{self, ScriptedJob, job, quick};

/// The text only the registration statement with the conflict check has.
const CONFLICT_CHECKED: &str = "ON CONFLICT (key) DO NOTHING\n                RETURNING key, next_due_at";

/// A job due every hour, on a 30 s lease.
fn hourly() -> JobSettings {
    quick(Schedule::every(Duration::from_secs(3600)), Duration::from_secs(30))
}

/// Keys `tenant:0` … `tenant:{n-1}`, due hourly, whose runs do nothing.
fn hourly_tenants(n: usize) -> Vec<ScriptedJob> {
    (0..n)
        .map(|k| job(&format!("tenant:{k}"), hourly(), |_| async { Ok(()) }))
        .collect()
}

/// Text only the registration statements have.
const REGISTRATION: &str =
    "INSERT INTO leasehold_lease (key, holder, fence, acquired_at, expires_at, next_due_at, slot_at, job_name)";

/// Text only the scheduler's batch claim has (both its texts, with and
/// without the fleet-wide limits' steps), marker comments aside: clause
/// removal's rewriter strips those.
const CLAIM_DUE: &str = "AS t(key, ttl, job, run_timeout, head_start)";

/// Three polls later, still no claim sent: every key was filed at its due
/// time (a key whose due time the replica did not learn would be proposed).
async fn no_claim_after_three_polls(pool: &sqlx::PgPool) {
    support::eventually_async(Duration::from_secs(10), || async {
        let polls = support::statement_calls(pool, "leasehold_timeline_id() AS timeline").await;
        (polls >= 3).then_some(())
    })
    .await;
    let claims = support::statement_calls(pool, CLAIM_DUE).await;
    assert_eq!(claims, 0, "no key is due: no claim is sent");
}

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
    let poll = Duration::from_millis(500);
    let a = support::replica_on(db.pool.clone(), "a", poll, hourly_tenants(1000)).await;
    let b = support::replica_on(db.pool.clone(), "b", poll, hourly_tenants(1000)).await;
    let registrations = support::statement_calls(&db.pool, REGISTRATION).await;
    assert_eq!(
        registrations, 2,
        "one registration statement per replica for 1,000 keys"
    );
    // Nobody else inserts these keys meanwhile: neither start pays the
    // conflict check, the second (every row there) no more than the first.
    let checked = support::statement_calls(&db.pool, CONFLICT_CHECKED).await;
    assert_eq!(checked, 0, "no registration statement needed the conflict check");
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
    let claims = support::statement_calls(&db.pool, CLAIM_DUE).await;
    println!("measured: 2 replicas × 1,000 keys idle for 3 s at a 500 ms poll: {idle} statements, {claims} claims");
    assert_eq!(claims, 0, "nothing is due: no claim is sent");
    assert!(
        idle <= 40,
        "{idle} statements in 3 s of idling (expected about one poll per replica per interval)"
    );
    a.shutdown().await;
    b.shutdown().await;
}

/// In a database whose keys sort by a linguistic collation (here the
/// column takes ICU's `en-US`, as every text column of a database created
/// with `LOCALE_PROVIDER icu` does), where `Tenant:1` sorts after
/// `tenant:1` but bytes put it first: the second replica's start still
/// finds every row there in its one statement, and needs no conflict
/// check — registration's key range is compared byte-wise, the order the
/// client sent the keys in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_in_a_linguistically_collated_database_register_in_one_statement_each() {
    let db = support::db().await;
    sqlx::query(r#"ALTER TABLE leasehold_lease ALTER COLUMN key TYPE text COLLATE "en-US-x-icu""#)
        .execute(&db.pool)
        .await
        .expect("the ICU collation en-US (PostgreSQL built with ICU, as Debian's is)");
    let mixed_case = || -> Vec<ScriptedJob> {
        (0..500)
            .flat_map(|k| [format!("tenant:{k}"), format!("Tenant:{k}")])
            .map(|key| job(&key, hourly(), |_| async { Ok(()) }))
            .collect()
    };
    support::reset_statement_stats(&db.pool).await;
    let poll = Duration::from_secs(60);
    let a = support::replica_on(db.pool.clone(), "a", poll, mixed_case()).await;
    let b = support::replica_on(db.pool.clone(), "b", poll, mixed_case()).await;
    let registrations = support::statement_calls(&db.pool, REGISTRATION).await;
    let checked = support::statement_calls(&db.pool, CONFLICT_CHECKED).await;
    assert_eq!(
        (registrations, checked),
        (2, 0),
        "one registration statement per replica and no conflict check: the second found every row"
    );
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM leasehold_lease")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 1000);
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
    let tenants = hourly_tenants(100);
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
    no_claim_after_three_polls(&db.pool).await;
    a.shutdown().await;
}

/// The transaction id of `tx`, as `pg_locks` shows it.
async fn xid(tx: &mut sqlx::PgConnection) -> String {
    sqlx::query_scalar("SELECT pg_current_xact_id()::text")
        .fetch_one(tx)
        .await
        .unwrap()
}

/// Waits until some session waits for transaction `xid` to end.
async fn until_a_session_waits_for(pool: &sqlx::PgPool, xid: &str) {
    support::eventually_async(Duration::from_secs(10), || async {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'transactionid' AND transactionid::text = $1",
        )
        .bind(xid)
        .fetch_one(pool)
        .await
        .unwrap();
        (waiting > 0).then_some(())
    })
    .await;
}

/// Another replica's row for a new key, inserted in `tx` (not committed).
async fn insert_elsewhere(tx: &mut sqlx::PgConnection, key: &str) {
    sqlx::query(
        "INSERT INTO leasehold_lease (key, holder, fence, acquired_at, expires_at, next_due_at, slot_at)
         VALUES ($1, 'other', nextval('leasehold_fence_seq'), clock_timestamp(),
                 clock_timestamp() + interval '1 microsecond', now() + interval '1 day', now() + interval '1 day')",
    )
    .bind(key)
    .execute(tx)
    .await
    .unwrap();
}

/// Other replicas insert two of the same new keys while this one registers
/// them, one during each kind of registration statement: the first
/// statement (no conflict check) meets `tenant:1` committed after its
/// snapshot and fails, having inserted nothing; the second (with the check)
/// finds `tenant:1` there and meets `tenant:7`, committed after its own
/// snapshot, which it skips. Both rows keep the other replicas' holder and
/// schedule, every key has one row, and this replica still learns every
/// key's due time: none of the keys, due in an hour or in a day, is
/// proposed for a claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_other_replicas_insert_during_both_registration_statements_keep_their_schedule() {
    let db = support::db().await;
    let tenants = hourly_tenants(100);
    // Keys go in byte order: tenant:1 (met first) before tenant:7.
    let mut first = db.pool.begin().await.unwrap();
    insert_elsewhere(&mut first, "tenant:1").await;
    let first_xid = xid(&mut first).await;
    let mut second = db.pool.begin().await.unwrap();
    insert_elsewhere(&mut second, "tenant:7").await;
    let second_xid = xid(&mut second).await;
    support::reset_statement_stats(&db.pool).await;
    let poll = Duration::from_millis(100);
    let starting = tokio::spawn(support::replica_on(db.pool.clone(), "a", poll, tenants));
    until_a_session_waits_for(&db.pool, &first_xid).await;
    first.commit().await.unwrap();
    // The first statement failed on tenant:1; the second waits on tenant:7.
    until_a_session_waits_for(&db.pool, &second_xid).await;
    second.commit().await.unwrap();
    let a = starting.await.unwrap();

    let others: Vec<(String, bool)> = sqlx::query_as(
        "SELECT key, next_due_at > now() + interval '23 hours' FROM leasehold_lease
          WHERE holder = 'other' ORDER BY key",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        others,
        vec![("tenant:1".to_owned(), true), ("tenant:7".to_owned(), true)],
        "both rows other replicas inserted keep their holder and schedule"
    );
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM leasehold_lease")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 100, "one row per key");
    let checked = support::statement_calls(&db.pool, CONFLICT_CHECKED).await;
    assert_eq!(
        checked, 2,
        "the conflict-checked statement ran, and ran again to learn the row it skipped"
    );
    no_claim_after_three_polls(&db.pool).await;
    a.shutdown().await;
}

/// Fifty thousand keys register in two chunks sent at once, one per owned
/// connection, and every key's answer reaches its own key: a replica
/// starting where the rows are already there learns from them that two
/// keys — one in each chunk — are an hour overdue, and runs exactly those
/// at once. Only the registration's answer can tell it: the poll interval
/// is a minute, and a poll looks for keys that fell due since shortly
/// before the start. (Were one chunk's rows filed under the other chunk's
/// keys, an overdue key would wait for its next hourly slot.) That answer
/// carries only those two rows besides each chunk's summary: the other
/// rows are due at the slot the replica sent, so nothing about them needs
/// to travel back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_thousand_keys_register_in_two_chunks_and_each_keys_row_reaches_its_key() {
    const KEYS: usize = 50_000;
    let db = support::db().await;
    support::reset_statement_stats(&db.pool).await;
    let ran: Arc<Mutex<Vec<String>>> = Default::default();
    let tenants = || -> Vec<_> {
        (0..KEYS)
            .map(|k| {
                let ran = ran.clone();
                job(&format!("tenant:{k:05}"), hourly(), move |guard| {
                    let ran = ran.clone();
                    async move {
                        ran.lock().unwrap().push(guard.key().to_owned());
                        Ok(())
                    }
                })
            })
            .collect()
    };
    let poll = Duration::from_secs(60);
    let a = support::replica_on(db.pool.clone(), "a", poll, tenants()).await;
    let registrations = support::statement_calls(&db.pool, REGISTRATION).await;
    assert_eq!(registrations, 2, "one statement per chunk");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM leasehold_lease WHERE next_due_at IS NOT NULL")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, KEYS as i64, "every key of both chunks has its row and schedule");
    a.shutdown().await;

    // One overdue key in each chunk (keys are sent sorted, halves in order).
    let overdue = ["tenant:00007", "tenant:49993"];
    sqlx::query("UPDATE leasehold_lease SET next_due_at = clock_timestamp() - interval '1 hour' WHERE key = ANY($1)")
        .bind(&overdue[..])
        .execute(&db.pool)
        .await
        .unwrap();
    support::reset_statement_stats(&db.pool).await;
    let b = support::replica_on(db.pool.clone(), "b", poll, tenants()).await;
    assert_eq!(
        support::statement_calls(&db.pool, CONFLICT_CHECKED).await,
        0,
        "the rows were there: no conflict to check"
    );
    let answer = support::statement_totals(&db.pool, &format!("%{REGISTRATION}%")).await;
    assert_eq!(
        (answer.calls, answer.rows),
        (2, 4),
        "two statements answering a summary each and the two overdue rows"
    );
    support::eventually(Duration::from_secs(20), || {
        (ran.lock().unwrap().len() >= 2).then_some(())
    })
    .await;
    let mut keys = ran.lock().unwrap().clone();
    keys.sort();
    assert_eq!(keys, overdue, "exactly the overdue keys ran, each once");
    b.shutdown().await;
    // A key whose row did not reach it would have been proposed at once.
    let claims = support::statement_calls(&db.pool, CLAIM_DUE).await;
    assert!(claims <= 2, "only the overdue keys were proposed: {claims} claims");
}
