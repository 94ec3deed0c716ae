//! One key's page (`key?key=…`): its current tenure, its runs, its fences
//! and the operators' actions on it.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::Response;
use chrono::{DateTime, Utc};
use maud::{Markup, html};

use super::Shared;
use super::actions::{NOT_A_KEY, OFFERED, confirm_page, page_of};
use super::done::Done;
use super::kinds::stored_box;
use super::layout::{self, Base, During, Tab, enc, span, when};
use super::reads::ReadError;
use super::timeline::{self, Timeline};
use super::viewer::Viewer;
use crate::key::Key;
use crate::lease::{ActionRecord, KeyState, KeyStatus, Pause, RunRecord, StoredKey, Target};
use crate::operator::OperatorAction;

/// Runs and actions shown on the page.
const SHOWN: usize = 50;
/// Runs the timeline reads: its window shows those that fall in it.
const TIMELINE_RUNS: usize = 1000;

#[derive(serde::Deserialize)]
pub(super) struct KeyQuery {
    #[serde(default)]
    key: String,
    /// The timeline's window (`30m`, `6h`, `2d`); an hour by default.
    #[serde(default)]
    window: String,
}

/// GET `key?key=…`.
pub(super) async fn page(
    State(console): State<Shared>,
    base: Base,
    parts: Parts,
    Query(query): Query<KeyQuery>,
) -> Response {
    let viewer = console.access.viewer(&console.options, &parts);
    if let Err(refusal) = layout::check_params(&base, &viewer, &[("key", &query.key)]) {
        return *refusal;
    }
    // The key is checked here, where it enters, and trusted by every read.
    let Ok(key) = Key::new(query.key.as_str()) else {
        return layout::error(&base, &viewer, StatusCode::BAD_REQUEST, NOT_A_KEY);
    };
    let key = &key;
    let Ok(window) = timeline::parse_window(&query.window) else {
        return layout::error(&base, &viewer, StatusCode::BAD_REQUEST, timeline::NOT_A_WINDOW);
    };
    let store = &console.store;
    let read = async {
        let status = store.records().status(key).await?;
        let runs = store.records().history(key, TIMELINE_RUNS).await?;
        let actions = store.records().actions(key, SHOWN).await?;
        let pauses = store.controls().pauses().await?;
        let stored = store.keys().get(key).await?;
        // Times are shown against the server's clock; a key with no row
        // brings none, so it is asked for.
        let now = match &status {
            Some(status) => status.lease.server_now,
            None => store.server_now().await?,
        };
        crate::Result::Ok((status, runs, actions, pauses, stored, now))
    };
    let during = During::Page {
        refresh: console.options.refresh.as_secs(),
    };
    let (status, runs, actions, pauses, stored, now) = match console.reads.run(read).await {
        Ok(read) => read,
        Err(ReadError::Failed(crate::Error::InvalidInput { .. })) => {
            return layout::error(&base, &viewer, StatusCode::BAD_REQUEST, NOT_A_KEY);
        }
        Err(err) => return layout::unavailable(&base, &viewer, err, during),
    };
    let done = console.access.take_flash(&viewer, &Target::from(key.clone()));
    let Some(status) = status else {
        return no_row(&base, &viewer, key, done, &pauses, stored.as_ref(), now);
    };
    let covering: Vec<&Pause> = pauses
        .iter()
        .filter(|p| p.target.covers(key, status.lease.job_name.as_deref()))
        .collect();
    // The tables show the latest runs; the timeline all in its window.
    let shown = &runs[..runs.len().min(SHOWN)];
    let body = html! {
        h1 #key { bdi { (key) } }
        @if let Some(done) = done { p #flash { (done.text()) } }
        (tenure(&status, &covering, &actions))
        @if let Some(stored) = &stored { (stored_box(stored, now)) }
        (actions_bar(&viewer, key, &covering))
        h2 #tenures { "Tenures" }
        (Timeline::new(key, now, window, false).runs(&runs).live(&status.lease).actions(&actions, &covering)
            .render(&format!("key?key={}&", enc(key))))
        h2 { "Runs" }
        @if runs.is_empty() { p.empty { "No run recorded yet." } }
        @else { (runs_table(shown, now)) }
        h2 { "Fences" }
        (fences(&status, shown, &actions, now))
        h2 { "Operators' actions" }
        @if actions.is_empty() { p.empty { "No operator has acted on this key or its job." } }
        @else { (actions_table(&actions, now)) }
    };
    // The title cannot hold a <bdi>: the key is isolated by FSI … PDI.
    let title = layout::isolate(key);
    layout::page(
        &base,
        &title,
        Tab::None,
        &viewer,
        console.options.refresh.as_secs(),
        body,
    )
}

/// A key with no lease row: a 404, unless an action was just taken on it,
/// a pause names it, or it is a stored key of a job kind (whose kind no
/// replica registered yet, or whose arguments no replica could read),
/// which the page shows (with the pause's Resume) so none is lost.
fn no_row(
    base: &Base,
    viewer: &Viewer,
    key: &Key,
    done: Option<Done>,
    pauses: &[Pause],
    stored: Option<&StoredKey>,
    now: DateTime<Utc>,
) -> Response {
    let own = Target::from(key.clone());
    let paused = pauses.iter().find(|p| p.target == own);
    if done.is_none() && paused.is_none() && stored.is_none() {
        return layout::error(
            base,
            viewer,
            StatusCode::NOT_FOUND,
            "No lease row for this key: no runtime registered it, or it was forgotten.",
        );
    }
    let body = html! {
        h1 #key { bdi { (key) } }
        @if let Some(done) = done { p #flash { (done.text()) } }
        p #no-row { "No lease row for this key: no runtime registered it, or it was forgotten." }
        @if let Some(stored) = stored { (stored_box(stored, now)) }
        @if let Some(p) = paused {
            dl #tenure {
                dt { "Paused" }
                dd #paused-by { "by its own name, by " bdi { (p.paused_by) } " " (when(p.paused_at, now))
                     ": a runtime that registers it will not run it until it is resumed" }
            }
            @if let Viewer::Actor { .. } = viewer {
                nav.actions {
                    a.action #action-resume href=(confirm_page(&own, OperatorAction::Resume)) { "Resume" }
                }
            }
        }
    };
    let title = layout::isolate(key);
    layout::page(base, &title, Tab::None, viewer, 0, body)
}

