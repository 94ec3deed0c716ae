//! The leases page (`./`): every key, filtered by prefix, state and job,
//! a page at a time; and `job?name=…`, the target of Grafana's per-job
//! links.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};

use super::Shared;
use super::layout::{self, Base, During, Tab, enc, when};
use crate::lease::{KeyFilter, KeyState, KeyStatus};

/// Keys on one page of the list.
const PAGE: usize = 200;

#[derive(serde::Deserialize, Default)]
pub(super) struct LeasesQuery {
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    job: String,
    after: Option<String>,
}

/// GET `./`.
pub(super) async fn page(
    State(console): State<Shared>,
    base: Base,
    parts: Parts,
    Query(query): Query<LeasesQuery>,
) -> Response {
    let viewer = console.access.viewer(&console.options, &parts);
    let after = query.after.as_deref().unwrap_or("");
    let params = [("prefix", query.prefix.as_str()), ("job", &query.job), ("after", after)];
    if let Err(refusal) = layout::check_params(&base, &viewer, &params) {
        return *refusal;
    }
    let state = match KeyState::parse(&query.state) {
        Ok(state) => state,
        Err(err) => return layout::error(&base, &viewer, StatusCode::BAD_REQUEST, &err.to_string()),
    };
    let mut filter = KeyFilter::new().prefix(query.prefix.clone()).state(state).limit(PAGE);
    if !query.job.is_empty() {
        filter = filter.job(query.job.clone());
    }
    if let Some(after) = query.after.as_deref().filter(|a| !a.is_empty()) {
        filter = filter.after(after);
    }
    let during = During::Page {
        refresh: console.options.refresh.as_secs(),
    };
    let page = match console.reads.run(console.store.list_page(&filter)).await {
        Ok(page) => page,
        Err(err) => return layout::unavailable(&base, &viewer, err, during),
    };
    let next = page.next.as_ref().map(|after| {
        format!(
            "./?prefix={}&state={}&job={}&after={}",
            enc(&query.prefix),
            state,
            enc(&query.job),
            enc(after)
        )
    });
    let body = html! {
        h1 { "Leases" }
        form.filters method="get" action="./" {
            label { "Key prefix " input name="prefix" value=(query.prefix) placeholder="tenant-"; }
            label { "State "
                select name="state" {
                    @for s in [KeyState::All, KeyState::Held, KeyState::Free, KeyState::Paused] {
                        option value=(s) selected[s == state] { (s) }
                    }
                }
            }
            label { "Job " input name="job" value=(query.job); }
            button type="submit" { "Filter" }
        }
        @if page.keys.is_empty() {
            p.empty { "No key matches. Keys appear when a runtime registers its jobs." }
        } @else {
            (table(&page.keys))
        }
        @if let Some(next) = next {
            p { a #next href=(next) { "Next " (PAGE) " keys →" } }
        }
    };
    layout::page(
        &base,
        "Leases",
        Tab::Leases,
        &viewer,
        console.options.refresh.as_secs(),
        body,
    )
}

/// The fallback: the leases page for the mount point's own path with a
/// trailing slash, a 404 page for anything else.
pub(super) async fn root_or_not_found(
    State(console): State<Shared>,
    base: Base,
    parts: Parts,
    query: Query<LeasesQuery>,
) -> Response {
    if matches!(parts.uri.path(), "" | "/") && parts.method == axum::http::Method::GET {
        return page(State(console), base, parts, query).await;
    }
    let viewer = console.access.viewer(&console.options, &parts);
    layout::error(&base, &viewer, StatusCode::NOT_FOUND, "No such page in the console.")
}

fn table(keys: &[KeyStatus]) -> Markup {
    html! {
        table #leases {
            thead { tr {
                th { "Key" } th { "State" } th { "Holder" } th { "Fence" } th { "Time left" }
                th { "Next due" } th { "Last run" } th { "Job" }
            } }
            tbody {
                @for k in keys {
                    @let lease = &k.lease;
                    @let now = lease.server_now;
                    tr.lease data-key=(lease.key) {
                        td.key { a href={ "key?key=" (enc(&lease.key)) } { bdi { (lease.key) } } }
                        td.state { span class={ "badge " (k.state()) } { (k.state()) } }
                        td.holder {
                            @if lease.never_run() { span.muted { "never run" } } @else { bdi { (lease.holder) } }
                        }
                        td.fence { @if !lease.never_run() { (lease.fence) } }
                        td.left {
                            @if lease.is_held() { (when(lease.expires_at, now)) } @else { span.muted { "free" } }
                        }
                        td.due {
                            @if lease.due_only_when_triggered() { span.muted { "when triggered" } }
                            @else if let Some(due) = lease.next_due_at { (when(due, now)) }
                            @else { "now" }
                        }
                        td.last {
                            @if let Some(run) = &k.last {
                                span class={ "outcome " (run.outcome) } { (run.outcome) } " " (when(run.ended_at, now))
                            } @else { span.muted { "none" } }
                        }
                        td.job { bdi { (lease.job_name.as_deref().unwrap_or("")) } }
                    }
                }
            }
        }
    }
}

#[derive(serde::Deserialize)]
pub(super) struct JobQuery {
    #[serde(default)]
    name: String,
}

/// GET `job?name=…`: the job's key page if it has one key, else the list
/// of its keys. Grafana's per-job panels link here (metrics carry the job,
/// not the key).
pub(super) async fn job(
    State(console): State<Shared>,
    base: Base,
    parts: Parts,
    Query(query): Query<JobQuery>,
) -> Response {
    let viewer = console.access.viewer(&console.options, &parts);
    if let Err(refusal) = layout::check_params(&base, &viewer, &[("name", &query.name)]) {
        return *refusal;
    }
    let filter = KeyFilter::new().job(query.name.clone()).limit(2);
    let during = During::Page {
        refresh: console.options.refresh.as_secs(),
    };
    match console.reads.run(console.store.list_page(&filter)).await {
        Ok(page) if page.keys.len() == 1 => {
            Redirect::to(&format!("{}key?key={}", base.0, enc(&page.keys[0].lease.key))).into_response()
        }
        Ok(_) => Redirect::to(&format!("{}?job={}", base.0, enc(&query.name))).into_response(),
        Err(err) => layout::unavailable(&base, &viewer, err, during),
    }
}
