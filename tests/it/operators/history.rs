//! Run history: one row per run, written by the run's release, in a ring
//! per key that never grows past its length.

use std::time::Duration;

use leasehold::{JobSettings, Runtime, Schedule, runtime::RunOutcome, store::LeaseStore};

use crate::support::{self, Runs, job, quick};

async fn rows_of(pool: &sqlx::PgPool, key: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM leasehold_run WHERE key = $1")
        .bind(key)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// A key that fails and retries back to back for hundreds of runs keeps
/// exactly its ring's length of history rows: the latest runs, newest
/// first, each failure with its error message.
///
/// The 301st run succeeds, so a manual key stops there: the test shuts the
/// runtime down with no run in flight (a run cut by the shutdown would be
/// recorded as cancelled, and which run that is would be a race).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_key_keeps_only_its_ring_of_history() {
    const FAILURES: usize = 300;
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let runs = Runs::default();
    let counter = runs.clone();
    let failing = job(
        "flaky",
        JobSettings::new(Schedule::Manual)
            .lease(Duration::from_secs(5))
            .retry(Duration::from_millis(1), Duration::from_millis(1)),
        move |guard| {
            let runs = counter.clone();
            async move {
                if runs.start(&guard) < FAILURES {
                    Err(format!("upstream said no to fence {}", guard.fence()).into())
                } else {
                    Ok(())
                }
            }
        },
    );
    let rt = Runtime::builder(db.pool_with(2).await)
        .holder("r1")
        .history(20)
        .register(failing)
        .start()
        .await
        .unwrap();
    rt.trigger("flaky").await.unwrap();
    runs.wait_started(FAILURES + 1, Duration::from_secs(60)).await;
    // The successful run is recorded.
    support::eventually_async(Duration::from_secs(10), || {
        let store = store.clone();
        async move {
            let newest = store.records().history("flaky", 1).await.unwrap();
            newest
                .first()
                .is_some_and(|r| r.outcome == RunOutcome::Succeeded)
                .then_some(())
        }
    })
    .await;
    rt.shutdown().await;
    assert_eq!(
        runs.all().len(),
        FAILURES + 1,
        "a manual key that succeeded runs no more"
    );

    let history = store.records().history("flaky", 100).await.unwrap();
    assert_eq!(history.len(), 20, "the ring holds 20 rows");
    assert_eq!(rows_of(&db.pool, "flaky").await, 20);
    let newest = history[0].run_no;
    assert!(newest > FAILURES as i64, "newest run {newest}");
    let numbers: Vec<i64> = history.iter().map(|r| r.run_no).collect();
    assert_eq!(
        numbers,
        (newest - 19..=newest).rev().collect::<Vec<_>>(),
        "the latest 20, newest first"
    );
    let fences: Vec<i64> = history.iter().map(|r| r.fence).collect();
    let started: Vec<i64> = runs.all().iter().rev().take(20).map(|r| r.fence).collect();
    assert_eq!(fences, started, "the 20 runs that started last");
    assert_eq!(history[0].outcome, RunOutcome::Succeeded);
    let last_failure = &history[1];
    assert_eq!(last_failure.outcome, RunOutcome::Failed);
    assert_eq!(
        last_failure.error.as_deref(),
        Some(format!("upstream said no to fence {}", last_failure.fence).as_str())
    );
    assert_eq!(
        (last_failure.holder.as_str(), last_failure.job_name.as_deref()),
        ("r1", Some("flaky"))
    );
    assert!(last_failure.ended_at >= last_failure.started_at);
}

/// 10,000 runs of one key, recorded in the release statement's own SQL
/// (batches of 1,000 late releases): the ring holds the latest 100 and
/// never more; a late record of an older run never overwrites a newer one.
#[tokio::test]
async fn ten_thousand_runs_leave_one_ring_and_late_records_do_not_overwrite() {
    let (db, store) = support::store().await;
    for batch in 0..10 {
        store
            .record_runs_for_test("hot", (batch * 1000 + 1)..=(batch * 1000 + 1000), 100)
            .await
            .unwrap();
        assert_eq!(rows_of(&db.pool, "hot").await, (batch * 1000 + 1000).min(100));
    }
    let history = store.records().history("hot", 10_000).await.unwrap();
    let numbers: Vec<i64> = history.iter().map(|r| r.run_no).collect();
    assert_eq!(numbers, (9_901..=10_000).rev().collect::<Vec<_>>());

    // Run 9,950's place holds run 9,950; a late record of run 50 (same
    // place in the ring) changes nothing.
    store.record_runs_for_test("hot", 50..=50, 100).await.unwrap();
    let history = store.records().history("hot", 10_000).await.unwrap();
    assert!(
        history.iter().all(|r| r.run_no > 9_900),
        "an older run overwrote a newer one"
    );
    assert_eq!(history.len(), 100);
}

