//! The leases page (`./`): every key, filtered by prefix, state and job,
//! a page at a time, every pause in force and every fleet-wide limit with
//! its runs in progress and keys waiting; and a job's page (`job?name=…`,
//! the target of Grafana's per-job links): its keys, its limit and the
//! job-level actions.

use std::collections::HashMap;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::Response;
use chrono::{DateTime, Utc};
use maud::{Markup, html};

use super::Shared;
use super::actions::{NOT_A_JOB, confirm_page, page_of};
use super::kinds::not_run_badge;
use super::layout::{self, Base, During, Tab, enc, when};
use super::timeline::{self, Timeline};
use super::viewer::Viewer;
use crate::lease::{
    ActionRecord, FleetLimit, KeyFilter, KeyPage, KeyState, KeyStatus, LeaseStore, Pause, RunRecord, StoredKey, Target,
};
use crate::operator::OperatorAction;

/// Keys on one page of the list.
const PAGE: usize = 200;
/// Runs in each key's strip of recent outcomes.
const STRIP: usize = 10;
/// Runs of each key a job's timeline reads, at most: its window shows
/// those that fall in it.
const JOB_TIMELINE_RUNS: usize = 200;
/// Operators' actions a job's timeline reads (revokes and pauses).
const JOB_ACTIONS: usize = 200;

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
        Err(_) => {
            return layout::error(
                &base,
                &viewer,
                StatusCode::BAD_REQUEST,
                "Not a key state (`state`): use all, paused, held or free, or never-run for keys no run has \
                 claimed yet.",
            );
        }
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
    let Listing {
        page,
        pauses,
        limits,
        now,
        recent,
        stored,
        ..
    } = match console.reads.run(listing(&console.store, &filter, None)).await {
        Ok(read) => read,
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
                    @for s in [KeyState::All, KeyState::Held, KeyState::Free, KeyState::NeverRun, KeyState::Paused,
                               KeyState::Removed] {
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
            (table(&page.keys, &recent, &stored))
        }
        @if let Some(next) = next {
            p { a #next href=(next) { "Next " (PAGE) " keys →" } }
        }
        (pauses_in_force(&viewer, &pauses, now))
        (limits_in_force(&limits, now))
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

/// The keys, each with the strip of its `recent` runs (newest first) and,
/// for a `stored` key that does not run, a badge saying why.
fn table(keys: &[KeyStatus], recent: &[RunRecord], stored: &[StoredKey]) -> Markup {
    let mut strips: HashMap<&str, Vec<&RunRecord>> = HashMap::new();
    for run in recent {
        strips.entry(run.key.as_str()).or_default().push(run);
    }
    let stored: HashMap<&str, &StoredKey> = stored.iter().map(|k| (k.key.as_str(), k)).collect();
    html! {
        table #leases {
            thead { tr {
                th { "Key" } th { "State" } th { "Holder" } th { "Fence" } th { "Time left" }
                th { "Next due" } th { "Last run" } th { "Recent runs" } th { "Job" }
            } }
            tbody {
                @for k in keys {
                    @let lease = &k.lease;
                    @let now = lease.server_now;
                    tr.lease data-key=(lease.key) {
                        td.key { a href={ "key?key=" (enc(&lease.key)) } { bdi { (lease.key) } } }
                        td.state {
                            span class={ "badge " (k.state()) } { (k.state()) }
                            @if let Some(running) = layout::running(lease) { " " (running) }
                            @if let Some(stored) = stored.get(lease.key.as_str()) { (not_run_badge(stored)) }
                        }
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
                                @if run.earlier_life { " " span.earlier-life { "(earlier life)" } }
                            } @else { span.muted { "none" } }
                        }
                        td.recent { (timeline::strip(strips.get(lease.key.as_str()).map_or(&[][..], Vec::as_slice))) }
                        td.job { bdi { (lease.job_name.as_deref().unwrap_or("")) } }
                    }
                }
            }
        }
    }
}

