//! The console in a real browser: headless Chromium over WebDriver
//! ([`driver`]), a fleet of two replicas on a test database, and the
//! console nested under a path prefix, as a service would mount it.
//!
//! One scenario, driven the way an operator clicks: the leases page lists
//! every key; pausing a scheduled key from its page stops its runs (its
//! timeline then draws one bar per recorded run, fence for fence, and the
//! pause) and resuming restarts them; triggering a manual key runs it and its page
//! records who did it; a job paused and resumed from its page holds its
//! key back meanwhile (its timeline draws its key's runs and the pause);
//! keys that are HTML stay text, in their timelines' SVG too, and nothing
//! they carry runs. A third shows an action's message once (kept by the
//! auto-refresh, gone on a reload) and follows a change of who is acting
//! without a reload.
//!
//! A second scenario plays the other web service on the same host: the
//! browser hands it the console's cookie, which it cannot use, and a name
//! re-pointed at the console's address gets nothing.
//!
//! With `LEASEHOLD_SCREENSHOTS=DIR` set, it also saves the leases, key, job
//! and fleet pages as PNGs there (`scripts/console-screenshots.sh`, for
//! `docs/console/`).

mod driver;

use std::path::PathBuf;
use std::time::Duration;

use axum::Router;
use fantoccini::elements::Element;
use fantoccini::{Client, Locator};
use leasehold::console::{self, ConsoleOptions};
use leasehold::{Schedule, operator::Operator, store::LeaseStore};
use tokio::time::Instant;

use crate::support::{self, Runs, eventually, eventually_async, job, quick, replica};
use driver::Browser;

use super::http::get;

/// Where the console is mounted in the test's service.
const MOUNT: &str = "/ops/leasehold";
/// The actor the test's `authorize` hook names.
const ACTOR: &str = "browser-test";

/// A key scheduled every second.
const SCHEDULED: &str = "digest:eu";
/// A key whose runs go on until the fleet stops: always held.
const LONG_RUNNING: &str = "export:warehouse";
/// A key that runs only when triggered.
const MANUAL: &str = "reindex:search";
/// Keys that are HTML: they must show as text, and run nothing.
const SCRIPT_KEY: &str = "<script>alert(1)</script>";
const IMG_KEY: &str = "<img src=x onerror=\"window.__xss=1\">";

