//! `leasehold pause|resume`: of a key and of a whole job.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_of_a_key() {
    let db = migrated_db().await;
    let url = url(&db);
    let store = LeaseStore::new(db.pool.clone());
    released_row(&store, "tenant-1:sync", "web-1").await;
    released_row(&store, "tenant-2:sync", "web-1").await;

    let out = leasehold(
        Some(&url),
        &["pause", "tenant-1:sync", "--by", "alice@laptop", "--json"],
    )
    .await;
    assert_exit(&out, 0);
    let doc = json(&out);
    assert_eq!(
        (doc["scope"].as_str(), doc["name"].as_str(), doc["paused_by"].as_str()),
        (Some("key"), Some("tenant-1:sync"), Some("alice@laptop")),
        "{doc}"
    );
    assert_eq!(
        (doc["cancel"].as_bool(), doc["already_paused"].as_bool()),
        (Some(false), Some(false))
    );
    assert_eq!(
        (doc["keys"].as_u64(), doc["running"].as_u64()),
        (Some(1), Some(0)),
        "{doc}"
    );
    assert!(doc["paused_at"].is_string(), "{doc}");

    // Every replica obeys it: a claim of the key is refused, even a trigger's.
    let claim = store.claim_run("tenant-1:sync", "web-2", LONG, Due::Now).await.unwrap();
    assert!(is_paused(&claim), "{claim:?}");
    let other = store.claim_run("tenant-2:sync", "web-2", LONG, Due::Now).await.unwrap();
    let other = acquired(other);
    assert!(store.release("tenant-2:sync", "web-2", other.fence).await.unwrap());

    // Pausing again keeps the first pause.
    let out = leasehold(Some(&url), &["pause", "tenant-1:sync", "--by", "bob@desk"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(
        text.starts_with(
            "pause key \"tenant-1:sync\": paused: 1 key, 0 running\n  it was already paused by alice@laptop since "
        ),
        "{text}"
    );
    assert!(text.contains("; nothing changed\n"), "{text}");
    assert!(text.contains("`leasehold resume tenant-1:sync`"), "{text}");

    let out = leasehold(Some(&url), &["status"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("2 leases (0 held, 2 free, 1 paused)"), "{text}");
    assert_eq!(table_row(&text, "tenant-1:sync")[1], "free, paused", "{text}");
    assert_eq!(table_row(&text, "tenant-2:sync")[1], "free", "{text}");
    assert!(text.contains("1 pause in force"), "{text}");
    let pause_line = text
        .lines()
        .find(|l| l.starts_with("key \"tenant-1:sync\""))
        .unwrap_or_else(|| panic!("no pause row in\n{text}"));
    assert!(
        pause_line.contains("alice@laptop") && pause_line.contains(" ago)"),
        "{pause_line}"
    );
    let out = leasehold(Some(&url), &["status", "--json"]).await;
    let doc = json(&out);
    assert_eq!(doc["leases"][0]["paused"], true, "{doc}");
    assert_eq!(doc["leases"][1]["paused"], false, "{doc}");
    assert_eq!(doc["pauses"][0]["scope"], "key", "{doc}");
    assert_eq!(doc["pauses"][0]["paused_by"], "alice@laptop", "{doc}");
    // A prefix that covers no paused key shows no pause.
    let out = leasehold(Some(&url), &["status", "--json", "--prefix", "tenant-2"]).await;
    assert_eq!(json(&out)["pauses"], serde_json::json!([]));

    let out = leasehold(Some(&url), &["resume", "tenant-1:sync", "--json"]).await;
    assert_exit(&out, 0);
    let doc = json(&out);
    assert_eq!(doc["outcome"], "resumed", "{doc}");
    assert_eq!(doc["woken"], 1, "due since it was created: overdue, woken: {doc}");
    let claim = store.claim_run("tenant-1:sync", "web-2", LONG, Due::Now).await.unwrap();
    let lease = acquired(claim);
    assert!(store.release("tenant-1:sync", "web-2", lease.fence).await.unwrap());

    // Nothing left to resume: exit 4, in text and in JSON.
    let out = leasehold(Some(&url), &["resume", "tenant-1:sync"]).await;
    assert_exit(&out, 4);
    assert!(
        stderr(&out).starts_with("leasehold: resume key \"tenant-1:sync\": not paused in "),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    let out = leasehold(Some(&url), &["resume", "--job", "no-such-job", "--json"]).await;
    assert_exit(&out, 4);
    assert_eq!(
        json(&out),
        serde_json::json!({ "scope": "job", "name": "no-such-job", "outcome": "not-paused" })
    );
    assert!(
        stderr(&out).starts_with("leasehold: resume job \"no-such-job\": not paused in ")
            && stderr(&out).ends_with(" (see `leasehold status`); nothing to resume\n"),
        "{}",
        stderr(&out)
    );
}

/// A job with a run in progress, paused with and without `--cancel`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_of_a_job() {
    let db = migrated_db().await;
    let url = url(&db);
    let store = LeaseStore::new(db.pool.clone());
    let (rt, _guards, guard) = running_job(&db).await;

    let out = leasehold(Some(&url), &["pause", "--job", "held-job"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(
        text.starts_with("pause job \"held-job\": paused: 1 key, 1 running\n  paused for the whole fleet by "),
        "{text}"
    );
    assert!(
        text.contains("\n  the run in progress finishes (use --cancel to stop it at its next renewal)\n"),
        "{text}"
    );
    assert!(text.contains("`leasehold resume --job held-job`"), "{text}");
    let by = std::env::var("USER").map_or("leasehold-cli".to_owned(), |user| format!("{user}@"));
    let pause = store.controls().pauses().await.unwrap();
    assert!(pause[0].paused_by.starts_with(&by), "{pause:?}");
    assert!(!guard.is_cancelled(), "without --cancel the run goes on");

    // --cancel on the same pause: the run stops at its next renewal
    // (heartbeat lease/3 = 3.3s) with reason `paused`.
    let out = leasehold(Some(&url), &["pause", "--job", "held-job", "--cancel", "--json"]).await;
    assert_exit(&out, 0);
    let doc = json(&out);
    assert_eq!(
        (
            doc["scope"].as_str(),
            doc["cancel"].as_bool(),
            doc["already_paused"].as_bool()
        ),
        (Some("job"), Some(true), Some(true)),
        "{doc}"
    );
    assert_eq!(
        (doc["keys"].as_u64(), doc["running"].as_u64()),
        (Some(1), Some(1)),
        "{doc}"
    );
    tokio::time::timeout(Duration::from_secs(10), guard.cancelled())
        .await
        .expect("the pause cancels the run");
    assert_eq!(guard.reason(), Some(CancelReason::Paused));
    // Released, and no replica claims it back.
    let claim = loop {
        let claim = store.claim_run("held-job", "web-9", LONG, Due::Now).await.unwrap();
        if !matches!(claim, Claim::HeldElsewhere { .. }) {
            break claim;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(is_paused(&claim), "{claim:?}");

    // status: paused, its job, the cancelled run.
    let out = leasehold(Some(&url), &["status"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    let row = table_row(&text, "held-job");
    assert_eq!(row[1], "free, paused", "{text}");
    assert_eq!(row[7], "held-job", "the JOB column: {text}");
    assert!(
        row[8].starts_with("cancelled (paused) ") && row[8].ends_with(" ago"),
        "{text}"
    );
    assert_eq!(row[9], "never", "no run succeeded: {text}");
    assert!(text.contains("job \"held-job\""), "the pause is listed: {text}");
    let out = leasehold(Some(&url), &["status", "--json"]).await;
    let doc = json(&out);
    let lease = &doc["leases"][0];
    assert_eq!(
        (lease["job_name"].as_str(), lease["paused"].as_bool()),
        (Some("held-job"), Some(true)),
        "{doc}"
    );
    assert_eq!(lease["last_run"]["outcome"], "cancelled", "{doc}");
    assert_eq!(lease["last_run"]["reason"], "paused", "{doc}");
    assert!(
        lease["last_success_at"].is_null() && lease["last_error"].is_null(),
        "{doc}"
    );
    assert_eq!(doc["pauses"][0]["cancel"], true, "{doc}");

    // Resuming the key alone does not lift its job's pause.
    let out = leasehold(Some(&url), &["resume", "held-job"]).await;
    assert_exit(&out, 4);
    assert!(
        stderr(&out).starts_with("leasehold: resume key \"held-job\": not paused by its own name in ")
            && stderr(&out)
                .contains(": it is paused through its job \"held-job\" (`leasehold resume --job held-job` lifts"),
        "{}",
        stderr(&out)
    );

    // Paused both ways: lifting the key's own pause leaves the job's.
    let out = leasehold(Some(&url), &["pause", "held-job", "--by", "ops"]).await;
    assert_exit(&out, 0);
    let out = leasehold(Some(&url), &["resume", "held-job"]).await;
    assert_exit(&out, 0);
    assert!(
        stdout(&out).starts_with("resume key \"held-job\": resumed: ")
            && stdout(&out).contains(
                " woken\n  but it stays paused: its job \"held-job\" is paused too (`leasehold resume --job held-job`)\n"
            ),
        "{}",
        stdout(&out)
    );
    let claim = store.claim_run("held-job", "web-9", LONG, Due::Now).await.unwrap();
    assert!(is_paused(&claim), "{claim:?}");

    let out = leasehold(Some(&url), &["resume", "--job", "held-job", "--json"]).await;
    assert_exit(&out, 0);
    assert_eq!(json(&out)["outcome"], "resumed");
    assert!(store.controls().pauses().await.unwrap().is_empty());
    rt.shutdown().await;
}

/// `leasehold pause` is one statement: it checks the schema version,
/// pauses, says whether the target was paused already and records the
/// action, all in the pause's own statement. On a schema newer than this
/// CLI knows it writes nothing and says to upgrade.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_is_one_statement_and_refuses_a_newer_schema_writing_nothing() {
    use leasehold_testkit::stats::{reset_statement_stats, statement_texts, statement_totals};

    let db = migrated_db().await;
    let url = url(&db);
    let store = LeaseStore::new(db.pool.clone());
    released_row(&store, "tenant-1:sync", "web-1").await;

    reset_statement_stats(&db.pool).await;
    let out = leasehold(Some(&url), &["pause", "tenant-1:sync", "--by", "alice@laptop"]).await;
    assert_exit(&out, 0);
    let sent = statement_totals(&db.pool, "%").await.calls;
    let texts = statement_texts(&db.pool).await;
    assert_eq!(sent, 1, "the pause sent {sent} statements: {texts:#?}");
    assert!(
        texts.first().is_some_and(|t| t.contains("INSERT INTO leasehold_pause")),
        "{texts:#?}"
    );

    // A newer leasehold migrated the database: this CLI writes nothing.
    sqlx::query("INSERT INTO leasehold_schema_version (version, description) VALUES ($1, 'from the future')")
        .bind(leasehold::schema::SCHEMA_VERSION + 1)
        .execute(&db.pool)
        .await
        .unwrap();
    let before: i64 = sqlx::query_scalar("SELECT count(*) FROM leasehold_action")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    for args in [
        &["pause", "--job", "sync"][..],
        &["resume", "tenant-1:sync"],
        &["trigger", "tenant-1:sync"],
        &["forget", "tenant-1:sync"],
        &["revoke", "tenant-1:sync", "--force"],
        &["limit", "set", "sync", "2"],
    ] {
        let out = leasehold(Some(&url), args).await;
        assert_exit(&out, 1);
        assert!(
            stderr(&out).contains("newer than this CLI knows") && stderr(&out).contains("upgrade leasehold-cli"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let after: i64 = sqlx::query_scalar("SELECT count(*) FROM leasehold_action")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(after, before, "no action recorded");
    let pauses: i64 = sqlx::query_scalar("SELECT count(*) FROM leasehold_pause")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(pauses, 1, "only the first pause: the key's");
    assert!(store.get("tenant-1:sync").await.unwrap().is_some(), "not forgotten");
}
