//! The console's security checks, each against the request that would get
//! past it if it were missing: read-only without an actor, no action by
//! GET, the actor's own CSRF token, same-origin fetches, the token login,
//! and escaping of everything a user or a job wrote.

use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use leasehold::console::ConsoleOptions;
use leasehold::{
    Schedule,
    store::{KeyState, LeaseStore},
};

use super::http::{Page, console, enc, get, post, send};
use crate::support::{self, LONG, eventually_async, job, quick, replica};

/// A console token as `openssl rand -hex 16` makes them: 128 bits.
const TOKEN: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";

/// The console with a hook that trusts an `x-user` header (a service's
/// authenticating proxy would set it).
fn behind_proxy(pool: &sqlx::PgPool) -> Router {
    console(
        pool,
        ConsoleOptions::new().authorize(|req| req.headers.get("x-user")?.to_str().ok().map(String::from)),
    )
}

async fn state(store: &LeaseStore, key: &str) -> KeyState {
    store.records().status(key).await.expect("status").expect("row").state()
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
    assert_eq!(done.location(), "/key?key=ledger", "the redirect names no outcome");
    assert_eq!(state(&store, "ledger").await, KeyState::Paused);
    let actions = store.records().actions("ledger", 10).await.expect("actions");
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
    let app = console(&db.pool, ConsoleOptions::new().token(TOKEN).expect("a strong token"));
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
    let forged = post(&app, "/login", &[("name", "bob"), ("token", TOKEN), ("csrf", "")], &[]).await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN, "login CSRF is refused too");

    let ok = post(
        &app,
        "/login",
        &[("name", "bob"), ("token", TOKEN), ("csrf", &csrf)],
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
        console(&db.pool, ConsoleOptions::new().token(TOKEN).expect("a strong token")),
    );
    let csrf = get(&nested, "/ops/leasehold/login", &[]).await.csrf();
    let form = [("name", "bob"), ("token", TOKEN), ("csrf", csrf.as_str())];
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
    let actions = store.records().actions("ledger", 10).await.expect("actions");
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
    store.controls().trigger(key).await.expect("trigger");
    eventually_async(Duration::from_secs(10), || async {
        store
            .records()
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

/// Logs in with the console's token as `name` through `host`; the session
/// cookie (`name=value`) and the whole `Set-Cookie` header.
async fn log_in(app: &Router, name: &str, host: &str) -> (String, String) {
    let csrf = get(app, "/login", &[("host", host)]).await.csrf();
    let ok = post(
        app,
        "/login",
        &[("name", name), ("token", TOKEN), ("csrf", &csrf)],
        &[("host", host)],
    )
    .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER, "{}", ok.body);
    let header = ok.headers["set-cookie"].to_str().expect("cookie").to_owned();
    (header.split(';').next().expect("name=value").to_owned(), header)
}

fn acting(page: &Page) -> bool {
    page.body.contains("acting as")
}

#[tokio::test]
async fn a_session_answers_only_on_its_own_host_and_ends_when_idle() {
    let (db, store) = support::store().await;
    store.claim("ledger", "replica-1", LONG).await.expect("claim");
    let options = ConsoleOptions::new()
        .token(TOKEN)
        .expect("a strong token")
        .session_idle(Duration::from_secs(1));
    let app = console(&db.pool, options);
    let (session, _) = log_in(&app, "bob", "127.0.0.1:18080").await;
    let mine = [("cookie", session.as_str()), ("host", "127.0.0.1:18080")];
    assert!(acting(&get(&app, "/", &mine).await), "logged in on its own host");

    // The browser sends the cookie to every port of the host: an app on
    // another port that relays it reaches the console under its own Host.
    let relayed = [("cookie", session.as_str()), ("host", "127.0.0.1:18889")];
    assert!(
        !acting(&get(&app, "/", &relayed).await),
        "another port's Host is read-only"
    );
    let refused = get(&app, "/confirm?key=ledger&action=pause", &relayed).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "no CSRF token for the relay");

    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!acting(&get(&app, "/", &mine).await), "an idle session has ended");
}