/// How long the scenario waits for anything the fleet or the browser does.
const WITHIN: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_pauses_resumes_and_triggers_jobs_from_the_browser_and_keys_stay_text() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let scheduled = Runs::default();
    let manual = Runs::default();
    let work = Duration::from_millis(100);
    let mut jobs = vec![
        job(
            SCHEDULED,
            quick(Schedule::every(Duration::from_secs(1)), Duration::from_secs(2)),
            scheduled.body(work),
        ),
        job(
            MANUAL,
            quick(Schedule::Manual, Duration::from_secs(2)),
            manual.body(work),
        ),
        job(
            SCRIPT_KEY,
            quick(Schedule::Manual, Duration::from_secs(2)),
            Runs::default().body(work),
        ),
        job(
            IMG_KEY,
            quick(Schedule::Manual, Duration::from_secs(2)),
            Runs::default().body(work),
        ),
    ];
    let long_running = Runs::default();
    // Nothing waits for this lease to expire: a long one keeps a stall of
    // a loaded machine from moving the run the pages are checked against.
    jobs.push(job(
        LONG_RUNNING,
        quick(Schedule::every(Duration::from_secs(1)), Duration::from_secs(30)),
        long_running.body(Duration::from_secs(3600)),
    ));
    let fleet = [
        replica(&db, "replica-a", 3, jobs.clone()).await,
        replica(&db, "replica-b", 3, jobs).await,
    ];
    scheduled.wait_started(1, WITHIN).await;

    let options = ConsoleOptions::new()
        .authorize(|_| Some(ACTOR.to_owned()))
        // The test reloads pages itself: no refresh in the middle of a click.
        .refresh(Duration::ZERO);
    let app = Router::new().nest_service(MOUNT, console::router(db.pool.clone(), options));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the console");
    let addr = listener.local_addr().expect("console address");
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let home = format!("http://{addr}{MOUNT}/");

    let browser = Browser::start().await;
    let c = &browser.client;

    // The leases page lists every key, hostile ones included, as text.
    c.goto(&home).await.expect("open the leases page");
    let keys = lease_keys(c).await;
    for key in [SCHEDULED, LONG_RUNNING, MANUAL, SCRIPT_KEY, IMG_KEY] {
        assert!(keys.iter().any(|k| k == key), "{key:?} is not listed: {keys:?}");
    }
    for key in [SCRIPT_KEY, IMG_KEY] {
        let cell = cell(&lease_row(c, key).await, "key").await;
        assert_eq!(cell, key, "the key shows as text");
    }
    assert_nothing_ran(c, "the leases page").await;
    // A run in progress: its key is held, with its holder and fence.
    long_running.wait_started(1, WITHIN).await;
    let (holder, fence) = eventually_async(WITHIN, || async {
        c.refresh().await.expect("reload the leases page");
        let row = lease_row(c, LONG_RUNNING).await;
        // `held`, then how long the run has been going against its limit.
        let state = cell(&row, "state").await;
        if !(state.starts_with("held") && state.contains("running")) {
            return None;
        }
        Some((cell(&row, "holder").await, cell(&row, "fence").await))
    })
    .await;
    let run = &long_running.all()[0];
    assert_eq!((holder, fence), (run.holder.clone(), run.fence.to_string()));

    // Pause the scheduled key: its link, "pause", confirm.
    open_key(c, SCHEDULED).await;
    act(c, "pause").await;
    let at_pause = scheduled.all().len();
    // No run starts for three periods of its schedule (more than a lease);
    // one claimed before the pause committed may still start.
    let paused = quiet(&scheduled, Duration::from_secs(3)).await;
    assert!(
        paused <= at_pause + 1,
        "runs went on after the pause: {at_pause} when paused, {paused} later"
    );
    assert_eq!(
        text(c, Locator::Id("state")).await,
        "paused",
        "the key page says paused"
    );
    // Its runs are over: the timeline draws each of them, and the pause.
    reload_key(c).await;
    assert_eq!(
        timeline_fences(c).await,
        history_fences(&store, SCHEDULED).await,
        "one bar per recorded run, with its fence"
    );
    c.find(Locator::Css("svg#timeline g.pause"))
        .await
        .expect("the pause in force is shaded on the timeline");
    c.goto(&home).await.expect("back to the leases page");
    assert_eq!(cell(&lease_row(c, SCHEDULED).await, "state").await, "paused");

    // Resume it the same way: runs start again.
    open_key(c, SCHEDULED).await;
    act(c, "resume").await;
    eventually(WITHIN, || (scheduled.all().len() > paused).then_some(())).await;
    c.refresh().await.expect("reload the key page");
    assert_ne!(text(c, Locator::Id("state")).await, "paused");
    let actions = text(c, Locator::Id("actions")).await;
    for expected in ["pause", "resume", ACTOR] {
        assert!(
            actions.contains(expected),
            "no {expected:?} in the actions table:\n{actions}"
        );
    }

    // Trigger the manual key: it runs, and its page records the action.
    c.goto(&home).await.expect("back to the leases page");
    open_key(c, MANUAL).await;
    assert!(manual.all().is_empty(), "a manual key runs only when triggered");
    act(c, "trigger").await;
    manual.wait_started(1, WITHIN).await;
    let trigger = eventually_async(WITHIN, || async {
        c.refresh().await.expect("reload the key page");
        let rows = c
            .find_all(Locator::Css("table#actions tr"))
            .await
            .expect("actions rows");
        for row in rows {
            let row = row.text().await.expect("action row text");
            if row.contains("trigger") {
                return Some(row);
            }
        }
        None
    })
    .await;
    assert!(trigger.contains(ACTOR), "the trigger names its actor: {trigger:?}");
    // Its run is recorded once the run ends.
    eventually_async(WITHIN, || async {
        c.refresh().await.expect("reload the key page");
        let runs = c.find_all(Locator::Css("table#runs tr.run")).await.expect("runs rows");
        (!runs.is_empty()).then_some(())
    })
    .await;

    // What a Grafana data link opens: the job's page, with its keys. A
    // pause of the job holds its key back, and the key's page leads to the
    // job's page, the only place that lifts it.
    c.goto(&format!("{home}job?name=reindex"))
        .await
        .expect("open a job link");
    assert_eq!(lease_keys(c).await, [MANUAL]);
    assert_eq!(
        timeline_fences(c).await,
        history_fences(&store, MANUAL).await,
        "the job's timeline draws its key's runs"
    );
    act(c, "pause").await;
    assert_eq!(text(c, Locator::Id("job-state")).await, "paused");
    c.find(Locator::Css("svg#timeline g.pause"))
        .await
        .expect("the job's pause is shaded on its timeline");
    open_key(c, MANUAL).await;
    assert_eq!(text(c, Locator::Id("state")).await, "paused");
    assert!(
        c.find(Locator::Id("action-resume")).await.is_err(),
        "a key paused through its job offers no key-level Resume"
    );
    c.find(Locator::Id("paused-job"))
        .await
        .expect("a link to the job's page")
        .click()
        .await
        .expect("follow it");
    c.wait()
        .at_most(WITHIN)
        .for_element(Locator::Id("job"))
        .await
        .expect("the job's page");
    act(c, "resume").await;
    open_key(c, MANUAL).await;
    assert_ne!(text(c, Locator::Id("state")).await, "paused");

    // The hostile keys' own pages and a confirmation page: text again,
    // in their timelines too (each has run once).
    let op = Operator::new(store.clone(), ACTOR).expect("an operator");
    for key in [SCRIPT_KEY, IMG_KEY] {
        op.trigger(key).await.expect("trigger a hostile key");
    }
    for key in [SCRIPT_KEY, IMG_KEY] {
        eventually_async(WITHIN, || async {
            (!history_fences(&store, key).await.is_empty()).then_some(())
        })
        .await;
    }
    for key in [SCRIPT_KEY, IMG_KEY] {
        c.goto(&home).await.expect("back to the leases page");
        open_key(c, key).await;
        assert_eq!(text(c, Locator::Id("key")).await, key);
        assert_eq!(timeline_fences(c).await, history_fences(&store, key).await);
        let title = c
            .execute(
                "return document.querySelector('svg#timeline > title').textContent",
                vec![],
            )
            .await
            .expect("read the timeline's title");
        assert!(
            title.as_str().is_some_and(|t| t.contains(key)),
            "the key is text in the SVG: {title:?}"
        );
        assert_nothing_ran(c, "a hostile key's page").await;
        c.find(Locator::Id("action-trigger"))
            .await
            .expect("a trigger link")
            .click()
            .await
            .expect("open the confirmation page");
        c.wait()
            .at_most(WITHIN)
            .for_element(Locator::Id("confirm-form"))
            .await
            .expect("a confirmation form");
        assert_nothing_ran(c, "a hostile key's confirmation page").await;
    }

    // The fleet page shows the replicas.
    c.goto(&format!("{home}fleet")).await.expect("open the fleet page");
    let holders = c
        .find_all(Locator::Css("table#fleet tr.holder"))
        .await
        .expect("fleet rows");
    assert!(!holders.is_empty(), "the fleet page lists the replicas that ran");
    let mut rows = Vec::new();
    for holder in holders {
        let row = holder.text().await.expect("fleet row text");
        assert!(row.contains("replica-"), "{row}");
        rows.push(row);
    }
    let long_runs = long_running.all();
    assert_eq!(long_runs.len(), 1, "the long run lost its lease: {long_runs:?}");
    let run = &long_runs[0];
    assert!(
        rows.iter().any(|r| r.contains(&run.holder) && r.contains(LONG_RUNNING)),
        "the fleet page shows {} running {LONG_RUNNING}: {rows:?}",
        run.holder
    );

    if let Some(dir) = std::env::var_os("LEASEHOLD_SCREENSHOTS") {
        screenshots(c, &home, PathBuf::from(dir)).await;
    }

    browser.quit().await;
    for rt in fleet {
        rt.shutdown().await;
    }
    server.abort();
}

