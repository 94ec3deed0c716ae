//! `Operator`: the operators' actions (trigger, pause, resume, release,
//! and adding, updating and removing the keys of job kinds),
//! each recorded in the key's history with who took it.
//!
//! The CLI and the console act through this type, so an action looks the
//! same in the history whichever tool took it. Each action is the
//! `LeaseStore` operation of the same name, between two audit statements:
//! the record is written first, so an action that took effect is never
//! missing from the history (docs/design.md §7).

use crate::error::Result;
use crate::lease::{
    KeyFilter, LeaseStore, NewKey, Pause, PauseTarget, Resumed, Revoke, Revoked, Triggered, validate_actor,
};

/// Keys read at a time by [`Operator::trigger_job`].
const TRIGGER_PAGE: usize = 500;

/// An operator — a person, or a tool acting for one — taking actions on
/// the fleet's keys, each recorded in `leasehold_action` with its name.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> leasehold::Result<()> {
/// use leasehold::{LeaseStore, Operator, PauseTarget};
/// let alice = Operator::new(LeaseStore::new(pool), "alice@laptop")?;
/// alice.pause(&PauseTarget::job("billing"), false).await?;
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

    /// [`LeaseStore::trigger`], recorded. Cancel-safe in the sense of
    /// [`LeaseStore`]: each of its three statements committed or did not;
    /// dropped after the first, the history shows the action without an
    /// outcome.
    pub async fn trigger(&self, key: &str) -> Result<Triggered> {
        let target = PauseTarget::key(key);
        self.recorded(&target, "trigger", self.store.trigger(key), |t| {
            let outcome = match t {
                Triggered::Due => "due: the first replica to claim it runs it",
                Triggered::Paused => "due, but paused: it runs once resumed",
                _ => "not found: no runtime registered this key",
            };
            (outcome.to_owned(), None)
        })
        .await
    }

    /// [`trigger`](Self::trigger) on every key of the job named `job`
    /// (each recorded on its key); how many keys it triggered. Keys the job
    /// registers later are not triggered.
    pub async fn trigger_job(&self, job: &str) -> Result<u64> {
        crate::validate::job_name(job)?;
        let mut filter = KeyFilter::new().job(job).limit(TRIGGER_PAGE);
        let mut triggered = 0;
        loop {
            let page = self.store.list_page(&filter).await?;
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

    /// [`LeaseStore::pause`], recorded (as `pause`, or `pause-cancel` when
    /// the runs in progress are asked to stop). Cancel-safe as
    /// [`trigger`](Self::trigger).
    pub async fn pause(&self, target: &PauseTarget, cancel: bool) -> Result<Pause> {
        let action = if cancel { "pause-cancel" } else { "pause" };
        self.recorded(target, action, self.store.pause(target, cancel, &self.actor), |p| {
            (format!("paused: {}, {} running", keys(p.keys), p.running), None)
        })
        .await
    }

    /// [`LeaseStore::resume`], recorded. Cancel-safe as
    /// [`trigger`](Self::trigger).
    pub async fn resume(&self, target: &PauseTarget) -> Result<Resumed> {
        self.recorded(target, "resume", self.store.resume(target), |r| {
            let outcome = match r {
                Resumed::Yes { woken } => format!("resumed: {} woken", keys(*woken).replace("key", "overdue key")),
                _ => "not paused".to_owned(),
            };
            (outcome, None)
        })
        .await
    }

    /// [`LeaseStore::revoke`], recorded (as `release`, or `force-release`
    /// with [`Revoke::Force`]) with the fence it gave the key. Cancel-safe
    /// as [`trigger`](Self::trigger).
    pub async fn revoke(&self, key: &str, revoke: Revoke, resources: &[&str]) -> Result<Revoked> {
        let action = match revoke {
            Revoke::Force => "force-release",
            _ => "release",
        };
        let target = PauseTarget::key(key);
        self.recorded(
            &target,
            action,
            self.store.revoke(key, revoke, resources),
            |r| match r {
                Revoked::Ended { previous, fence } => (
                    format!("ended the tenure of {} (fence {})", previous.holder, previous.fence),
                    Some(*fence),
                ),
                Revoked::Held(info) => (format!("refused: held by {} (fence {})", info.holder, info.fence), None),
                _ => ("not found: no lease row".to_owned(), None),
            },
        )
        .await
    }

    /// [`LeaseStore::add_keys`], recorded on each key (as `add`, with its
    /// kind and version 1). The keys are added in one statement, after
    /// every record is written. Cancel-safe as [`trigger`](Self::trigger).
    pub async fn add_keys(&self, keys: &[NewKey]) -> Result<u64> {
        let mut ids = Vec::with_capacity(keys.len());
        for key in keys {
            let target = PauseTarget::key(key.key());
            ids.push((key, self.store.record_action(&target, "add", &self.actor).await?));
        }
        let result = self.store.add_keys(keys).await;
        for (key, id) in ids {
            let outcome = match &result {
                Ok(n) => format!(
                    "kind {}, args {}: {n} of {} keys added (an existing key is kept)",
                    key.kind(),
                    key.args_json(),
                    keys.len()
                ),
                Err(err) => format!("error: {err}"),
            };
            if let Err(err) = self.store.record_outcome(id, &outcome, None).await {
                tracing::warn!(key = key.key(), error = %err, "the action's outcome was not recorded");
            }
        }
        result
    }

    /// [`LeaseStore::update_key`], recorded (as `update`, with the new
    /// version). Cancel-safe as [`trigger`](Self::trigger).
    pub async fn update_key(&self, key: &NewKey) -> Result<Option<i64>> {
        let target = PauseTarget::key(key.key());
        self.recorded(&target, "update", self.store.update_key(key), |v| {
            let outcome = match v {
                Some(version) => format!("updated to version {version}: args {}", key.args_json()),
                None => format!("not found: no key of kind {}", key.kind()),
            };
            (outcome, None)
        })
        .await
    }

    /// [`LeaseStore::remove_key`], recorded (as `remove`). Cancel-safe as
    /// [`trigger`](Self::trigger).
    pub async fn remove_key(&self, kind: &str, key: &str) -> Result<bool> {
        let target = PauseTarget::key(key);
        self.recorded(&target, "remove", self.store.remove_key(kind, key), |removed| {
            let outcome = if *removed {
                "removed: every replica stops it".to_owned()
            } else {
                format!("not found: no key of kind {kind}")
            };
            (outcome, None)
        })
        .await
    }

    /// Records the action, runs it, records what it did. A failure to
    /// record the outcome is logged, not returned: the action took effect
    /// and the caller must hear so.
    async fn recorded<T>(
        &self,
        target: &PauseTarget,
        action: &str,
        run: impl Future<Output = Result<T>>,
        describe: impl FnOnce(&T) -> (String, Option<i64>),
    ) -> Result<T> {
        let id = self.store.record_action(target, action, &self.actor).await?;
        let result = run.await;
        let (outcome, fence) = match &result {
            Ok(done) => describe(done),
            Err(err) => (format!("error: {err}"), None),
        };
        if let Err(err) = self.store.record_outcome(id, &outcome, fence).await {
            tracing::warn!(%target, action, error = %err, "the action's outcome was not recorded");
        }
        result
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
