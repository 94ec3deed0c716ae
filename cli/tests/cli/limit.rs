//! `leasehold limit set|clear|list`: a fleet-wide limit per job, obeyed by
//! a running replica; `status` shows its runs in progress and keys waiting;
//! bad values, unknown jobs and hidden characters are refused.

use super::*;

/// A `report` key whose run hands its guard to the test and holds its
/// lease until cancelled.
struct Report {
    key: String,
    guards: mpsc::UnboundedSender<FenceGuard>,
}

impl FencedJob for Report {
    fn name(&self) -> &str {
        "report"
    }

    fn key(&self) -> String {
        self.key.clone()
    }

    fn settings(&self) -> JobSettings {
        JobSettings::new(Schedule::Manual).lease(Duration::from_secs(10))
    }

    async fn run(&self, guard: FenceGuard) -> Result<(), JobError> {
        let _ = self.guards.send(guard.clone());
        guard.cancelled().await;
        guard.check()?;
        Ok(())
    }
}

/// The next run to start, within 10 s.
async fn started(guards: &mut mpsc::UnboundedReceiver<FenceGuard>) -> FenceGuard {
    tokio::time::timeout(Duration::from_secs(10), guards.recv())
        .await
        .expect("a run starts within 10s")
        .expect("a guard")
}

/// The row of `job` in `limit list --json`.
async fn listed(url: &str, job: &str) -> serde_json::Value {
    let out = leasehold(Some(url), &["limit", "list", "--json"]).await;
    assert_exit(&out, 0);
    let doc = json(&out);
    doc["limits"]
        .as_array()
        .expect("a limits array")
        .iter()
        .find(|l| l["job"] == job)
        .cloned()
        .unwrap_or_else(|| panic!("no limit of {job} in {doc}"))
}