/// The revoke that gave the key its fence, if the row's fence is one: the
/// row keeps the ended tenure's holder, but not its fence.
fn revoke_of(fence: i64, actions: &[ActionRecord]) -> Option<&ActionRecord> {
    actions.iter().find(|a| a.fence == Some(fence))
}

fn tenure(status: &KeyStatus, covering: &[&Pause], actions: &[ActionRecord]) -> Markup {
    let lease = &status.lease;
    let now = lease.server_now;
    let revoked = revoke_of(lease.fence, actions).filter(|_| !lease.is_held());
    html! {
        dl #tenure {
            dt { "State" } dd { span class={ "badge " (status.state()) } #state { (status.state()) }
                @if status.state() == KeyState::Removed {
                    " " span #removed-note { "its key of a job kind was removed: no replica runs it; \
                        `leasehold forget KEY` drops its record" }
                }
            }
            @for p in covering {
                dt { "Paused" }
                dd.pause {
                    @match &p.target {
                        Target::Job(name) => {
                            "through its job " a #paused-job href=(page_of(&Target::job(name.as_str()))) { bdi { (name) } }
                        }
                        _ => { "by its own name" }
                    }
                    ", by " bdi { (p.paused_by) } " " (when(p.paused_at, now))
                    @if p.cancel { " (runs in progress cancelled)" }
                }
            }
            dt { "Job" } dd { bdi { (lease.job_name.as_deref().unwrap_or("—")) } }
            @if lease.never_run() {
                dt { "Holder" } dd.muted { "never run" }
            } @else if let Some(revoke) = revoked {
                dt { "Holder" } dd #holder { span.muted { "none: revoked by " } bdi { (revoke.actor) } " "
                                              (when(revoke.at, now)) }
                dt { "Fence" } dd #fence { (lease.fence) span.muted { " (handed out by the revoke)" } }
            } @else {
                dt { "Holder" } dd #holder { bdi { (lease.holder) } @if !lease.is_held() { span.muted { " (last)" } } }
                dt { "Fence" } dd #fence { (lease.fence) }
                dt { "Tenure began" } dd { (when(lease.acquired_at, now)) }
                @if let Some(running) = layout::running(lease) { dt { "Run" } dd #running { (running) } }
                dt { @if lease.is_held() { "Expires" } @else { "Ended" } } dd { (when(lease.expires_at, now)) }
            }
            dt { "Next due" }
            dd {
                @if lease.due_only_when_triggered() { "when triggered" }
                @else if let Some(due) = lease.next_due_at { (when(due, now)) }
                @else { "now" }
            }
            @if let Some(run) = &status.last_error {
                dt { "Last error" } dd.error { (when(run.ended_at, now)) ": " bdi { (run.error.as_deref().unwrap_or("")) } }
            }
        }
    }
}

