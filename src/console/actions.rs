//! Actions: a confirmation page (GET, changes nothing) and the POST that
//! acts through [`Operator`], so each action is recorded with its actor.

use axum::Form;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;

use super::Shared;
use super::access::read_only;
use super::layout::{self, Base, During, Tab, enc};
use super::reads::ReadError;
use crate::Operator;
use crate::lease::{PauseTarget, Resumed, Revoke, Revoked, Triggered};

/// What an operator can do to a key from the console.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    Trigger,
    Pause,
    Resume,
    /// A forced release: the run in progress (if any) is cancelled at its
    /// next heartbeat and its fenced writes are rejected from now on.
    Release,
}

impl Action {
    pub(super) fn parse(name: &str) -> Option<Self> {
        match name {
            "trigger" => Some(Action::Trigger),
            "pause" => Some(Action::Pause),
            "resume" => Some(Action::Resume),
            "release" => Some(Action::Release),
            _ => None,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Action::Trigger => "trigger",
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Release => "release",
        }
    }

    pub(super) fn label(self) -> &'static str {
        match self {
            Action::Trigger => "Trigger now",
            Action::Pause => "Pause",
            Action::Resume => "Resume",
            Action::Release => "Force release",
        }
    }

    fn explain(self) -> &'static str {
        match self {
            Action::Trigger => {
                "The key becomes due now for the whole fleet: the first replica to claim it runs it, once. \
                 A missed slot it owes stays owed."
            }
            Action::Pause => {
                "No replica will claim this key until it is resumed. A run in progress finishes, unless you also \
                 cancel it below."
            }
            Action::Resume => {
                "Replicas may claim the key again; if it is overdue it runs at once (its catch-up policy decides \
                 how many slots)."
            }
            Action::Release => {
                "Ends the current tenure now and gives the key a new fence: a run in progress is cancelled at its \
                 next heartbeat and every fenced write it still tries is rejected. The schedule is untouched."
            }
        }
    }
}

#[derive(serde::Deserialize)]
pub(super) struct ConfirmQuery {
    #[serde(default)]
    key: String,
    #[serde(default)]
    action: String,
}

/// GET `confirm?key=…&action=…`: asks; acting takes the POST it shows.
pub(super) async fn confirm(
    State(console): State<Shared>,
    base: Base,
    parts: Parts,
    Query(query): Query<ConfirmQuery>,
) -> Response {
    let viewer = console.access.viewer(&console.options, &parts);
    let Some(action) = Action::parse(&query.action) else {
        return layout::error(
            &base,
            &viewer,
            StatusCode::BAD_REQUEST,
            &format!(
                "Unknown action {:?}: use trigger, pause, resume or release.",
                query.action
            ),
        );
    };
    let Some(csrf) = viewer.csrf() else {
        return read_only(&base, &viewer);
    };
    let key = query.key.as_str();
    let body = html! {
        h1 { (action.label()) "?" }
        p { "Key " strong #confirm-key { (key) } }
        p { (action.explain()) }
        form #confirm-form method="post" action="action" {
            input type="hidden" name="key" value=(key);
            input type="hidden" name="action" value=(action.name());
            input type="hidden" name="csrf" value=(csrf);
            @if action == Action::Pause {
                p { label { input #cancel type="checkbox" name="cancel"; " Also cancel the run in progress" } }
            }
            button #confirm type="submit" { (action.label()) }
            " "
            a href={ "key?key=" (enc(key)) } { "Cancel" }
        }
    };
    layout::page(&base, action.label(), Tab::None, &viewer, 0, body)
}

#[derive(serde::Deserialize)]
pub(super) struct ActionForm {
    #[serde(default)]
    key: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    csrf: String,
    /// A checkbox: present ("on") when ticked.
    cancel: Option<String>,
}

/// POST `action`: checks the actor and CSRF token, acts through
/// [`Operator`], and returns to the key's page with what it did.
pub(super) async fn act(
    State(console): State<Shared>,
    base: Base,
    parts: Parts,
    Form(form): Form<ActionForm>,
) -> Response {
    let (viewer, actor) = match console.access.check_post(&console.options, &parts, &base, &form.csrf) {
        Ok(checked) => checked,
        Err(refusal) => return *refusal,
    };
    let Some(action) = Action::parse(&form.action) else {
        return layout::error(&base, &viewer, StatusCode::BAD_REQUEST, "Unknown action.");
    };
    let operator = match Operator::new(console.store.clone(), actor) {
        Ok(operator) => operator,
        Err(err) => return layout::error(&base, &viewer, StatusCode::BAD_REQUEST, &err.to_string()),
    };
    let key = form.key.as_str();
    let target = PauseTarget::key(key);
    // Actions take their turn on the database like page views: an
    // operator's click cannot add to a flood either.
    let work = async {
        match action {
            Action::Trigger => operator.trigger(key).await.map(|t| match t {
                Triggered::Due => "Triggered: the first replica to claim it runs it now.".to_owned(),
                Triggered::Paused => "Triggered, but the key is paused: it runs once resumed.".to_owned(),
                _ => "Not found: no runtime registered this key.".to_owned(),
            }),
            Action::Pause => {
                let cancel = form.cancel.is_some();
                operator
                    .pause(&target, cancel)
                    .await
                    .map(|p| match (cancel, p.running) {
                        (true, 1..) => "Paused; the run in progress is cancelled at its next heartbeat.".to_owned(),
                        (false, 1..) => "Paused; the run in progress finishes.".to_owned(),
                        _ => "Paused.".to_owned(),
                    })
            }
            Action::Resume => operator.resume(&target).await.map(|r| match r {
                Resumed::Yes { woken: 0 } => "Resumed: it runs at its next slot.".to_owned(),
                Resumed::Yes { .. } => "Resumed: it was overdue and runs now.".to_owned(),
                _ => "Not paused by its own name (is its job paused? `leasehold resume --job`).".to_owned(),
            }),
            Action::Release => operator.revoke(key, Revoke::Force, &[]).await.map(|r| match r {
                Revoked::Ended { previous, fence } => {
                    format!(
                        "Released: {} (fence {}) is fenced out; new fence {fence}.",
                        previous.holder, previous.fence
                    )
                }
                Revoked::Held(_) => "Still held: nothing changed.".to_owned(),
                _ => "Not found: no lease row.".to_owned(),
            }),
        }
    };
    let done = console.reads.run(work).await;
    match done {
        Ok(flash) => {
            let to = format!("{}key?key={}&flash={}", base.0, enc(key), enc(&flash));
            let mut response = Redirect::to(&to).into_response();
            layout::secure(&mut response);
            response
        }
        Err(ReadError::Failed(crate::Error::InvalidInput { .. })) => {
            layout::error(&base, &viewer, StatusCode::BAD_REQUEST, "Not a lease key.")
        }
        Err(err) => layout::unavailable(&base, &viewer, err, During::Action),
    }
}
