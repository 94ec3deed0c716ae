//! `OperatorAction`: the one vocabulary of operators' actions. Each action
//! has one name — the name the history stores, the CLI's and the console's
//! word for it — and each answer of an action is put into words here, so
//! the history, the CLI and the console say the same thing.

use std::fmt;

use crate::lease::{Forgotten, NewKey, Pause, Resumed, Revoked, Triggered};

/// An action an [`Operator`](crate::operator::Operator) takes, as the history
/// ([`ActionRecord::action`](crate::operator::ActionRecord::action)) names it.
///
/// [`as_str`](Self::as_str) (and `Display`) is the name stored in
/// `leasehold_action`; [`parse`](Self::parse) reads it back.
///
/// ```
/// use leasehold::operator::OperatorAction;
/// assert_eq!(OperatorAction::ForceRevoke.as_str(), "force-revoke");
/// assert_eq!(OperatorAction::parse("pause-cancel"), Some(OperatorAction::PauseCancel));
/// // `force-release`, the name older history rows hold, is the same action.
/// assert_eq!(OperatorAction::parse("force-release"), Some(OperatorAction::ForceRevoke));
/// assert_eq!(OperatorAction::Forget.label(), "Forget");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OperatorAction {
    /// Make a key due now ([`Operator::trigger`](crate::operator::Operator::trigger)).
    Trigger,
    /// Pause a key or a job; runs in progress finish.
    Pause,
    /// Pause a key or a job and cancel the runs in progress.
    PauseCancel,
    /// Lift a pause.
    Resume,
    /// End the tenure of a free lease: a sleeping ex-holder is fenced out
    /// ([`Operator::revoke`](crate::operator::Operator::revoke) with
    /// [`Revoke::IfFree`](crate::operator::Revoke::IfFree), CLI `revoke`).
    Revoke,
    /// End the tenure of a lease even if held: its run is cancelled at its
    /// next heartbeat and its fenced writes are rejected
    /// ([`Revoke::Force`](crate::operator::Revoke::Force), CLI `revoke --force`).
    ForceRevoke,
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
        OperatorAction::Revoke,
        OperatorAction::ForceRevoke,
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
            OperatorAction::Revoke => "revoke",
            OperatorAction::ForceRevoke => "force-revoke",
            OperatorAction::Forget => "forget",
            OperatorAction::Add => "add",
            OperatorAction::Update => "update",
            OperatorAction::Remove => "remove",
        }
    }

    /// The action named `name` (as [`as_str`](Self::as_str) gives it, or
    /// `release`/`force-release`, the names histories hold from before
    /// revoke had one name everywhere); `None` for any other text.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "release" => Some(OperatorAction::Revoke),
            "force-release" => Some(OperatorAction::ForceRevoke),
            _ => Self::ALL.into_iter().find(|a| a.as_str() == name),
        }
    }

    /// The action as a button says it: `Trigger now`, `Force revoke`…
    pub fn label(self) -> &'static str {
        match self {
            OperatorAction::Trigger => "Trigger now",
            OperatorAction::Pause => "Pause",
            OperatorAction::PauseCancel => "Pause and cancel",
            OperatorAction::Resume => "Resume",
            OperatorAction::Revoke => "Revoke",
            OperatorAction::ForceRevoke => "Force revoke",
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
/// action's answer becomes text. Each answer's `Display` is these words,
/// so the CLI and the console print what the history says.
pub(crate) trait Outcome: fmt::Display {
    /// The fence the action handed out, if any.
    fn fence(&self) -> Option<i64> {
        None
    }

    /// The outcome's words, and the fence the action handed out, if any.
    fn words(&self) -> (String, Option<i64>) {
        (self.to_string(), self.fence())
    }
}

/// The words the history records for a trigger, e.g. `due: the first
/// replica to claim it runs it`.
///
/// ```
/// use leasehold::operator::Triggered;
/// assert_eq!(Triggered::NotFound.to_string(), "not found: no runtime registered this key");
/// ```
impl fmt::Display for Triggered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Triggered::Due => "due: the first replica to claim it runs it",
            Triggered::Paused => "due, but paused: it runs once resumed",
            Triggered::NotFound => "not found: no runtime registered this key",
        })
    }
}

impl Outcome for Triggered {}

/// The words the history records for a pause, e.g. `paused: 3 keys, 1
/// running`.
impl fmt::Display for Pause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "paused: {}, {} running", keys(self.keys), self.running)
    }
}

impl Outcome for Pause {}

/// The words the history records for a resume, e.g. `resumed: 2 overdue
/// keys woken` or `not paused`.
///
/// ```
/// use leasehold::operator::Resumed;
/// assert_eq!(Resumed::NotPaused.to_string(), "not paused");
/// ```
impl fmt::Display for Resumed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Resumed::Yes { woken } => write!(f, "resumed: {} woken", keys(*woken).replace("key", "overdue key")),
            Resumed::NotPaused => f.write_str("not paused"),
        }
    }
}

impl Outcome for Resumed {}

