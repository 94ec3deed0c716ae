//! The operator console: server-rendered pages over the lease table, to
//! mount in your service (feature `console`).
//!
//! What it guarantees:
//!
//! - **It reads and acts through the library only.** Pages read with
//!   [`LeaseStore`] (`list_page`, `history`, `recent_runs`, `actions`,
//!   `fleet`, `pauses`, `limits`, `stored_keys`, `kinds`, `keys_not_run`); actions go through [`Operator`](crate::operator::Operator),
//!   so each is recorded in the key's history with who took it.
//! - **Read-only unless you say who may act**: pass
//!   [`ConsoleOptions::authorize`] (your own authentication decides) or
//!   [`ConsoleOptions::token`] (a shared secret typed into its login page).
//! - **No action by GET, none without its CSRF token**: an action is a
//!   POST from a confirmation page, carrying a token bound to the actor;
//!   cross-site requests (`Sec-Fetch-Site`) are refused.
//! - **A token login is hard to guess and hard to reuse**: a token under
//!   128 bits is refused, failed logins are throttled, a session ends after
//!   [`ConsoleOptions::session_idle`] (30 min) or 12 h and answers only on
//!   the `Host` it was issued on; over TLS, [`ConsoleOptions::secure_cookie`]
//!   makes its cookie `Secure` (`__Host-` at the root). Logging out takes
//!   the CSRF token too.
//! - **Only its own names**: with [`ConsoleOptions::allowed_hosts`] any
//!   other `Host` (DNS rebinding) gets 421.
//! - **Who acted is who it says**: actor names cannot carry invisible or
//!   text-direction characters; beside the hook, a token login is recorded
//!   as `token:<name>`.
//! - **Everything is escaped and isolated**: keys, holders, job names and
//!   error messages are text (maud escapes every interpolated value) in a
//!   `<bdi>`, so none reorders the console's own words, and every hidden
//!   character in them (bidirectional controls, invisible and format
//!   characters, fillers: `leasehold_rules::hidden_char`) is shown escaped
//!   (`\u{202e}`), so none can close that isolate; its messages are fixed
//!   sentences, never text from the URL, and an action's outcome is shown
//!   only to the actor who took it, on the first view of its page after
//!   the action (a link cannot make it say "Paused."); every answer carries a
//!   strict Content-Security-Policy (only the console's own script and
//!   style) and the other security headers.
//! - **It cannot starve the service or the runtime**: at most
//!   [`ConsoleOptions::max_concurrent_reads`] requests (default 1) use the
//!   database at once, each holding at most one connection; the others
//!   wait their turn for [`ConsoleOptions::read_wait`] (default 1 s), then
//!   get a "busy, retry" page (HTTP 503 with `Retry-After`). So a burst of
//!   page views on a pool the runtime shares cannot delay its heartbeats.
//! - **Self-contained**: its CSS and one small script (`assets/console.js`:
//!   auto-refresh, keeping an action's result on the page meanwhile) are
//!   compiled in; nothing is fetched from elsewhere.
//! - **Works under any path**: pages link relatively from a `<base href>`
//!   computed from the request, so it works under any prefix. Mount it
//!   with `Router::nest_service`, which (unlike `nest` in axum 0.8) also
//!   routes the prefix with a trailing slash (`/ops/leasehold/`) to it.
//!
//! Pages (relative to where it is mounted): the leases (`./`, filter by
//! `prefix`, `state`, `job`; each key with its last 10 outcomes), one key
//! (`key?key=…`: tenure, tenure timeline, runs, fences, actions), a job
//! (`job?name=…`: its keys, its pause, its fleet-wide limit, the timeline of its keys, and
//! pause, resume and trigger-every-key), the fleet (`fleet`: holders
//! seen in the last 15 minutes, their runs in progress), and the job kinds
//! (`kinds`: each kind's keys, whether a live replica registers it, its
//! keys with unreadable arguments, and the stored keys that do not run).
//! The leases page also lists every pause in force, a key's with no lease
//! row included, and every fleet-wide limit with its runs in progress,
//! keys waiting and longest wait, and badges a stored key that does not run (unreadable
//! arguments, or a kind no live replica registers); its key page says why.
//! The tenure timeline is inline SVG drawn by the server: a lane per
//! holder over the last hour (`window=30m`, `6h`, `2d`: 1 min to 7 days),
//! a bar per recorded run from claim to release coloured by outcome, with
//! its fence, operators' revokes and pauses marked.
//!
//! ```no_run
//! # async fn demo(pool: sqlx::PgPool, your_routes: axum::Router) {
//! use axum::Router;
//! use leasehold::console::{self, ConsoleOptions};
//!
//! let options = ConsoleOptions::new()
//!     .authorize(|req| req.headers.get("x-forwarded-user")?.to_str().ok().map(String::from));
//! let app: Router = Router::new()
//!     .nest_service("/ops/leasehold", console::router(pool.clone(), options))
//!     .merge(your_routes);
//! # }
//! ```