#[tokio::test]
async fn over_tls_the_cookie_is_secure_and_host_only() {
    let db = support::db().await;
    let options = || {
        ConsoleOptions::new()
            .token(TOKEN)
            .expect("a strong token")
            .secure_cookie(true)
    };
    let (session, header) = log_in(&console(&db.pool, options()), "bob", "ops.example.com").await;
    assert!(session.starts_with("__Host-leasehold_console="), "{header}");
    assert!(header.contains("; Secure") && header.contains("; Path=/;"), "{header}");

    let nested = Router::new().nest_service("/ops/leasehold", console(&db.pool, options()));
    let csrf = get(&nested, "/ops/leasehold/login", &[]).await.csrf();
    let form = [("name", "bob"), ("token", TOKEN), ("csrf", csrf.as_str())];
    let there = post(&nested, "/ops/leasehold/login", &form, &[]).await;
    let header = there.headers["set-cookie"].to_str().expect("cookie");
    assert!(
        header.starts_with("__Secure-leasehold_console=") && header.contains("; Secure"),
        "{header}"
    );
}

#[tokio::test]
async fn a_rebound_host_name_is_refused() {
    let (db, store) = support::store().await;
    store.claim("ledger", "replica-1", LONG).await.expect("claim");
    let options = ConsoleOptions::new()
        .token(TOKEN)
        .expect("a strong token")
        .allowed_hosts(["127.0.0.1:18080", "localhost:18080"]);
    let app = console(&db.pool, options);

    for uri in ["/", "/key?key=ledger", "/login", "/assets/console.css"] {
        let rebound = get(&app, uri, &[("host", "rebind.attacker.example:18080")]).await;
        assert_eq!(rebound.status, StatusCode::MISDIRECTED_REQUEST, "{uri}");
        assert!(
            !rebound.body.contains("ledger") && !rebound.body.contains("csrf"),
            "{uri}"
        );
        assert!(rebound.headers.contains_key("content-security-policy"), "{uri}");
    }
    assert_eq!(
        get(&app, "/", &[]).await.status,
        StatusCode::MISDIRECTED_REQUEST,
        "no Host"
    );
    let own = get(&app, "/", &[("host", "LOCALHOST:18080")]).await;
    assert_eq!(own.status, StatusCode::OK);
    assert!(own.body.contains("ledger"));
}

#[tokio::test]
async fn wrong_tokens_are_throttled() {
    let db = support::db().await;
    let app = console(&db.pool, ConsoleOptions::new().token(TOKEN).expect("a strong token"));
    let csrf = get(&app, "/login", &[]).await.csrf();
    let attempt = |token: &'static str| {
        let (app, csrf) = (app.clone(), csrf.clone());
        async move {
            post(
                &app,
                "/login",
                &[("name", "mallory"), ("token", token), ("csrf", &csrf)],
                &[],
            )
            .await
        }
    };

    let mut checked = 0;
    let started = std::time::Instant::now();
    for _ in 0..1000 {
        let answer = attempt("0f1e2d3c4b5a69788796a5b4c3d2e1f1").await;
        match answer.status {
            StatusCode::FORBIDDEN => checked += 1,
            StatusCode::TOO_MANY_REQUESTS => assert!(answer.headers.contains_key("retry-after")),
            other => panic!("{other}: {}", answer.body),
        }
    }
    // 5 free, the 6th closes the login for 1 s, and each check after a
    // wait doubles the next: over t seconds, at most log2(t + 1) more.
    let waits = (started.elapsed().as_secs_f64() + 1.0).log2().ceil() as usize;
    assert!(
        checked <= 6 + waits,
        "{checked} of 1,000 wrong tokens were checked in {:?}",
        started.elapsed()
    );
    let right = attempt(TOKEN).await;
    assert_eq!(
        right.status,
        StatusCode::TOO_MANY_REQUESTS,
        "while closed, even the right token tells nothing"
    );
    assert!(right.headers.get("set-cookie").is_none());
}

#[tokio::test]
async fn logout_needs_the_sessions_csrf_token() {
    let db = support::db().await;
    let app = console(&db.pool, ConsoleOptions::new().token(TOKEN).expect("a strong token"));
    let (session, _) = log_in(&app, "bob", "").await;
    let page = get(&app, "/", &[("cookie", &session)]).await;
    assert!(page.body.contains("id=\"logout\""), "a logout button");
    let csrf = page.csrf();

    for (what, form, site) in [
        ("no token", "", "same-origin"),
        ("a cross-site form", csrf.as_str(), "cross-site"),
    ] {
        let refused = post(
            &app,
            "/logout",
            &[("csrf", form)],
            &[("cookie", &session), ("sec-fetch-site", site)],
        )
        .await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{what}");
        assert!(
            acting(&get(&app, "/", &[("cookie", &session)]).await),
            "{what} kept the session"
        );
    }
    let out = post(
        &app,
        "/logout",
        &[("csrf", &csrf)],
        &[("cookie", &session), ("sec-fetch-site", "same-origin")],
    )
    .await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert!(!acting(&get(&app, "/", &[("cookie", &session)]).await), "logged out");
}

