//! The console's security checks, each against the request that would get
//! past it if it were missing: read-only without an actor, no action by
//! GET, the actor's own CSRF token, same-origin fetches, the token login,
//! and escaping of everything a user or a job wrote.

use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use leasehold::console::ConsoleOptions;
use leasehold::{KeyState, LeaseStore, Schedule};

use super::http::{Page, console, enc, get, post};
use crate::support::{self, LONG, eventually_async, job, quick, replica};

/// The console with a hook that trusts an `x-user` header (a service's
/// authenticating proxy would set it).
fn behind_proxy(pool: &sqlx::PgPool) -> Router {
    console(
        pool,
        ConsoleOptions::new().authorize(|req| req.headers.get("x-user")?.to_str().ok().map(String::from)),
    )
}

async fn state(store: &LeaseStore, key: &str) -> KeyState {
    store.status(key).await.expect("status").expect("row").state()
}

/// The confirmation page of `action` on `key`, as `user` sees it.
async fn confirm(app: &Router, key: &str, action: &str, user: &str) -> Page {
    get(
        app,
        &format!("/confirm?key={}&action={action}", enc(key)),
        &[("x-user", user)],
    )
    .await
}

#[tokio::test]
async fn without_a_hook_or_token_the_console_is_read_only() {
    let (db, store) = support::store().await;
    store.claim("ledger", "replica-1", LONG).await.expect("claim");
    let app = console(&db.pool, ConsoleOptions::new());

    let page = get(&app, "/key?key=ledger", &[]).await;
    assert!(!page.body.contains("class=\"action\""), "no action offered");
    assert_eq!(
        confirm(&app, "ledger", "pause", "anyone").await.status,
        StatusCode::FORBIDDEN
    );
    let refused = post(
        &app,
        "/action",
        &[("key", "ledger"), ("action", "pause"), ("csrf", "x")],
        &[],
    )
    .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert!(refused.body.contains("read-only"), "{}", refused.body);
    assert_eq!(state(&store, "ledger").await, KeyState::Held, "nothing changed");
    assert_eq!(
        get(&app, "/login", &[]).await.status,
        StatusCode::NOT_FOUND,
        "no token login either"
    );
}

#[tokio::test]
async fn no_action_is_reachable_by_get() {
    let (db, store) = support::store().await;
    store.claim("ledger", "replica-1", LONG).await.expect("claim");
    let app = behind_proxy(&db.pool);
    let csrf = confirm(&app, "ledger", "pause", "alice").await.csrf();

    let by_get = get(
        &app,
        &format!("/action?key=ledger&action=pause&csrf={csrf}"),
        &[("x-user", "alice")],
    )
    .await;
    assert_eq!(by_get.status, StatusCode::METHOD_NOT_ALLOWED);
    let asked = confirm(&app, "ledger", "pause", "alice").await;
    assert_eq!(asked.status, StatusCode::OK, "the confirmation page only asks");
    assert_eq!(state(&store, "ledger").await, KeyState::Held, "no GET paused it");
}

#[tokio::test]
async fn an_action_needs_its_actors_own_csrf_token_and_a_same_origin_fetch() {
    let (db, store) = support::store().await;
    store.claim("ledger", "replica-1", LONG).await.expect("claim");
    let app = behind_proxy(&db.pool);
    let alice = confirm(&app, "ledger", "pause", "alice").await.csrf();
    let mallory = confirm(&app, "ledger", "pause", "mallory").await.csrf();
    assert_ne!(alice, mallory, "tokens are per actor");
    let pause = |csrf: &str| [("key", "ledger"), ("action", "pause"), ("csrf", csrf)].map(|(k, v)| (k, v.to_owned()));

    let refusals = [
        ("no token", "", "same-origin"),
        ("another actor's token", mallory.as_str(), "same-origin"),
        ("a cross-site fetch", alice.as_str(), "cross-site"),
        ("a sibling-site fetch", alice.as_str(), "same-site"),
    ];
    for (what, csrf, site) in refusals {
        let form = pause(csrf);
        let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let answer = post(&app, "/action", &form, &[("x-user", "alice"), ("sec-fetch-site", site)]).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{what} must be refused");
        assert_eq!(state(&store, "ledger").await, KeyState::Held, "{what} changed nothing");
    }

    let form = pause(&alice);
    let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let done = post(
        &app,
        "/action",
        &form,
        &[("x-user", "alice"), ("sec-fetch-site", "same-origin")],
    )
    .await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    assert!(done.location().starts_with("/key?key=ledger&flash="));
    assert_eq!(state(&store, "ledger").await, KeyState::Paused);
    let actions = store.actions("ledger", 10).await.expect("actions");
    assert_eq!(actions.len(), 1, "the refused attempts left no record: {actions:?}");
    assert_eq!(
        (actions[0].action.as_str(), actions[0].actor.as_str()),
        ("pause", "alice")
    );
}

