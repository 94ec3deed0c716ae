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
//! - failed logins are throttled per user name given (so an attacker's
//!   tries do not lock out the operator), under a ceiling for all names
//!   together, and the token comparison takes a time that does not depend
//!   on where the inputs differ;
//! - refused logins and actions are logged (`warn`), without any token.
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

use super::done::Done;
use super::layout::{self, Base, Tab};
use super::viewer::Viewer;
use super::{ConsoleOptions, Shared};
use crate::lease::Target;

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

/// The longest wait after failed logins under one name: short, since
/// anyone may fail logins under the operator's name.
const MAX_LOCKOUT: Duration = Duration::from_secs(60);

/// Failed logins, under any names, the whole console allows in a burst…
const GLOBAL_BURST: u32 = 100;

/// …and then one more per this long: about 86,000 a day, nothing against
/// a 128-bit token, yet enough that wrong tokens under many names keep
/// the login open to the operator unless someone sends more than one a
/// second.
const GLOBAL_REFILL: Duration = Duration::from_secs(1);

/// Most user names whose failed logins are remembered at once (past it,
/// the one whose lock ended first is forgotten).
const MAX_THROTTLED_NAMES: usize = 10_000;

/// Most actors with a CSRF token at once: past it, the one whose token
/// was used least recently loses it (and gets a new one with their next
/// page, so a form they had open is refused as stale).
const MAX_CSRF_TOKENS: usize = 10_000;

/// Most actions' outcomes waiting for their page at once (past it, the
/// oldest is dropped).
const MAX_FLASHES: usize = 10_000;

/// How long an action's outcome waits for its page to be viewed.
const FLASH_TTL: Duration = Duration::from_secs(60);

/// An action's outcome, waiting for the actor's next view of its page.
struct Flash {
    target: Target,
    done: Done,
    at: Instant,
}

/// Longest name a login may give (it is recorded with each action).
const MAX_NAME: usize = 64;

struct Session {
    name: String,
    /// The `Host` the login came through.
    host: String,
    began: Instant,
    last_seen: Instant,
}

/// The failed logins' throttles: one per user name given at the login
/// (the console is served without the peer's address, and a name is not
/// secret: it only stops one name's tries from locking out the others),
/// and a ceiling on them all.
struct Throttles {
    names: HashMap<String, Throttle>,
    /// Failures the ceiling still allows, as of `refilled`.
    allowance: u32,
    refilled: Instant,
}

impl Throttles {
    fn new(now: Instant) -> Self {
        Throttles {
            names: HashMap::new(),
            allowance: GLOBAL_BURST,
            refilled: now,
        }
    }

    /// Adds to the ceiling's allowance what the time since `refilled` earned.
    fn refill(&mut self, now: Instant) {
        let earned = now.duration_since(self.refilled).as_nanos() / GLOBAL_REFILL.as_nanos();
        if earned > 0 {
            let earned = u32::try_from(earned).unwrap_or(u32::MAX);
            self.allowance = self.allowance.saturating_add(earned).min(GLOBAL_BURST);
            self.refilled = if self.allowance == GLOBAL_BURST {
                now
            } else {
                self.refilled + GLOBAL_REFILL * earned
            };
        }
    }
}

/// One name's failed logins.
#[derive(Default)]
struct Throttle {
    /// Failures since the last successful login.
    failures: u32,
    /// No login is checked before then.
    locked_until: Option<Instant>,
}

/// The actors' CSRF tokens, at most [`MAX_CSRF_TOKENS`] of them.
#[derive(Default)]
struct CsrfTokens {
    /// Actor name to (token, when it was last handed out).
    tokens: HashMap<String, (String, u64)>,
    /// Counts the hand-outs, for "when".
    clock: u64,
}

impl CsrfTokens {
    /// `name`'s token, made (evicting the least recently used one when
    /// full) if `name` has none.
    fn get(&mut self, name: &str) -> String {
        self.clock += 1;
        let now = self.clock;
        if let Some((token, used)) = self.tokens.get_mut(name) {
            *used = now;
            return token.clone();
        }
        if self.tokens.len() >= MAX_CSRF_TOKENS
            && let Some(oldest) = self
                .tokens
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(name, _)| name.clone())
        {
            self.tokens.remove(&oldest);
        }
        let token = random_token();
        self.tokens.insert(name.to_owned(), (token.clone(), now));
        token
    }
}

