//! A removed key of a job kind in `status` and `history`: shown as
//! removed (never as a live free key), with how to forget it; its runs
//! marked as of an earlier life, in tables and `--json`, also once the key
//! is added again.

use super::*;

/// A stored key `tenant:acme` that ran once (run 1, recorded), then was
/// removed.
async fn removed_key(store: &LeaseStore) {
    let key = leasehold::NewKey::new("tenant", "tenant:acme", &"acme", Schedule::Manual).unwrap();
    assert_eq!(store.keys().add(&[key]).await.unwrap(), 1);
    let lease = acquired(store.claim("tenant:acme", "web-1", LONG).await.unwrap());
    assert!(store.release_recorded(&lease, 1, 100).await.unwrap());
    assert!(store.keys().remove("tenant", "tenant:acme").await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_key_shows_as_removed_and_its_runs_as_of_an_earlier_life() {
    let db = migrated_db().await;
    let store = LeaseStore::new(db.pool.clone());
    removed_key(&store).await;
    released_row(&store, "static-job", "web-1").await;

    let out = leasehold(Some(&url(&db)), &["status"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("2 leases (0 held, 1 free, 1 removed)"), "{text}");
    assert_eq!(table_row(&text, "tenant:acme")[1], "removed", "{text}");
    assert_eq!(table_row(&text, "static-job")[1], "free", "{text}");
    assert!(
        text.contains("1 key of job kinds removed: not run anywhere; `leasehold forget KEY` drops a key's record"),
        "{text}"
    );
    assert!(text.contains("succeeded, earlier life"), "the last run: {text}");

    let out = leasehold(Some(&url(&db)), &["status", "--json"]).await;
    let doc = json(&out);
    let leases = doc["leases"].as_array().unwrap();
    let acme = leases.iter().find(|l| l["key"] == "tenant:acme").unwrap();
    assert_eq!((&acme["state"], &acme["removed"]), (&"removed".into(), &true.into()));
    assert_eq!(acme["last_run"]["earlier_life"], true);
    let other = leases.iter().find(|l| l["key"] == "static-job").unwrap();
    assert_eq!((&other["state"], &other["removed"]), (&"free".into(), &false.into()));

    let out = leasehold(Some(&url(&db)), &["history", "tenant:acme"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("succeeded, earlier life"), "{text}");
    assert!(
        text.contains("runs marked \"earlier life\" ran before the key"),
        "{text}"
    );

    // Added again: live again, its old run still marked.
    let key = leasehold::NewKey::new("tenant", "tenant:acme", &"acme", Schedule::Manual).unwrap();
    assert_eq!(store.keys().add(&[key]).await.unwrap(), 1);
    let out = leasehold(Some(&url(&db)), &["status", "--json"]).await;
    let doc = json(&out);
    let acme = doc["leases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["key"] == "tenant:acme")
        .unwrap()
        .clone();
    assert_eq!((&acme["state"], &acme["removed"]), (&"free".into(), &false.into()));
    let out = leasehold(Some(&url(&db)), &["history", "tenant:acme", "--json"]).await;
    let doc = json(&out);
    assert_eq!(doc["runs"][0]["earlier_life"], true);
}
