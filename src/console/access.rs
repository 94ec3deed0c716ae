//! Who may act, and the checks every action passes: the actor (the
//! service's hook, or a login with the console's token), the CSRF token
//! bound to that actor, and the fetch's origin.
//!
//! Invariants:
//! - a request with no actor is read-only: the pages show no action and
//!   every POST other than the login is refused (403);
//! - an action's CSRF token is the one this process gave *that actor*
//!   (random, 128 bits, compared in constant time), so a page another
//!   user can read does not let them forge this user's actions;
//! - a browser's cross-site or same-site (not same-origin) POST is refused
//!   whatever it carries (`Sec-Fetch-Site`);
//! - a token login's session answers only on the `Host` it was issued for
//!   (an app on another port of the same host, which the browser also
//!   sends the cookie to, reaches the console under another `Host`), for
//!   at most `session_idle` without a request and `SESSION_MAX` in all;
//! - failed logins are throttled per process, and the token comparison
//!   takes a time that depends only on the token's length;
//! - when the service's hook names users too, a token login is recorded as
//!   `token:<name>`, so it cannot act as a user the hook names.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Form;
use axum::extract::State;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;

use super::layout::{self, Base, Tab};
use super::viewer::Viewer;
use super::{ConsoleOptions, Shared};
use crate::lease::validate_actor;

/// Name of the session cookie a token login sets over plain HTTP.
const COOKIE: &str = "leasehold_console";

/// Its name with [`ConsoleOptions::secure_cookie`] at the root: the
/// browser keeps a `__Host-` cookie only if it is `Secure`, has no
/// `Domain` and has `Path=/`, so no other host or HTTP page can set it.
const HOST_COOKIE: &str = "__Host-leasehold_console";

/// Its name with [`ConsoleOptions::secure_cookie`] under a path
/// (`__Host-` requires `Path=/`): still `Secure`-only.
const SECURE_COOKIE: &str = "__Secure-leasehold_console";

/// Failed logins allowed before each further one makes the next wait.
const FREE_FAILURES: u32 = 5;

/// The longest wait after failed logins.
const MAX_LOCKOUT: Duration = Duration::from_secs(15 * 60);

/// Longest name a login may give (it is recorded with each action).
const MAX_NAME: usize = 64;

struct Session {
    name: String,
    /// The `Host` the login came through.
    host: String,
    began: Instant,
    last_seen: Instant,
}

/// The failed logins' throttle.
#[derive(Default)]
struct Throttle {
    /// Failures since the last successful login.
    failures: u32,
    /// No login is checked before then.
    locked_until: Option<Instant>,
}

/// The console's sessions and CSRF tokens, in this process's memory: a
/// restart logs everyone out, which is the safe direction.
pub(super) struct Access {
    sessions: Mutex<HashMap<String, Session>>,
    /// One token per actor name; the empty name is the login form's.
    csrf: Mutex<HashMap<String, String>>,
    throttle: Mutex<Throttle>,
    token_login: bool,
}

impl Access {
    pub(super) fn new(options: &ConsoleOptions) -> Self {
        Access {
            sessions: Mutex::new(HashMap::new()),
            csrf: Mutex::new(HashMap::new()),
            throttle: Mutex::new(Throttle::default()),
            token_login: options.token.is_some(),
        }
    }

    /// Who the request's user is.
    pub(super) fn viewer(&self, options: &ConsoleOptions, parts: &Parts) -> Viewer {
        let name = options
            .authorize
            .as_ref()
            .and_then(|hook| hook(parts))
            .filter(|name| !name.trim().is_empty())
            .map(|name| (name, false))
            .or_else(|| self.session(options, parts).map(|name| (name, true)));
        match name {
            Some((name, session)) => Viewer::Actor {
                csrf: self.csrf_for(&name),
                name,
                session,
            },
            None => Viewer::ReadOnly {
                can_log_in: self.token_login,
                hooked: options.authorize.is_some(),
            },
        }
    }

    /// The name of the request's live session, if it came through the
    /// `Host` the session was issued for; a request keeps it alive.
    fn session(&self, options: &ConsoleOptions, parts: &Parts) -> Option<String> {
        let id = session_cookie(options, parts)?;
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        sessions.retain(|_, s| {
            now.duration_since(s.last_seen) < options.session_idle
                && now.duration_since(s.began) < ConsoleOptions::SESSION_MAX
        });
        let session = sessions.get_mut(id)?;
        if session.host != request_host(parts) {
            return None;
        }
        session.last_seen = now;
        Some(session.name.clone())
    }

    /// `Err(wait)` while failed logins keep the login closed.
    fn login_open(&self) -> Result<(), Duration> {
        let throttle = self.throttle.lock().unwrap_or_else(PoisonError::into_inner);
        match throttle.locked_until {
            Some(until) if until > Instant::now() => Err(until - Instant::now()),
            _ => Ok(()),
        }
    }

