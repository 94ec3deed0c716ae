//! The page frame, the base URL, time formatting and error pages.

use axum::extract::{FromRequestParts, OriginalUri};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, html};

use super::reads::ReadError;
use super::viewer::Viewer;

/// Where the console is mounted, with a trailing slash (`/` at the root,
/// `/ops/leasehold/` when nested there): every link is relative to it.
pub(super) struct Base(pub(super) String);

impl<S: Send + Sync> FromRequestParts<S> for Base {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let inner = parts.uri.path().to_owned();
        let original = match OriginalUri::from_request_parts(parts, state).await {
            Ok(OriginalUri(uri)) => uri.path().to_owned(),
            Err(never) => match never {},
        };
        // Nested at /p, a request for /p reaches the console as "/".
        let prefix = original
            .strip_suffix(inner.as_str())
            .or((inner == "/").then_some(original.as_str()))
            .unwrap_or("");
        Ok(Base(format!("{}/", prefix.trim_end_matches('/'))))
    }
}

/// Which tab is open.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Tab {
    Leases,
    Fleet,
    Kinds,
    None,
}

/// A whole page: head, navigation, `body` in `<main>`. `refresh_secs` 0
/// leaves the page still (forms, errors).
pub(super) fn page(base: &Base, title: &str, tab: Tab, viewer: &Viewer, refresh_secs: u64, body: Markup) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                base href=(base.0);
                title { (title) " · leasehold" }
                link rel="stylesheet" href="assets/console.css";
                script src="assets/console.js" defer {}
            }
            body data-refresh=(refresh_secs) {
                header {
                    a.brand href="./" { "leasehold" }
                    nav {
                        a href="./" class=[(tab == Tab::Leases).then_some("open")] { "Leases" }
                        a href="fleet" class=[(tab == Tab::Fleet).then_some("open")] { "Fleet" }
                        a href="kinds" class=[(tab == Tab::Kinds).then_some("open")] { "Kinds" }
                    }
                    span.who {
                        // Replaced by the auto-refresh with the fresh page's:
                        // who acts can change (a session ends, a hook answers
                        // otherwise) while the page stays open.
                        span #viewer { @match viewer {
                            Viewer::Actor { name, csrf, session } => {
                                "acting as " strong #actor { bdi { (name) } }
                                @if *session {
                                    form.logout method="post" action="logout" {
                                        input type="hidden" name="csrf" value=(csrf);
                                        button #logout type="submit" { "log out" }
                                    }
                                }
                            }
                            Viewer::ReadOnly { can_log_in: true, .. } => { "read-only · " a href="login" { "log in" } }
                            Viewer::ReadOnly { .. } => { "read-only" }
                        } }
                        @if refresh_secs > 0 {
                            " · " label { input #autorefresh type="checkbox" checked; " auto-refresh" }
                        }
                    }
                }
                main { (body) }
            }
        }
    };
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        )],
        escape_hidden_text(&markup.into_string()),
    )
        .into_response()
}