/// The `data-key` of every row of the leases table.
async fn lease_keys(c: &Client) -> Vec<String> {
    let rows = c
        .find_all(Locator::Css("table#leases tr.lease"))
        .await
        .expect("lease rows");
    let mut keys = Vec::new();
    for row in rows {
        keys.push(row.attr("data-key").await.expect("data-key").unwrap_or_default());
    }
    keys
}

/// The leases table's row of `key` (its `data-key`, as the browser decoded it).
async fn lease_row(c: &Client, key: &str) -> Element {
    for row in c
        .find_all(Locator::Css("table#leases tr.lease"))
        .await
        .expect("lease rows")
    {
        if row.attr("data-key").await.expect("data-key").as_deref() == Some(key) {
            return row;
        }
    }
    panic!("no row for {key:?} in the leases table");
}

/// The text of a row's cell of class `class`.
async fn cell(row: &Element, class: &str) -> String {
    row.find(Locator::Css(&format!("td.{class}")))
        .await
        .unwrap_or_else(|e| panic!("no td.{class}: {e}"))
        .text()
        .await
        .expect("cell text")
}

/// The text of the element `at` on the current page, read again if the
/// auto-refresh replaced it while it was being read.
async fn text(c: &Client, at: Locator<'_>) -> String {
    c.find(at)
        .await
        .unwrap_or_else(|e| panic!("no {at:?} on the page: {e}"));
    eventually_async(WITHIN, || text_now(c, at)).await
}