    /// Records a login's result: a success resets the count; beyond
    /// [`FREE_FAILURES`], each failure closes the login for twice as long
    /// as the one before (1 s, 2 s, 4 s… up to [`MAX_LOCKOUT`]).
    fn login_result(&self, ok: bool) {
        let mut throttle = self.throttle.lock().unwrap_or_else(PoisonError::into_inner);
        if ok {
            *throttle = Throttle::default();
            return;
        }
        throttle.failures = throttle.failures.saturating_add(1);
        if let Some(over) = throttle.failures.checked_sub(FREE_FAILURES).filter(|n| *n > 0) {
            let wait = Duration::from_secs(1u64 << (over - 1).min(20)).min(MAX_LOCKOUT);
            throttle.locked_until = Some(Instant::now() + wait);
        }
    }

    fn csrf_for(&self, name: &str) -> String {
        let mut tokens = self.csrf.lock().unwrap_or_else(PoisonError::into_inner);
        tokens.entry(name.to_owned()).or_insert_with(random_token).clone()
    }

    /// The checks of a POST: same-origin fetch, an actor, that actor's
    /// CSRF token. Returns the viewer (an actor, asked of the hook once
    /// per request) and the actor's name, or the refusal to send.
    pub(super) fn check_post(
        &self,
        options: &ConsoleOptions,
        parts: &Parts,
        base: &Base,
        csrf: &str,
    ) -> Result<(Viewer, String), Box<Response>> {
        let viewer = self.viewer(options, parts);
        if let Some(site) = parts.headers.get("sec-fetch-site")
            && !matches!(site.as_bytes(), b"same-origin" | b"none")
        {
            return Err(Box::new(layout::error(
                base,
                &viewer,
                StatusCode::FORBIDDEN,
                "Refused: this action came from another site. Use the console's own buttons.",
            )));
        }
        let Viewer::Actor {
            name, csrf: expected, ..
        } = &viewer
        else {
            return Err(Box::new(read_only(base, &viewer)));
        };
        if !constant_time_eq(csrf.as_bytes(), expected.as_bytes()) {
            return Err(Box::new(layout::error(
                base,
                &viewer,
                StatusCode::FORBIDDEN,
                "Refused: the form's CSRF token is missing or stale (the console restarted?). Reload the page and \
                 try again.",
            )));
        }
        let name = name.clone();
        Ok((viewer, name))
    }
}

/// The answer to an action from a read-only viewer.
pub(super) fn read_only(base: &Base, viewer: &Viewer) -> Response {
    let how = match viewer {
        Viewer::ReadOnly {
            can_log_in: true,
            hooked: true,
        } => "Sign in through the service as a user it lets act, or log in with the console's token.",
        Viewer::ReadOnly { can_log_in: true, .. } => "Log in with the console's token to act.",
        Viewer::ReadOnly { hooked: true, .. } => {
            "The service's sign-in does not name you as a user who may act here (its ConsoleOptions::authorize \
             hook decides)."
        }
        _ => {
            "This console is read-only: it is mounted without ConsoleOptions::authorize or \
             ConsoleOptions::token, or `leasehold console` runs without LEASEHOLD_CONSOLE_TOKEN."
        }
    };
    layout::error(base, viewer, StatusCode::FORBIDDEN, &format!("Read-only. {how}"))
}

/// The login form.
#[derive(serde::Deserialize)]
pub(super) struct LoginForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    token: String,
    #[serde(default)]
    csrf: String,
}