/// The page with every hidden character (`leasehold_rules::hidden_char`:
/// a bidirectional control such as U+2069 then U+202E, INVISIBLE TIMES,
/// a filler…) in its text and attributes written out visibly
/// (`\u{202e}`), so no key, holder, job name, error text or actor can
/// close the `<bdi>` it is shown in, reorder the row, or display as
/// another name — whichever page shows it, however it got into the table.
/// Done once on the whole page, so no interpolation can be missed.
///
/// Two exceptions. Form values (`value="…"`) are left as they are: an
/// action on a key stored before names were checked must still name it
/// exactly. And the console's own isolates ([`isolate`]: U+2068 … U+2069
/// with nothing hidden between, in a `<title>` or SVG `<text>`, which
/// cannot hold a `<bdi>`) are kept: the text they enclose is escaped
/// already, so they are balanced and reorder nothing outside.
///
/// maud escapes `<`, `>`, `&` and `"` in every value, so a `<` or `>` in
/// the output is always markup and a `"` always ends an attribute.
fn escape_hidden_text(html: &str) -> String {
    use leasehold_rules::{escape_hidden, hidden_char};
    if leasehold_rules::find_hidden(html).is_none() {
        return html.to_owned();
    }
    let escape = |out: &mut String, c: char| out.push_str(&escape_hidden(c.encode_utf8(&mut [0; 4])));
    let mut out = String::with_capacity(html.len() + 64);
    // Inside a tag (and its name so far, or the attribute's); inside a
    // quoted attribute value, and whether it is a form value (kept).
    let (mut in_tag, mut in_value, mut keep) = (false, false, false);
    let mut name = String::new();
    let mut tag = String::new();
    // Inside a <title> or <text>, where the console's isolates are.
    let mut isolating = false;
    // The end of the isolate being kept (the byte offset of its U+2069).
    let mut kept_until: Option<usize> = None;
    for (at, c) in html.char_indices() {
        if in_value {
            if c == '"' {
                in_value = false;
            } else if !keep && hidden_char(c) {
                escape(&mut out, c);
                continue;
            }
        } else if in_tag {
            match c {
                '>' => {
                    in_tag = false;
                    match tag.to_ascii_lowercase().as_str() {
                        "title" | "text" => isolating = true,
                        "/title" | "/text" => isolating = false,
                        _ => {}
                    }
                }
                '"' => {
                    in_value = true;
                    keep = name.trim_end_matches('=').eq_ignore_ascii_case("value");
                }
                c if c.is_whitespace() => {
                    if tag.is_empty() {
                        tag = std::mem::take(&mut name);
                    }
                    name.clear();
                }
                c => name.push(c),
            }
            if !in_tag && tag.is_empty() {
                tag = std::mem::take(&mut name);
                match tag.to_ascii_lowercase().as_str() {
                    "title" | "text" => isolating = true,
                    "/title" | "/text" => isolating = false,
                    _ => {}
                }
            }
        } else if c == '<' {
            in_tag = true;
            name.clear();
            tag.clear();
        } else if hidden_char(c) {
            let rest = &html[at + c.len_utf8()..];
            let balanced = || {
                let end = rest.find(|c: char| c == '<' || hidden_char(c))?;
                rest[end..].starts_with('\u{2069}').then_some(at + c.len_utf8() + end)
            };
            if c == '\u{2068}' && isolating && kept_until.is_none() {
                if let Some(end) = balanced() {
                    kept_until = Some(end);
                    out.push(c);
                    continue;
                }
            } else if c == '\u{2069}' && kept_until == Some(at) {
                kept_until = None;
                out.push(c);
                continue;
            }
            escape(&mut out, c);
            continue;
        }
        out.push(c);
    }
    out
}

/// Text from outside the console (a key, a holder, an actor) isolated
/// for a place that cannot hold a `<bdi>` (SVG text, a tooltip, the
/// page's title): between U+2068 and U+2069, its own hidden characters
/// escaped, so the isolate is balanced (see [`page`]).
pub(super) fn isolate(text: &str) -> String {
    format!("\u{2068}{}\u{2069}", leasehold_rules::escape_hidden(text))
}

/// Headers on every answer (the router's layer puts them on all of them,
/// redirects and axum's own rejections included): no inline script or
/// style runs (so an unescaped value, were there one, could not execute),
/// no framing, no caching of pages that show live state.
pub(super) fn secure(response: &mut Response) {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
             form-action 'self'; base-uri 'self'; frame-ancestors 'none'",
        ),
    );
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
}

/// An error page with its status. The message is a fixed sentence
/// (`&'static str`): an error page quotes nothing from the request, so a
/// link cannot make the console say what its author wants.
pub(super) fn error(base: &Base, viewer: &Viewer, status: StatusCode, message: &'static str) -> Response {
    let mut response = page(
        base,
        status.canonical_reason().unwrap_or("error"),
        Tab::None,
        viewer,
        0,
        html! {
            h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or("")) }
            p #error { (message) }
            p { a href="./" { "Back to the leases" } }
        },
    );
    *response.status_mut() = status;
    response
}