/// The key's actions. Resume is offered only for a pause of the key's own
/// name: a pause through its job is lifted on the job's page (the tenure
/// box links to it), and a key-level Resume could not lift it.
fn actions_bar(viewer: &Viewer, key: &Key, covering: &[&Pause]) -> Markup {
    let own = covering.iter().any(|p| matches!(p.target, Target::Key(_)));
    let offered: Vec<OperatorAction> = OFFERED
        .into_iter()
        .filter(|a| match a {
            OperatorAction::Pause => !own,
            OperatorAction::Resume => own,
            _ => true,
        })
        .collect();
    let target = Target::from(key.clone());
    html! {
        @if let Viewer::Actor { .. } = viewer {
            nav.actions {
                @for action in offered {
                    a.action id={ "action-" (action.as_str()) } href=(confirm_page(&target, action)) { (action.label()) }
                }
            }
        }
    }
}

fn runs_table(runs: &[RunRecord], now: DateTime<Utc>) -> Markup {
    html! {
        table #runs {
            thead { tr { th { "Run" } th { "Fence" } th { "Holder" } th { "Slot" } th { "Started" }
                         th { "Took" } th { "Outcome" } th { "Error" } } }
            tbody {
                @for run in runs {
                    tr.run {
                        td { (run.run_no) }
                        td { (run.fence) }
                        td { bdi { (run.holder) } }
                        td { @if let Some(slot) = run.scheduled_for { (when(slot, now)) } @else { span.muted { "triggered" } } }
                        td { (when(run.started_at, now)) }
                        td { (span(u64::try_from(run.duration().as_millis()).unwrap_or(u64::MAX))) }
                        td { span class={ "outcome " (run.outcome) } { (run.outcome) }
                             @if let Some(reason) = &run.reason { " (" bdi { (reason) } ")" }
                             @if run.earlier_life { " " span.earlier-life { "(earlier life)" } } }
                        td.error { bdi { (run.error.as_deref().unwrap_or("")) } }
                    }
                }
            }
        }
    }
}

/// The key's fences, newest first: its tenures (the current one and the
/// recorded runs) and the fences operators' revokes handed out.
fn fences(status: &KeyStatus, runs: &[RunRecord], actions: &[ActionRecord], now: DateTime<Utc>) -> Markup {
    let lease = &status.lease;
    let mut rows: Vec<(i64, DateTime<Utc>, String, String)> = Vec::new();
    // The row's fence is its latest tenure's, unless a revoke handed it
    // out since: the revoke's row below says so.
    let revoked = revoke_of(lease.fence, actions).is_some() && !lease.is_held();
    if !lease.never_run() && !revoked && runs.first().is_none_or(|r| r.fence != lease.fence) {
        let what = if lease.is_held() {
            "current tenure"
        } else {
            "latest tenure"
        };
        rows.push((lease.fence, lease.acquired_at, lease.holder.clone(), what.to_owned()));
    }
    for run in runs {
        rows.push((
            run.fence,
            run.started_at,
            run.holder.clone(),
            format!("run {}: {}", run.run_no, run.outcome),
        ));
    }
    for action in actions {
        if let Some(fence) = action.fence {
            rows.push((
                fence,
                action.at,
                action.actor.clone(),
                format!("{} by an operator", action.action),
            ));
        }
    }
    rows.sort_by_key(|r| std::cmp::Reverse(r.0));
    rows.dedup_by_key(|r| r.0);
    html! {
        @if rows.is_empty() { p.empty { "No fence handed out yet." } } @else {
            table #fences {
                thead { tr { th { "Fence" } th { "Since" } th { "Holder" } th { "What" } } }
                tbody { @for (fence, at, who, what) in rows {
                    tr { td { (fence) } td { (when(at, now)) } td { bdi { (who) } } td { (what) } }
                } }
            }
        }
    }
}

fn actions_table(actions: &[ActionRecord], now: DateTime<Utc>) -> Markup {
    html! {
        table #actions {
            thead { tr { th { "When" } th { "Action" } th { "On" } th { "By" } th { "Outcome" } } }
            tbody { @for a in actions {
                tr.action-record {
                    td { (when(a.at, now)) }
                    td { (a.action) }
                    td { bdi { (a.target) } }
                    td.actor { bdi { (a.actor) } }
                    td { bdi { (a.outcome.as_deref().unwrap_or("(not recorded)")) }
                         @if let Some(f) = a.fence { " — new fence " (f) } }
                }
            } }
        }
    }
}
