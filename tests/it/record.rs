//! The record of what ran: every claimed run has a history row, however it
//! ended — with whatever text its job wrote, and when its replica crashed,
//! froze past its lease or could not write its release.

use std::sync::Arc;
use std::time::Duration;

use leasehold::{CancelReason, NewKey, Runtime, Schedule, runtime::RunOutcome, store::LeaseStore};
use sqlx::PgPool;

use crate::support::{self, Gate, LONG, eventually_async, job, quick};

/// The newest `n` history rows of `key`, once there are `n`.
async fn history_of(store: &LeaseStore, key: &str, n: usize) -> Vec<leasehold::store::RunRecord> {
    eventually_async(Duration::from_secs(20), || {
        let store = store.clone();
        let key = key.to_owned();
        async move {
            let rows = store.records().history(&key, 100).await.expect("history");
            (rows.len() >= n).then_some(rows)
        }
    })
    .await
}

/// Leases of keys starting with `prefix` still held or still marked as a
/// run in progress.
async fn unreleased(pool: &PgPool, prefix: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM leasehold_lease
          WHERE starts_with(key, $1) AND (expires_at > clock_timestamp() OR run_open)",
    )
    .bind(prefix)
    .fetch_one(pool)
    .await
    .expect("count")
}

/// Eight runs end at the same instant, so their releases share statements:
/// four fail with an error holding NUL bytes (one of them a megabyte of
/// NULs and bidi controls), four succeed. Every run has its history row,
/// every lease is released, and the NULs are shown as `␀`, not stored. A
/// NUL reached the release statement before, which PostgreSQL refused
/// whole: no row and no release for any run of that batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_or_a_megabyte_in_a_job_error_fails_no_release() {
    const KEYS: usize = 8;
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let together = Arc::new(tokio::sync::Barrier::new(KEYS));
    let jobs = (0..KEYS)
        .map(|i| {
            let together = together.clone();
            let settings = quick(Schedule::Manual, LONG).retry(Duration::from_secs(60), Duration::from_secs(60));
            job(&format!("nul:{i}"), settings, move |_guard| {
                let together = together.clone();
                async move {
                    together.wait().await;
                    match i {
                        2 => Err("\0\u{202E}x".repeat(1 << 18).into()),
                        i if i % 2 == 0 => Err(format!("bad\0byte {i}").into()),
                        _ => Ok(()),
                    }
                }
            })
        })
        .collect();
    let rt = support::replica(&db, "r1", 4, jobs).await;
    for i in 0..KEYS {
        rt.trigger(&format!("nul:{i}")).await.expect("trigger");
    }
    for i in 0..KEYS {
        let key = format!("nul:{i}");
        let rows = history_of(&store, &key, 1).await;
        let run = &rows[0];
        if i % 2 == 1 {
            assert_eq!(run.outcome, RunOutcome::Succeeded, "{key}");
            continue;
        }
        assert_eq!(run.outcome, RunOutcome::Failed, "{key}");
        let error = run.error.as_deref().expect("the failure's error");
        assert!(!error.contains('\0') && error.contains('\u{2400}'), "{key}: {error:?}");
        if i == 2 {
            assert!(
                error.len() <= 2000 && error.ends_with('…'),
                "{key}: {} bytes",
                error.len()
            );
        } else {
            assert_eq!(error, format!("bad\u{2400}byte {i}"));
        }
    }
    assert_eq!(unreleased(&db.pool, "nul:").await, 0, "every run's lease is released");
    rt.shutdown().await;
}