/// Refuses a request whose text parameters PostgreSQL cannot take (a NUL
/// byte): 400 naming the parameter, before any statement, so a malformed
/// link is the client's mistake and never reads as the database failing.
pub(super) fn check_params(base: &Base, viewer: &Viewer, params: &[(&str, &str)]) -> Result<(), Box<Response>> {
    macro_rules! nul {
        ($what:literal) => {
            concat!(
                $what,
                " contains a NUL byte, which no key, job or holder can contain."
            )
        };
    }
    let Some((name, _)) = params.iter().find(|(_, value)| value.contains('\0')) else {
        return Ok(());
    };
    // The parameter's name is the console's own, never the request's.
    let message = match *name {
        "prefix" => nul!("The parameter `prefix`"),
        "job" => nul!("The parameter `job`"),
        "after" => nul!("The parameter `after`"),
        "name" => nul!("The parameter `name`"),
        "key" => nul!("The parameter `key`"),
        _ => nul!("A parameter of the address"),
    };
    Err(Box::new(error(base, viewer, StatusCode::BAD_REQUEST, message)))
}
/// Seconds a client is asked to wait (`Retry-After`) before retrying a
/// busy answer; a busy page retries by itself after as long.
pub(super) const RETRY_AFTER_SECS: u64 = 2;

/// What a request whose database work did not answer gets: the busy page,
/// or a 503 naming the failure.
pub(super) fn unavailable(base: &Base, viewer: &Viewer, err: ReadError, during: During) -> Response {
    match err {
        ReadError::Busy => busy(base, viewer, during),
        ReadError::Failed(err) => {
            // The database's message may quote the request's values: it
            // goes to the log, the page says what failed.
            tracing::warn!(error = %crate::validate::shown(&err.to_string()), "console: the database failed a request");
            let what = match during {
                During::Page { .. } => {
                    "The console could not read the lease table: the database answered with an error (the \
                     service's log has it)."
                }
                During::Action => {
                    "The action could not be taken: the database answered with an error (the service's log has \
                     it). Check the key's page before trying again."
                }
            };
            error(base, viewer, StatusCode::SERVICE_UNAVAILABLE, what)
        }
    }
}

/// What the request was doing when it found the database unavailable.
#[derive(Clone, Copy)]
pub(super) enum During {
    /// Showing a page; `refresh` is the console's refresh setting in
    /// seconds (0: pages never refresh themselves).
    Page { refresh: u64 },
    /// Taking an action (a POST).
    Action,
}

/// "Busy, retry": HTTP 503 with `Retry-After`, in the console's frame and
/// with its headers. A page view's busy page retries by itself (when pages
/// refresh at all) and is replaced by the page once it is served.
fn busy(base: &Base, viewer: &Viewer, during: During) -> Response {
    let (refresh, sentence) = match during {
        During::Page { refresh } => (
            if refresh > 0 { RETRY_AFTER_SECS } else { 0 },
            if refresh > 0 {
                "Nothing is wrong with the leases: this page tries again by itself in a moment."
            } else {
                "Nothing is wrong with the leases: reload the page in a moment."
            },
        ),
        // The pool may time out after an action's first statement: the
        // key's page (its actions list) says whether it was taken.
        During::Action => (
            0,
            "Your action may not have been taken: check the key's page (an action taken is listed there) \
             before trying it again.",
        ),
    };
    let mut response = page(
        base,
        "Busy",
        Tab::None,
        viewer,
        refresh,
        html! {
            h1 { "Busy, retry in a moment" }
            p #busy {
                "The console is busy: it uses only a few of the service's database connections at once, leaving \
                 the rest to the service and its jobs, and none came free in time. " (sentence)
            }
            p { a href="./" { "Back to the leases" } }
        },
    );
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    response
}

