//! Job-level actions, pauses and limits in the console: a job's page
//! pauses, resumes and triggers all its keys; a key paused through its job
//! says so; every pause in force is listed, a key's with no lease row
//! included; every fleet-wide limit is listed with its runs in progress,
//! keys waiting and longest wait.

use axum::Router;
use axum::http::StatusCode;
use leasehold::console::ConsoleOptions;
use leasehold::{
    operator::{Operator, Target},
    store::LeaseStore,
};

use super::http::{Page, console, enc, get, post};
use crate::support::{self, LONG, replica};

/// The console with a hook that trusts an `x-user` header.
fn behind_proxy(pool: &sqlx::PgPool) -> Router {
    console(
        pool,
        ConsoleOptions::new().authorize(|req| req.headers.get("x-user")?.to_str().ok().map(String::from)),
    )
}

/// Confirms `action` on `subject` (`key=…` or `job=…`) as alice and posts
/// it: the answer of the POST.
async fn act(app: &Router, subject: (&str, &str), action: &str) -> Page {
    let (field, name) = subject;
    let asked = get(
        app,
        &format!("/confirm?{field}={}&action={action}", enc(name)),
        &[("x-user", "alice")],
    )
    .await;
    assert_eq!(asked.status, StatusCode::OK, "{}", asked.body);
    let csrf = asked.csrf();
    post(
        app,
        "/action",
        &[(field, name), ("action", action), ("csrf", &csrf)],
        &[("x-user", "alice"), ("sec-fetch-site", "same-origin")],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_paused_resumed_and_triggered_from_its_page() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let jobs = support::idle_manual_jobs(&["billing:acme", "billing:zeta", "reindex:all"]);
    let runtime = replica(&db, "replica-1", 2, jobs).await;
    let app = behind_proxy(&db.pool);

    let page = get(&app, "/job?name=billing", &[("x-user", "alice")]).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert_eq!(page.listed_keys(), ["billing:acme", "billing:zeta"]);
    assert!(
        page.body.contains("href=\"confirm?job=billing&amp;action=pause\""),
        "{}",
        page.body
    );

    let asked = get(&app, "/confirm?job=billing&action=pause", &[("x-user", "alice")]).await;
    assert!(
        asked
            .body
            .contains("<strong id=\"confirm-job\"><bdi>billing</bdi></strong>"),
        "{}",
        asked.body
    );
    assert!(!asked.body.contains("confirm-key"), "a job's confirmation names no key");
    let paused = act(&app, ("job", "billing"), "pause").await;
    assert_eq!(paused.status, StatusCode::SEE_OTHER, "{}", paused.body);
    assert_eq!(paused.location(), "/job?name=billing");
    let pauses = store.controls().pauses().await.expect("pauses");
    assert_eq!(pauses.len(), 1);
    assert_eq!((&pauses[0].target, pauses[0].keys), (&Target::job("billing"), 2));
    assert_eq!(
        store.records().actions("billing:acme", 10).await.expect("actions")[0].actor,
        "alice"
    );

    // The key says which pause holds it back and where to lift it; a
    // key-level Resume, which could not, is not offered.
    let key = get(
        &app,
        &format!("/key?key={}", enc("billing:acme")),
        &[("x-user", "alice")],
    )
    .await;
    assert!(
        key.body
            .contains("through its job <a id=\"paused-job\" href=\"job?name=billing\"><bdi>billing</bdi></a>"),
        "{}",
        key.body
    );
    assert!(!key.body.contains("id=\"action-resume\""), "no Resume that cannot work");
    let job_page = get(&app, "/job?name=billing", &[("x-user", "alice")]).await;
    assert!(
        job_page.body.contains("id=\"action-resume\""),
        "the job's page resumes it"
    );

    let resumed = act(&app, ("job", "billing"), "resume").await;
    assert_eq!(resumed.location(), "/job?name=billing");
    assert!(store.controls().pauses().await.expect("pauses").is_empty());
    let again = act(&app, ("job", "billing"), "resume").await;
    assert_eq!(again.location(), "/job?name=billing");

    let triggered = act(&app, ("job", "billing"), "trigger").await;
    assert_eq!(triggered.location(), "/job?name=billing");
    for key in ["billing:acme", "billing:zeta"] {
        let actions = store.records().actions(key, 10).await.expect("actions");
        assert!(
            actions.iter().any(|a| a.action == "trigger" && a.actor == "alice"),
            "{key}: {actions:?}"
        );
    }
    assert!(
        !store
            .records()
            .actions("reindex:all", 10)
            .await
            .expect("actions")
            .iter()
            .any(|a| a.action == "trigger"),
        "another job's key is left alone"
    );
    let refused = get(&app, "/confirm?job=billing&action=force-revoke", &[("x-user", "alice")]).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "a job has no forced revoke");
    assert!(
        refused
            .body
            .contains("A job cannot be force-revoked: revoke its keys one by one."),
        "{}",
        refused.body
    );
    runtime.shutdown().await;
}