/// The runtime's history switch: `history(0)` records nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_zero_records_nothing() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let runs = Runs::default();
    let rt = Runtime::builder(db.pool_with(2).await)
        .holder("r1")
        .history(0)
        .register(job(
            "quiet",
            quick(Schedule::Manual, Duration::from_secs(5)),
            runs.body(Duration::ZERO),
        ))
        .start()
        .await
        .unwrap();
    rt.trigger("quiet").await.unwrap();
    runs.wait_started(1, Duration::from_secs(5)).await;
    rt.shutdown().await;
    assert!(store.records().history("quiet", 10).await.unwrap().is_empty());
    let err = Runtime::builder(db.pool.clone())
        .history(10_001)
        .start()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("history length 10001"), "{err}");
}

/// Forgetting a key deletes its history with its row: when the key is
/// registered again its run numbers start over, and its new runs are
/// recorded (an old ring would refuse them as older).
#[tokio::test]
async fn forgetting_a_key_forgets_its_history() {
    let (db, store) = support::store().await;
    let ttl = Duration::from_secs(5);
    let lease = store
        .claim_run("gone", "h1", ttl, leasehold::store::Due::Now)
        .await
        .unwrap()
        .acquired()
        .unwrap();
    assert!(store.release(&lease.key, "h1", lease.fence).await.unwrap());
    store.record_runs_for_test("gone", 1..=5, 100).await.unwrap();
    assert_eq!(rows_of(&db.pool, "gone").await, 5);
    assert_eq!(
        store.controls().forget("gone").await.unwrap(),
        leasehold::operator::Forgotten::Deleted
    );
    assert_eq!(rows_of(&db.pool, "gone").await, 0, "history deleted with the row");
    store.record_runs_for_test("gone", 1..=2, 100).await.unwrap();
    let numbers: Vec<i64> = store
        .records()
        .history("gone", 10)
        .await
        .unwrap()
        .iter()
        .map(|r| r.run_no)
        .collect();
    assert_eq!(numbers, vec![2, 1]);
}

/// A run that fails with a database error records it with each cause said
/// once: leasehold's `database error` wraps sqlx's error, which wraps the
/// server's message, and each `Display` already prints its source.
#[tokio::test]
async fn a_failed_runs_error_says_each_cause_once() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let pool = db.pool.clone();
    let failing = job(
        "ledger",
        quick(Schedule::Manual, Duration::from_secs(5)).retry(Duration::from_secs(60), Duration::from_secs(60)),
        move |_guard| {
            let pool = pool.clone();
            async move {
                // Three levels: leasehold::Error -> sqlx::Error -> the server's error.
                let query = sqlx::query("SELECT no_such_column FROM leasehold_lease")
                    .execute(&pool)
                    .await;
                query.map_err(leasehold::Error::from)?;
                Ok(())
            }
        },
    );
    let rt = Runtime::builder(db.pool_with(2).await)
        .holder("r1")
        .register(failing)
        .start()
        .await
        .unwrap();
    rt.trigger("ledger").await.unwrap();
    let failed = support::eventually_async(Duration::from_secs(10), || {
        let store = store.clone();
        async move {
            let newest = store.records().history("ledger", 1).await.unwrap();
            newest.into_iter().find(|r| r.outcome == RunOutcome::Failed)
        }
    })
    .await;
    rt.shutdown().await;

    let error = failed.error.unwrap_or_default();
    assert!(
        error.starts_with(r#"database error: error returned from database: column "no_such_column" does not exist"#),
        "{error}"
    );
    assert_eq!(error.matches("error returned from database").count(), 1, "{error}");
    assert_eq!(error.matches("does not exist").count(), 1, "{error}");
}

/// A place of the ring that another release inserted after this release's
/// snapshot (its key's first runs, released concurrently) is still replaced
/// only by a newer run: a late record of run 50 waits for the concurrent
/// insert of run 150 at the same place, then leaves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_run_never_overwrites_a_place_inserted_concurrently() {
    let (db, store) = support::store().await;
    let mut concurrent = db.pool.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO leasehold_run (key, slot, run_no, job_name, fence, holder, started_at, ended_at, outcome)
         VALUES ('first', 50, 150, 'test', 150, 'other', clock_timestamp(), clock_timestamp(), 'succeeded')",
    )
    .execute(&mut *concurrent)
    .await
    .unwrap();
    let late = tokio::spawn({
        let store = store.clone();
        async move { store.record_runs_for_test("first", 50..=50, 100).await }
    });
    // The late record found no row at place 50 in its snapshot and waits
    // for the uncommitted insert to decide its conflict.
    support::until_a_session_waits_for_a_lock(&db.pool).await;
    concurrent.commit().await.unwrap();
    late.await.unwrap().unwrap();

    let history = store.records().history("first", 10).await.unwrap();
    let numbers: Vec<i64> = history.iter().map(|r| r.run_no).collect();
    assert_eq!(numbers, vec![150], "an older run overwrote a newer one");
}
