//! Operators' actions are recorded with who took them: the key's history
//! lists its own actions and its job's, newest first, each with its
//! outcome, and a revoke with the fence it handed out.

use leasehold::{
    Error, NewKey, Schedule,
    operator::{Forgotten, Operator, OperatorAction, Resumed, Revoke, Revoked, Target, Triggered},
};

use crate::support::{self, LONG};

#[tokio::test]
async fn each_action_is_recorded_with_its_actor_outcome_and_fence() {
    let (_db, store) = support::store().await;
    store.claim("billing:eu", "replica-1", LONG).await.expect("claim");
    store.claim("billing:us", "replica-1", LONG).await.expect("claim");
    let alice = Operator::new(store.clone(), "alice@laptop").expect("operator");
    let bob = Operator::new(store.clone(), "bob (console)").expect("operator");

    alice
        .pause(&Target::key("billing:eu").unwrap(), true)
        .await
        .expect("pause");
    bob.trigger("billing:eu").await.expect("trigger");
    bob.trigger("billing:us").await.expect("another key");
    alice.resume(&Target::key("billing:eu").unwrap()).await.expect("resume");
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
/// with its own kind and arguments, written by the statement that adds the
/// keys — not one round trip per key, and no statement apart.
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
    let with_the_keys =
        support::statement_calls(&db.pool, "INSERT INTO leasehold_key%INSERT INTO leasehold_action").await;
    let outcomes = support::statement_calls(&db.pool, "UPDATE leasehold_action").await;
    let all = support::statement_calls(&db.pool, "").await;
    assert_eq!(
        (records, with_the_keys, outcomes, all),
        (1, 1, 0, 2),
        "the records are written by the statement that adds the keys (the other statement reads the server clock)"
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

    runtime
        .pause(&Target::key("report:a").unwrap(), false)
        .await
        .expect("pause");
    runtime.trigger("report:a").await.expect("trigger");
    runtime.resume(&Target::key("report:a").unwrap()).await.expect("resume");

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
            .pause(&Target::key("ledger").unwrap(), false, &sample)
            .await
            .expect_err("paused by");
        assert!(err.to_string().contains("paused by"), "{class}: {err}");
    }
    let err = store
        .controls()
        .pause(&Target::key("ledger").unwrap(), false, hostile::FAKE_ADMIN)
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

/// Issue 43: an operator action is one statement, its record in it. The
/// CLI's pause (and the console's) sends that one statement: the pause and
/// its record with its outcome, committed together; so do a resume and a
/// trigger.
#[tokio::test]
async fn an_action_and_its_record_with_its_outcome_are_one_statement() {
    let (db, store) = support::store().await;
    store.claim("report:a", "replica-1", LONG).await.expect("claim");
    let alice = Operator::new(store.clone(), "alice@laptop").expect("operator");
    let target = Target::key("report:a").unwrap();
    for (what, statements) in [("pause", 1), ("trigger", 1), ("resume", 1)] {
        support::reset_statement_stats(&db.pool).await;
        match what {
            "pause" => drop(alice.pause(&target, false).await.expect("pause")),
            "trigger" => drop(alice.trigger("report:a").await.expect("trigger")),
            _ => drop(alice.resume(&target).await.expect("resume")),
        }
        assert_eq!(
            support::statement_calls(&db.pool, "").await,
            statements,
            "{what}: one statement"
        );
        assert_eq!(
            support::statement_calls(&db.pool, "INSERT INTO leasehold_action").await,
            1,
            "{what}: the statement that acts writes the record"
        );
    }
    let actions = store.records().actions("report:a", 10).await.expect("actions");
    let seen: Vec<(&str, Option<&str>)> = actions
        .iter()
        .map(|a| (a.action.as_str(), a.outcome.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            ("resume", Some("resumed: 0 overdue keys woken")),
            ("trigger", Some("due, but paused: it runs once resumed")),
            ("pause", Some("paused: 1 key, 1 running")),
        ]
    );
}

/// Each answer of each action is recorded in the words the answer says
/// (its `Display`, which the CLI and the console print): the statement
/// picks the words of the answer it gives and fills them as Rust does,
/// `%` in a kind or in arguments included.
#[tokio::test]
async fn every_answer_is_recorded_in_the_words_it_says() {
    let (db, store) = support::store().await;
    let op = Operator::new(store.clone(), "carol").expect("operator");
    for key in ["a:1", "a:2", "b:1"] {
        store.claim(key, "replica-1", LONG).await.expect("claim");
    }
    sqlx::query("UPDATE leasehold_lease SET job_name = 'a' WHERE key LIKE 'a:%'")
        .execute(&db.pool)
        .await
        .expect("job");
    let (a1, a2, job) = (
        Target::key("a:1").unwrap(),
        Target::key("a:2").unwrap(),
        Target::job("a"),
    );
    let mut said: Vec<(Target, String)> = Vec::new();

    // Trigger: not found, due, paused.
    said.push((
        Target::key("nowhere").unwrap(),
        op.trigger("nowhere").await.expect("trigger").to_string(),
    ));
    assert_eq!(op.trigger("a:1").await.expect("trigger"), Triggered::Due);
    said.push((a1.clone(), Triggered::Due.to_string()));
    // Pause: one key, several keys; trigger of a paused key.
    said.push((a1.clone(), op.pause(&a1, false).await.expect("pause").to_string()));
    assert_eq!(said.last().expect("said").1, "paused: 1 key, 1 running");
    assert_eq!(op.trigger("a:1").await.expect("trigger"), Triggered::Paused);
    said.push((a1.clone(), Triggered::Paused.to_string()));
    said.push((job.clone(), op.pause(&job, true).await.expect("pause").to_string()));
    assert_eq!(said.last().expect("said").1, "paused: 2 keys, 2 running");
    // Resume: not paused, one overdue key woken.
    let resumed = op.resume(&a2).await.expect("resume");
    assert_eq!(resumed, Resumed::NotPaused);
    said.push((a2.clone(), resumed.to_string()));
    support::expire_now(&db.pool, "a:2").await;
    let resumed = op.resume(&job).await.expect("resume");
    assert_eq!(resumed, Resumed::Yes { woken: 1 });
    said.push((job.clone(), resumed.to_string()));
    // Revoke: refused, ended (held, then already free), not found.
    said.push((
        a1.clone(),
        op.revoke("a:1", Revoke::IfFree, &[]).await.expect("revoke").to_string(),
    ));
    assert!(said.last().expect("said").1.starts_with("refused: held by replica-1"));
    said.push((
        a1.clone(),
        op.revoke("a:1", Revoke::Force, &[]).await.expect("revoke").to_string(),
    ));
    assert!(said.last().expect("said").1.contains(", held: its run is cancelled"));
    said.push((
        a1.clone(),
        op.revoke("a:1", Revoke::Force, &[]).await.expect("revoke").to_string(),
    ));
    assert!(said.last().expect("said").1.contains(", already free); new fence "));
    said.push((
        Target::key("gone").unwrap(),
        op.revoke("gone", Revoke::IfFree, &[])
            .await
            .expect("revoke")
            .to_string(),
    ));
    // Forget: refused, deleted, not found.
    said.push((
        Target::key("b:1").unwrap(),
        op.forget("b:1").await.expect("forget").to_string(),
    ));
    assert!(
        said.last()
            .expect("said")
            .1
            .starts_with("refused: held by replica-1 (fence ")
    );
    said.push((a1.clone(), op.forget("a:1").await.expect("forget").to_string()));
    assert_eq!(said.last().expect("said").1, Forgotten::Deleted.to_string());
    said.push((a1.clone(), op.forget("a:1").await.expect("forget").to_string()));
    // Add, update (found, not found), remove (not found, removed), with `%`
    // in a kind and in arguments.
    let pct = Target::key("pct:1").unwrap();
    let key = NewKey::new("pct", "pct:1", &"50%s off, 100%% sure", Schedule::Manual).expect("key");
    let added = op.add_keys(std::slice::from_ref(&key)).await.expect("add");
    said.push((pct.clone(), leasehold::operator::added(&key, added, 1)));
    assert!(
        said.last()
            .expect("said")
            .1
            .contains(r#"args "50%s off, 100%% sure": 1 of 1 keys"#)
    );
    let version = op.update_key(&key).await.expect("update");
    said.push((pct.clone(), leasehold::operator::updated(&key, version)));
    let other = NewKey::new("other%s", "pct:1", &1, Schedule::Manual).expect("key");
    let version = op.update_key(&other).await.expect("update");
    said.push((pct.clone(), leasehold::operator::updated(&other, version)));
    assert_eq!(said.last().expect("said").1, "not found: no key of kind other%s");
    let removed = op.remove_key("other%s", "pct:1").await.expect("remove");
    said.push((pct.clone(), leasehold::operator::removed("other%s", removed)));
    let removed = op.remove_key("pct", "pct:1").await.expect("remove");
    said.push((pct.clone(), leasehold::operator::removed("pct", removed)));

    // Each target's records, oldest first, are what was said on it.
    let targets = [
        Target::key("nowhere").unwrap(),
        a1,
        a2,
        job,
        Target::key("gone").unwrap(),
        Target::key("b:1").unwrap(),
        pct,
    ];
    for target in targets {
        let history = match &target {
            Target::Job(name) => store.records().job_actions(name, 100).await,
            _ => store.records().actions(target.name(), 100).await,
        }
        .expect("actions");
        let recorded: Vec<&str> = history
            .iter()
            .rev()
            .filter(|a| a.target == target && a.actor == "carol")
            .filter_map(|a| a.outcome.as_deref())
            .collect();
        let expected: Vec<&str> = said
            .iter()
            .filter(|(t, _)| *t == target)
            .map(|(_, w)| w.as_str())
            .collect();
        assert_eq!(recorded, expected, "{target}");
    }
}

/// An action whose statement fails leaves neither its effect nor a record
/// of success: the record and the effect are one statement, so a record
/// that cannot be written undoes the pause; the error is recorded apart.
#[tokio::test]
async fn a_failed_action_takes_no_effect_and_is_recorded_with_its_error() {
    let (db, store) = support::store().await;
    store.claim("ledger", "replica-1", LONG).await.expect("claim");
    // The database refuses any record of mallory's but an error's.
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_mallory() RETURNS trigger LANGUAGE plpgsql AS
         $$BEGIN
             IF NEW.actor = 'mallory' AND NEW.outcome NOT LIKE 'error: %' THEN
                 RAISE EXCEPTION 'no record for mallory';
             END IF;
             RETURN NEW;
         END$$;
         CREATE TRIGGER refuse_mallory BEFORE INSERT ON leasehold_action
             FOR EACH ROW EXECUTE FUNCTION refuse_mallory();",
    )
    .execute(&db.pool)
    .await
    .expect("trigger");
    let mallory = Operator::new(store.clone(), "mallory").expect("operator");

    let err = mallory
        .pause(&Target::key("ledger").unwrap(), true)
        .await
        .expect_err("the record is refused, so is the pause");
    assert!(err.to_string().contains("no record for mallory"), "{err}");
    assert!(
        store.controls().pauses().await.expect("pauses").is_empty(),
        "the pause did not take effect without its record"
    );
    let err = mallory
        .add_keys(&[NewKey::new("tenant", "tenant:x", &1, Schedule::Manual).expect("key")])
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("no record for mallory"), "{err}");
    assert!(
        store.keys().get("tenant:x").await.expect("get").is_none(),
        "no key added"
    );

    let actions = store.records().actions("ledger", 10).await.expect("actions");
    let seen: Vec<(&str, &str, bool)> = actions
        .iter()
        .map(|a| {
            let outcome = a.outcome.as_deref().unwrap_or_default();
            (
                a.action.as_str(),
                a.actor.as_str(),
                outcome.starts_with("error: ") && outcome.contains("no record for mallory"),
            )
        })
        .collect();
    assert_eq!(seen, [("pause-cancel", "mallory", true)], "one record: its error");
    let actions = store.records().actions("tenant:x", 10).await.expect("actions");
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert!(actions[0].outcome.as_deref().unwrap_or_default().starts_with("error: "));

    // Another operator's actions are recorded as ever.
    let alice = Operator::new(store.clone(), "alice").expect("operator");
    alice
        .pause(&Target::key("ledger").unwrap(), false)
        .await
        .expect("pause");
    assert_eq!(store.controls().pauses().await.expect("pauses").len(), 1);
}