/// The text of the element `at`, or `None` if it is not there or was
/// replaced while being read (the auto-refresh swaps `<main>` and the
/// header's viewer): for checks that wait for the page to change.
async fn text_now(c: &Client, at: Locator<'_>) -> Option<String> {
    c.find(at).await.ok()?.text().await.ok()
}

/// Reloads the key page and waits for it.
async fn reload_key(c: &Client) {
    c.refresh().await.expect("reload the key page");
    c.wait()
        .at_most(WITHIN)
        .for_element(Locator::Id("key"))
        .await
        .expect("the key page");
}

/// The fence of each bar of the timeline on the current page that stands
/// for a recorded run, in the page's order (the history's, newest first).
async fn timeline_fences(c: &Client) -> Vec<i64> {
    let bars = c
        .find_all(Locator::Css("svg#timeline g.run"))
        .await
        .expect("timeline bars");
    let mut fences = Vec::new();
    for bar in bars {
        let fence = bar.attr("data-fence").await.expect("data-fence");
        fences.push(fence.and_then(|f| f.parse().ok()).expect("a bar's fence"));
    }
    fences
}

/// The fences of `key`'s recorded runs, newest first.
async fn history_fences(store: &LeaseStore, key: &str) -> Vec<i64> {
    let runs = store.records().history(key, 1000).await.expect("the key's history");
    runs.iter().map(|r| r.fence).collect()
}

/// From the leases page, follows the link of `key` to its page.
async fn open_key(c: &Client, key: &str) {
    let row = lease_row(c, key).await;
    row.find(Locator::Css("td.key a"))
        .await
        .expect("a link on the key")
        .click()
        .await
        .expect("follow the key's link");
    let title = c
        .wait()
        .at_most(WITHIN)
        .for_element(Locator::Id("key"))
        .await
        .expect("the key page");
    assert_eq!(title.text().await.expect("key title"), key);
}

