//! `leasehold history`: recorded runs, newest first, with their errors.

use super::*;

/// Fails its first run (with a long, multi-line error), then succeeds.
struct FailsOnce {
    runs: Arc<AtomicU32>,
}

const LONG_ERROR: &str = "upstream said no\n  while posting invoice 42: the ledger service answered 503 \
                          Service Unavailable after 3 attempts; retry later or check the ledger's health page";

impl FencedJob for FailsOnce {
    fn name(&self) -> &str {
        "invoices"
    }

    fn key(&self) -> String {
        "invoices:acme".to_owned()
    }

    fn settings(&self) -> JobSettings {
        JobSettings::new(Schedule::Manual)
            .lease(Duration::from_secs(10))
            .retry(Duration::from_millis(10), Duration::from_millis(10))
    }

    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        if self.runs.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(LONG_ERROR.into());
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_shows_recorded_runs_newest_first() {
    let db = migrated_db().await;
    let url = url(&db);
    let store = LeaseStore::new(db.pool.clone());
    let rt = Runtime::builder(db.pool.clone())
        .holder("web-1")
        .poll_interval(Duration::from_millis(100))
        .register(FailsOnce {
            runs: Arc::new(AtomicU32::new(0)),
        })
        .start()
        .await
        .expect("runtime starts");

    // Registered, no run yet: a row, no history.
    let out = leasehold(Some(&url), &["history", "invoices:acme"]).await;
    assert_exit(&out, 0);
    assert_eq!(stdout(&out), "no runs recorded for \"invoices:acme\"\n");

    rt.trigger("invoices:acme").await.expect("trigger");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while store.records().history("invoices:acme", 10).await.unwrap().len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "two runs recorded within 15s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    rt.shutdown().await;
    let runs = store.records().history("invoices:acme", 10).await.unwrap();
    assert_eq!(runs.len(), 2, "{runs:?}");

    let out = leasehold(Some(&url), &["history", "invoices:acme"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(
        text.starts_with("history of \"invoices:acme\" (job invoices): 2 runs recorded, newest first; server time "),
        "{text}"
    );
    let header = text
        .lines()
        .find(|l| l.trim_start().starts_with("RUN"))
        .expect("a header");
    for column in ["FENCE", "HOLDER", "SLOT", "STARTED", "DURATION", "OUTCOME", "ERROR"] {
        assert!(header.contains(column), "{header}");
    }
    let rows: Vec<Vec<String>> = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("RUN"))
        .skip(1)
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
    let (newest, oldest) = (&rows[0], &rows[1]);
    assert_eq!(newest[0], runs[0].run_no.to_string(), "newest first: {text}");
    assert_eq!(
        &newest[1..4],
        [runs[0].fence.to_string().as_str(), "web-1", "-"],
        "{text}"
    );
    assert!(newest[4].ends_with(" ago)"), "absolute and relative start: {text}");
    assert_eq!(newest[6], "succeeded", "{text}");
    assert_eq!(newest.len(), 7, "no error: {text}");
    assert_eq!(oldest[6], "failed", "{text}");
    // The error, on one line, cut for the table.
    let error = &oldest[7];
    assert!(
        error.starts_with("upstream said no while posting invoice 42: "),
        "{text}"
    );
    assert!(error.ends_with('…') && error.chars().count() <= 60, "{error}");

    let out = leasehold(Some(&url), &["history", "invoices:acme", "--json"]).await;
    assert_exit(&out, 0);
    let doc = json(&out);
    assert_eq!(doc["key"], "invoices:acme");
    assert!(doc["server_now"].is_string(), "{doc}");
    let json_runs = doc["runs"].as_array().expect("a runs array");
    assert_eq!(json_runs.len(), 2);
    assert_eq!(json_runs[0]["outcome"], "succeeded");
    assert_eq!(json_runs[0]["run_no"], runs[0].run_no);
    assert_eq!(json_runs[0]["holder"], "web-1");
    assert_eq!(json_runs[0]["job_name"], "invoices");
    assert!(json_runs[0]["error"].is_null() && json_runs[0]["scheduled_for"].is_null());
    assert!(json_runs[0]["duration_seconds"].as_f64().unwrap() >= 0.0);
    assert_eq!(json_runs[1]["outcome"], "failed");
    assert_eq!(json_runs[1]["error"], LONG_ERROR, "in full in JSON");

    let out = leasehold(Some(&url), &["history", "invoices:acme", "--limit", "1"]).await;
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains(": the latest 1 run (--limit 1), newest first"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("succeeded") && !stdout(&out).contains("failed"),
        "{}",
        stdout(&out)
    );

    // status: the latest run, success and error of the key.
    let out = leasehold(Some(&url), &["status"]).await;
    let text = stdout(&out);
    let row = table_row(&text, "invoices:acme");
    assert_eq!(row[7], "invoices", "{text}");
    assert!(row[8].starts_with("succeeded ") && row[8].ends_with(" ago"), "{text}");
    assert!(row[9].ends_with(" ago"), "{text}");
    assert!(
        row[10].contains(" ago: upstream said no while") && row[10].ends_with('…'),
        "{text}"
    );
    let out = leasehold(Some(&url), &["status", "--json"]).await;
    let lease = json(&out)["leases"][0].clone();
    assert_eq!(lease["last_run"]["outcome"], "succeeded", "{lease}");
    assert_eq!(lease["last_success_at"], lease["last_run"]["ended_at"], "{lease}");
    assert_eq!(lease["last_error"]["message"], LONG_ERROR, "{lease}");
    assert_eq!(lease["last_error"]["outcome"], "failed", "{lease}");
    assert!(lease["last_error"]["at"].is_string(), "{lease}");

    // A key with neither a row nor runs.
    let out = leasehold(Some(&url), &["history", "no-such-key"]).await;
    assert_exit(&out, 4);
    assert!(
        stderr(&out).contains("no lease with key \"no-such-key\""),
        "{}",
        stderr(&out)
    );
}

/// Holds its run until cancelled, with a short lease.
struct HoldsUntilCancelled;

impl FencedJob for HoldsUntilCancelled {
    fn name(&self) -> &str {
        "reports"
    }

    fn key(&self) -> String {
        "reports:acme".to_owned()
    }

    fn settings(&self) -> JobSettings {
        JobSettings::new(Schedule::Manual).lease(Duration::from_secs(2))
    }

    async fn run(&self, guard: FenceGuard) -> Result<(), JobError> {
        guard.cancelled().await;
        Ok(())
    }
}

/// A run whose release never came (its replica cut off from the database)
/// is recorded by the replica that takes the key over; `history` shows it
/// as lost, with the holder that lost it, in the table and in JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_shows_a_run_whose_release_never_came_as_lost() {
    let db = migrated_db().await;
    let url = url(&db);
    let store = LeaseStore::new(db.pool.clone());
    let replica = |holder: &str| {
        Runtime::builder(db.pool.clone())
            .holder(holder)
            .poll_interval(Duration::from_millis(100))
            .register(HoldsUntilCancelled)
            .start()
    };
    let cut_off = replica("web-1").await.expect("runtime starts");
    cut_off.trigger("reports:acme").await.expect("trigger");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while store.get("reports:acme").await.unwrap().is_none_or(|l| !l.is_held()) {
        assert!(tokio::time::Instant::now() < deadline, "the run starts within 10s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cut_off.faults().partition(true);
    let successor = replica("web-2").await.expect("runtime starts");
    successor.trigger("reports:acme").await.expect("trigger");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while store.records().history("reports:acme", 10).await.unwrap().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lost run recorded within 20s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let out = leasehold(Some(&url), &["history", "reports:acme"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    let lost = text
        .lines()
        .find(|l| l.contains("lost (lease expired without a release)"))
        .unwrap_or_else(|| panic!("no lost run in\n{text}"));
    assert!(lost.contains("web-1"), "the holder that lost it: {text}");
    let out = leasehold(Some(&url), &["history", "reports:acme", "--json"]).await;
    let run = json(&out)["runs"][0].clone();
    assert_eq!(
        (run["outcome"].as_str(), run["reason"].as_str(), run["holder"].as_str()),
        (Some("lost"), Some("expired"), Some("web-1")),
        "{run}"
    );
    successor.shutdown().await;
    cut_off.faults().partition(false);
    cut_off.shutdown().await;
}

/// A run taken over early because its replica's liveness session ended
/// (the replica cut off, its session killed) shows why:
/// `lost (its replica's session ended without a release)`, reason
/// `session_ended`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_shows_a_run_taken_over_after_its_replicas_session_ended() {
    let db = migrated_db().await;
    let url = url(&db);
    let store = LeaseStore::new(db.pool.clone());
    let replica = |holder: &str| {
        Runtime::builder(db.pool.clone())
            .holder(holder)
            .poll_interval(Duration::from_millis(100))
            .register(HoldsUntilCancelled)
            .start()
    };
    let cut_off = replica("web-1").await.expect("runtime starts");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while sqlx::query_scalar::<_, i64>("SELECT count(*) FROM leasehold_replica")
        .fetch_one(&db.pool)
        .await
        .unwrap()
        == 0
    {
        assert!(tokio::time::Instant::now() < deadline, "registered within 10s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cut_off.trigger("reports:acme").await.expect("trigger");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while store.get("reports:acme").await.unwrap().is_none_or(|l| !l.is_held()) {
        assert!(tokio::time::Instant::now() < deadline, "the run starts within 10s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let successor = replica("web-2").await.expect("runtime starts");
    cut_off.faults().partition(true);
    sqlx::query("SELECT pg_terminate_backend(pid) FROM leasehold_replica WHERE holder = 'web-1'")
        .execute(&db.pool)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while store.records().history("reports:acme", 10).await.unwrap().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lost run recorded within 20s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let out = leasehold(Some(&url), &["history", "reports:acme"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    let lost = text
        .lines()
        .find(|l| l.contains("lost (its replica's session ended without a release)"))
        .unwrap_or_else(|| panic!("no run lost to a session's end in\n{text}"));
    assert!(lost.contains("web-1"), "the holder that lost it: {text}");
    let out = leasehold(Some(&url), &["history", "reports:acme", "--json"]).await;
    let run = json(&out)["runs"][0].clone();
    assert_eq!(
        (run["outcome"].as_str(), run["reason"].as_str(), run["holder"].as_str()),
        (Some("lost"), Some("session_ended"), Some("web-1")),
        "{run}"
    );
    successor.shutdown().await;
    cut_off.faults().partition(false);
    cut_off.shutdown().await;
}
