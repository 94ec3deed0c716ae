//! The tenure timeline on the key and job pages, and the strips of recent
//! outcomes on the leases page: one bar per recorded run in the window,
//! with its fence; operators' revokes and pauses marked; hostile names
//! stay text inside the SVG; a bad window is the client's mistake.

use axum::http::StatusCode;
use leasehold::console::ConsoleOptions;
use leasehold::{
    operator::{Operator, Revoke, Revoked, Target},
    store::{LeaseStore, RunRecord},
};

use super::http::{console, enc, get};
use crate::support::{self, LONG, replica};

/// A holder whose name is HTML: it must stay text in the timeline.
const HOSTILE_HOLDER: &str = "<img src=x onerror=alert(1)>";

/// Runs `run_nos` of `key` as a fleet runs them: each a claim by the next
/// of `holders`, then the release that records the run.
async fn runs(store: &LeaseStore, key: &str, run_nos: std::ops::RangeInclusive<i64>, holders: &[&str]) {
    for (i, run_no) in run_nos.enumerate() {
        let holder = holders[i % holders.len()];
        let lease = store
            .claim(key, holder, LONG)
            .await
            .expect("claim")
            .acquired()
            .expect("a free key");
        assert!(store.release_recorded(&lease, run_no, 100).await.expect("release"));
    }
}

/// Records runs `run_nos` of `key` as of 1970, claim and release alike:
/// runs outside any window.
async fn old_runs(db: &support::TestDb, store: &LeaseStore, key: &str, run_nos: std::ops::RangeInclusive<i64>) {
    store.record_runs_for_test(key, run_nos, 100).await.expect("runs");
    // The recorder dates their claims 1970 and their releases now.
    sqlx::query("UPDATE leasehold_run SET ended_at = started_at WHERE key = $1 AND holder = 'test-recorder'")
        .bind(key)
        .execute(&db.pool)
        .await
        .expect("date the releases");
}

/// The runs of `key` whose release the last hour saw, by the server clock.
async fn in_the_last_hour(store: &LeaseStore, key: &str) -> Vec<RunRecord> {
    let now = store.server_now().await.expect("server clock");
    let history = store.records().history(key, 100).await.expect("history");
    history
        .into_iter()
        .filter(|r| r.ended_at >= now - chrono::TimeDelta::hours(1))
        .collect()
}

/// The page's timeline: its `<svg>` element, as served.
fn svg(body: &str) -> &str {
    let start = body.find("<svg class=\"timeline\"").expect("a timeline on the page");
    let len = body[start..].find("</svg>").expect("the timeline's end");
    &body[start..start + len]
}

#[tokio::test]
async fn the_key_page_draws_each_run_of_the_last_hour_with_its_fence_and_marks_the_forced_revoke() {
    let (db, store) = support::store().await;
    let key = "ledger:<b>eu</b>";
    // Two runs from long ago: outside any window.
    old_runs(&db, &store, key, 1..=2).await;
    runs(&store, key, 3..=8, &["replica-a", HOSTILE_HOLDER]).await;
    let op = Operator::new(store.clone(), "alice").expect("operator");
    op.pause(&Target::key(key).unwrap(), false).await.expect("pause");
    op.resume(&Target::key(key).unwrap()).await.expect("resume");
    store.claim(key, "replica-a", LONG).await.expect("claim");
    let Revoked::Ended { fence: forced, .. } = op.revoke(key, Revoke::Force, &[]).await.expect("revoke") else {
        panic!("the forced revoke ends the tenure")
    };
    let app = console(&db.pool, ConsoleOptions::new());

    let page = get(&app, &format!("/key?key={}", enc(key)), &[]).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let svg = svg(&page.body);
    let recent = in_the_last_hour(&store, key).await;
    assert_eq!(recent.len(), 6, "the history's runs of the last hour");
    assert_eq!(
        svg.matches("<g class=\"run ").count(),
        recent.len(),
        "one bar per run: {svg}"
    );
    assert!(svg.contains("data-runs=\"6\""));
    for run in &recent {
        assert!(
            svg.contains(&format!("<g class=\"run succeeded\" data-fence=\"{}\">", run.fence)),
            "run {} with its fence {}",
            run.run_no,
            run.fence
        );
        assert!(svg.contains(&format!("run {} · fence {} · ", run.run_no, run.fence)));
    }
    assert_eq!(
        svg.matches("<rect class=\"lane\"").count(),
        2,
        "one lane per holder: {svg}"
    );
    assert_eq!(svg.matches("<g class=\"mark force-revoke\">").count(), 1);
    assert!(svg.contains(&format!("fence {forced} handed out")), "{svg}");
    assert_eq!(
        svg.matches("<g class=\"pause\">").count(),
        1,
        "the pause, until its resume"
    );
    assert!(!svg.contains("<img"), "the holder's markup is not markup: {svg}");
    assert!(svg.contains("&lt;img src=x onerror=alert(1)&gt;"), "it is text: {svg}");
}

