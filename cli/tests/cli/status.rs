//! `leasehold status`: held, free and never-run leases, as a table and as
//! JSON.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_held_and_free_leases_as_a_table_and_as_json() {
    let db = migrated_db().await;
    let url = url(&db);
    let store = LeaseStore::new(db.pool.clone());
    let alpha = acquired(store.claim("alpha", "web-1", LONG).await.unwrap());
    let beta = acquired(store.claim("beta", "web-2", LONG).await.unwrap());
    assert!(store.release("beta", "web-2", beta.fence).await.unwrap());
    acquired(store.claim("other:gamma", "web-3", LONG).await.unwrap());

    let out = leasehold(Some(&url), &["status"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("3 leases (2 held, 1 free)"), "{text}");
    let header = text.lines().find(|l| l.starts_with("KEY")).expect("a header");
    for column in ["STATE", "HOLDER", "FENCE", "ACQUIRED", "EXPIRES", "NEXT DUE"] {
        assert!(header.contains(column), "{header}");
    }
    let row = table_row(&text, "alpha");
    assert_eq!(
        &row[..4],
        ["alpha", "held", "web-1", &alpha.fence.to_string()],
        "{text}"
    );
    assert!(row[5].starts_with("in 9m") || row[5].starts_with("in 10m"), "{row:?}");
    assert_eq!(row[6], "now", "never scheduled: due now");
    let row = table_row(&text, "beta");
    assert_eq!(&row[..4], ["beta", "free", "web-2", &beta.fence.to_string()], "{text}");
    assert!(row[5].starts_with("expired ") && row[5].ends_with(" ago"), "{row:?}");
    // Columns line up: every row's FENCE column ends where the header's does.
    let fence_end = header.find("FENCE").unwrap() + "FENCE".len();
    for key in ["alpha", "beta", "other:gamma"] {
        let line = text.lines().find(|l| l.starts_with(key)).unwrap();
        let fence = table_row(&text, key)[3].clone();
        assert_eq!(line[..fence_end].trim_end(), line[..fence_end].to_owned(), "{text}");
        assert!(line[..fence_end].ends_with(&fence), "{text}");
    }

    let out = leasehold(Some(&url), &["status", "--json"]).await;
    assert_exit(&out, 0);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert!(doc["server_now"].is_string(), "{doc}");
    let leases = doc["leases"].as_array().expect("a leases array");
    assert_eq!(leases.len(), 3);
    let a = &leases[0];
    assert_eq!(a["key"], "alpha");
    assert_eq!(a["holder"], "web-1");
    assert_eq!(a["fence"], alpha.fence);
    assert_eq!(a["state"], "held");
    assert!(a["expires_in_seconds"].as_f64().unwrap() > 500.0, "{a}");
    assert!(a["next_due_at"].is_null() && a["due_in_seconds"].is_null(), "{a}");
    assert!(a["acquired_at"].is_string() && a["expires_at"].is_string(), "{a}");
    let b = &leases[1];
    assert_eq!((b["key"].as_str(), b["state"].as_str()), (Some("beta"), Some("free")));
    assert!(b["expires_in_seconds"].as_f64().unwrap() <= 0.0, "{b}");

    let out = leasehold(Some(&url), &["status", "--json", "--prefix", "other:"]).await;
    assert_exit(&out, 0);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let keys: Vec<&str> = doc["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["other:gamma"]);

    // LIKE wildcards in a prefix are literal.
    let out = leasehold(Some(&url), &["status", "--prefix", "%"]).await;
    assert_exit(&out, 0);
    assert!(stdout(&out).contains("0 leases with prefix \"%\""), "{}", stdout(&out));
}

/// A job registered by a runtime but never run shows as such: no holder,
/// fence or acquisition time that would suggest a run took place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_a_never_run_job_as_never_run() {
    let db = migrated_db().await;
    let url = url(&db);
    let (guards, _rx) = mpsc::unbounded_channel();
    let runtime = Runtime::builder(db.pool.clone())
        .register(Holding { guards })
        .start()
        .await
        .unwrap();
    runtime.shutdown().await;
    let out = leasehold(Some(&url), &["status"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    let row = table_row(&text, "held-job");
    assert_eq!(
        row,
        [
            "held-job",
            "never-run",
            "-",
            "-",
            "-",
            "-",
            "never",
            "held-job",
            "-",
            "-",
            "-"
        ],
        "{text}"
    );
    let out = leasehold(Some(&url), &["status", "--json"]).await;
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(doc["leases"][0]["state"], "never-run", "{doc}");
}

/// Rows stored before names were checked, one per class of hidden
/// character (`leasehold_testkit::hostile`): `status` shows each key,
/// holder and job name escaped, so no line is reordered (U+2069 then
/// U+202E) and no name displays as another (`admin` + INVISIBLE TIMES).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_every_hidden_character_of_stored_rows_escaped() {
    use leasehold_testkit::hostile;

    let db = migrated_db().await;
    let url = url(&db);
    let store = LeaseStore::new(db.pool.clone());
    let samples = hostile::samples();
    for (i, (class, sample)) in samples.iter().enumerate() {
        let plain = format!("plain-{i}");
        assert!(
            store.claim(sample, "web-1", LONG).await.is_err(),
            "the library refuses a key with {class}"
        );
        acquired(store.claim(&plain, "web-1", LONG).await.unwrap());
        // Written past the library, as an older version would have.
        sqlx::query("UPDATE leasehold_lease SET key = $1, holder = $2, job_name = $3 WHERE key = $4")
            .bind(format!("{i}-{sample}"))
            .bind(sample)
            .bind(sample)
            .bind(&plain)
            .execute(&db.pool)
            .await
            .expect("store a hostile row");
    }

    let out = leasehold(Some(&url), &["status"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    for line in text.lines() {
        let hidden: Vec<String> = line
            .chars()
            .filter(|c| leasehold_rules::hidden_char(*c))
            .map(|c| format!("U+{:04X}", u32::from(c)))
            .collect();
        assert!(hidden.is_empty(), "{hidden:?} printed raw in {line:?}");
    }
    for (class, sample) in &samples {
        let c = sample
            .chars()
            .find(|c| leasehold_rules::hidden_char(*c))
            .expect("a hidden character");
        let escaped = match c {
            '\n' | '\r' | '\t' => c.escape_debug().to_string(),
            c => format!("\\u{{{:x}}}", u32::from(c)),
        };
        assert!(
            text.matches(&escaped).count() >= 3,
            "{class}: key, holder and job name shown escaped as {escaped}:\n{text}"
        );
    }
}

/// A job with a time limit of 15 minutes that waits to be cancelled.
struct Limited {
    guards: mpsc::UnboundedSender<FenceGuard>,
}

impl FencedJob for Limited {
    fn name(&self) -> &str {
        "limited-job"
    }

    fn settings(&self) -> JobSettings {
        JobSettings::new(Schedule::Manual)
            .lease(Duration::from_secs(10))
            .timeout(Duration::from_secs(15 * 60))
    }

    async fn run(&self, guard: FenceGuard) -> Result<(), JobError> {
        let _ = self.guards.send(guard.clone());
        guard.cancelled().await;
        Ok(())
    }
}

/// A run in progress shows how long it has been going against its time
/// limit, in the state column and in `--json`; a job without a limit says
/// so; a lease held with the low-level `claim` is no run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_each_run_in_progress_against_its_time_limit() {
    let db = migrated_db().await;
    let url = url(&db);
    let (tx, mut guards) = mpsc::unbounded_channel();
    let rt = Runtime::builder(db.pool.clone())
        .holder("a")
        .poll_interval(Duration::from_millis(100))
        .register(Limited { guards: tx.clone() })
        .register(Holding { guards: tx })
        .start()
        .await
        .expect("runtime starts");
    rt.trigger("limited-job").await.unwrap();
    rt.trigger("held-job").await.unwrap();
    for _ in 0..2 {
        tokio::time::timeout(Duration::from_secs(10), guards.recv())
            .await
            .expect("the jobs start within 10s")
            .expect("a guard");
    }
    let store = LeaseStore::new(db.pool.clone());
    acquired(store.claim("by-hand", "tool", LONG).await.unwrap());

    let out = leasehold(Some(&url), &["status"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    let state = &table_row(&text, "limited-job")[1];
    assert!(
        state.starts_with("held, running ") && state.ends_with(" of 15m"),
        "{text}"
    );
    let state = &table_row(&text, "held-job")[1];
    assert!(
        state.starts_with("held, running ") && state.ends_with(" (no limit)"),
        "{text}"
    );
    assert_eq!(table_row(&text, "by-hand")[1], "held", "{text}");

    let out = leasehold(Some(&url), &["status", "--json"]).await;
    assert_exit(&out, 0);
    let doc = json(&out);
    let lease = |key: &str| {
        doc["leases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["key"] == key)
            .unwrap_or_else(|| panic!("no {key} in {doc}"))
            .clone()
    };
    let limited = lease("limited-job");
    let going = limited["running_for_seconds"].as_f64().expect("a run in progress");
    assert!((0.0..60.0).contains(&going), "{limited}");
    assert_eq!(limited["timeout_seconds"].as_f64(), Some(900.0), "{limited}");
    let unlimited = lease("held-job");
    assert!(unlimited["running_for_seconds"].as_f64().is_some(), "{unlimited}");
    assert!(unlimited["timeout_seconds"].is_null(), "{unlimited}");
    let by_hand = lease("by-hand");
    assert!(
        by_hand["running_for_seconds"].is_null() && by_hand["timeout_seconds"].is_null(),
        "{by_hand}"
    );
    rt.shutdown().await;
}