/// On a key page, takes `action`: its link, then the confirmation form.
/// What a browser session on the console gives another web service on
/// the same host: browsers send cookies to every port of a host, so the
/// other service receives the session cookie; relayed under its own `Host`
/// the console treats it as read-only. And a page whose name is re-pointed
/// at the console's address (DNS rebinding) is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cookie_leaked_to_another_port_and_a_rebound_name_get_nothing() {
    const TOKEN: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";
    let (db, store) = support::store().await;
    store.claim("ledger", "replica-1", support::LONG).await.expect("claim");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the console");
    let addr = listener.local_addr().expect("console address");
    // The other service: shows the cookies the browser sends it.
    let other = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let other_addr = other.local_addr().expect("other address");
    let echo = Router::new().route(
        "/",
        axum::routing::get(|headers: axum::http::HeaderMap| async move {
            headers
                .get("cookie")
                .and_then(|c| c.to_str().ok())
                .unwrap_or("")
                .to_owned()
        }),
    );
    // The other port's name passes the Host check too, so that the relay
    // meets the session's own binding to the Host it was issued on.
    let options = ConsoleOptions::new()
        .token(TOKEN)
        .expect("a strong token")
        .allowed_hosts([addr.to_string(), other_addr.to_string()])
        .refresh(Duration::ZERO);
    let app = console::router(db.pool.clone(), options);
    let served = app.clone();
    let server = tokio::spawn(async move { axum::serve(listener, served).await });
    let other_server = tokio::spawn(async move { axum::serve(other, echo).await });

    let browser = Browser::start().await;
    let c = &browser.client;
    c.goto(&format!("http://{addr}/login"))
        .await
        .expect("open the login page");
    c.find(Locator::Id("name"))
        .await
        .expect("name")
        .send_keys("bob")
        .await
        .expect("type");
    c.find(Locator::Id("token"))
        .await
        .expect("token")
        .send_keys(TOKEN)
        .await
        .expect("type");
    c.find(Locator::Id("login"))
        .await
        .expect("button")
        .click()
        .await
        .expect("log in");
    c.wait()
        .at_most(WITHIN)
        .for_element(Locator::Id("actor"))
        .await
        .expect("logged in");

    c.goto(&format!("http://{other_addr}/"))
        .await
        .expect("open the other service");
    let leaked = text(c, Locator::Css("body")).await;
    let session = leaked
        .split("; ")
        .find(|c| c.starts_with("leasehold_console="))
        .unwrap_or_else(|| panic!("the browser sends the cookie to the other port: {leaked:?}"))
        .to_owned();
    let own_host = addr.to_string();
    let as_console = get(&app, "/", &[("cookie", &session), ("host", &own_host)]).await;
    assert!(as_console.body.contains("acting as"), "the cookie is the live session");
    let relay_host = other_addr.to_string();
    let relayed = [("cookie", session.as_str()), ("host", relay_host.as_str())];
    let page = get(&app, "/", &relayed).await;
    assert!(!page.body.contains("acting as"), "relayed, the cookie is read-only");
    let confirm = get(&app, "/confirm?key=ledger&action=pause", &relayed).await;
    assert_eq!(
        confirm.status,
        axum::http::StatusCode::FORBIDDEN,
        "no CSRF token for the relay"
    );

    c.goto(&format!("http://rebind.attacker.example:{}/", addr.port()))
        .await
        .expect("open the rebound name");
    let rebound = c.source().await.expect("page source");
    assert!(rebound.contains("does not answer to that host"), "{rebound}");
    assert!(!rebound.contains("ledger"), "{rebound}");

    browser.quit().await;
    server.abort();
    other_server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actions_message_shows_once_and_the_header_follows_who_acts() {
    let (db, store) = support::store().await;
    store.claim("ledger", "replica-1", support::LONG).await.expect("claim");
    // The hook's answer changes while the page stays open, as when the
    // service's own session ends.
    let actor = std::sync::Arc::new(std::sync::Mutex::new(Some(ACTOR.to_owned())));
    let hook = actor.clone();
    let options = ConsoleOptions::new()
        .authorize(move |_| hook.lock().ok()?.clone())
        .refresh(Duration::from_secs(1));
    let app = Router::new().nest_service(MOUNT, console::router(db.pool.clone(), options));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the console");
    let addr = listener.local_addr().expect("console address");
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let browser = Browser::start().await;
    let c = &browser.client;
    c.goto(&format!("http://{addr}{MOUNT}/key?key=ledger"))
        .await
        .expect("open the key page");
    act(c, "pause").await;
    let url = c.current_url().await.expect("url");
    assert!(!url.as_str().contains("done="), "the address keeps the message: {url}");
    // The auto-refresh replaces <main> (marked here, so that its
    // replacement shows) and keeps the message, however slowly it is read.
    c.execute("document.querySelector('main').dataset.old = 'yes'", vec![])
        .await
        .expect("mark the page's <main>");
    eventually_async(WITHIN, || async {
        let fresh = c
            .execute("return document.querySelector('main').dataset.old !== 'yes'", vec![])
            .await
            .ok()?;
        (fresh == true).then_some(())
    })
    .await;
    assert!(
        text(c, Locator::Id("flash")).await.starts_with("Paused"),
        "the refresh keeps the action's message"
    );
    c.refresh().await.expect("reload");
    c.wait()
        .at_most(WITHIN)
        .for_element(Locator::Id("key"))
        .await
        .expect("the key page");
    assert!(
        c.find(Locator::Id("flash")).await.is_err(),
        "a reload shows the message again"
    );

    assert!(text(c, Locator::Id("viewer")).await.contains(ACTOR));
    *actor.lock().expect("lock") = None;
    eventually_async(WITHIN, || async {
        let who = text_now(c, Locator::Id("viewer")).await?;
        who.contains("read-only").then_some(())
    })
    .await;

    browser.quit().await;
    server.abort();
}

