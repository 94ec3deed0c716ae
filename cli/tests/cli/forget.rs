//! `leasehold forget`: a free key's row deleted, a held one kept, JSON
//! outcomes, a higher fence after.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_of_a_free_key_deletes_its_row() {
    let db = migrated_db().await;
    let store = LeaseStore::new(db.pool.clone());
    released_row(&store, "tenant-42:reconcile", "web-1").await;
    acquired(store.claim("tenant-7:reconcile", "web-1", LONG).await.unwrap());

    let out = leasehold(Some(&url(&db)), &["forget", "tenant-42:reconcile"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert_eq!(
        text,
        "forget key \"tenant-42:reconcile\": deleted: the lease row and its run history are gone\n  a replica that \
         still registers it creates it again, due at its next slot;\n  its fences stay above every fence handed out \
         so far (they come from a sequence)\n"
    );
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    assert!(
        store.get("tenant-42:reconcile").await.unwrap().is_none(),
        "the row is gone"
    );
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM leasehold_lease WHERE key = 'tenant-42:reconcile'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 0);
    // Only that key: the other tenant's held lease is untouched.
    let other = store.get("tenant-7:reconcile").await.unwrap().expect("still there");
    assert!(other.is_held());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_of_a_held_key_is_refused_and_keeps_the_row() {
    let db = migrated_db().await;
    let store = LeaseStore::new(db.pool.clone());
    let lease = acquired(store.claim("tenant-42:reconcile", "web-1", LONG).await.unwrap());
    let before = store.get("tenant-42:reconcile").await.unwrap().unwrap();

    let out = leasehold(Some(&url(&db)), &["forget", "tenant-42:reconcile"]).await;
    assert_exit(&out, 3);
    assert_eq!(
        stderr(&out),
        format!(
            "leasehold: forget key \"tenant-42:reconcile\": refused: held by web-1 (fence {}); nothing was deleted. \
             Stop that run (or wait for it to end), or end the tenure with `leasehold revoke --force \
             tenant-42:reconcile` (the run is cancelled at its next heartbeat), then run `leasehold forget \
             tenant-42:reconcile` again\n",
            lease.fence
        )
    );
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));

    let after = store
        .get("tenant-42:reconcile")
        .await
        .unwrap()
        .expect("the row is still there");
    assert_eq!(
        (after.holder.as_str(), after.fence, after.acquired_at, after.expires_at),
        (
            before.holder.as_str(),
            before.fence,
            before.acquired_at,
            before.expires_at
        ),
        "a refused forget changes nothing"
    );
    assert_eq!(after.fence, lease.fence);
    assert!(matches!(store.renew(&lease, LONG).await.unwrap(), Renewal::Renewed(_)));

    // As the message says: end the tenure, then forget.
    let out = leasehold(Some(&url(&db)), &["revoke", "--force", "tenant-42:reconcile"]).await;
    assert_exit(&out, 0);
    let out = leasehold(Some(&url(&db)), &["forget", "tenant-42:reconcile"]).await;
    assert_exit(&out, 0);
    assert!(store.get("tenant-42:reconcile").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_of_a_missing_key_exits_4() {
    let db = migrated_db().await;
    let out = leasehold(Some(&url(&db)), &["forget", "no-such-tenant"]).await;
    assert_exit(&out, 4);
    let err = stderr(&out);
    assert!(
        err.starts_with("leasehold: forget key \"no-such-tenant\": not found: no lease row in ")
            && err.ends_with(" (see `leasehold status`); nothing to forget\n"),
        "{err}"
    );
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_json_reports_each_outcome_with_the_same_exit_codes() {
    let db = migrated_db().await;
    let url = url(&db);
    let store = LeaseStore::new(db.pool.clone());
    let held = acquired(store.claim("held", "web-1", LONG).await.unwrap());
    let free = acquired(store.claim("free", "web-2", LONG).await.unwrap());
    assert!(store.release("free", "web-2", free.fence).await.unwrap());

    let out = leasehold(Some(&url), &["forget", "free", "--json"]).await;
    assert_exit(&out, 0);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(doc, serde_json::json!({ "key": "free", "outcome": "deleted" }));
    assert!(store.get("free").await.unwrap().is_none());

    let out = leasehold(Some(&url), &["forget", "free", "--json"]).await;
    assert_exit(&out, 4);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(doc, serde_json::json!({ "key": "free", "outcome": "not-found" }));
    assert!(
        stderr(&out).contains("forget key \"free\": not found: no lease row"),
        "{}",
        stderr(&out)
    );

    let out = leasehold(Some(&url), &["forget", "held", "--json"]).await;
    assert_exit(&out, 3);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(
        (doc["key"].as_str(), doc["outcome"].as_str()),
        (Some("held"), Some("held")),
        "{doc}"
    );
    let lease = &doc["lease"];
    assert_eq!(lease["key"], "held");
    assert_eq!(lease["holder"], "web-1");
    assert_eq!(lease["fence"], held.fence);
    assert_eq!(lease["state"], "held");
    assert!(lease["expires_in_seconds"].as_f64().unwrap() > 500.0, "{lease}");
    assert!(
        lease["acquired_at"].is_string() && lease["expires_at"].is_string(),
        "{lease}"
    );
    assert!(
        stderr(&out).starts_with(&format!(
            "leasehold: forget key \"held\": refused: held by web-1 (fence {}); nothing was deleted.",
            held.fence
        )),
        "{}",
        stderr(&out)
    );
    assert_eq!(store.get("held").await.unwrap().unwrap().fence, held.fence);
}

/// Fences come from the sequence, not the row: a key forgotten and claimed
/// again gets a fence above every fence of its past, so a paused holder of
/// the forgotten key can never pass a fence check of the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_key_claimed_again_gets_a_higher_fence() {
    let db = migrated_db().await;
    let store = LeaseStore::new(db.pool.clone());
    let first = released_row(&store, "tenant-42:reconcile", "web-1").await;
    let before = store.get("tenant-42:reconcile").await.unwrap().unwrap().fence;

    let out = leasehold(Some(&url(&db)), &["forget", "tenant-42:reconcile"]).await;
    assert_exit(&out, 0);
    assert!(store.get("tenant-42:reconcile").await.unwrap().is_none());

    let again = acquired(store.claim("tenant-42:reconcile", "web-2", LONG).await.unwrap());
    assert!(again.fence > before, "{} > {before}", again.fence);
    assert!(again.fence > first);
    assert_eq!(
        store.get("tenant-42:reconcile").await.unwrap().unwrap().fence,
        again.fence
    );
}

/// A key is checked once, as the argument is parsed, by the library's rule
/// for a key that may have a row (`leasehold::Key`): a row stored before
/// hidden characters were refused can be triggered, read and forgotten
/// from the CLI, as from the console; a key no row can hold is refused
/// before connecting (exit 2), its value escaped in the message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_key_with_a_hidden_character_can_be_acted_on_and_a_bad_one_is_refused_escaped() {
    let db = migrated_db().await;
    let store = LeaseStore::new(db.pool.clone());
    released_row(&store, "plain", "web-1").await;
    let legacy = "tenant\u{202e}42";
    // Written past the library, as an older version would have.
    sqlx::query("UPDATE leasehold_lease SET key = $1 WHERE key = 'plain'")
        .bind(legacy)
        .execute(&db.pool)
        .await
        .expect("store a legacy row");
    let url = url(&db);

    let out = leasehold(Some(&url), &["trigger", legacy]).await;
    assert_exit(&out, 0);
    assert!(!stdout(&out).contains('\u{202e}'), "escaped: {}", stdout(&out));
    let out = leasehold(Some(&url), &["history", legacy, "--json"]).await;
    assert_exit(&out, 0);
    let out = leasehold(Some(&url), &["forget", legacy]).await;
    assert_exit(&out, 0);
    assert!(store.get(legacy).await.unwrap().is_none(), "the legacy row is gone");

    // Refused before connecting: the URL points at no server.
    let nowhere = Some("postgres://u@127.0.0.1:1/d");
    let long = format!("\u{1b}[31m{}", "k".repeat(300));
    for args in [
        &["trigger", long.as_str()][..],
        &["pause", &long],
        &["revoke", &long],
        &["remove", "kind", &long],
    ] {
        let out = leasehold(nowhere, args).await;
        assert_exit(&out, 2);
        let err = stderr(&out);
        assert!(
            err.contains("invalid lease key") && err.contains("the limit is 255 bytes"),
            "{args:?}: {err}"
        );
        assert!(!err.contains('\u{1b}'), "{args:?}: the value is escaped: {err:?}");
    }
}