#[tokio::test]
async fn the_flash_message_is_the_consoles_own_text() {
    let (db, store) = support::store().await;
    store.claim("ledger", "replica-1", LONG).await.expect("claim");
    let app = behind_proxy(&db.pool);
    let lure = "Session expired: re-enter the token at http://evil.example/login";
    for query in [format!("flash={}", enc(lure)), format!("done={}", enc(lure))] {
        let page = get(&app, &format!("/key?key=ledger&{query}"), &[]).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(!page.body.contains("evil.example"), "{query}: the URL's text is shown");
    }
    // Nor does a link name an outcome: only an action this actor took.
    let page = get(&app, "/key?key=ledger&done=paused", &[("x-user", "alice")]).await;
    assert!(!page.body.contains("id=\"flash\""), "{}", page.body);
}

#[tokio::test]
async fn every_answer_carries_the_security_headers() {
    let (db, store) = support::store().await;
    store.claim("ledger", "replica-1", LONG).await.expect("claim");
    let app = console(&db.pool, ConsoleOptions::new().token(TOKEN).expect("a strong token"));
    let form = axum::http::Request::post("/action")
        .body(axum::body::Body::from("key=ledger"))
        .expect("request");
    let answers = [
        ("a job's redirect", get(&app, "/job?name=nightly", &[]).await),
        ("logout", post(&app, "/logout", &[("csrf", "x")], &[]).await),
        ("a missing asset", get(&app, "/assets/nope.js", &[]).await),
        ("a GET of a POST route", get(&app, "/action", &[]).await),
        ("a form without its content type", send(&app, form).await),
        (
            "a query axum rejects",
            get(&app, "/confirm?key=a&key=b&action=pause", &[]).await,
        ),
        ("a page", get(&app, "/", &[]).await),
    ];
    for (what, answer) in answers {
        for header in [
            "content-security-policy",
            "x-content-type-options",
            "x-frame-options",
            "referrer-policy",
        ] {
            assert!(
                answer.headers.contains_key(header),
                "{what} ({}) lacks {header}",
                answer.status
            );
        }
    }
}

#[tokio::test]
async fn a_nul_byte_in_a_parameter_is_the_clients_mistake() {
    let (db, store) = support::store().await;
    store.claim("ledger", "replica-1", LONG).await.expect("claim");
    let app = behind_proxy(&db.pool);
    for (uri, param) in [
        ("/?prefix=a%00b", "prefix"),
        ("/?job=a%00b", "job"),
        ("/?after=a%00b", "after"),
        ("/job?name=a%00b", "name"),
        ("/key?key=a%00b", "key"),
        ("/confirm?key=a%00b&action=pause", "key"),
    ] {
        let page = get(&app, uri, &[("x-user", "alice")]).await;
        assert_eq!(page.status, StatusCode::BAD_REQUEST, "{uri}: {}", page.body);
        assert!(
            page.body.contains(&format!("`{param}`")),
            "{uri} names {param}: {}",
            page.body
        );
        assert!(
            !page.body.contains("invalid byte sequence"),
            "{uri}: the database's error"
        );
    }
    let long = get(&app, &format!("/key?key={}", "k".repeat(10_000)), &[]).await;
    assert!(long.body.contains("the limit is 255 bytes"), "{}", long.body);
}