/// Every pause in force, as `leasehold pause --list` shows them: a pause
/// of a key with no lease row (paused before any runtime registered it, or
/// after it was forgotten) is listed too, since no key row shows it.
fn pauses_in_force(viewer: &Viewer, pauses: &[Pause], now: DateTime<Utc>) -> Markup {
    html! {
        h2 #pauses-in-force { "Pauses in force" }
        @if pauses.is_empty() { p.empty { "No pause in force." } } @else {
            table #pauses {
                thead { tr { th { "Paused" } th { "By" } th { "Since" } th { "Keys" } th { "Runs" } th {} } }
                tbody { @for p in pauses {
                    tr.pause data-scope=(p.target.scope()) data-name=(p.target.name()) {
                        td { (p.target.scope()) " " a href=(page_of(&p.target)) { bdi { (p.target.name()) } } }
                        td { bdi { (p.paused_by) } }
                        td { (when(p.paused_at, now)) }
                        td.keys {
                            @if p.keys == 0 && matches!(p.target, Target::Key(_)) { span.muted { "no lease row" } }
                            @else { (p.keys) }
                        }
                        td { (p.running) " running" @if p.cancel { ", cancelled" } }
                        td { @if let Viewer::Actor { .. } = viewer {
                            a.action href=(confirm_page(&p.target, OperatorAction::Resume)) { "Resume" }
                        } }
                    }
                } }
            }
        }
    }
}

/// Every fleet-wide limit in force (`leasehold limit list`): each job's
/// runs in progress against its limit, its keys waiting for a place and
/// the longest wait. Nothing when no limit is set.
fn limits_in_force(limits: &[FleetLimit], now: DateTime<Utc>) -> Markup {
    html! {
        @if !limits.is_empty() {
            h2 #limits-in-force { "Fleet-wide limits" }
            table #limits {
                thead { tr {
                    th { "Job" } th { "Running / limit" } th { "Waiting" } th { "Longest wait" } th { "Set by" }
                    th { "Since" }
                } }
                tbody { @for l in limits {
                    tr.limit data-job=(l.job) {
                        td { a href={ "job?name=" (enc(&l.job)) } { bdi { (l.job) } } }
                        td.running-limit { (limit_use(l)) }
                        td.waiting { (l.waiting) }
                        td.longest-wait { (longest_wait(l)) }
                        td { bdi { (l.set_by) } }
                        td { (when(l.set_at, now)) }
                    }
                } }
            }
        }
    }
}

/// "3 / 4"; a limit lowered under its runs in progress says so.
fn limit_use(limit: &FleetLimit) -> Markup {
    html! {
        (limit.running) " / " (limit.limit)
        @if limit.running > limit.limit {
            " " span.muted title="the limit was lowered while these ran: they finish, and no new run starts until \
                                 fewer run than the limit" { "(lowered)" }
        }
    }
}

/// How long the longest-waiting key has been due, or "none waits".
fn longest_wait(limit: &FleetLimit) -> Markup {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    html! {
        @if let Some(wait) = limit.longest_wait() { (layout::span(ms(wait))) } @else { span.muted { "none waits" } }
    }
}

#[derive(serde::Deserialize)]
pub(super) struct JobQuery {
    #[serde(default)]
    name: String,
    /// The timeline's window (`30m`, `6h`, `2d`); an hour by default.
    #[serde(default)]
    window: String,
}