/// `login`: the token login form (GET shows it; it changes nothing).
pub(super) async fn login_page(State(console): State<Shared>, base: Base, parts: Parts) -> Response {
    let viewer = console.access.viewer(&console.options, &parts);
    if !console.access.token_login {
        let why = if console.options.authorize.is_some() {
            "There is no token login here: this console's actors come from the service's own sign-in."
        } else {
            "There is no token login here: this console is read-only (`leasehold console` takes a token from \
             LEASEHOLD_CONSOLE_TOKEN, a service from ConsoleOptions::token)."
        };
        return layout::error(&base, &viewer, StatusCode::NOT_FOUND, why);
    }
    let csrf = console.access.csrf_for("");
    layout::page(
        &base,
        "Log in",
        Tab::None,
        &viewer,
        0,
        html! {
            h1 { "Log in" }
            p { "Give your name (it is recorded with each action you take) and the console's token." }
            form #login-form method="post" action="login" {
                input type="hidden" name="csrf" value=(csrf);
                label { "Your name " input #name name="name" required maxlength=(MAX_NAME) autocomplete="username"; }
                label { "Token " input #token name="token" type="password" required autocomplete="current-password"; }
                button #login type="submit" { "Log in" }
            }
        },
    )
}

/// POST `login`: a session for whoever knows the token.
pub(super) async fn login(
    State(console): State<Shared>,
    base: Base,
    parts: Parts,
    Form(form): Form<LoginForm>,
) -> Response {
    let viewer = console.access.viewer(&console.options, &parts);
    let Some(token) = console.options.token.as_deref() else {
        return read_only(&base, &viewer);
    };
    let expected = console.access.csrf_for("");
    let same_origin = parts
        .headers
        .get("sec-fetch-site")
        .is_none_or(|site| matches!(site.as_bytes(), b"same-origin" | b"none"));
    if !same_origin || !constant_time_eq(form.csrf.as_bytes(), expected.as_bytes()) {
        return layout::error(
            &base,
            &viewer,
            StatusCode::FORBIDDEN,
            "Refused: reload the login page and try again.",
        );
    }
    let name = form.name.trim();
    if name.is_empty() || name.len() > MAX_NAME || validate_actor(name).is_err() {
        return layout::error(
            &base,
            &viewer,
            StatusCode::BAD_REQUEST,
            &format!(
                "Give your name in 1 to {MAX_NAME} bytes, without control, invisible or text-direction characters."
            ),
        );
    }
    if let Err(wait) = console.access.login_open() {
        let mut refused = layout::error(
            &base,
            &viewer,
            StatusCode::TOO_MANY_REQUESTS,
            "Too many wrong tokens: logins are paused for a while. Try again later.",
        );
        refused
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(wait.as_secs() + 1));
        return refused;
    }
    let right = constant_time_eq(form.token.as_bytes(), token.as_bytes());
    console.access.login_result(right);
    if !right {
        return layout::error(&base, &viewer, StatusCode::FORBIDDEN, "Wrong token.");
    }
    // Beside the service's hook, a token login is named apart from the
    // hook's users, so it cannot act as (or get the CSRF token of) one.
    let name = if console.options.authorize.is_some() {
        format!("token:{name}")
    } else {
        name.to_owned()
    };
    let id = random_token();
    let now = Instant::now();
    console
        .access
        .sessions
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(
            id.clone(),
            Session {
                name,
                host: request_host(&parts),
                began: now,
                last_seen: now,
            },
        );
    let mut response = Redirect::to(&base.0).into_response();
    let (cookie_name, path, secure) = cookie_place(&console.options, &base);
    let cookie = format!(
        "{cookie_name}={id}; Path={path}; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        ConsoleOptions::SESSION_MAX.as_secs()
    );
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// The logout form.
#[derive(serde::Deserialize)]
pub(super) struct LogoutForm {
    #[serde(default)]
    csrf: String,
}

/// POST `logout`: ends the session. It passes an action's checks (the
/// session's CSRF token, a same-origin fetch), so another site cannot log
/// the user out.
pub(super) async fn logout(
    State(console): State<Shared>,
    base: Base,
    parts: Parts,
    Form(form): Form<LogoutForm>,
) -> Response {
    if let Err(refusal) = console.access.check_post(&console.options, &parts, &base, &form.csrf) {
        return *refusal;
    }
    if let Some(id) = session_cookie(&console.options, &parts) {
        console
            .access
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }
    let mut response = Redirect::to(&base.0).into_response();
    let (cookie_name, path, secure) = cookie_place(&console.options, &base);
    if let Ok(value) = HeaderValue::from_str(&format!("{cookie_name}=; Path={path}; Max-Age=0{secure}")) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// The session cookie's name, path and `Secure` attribute for a console
/// mounted at `base`.
fn cookie_place<'a>(options: &ConsoleOptions, base: &'a Base) -> (&'static str, &'a str, &'static str) {
    let path = cookie_path(base);
    match (options.secure_cookie, path) {
        (false, _) => (COOKIE, path, ""),
        (true, "/") => (HOST_COOKIE, path, "; Secure"),
        (true, _) => (SECURE_COOKIE, path, "; Secure"),
    }
}

/// The session id the request carries, under the name this console sets.
fn session_cookie<'a>(options: &ConsoleOptions, parts: &'a Parts) -> Option<&'a str> {
    if options.secure_cookie {
        cookie(parts, HOST_COOKIE).or_else(|| cookie(parts, SECURE_COOKIE))
    } else {
        cookie(parts, COOKIE)
    }
}

/// The request's `Host` (its URI's authority for HTTP/2), lower-cased;
/// empty when it has none.
pub(super) fn request_host(parts: &Parts) -> String {
    parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| parts.uri.authority().map(|a| a.as_str()))
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// The session cookie's path: the mount point without its trailing slash,
/// so the browser sends it to `/ops/leasehold` as well as to the pages
/// under `/ops/leasehold/` (a path ending in `/` would not match the
/// former), and to nothing else of the service.
fn cookie_path(base: &Base) -> &str {
    match base.0.trim_end_matches('/') {
        "" => "/",
        path => path,
    }
}

/// The value of cookie `name` in the request.
fn cookie<'a>(parts: &'a Parts, name: &str) -> Option<&'a str> {
    parts
        .headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// 128 random bits, hex.
fn random_token() -> String {
    let bytes: [u8; 16] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Equality whose time depends only on `expected`'s length: not on where
/// the inputs differ, nor on `given`'s length (every byte of `expected` is
/// compared, with a missing byte of `given` as 0).
fn constant_time_eq(given: &[u8], expected: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != expected.len());
    for (i, e) in expected.iter().enumerate() {
        diff |= given.get(i).copied().unwrap_or(0) ^ e;
    }
    diff == 0
}