#[tokio::test]
async fn a_window_that_is_not_one_is_refused_with_a_400_naming_the_parameter() {
    let (db, store) = support::store().await;
    runs(&store, "ledger", 1..=1, &["replica-a"]).await;
    let app = console(&db.pool, ConsoleOptions::new());
    for uri in [
        "/key?key=ledger&window=8d",
        "/key?key=ledger&window=soon",
        "/job?name=ledger&window=0m",
    ] {
        let page = get(&app, uri, &[]).await;
        assert_eq!(page.status, StatusCode::BAD_REQUEST, "{uri}");
        assert!(page.body.contains("(`window`)"), "{uri}: {}", page.body);
        assert!(page.body.contains("30m, 6h or 2d"), "{uri}: {}", page.body);
    }
    let week = get(&app, "/key?key=ledger&window=7d", &[]).await;
    assert_eq!(week.status, StatusCode::OK);
    assert!(
        week.body.contains("<strong>7d</strong>"),
        "the week is the window shown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_page_draws_the_runs_of_all_its_keys_their_revokes_and_its_pauses() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let jobs = support::idle_manual_jobs(&["billing:acme", "billing:zeta", "reindex:all"]);
    // The runtime registers the keys with their job, then leaves.
    replica(&db, "replica-1", 2, jobs).await.shutdown().await;
    runs(&store, "billing:acme", 1..=3, &["replica-a", "replica-b"]).await;
    runs(&store, "billing:zeta", 1..=2, &["replica-b"]).await;
    runs(&store, "reindex:all", 1..=4, &["replica-a"]).await;
    let op = Operator::new(store.clone(), "alice").expect("operator");
    let (billing, reindex) = (Target::job("billing"), Target::job("reindex"));
    // The job paused and resumed, a key of it force-revoked, and paused
    // again; meanwhile another job paused and resumed, its key
    // force-revoked, and one key of the job paused by its own name.
    op.pause(&billing, false).await.expect("pause");
    op.resume(&billing).await.expect("resume");
    op.pause(&reindex, false).await.expect("pause");
    op.resume(&reindex).await.expect("resume");
    let mut forced = Vec::new();
    for key in ["billing:acme", "reindex:all"] {
        store.claim(key, "replica-a", LONG).await.expect("claim");
        match op.revoke(key, Revoke::Force, &[]).await.expect("revoke") {
            Revoked::Ended { fence, .. } => forced.push(fence),
            other => panic!("the forced revoke ends the tenure: {other:?}"),
        }
    }
    op.pause(&Target::key("billing:zeta").unwrap(), false)
        .await
        .expect("pause");
    op.pause(&billing, false).await.expect("pause");
    let app = console(&db.pool, ConsoleOptions::new());

    let page = get(&app, "/job?name=billing", &[]).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let svg = svg(&page.body);
    assert_eq!(
        svg.matches("<g class=\"run ").count(),
        5,
        "the job's five runs, no other: {svg}"
    );
    assert_eq!(
        svg.matches("\u{2068}billing:acme\u{2069} · run ").count(),
        3,
        "bars name their key"
    );
    assert_eq!(svg.matches("<rect class=\"lane\"").count(), 2, "one lane per holder");
    assert_eq!(
        svg.matches("<g class=\"pause\">").count(),
        2,
        "the job's pauses, to its resume and in force; no other job's, no key's own: {svg}"
    );
    assert_eq!(
        svg.matches("class=\"mark ").count(),
        1,
        "its key's revoke, no other job's: {svg}"
    );
    assert!(
        svg.contains(&format!(
            "force-revoke of \u{2068}billing:acme\u{2069} by \u{2068}alice\u{2069}: fence {} handed out",
            forced[0]
        )),
        "{svg}"
    );
}

#[tokio::test]
async fn the_leases_page_shows_each_keys_latest_outcomes_as_a_strip() {
    let (db, store) = support::store().await;
    runs(&store, "a-busy", 1..=12, &["replica-a"]).await;
    runs(&store, "b-quiet", 1..=3, &["replica-a"]).await;
    store.claim("c-never", "replica-a", LONG).await.expect("claim");
    let app = console(&db.pool, ConsoleOptions::new());

    support::reset_statement_stats(&db.pool).await;
    let page = get(&app, "/", &[]).await;
    assert_eq!(
        support::statement_calls(&db.pool, "WITH ORDINALITY AS k(key, at)").await,
        1,
        "one statement reads the strips of the whole page"
    );
    let strip = |key: &str| -> Option<String> {
        let row = page.body.split(&format!("data-key=\"{key}\"")).nth(1)?;
        let row = row.split("</tr>").next()?;
        let cell = row.split("<td class=\"recent\">").nth(1)?;
        let runs = cell.split("data-runs=\"").nth(1)?;
        Some(runs.split('"').next()?.to_owned())
    };
    assert_eq!(strip("a-busy").as_deref(), Some("10"), "the latest ten of twelve");
    assert_eq!(
        strip("b-quiet").as_deref(),
        Some("3"),
        "its own three runs, no other key's"
    );
    assert_eq!(strip("c-never"), None, "no run, no strip");
}

#[tokio::test]
async fn recent_runs_reads_each_keys_latest_runs_since_a_time_in_one_call() {
    let (db, store) = support::store().await;
    old_runs(&db, &store, "a", 1..=3).await;
    runs(&store, "a", 4..=5, &["replica-a"]).await;
    runs(&store, "b", 1..=2, &["replica-b"]).await;
    runs(&store, "c", 1..=1, &["replica-c"]).await;
    let hour_ago = store.server_now().await.expect("clock") - chrono::TimeDelta::hours(1);

    let read = |since, per_key| {
        let store = store.clone();
        async move {
            let runs = store
                .records()
                .recent_runs(&["b", "a"], since, per_key)
                .await
                .expect("recent runs");
            runs.iter().map(|r| (r.key.clone(), r.run_no)).collect::<Vec<_>>()
        }
    };
    let pairs = |v: &[(&str, i64)]| v.iter().map(|(k, n)| (k.to_string(), *n)).collect::<Vec<_>>();
    assert_eq!(
        read(None, 10).await,
        pairs(&[("b", 2), ("b", 1), ("a", 5), ("a", 4), ("a", 3), ("a", 2), ("a", 1)])
    );
    assert_eq!(read(None, 1).await, pairs(&[("b", 2), ("a", 5)]));
    assert_eq!(
        read(Some(hour_ago), 10).await,
        pairs(&[("b", 2), ("b", 1), ("a", 5), ("a", 4)]),
        "runs that ended before `since` are left out"
    );
    let err = store
        .records()
        .recent_runs(&["a"], None, 0)
        .await
        .expect_err("no run asked for");
    assert!(err.to_string().contains("ask for 1 to 10000 runs"), "{err}");
}
