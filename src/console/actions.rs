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

/// What an action did, as its redirect names it (`done=…`) for the key's
/// page to say: the page shows only these fixed sentences, never text from
/// the URL, so a link cannot make the console say what its author wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Done {
    Triggered,
    TriggeredPaused,
    NotRegistered,
    PausedCancelled,
    PausedRunning,
    Paused,
    Resumed,
    ResumedOverdue,
    NotPaused,
    Released,
    StillHeld,
    NoRow,
}

impl Done {
    const ALL: [Done; 12] = [
        Done::Triggered,
        Done::TriggeredPaused,
        Done::NotRegistered,
        Done::PausedCancelled,
        Done::PausedRunning,
        Done::Paused,
        Done::Resumed,
        Done::ResumedOverdue,
        Done::NotPaused,
        Done::Released,
        Done::StillHeld,
        Done::NoRow,
    ];

    fn code(self) -> &'static str {
        match self {
            Done::Triggered => "triggered",
            Done::TriggeredPaused => "triggered-paused",
            Done::NotRegistered => "not-registered",
            Done::PausedCancelled => "paused-cancelled",
            Done::PausedRunning => "paused-running",
            Done::Paused => "paused",
            Done::Resumed => "resumed",
            Done::ResumedOverdue => "resumed-overdue",
            Done::NotPaused => "not-paused",
            Done::Released => "released",
            Done::StillHeld => "still-held",
            Done::NoRow => "no-row",
        }
    }

    /// The code of a `done=…` parameter; `None` for anything else.
    pub(super) fn parse(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.code() == code)
    }

    pub(super) fn text(self) -> &'static str {
        match self {
            Done::Triggered => "Triggered: the first replica to claim it runs it now.",
            Done::TriggeredPaused => "Triggered, but the key is paused: it runs once resumed.",
            Done::NotRegistered => "Not found: no runtime registered this key.",
            Done::PausedCancelled => "Paused; the run in progress is cancelled at its next heartbeat.",
            Done::PausedRunning => "Paused; the run in progress finishes.",
            Done::Paused => "Paused.",
            Done::Resumed => "Resumed: it runs at its next slot.",
            Done::ResumedOverdue => "Resumed: it was overdue and runs now.",
            Done::NotPaused => "Not paused by its own name (is its job paused? `leasehold resume --job`).",
            Done::Released => {
                "Released: the tenure is over and its holder fenced out; the new fence is in the table below."
            }
            Done::StillHeld => "Still held: nothing changed.",
            Done::NoRow => "Not found: no lease row.",
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
    if let Err(err) = crate::validate::key(key) {
        return layout::error(
            &base,
            &viewer,
            StatusCode::BAD_REQUEST,
            &format!("Not a lease key (`key`): {err}."),
        );
    }
    let body = html! {
        h1 { (action.label()) "?" }
        p { "Key " strong #confirm-key { bdi { (key) } } }
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
                Triggered::Due => Done::Triggered,
                Triggered::Paused => Done::TriggeredPaused,
                _ => Done::NotRegistered,
            }),
            Action::Pause => {
                let cancel = form.cancel.is_some();
                operator
                    .pause(&target, cancel)
                    .await
                    .map(|p| match (cancel, p.running) {
                        (true, 1..) => Done::PausedCancelled,
                        (false, 1..) => Done::PausedRunning,
                        _ => Done::Paused,
                    })
            }
            Action::Resume => operator.resume(&target).await.map(|r| match r {
                Resumed::Yes { woken: 0 } => Done::Resumed,
                Resumed::Yes { .. } => Done::ResumedOverdue,
                _ => Done::NotPaused,
            }),
            Action::Release => operator.revoke(key, Revoke::Force, &[]).await.map(|r| match r {
                Revoked::Ended { .. } => Done::Released,
                Revoked::Held(_) => Done::StillHeld,
                _ => Done::NoRow,
            }),
        }
    };
    let done = console.reads.run(work).await;
    match done {
        Ok(done) => {
            let to = format!("{}key?key={}&done={}", base.0, enc(key), done.code());
            Redirect::to(&to).into_response()
        }
        Err(ReadError::Failed(err @ crate::Error::InvalidInput { .. })) => layout::error(
            &base,
            &viewer,
            StatusCode::BAD_REQUEST,
            &format!("Not a lease key (`key`): {err}."),
        ),
        Err(err) => layout::unavailable(&base, &viewer, err, During::Action),
    }
}