#[tokio::test]
async fn every_pause_in_force_is_listed_and_a_key_without_a_row_keeps_its_message() {
    let (db, store) = support::store().await;
    store.claim("ledger", "replica-1", LONG).await.expect("claim");
    let op = Operator::new(store.clone(), "bob").expect("operator");
    op.pause(&Target::key("ledger").unwrap(), false).await.expect("pause");
    op.pause(&Target::job("invoices"), true).await.expect("pause");
    let app = behind_proxy(&db.pool);

    // An operator pauses a key no runtime registered yet.
    let done = act(&app, ("key", "ghost"), "pause").await;
    assert_eq!(done.location(), "/key?key=ghost");
    let shown = get(&app, done.location(), &[("x-user", "alice")]).await;
    assert_eq!(shown.status, StatusCode::OK, "{}", shown.body);
    assert!(shown.body.contains("<p id=\"flash\">Paused.</p>"), "{}", shown.body);
    assert!(shown.body.contains("id=\"no-row\""));
    assert!(
        shown.body.contains("id=\"action-resume\""),
        "its pause can be lifted from here"
    );

    let leases = get(&app, "/", &[("x-user", "alice")]).await;
    let panel = leases
        .body
        .split("<table id=\"pauses\">")
        .nth(1)
        .expect("the pauses panel");
    let listed: Vec<&str> = panel
        .split("data-name=\"")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap_or_default())
        .collect();
    assert_eq!(
        listed,
        ["ghost", "ledger", "invoices"],
        "keys first, then jobs, as the CLI lists them"
    );
    let ghost = panel
        .split("data-name=\"ghost\"")
        .nth(1)
        .expect("ghost")
        .split("</tr>")
        .next()
        .expect("row");
    assert!(ghost.contains("no lease row"), "{ghost}");
    assert!(
        ghost.contains("href=\"confirm?key=ghost&amp;action=resume\""),
        "{ghost}"
    );

    let resumed = act(&app, ("key", "ghost"), "resume").await;
    let shown = get(&app, resumed.location(), &[("x-user", "alice")]).await;
    assert_eq!(shown.status, StatusCode::OK);
    assert!(shown.body.contains("Resumed"), "{}", shown.body);
    assert_eq!(
        get(&app, "/key?key=ghost", &[]).await.status,
        StatusCode::NOT_FOUND,
        "nothing left to show"
    );
}

