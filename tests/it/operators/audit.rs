//! Operators' actions are recorded with who took them: the key's history
//! lists its own actions and its job's, newest first, each with its
//! outcome, and a revoke with the fence it handed out.

use leasehold::{
    Error, NewKey, Schedule,
    operator::{Forgotten, Operator, OperatorAction, Revoke, Revoked, Target},
};

use crate::support::{self, LONG};

#[tokio::test]
async fn each_action_is_recorded_with_its_actor_outcome_and_fence() {
    let (_db, store) = support::store().await;
    store.claim("billing:eu", "replica-1", LONG).await.expect("claim");
    store.claim("billing:us", "replica-1", LONG).await.expect("claim");
    let alice = Operator::new(store.clone(), "alice@laptop").expect("operator");
    let bob = Operator::new(store.clone(), "bob (console)").expect("operator");

    alice.pause(&Target::key("billing:eu"), true).await.expect("pause");
    bob.trigger("billing:eu").await.expect("trigger");
    bob.trigger("billing:us").await.expect("another key");
    alice.resume(&Target::key("billing:eu")).await.expect("resume");
    let Revoked::Ended { fence, .. } = bob.revoke("billing:eu", Revoke::Force, &[]).await.expect("revoke") else {
        panic!("a held lease is ended by a forced revoke");
    };
    let expected = format!(
        "ended the tenure of replica-1 (fence 1, held: its run is cancelled at its next heartbeat); new fence {fence}"
    );
    bob.trigger("nowhere")
        .await
        .expect("a missing key is an answer, not an error");

    let actions = store.records().actions("billing:eu", 10).await.expect("actions");
    let seen: Vec<(&str, &str, Option<&str>, Option<i64>)> = actions
        .iter()
        .map(|a| (a.action.as_str(), a.actor.as_str(), a.outcome.as_deref(), a.fence))
        .collect();
    assert_eq!(
        seen,
        [
            ("force-revoke", "bob (console)", Some(expected.as_str()), Some(fence)),
            // Still held by replica-1: its release, not the resume, decides when it is next due.
            ("resume", "alice@laptop", Some("resumed: 0 overdue keys woken"), None),
            (
                "trigger",
                "bob (console)",
                Some("due, but paused: it runs once resumed"),
                None
            ),
            ("pause-cancel", "alice@laptop", Some("paused: 1 key, 1 running"), None),
        ],
        "this key's actions only, newest first"
    );
    let missing = store.records().actions("nowhere", 10).await.expect("actions");
    assert_eq!(
        missing[0].outcome.as_deref(),
        Some("not found: no runtime registered this key")
    );
}

#[tokio::test]
async fn a_job_pause_is_in_the_history_of_each_of_its_keys_and_an_operator_must_say_who() {
    let db = support::db().await;
    let store = leasehold::store::LeaseStore::new(db.pool.clone());
    let runtime = support::replica(
        &db,
        "replica-1",
        2,
        vec![
            support::job(
                "report:a",
                support::quick(leasehold::Schedule::Manual, LONG),
                |_| async { Ok(()) },
            ),
            support::job(
                "report:b",
                support::quick(leasehold::Schedule::Manual, LONG),
                |_| async { Ok(()) },
            ),
        ],
    )
    .await;
    let op = Operator::new(store.clone(), "carol").expect("operator");
    op.pause(&Target::job("report"), false).await.expect("pause the job");
    for key in ["report:a", "report:b"] {
        let actions = store.records().actions(key, 10).await.expect("actions");
        assert_eq!(actions.len(), 1, "{key}: {actions:?}");
        assert_eq!(actions[0].target, Target::job("report"));
    }
    // Nobody, too long, or a name that displays as another ("admin").
    for nobody in ["", "   ", &"x".repeat(256), "\u{202e}nimda", "ad\u{200b}min"] {
        let err = Operator::new(store.clone(), nobody).expect_err("not a name who acts");
        assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    }
    runtime.shutdown().await;
}

/// An operator adds 2,000 keys of a kind: each key's history has its `add`
/// with its own kind and arguments, and the records took one statement and
/// their outcomes one more, not one round trip per key.
#[tokio::test]
async fn adding_many_keys_records_each_key_in_one_statement() {
    let (db, store) = support::store().await;
    let alice = Operator::new(store.clone(), "alice@laptop").expect("operator");
    let keys: Vec<NewKey> = (0..2000)
        .map(|i| NewKey::new("tenant", &format!("tenant:{i:04}"), &i, Schedule::Manual).expect("key"))
        .collect();
    support::reset_statement_stats(&db.pool).await;

    assert_eq!(alice.add_keys(&keys).await.expect("add"), 2000);

    let records = support::statement_calls(&db.pool, "INSERT INTO leasehold_action").await;
    let outcomes = support::statement_calls(&db.pool, "UPDATE leasehold_action").await;
    assert_eq!(
        (records, outcomes),
        (1, 1),
        "one statement each, whatever the number of keys"
    );
    for i in [0, 1, 1234, 1999] {
        let actions = store
            .records()
            .actions(&format!("tenant:{i:04}"), 10)
            .await
            .expect("actions");
        let seen: Vec<(&str, &str, Option<&str>)> = actions
            .iter()
            .map(|a| (a.action.as_str(), a.actor.as_str(), a.outcome.as_deref()))
            .collect();
        let outcome = format!("kind tenant, args {i}: 2000 of 2000 keys added (an existing key is kept)");
        assert_eq!(seen, [("add", "alice@laptop", Some(outcome.as_str()))], "key {i}");
    }
    let recorded: i64 =
        sqlx::query_scalar("SELECT count(*) FROM leasehold_action WHERE action = 'add' AND outcome IS NOT NULL")
            .fetch_one(&db.pool)
            .await
            .expect("count");
    assert_eq!(recorded, 2000);
}

