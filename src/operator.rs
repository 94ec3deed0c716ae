//! `Operator`: the operators' actions (trigger, pause, resume, revoke,
//! forget, and adding, updating and removing the keys of job kinds), each
//! recorded in the key's history with who took it, under its
//! [`OperatorAction`] name and with its outcome in that module's words.
//!
//! The CLI and the console act through this type, so an action looks the
//! same in the history whichever tool took it. Each action is the
//! `LeaseStore` operation of the same name, between two audit statements:
//! the record is written first, so an action that took effect is never
//! missing from the history (docs/design.md §7).
//!
//! [`OperatorAction`] is the one vocabulary of those actions. Each action
//! has one name — the name the history stores, the CLI's and the console's
//! word for it — and each answer of an action is put into words here, so
//! the history, the CLI and the console say the same thing. An action is
//! its name, its words and its recorded run, all in this file.

use std::fmt;

use crate::error::Result;
pub use crate::lease::{
    ActionRecord, FleetLimit, Forgotten, LimitSet, MAX_FLEET_LIMIT, Pause, Resumed, Revoke, Revoked, Target, Triggered,
};
use crate::lease::{KeyFilter, LeaseStore, NewKey};
use crate::validate;

/// Keys read at a time by [`Operator::trigger_job`].
const TRIGGER_PAGE: usize = 500;

/// An operator — a person, or a tool acting for one — taking actions on
/// the fleet's keys, each recorded in `leasehold_action` with its name.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> leasehold::Result<()> {
/// use leasehold::operator::{Operator, Target};
/// use leasehold::store::LeaseStore;
/// let alice = Operator::new(LeaseStore::new(pool), "alice@laptop")?;
/// alice.pause(&Target::job("billing"), false).await?;
/// alice.trigger("nightly-reconcile").await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Operator {
    store: LeaseStore,
    actor: String,
}