#[tokio::test]
async fn a_token_login_lets_its_user_act_under_their_name() {
    let (db, store) = support::store().await;
    store.claim("ledger", "replica-1", LONG).await.expect("claim");
    let app = console(&db.pool, ConsoleOptions::new().token("s3cret-token"));
    let login = get(&app, "/login", &[]).await;
    let csrf = login.csrf();

    let wrong = post(
        &app,
        "/login",
        &[("name", "bob"), ("token", "guess"), ("csrf", &csrf)],
        &[],
    )
    .await;
    assert_eq!(wrong.status, StatusCode::FORBIDDEN);
    assert!(wrong.headers.get("set-cookie").is_none());
    let forged = post(
        &app,
        "/login",
        &[("name", "bob"), ("token", "s3cret-token"), ("csrf", "")],
        &[],
    )
    .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN, "login CSRF is refused too");

    let ok = post(
        &app,
        "/login",
        &[("name", "bob"), ("token", "s3cret-token"), ("csrf", &csrf)],
        &[],
    )
    .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER);
    let cookie = ok.headers["set-cookie"].to_str().expect("cookie").to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(cookie.contains("; Path=/;"), "at the root: the whole console: {cookie}");
    let session = cookie.split(';').next().expect("name=value").to_owned();

    // Mounted under a prefix, the cookie covers the prefix itself (no
    // trailing slash, which `/ops/leasehold` would not match) and below.
    let nested = Router::new().nest_service(
        "/ops/leasehold",
        console(&db.pool, ConsoleOptions::new().token("s3cret-token")),
    );
    let csrf = get(&nested, "/ops/leasehold/login", &[]).await.csrf();
    let form = [("name", "bob"), ("token", "s3cret-token"), ("csrf", csrf.as_str())];
    let there = post(&nested, "/ops/leasehold/login", &form, &[]).await;
    let cookie = there.headers["set-cookie"].to_str().expect("cookie").to_owned();
    assert!(cookie.contains("; Path=/ops/leasehold;"), "{cookie}");
    let bare = get(
        &nested,
        "/ops/leasehold",
        &[("cookie", cookie.split(';').next().unwrap_or_default())],
    )
    .await;
    assert!(bare.body.contains("acting as"), "logged in at the bare prefix too");

    let anonymous = get(&app, "/key?key=ledger", &[]).await;
    assert!(
        !anonymous.body.contains("class=\"action\""),
        "without the cookie: read-only"
    );
    let page = get(&app, "/key?key=ledger", &[("cookie", &session)]).await;
    assert!(
        page.body.contains("id=\"action-trigger\""),
        "logged in: actions offered"
    );
    let csrf = get(&app, "/confirm?key=ledger&action=trigger", &[("cookie", &session)])
        .await
        .csrf();
    let done = post(
        &app,
        "/action",
        &[("key", "ledger"), ("action", "trigger"), ("csrf", &csrf)],
        &[("cookie", &session)],
    )
    .await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    let actions = store.actions("ledger", 10).await.expect("actions");
    assert_eq!(
        (actions[0].action.as_str(), actions[0].actor.as_str()),
        ("trigger", "bob")
    );
}

#[tokio::test]
async fn keys_holders_and_errors_render_as_text() {
    let db = support::db().await;
    let key = "<script>alert(1)</script>";
    let holder = "<img src=x onerror=alert(2)>";
    let error = "failed: </td><script>alert(3)</script>";
    let settings = quick(Schedule::Manual, Duration::from_secs(5));
    let failing = job(key, settings, move |_| async move { Err(error.into()) }).named("xss");
    let runtime = replica(&db, holder, 2, vec![failing]).await;
    let store = LeaseStore::new(db.pool.clone());
    store.trigger(key).await.expect("trigger");
    eventually_async(Duration::from_secs(10), || async {
        store
            .history(key, 1)
            .await
            .expect("history")
            .first()
            .is_some_and(|r| r.error.is_some())
            .then_some(())
    })
    .await;
    let app = behind_proxy(&db.pool);

    for uri in ["/".to_owned(), format!("/key?key={}", enc(key)), "/fleet".to_owned()] {
        let page = get(&app, &uri, &[("x-user", "<b>eve</b>")]).await;
        assert_eq!(page.status, StatusCode::OK, "{uri}");
        for raw in ["<script>", "<img src=x", "<b>eve"] {
            assert!(!page.body.contains(raw), "{uri} must not carry {raw} unescaped");
        }
        let csp = page.headers["content-security-policy"].to_str().expect("csp");
        assert!(
            csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
            "{csp}"
        );
    }
    let key_page = get(&app, &format!("/key?key={}", enc(key)), &[]).await;
    assert!(
        key_page.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "the key, as text"
    );
    assert!(
        key_page.body.contains("&lt;/td&gt;&lt;script&gt;alert(3)"),
        "the error, as text"
    );
    runtime.shutdown().await;
}