/// The row of `job` in the leases page's table of limits.
fn limit_row<'a>(page: &'a Page, job: &str) -> &'a str {
    page.body
        .split("<table id=\"limits\">")
        .nth(1)
        .expect("the limits panel")
        .split(&format!("data-job=\"{job}\""))
        .nth(1)
        .unwrap_or_else(|| panic!("no row of {job} in\n{}", page.body))
        .split("</tr>")
        .next()
        .expect("a row")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fleet_limit_in_force_is_listed_with_its_runs_and_waiting_keys() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let jobs = support::idle_manual_jobs(&["report:a", "report:b", "report:c", "billing:acme"]);
    replica(&db, "replica-1", 2, jobs).await.shutdown().await;
    let app = behind_proxy(&db.pool);

    let leases = get(&app, "/", &[]).await;
    assert_eq!(leases.status, StatusCode::OK);
    assert!(
        !leases.body.contains("id=\"limits"),
        "no limit, no panel: {}",
        leases.body
    );
    let job_page = get(&app, "/job?name=report", &[]).await;
    assert!(
        job_page
            .body
            .contains("<dd id=\"job-limit\"><span class=\"muted\">none"),
        "{}",
        job_page.body
    );

    // Runs of report:a and report:b in progress, then a limit of 3 (each
    // run takes a place); report:c due with no replica to claim it.
    for key in ["report:a", "report:b"] {
        store.claim(key, "replica-2", LONG).await.expect("claim");
    }
    let controls = store.controls();
    assert_eq!(
        controls.set_limit("report", 3, "alice@laptop").await.expect("set"),
        leasehold::operator::LimitSet::Set { previous: None }
    );
    controls.trigger("report:c").await.expect("trigger");
    // A limit whose names hold a text-direction override.
    sqlx::query("INSERT INTO leasehold_limit (job_name, fleet_limit, set_by) VALUES ($1, 5, $2)")
        .bind("evil\u{202e}troper")
        .bind("mallory\u{202e}")
        .execute(&db.pool)
        .await
        .expect("insert");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;

    let leases = get(&app, "/", &[]).await;
    assert_eq!(leases.status, StatusCode::OK);
    assert!(
        leases
            .body
            .contains("<h2 id=\"limits-in-force\">Fleet-wide limits</h2>"),
        "{}",
        leases.body
    );
    let report = limit_row(&leases, "report");
    assert!(
        report.contains("<a href=\"job?name=report\"><bdi>report</bdi></a>"),
        "{report}"
    );
    assert!(
        report.contains("<td class=\"running-limit\">2 / 3</td>"),
        "two runs hold two of three places: {report}"
    );
    assert!(report.contains("<td class=\"waiting\">1</td>"), "{report}");
    assert!(
        report.contains("<td class=\"longest-wait\">1 s</td>")
            || report.contains("<td class=\"longest-wait\">2 s</td>"),
        "waiting since triggered: {report}"
    );
    assert!(report.contains("<bdi>alice@laptop</bdi>"), "{report}");
    assert!(
        !leases.body.contains("data-job=\"billing\""),
        "only limited jobs are listed"
    );
    // Hidden characters are shown escaped, never as they are.
    assert!(!leases.body.contains('\u{202e}'), "{}", leases.body);
    let evil = limit_row(&leases, "evil\\u{202e}troper");
    assert!(evil.contains("<bdi>evil\\u{202e}troper</bdi>"), "{evil}");
    assert!(evil.contains("<bdi>mallory\\u{202e}</bdi>"), "{evil}");
    assert!(evil.contains("<td class=\"waiting\">0</td>"), "{evil}");
    assert!(evil.contains("none waits"), "{evil}");

    let job_page = get(&app, "/job?name=report", &[]).await;
    let limit = job_page
        .body
        .split("<dd id=\"job-limit\">")
        .nth(1)
        .expect("the job's limit")
        .split("</dd>")
        .next()
        .expect("dd");
    assert!(limit.starts_with("2 / 3 running, 1 waiting (longest "), "{limit}");
    assert!(limit.contains("<bdi>alice@laptop</bdi>"), "{limit}");

    // Lowered under its runs in progress: said; cleared: gone.
    controls.set_limit("report", 1, "bob").await.expect("set");
    let leases = get(&app, "/", &[]).await;
    let report = limit_row(&leases, "report");
    assert!(report.contains("2 / 1 <span class=\"muted\""), "{report}");
    assert!(report.contains("(lowered)"), "{report}");
    assert!(controls.clear_limit("evil\u{202e}troper").await.expect("clear"));
    assert!(controls.clear_limit("report").await.expect("clear"));
    let leases = get(&app, "/", &[]).await;
    assert!(!leases.body.contains("id=\"limits"), "{}", leases.body);
}
