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
use super::done::Done;
use super::layout::{self, Base, During, Tab, enc};
use super::reads::ReadError;
use crate::lease::{Resumed, Revoke, Revoked, Target, Triggered};
use crate::operator::{Operator, OperatorAction};

/// The actions the console offers, each an [`OperatorAction`] under its
/// one name: on a key, trigger, pause (cancelling the runs in progress
/// when the form's box is ticked), resume and force revoke; on a job, all
/// but the revoke.
pub(super) const OFFERED: [OperatorAction; 4] = [
    OperatorAction::Trigger,
    OperatorAction::Pause,
    OperatorAction::Resume,
    OperatorAction::ForceRevoke,
];

/// The error page's sentence for a `key` parameter that is no lease key.
pub(super) const NOT_A_KEY: &str = "Not a lease key (`key`): a key is not empty, the limit is 255 bytes, and it holds no NUL \
                                    byte.";

/// The error page's sentence for a job name parameter that is no job name.
pub(super) const NOT_A_JOB: &str =
    "Not a job name: a job name is not empty, the limit is 255 bytes, and it holds no NUL byte.";

/// One of [`OFFERED`], by its name; `None` for anything else.
fn offered(name: &str) -> Option<OperatorAction> {
    OperatorAction::parse(name).filter(|a| OFFERED.contains(a))
}

/// What `action` does to `target`, said on its confirmation page.
fn explain(action: OperatorAction, target: &Target) -> &'static str {
    match (action, target) {
        (OperatorAction::Trigger, Target::Job(_)) => {
            "Every key of the job becomes due now for the whole fleet: the first replica to claim each runs \
             it, once (a paused key once resumed)."
        }
        (OperatorAction::Pause, Target::Job(_)) => {
            "No replica will claim any key of this job, including keys registered later, until the job is \
             resumed. Runs in progress finish, unless you also cancel them below."
        }
        (OperatorAction::Resume, Target::Job(_)) => {
            "Lifts the job's pause: replicas may claim its keys again (a key also paused by its own name \
             stays paused); overdue keys run at once."
        }
        (_, Target::Job(_)) => "A job cannot be force-revoked: revoke its keys one by one.",
        (OperatorAction::Trigger, Target::Key(_)) => {
            "The key becomes due now for the whole fleet: the first replica to claim it runs it, once. \
             A missed slot it owes stays owed."
        }
        (OperatorAction::Pause, Target::Key(_)) => {
            "No replica will claim this key until it is resumed. A run in progress finishes, unless you also \
             cancel it below."
        }
        (OperatorAction::Resume, Target::Key(_)) => {
            "Replicas may claim the key again; if it is overdue it runs at once (its catch-up policy decides \
             how many slots)."
        }
        (_, Target::Key(_)) => {
            "Ends the current tenure now and gives the key a new fence: a run in progress is cancelled at its \
             next heartbeat and every fenced write it still tries is rejected. The schedule is untouched."
        }
    }
}

/// The target named by a form's or link's `key` and `job` parameters
/// (exactly one); the message (a fixed sentence, quoting nothing of the
/// request) says what is wrong.
fn target_of(key: &str, job: &str) -> Result<Target, &'static str> {
    match (key.is_empty(), job.is_empty()) {
        (false, true) => Target::key(key).map_err(|_| NOT_A_KEY),
        (true, false) => match crate::validate::existing_job_name(job) {
            Ok(()) => Ok(Target::job(job)),
            Err(_) => Err(NOT_A_JOB),
        },
        _ => Err("Name exactly one of `key` or `job`."),
    }
}

/// The target's page, relative to the base.
pub(super) fn page_of(target: &Target) -> String {
    match target {
        Target::Key(key) => format!("key?key={}", enc(key)),
        Target::Job(name) => format!("job?name={}", enc(name)),
    }
}

/// The confirmation page of `action` on `target`.
pub(super) fn confirm_page(target: &Target, action: OperatorAction) -> String {
    match target {
        Target::Key(key) => format!("confirm?key={}&action={action}", enc(key)),
        Target::Job(name) => format!("confirm?job={}&action={action}", enc(name)),
    }
}

#[derive(serde::Deserialize)]
pub(super) struct ConfirmQuery {
    #[serde(default)]
    key: String,
    #[serde(default)]
    job: String,
    #[serde(default)]
    action: String,
}