#[tokio::test]
async fn a_name_cannot_pass_for_another() {
    let (db, store) = support::store().await;
    store.claim("ledger", "replica-1", LONG).await.expect("claim");
    // The service's authentication names users from a header; `rtl` and
    // `zw` stand for names a directory might hold with those characters.
    let options = ConsoleOptions::new()
        .authorize(|req| {
            let user = req.headers.get("x-user")?.to_str().ok()?;
            Some(match user {
                "rtl" => "\u{202e}nimda".to_owned(),
                "zw" => "ad\u{200b}min".to_owned(),
                user => user.to_owned(),
            })
        })
        .token(TOKEN)
        .expect("a strong token");
    let app = console(&db.pool, options);

    // Beside the hook, a token login is named apart from the hook's users.
    let (session, _) = log_in(&app, "alice", "").await;
    let as_token = get(&app, "/confirm?key=ledger&action=pause", &[("cookie", &session)]).await;
    assert!(as_token.body.contains("<bdi>token:alice</bdi>"), "{}", as_token.body);
    let hook_alice = confirm(&app, "ledger", "pause", "alice").await.csrf();
    assert_ne!(as_token.csrf(), hook_alice, "not the hook's alice's CSRF token");
    let form = [("key", "ledger"), ("action", "pause"), ("csrf", hook_alice.as_str())];
    let forged = post(&app, "/action", &form, &[("cookie", &session)]).await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);

    // A name that displays as another is refused at login and in actions.
    let csrf = get(&app, "/login", &[]).await.csrf();
    let form = [("name", "\u{202e}nimda"), ("token", TOKEN), ("csrf", csrf.as_str())];
    assert_eq!(post(&app, "/login", &form, &[]).await.status, StatusCode::BAD_REQUEST);
    for fake in ["rtl", "zw"] {
        let csrf = confirm(&app, "ledger", "pause", fake).await.csrf();
        let form = [("key", "ledger"), ("action", "pause"), ("csrf", csrf.as_str())];
        let refused = post(&app, "/action", &form, &[("x-user", fake)]).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{fake:?}");
    }
    assert!(store.records().actions("ledger", 10).await.expect("actions").is_empty());
    assert_eq!(state(&store, "ledger").await, KeyState::Held);
}

