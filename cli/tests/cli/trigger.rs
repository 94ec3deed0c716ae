//! `leasehold trigger`: a key due now; a missing key exits 4.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_makes_a_key_due_now_and_a_missing_key_exits_4() {
    let db = migrated_db().await;
    let url = url(&db);
    let store = LeaseStore::new(db.pool.clone());
    // A manual job's key, registered and never run: due "never".
    let (guards, _rx) = mpsc::unbounded_channel();
    let runtime = Runtime::builder(db.pool.clone())
        .register(Holding { guards })
        .start()
        .await
        .unwrap();
    runtime.shutdown().await;
    let before = store.get("held-job").await.unwrap().unwrap();
    assert!(before.next_due_at.is_some_and(|due| due > before.server_now));

    let out = leasehold(Some(&url), &["trigger", "held-job"]).await;
    assert_exit(&out, 0);
    assert_eq!(
        stdout(&out),
        "trigger key \"held-job\": due: the first replica to claim it runs it\n"
    );
    let after = store.get("held-job").await.unwrap().unwrap();
    assert!(
        after.next_due_at.is_some_and(|due| due <= after.server_now),
        "{after:?}"
    );

    // A paused key is due too, and runs once resumed.
    let out = leasehold(Some(&url), &["pause", "--job", "held-job"]).await;
    assert_exit(&out, 0);
    let out = leasehold(Some(&url), &["trigger", "held-job", "--json"]).await;
    assert_exit(&out, 0);
    assert_eq!(
        json(&out),
        serde_json::json!({ "key": "held-job", "outcome": "paused", "paused": true })
    );
    let out = leasehold(Some(&url), &["trigger", "held-job"]).await;
    assert_exit(&out, 0);
    assert_eq!(
        stdout(&out),
        "trigger key \"held-job\": due, but paused: it runs once resumed\n"
    );

    // Each action is in the key's history, with who took it (the job
    // pause too: it covers this key).
    let actions = store.records().actions("held-job", 10).await.unwrap();
    let taken: Vec<&str> = actions.iter().map(|a| a.action.as_str()).collect();
    assert_eq!(taken, ["trigger", "trigger", "pause", "trigger"], "newest first");
    assert!(
        actions.iter().all(|a| !a.actor.is_empty() && a.outcome.is_some()),
        "{actions:?}"
    );

    let out = leasehold(Some(&url), &["trigger", "no-such-job"]).await;
    assert_exit(&out, 4);
    let err = stderr(&out);
    assert!(
        err.starts_with("leasehold: trigger key \"no-such-job\": not found: no runtime registered this key in ")
            && err.ends_with(" (see `leasehold status`); nothing to trigger\n"),
        "{err}"
    );
    let out = leasehold(Some(&url), &["trigger", "no-such-job", "--json"]).await;
    assert_exit(&out, 4);
    assert_eq!(
        json(&out),
        serde_json::json!({ "key": "no-such-job", "outcome": "not-found", "paused": false })
    );
    assert!(store.get("no-such-job").await.unwrap().is_none(), "no row is created");
}
