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

use crate::action::{self, Outcome};
use crate::error::Result;
use crate::lease::{KeyFilter, LeaseStore, NewKey, validate_actor};

pub use crate::action::{OperatorAction, added, removed, updated};
pub use crate::lease::{ActionRecord, Forgotten, Pause, Resumed, Revoke, Revoked, Target, Triggered};

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
        validate_actor(&actor)?;
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
                    Ok(n) => action::added(key, *n, keys.len()),
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
            (action::updated(key, *v), None)
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
            |r| (action::removed(kind, *r), None),
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