/// Setting, changing and lifting a job's fleet-wide limit through an
/// `Operator` is recorded on the job, by who, with what it replaced, in the
/// statement that changes the limit. A name no key has
/// is recorded as not found, and nothing is set.
#[tokio::test]
async fn a_fleet_limit_set_changed_and_lifted_is_recorded_on_its_job() {
    use leasehold::operator::LimitSet;

    let (db, store) = support::store().await;
    store.claim("report:1", "replica-1", LONG).await.expect("claim");
    sqlx::query("UPDATE leasehold_lease SET job_name = 'report' WHERE key = 'report:1'")
        .execute(&db.pool)
        .await
        .expect("job");
    let alice = Operator::new(store.clone(), "alice@laptop").expect("operator");
    support::reset_statement_stats(&db.pool).await;
    assert_eq!(
        alice.set_limit("report", 4).await.expect("set"),
        LimitSet::Set { previous: None }
    );
    // The set waits for the claims in flight first (its transaction's
    // lock), then writes the limit and its record in one statement.
    assert_eq!(
        support::statement_calls(&db.pool, "INSERT INTO leasehold_limit%INSERT INTO leasehold_action").await,
        1,
        "the limit and its record: one statement"
    );
    assert_eq!(
        support::statement_calls(&db.pool, "INSERT INTO leasehold_action").await,
        1,
        "no other statement records it"
    );
    assert_eq!(
        alice.set_limit("report", 2).await.expect("lower"),
        LimitSet::Set { previous: Some(4) }
    );
    assert_eq!(alice.set_limit("reprot", 2).await.expect("typo"), LimitSet::UnknownJob);
    assert!(alice.clear_limit("report").await.expect("clear"));
    assert!(!alice.clear_limit("report").await.expect("again"));

    let on_report: Vec<(String, String, Option<String>)> = store
        .records()
        .job_actions("report", 10)
        .await
        .expect("actions")
        .into_iter()
        .map(|a| (a.action, a.actor, a.outcome))
        .collect();
    let said = |action: OperatorAction, outcome: &str| {
        (
            action.as_str().to_owned(),
            "alice@laptop".to_owned(),
            Some(outcome.to_owned()),
        )
    };
    assert_eq!(
        on_report,
        [
            said(OperatorAction::ClearLimit, "not limited"),
            said(
                OperatorAction::ClearLimit,
                "limit lifted: its keys start as freely as any other's"
            ),
            said(
                OperatorAction::SetLimit,
                "at most 2 runs at once across the fleet (was 4)"
            ),
            said(
                OperatorAction::SetLimit,
                "at most 4 runs at once across the fleet (none before)"
            ),
        ],
        "newest first"
    );
    let on_typo = store.records().job_actions("reprot", 10).await.expect("actions");
    assert_eq!(
        on_typo.iter().map(|a| a.outcome.as_deref()).collect::<Vec<_>>(),
        [Some("not found: no key of a job or kind of this name")]
    );
    assert!(store.controls().limits().await.expect("limits").is_empty());
}