/// GET `confirm?key=…&action=…` (or `job=…`): asks; acting takes the POST
/// it shows.
pub(super) async fn confirm(
    State(console): State<Shared>,
    base: Base,
    parts: Parts,
    Query(query): Query<ConfirmQuery>,
) -> Response {
    let viewer = console.access.viewer(&console.options, &parts);
    let Some(action) = offered(&query.action) else {
        return layout::error(&base, &viewer, StatusCode::BAD_REQUEST, UNKNOWN_ACTION);
    };
    let Some(csrf) = viewer.csrf() else {
        return read_only(&base, &viewer);
    };
    let target = match target_of(&query.key, &query.job) {
        Ok(target) => target,
        Err(message) => return layout::error(&base, &viewer, StatusCode::BAD_REQUEST, message),
    };
    if let (Target::Job(_), OperatorAction::ForceRevoke) = (&target, action) {
        return layout::error(&base, &viewer, StatusCode::BAD_REQUEST, explain(action, &target));
    }
    let body = html! {
        h1 { (action.label()) @if let Target::Job(_) = target { " every key of the job" } "?" }
        @match &target {
            Target::Key(key) => p { "Key " strong #confirm-key { bdi { (key) } } },
            Target::Job(name) => p { "Job " strong #confirm-job { bdi { (name) } } },
        }
        p { (explain(action, &target)) }
        form #confirm-form method="post" action="action" {
            @match &target {
                Target::Key(key) => input type="hidden" name="key" value=(key);,
                Target::Job(name) => input type="hidden" name="job" value=(name);,
            }
            input type="hidden" name="action" value=(action);
            input type="hidden" name="csrf" value=(csrf);
            @if action == OperatorAction::Pause {
                p { label { input #cancel type="checkbox" name="cancel"; " Also cancel the runs in progress" } }
            }
            button #confirm type="submit" { (action.label()) }
            " "
            a href=(page_of(&target)) { "Cancel" }
        }
    };
    layout::page(&base, action.label(), Tab::None, &viewer, 0, body)
}

#[derive(serde::Deserialize)]
pub(super) struct ActionForm {
    #[serde(default)]
    key: String,
    #[serde(default)]
    job: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    csrf: String,
    /// A checkbox: present ("on") when ticked.
    cancel: Option<String>,
}

/// The error page's sentence for an action the console does not offer.
const UNKNOWN_ACTION: &str = "Unknown action: use trigger, pause, resume or force-revoke.";

/// POST `action`: checks the actor and CSRF token, acts through
/// [`Operator`], and returns to the key's (or job's) page with what it did.
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
    let Some(action) = offered(&form.action) else {
        return layout::error(&base, &viewer, StatusCode::BAD_REQUEST, UNKNOWN_ACTION);
    };
    let actor_name = actor.clone();
    let operator = match Operator::new(console.store.clone(), actor) {
        Ok(operator) => operator,
        Err(_) => {
            return layout::error(
                &base,
                &viewer,
                StatusCode::BAD_REQUEST,
                "Your name cannot be recorded as who acted (blank, over 255 bytes, or holding control, invisible \
                 or text-direction characters): act under another name.",
            );
        }
    };
    let target = match target_of(&form.key, &form.job) {
        Ok(target) => target,
        Err(message) => return layout::error(&base, &viewer, StatusCode::BAD_REQUEST, message),
    };
    // Actions take their turn on the database like page views: an
    // operator's click cannot add to a flood either.
    let work = async {
        match (action, &target) {
            (OperatorAction::Trigger, Target::Key(key)) => operator.trigger(key).await.map(|t| match t {
                Triggered::Due => Done::Triggered,
                Triggered::Paused => Done::TriggeredPaused,
                _ => Done::NotRegistered,
            }),
            (OperatorAction::Trigger, Target::Job(name)) => operator.trigger_job(name).await.map(|n| match n {
                0 => Done::NotRegistered,
                _ => Done::TriggeredJob,
            }),
            (OperatorAction::Pause, _) => {
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
            (OperatorAction::Resume, _) => operator.resume(&target).await.map(|r| match (r, &target) {
                (Resumed::Yes { woken: 0 }, _) => Done::Resumed,
                (Resumed::Yes { .. }, _) => Done::ResumedOverdue,
                (_, Target::Key(_)) => Done::NotPaused,
                (_, Target::Job(_)) => Done::JobNotPaused,
            }),
            (OperatorAction::ForceRevoke, Target::Key(key)) => {
                operator.revoke(key, Revoke::Force, &[]).await.map(|r| match r {
                    Revoked::Ended { .. } => Done::Revoked,
                    Revoked::Held(_) => Done::StillHeld,
                    _ => Done::NoRow,
                })
            }
            (_, Target::Job(name)) => Err(crate::Error::invalid(
                "action",
                name,
                "a job cannot be force-revoked: revoke its keys one by one",
            )),
            (other, Target::Key(key)) => Err(crate::Error::invalid(
                "action",
                other,
                format!("the console does not take it on {key:?}: use the CLI"),
            )),
        }
    };
    let done = console.reads.run(work).await;
    match done {
        Ok(done) => {
            let to = format!("{}{}", base.0, page_of(&target));
            console.access.flash(&actor_name, target, done);
            Redirect::to(&to).into_response()
        }
        Err(ReadError::Failed(crate::Error::InvalidInput { .. })) => layout::error(
            &base,
            &viewer,
            StatusCode::BAD_REQUEST,
            "Not taken: the console takes trigger, pause, resume on keys and jobs, and force revoke on keys \
             only.",
        ),
        Err(err) => layout::unavailable(&base, &viewer, err, During::Action),
    }
}
