//! Requests to a console `Router` in process, and what the tests read off
//! its answers.

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use leasehold::console::{self, ConsoleOptions};
use sqlx::PgPool;
use tower::ServiceExt;

/// An answer: status, headers, body as text.
pub struct Page {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Page {
    /// The value of the hidden `csrf` field of the page's form.
    pub fn csrf(&self) -> String {
        let at = self
            .body
            .find("name=\"csrf\" value=\"")
            .expect("a form with a csrf field")
            + 19;
        self.body[at..].split('"').next().expect("csrf value").to_owned()
    }

    /// The `Location` of a redirect.
    pub fn location(&self) -> &str {
        self.headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .expect("a Location header")
    }

    /// The `data-key` of every row of the leases table, in order.
    pub fn listed_keys(&self) -> Vec<String> {
        self.body
            .split("<tr class=\"lease\" data-key=\"")
            .skip(1)
            .map(|rest| unescape(rest.split('"').next().unwrap_or_default()))
            .collect()
    }
}

/// The console at the root, with `options`.
pub fn console(pool: &PgPool, options: ConsoleOptions) -> Router {
    console::router(pool.clone(), options)
}

/// Any request; `headers` are (name, value) pairs.
pub async fn send(app: &Router, request: Request<Body>) -> Page {
    let response = app.clone().oneshot(request).await.expect("the router answers");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 4 << 20)
        .await
        .expect("a body");
    Page {
        status,
        headers,
        body: String::from_utf8(bytes.to_vec()).expect("utf-8"),
    }
}

/// GET `uri` with `headers`.
pub async fn get(app: &Router, uri: &str, headers: &[(&str, &str)]) -> Page {
    let mut request = Request::get(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    send(app, request.body(Body::empty()).expect("request")).await
}

/// POST `uri` with a urlencoded `form` and `headers`.
pub async fn post(app: &Router, uri: &str, form: &[(&str, &str)], headers: &[(&str, &str)]) -> Page {
    let body: Vec<String> = form.iter().map(|(k, v)| format!("{}={}", enc(k), enc(v))).collect();
    let mut request = Request::post(uri).header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    send(app, request.body(Body::from(body.join("&"))).expect("request")).await
}

/// Percent-encodes a query or form value.
pub fn enc(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Reverses maud's escaping of an attribute value.
fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}