#[tokio::test]
async fn untrusted_text_is_direction_isolated_and_its_hidden_characters_escaped() {
    let (db, store) = support::store().await;
    let key = "\u{202e}ledger";
    assert!(
        store.claim(key, "replica-1", LONG).await.is_err(),
        "a new key with U+202E is refused"
    );
    // A row stored before the rule: read, shown escaped, acted on.
    store.claim("ledger", "replica-1", LONG).await.expect("claim");
    sqlx::query("UPDATE leasehold_lease SET key = $1, holder = $2 WHERE key = 'ledger'")
        .bind(key)
        .bind("\u{202e}replica-1")
        .execute(&db.pool)
        .await
        .expect("a row stored before the rule");
    store
        .controls()
        .revoke(key, leasehold::operator::Revoke::Force, &[])
        .await
        .expect("release");
    let app = behind_proxy(&db.pool);
    let page = get(&app, &format!("/key?key={}", enc(key)), &[]).await;
    assert!(
        page.body
            .contains("<bdi>\\u{202e}replica-1</bdi><span class=\"muted\"> (last)"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("<h1 id=\"key\"><bdi>\\u{202e}ledger</bdi></h1>"),
        "{}",
        page.body
    );
    assert!(!page.body.contains('\u{202e}'), "{}", page.body);
    let list = get(&app, "/", &[]).await;
    assert!(list.body.contains("<bdi>\\u{202e}ledger</bdi>"), "{}", list.body);
    assert!(!list.body.contains('\u{202e}'), "{}", list.body);
    // Its actions still name it exactly.
    let asked = get(
        &app,
        &format!("/confirm?key={}&action=pause", enc(key)),
        &[("x-user", "alice")],
    )
    .await;
    assert!(
        asked.body.contains("name=\"key\" value=\"\u{202e}ledger\""),
        "{}",
        asked.body
    );
}

#[tokio::test]
async fn refusals_say_why_and_what_to_fix() {
    let (db, store) = support::store().await;
    store.claim("ledger", "replica-1", LONG).await.expect("claim");

    // Hook only, and the hook does not name this user.
    let hooked = behind_proxy(&db.pool);
    let refused = get(&hooked, "/confirm?key=ledger&action=pause", &[]).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert!(refused.body.contains("does not name you"), "{}", refused.body);
    assert!(!refused.body.contains("without"), "{}", refused.body);

    // Neither hook nor token: the login page says the console is read-only.
    let bare = console(&db.pool, ConsoleOptions::new());
    let login = get(&bare, "/login", &[]).await;
    assert!(login.body.contains("read-only"), "{}", login.body);

    // A confirmation naming neither a key nor a job offers no button.
    let keyless = get(&hooked, "/confirm?action=pause", &[("x-user", "alice")]).await;
    assert_eq!(keyless.status, StatusCode::BAD_REQUEST);
    assert!(!keyless.body.contains("id=\"confirm\""), "{}", keyless.body);
    assert!(keyless.body.contains("`key`"), "{}", keyless.body);
}

/// Each refused login or action leaves a warning that says why and where
/// from, without the token or a CSRF token.
#[tokio::test(flavor = "current_thread")]
async fn refusals_are_logged_without_secrets() {
    let (logs, _capture) = support::LogCounts::capture("leasehold=warn");
    let db = support::db().await;
    let app = console(
        &db.pool,
        ConsoleOptions::new()
            .authorize(|req| req.headers.get("x-user")?.to_str().ok().map(String::from))
            .token(TOKEN)
            .expect("a strong token"),
    );
    let login_csrf = get(&app, "/login", &[]).await.csrf();
    let alice_csrf = confirm(&app, "ledger", "pause", "alice").await.csrf();
    assert_eq!(
        logs.at(tracing::Level::WARN),
        0,
        "{:?}",
        logs.messages(tracing::Level::WARN)
    );
    let wrong = "0f1e2d3c4b5a69788796a5b4c3d2e1f1";
    let login = |token: &'static str, csrf: String, site: &'static str| {
        let app = app.clone();
        async move {
            post(
                &app,
                "/login",
                &[("name", "mallory"), ("token", token), ("csrf", &csrf)],
                &[("host", "console.test"), ("sec-fetch-site", site)],
            )
            .await
            .status
        }
    };
    let mut expected: Vec<(&str, StatusCode)> = vec![
        ("wrong CSRF token", login(TOKEN, "stale".into(), "same-origin").await),
        ("cross-site", login(TOKEN, login_csrf.clone(), "cross-site").await),
    ];
    for _ in 0..6 {
        expected.push(("wrong token", login(wrong, login_csrf.clone(), "same-origin").await));
    }
    expected.push((
        "too many wrong tokens",
        login(TOKEN, login_csrf.clone(), "same-origin").await,
    ));
    let action = |csrf: &'static str, site: &'static str| {
        let app = app.clone();
        async move {
            post(
                &app,
                "/action",
                &[("key", "ledger"), ("action", "pause"), ("csrf", csrf)],
                &[("x-user", "alice"), ("sec-fetch-site", site)],
            )
            .await
            .status
        }
    };
    expected.push(("wrong CSRF token", action("forged", "same-origin").await));
    expected.push(("cross-site", action("forged", "cross-site").await));

    let warnings = logs.messages(tracing::Level::WARN);
    assert_eq!(warnings.len(), expected.len(), "one warning per refusal: {warnings:#?}");
    for (warning, (why, status)) in warnings.iter().zip(&expected) {
        assert!(status.is_client_error(), "{why}: {status}");
        assert!(warning.contains(why), "{warning:?} says {why}");
        for secret in [TOKEN, wrong, login_csrf.as_str(), alice_csrf.as_str()] {
            assert!(!warning.contains(secret), "{warning:?} shows a secret");
        }
    }
    assert!(
        warnings[2].contains("\"mallory\"") && warnings[2].contains("\"console.test\""),
        "{}",
        warnings[2]
    );
    assert!(
        warnings[9].contains("\"alice\"") && warnings[9].contains("\"/action\""),
        "{}",
        warnings[9]
    );
}

/// Wrong tokens under one name lock out that name, not the operator
/// logging in under theirs.
#[tokio::test]
async fn one_names_wrong_tokens_do_not_lock_out_another() {
    let db = support::db().await;
    let app = console(&db.pool, ConsoleOptions::new().token(TOKEN).expect("a strong token"));
    let csrf = get(&app, "/login", &[]).await.csrf();
    let attempt = |name: &'static str, token: &'static str| {
        let (app, csrf) = (app.clone(), csrf.clone());
        async move {
            post(
                &app,
                "/login",
                &[("name", name), ("token", token), ("csrf", &csrf)],
                &[],
            )
            .await
        }
    };
    for _ in 0..20 {
        let answer = attempt("mallory", "0f1e2d3c4b5a69788796a5b4c3d2e1f1").await;
        assert!(
            matches!(answer.status, StatusCode::FORBIDDEN | StatusCode::TOO_MANY_REQUESTS),
            "{}",
            answer.status
        );
    }
    assert_eq!(
        attempt("mallory", TOKEN).await.status,
        StatusCode::TOO_MANY_REQUESTS,
        "mallory's name is locked"
    );
    let operator = attempt("alice", TOKEN).await;
    assert_eq!(operator.status, StatusCode::SEE_OTHER, "{}", operator.body);
    assert!(operator.headers.contains_key("set-cookie"));
}