mod access;
mod actions;
mod assets;
mod done;
mod fleet;
mod key;
mod kinds;
mod layout;
mod leases;
mod options;
mod reads;
mod timeline;
mod viewer;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use sqlx::PgPool;

use crate::lease::LeaseStore;
pub use options::ConsoleOptions;

/// What every handler shares.
struct Console {
    store: LeaseStore,
    options: ConsoleOptions,
    access: access::Access,
    /// The console's share of the database.
    reads: reads::Reads,
}

type Shared = Arc<Console>;

/// The console as an axum [`Router`], to serve or to `nest_service` under a path of
/// your choice. It uses `pool` for its reads and actions (one statement at
/// a time, like every leasehold call: it never holds a connection between
/// requests), at most [`ConsoleOptions::max_concurrent_reads`] requests at
/// once, so a flood of page views leaves the rest of the pool to the
/// service and the runtime. See the [module docs](self) for what it
/// guarantees.
pub fn router(pool: PgPool, options: ConsoleOptions) -> Router {
    let console = Arc::new(Console {
        store: LeaseStore::new(pool),
        access: access::Access::new(&options),
        reads: reads::Reads::new(&options),
        options,
    });
    Router::new()
        .route("/", get(leases::page))
        .route("/key", get(key::page))
        .route("/job", get(leases::job))
        .route("/fleet", get(fleet::page))
        .route("/kinds", get(kinds::page))
        .route("/confirm", get(actions::confirm))
        .route("/action", post(actions::act))
        .route("/login", get(access::login_page).post(access::login))
        .route("/logout", post(access::logout))
        .route("/assets/{file}", get(assets::serve))
        // Nested at /p, axum routes "/p" to "/" but "/p/" to the fallback.
        .fallback(leases::root_or_not_found)
        // Inside the headers' layer, so a refused `Host` gets them too.
        .layer(middleware::from_fn_with_state(console.clone(), check_host))
        .layer(middleware::map_response(with_security_headers))
        .with_state(console)
}

/// The security headers on every answer the router gives: pages, redirects,
/// assets, 404/405, and axum's own rejections (a malformed query or form).
async fn with_security_headers(mut response: Response) -> Response {
    layout::secure(&mut response);
    response
}

/// Refuses a request whose `Host` is not one of
/// [`ConsoleOptions::allowed_hosts`] (when set): 421, before any handler.
async fn check_host(State(console): State<Shared>, request: Request, next: Next) -> Response {
    if let Some(allowed) = &console.options.allowed_hosts {
        let (parts, body) = request.into_parts();
        let host = access::request_host(&parts);
        if !allowed.contains(&host) {
            return (
                StatusCode::MISDIRECTED_REQUEST,
                "This console does not answer to that host name: use the address it was started on.\n",
            )
                .into_response();
        }
        return next.run(Request::from_parts(parts, body)).await;
    }
    next.run(request).await
}