/// Returns once the key page shows the action's flash message.
async fn act(c: &Client, action: &str) {
    let link = Locator::Id(&format!("action-{action}"));
    c.find(link)
        .await
        .unwrap_or_else(|e| panic!("no {action} link on the key page: {e}"));
    // The auto-refresh may replace <main> between finding the link and
    // clicking it (a stale element): find it again in the fresh one.
    eventually_async(WITHIN, || async { c.find(link).await.ok()?.click().await.ok() }).await;
    c.wait()
        .at_most(WITHIN)
        .for_element(Locator::Id("confirm"))
        .await
        .expect("a confirm button")
        .click()
        .await
        .expect("confirm");
    let flash = c
        .wait()
        .at_most(WITHIN)
        .for_element(Locator::Id("flash"))
        .await
        .expect("a flash message after the action");
    let flash = flash.text().await.expect("flash text");
    assert!(!flash.is_empty(), "{action}: an empty flash message");
}

/// Waits until no run has started for `period`; returns how many runs
/// there are then. Panics if runs keep starting for [`WITHIN`].
async fn quiet(runs: &Runs, period: Duration) -> usize {
    let deadline = Instant::now() + WITHIN;
    let mut count = runs.all().len();
    let mut since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = runs.all().len();
        if now != count {
            count = now;
            since = Instant::now();
        } else if since.elapsed() >= period {
            return count;
        }
        assert!(Instant::now() < deadline, "runs kept starting: {count} so far");
    }
}

/// No script of a key ran on the current page: no alert is open, and the
/// `onerror` payload did not set `window.__xss`.
async fn assert_nothing_ran(c: &Client, page: &str) {
    if let Ok(alert) = c.get_alert_text().await {
        panic!("{page}: an alert is open: {alert:?}");
    }
    let xss = c
        .execute("return typeof window.__xss", vec![])
        .await
        .expect("run a check script");
    assert_eq!(xss, "undefined", "{page}: a key's onerror handler ran");
}