/// A time relative to the server's now ("in 12 s", "3 min ago"), with the
/// absolute server time on hover.
pub(super) fn when(at: DateTime<Utc>, now: DateTime<Utc>) -> Markup {
    let absolute = at.format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string();
    html! {
        time datetime=(at.to_rfc3339()) title={ (absolute) " (server clock)" } { (relative(at, now)) }
    }
}

/// "in 12 s", "3 min ago", "now".
pub(super) fn relative(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let ms = (at - now).num_milliseconds();
    let span = span(ms.unsigned_abs());
    match ms {
        -999..=999 => "now".to_owned(),
        ms if ms > 0 => format!("in {span}"),
        _ => format!("{span} ago"),
    }
}

/// How long the run holding `lease` has been going against its time limit
/// ("running 3 min of 15 min", "running 12 s, no limit"), by the server
/// clock; nothing unless a run holds it.
pub(super) fn running(lease: &crate::lease::LeaseInfo) -> Option<Markup> {
    let going = lease.running_for()?;
    let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let text = match lease.run_timeout {
        Some(limit) => format!("running {} of {}", span(ms(going)), span(ms(limit))),
        None => format!("running {}, no limit", span(ms(going))),
    };
    let title = match lease.run_timeout {
        Some(_) => "how long the run in progress has been going, against its time limit (JobSettings::timeout)",
        None => "how long the run in progress has been going; its job has no time limit (JobSettings::timeout)",
    };
    Some(html! { span.running title=(title) { (text) } })
}

/// A duration for people: "850 ms", "12 s", "3 min", "5 h", "2 d".
pub(super) fn span(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{} s", ms / 1_000),
        60_000..3_600_000 => format!("{} min", ms / 60_000),
        3_600_000..86_400_000 => format!("{} h", ms / 3_600_000),
        _ => format!("{} d", ms / 86_400_000),
    }
}

/// A query-string value, percent-encoded (for links built from keys).
pub(super) fn enc(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(byte as char),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_times_read_as_people_say_them() {
        let now = DateTime::parse_from_rfc3339("2026-12-01T03:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let s = chrono::TimeDelta::seconds;
        assert_eq!(relative(now + s(12), now), "in 12 s");
        assert_eq!(relative(now - s(180), now), "3 min ago");
        assert_eq!(relative(now, now), "now");
        assert_eq!(relative(now + s(7200), now), "in 2 h");
        assert_eq!(relative(now - s(3 * 86_400), now), "3 d ago");
    }

    #[test]
    fn hidden_characters_are_escaped_except_in_form_values_and_the_consoles_own_isolates() {
        let evil = "k\u{2069}\u{202e}evil";
        let html = format!(
            "<title>{t} · leasehold</title><td><bdi>{evil}</bdi></td><a title=\"{evil}\">x</a>\
             <input type=\"hidden\" name=\"key\" value=\"{evil}\"><text class=\"h\" x=\"4\">{t}</text>\
             <p>\u{2068}ok\u{2069} admin\u{2062}</p>",
            t = isolate(evil)
        );
        let out = escape_hidden_text(&html);
        let iso = "\u{2068}k\\u{2069}\\u{202e}evil\u{2069}";
        assert!(out.starts_with(&format!("<title>{iso} · leasehold</title>")), "{out}");
        assert!(out.contains("<bdi>k\\u{2069}\\u{202e}evil</bdi>"), "{out}");
        assert!(out.contains("title=\"k\\u{2069}\\u{202e}evil\""), "{out}");
        assert!(
            out.contains(&format!("value=\"{evil}\"")),
            "a form value names the key exactly: {out}"
        );
        assert!(out.contains(&format!("x=\"4\">{iso}</text>")), "{out}");
        assert!(
            out.contains("<p>\\u{2068}ok\\u{2069} admin\\u{2062}</p>"),
            "an isolate outside a title is no isolate of the console's: {out}"
        );
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(enc("a b&c=d/<é>"), "a%20b%26c%3Dd%2F%3C%C3%A9%3E");
    }
}
