//! `OperatorAction`: the one vocabulary of operators' actions. Each action
//! has one name — the name the history stores, the CLI's and the console's
//! word for it — and each answer of an action is put into words here, so
//! the history, the CLI and the console say the same thing.

use std::fmt;

use crate::lease::{Forgotten, NewKey, Pause, Resumed, Revoked, Triggered};

/// An action an [`Operator`](crate::Operator) takes, as the history
/// ([`ActionRecord::action`](crate::ActionRecord::action)) names it.
///
/// [`as_str`](Self::as_str) (and `Display`) is the name stored in
/// `leasehold_action`; [`parse`](Self::parse) reads it back.
///
/// ```
/// use leasehold::operator::OperatorAction;
/// assert_eq!(OperatorAction::ForceRelease.as_str(), "force-release");
/// assert_eq!(OperatorAction::parse("pause-cancel"), Some(OperatorAction::PauseCancel));
/// assert_eq!(OperatorAction::Forget.label(), "Forget");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OperatorAction {
    /// Make a key due now ([`Operator::trigger`](crate::Operator::trigger)).
    Trigger,
    /// Pause a key or a job; runs in progress finish.
    Pause,
    /// Pause a key or a job and cancel the runs in progress.
    PauseCancel,
    /// Lift a pause.
    Resume,
    /// End the tenure of a free lease: a sleeping ex-holder is fenced out.
    Release,
    /// End the tenure of a lease even if held: its run is cancelled at its
    /// next heartbeat and its fenced writes are rejected (CLI `release
    /// --force`).
    ForceRelease,
    /// Delete the lease row of a key no replica registers any more.
    Forget,
    /// Add a key of a job kind for the fleet.
    Add,
    /// Replace a stored key's arguments and schedule.
    Update,
    /// Remove a key of a job kind from the fleet.
    Remove,
}

impl OperatorAction {
    /// Every action, in the order the CLI's help lists them.
    pub const ALL: [OperatorAction; 10] = [
        OperatorAction::Trigger,
        OperatorAction::Pause,
        OperatorAction::PauseCancel,
        OperatorAction::Resume,
        OperatorAction::Release,
        OperatorAction::ForceRelease,
        OperatorAction::Forget,
        OperatorAction::Add,
        OperatorAction::Update,
        OperatorAction::Remove,
    ];

    /// The action's name, as the history stores it.
    pub fn as_str(self) -> &'static str {
        match self {
            OperatorAction::Trigger => "trigger",
            OperatorAction::Pause => "pause",
            OperatorAction::PauseCancel => "pause-cancel",
            OperatorAction::Resume => "resume",
            OperatorAction::Release => "release",
            OperatorAction::ForceRelease => "force-release",
            OperatorAction::Forget => "forget",
            OperatorAction::Add => "add",
            OperatorAction::Update => "update",
            OperatorAction::Remove => "remove",
        }
    }

    /// The action named `name` (as [`as_str`](Self::as_str) gives it);
    /// `None` for any other text.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.as_str() == name)
    }

    /// The action as a button says it: `Trigger now`, `Force release`…
    pub fn label(self) -> &'static str {
        match self {
            OperatorAction::Trigger => "Trigger now",
            OperatorAction::Pause => "Pause",
            OperatorAction::PauseCancel => "Pause and cancel",
            OperatorAction::Resume => "Resume",
            OperatorAction::Release => "Release",
            OperatorAction::ForceRelease => "Force release",
            OperatorAction::Forget => "Forget",
            OperatorAction::Add => "Add",
            OperatorAction::Update => "Update",
            OperatorAction::Remove => "Remove",
        }
    }
}

impl fmt::Display for OperatorAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an action did, in the words the history records: the one place an
/// action's answer becomes text.
pub(crate) trait Outcome {
    /// The outcome's words, and the fence the action handed out, if any.
    fn words(&self) -> (String, Option<i64>);
}

impl Outcome for Triggered {
    fn words(&self) -> (String, Option<i64>) {
        let text = match self {
            Triggered::Due => "due: the first replica to claim it runs it",
            Triggered::Paused => "due, but paused: it runs once resumed",
            Triggered::NotFound => "not found: no runtime registered this key",
        };
        (text.to_owned(), None)
    }
}

impl Outcome for Pause {
    fn words(&self) -> (String, Option<i64>) {
        (format!("paused: {}, {} running", keys(self.keys), self.running), None)
    }
}

impl Outcome for Resumed {
    fn words(&self) -> (String, Option<i64>) {
        let text = match self {
            Resumed::Yes { woken } => format!("resumed: {} woken", keys(*woken).replace("key", "overdue key")),
            Resumed::NotPaused => "not paused".to_owned(),
        };
        (text, None)
    }
}

impl Outcome for Revoked {
    fn words(&self) -> (String, Option<i64>) {
        match self {
            Revoked::Ended { previous, fence } => (
                format!("ended the tenure of {} (fence {})", previous.holder, previous.fence),
                Some(*fence),
            ),
            Revoked::Held(info) => (format!("refused: held by {} (fence {})", info.holder, info.fence), None),
            Revoked::NotFound => ("not found: no lease row".to_owned(), None),
        }
    }
}

impl Outcome for Forgotten {
    fn words(&self) -> (String, Option<i64>) {
        let text = match self {
            Forgotten::Deleted => "deleted: the lease row and its run history are gone".to_owned(),
            Forgotten::NotFound => "not found: no lease row".to_owned(),
            Forgotten::Held(info) => format!("refused: held by {} (fence {})", info.holder, info.fence),
        };
        (text, None)
    }
}

/// "1 key", "3 keys".
fn keys(n: u64) -> String {
    if n == 1 {
        "1 key".to_owned()
    } else {
        format!("{n} keys")
    }
}

/// The outcome of adding `key` in a call that added `added` of `of` keys.
pub(crate) fn added(key: &NewKey, added: u64, of: usize) -> String {
    format!(
        "kind {}, args {}: {added} of {of} keys added (an existing key is kept)",
        key.kind(),
        key.args_json()
    )
}

/// The outcome of updating `key` (its new version, or none: not found).
pub(crate) fn updated(key: &NewKey, version: Option<i64>) -> String {
    match version {
        Some(version) => format!("updated to version {version}: args {}", key.args_json()),
        None => format!("not found: no key of kind {}", key.kind()),
    }
}

/// The outcome of removing a key of `kind`.
pub(crate) fn removed(kind: &str, removed: bool) -> String {
    if removed {
        "removed: every replica stops it".to_owned()
    } else {
        format!("not found: no key of kind {kind}")
    }
}