/// GET `job?name=…`: the job's keys, its pause and the job-level actions
/// (pause, resume, trigger every key). Grafana's per-job panels link here
/// (metrics carry the job, not the key).
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
    let name = query.name.as_str();
    if crate::validate::existing_job_name(name).is_err() {
        return layout::error(&base, &viewer, StatusCode::BAD_REQUEST, NOT_A_JOB);
    }
    let Ok(window) = timeline::parse_window(&query.window) else {
        return layout::error(&base, &viewer, StatusCode::BAD_REQUEST, timeline::NOT_A_WINDOW);
    };
    let filter = KeyFilter::new().job(name).limit(PAGE);
    let during = During::Page {
        refresh: console.options.refresh.as_secs(),
    };
    let Listing {
        page,
        pauses,
        limits,
        now,
        recent,
        windowed,
        actions,
        stored,
    } = match console
        .reads
        .run(listing(&console.store, &filter, Some((name, window))))
        .await
    {
        Ok(read) => read,
        Err(err) => return layout::unavailable(&base, &viewer, err, during),
    };
    let own = Target::job(name);
    let paused = pauses.iter().find(|p| p.target == own);
    let limit = limits.iter().find(|l| l.job == name);
    let target = Target::job(name);
    let offered = [
        if paused.is_some() {
            OperatorAction::Resume
        } else {
            OperatorAction::Pause
        },
        OperatorAction::Trigger,
    ];
    // The job's pauses and its keys' revokes: a key's own pause would
    // shade the whole job.
    let marked: Vec<ActionRecord> = actions
        .into_iter()
        .filter(|a| a.fence.is_some() || matches!(a.target, Target::Job(_)))
        .collect();
    let body = html! {
        h1 { "Job " bdi #job { (name) } }
        @if let Some(done) = console.access.take_flash(&viewer, &target) { p #flash { (done.text()) } }
        dl #job-pause {
            dt { "State" }
            @if let Some(p) = paused {
                dd { span.badge.paused #job-state { "paused" } " by " bdi { (p.paused_by) } " " (when(p.paused_at, now))
                     @if p.cancel { " (runs in progress cancelled)" } }
            } @else {
                dd { span #job-state { "not paused as a job" } }
            }
            dt { "Fleet-wide limit" }
            @if let Some(l) = limit {
                dd #job-limit { (limit_use(l)) " running, " (l.waiting) " waiting (longest " (longest_wait(l)) "); set by "
                    bdi { (l.set_by) } " " (when(l.set_at, now)) }
            } @else {
                dd #job-limit { span.muted { "none: its runs are limited only by each replica's own limits" } }
            }
        }
        @if let Viewer::Actor { .. } = viewer {
            nav.actions {
                @for action in offered {
                    a.action id={ "action-" (action.as_str()) } href=(confirm_page(&target, action)) {
                        @if action == OperatorAction::Trigger { "Trigger every key" } @else { (action.label()) " the job" }
                    }
                }
            }
        }
        h2 #tenures { "Tenures of its keys" }
        (Timeline::new(name, now, window, true).runs(&windowed).actions(&marked, &paused.into_iter().collect::<Vec<_>>())
            .render(&format!("job?name={}&", enc(name))))
        h2 { "Keys" }
        @if page.keys.is_empty() {
            p.empty { "No key of this job has a lease row: no runtime registered it yet." }
        } @else {
            (table(&page.keys, &recent, &stored))
        }
        @if let Some(after) = &page.next {
            p { a #next href={ "./?job=" (enc(name)) "&after=" (enc(after)) } { "Next " (PAGE) " keys →" } }
        }
    };
    let title = layout::isolate(name);
    layout::page(
        &base,
        &title,
        Tab::None,
        &viewer,
        console.options.refresh.as_secs(),
        body,
    )
}

/// What a list of keys shows.
struct Listing {
    page: KeyPage,
    /// The pauses in force.
    pauses: Vec<Pause>,
    /// The fleet-wide limits in force.
    limits: Vec<FleetLimit>,
    /// The server's clock, to show times against.
    now: DateTime<Utc>,
    /// The latest runs of each key, for its strip.
    recent: Vec<RunRecord>,
    /// The runs of the keys that ended within the window (when one is
    /// asked for), for the timeline.
    windowed: Vec<RunRecord>,
    /// The operators' actions on the job and its keys (with a window).
    actions: Vec<ActionRecord>,
    /// Those of the keys that are keys of job kinds (one statement for
    /// the page), for the badge of one that does not run.
    stored: Vec<StoredKey>,
}

/// One page of keys, the pauses and limits in force, the server's clock (a row
/// brings it, an empty page asks for it), the keys' latest runs (one
/// statement for the whole page), which of them are stored keys of job
/// kinds (one statement) and, for a job's timeline over a window,
/// their runs in it and the operators' actions on the job and its keys.
async fn listing(store: &LeaseStore, filter: &KeyFilter, timeline: Option<(&str, Duration)>) -> crate::Result<Listing> {
    let page = store.records().list_page(filter).await?;
    let pauses = store.controls().pauses().await?;
    let limits = store.controls().limits().await?;
    let now = match page.keys.first() {
        Some(k) => k.lease.server_now,
        None => store.server_now().await?,
    };
    let keys: Vec<&str> = page.keys.iter().map(|k| k.lease.key.as_str()).collect();
    let recent = store.records().recent_runs(&keys, None, STRIP).await?;
    let stored = store.keys().get_many(&keys).await?;
    let (windowed, actions) = match timeline {
        Some((job, window)) => {
            let since = now - chrono::TimeDelta::from_std(window).unwrap_or(chrono::TimeDelta::MAX);
            (
                store
                    .records()
                    .recent_runs(&keys, Some(since), JOB_TIMELINE_RUNS)
                    .await?,
                store.records().job_actions(job, JOB_ACTIONS).await?,
            )
        }
        None => (Vec::new(), Vec::new()),
    };
    Ok(Listing {
        page,
        pauses,
        limits,
        now,
        recent,
        windowed,
        actions,
        stored,
    })
}
