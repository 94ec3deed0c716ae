//! Arguments are data: an update reaches the next run wherever it is
//! claimed, a run keeps what it started with, arguments that no longer
//! deserialize are reported and never run, and a size limit holds.

use std::time::Duration;

use leasehold::{
    Error, NewKey, Schedule,
    store::{LeaseStore, MAX_ARGS_BYTES},
};

use super::{TenantKind, replica, runs_of, tenant};
use crate::support;

/// A key runs with plan "basic" (version 1); it is updated to "pro" while a
/// run is in progress: that run keeps "basic" and version 1, the next run
/// (on whichever replica) has "pro" and version 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_changed_between_two_runs() {
    let db = support::db().await;
    let kind = TenantKind::working(Duration::from_millis(800));
    let store = LeaseStore::new(db.pool.clone());
    store
        .keys()
        .add(&[tenant("tenant:a", "basic", "manual")])
        .await
        .unwrap();
    let a = replica(&db, "a", &kind, Duration::from_millis(200), true).await;
    let b = replica(&db, "b", &kind, Duration::from_millis(200), true).await;
    support::eventually(Duration::from_secs(5), || {
        (a.health().registered == 1 && b.health().registered == 1).then_some(())
    })
    .await;
    store.controls().trigger("tenant:a").await.unwrap();
    support::eventually(Duration::from_secs(5), || {
        (!runs_of(&kind.log, "tenant:a").is_empty()).then_some(())
    })
    .await;

    let version = store.keys().update(&tenant("tenant:a", "pro", "manual")).await.unwrap();
    assert_eq!(version, Some(2));
    // The run in progress is not disturbed.
    let first = &runs_of(&kind.log, "tenant:a")[0];
    assert_eq!(
        (first.plan.as_str(), first.version, first.cancelled),
        ("basic", Some(1), None)
    );

    support::until_free(&store, "tenant:a").await;
    store.controls().trigger("tenant:a").await.unwrap();
    support::eventually(Duration::from_secs(5), || {
        (runs_of(&kind.log, "tenant:a").len() >= 2).then_some(())
    })
    .await;
    let second = &runs_of(&kind.log, "tenant:a")[1];
    assert_eq!((second.plan.as_str(), second.version), ("pro", Some(2)));
    a.shutdown().await;
    b.shutdown().await;
}

/// A key whose stored arguments are not the kind's `Args` (a field of the
/// wrong type) is never run: it is logged at ERROR once, counted, and its
/// problem written on its row for `leasehold status`; the runtime goes on
/// running the good key. An update with good arguments makes it run.
// Current-thread: the log capture sees this thread's events.
#[tokio::test]
async fn an_undeserializable_key_is_reported_and_never_run() {
    let (logs, _guard) = support::LogCounts::capture("leasehold=error");
    let db = support::db().await;
    let kind = TenantKind::working(Duration::from_millis(10));
    let store = LeaseStore::new(db.pool.clone());
    let bad = NewKey::new(
        "tenant",
        "tenant:bad",
        &serde_json::json!({ "plan": 42 }),
        Schedule::every(Duration::from_secs(1)),
    )
    .unwrap();
    store
        .keys()
        .add(&[bad, tenant("tenant:good", "pro", "every 1s")])
        .await
        .unwrap();
    let a = replica(&db, "a", &kind, Duration::from_millis(100), true).await;
    support::eventually(Duration::from_secs(5), || {
        (runs_of(&kind.log, "tenant:good").len() >= 3).then_some(())
    })
    .await;

    assert!(runs_of(&kind.log, "tenant:bad").is_empty(), "never run");
    assert_eq!(a.health().registered, 1, "only the good key is registered");
    let row = store.keys().get("tenant:bad").await.unwrap().unwrap();
    let problem = row.args_error.expect("reported on its row");
    assert!(
        problem.contains("do not deserialize") && problem.contains("expected a string"),
        "{problem}"
    );
    let errors = logs.messages(tracing::Level::ERROR);
    assert_eq!(
        logs.at(tracing::Level::ERROR),
        1,
        "logged once, not at every poll: {errors:?}"
    );
    let kinds = store.keys().kinds().await.unwrap();
    assert_eq!(
        (kinds[0].kind.as_str(), kinds[0].keys, kinds[0].bad_args, kinds[0].live),
        ("tenant", 2, 1, true)
    );

    assert_eq!(
        store
            .keys()
            .update(&tenant("tenant:bad", "basic", "every 1s"))
            .await
            .unwrap(),
        Some(2)
    );
    support::eventually(Duration::from_secs(5), || {
        (!runs_of(&kind.log, "tenant:bad").is_empty()).then_some(())
    })
    .await;
    assert_eq!(runs_of(&kind.log, "tenant:bad")[0].version, Some(2));
    assert_eq!(store.keys().get("tenant:bad").await.unwrap().unwrap().args_error, None);
    a.shutdown().await;
}

/// A stored key whose name the checks refuse (a zero-width character,
/// written past them, as a row stored before names were checked may be)
/// is checked once, where it enters the runtime — its kind's sync —
/// reported on its row and never registered; the batch statements, which
/// trust the registry's keys, never see it, and the good key runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_key_with_a_hidden_character_is_reported_and_the_others_run() {
    let db = support::db().await;
    let kind = TenantKind::working(Duration::from_millis(10));
    let store = LeaseStore::new(db.pool.clone());
    store
        .keys()
        .add(&[
            tenant("tenant:good", "pro", "every 1s"),
            tenant("tenant:bad", "pro", "every 1s"),
        ])
        .await
        .unwrap();
    // Past the checks, as an old row or a hand-written one.
    sqlx::query("UPDATE leasehold_key SET key = 'tenant:b\u{200b}ad' WHERE key = 'tenant:bad'")
        .execute(&db.pool)
        .await
        .unwrap();
    let a = replica(&db, "a", &kind, Duration::from_millis(100), true).await;
    support::eventually(Duration::from_secs(5), || {
        (runs_of(&kind.log, "tenant:good").len() >= 3).then_some(())
    })
    .await;
    assert_eq!(a.health().registered, 1, "only the good key is registered");
    assert!(a.health().healthy, "the claims never failed: {:?}", a.health().degraded);
    let bad = store
        .keys()
        .get("tenant:b\u{200b}ad")
        .await
        .unwrap()
        .expect("the row is there");
    let problem = bad.args_error.expect("reported on its row");
    assert!(
        problem.contains("lease key") && problem.contains("remove it and add it again"),
        "{problem}"
    );
    a.shutdown().await;
}

/// Arguments over the size limit are refused with a message naming the
/// size, the key and the fix; a key repeated in one call too.
#[tokio::test]
async fn oversized_arguments_and_repeated_keys_are_refused() {
    let huge = "x".repeat(MAX_ARGS_BYTES);
    let err = NewKey::new("tenant", "tenant:huge", &huge, Schedule::Manual).unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("tenant:huge") && msg.contains(&format!("under {MAX_ARGS_BYTES} bytes")),
        "{msg}"
    );

    let (_db, store) = support::store().await;
    let twice = [tenant("tenant:x", "a", "manual"), tenant("tenant:x", "b", "manual")];
    let msg = store.keys().add(&twice).await.unwrap_err().to_string();
    assert!(msg.contains("tenant:x") && msg.contains("twice"), "{msg}");
}