/// Arguments whose JSON holds a NUL are refused before any SQL, by an
/// error that names the key and the field (PostgreSQL's own refusal names
/// neither); a NUL written as text (`\u0000`, escaped) is just text.
#[test]
fn arguments_with_a_nul_are_refused_naming_the_key_and_the_field() {
    let every = Schedule::every(Duration::from_secs(60));
    let args = serde_json::json!({"tenant": {"names": ["ok", "a\u{0}b"]}});
    let error = NewKey::new("report", "report:acme", &args, every.clone())
        .expect_err("a NUL in the arguments")
        .to_string();
    assert!(
        error.contains("report:acme") && error.contains(r#"names\"[1]"#) && error.contains("NUL"),
        "{error}"
    );
    let named = serde_json::json!({"a\u{0}": 1});
    let error = NewKey::new("report", "report:acme", &named, every.clone()).expect_err("a NUL in a field name");
    assert!(error.to_string().contains("NUL"), "{error}");
    let text = serde_json::json!({"note": "\\u0000"});
    assert!(NewKey::new("report", "report:acme", &text, every).is_ok());
}

/// A replica cut off from the database mid-run stops its run at its local
/// deadline and cannot write its release. The replica that takes the key
/// over records that run — its holder, fence and start, ended when its
/// lease expired — as `lost` (reason `expired`), in the claim that takes
/// it, before its own run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_release_never_came_is_recorded_as_lost_by_the_replica_that_takes_over() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let settings = quick(Schedule::Manual, Duration::from_secs(2));
    let gate = Gate::default();
    let a = support::replica(&db, "a", 2, vec![job("billing", settings.clone(), gate.body())]).await;
    a.trigger("billing").await.expect("trigger");
    let first = gate.runs().wait_started(1, Duration::from_secs(10)).await[0].clone();
    a.faults().partition(true);

    let b = support::replica(&db, "b", 2, vec![job("billing", settings, gate.body())]).await;
    b.trigger("billing").await.expect("trigger");
    let runs = gate.runs().wait_started(2, Duration::from_secs(20)).await;
    assert_eq!(runs[1].holder, "b");
    let rows = history_of(&store, "billing", 1).await;
    let lost = &rows[0];
    assert_eq!(
        (lost.outcome, lost.holder.as_str(), lost.fence, lost.reason.as_deref()),
        (RunOutcome::Lost, "a", first.fence, Some("expired")),
        "{lost:?}"
    );
    assert_eq!(lost.run_no, 1);
    let taken = store.get("billing").await.expect("get").expect("row");
    assert!(
        lost.ended_at <= taken.acquired_at && lost.started_at < lost.ended_at,
        "the lost tenure ends at its expiry, before the next one: {lost:?} {taken:?}"
    );
    gate.finish_one();
    let rows = history_of(&store, "billing", 2).await;
    assert_eq!(
        (rows[0].outcome, rows[0].holder.as_str(), rows[1].outcome),
        (RunOutcome::Succeeded, "b", RunOutcome::Lost),
        "{rows:?}"
    );
    b.shutdown().await;
    a.faults().partition(false);
    a.shutdown().await;
    assert_eq!(
        store.records().history("billing", 100).await.expect("history")[1].outcome,
        RunOutcome::Lost,
        "the cut-off replica's late report does not rewrite the record"
    );
}

/// A run released as usual, and a tenure that was never a run (a plain
/// `claim` and `release` of the key), leave no `lost` row when the key is
/// claimed next: only a run whose release never came is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_runs_and_plain_tenures_are_never_recorded_as_lost() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let rt = support::replica(
        &db,
        "r1",
        2,
        vec![job("plain", quick(Schedule::Manual, LONG), |_| async { Ok(()) })],
    )
    .await;
    let plain = store
        .claim("plain", "ops", LONG)
        .await
        .expect("claim")
        .acquired()
        .expect("free");
    assert!(store.release("plain", "ops", plain.fence).await.expect("release"));
    for n in 1..=2 {
        rt.trigger("plain").await.expect("trigger");
        history_of(&store, "plain", n).await;
    }
    rt.shutdown().await;
    let outcomes: Vec<RunOutcome> = store
        .records()
        .history("plain", 100)
        .await
        .expect("history")
        .iter()
        .map(|r| r.outcome)
        .collect();
    assert_eq!(outcomes, [RunOutcome::Succeeded, RunOutcome::Succeeded]);
}

/// A run recorded by a release that left the run marked open — as a
/// replica of schema version 8, which does not know the mark, leaves it —
/// keeps its own row: the next claim's lost run would be the same run, and
/// a ring place only takes a newer one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_run_is_never_overwritten_as_lost() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let rt = support::replica(
        &db,
        "r1",
        2,
        vec![job("older", quick(Schedule::Manual, LONG), |_| async { Ok(()) })],
    )
    .await;
    rt.trigger("older").await.expect("trigger");
    history_of(&store, "older", 1).await;
    sqlx::query("UPDATE leasehold_lease SET run_open = true WHERE key = 'older'")
        .execute(&db.pool)
        .await
        .expect("mark");
    rt.trigger("older").await.expect("trigger");
    let rows = history_of(&store, "older", 2).await;
    rt.shutdown().await;
    assert_eq!(
        (rows[0].outcome, rows[1].outcome, rows[1].run_no),
        (RunOutcome::Succeeded, RunOutcome::Succeeded, 1),
        "{rows:?}"
    );
}

/// A run stopped because its key was removed says so: reason `removed` in
/// its guard and in its history row, not `shutdown`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stopped_by_its_keys_removal_is_recorded_as_removed() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let gate = Gate::default();
    let rt: Runtime = support::replica(
        &db,
        "r1",
        2,
        vec![job("export", quick(Schedule::Manual, LONG), gate.body())],
    )
    .await;
    rt.trigger("export").await.expect("trigger");
    gate.runs().wait_started(1, Duration::from_secs(10)).await;
    assert!(rt.remove("export").await.expect("remove"));
    let stopped = gate.runs().all()[0].cancelled.map(|(_, reason)| reason);
    assert_eq!(stopped, Some(CancelReason::Removed));
    let rows = history_of(&store, "export", 1).await;
    rt.shutdown().await;
    assert_eq!(
        (rows[0].outcome, rows[0].reason.as_deref()),
        (RunOutcome::Cancelled, Some("removed"))
    );
}