/// An operator that checks the schema (`Operator::checking_schema`, as the
/// CLI does) acts on the schema its library was built for, and on any
/// other every action fails in its own statement — `SchemaTooNew` or
/// `SchemaOutdated`, not a database error — having written nothing: no
/// effect, no record. An operator that does not check acts on a newer
/// schema, as its replica's runtime does during a rolling upgrade.
#[tokio::test]
async fn an_operator_checking_the_schema_refuses_another_in_each_actions_own_statement() {
    let (db, store) = support::store().await;
    let version = leasehold::schema::SCHEMA_VERSION;
    store.claim("billing:eu", "replica-1", LONG).await.expect("claim");
    let key = NewKey::new("invoice", "invoice:acme", &1, Schedule::Manual).expect("key");
    let tool = Operator::new(store.clone(), "deploy-bot")
        .expect("operator")
        .checking_schema();
    assert_eq!(
        tool.trigger("billing:eu").await.expect("on its own schema"),
        Triggered::Due
    );
    assert_eq!(tool.add_keys(std::slice::from_ref(&key)).await.expect("add"), 1);

    let written = || async {
        let actions: i64 = sqlx::query_scalar("SELECT count(*) FROM leasehold_action")
            .fetch_one(&db.pool)
            .await
            .unwrap();
        let effects: (i64, i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM leasehold_pause), (SELECT count(*) FROM leasehold_limit),
                    (SELECT count(*) FROM leasehold_lease), (SELECT max(version) FROM leasehold_key)",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        (actions, effects)
    };
    let every_action = |op: Operator| {
        let key = key.clone();
        async move {
            let job = Target::job("billing");
            vec![
                ("trigger", op.trigger("billing:eu").await.err()),
                ("pause", op.pause(&job, true).await.err()),
                ("resume", op.resume(&job).await.err()),
                ("revoke", op.revoke("billing:eu", Revoke::Force, &[]).await.err()),
                ("forget", op.forget("billing:eu").await.err()),
                ("set_limit", op.set_limit("invoice", 2).await.err()),
                ("clear_limit", op.clear_limit("invoice").await.err()),
                ("add_keys", op.add_keys(std::slice::from_ref(&key)).await.err()),
                ("update_key", op.update_key(&key).await.err()),
                ("remove_key", op.remove_key("invoice", "invoice:acme").await.err()),
            ]
        }
    };

    // A newer leasehold migrated the database.
    sqlx::query("INSERT INTO leasehold_schema_version (version, description) VALUES ($1, 'from the future')")
        .bind(version + 1)
        .execute(&db.pool)
        .await
        .unwrap();
    let before = written().await;
    for (action, err) in every_action(tool.clone()).await {
        assert!(
            matches!(err, Some(Error::SchemaTooNew { found, supported }) if found == version + 1 && supported == version),
            "{action}: {err:?}"
        );
    }
    assert_eq!(written().await, before, "nothing written, nothing recorded");

    // An older one: this library's version is not applied yet.
    sqlx::query("DELETE FROM leasehold_schema_version WHERE version >= $1")
        .bind(version)
        .execute(&db.pool)
        .await
        .unwrap();
    for (action, err) in every_action(tool.clone()).await {
        assert!(
            matches!(err, Some(Error::SchemaOutdated { found, needed }) if found == version - 1 && needed == version),
            "{action}: {err:?}"
        );
    }
    assert_eq!(written().await, before, "nothing written, nothing recorded");

    // Without the check, the same operator acts (and records).
    let service = Operator::new(store.clone(), "billing-service").expect("operator");
    let job = Target::job("billing");
    service.pause(&job, false).await.expect("pause on another schema");
    assert_ne!(written().await, before);
}