/// Saves the leases, key, job and fleet pages as PNGs in `dir`: the whole page
/// (600 to 1,400 px high: the top of a long page), 1280 px wide.
async fn screenshots(c: &Client, home: &str, dir: PathBuf) {
    std::fs::create_dir_all(&dir).expect("create the screenshot directory");
    let pages = [
        ("leases.png", home.to_owned()),
        ("key.png", format!("{home}key?key=digest%3Aeu&window=1m")),
        ("job.png", format!("{home}job?name=digest&window=1m")),
        ("fleet.png", format!("{home}fleet")),
    ];
    for (file, url) in pages {
        c.goto(&url).await.expect("open a page to screenshot");
        // The page is at least as high as the viewport: measure it in the smallest one.
        driver::set_viewport(c, driver::WIDTH, 600).await;
        let height = c
            .execute("return document.documentElement.scrollHeight", vec![])
            .await
            .expect("read the page height")
            .as_u64()
            .map_or(driver::HEIGHT, |h| u32::try_from(h).unwrap_or(u32::MAX));
        driver::set_viewport(c, driver::WIDTH, height.clamp(600, 1400)).await;
        let png = c.screenshot().await.expect("screenshot");
        std::fs::write(dir.join(file), png).expect("write a screenshot");
        driver::set_viewport(c, driver::WIDTH, driver::HEIGHT).await;
    }
}

/// Issue 42, items 4 and 7: rows stored before names were checked (one
/// per class of hidden character, `leasehold_testkit::hostile`) and a
/// job's error text holding U+2069 then U+202E show every hidden
/// character escaped in what the browser displays — the leases table, a
/// key's page with its runs, tooltips, the title — so none closes its
/// isolate or reorders the row; the outcome strips have accessible names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hidden_characters_show_escaped_and_the_outcome_strips_are_named() {
    use leasehold_testkit::hostile;

    let (db, store) = support::store().await;
    // A key with two recorded runs, the second failed with a hostile error.
    for run_no in 1..=2 {
        let lease = store
            .claim("ledger", "replica-1", support::LONG)
            .await
            .expect("claim")
            .acquired()
            .expect("a free key");
        assert!(store.release_recorded(&lease, run_no, 100).await.expect("release"));
    }
    let evil_error = format!("timeout{}(gnp.exe", hostile::REORDER);
    sqlx::query(
        "UPDATE leasehold_run SET outcome = 'failed', error = $1, holder = $2 WHERE key = 'ledger' AND run_no = 2",
    )
    .bind(&evil_error)
    .bind(hostile::FAKE_ADMIN)
    .execute(&db.pool)
    .await
    .expect("a hostile error text");
    let samples = hostile::samples();
    for (i, (class, sample)) in samples.iter().enumerate() {
        assert!(
            store.claim(sample, "replica-1", support::LONG).await.is_err(),
            "the library refuses a key with {class}"
        );
        let plain = format!("plain-{i}");
        store.claim(&plain, "replica-1", support::LONG).await.expect("claim");
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

    let options = ConsoleOptions::new()
        .authorize(|_| Some(ACTOR.to_owned()))
        .refresh(Duration::ZERO);
    let app = Router::new().nest_service(MOUNT, console::router(db.pool.clone(), options));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the console");
    let addr = listener.local_addr().expect("console address");
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let browser = Browser::start().await;
    let c = &browser.client;

    c.goto(&format!("http://{addr}{MOUNT}/"))
        .await
        .expect("open the leases page");
    assert_nothing_hidden(c, "the leases page").await;
    let keys = lease_keys(c).await;
    for (i, (class, sample)) in samples.iter().enumerate() {
        let shown = leasehold_rules::escape_hidden(sample).into_owned();
        let row = keys
            .iter()
            .find(|k| k.starts_with(&format!("{i}-")))
            .unwrap_or_else(|| panic!("{class}: no row in {keys:?}"));
        let row = lease_row(c, row).await;
        assert_eq!(
            cell(&row, "key").await,
            format!("{i}-{shown}"),
            "{class}: the key as shown"
        );
        assert_eq!(cell(&row, "holder").await, shown, "{class}: the holder as shown");
    }
    // The outcome strip is an image with a name that says the outcomes.
    let strip = lease_row(c, "ledger")
        .await
        .find(Locator::Css("svg.strip"))
        .await
        .expect("an outcome strip");
    assert_eq!(strip.attr("role").await.expect("role").as_deref(), Some("img"));
    assert_eq!(
        strip.attr("aria-label").await.expect("aria-label").as_deref(),
        Some("Last 2 runs, newest first: failed, succeeded"),
        "the strip's accessible name"
    );
    let named = c
        .execute(
            "return [...document.querySelectorAll('svg')].every(s => s.getAttribute('aria-label') || \
             (s.firstElementChild && s.firstElementChild.tagName === 'title' && s.firstElementChild.textContent))",
            vec![],
        )
        .await
        .expect("check the SVGs");
    assert_eq!(named, true, "every SVG on the leases page has a name");

    // The key's page: the run's error text and holder, escaped.
    open_key(c, "ledger").await;
    assert_nothing_hidden(c, "the key's page").await;
    let errors = c
        .find_all(Locator::Css("td.error bdi"))
        .await
        .expect("the runs' error cells");
    let mut shown = Vec::new();
    for e in errors {
        shown.push(e.text().await.expect("error text"));
    }
    assert!(
        shown.iter().any(|e| e == "timeout\\u{2069}\\u{202e}(gnp.exe"),
        "the error text as shown: {shown:?}"
    );
    let page = c.source().await.expect("page source");
    assert!(page.contains("admin\\u{2062}"), "the run's holder is shown escaped");
    let named = c
        .execute(
            "return [...document.querySelectorAll('svg')].every(s => s.getAttribute('aria-label') || \
             (s.firstElementChild && s.firstElementChild.tagName === 'title' && s.firstElementChild.textContent))",
            vec![],
        )
        .await
        .expect("check the SVGs");
    assert_eq!(named, true, "every SVG on the key's page has a name");

    browser.quit().await;
    server.abort();
}