/// The console's sessions and CSRF tokens, in this process's memory: a
/// restart logs everyone out, which is the safe direction.
pub(super) struct Access {
    sessions: Mutex<HashMap<String, Session>>,
    /// One token per actor name; the empty name is the login form's.
    csrf: Mutex<CsrfTokens>,
    throttle: Mutex<Throttles>,
    /// Each actor's last action's outcome, until their next view of its
    /// page ([`flash`](Self::flash)).
    flashes: Mutex<HashMap<String, Flash>>,
    token_login: bool,
}

impl Access {
    pub(super) fn new(options: &ConsoleOptions) -> Self {
        Access {
            sessions: Mutex::new(HashMap::new()),
            csrf: Mutex::new(CsrfTokens::default()),
            throttle: Mutex::new(Throttles::new(Instant::now())),
            flashes: Mutex::new(HashMap::new()),
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

    /// `Err(wait)` while failed logins keep the login closed to `name`:
    /// its own, or all of them past the ceiling.
    fn login_open(&self, name: &str) -> Result<(), Duration> {
        let mut throttles = self.throttle.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        throttles.refill(now);
        if throttles.allowance == 0 {
            return Err((throttles.refilled + GLOBAL_REFILL).saturating_duration_since(now));
        }
        match throttles.names.get(name).and_then(|t| t.locked_until) {
            Some(until) if until > now => Err(until - now),
            _ => Ok(()),
        }
    }

    /// Records a login's result under `name`: a success resets its count;
    /// beyond [`FREE_FAILURES`], each failure closes the login to `name`
    /// for twice as long as the one before (1 s, 2 s, 4 s… up to
    /// [`MAX_LOCKOUT`]), and every failure uses up one of the ceiling's
    /// allowance.
    fn login_result(&self, name: &str, ok: bool) {
        let mut throttles = self.throttle.lock().unwrap_or_else(PoisonError::into_inner);
        if ok {
            throttles.names.remove(name);
            return;
        }
        let now = Instant::now();
        throttles.refill(now);
        throttles.allowance = throttles.allowance.saturating_sub(1);
        if !throttles.names.contains_key(name) && throttles.names.len() >= MAX_THROTTLED_NAMES {
            throttles
                .names
                .retain(|_, t| t.locked_until.is_some_and(|until| until > now));
            if throttles.names.len() >= MAX_THROTTLED_NAMES
                && let Some(first) = throttles
                    .names
                    .iter()
                    .min_by_key(|(_, t)| t.locked_until)
                    .map(|(name, _)| name.clone())
            {
                throttles.names.remove(&first);
            }
        }
        let throttle = throttles.names.entry(name.to_owned()).or_default();
        throttle.failures = throttle.failures.saturating_add(1);
        if let Some(over) = throttle.failures.checked_sub(FREE_FAILURES).filter(|n| *n > 0) {
            let wait = Duration::from_secs(1u64 << (over - 1).min(20)).min(MAX_LOCKOUT);
            throttle.locked_until = Some(now + wait);
        }
    }

    /// Leaves what the action `actor` just took on `target` did, for
    /// their next view of its page to say once ([`take_flash`](Self::take_flash)).
    /// Only the POST that took the action calls this.
    pub(super) fn flash(&self, actor: &str, target: Target, done: Done) {
        let mut flashes = self.flashes.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if !flashes.contains_key(actor) && flashes.len() >= MAX_FLASHES {
            flashes.retain(|_, f| now.duration_since(f.at) < FLASH_TTL);
            if flashes.len() >= MAX_FLASHES
                && let Some(oldest) = flashes.iter().min_by_key(|(_, f)| f.at).map(|(name, _)| name.clone())
            {
                flashes.remove(&oldest);
            }
        }
        flashes.insert(actor.to_owned(), Flash { target, done, at: now });
    }

    /// The outcome of the action the viewer took on `target`, if this is
    /// their first view of its page since (within a minute): taken, so a
    /// reload, another tab's view or a link shows none.
    pub(super) fn take_flash(&self, viewer: &Viewer, target: &Target) -> Option<Done> {
        let Viewer::Actor { name, .. } = viewer else {
            return None;
        };
        let mut flashes = self.flashes.lock().unwrap_or_else(PoisonError::into_inner);
        let flash = flashes.get(name.as_str())?;
        if flash.target != *target {
            return None;
        }
        let flash = flashes.remove(name.as_str())?;
        (flash.at.elapsed() < FLASH_TTL).then_some(flash.done)
    }

    fn csrf_for(&self, name: &str) -> String {
        self.csrf.lock().unwrap_or_else(PoisonError::into_inner).get(name)
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
            tracing::warn!("console POST refused: a cross-site fetch; {}", whence(parts));
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
            tracing::warn!(
                "console POST refused: missing or wrong CSRF token, user {}; {}",
                shown(name),
                whence(parts)
            );
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
        } => "Read-only. Sign in through the service as a user it lets act, or log in with the console's token.",
        Viewer::ReadOnly { can_log_in: true, .. } => "Read-only. Log in with the console's token to act.",
        Viewer::ReadOnly { hooked: true, .. } => {
            "Read-only. The service's sign-in does not name you as a user who may act here (its ConsoleOptions::authorize \
             hook decides)."
        }
        _ => {
            "Read-only. This console is read-only: it is mounted without ConsoleOptions::authorize or \
             ConsoleOptions::token, or `leasehold console` runs without LEASEHOLD_CONSOLE_TOKEN."
        }
    };
    layout::error(base, viewer, StatusCode::FORBIDDEN, how)
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
        tracing::warn!(
            "console login refused: {}; {}",
            if same_origin {
                "missing or wrong CSRF token"
            } else {
                "a cross-site fetch"
            },
            whence(&parts)
        );
        return layout::error(
            &base,
            &viewer,
            StatusCode::FORBIDDEN,
            "Refused: reload the login page and try again.",
        );
    }
    let name = form.name.trim();
    if name.is_empty() || name.len() > MAX_NAME || crate::validate::actor("actor", name).is_err() {
        return layout::error(
            &base,
            &viewer,
            StatusCode::BAD_REQUEST,
            "Give your name in 1 to 64 bytes, without control, invisible or text-direction characters.",
        );
    }
    if let Err(wait) = console.access.login_open(name) {
        tracing::warn!(
            "console login refused: paused after too many wrong tokens ({} s left), name {}; {}",
            wait.as_secs() + 1,
            shown(name),
            whence(&parts)
        );
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
    console.access.login_result(name, right);
    if !right {
        tracing::warn!(
            "console login refused: wrong token, name {}; {}",
            shown(name),
            whence(&parts)
        );
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
    let (cookie_name, path, secure) = cookie_place(&console.options, &parts, &base);
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
    let (cookie_name, path, secure) = cookie_place(&console.options, &parts, &base);
    if let Ok(value) = HeaderValue::from_str(&format!("{cookie_name}=; Path={path}; Max-Age=0{secure}")) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// Whether the request came over TLS as far as the console can tell:
/// [`ConsoleOptions::secure_cookie`] says the console is only served so,
/// the request's URI says `https` (HTTP/2 over TLS), or a proxy the
/// options trust ([`ConsoleOptions::trust_forwarded_proto`]) set
/// `X-Forwarded-Proto: https` (that one value: a list is not the trusted
/// proxy's own).
fn over_tls(options: &ConsoleOptions, parts: &Parts) -> bool {
    options.secure_cookie
        || parts.uri.scheme_str() == Some("https")
        || (options.trust_forwarded_proto
            && parts
                .headers
                .get_all("x-forwarded-proto")
                .iter()
                .map(|v| v.as_bytes().trim_ascii().eq_ignore_ascii_case(b"https"))
                .collect::<Vec<_>>()
                == [true])
}

/// The session cookie's name, path and `Secure` attribute for a console
/// mounted at `base`, for this request ([`over_tls`]).
fn cookie_place<'a>(options: &ConsoleOptions, parts: &Parts, base: &'a Base) -> (&'static str, &'a str, &'static str) {
    let path = cookie_path(base);
    match (over_tls(options, parts), path) {
        (false, _) => (COOKIE, path, ""),
        (true, "/") => (HOST_COOKIE, path, "; Secure"),
        (true, _) => (SECURE_COOKIE, path, "; Secure"),
    }
}

/// The session id the request carries, under the name this console sets.
fn session_cookie<'a>(options: &ConsoleOptions, parts: &'a Parts) -> Option<&'a str> {
    if over_tls(options, parts) {
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

/// Longest piece of a request's text a log line shows.
const MAX_SHOWN: usize = 100;

/// `text` for a log line: its first [`MAX_SHOWN`] characters, quoted
/// with control, invisible and text-direction characters escaped (it
/// comes from the network).
fn shown(text: &str) -> String {
    let mut cut: String = text.chars().take(MAX_SHOWN).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    // `Debug` leaves fillers and variation selectors as they are.
    crate::validate::shown(&format!("{cut:?}")).into_owned()
}

/// Where a refused request came from, for its log line: the `Host` it
/// came through and its path (the console is served without the peer's
/// address), both escaped.
fn whence(parts: &Parts) -> String {
    let path = parts
        .extensions
        .get::<axum::extract::OriginalUri>()
        .map_or_else(|| parts.uri.path(), |uri| uri.0.path());
    format!("host {}, path {}", shown(&request_host(parts)), shown(path))
}

/// 128 random bits, hex.
fn random_token() -> String {
    let bytes: [u8; 16] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Equality whose time does not depend on where the inputs differ
/// (`subtle` compares every byte); inputs of different lengths are unequal
/// (the length check alone is not secret: the token's length is public).
fn constant_time_eq(given: &[u8], expected: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    bool::from(given.ct_eq(expected))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_csrf_tokens_are_bounded_and_the_least_recently_used_goes() {
        let access = Access::new(&ConsoleOptions::new());
        let first = access.csrf_for("first");
        let busy = access.csrf_for("busy");
        for i in 0..MAX_CSRF_TOKENS + 1000 {
            access.csrf_for(&format!("user-{i}"));
            if i % 100 == 0 {
                assert_eq!(access.csrf_for("busy"), busy, "a user in use keeps their token");
            }
        }
        let held = access.csrf.lock().unwrap_or_else(PoisonError::into_inner).tokens.len();
        assert!(held <= MAX_CSRF_TOKENS, "{held} tokens held");
        assert_eq!(access.csrf_for("busy"), busy);
        assert_ne!(access.csrf_for("first"), first, "evicted: a new token");
    }

    #[test]
    fn wrong_tokens_under_many_names_meet_the_ceiling() {
        let access = Access::new(&ConsoleOptions::new());
        for i in 0..GLOBAL_BURST {
            let name = format!("name-{i}");
            assert_eq!(access.login_open(&name), Ok(()), "{name}");
            access.login_result(&name, false);
        }
        let wait = access.login_open("alice").expect_err("the ceiling closes every name");
        assert!(wait <= GLOBAL_REFILL, "{wait:?}");
        let mut throttles = access.throttle.lock().unwrap_or_else(PoisonError::into_inner);
        let later = throttles.refilled + GLOBAL_REFILL * 3;
        throttles.refill(later);
        assert_eq!(throttles.allowance, 3, "one more per {GLOBAL_REFILL:?}");
    }

    #[test]
    fn network_text_is_logged_escaped_and_cut() {
        let shown = shown(&format!("\u{202e}nimda\n\u{200b}{}", "x".repeat(200)));
        assert!(!shown.contains(['\u{202e}', '\n', '\u{200b}']), "{shown}");
        assert!(shown.contains("\\u{202e}nimda\\n"), "{shown}");
        assert!(shown.chars().count() < 120, "{shown}");
    }

    #[test]
    fn tokens_of_other_lengths_or_contents_differ() {
        assert!(constant_time_eq(b"abc", b"abc"));
        for given in [&b""[..], b"ab", b"abd", b"abcd", b"xbc"] {
            assert!(!constant_time_eq(given, b"abc"), "{given:?}");
        }
    }
}