/// Set on a job with a run in progress (which takes a place), list, the
/// keys triggered meanwhile wait and `status` shows them; raised, a waiting
/// key starts; lowered under the runs in progress, none is stopped;
/// cleared, the last waiting key starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_list_status_raise_lower_and_clear_a_fleet_limit() {
    let db = migrated_db().await;
    let url = url(&db);
    let (tx, mut guards) = mpsc::unbounded_channel();
    let mut builder = Runtime::builder(db.pool.clone())
        .holder("web-1")
        .poll_interval(Duration::from_millis(100));
    for k in 1..=3 {
        builder = builder.register(Report {
            key: format!("report:{k}"),
            guards: tx.clone(),
        });
    }
    let rt = builder.start().await.expect("runtime starts");

    let out = leasehold(Some(&url), &["limit", "list"]).await;
    assert_exit(&out, 0);
    assert_eq!(
        stdout(&out),
        "no fleet-wide limit in force (`leasehold limit set JOB N` sets one)\n"
    );
    let out = leasehold(Some(&url), &["status"]).await;
    assert!(!stdout(&out).contains("limit"), "no limit, no table: {}", stdout(&out));
    assert_eq!(
        json(&leasehold(Some(&url), &["status", "--json"]).await)["limits"],
        serde_json::json!([])
    );

    rt.trigger("report:1").await.expect("trigger");
    let first = started(&mut guards).await;
    assert_eq!(first.key(), "report:1");

    // Set while report:1 runs: its run takes the one place.
    let out = leasehold(
        Some(&url),
        &["limit", "set", "report", "1", "--by", "alice@laptop", "--json"],
    )
    .await;
    assert_exit(&out, 0);
    let doc = json(&out);
    assert_eq!(
        (&doc["job"], &doc["outcome"], &doc["limit"], &doc["previous"]),
        (
            &serde_json::json!("report"),
            &serde_json::json!("set"),
            &serde_json::json!(1),
            &serde_json::Value::Null
        ),
        "{doc}"
    );
    assert_eq!(
        (&doc["now"]["running"], &doc["now"]["set_by"]),
        (&serde_json::json!(1), &serde_json::json!("alice@laptop")),
        "{doc}"
    );

    // The replica holds the others back while the place is taken.
    rt.trigger("report:2").await.expect("trigger");
    rt.trigger("report:3").await.expect("trigger");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(guards.try_recv().is_err(), "no run started past the limit");
    let limit = listed(&url, "report").await;
    assert_eq!(
        (&limit["limit"], &limit["running"], &limit["waiting"]),
        (&serde_json::json!(1), &serde_json::json!(1), &serde_json::json!(2)),
        "{limit}"
    );
    let wait = limit["longest_wait_seconds"].as_f64().expect("a wait");
    assert!((1.0..60.0).contains(&wait), "waited since triggered: {limit}");
    assert!(limit["waiting_since"].is_string(), "{limit}");

    let out = leasehold(Some(&url), &["limit", "list"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(text.starts_with("1 fleet-wide limit in force"), "{text}");
    let row = table_row(&text, "report");
    assert_eq!(
        &row[..4],
        ["report", "1", "1", "2"],
        "JOB RUNNING LIMIT WAITING: {text}"
    );
    assert!(row[4].ends_with('s'), "the longest wait: {row:?}");
    assert_eq!(row[5], "alice@laptop", "{text}");

    let out = leasehold(Some(&url), &["status"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(
        text.contains("\n1 fleet-wide limit (at most N runs of a job at once across the fleet; `leasehold limit` changes one):\nJOB "),
        "{text}"
    );
    let header = text
        .lines()
        .find(|l| l.starts_with("JOB "))
        .expect("the limits' header");
    for column in ["RUNNING", "LIMIT", "WAITING", "LONGEST WAIT", "SET BY", "SINCE"] {
        assert!(header.contains(column), "{header}");
    }
    let limit_row = text
        .lines()
        .skip_while(|l| !l.starts_with("JOB "))
        .nth(1)
        .expect("a limit row");
    let cells: Vec<&str> = limit_row.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
    assert_eq!(&cells[..4], ["report", "1", "1", "2"], "{text}");
    let doc = json(&leasehold(Some(&url), &["status", "--json"]).await);
    assert_eq!(
        (
            &doc["limits"][0]["job"],
            &doc["limits"][0]["running"],
            &doc["limits"][0]["waiting"]
        ),
        (
            &serde_json::json!("report"),
            &serde_json::json!(1),
            &serde_json::json!(2)
        ),
        "{doc}"
    );
    // A prefix no key of the job has shows no limit.
    let doc = json(&leasehold(Some(&url), &["status", "--json", "--prefix", "other:"]).await);
    assert_eq!(doc["limits"], serde_json::json!([]), "{doc}");

    // Raised: a waiting key starts.
    let out = leasehold(Some(&url), &["limit", "set", "report", "2", "--by", "alice@laptop"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(
        text.starts_with("report: at most 2 runs at once across the fleet (was 1)\n"),
        "{text}"
    );
    assert!(text.contains("`leasehold limit clear report` lifts it"), "{text}");
    let second = started(&mut guards).await;
    assert_ne!(second.key(), "report:1");
    assert!(
        tokio::time::timeout(Duration::from_millis(1000), guards.recv())
            .await
            .is_err(),
        "the third waits"
    );

    // Lowered under the two runs in progress: neither is stopped.
    let out = leasehold(Some(&url), &["limit", "set", "report", "1"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(
        text.starts_with(
            "report: at most 1 run at once across the fleet (was 2)\n  runs in progress are not stopped: 2 running \
             now, above the limit; no new run starts until 2 of them end\n"
        ),
        "{text}"
    );
    assert!(text.contains("1 key waiting for a place"), "{text}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!first.is_cancelled() && !second.is_cancelled(), "lowering stops no run");
    let limit = listed(&url, "report").await;
    assert_eq!(
        (&limit["limit"], &limit["running"], &limit["waiting"]),
        (&serde_json::json!(1), &serde_json::json!(2), &serde_json::json!(1)),
        "{limit}"
    );
    let set_by = limit["set_by"].as_str().expect("set_by");
    assert!(
        !set_by.is_empty() && set_by != "alice@laptop",
        "--by defaults to the user: {limit}"
    );
    let text = stdout(&leasehold(Some(&url), &["limit", "list"]).await);
    assert!(
        text.contains("more runs than the limit of report: it was lowered while they ran"),
        "{text}"
    );

    // Cleared: the last key starts.
    let out = leasehold(Some(&url), &["limit", "clear", "report"]).await;
    assert_exit(&out, 0);
    assert_eq!(
        stdout(&out),
        "report: no fleet-wide limit any more; its keys start as freely as any other's from each replica's next \
         claim\n"
    );
    let third = started(&mut guards).await;
    assert!(![first.key(), second.key()].contains(&third.key()), "{}", third.key());
    let doc = json(&leasehold(Some(&url), &["limit", "list", "--json"]).await);
    assert_eq!(doc["limits"], serde_json::json!([]), "{doc}");

    // Nothing left to clear: exit 4, in text and in JSON.
    let out = leasehold(Some(&url), &["limit", "clear", "report"]).await;
    assert_exit(&out, 4);
    let err = stderr(&out);
    assert!(
        err.starts_with("leasehold: limit clear \"report\": no fleet-wide limit on \"report\" in ")
            && err.ends_with("(see `leasehold limit list`); nothing to clear\n"),
        "{err}"
    );
    let out = leasehold(Some(&url), &["limit", "clear", "report", "--json"]).await;
    assert_exit(&out, 4);
    assert_eq!(
        json(&out),
        serde_json::json!({"job": "report", "outcome": "not-limited"})
    );
    rt.shutdown().await;
}

/// A limit that is not 1 to 10000, or on a name that is not a job's, is
/// refused before anything is sent, naming the value (exit 2); a job no
/// key has exits 4 and sets nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_limits_and_unknown_jobs_are_refused_naming_the_value() {
    // Nothing listens on port 1: a usage error is found before connecting.
    let nowhere = Some("postgres://u@127.0.0.1:1/d");
    for (args, says) in [
        (&["limit", "set", "report", "0"][..], "invalid limit 0: "),
        (
            &["limit", "set", "report", "-1"],
            "invalid limit -1: below 1; give 1 to 10000 runs at once",
        ),
        (
            &["limit", "set", "report", "10001"],
            "invalid limit 10001: more than 10000",
        ),
        (
            &["limit", "set", "report", "abc"],
            "invalid limit \"abc\": not a whole number",
        ),
        (
            &["limit", "set", "report", "4.5"],
            "invalid limit \"4.5\": not a whole number",
        ),
        (
            &["limit", "set", "report\u{202e}", "4"],
            "invalid job name \"report\\u{202e}\"",
        ),
        (
            &["limit", "set", "re\u{1b}[2Jport", "4"],
            "invalid job name \"re\\u{1b}[2Jport\"",
        ),
        (&["limit", "set", "", "4"], "invalid job name"),
        (
            &["limit", "clear", "report\u{200b}"],
            "invalid job name \"report\\u{200b}\"",
        ),
        (
            &["limit", "set", "report", "4", "--by", "ad\u{202e}min"],
            "invalid --by",
        ),
        (&["limit", "set", "report"], "required"),
        (&["limit"], "Usage"),
    ] {
        let out = leasehold(nowhere, args).await;
        assert_exit(&out, 2);
        let err = stderr(&out);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(
            !err.contains('\u{202e}') && !err.contains('\u{1b}'),
            "hidden characters are escaped: {err:?}"
        );
        assert!(stdout(&out).is_empty(), "{args:?}: {}", stdout(&out));
    }
    let zero = stderr(&leasehold(nowhere, &["limit", "set", "report", "0"]).await);
    assert!(
        zero.contains("`leasehold limit clear JOB`"),
        "says how to lift a limit: {zero}"
    );

    let db = migrated_db().await;
    let url = url(&db);
    let store = LeaseStore::new(db.pool.clone());
    released_row(&store, "report:1", "web-1").await;
    for args in [
        &["limit", "set", "reprot", "4"][..],
        &["limit", "set", "reprot", "4", "--json"],
    ] {
        let out = leasehold(Some(&url), args).await;
        assert_exit(&out, 4);
        let err = stderr(&out);
        assert!(
            err.starts_with("leasehold: limit \"reprot\": no key of a job or kind named \"reprot\" in ")
                && err.ends_with("; nothing was set\n"),
            "{err}"
        );
    }
    let out = leasehold(Some(&url), &["limit", "set", "reprot", "4", "--json"]).await;
    assert_eq!(
        json(&out),
        serde_json::json!({"job": "reprot", "outcome": "unknown-job", "limit": 4})
    );
    assert!(store.controls().limits().await.unwrap().is_empty(), "nothing was set");
}

/// A job's name and who set its limit are printed with every hidden
/// character escaped (a limit set by an older tool, or in SQL, may hold
/// them): no text-direction override or terminal escape reaches the
/// terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_in_limits_are_escaped() {
    let db = migrated_db().await;
    let url = url(&db);
    sqlx::query("INSERT INTO leasehold_limit (job_name, fleet_limit, set_by) VALUES ($1, 3, $2)")
        .bind("evil\u{202e}troper")
        .bind("ops\u{1b}[31m")
        .execute(&db.pool)
        .await
        .unwrap();
    for args in [&["limit", "list"][..], &["status"]] {
        let out = leasehold(Some(&url), args).await;
        assert_exit(&out, 0);
        let text = stdout(&out);
        assert!(
            !text.contains('\u{202e}') && !text.contains('\u{1b}'),
            "{args:?}: {text:?}"
        );
        assert!(text.contains("\"evil\\u{202e}troper\""), "{args:?}: {text}");
        assert!(text.contains("\"ops\\u{1b}[31m\""), "{args:?}: {text}");
    }
    // JSON carries the names as they are (JSON escapes them itself).
    let doc = json(&leasehold(Some(&url), &["limit", "list", "--json"]).await);
    assert_eq!(doc["limits"][0]["job"], "evil\u{202e}troper", "{doc}");
    assert_eq!(doc["limits"][0]["limit"], 3, "{doc}");
}
