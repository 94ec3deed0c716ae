//! `leasehold check`: clock skew, round trip, the timeline, the fence
//! sequence and replication.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_skew_and_a_clean_round_trip() {
    let db = migrated_db().await;
    let url = url(&db);
    let out = leasehold(None, &["check", "--database-url", &url]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    let version = leasehold::schema::SCHEMA_VERSION;
    assert!(text.contains(&format!("schema   ok    version {version} ")), "{text}");
    assert!(text.contains("clock    ok") && text.contains("skew "), "{text}");
    assert!(text.contains("rates are off by up to ρ = 1 %"), "{text}");
    assert!(text.contains("lease    ok    round trip ok"), "{text}");
    assert!(text.contains("all checks passed"), "{text}");
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM leasehold_lease")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "the scratch row is deleted");
}

/// `check` tells the operator what a failover would do: the server's
/// timeline, where the fence sequence is and whether it jumped, and that a
/// role whose commits do not wait for a standby can lose its last commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_the_timeline_the_fence_sequence_and_asynchronous_replication() {
    let db = migrated_db().await;
    let url = url(&db);
    let out = leasehold(Some(&url), &["check"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    let (timeline, next): (i64, i64) =
        sqlx::query_as("SELECT leasehold_timeline_id(), last_value + 1 FROM leasehold_fence_seq")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(
        text.contains(&format!(
            "failover ok    timeline {timeline}; fence sequence next at {next}, no jump on it"
        )),
        "{text}"
    );
    assert!(
        text.contains("asynchronous: synchronous_standby_names is empty"),
        "{text}"
    );

    // As after a restore onto another cluster: the check's own claims draw
    // the first fences on this timeline, and the report shows the jump.
    sqlx::query("UPDATE leasehold_timeline SET timeline = timeline + 1000")
        .execute(&db.pool)
        .await
        .unwrap();
    let out = leasehold(Some(&url), &["check"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(
        text.contains(&format!("timeline {timeline}; fence sequence next at ")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            " moved from {next} to {} when fences were first drawn",
            next + (1 << 32)
        )),
        "{text}"
    );
}
