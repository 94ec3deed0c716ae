//! The kinds page (`kinds`): every job kind that keys or replicas named,
//! whether a live replica registers it, its keys and its keys with
//! unreadable arguments; then the stored keys that do not run and why.
//! Also the pieces the leases and key pages show of a stored key: its
//! "does not run" badge and its box.

use axum::extract::State;
use axum::http::request::Parts;
use axum::response::Response;
use chrono::{DateTime, Utc};
use maud::{Markup, html};

use super::Shared;
use super::layout::{self, Base, During, Tab, enc, when};
use crate::lease::{KindStatus, StoredKey};

/// Stored keys that do not run, listed on the page at most.
const NOT_RUN_SHOWN: usize = 200;

/// GET `kinds`.
pub(super) async fn page(State(console): State<Shared>, base: Base, parts: Parts) -> Response {
    let viewer = console.access.viewer(&console.options, &parts);
    let store = &console.store;
    let read = async {
        let kinds = store.keys().kinds().await?;
        let not_run = store.keys().not_run(NOT_RUN_SHOWN).await?;
        let now = store.server_now().await?;
        crate::Result::Ok((kinds, not_run, now))
    };
    let during = During::Page {
        refresh: console.options.refresh.as_secs(),
    };
    let (kinds, not_run, now) = match console.reads.run(read).await {
        Ok(read) => read,
        Err(err) => return layout::unavailable(&base, &viewer, err, during),
    };
    let body = html! {
        h1 { "Job kinds" }
        p { "A kind is code a replica registers; its keys are stored once and run by every replica that \
             registers it. A kind no live replica registers runs none of its keys." }
        @if kinds.is_empty() {
            p.empty { "No kind: no replica registered one and no key of one was added." }
        } @else {
            (kinds_table(&kinds))
        }
        h2 #not-run { "Stored keys that do not run" }
        @if not_run.is_empty() {
            p.empty { "None: every stored key has readable arguments and a live replica to run it." }
        } @else {
            (not_run_table(&not_run, now))
            @if not_run.len() == NOT_RUN_SHOWN { p.muted { "The first " (NOT_RUN_SHOWN) " by key; `leasehold status` lists them all." } }
        }
    };
    layout::page(
        &base,
        "Job kinds",
        Tab::Kinds,
        &viewer,
        console.options.refresh.as_secs(),
        body,
    )
}

fn kinds_table(kinds: &[KindStatus]) -> Markup {
    html! {
        table #kinds {
            thead { tr { th { "Kind" } th { "Live replica registers it" } th { "Keys" } th { "Unreadable arguments" } } }
            tbody { @for k in kinds {
                tr.kind data-kind=(k.kind) {
                    td { bdi { (k.kind) } }
                    td.live { @if k.live { "yes" } @else { span.badge.not-run { "no: its keys run nowhere" } } }
                    td.keys { (k.keys) }
                    td.bad-args { @if k.bad_args > 0 { span.badge.not-run { (k.bad_args) } } @else { "0" } }
                }
            } }
        }
    }
}

fn not_run_table(keys: &[StoredKey], now: DateTime<Utc>) -> Markup {
    html! {
        table #keys-not-run {
            thead { tr { th { "Key" } th { "Kind" } th { "Version" } th { "Updated" } th { "Why it does not run" } } }
            tbody { @for k in keys {
                tr.not-run data-key=(k.key) {
                    td.key { a href={ "key?key=" (enc(&k.key)) } { bdi { (k.key) } } }
                    td { bdi { (k.kind) } }
                    td { (k.version) }
                    td { (when(k.updated_at, now)) }
                    td.error { bdi { (k.problem().unwrap_or_default()) } }
                }
            } }
        }
    }
}

/// The badge of a stored key that does not run, its reason in the title;
/// nothing for one that runs.
pub(super) fn not_run_badge(stored: &StoredKey) -> Markup {
    let label = if stored.args_error.is_some() {
        "unreadable arguments"
    } else {
        "kind not run"
    };
    html! {
        @if let Some(problem) = stored.problem() {
            " " span.badge.not-run title=(problem) { (label) }
        }
    }
}

/// What the key page shows of a stored key: its kind, arguments,
/// schedule, its own time limit if it has one and, when it does not run,
/// why.
pub(super) fn stored_box(stored: &StoredKey, now: DateTime<Utc>) -> Markup {
    html! {
        dl #stored-key {
            dt { "Kind" } dd { bdi #kind { (stored.kind) } @if !stored.kind_live { span.muted { " (no live replica registers it)" } } }
            dt { "Arguments" } dd { "version " (stored.version) ", updated " (when(stored.updated_at, now)) ": " code { bdi #args { (stored.args) } } }
            dt { "Schedule" } dd { (stored.schedule) ", catch-up " (stored.catch_up) }
            @if let Some(limit) = stored.timeout {
                dt { "Time limit" } dd #timeout { (leasehold_rules::format_duration(limit)) " per run (the key's own)" }
            }
            @if let Some(problem) = stored.problem() {
                dt { "Not run" } dd.error #not-run { bdi { (problem) } }
            }
        }
    }
}