/// Nothing the browser displays on the current page (its text, title,
/// tooltips and accessible names) holds a hidden character, but the
/// layout's own line breaks and tabs in `innerText` and the console's own
/// balanced isolates (U+2068 … U+2069 with nothing hidden between) in
/// tooltips and the title.
async fn assert_nothing_hidden(c: &Client, page: &str) {
    let shown = c
        .execute(
            "return [document.body.innerText, document.title, \
             ...[...document.querySelectorAll('[title],[aria-label]')].flatMap(e => \
                 [e.getAttribute('title') || '', e.getAttribute('aria-label') || '']), \
             ...[...document.querySelectorAll('title')].map(t => t.textContent)].join('\\n')",
            vec![],
        )
        .await
        .expect("read the page");
    let shown = shown.as_str().expect("text").to_owned();
    let mut hidden = Vec::new();
    let mut chars = shown.chars().peekable();
    while let Some(ch) = chars.next() {
        if ch == '\u{2068}' {
            // The console's own isolate: up to its U+2069, nothing hidden.
            let inner: String = chars.by_ref().take_while(|c| *c != '\u{2069}').collect();
            hidden.extend(
                inner
                    .chars()
                    .filter(|c| leasehold_rules::hidden_char(*c) && !"\n\t".contains(*c)),
            );
            continue;
        }
        if leasehold_rules::hidden_char(ch) && !"\n\t".contains(ch) {
            hidden.push(ch);
        }
    }
    let hidden: Vec<String> = hidden.iter().map(|c| format!("U+{:04X}", u32::from(*c))).collect();
    assert!(hidden.is_empty(), "{page}: displayed raw: {hidden:?}");
}
