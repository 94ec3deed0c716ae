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
//!   whatever it carries (`Sec-Fetch-Site`).

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

/// Name of the session cookie a token login sets.
const COOKIE: &str = "leasehold_console";

/// How long a token login lasts.
const SESSION: Duration = Duration::from_secs(12 * 3600);

/// Longest name a login may give (it is recorded with each action).
const MAX_NAME: usize = 64;

struct Session {
    name: String,
    until: Instant,
}

/// The console's sessions and CSRF tokens, in this process's memory: a
/// restart logs everyone out, which is the safe direction.
pub(super) struct Access {
    sessions: Mutex<HashMap<String, Session>>,
    /// One token per actor name; the empty name is the login form's.
    csrf: Mutex<HashMap<String, String>>,
    token_login: bool,
}

impl Access {
    pub(super) fn new(options: &ConsoleOptions) -> Self {
        Access {
            sessions: Mutex::new(HashMap::new()),
            csrf: Mutex::new(HashMap::new()),
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
            .or_else(|| self.session(parts));
        match name {
            Some(name) => Viewer::Actor {
                csrf: self.csrf_for(&name),
                name,
            },
            None => Viewer::ReadOnly {
                can_log_in: self.token_login,
            },
        }
    }

    fn session(&self, parts: &Parts) -> Option<String> {
        let id = cookie(parts, COOKIE)?;
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        sessions.retain(|_, s| s.until > now);
        sessions.get(id).map(|s| s.name.clone())
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
        let Viewer::Actor { name, csrf: expected } = &viewer else {
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
        Viewer::ReadOnly { can_log_in: true } => "Log in with the console's token to act.",
        _ => {
            "This console is read-only: the service mounts it without an authorisation hook \
             (ConsoleOptions::authorize), or `leasehold console` runs without LEASEHOLD_CONSOLE_TOKEN."
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
        return layout::error(
            &base,
            &viewer,
            StatusCode::NOT_FOUND,
            "There is no token login here: this console's actors come from the service's own authorisation.",
        );
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
    if name.is_empty() || name.len() > MAX_NAME || name.chars().any(char::is_control) {
        return layout::error(
            &base,
            &viewer,
            StatusCode::BAD_REQUEST,
            &format!("Give your name in 1 to {MAX_NAME} bytes, without control characters."),
        );
    }
    if !constant_time_eq(form.token.as_bytes(), token.as_bytes()) {
        return layout::error(&base, &viewer, StatusCode::FORBIDDEN, "Wrong token.");
    }
    let id = random_token();
    console
        .access
        .sessions
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(
            id.clone(),
            Session {
                name: name.to_owned(),
                until: Instant::now() + SESSION,
            },
        );
    let mut response = Redirect::to(&base.0).into_response();
    let cookie = format!(
        "{COOKIE}={id}; Path={}; HttpOnly; SameSite=Strict; Max-Age={}",
        cookie_path(&base),
        SESSION.as_secs()
    );
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    layout::secure(&mut response);
    response
}

/// POST `logout`: ends the session.
pub(super) async fn logout(State(console): State<Shared>, base: Base, parts: Parts) -> Response {
    if let Some(id) = cookie(&parts, COOKIE) {
        console
            .access
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }
    let mut response = Redirect::to(&base.0).into_response();
    if let Ok(value) = HeaderValue::from_str(&format!("{COOKIE}=; Path={}; Max-Age=0", cookie_path(&base))) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
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

/// Equality whose time does not depend on where the inputs differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