/// Forgetting a key is an operator action like the others: recorded as
/// `forget` with who did it, and the record outlives the row it deleted.
#[tokio::test]
async fn a_forget_is_recorded_and_the_record_outlives_the_row() {
    let (_db, store) = support::store().await;
    store.claim("tenant:gone", "replica-1", LONG).await.expect("claim");
    let lease = store.get("tenant:gone").await.expect("get").expect("row");
    assert!(
        store
            .release("tenant:gone", "replica-1", lease.fence)
            .await
            .expect("release")
    );
    let alice = Operator::new(store.clone(), "alice@laptop").expect("operator");

    assert!(matches!(
        alice.forget("tenant:gone").await.expect("forget"),
        Forgotten::Deleted
    ));

    assert!(
        store.get("tenant:gone").await.expect("get").is_none(),
        "the row is gone"
    );
    let actions = store.records().actions("tenant:gone", 10).await.expect("actions");
    let seen: Vec<(Option<OperatorAction>, &str, Option<&str>)> = actions
        .iter()
        .map(|a| (OperatorAction::parse(&a.action), a.actor.as_str(), a.outcome.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [(
            Some(OperatorAction::Forget),
            "alice@laptop",
            Some("deleted: the lease row and its run history are gone")
        )]
    );
}

/// A service that pauses, triggers and resumes through its `Runtime` is in
/// the history like an operator: each action with its outcome, and the
/// replica's holder id as who took it.
#[tokio::test]
async fn a_runtimes_own_trigger_pause_and_resume_are_recorded_with_its_holder_id() {
    let db = support::db().await;
    let store = leasehold::store::LeaseStore::new(db.pool.clone());
    let runtime = support::replica(
        &db,
        "replica-1",
        2,
        vec![support::job(
            "report:a",
            support::quick(leasehold::Schedule::Manual, LONG),
            |_| async { Ok(()) },
        )],
    )
    .await;

    runtime.pause(&Target::key("report:a"), false).await.expect("pause");
    runtime.trigger("report:a").await.expect("trigger");
    runtime.resume(&Target::key("report:a")).await.expect("resume");

    let actions = store.records().actions("report:a", 10).await.expect("actions");
    let seen: Vec<(&str, &str, bool)> = actions
        .iter()
        .map(|a| (a.action.as_str(), a.actor.as_str(), a.outcome.is_some()))
        .collect();
    assert_eq!(
        seen,
        [
            ("resume", "replica-1", true),
            ("trigger", "replica-1", true),
            ("pause", "replica-1", true),
        ],
        "newest first, each with its outcome"
    );
    runtime.shutdown().await;
}

/// Issue 42, item 4: every hidden character (each class of
/// `leasehold_testkit::hostile`, and every character of them as a key) is
/// refused at the boundary — keys, holders, actors, and who paused a key,
/// which follows the actor rule (`admin` + INVISIBLE TIMES would show as
/// `admin`) — with the value escaped in the error and nothing written.
#[tokio::test]
async fn hidden_characters_are_refused_in_every_name_and_who_acted_follows_one_rule() {
    use leasehold_testkit::hostile;

    let (_db, store) = support::store().await;
    for c in hostile::hidden_chars() {
        let key = format!("k{c}");
        let err = store
            .claim(&key, "replica-1", LONG)
            .await
            .expect_err("a hidden character in a key");
        assert!(
            matches!(err, Error::InvalidInput { .. }),
            "U+{:04X}: {err}",
            u32::from(c)
        );
    }
    for (class, sample) in hostile::samples() {
        let err = store.claim("ledger", &sample, LONG).await.expect_err("holder");
        let msg = err.to_string();
        assert!(msg.contains("holder id") && msg.contains("remove it"), "{class}: {msg}");
        assert!(
            !msg.chars().any(leasehold_rules::hidden_char),
            "{class}: the error shows the value escaped: {msg:?}"
        );
        let err = Operator::new(store.clone(), sample.as_str()).expect_err("actor");
        assert!(matches!(err, Error::InvalidInput { .. }), "{class}: {err}");
        let err = store
            .controls()
            .pause(&Target::key("ledger"), false, &sample)
            .await
            .expect_err("paused by");
        assert!(err.to_string().contains("paused by"), "{class}: {err}");
    }
    let err = store
        .controls()
        .pause(&Target::key("ledger"), false, hostile::FAKE_ADMIN)
        .await
        .expect_err("admin + INVISIBLE TIMES");
    assert!(err.to_string().contains("\\u{2062}"), "{err}");
    assert!(
        store.controls().pauses().await.expect("pauses").is_empty(),
        "nothing was paused"
    );
    assert!(
        store.records().status("ledger").await.expect("status").is_none(),
        "nothing was claimed"
    );
}