impl Operator {
    /// An operator named `actor` (1 to 255 bytes: `user@host`, an SSO
    /// login…) acting through `store`. Fails with
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) on an empty or too
    /// long name, or one with a control, invisible or text-direction
    /// character (which would let it display as another name).
    pub fn new(store: LeaseStore, actor: impl Into<String>) -> Result<Self> {
        let actor = actor.into();
        validate::actor("actor", &actor)?;
        Ok(Operator { store, actor })
    }

    /// Who this operator is, as the history records it.
    pub fn actor(&self) -> &str {
        &self.actor
    }

    /// [`Controls::trigger`](crate::store::Controls::trigger), recorded as [`OperatorAction::Trigger`].
    /// Cancel-safe in the sense of [`LeaseStore`]: each of its three
    /// statements committed or did not; dropped after the first, the
    /// history shows the action without an outcome.
    pub async fn trigger(&self, key: &str) -> Result<Triggered> {
        let target = Target::key(key);
        self.recorded(
            &target,
            OperatorAction::Trigger,
            self.store.controls().trigger(key),
            Outcome::words,
        )
        .await
    }

    /// [`trigger`](Self::trigger) on every key of the job named `job`
    /// (each recorded on its key); how many keys it triggered. Keys the job
    /// registers later are not triggered.
    pub async fn trigger_job(&self, job: &str) -> Result<u64> {
        crate::validate::existing_job_name(job)?;
        let mut filter = KeyFilter::new().job(job).limit(TRIGGER_PAGE);
        let mut triggered = 0;
        loop {
            let page = self.store.records().list_page(&filter).await?;
            for status in &page.keys {
                if self.trigger(&status.lease.key).await? != Triggered::NotFound {
                    triggered += 1;
                }
            }
            match page.next {
                Some(after) => filter = filter.after(after),
                None => return Ok(triggered),
            }
        }
    }

    /// [`Controls::pause`](crate::store::Controls::pause), recorded as [`OperatorAction::Pause`], or
    /// [`OperatorAction::PauseCancel`] when the runs in progress are asked
    /// to stop. Cancel-safe as [`trigger`](Self::trigger).
    pub async fn pause(&self, target: &Target, cancel: bool) -> Result<Pause> {
        let action = if cancel {
            OperatorAction::PauseCancel
        } else {
            OperatorAction::Pause
        };
        self.recorded(
            target,
            action,
            self.store.controls().pause(target, cancel, &self.actor),
            Outcome::words,
        )
        .await
    }

    /// [`Controls::resume`](crate::store::Controls::resume), recorded as [`OperatorAction::Resume`].
    /// Cancel-safe as [`trigger`](Self::trigger).
    pub async fn resume(&self, target: &Target) -> Result<Resumed> {
        self.recorded(
            target,
            OperatorAction::Resume,
            self.store.controls().resume(target),
            Outcome::words,
        )
        .await
    }

    /// [`Controls::revoke`](crate::store::Controls::revoke), recorded as [`OperatorAction::Revoke`], or
    /// [`OperatorAction::ForceRevoke`] with [`Revoke::Force`], with the
    /// fence it gave the key. Cancel-safe as [`trigger`](Self::trigger).
    pub async fn revoke(&self, key: &str, revoke: Revoke, resources: &[&str]) -> Result<Revoked> {
        let action = match revoke {
            Revoke::Force => OperatorAction::ForceRevoke,
            Revoke::IfFree => OperatorAction::Revoke,
        };
        let target = Target::key(key);
        self.recorded(
            &target,
            action,
            self.store.controls().revoke(key, revoke, resources),
            Outcome::words,
        )
        .await
    }

    /// [`Controls::forget`](crate::store::Controls::forget), recorded as [`OperatorAction::Forget`]: the
    /// record outlives the row it deleted. Cancel-safe as
    /// [`trigger`](Self::trigger).
    ///
    /// ```no_run
    /// # async fn demo(alice: leasehold::operator::Operator) -> leasehold::Result<()> {
    /// use leasehold::operator::Forgotten;
    /// if let Forgotten::Held(info) = alice.forget("reconcile:tenant-42").await? {
    ///     eprintln!("held by {}: stop its run first", info.holder);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn forget(&self, key: &str) -> Result<Forgotten> {
        let target = Target::key(key);
        self.recorded(
            &target,
            OperatorAction::Forget,
            self.store.controls().forget(key),
            Outcome::words,
        )
        .await
    }

    /// [`Keys::add`](crate::store::Keys::add), recorded on each key as
    /// [`OperatorAction::Add`], with its kind and arguments. Three
    /// statements whatever the number of keys: every record, then the
    /// keys, then every outcome. Cancel-safe as [`trigger`](Self::trigger).
    pub async fn add_keys(&self, keys: &[NewKey]) -> Result<u64> {
        let targets: Vec<Target> = keys.iter().map(|k| Target::key(k.key())).collect();
        let ids = self
            .store
            .records()
            .record_actions(&targets, OperatorAction::Add.as_str(), &self.actor)
            .await?;
        let result = self.store.keys().add(keys).await;
        let outcomes: Vec<(i64, String, Option<i64>)> = ids
            .into_iter()
            .zip(keys)
            .map(|(id, key)| {
                let outcome = match &result {
                    Ok(n) => added(key, *n, keys.len()),
                    Err(err) => format!("error: {err}"),
                };
                (id, outcome, None)
            })
            .collect();
        if let Err(err) = self.store.records().record_outcomes(&outcomes).await {
            tracing::warn!(keys = keys.len(), error = %err, "the actions' outcomes were not recorded");
        }
        result
    }

    /// [`Keys::update`](crate::store::Keys::update), recorded as [`OperatorAction::Update`],
    /// with the new version. Cancel-safe as [`trigger`](Self::trigger).
    pub async fn update_key(&self, key: &NewKey) -> Result<Option<i64>> {
        let target = Target::key(key.key());
        self.recorded(&target, OperatorAction::Update, self.store.keys().update(key), |v| {
            (updated(key, *v), None)
        })
        .await
    }

    /// [`Keys::remove`](crate::store::Keys::remove), recorded as [`OperatorAction::Remove`].
    /// Cancel-safe as [`trigger`](Self::trigger).
    pub async fn remove_key(&self, kind: &str, key: &str) -> Result<bool> {
        let target = Target::key(key);
        self.recorded(
            &target,
            OperatorAction::Remove,
            self.store.keys().remove(kind, key),
            |r| (removed(kind, *r), None),
        )
        .await
    }

    /// Records the action, runs it, records what it did. A failure to
    /// record the outcome is logged, not returned: the action took effect
    /// and the caller must hear so.
    async fn recorded<T>(
        &self,
        target: &Target,
        action: OperatorAction,
        run: impl Future<Output = Result<T>>,
        describe: impl FnOnce(&T) -> (String, Option<i64>),
    ) -> Result<T> {
        let id = self
            .store
            .records()
            .record_action(target, action.as_str(), &self.actor)
            .await?;
        let result = run.await;
        let (outcome, fence) = match &result {
            Ok(done) => describe(done),
            Err(err) => (format!("error: {err}"), None),
        };
        if let Err(err) = self.store.records().record_outcome(id, &outcome, fence).await {
            tracing::warn!(%target, %action, error = %err, "the action's outcome was not recorded");
        }
        result
    }
}

// The actions' names and the words of their answers.

/// An action an [`Operator`] takes, as the history
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
    /// Make a key due now ([`Operator::trigger`]).
    Trigger,
    /// Pause a key or a job; runs in progress finish.
    Pause,
    /// Pause a key or a job and cancel the runs in progress.
    PauseCancel,
    /// Lift a pause.
    Resume,
    /// End the tenure of a free lease: a sleeping ex-holder is fenced out
    /// ([`Operator::revoke`] with
    /// [`Revoke::IfFree`], CLI `revoke`).
    Revoke,
    /// End the tenure of a lease even if held: its run is cancelled at its
    /// next heartbeat and its fenced writes are rejected
    /// ([`Revoke::Force`], CLI `revoke --force`).
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