/// The words the history records for a revoke, e.g. `ended the tenure of
/// web-1 (fence 7, held: its run is cancelled at its next heartbeat); new
/// fence 12` or `refused: held by web-1 (fence 7)`.
///
/// ```
/// use leasehold::operator::Revoked;
/// assert_eq!(Revoked::NotFound.to_string(), "not found: no lease row");
/// ```
impl fmt::Display for Revoked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Revoked::Ended { previous, fence } => write!(
                f,
                "ended the tenure of {} (fence {}, {}); new fence {fence}",
                previous.holder,
                previous.fence,
                if previous.is_held() {
                    "held: its run is cancelled at its next heartbeat"
                } else {
                    "already free"
                }
            ),
            Revoked::Held(info) => write!(f, "refused: held by {} (fence {})", info.holder, info.fence),
            Revoked::NotFound => f.write_str("not found: no lease row"),
        }
    }
}

impl Outcome for Revoked {
    fn fence(&self) -> Option<i64> {
        match self {
            Revoked::Ended { fence, .. } => Some(*fence),
            Revoked::Held(_) | Revoked::NotFound => None,
        }
    }
}

/// The words the history records for a forget, e.g. `deleted: the lease
/// row and its run history are gone`.
///
/// ```
/// use leasehold::operator::Forgotten;
/// assert_eq!(Forgotten::NotFound.to_string(), "not found: no lease row");
/// ```
impl fmt::Display for Forgotten {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Forgotten::Deleted => f.write_str("deleted: the lease row and its run history are gone"),
            Forgotten::NotFound => f.write_str("not found: no lease row"),
            Forgotten::Held(info) => write!(f, "refused: held by {} (fence {})", info.holder, info.fence),
        }
    }
}

impl Outcome for Forgotten {}

/// "1 key", "3 keys".
fn keys(n: u64) -> String {
    if n == 1 {
        "1 key".to_owned()
    } else {
        format!("{n} keys")
    }
}

/// The words the history records for adding `key` in an
/// [`Operator::add_keys`](crate::operator::Operator::add_keys) call that added
/// `added` of `of` keys.
///
/// ```
/// use leasehold::operator::added;
/// use leasehold::{NewKey, Schedule};
/// let key = NewKey::new("sync", "sync:acme", &42, Schedule::Manual)?;
/// assert_eq!(added(&key, 1, 1), "kind sync, args 42: 1 of 1 keys added (an existing key is kept)");
/// # Ok::<(), leasehold::Error>(())
/// ```
pub fn added(key: &NewKey, added: u64, of: usize) -> String {
    format!(
        "kind {}, args {}: {added} of {of} keys added (an existing key is kept)",
        key.kind(),
        key.args_json()
    )
}

/// The words the history records for updating `key`
/// ([`Operator::update_key`](crate::operator::Operator::update_key)'s answer: its
/// new version, or `None`: not found).
///
/// ```
/// use leasehold::operator::updated;
/// use leasehold::{NewKey, Schedule};
/// let key = NewKey::new("sync", "sync:acme", &42, Schedule::Manual)?;
/// assert_eq!(updated(&key, Some(2)), "updated to version 2: args 42");
/// # Ok::<(), leasehold::Error>(())
/// ```
pub fn updated(key: &NewKey, version: Option<i64>) -> String {
    match version {
        Some(version) => format!("updated to version {version}: args {}", key.args_json()),
        None => format!("not found: no key of kind {}", key.kind()),
    }
}

/// The words the history records for removing a key of `kind`
/// ([`Operator::remove_key`](crate::operator::Operator::remove_key)'s answer).
///
/// ```
/// assert_eq!(leasehold::operator::removed("sync", false), "not found: no key of kind sync");
/// ```
pub fn removed(kind: &str, removed: bool) -> String {
    if removed {
        "removed: every replica stops it".to_owned()
    } else {
        format!("not found: no key of kind {kind}")
    }
}

#[cfg(test)]
mod tests {
    use super::OperatorAction;

    #[test]
    fn every_action_reads_back_from_its_name() {
        for action in OperatorAction::ALL {
            assert_eq!(OperatorAction::parse(action.as_str()), Some(action));
            assert_eq!(action.to_string(), action.as_str());
        }
        assert_eq!(OperatorAction::parse("revoke "), None);
        assert_eq!(OperatorAction::parse("Revoke"), None);
    }

    #[test]
    fn a_revoke_reads_back_under_its_name_and_under_the_name_older_histories_hold() {
        assert_eq!(OperatorAction::Revoke.as_str(), "revoke");
        assert_eq!(OperatorAction::ForceRevoke.as_str(), "force-revoke");
        for (stored, action) in [
            ("revoke", OperatorAction::Revoke),
            ("release", OperatorAction::Revoke),
            ("force-revoke", OperatorAction::ForceRevoke),
            ("force-release", OperatorAction::ForceRevoke),
        ] {
            assert_eq!(OperatorAction::parse(stored), Some(action), "{stored}");
        }
        assert_eq!(OperatorAction::ForceRevoke.label(), "Force revoke");
        assert_eq!(OperatorAction::Revoke.label(), "Revoke");
    }
}
