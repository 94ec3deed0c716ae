//! `Operator`: the operators' actions (trigger, pause, resume, revoke,
//! forget, and adding, updating and removing the keys of job kinds), each
//! recorded in the key's history with who took it, under its
//! [`OperatorAction`] name and with its outcome in that module's words.
//!
//! The CLI and the console act through this type, so an action looks the
//! same in the history whichever tool took it. Each action is the store
//! operation of the same name (`Controls`, `Keys`), and **one statement**:
//! that statement writes the action's record, outcome included, so the
//! record and the effect commit together — an action that took effect is
//! never missing from the history, and one that did not leaves no record
//! of success. An action whose statement fails is recorded apart, best
//! effort, with `error: …` (docs/design.md §7). The action's target is
//! checked once, here, where it enters.
//!
//! [`OperatorAction`] is the one vocabulary of those actions. Each action
//! has one name — the name the history stores, the CLI's and the console's
//! word for it — and each answer of an action is put into words here, so
//! the history, the CLI and the console say the same thing. The words are
//! templates (see "The words of the actions' answers" below): an answer's
//! `Display` fills them in Rust, and the action's statement, which gets the
//! templates of every answer it may give as a bind parameter, picks its
//! answer's with a `CASE` and fills it with PostgreSQL's `format` — so the
//! words stay made here while the record is written by the statement that
//! acts. An action is its name, its words and its recorded run, all in
//! this file.

use std::fmt;

use crate::error::{Error, Result};
use crate::key::{IntoKey, Key};
pub use crate::lease::{
    ActionRecord, FleetLimit, Forgotten, LimitSet, MAX_FLEET_LIMIT, Pause, Resumed, Revoke, Revoked, Target, Triggered,
};
use crate::lease::{KeyFilter, LeaseStore, NewKey, Record};
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
    /// The schema version every action's statement checks, if asked
    /// ([`checking_schema`](Self::checking_schema)).
    schema: Option<i32>,
}

impl Operator {
    /// An operator named `actor` (1 to 255 bytes: `user@host`, an SSO
    /// login…) acting through `store`. Fails with [`Error::InvalidInput`]
    /// on an empty or too long name, or one with a control, invisible or
    /// text-direction character (which would let it display as another
    /// name).
    pub fn new(store: LeaseStore, actor: impl Into<String>) -> Result<Self> {
        let actor = actor.into();
        validate::actor("actor", &actor)?;
        Ok(Operator {
            store,
            actor,
            schema: None,
        })
    }

    /// This operator, acting only on the schema this library was built for
    /// ([`SCHEMA_VERSION`](crate::schema::SCHEMA_VERSION)): each action's
    /// own statement checks the version where it writes the action's
    /// record, and on another writes nothing and fails with
    /// [`Error::SchemaOutdated`] (run `migrate`) or [`Error::SchemaTooNew`]
    /// (upgrade leasehold). No statement of its own: an action stays one
    /// statement. The CLI acts this way. Without it an operator also acts
    /// on a newer schema, as its replica's runtime goes on running during a
    /// rolling upgrade.
    ///
    /// ```no_run
    /// # async fn demo(pool: sqlx::PgPool) -> leasehold::Result<()> {
    /// use leasehold::{operator::Operator, store::LeaseStore};
    /// let tool = Operator::new(LeaseStore::new(pool), "deploy-bot")?.checking_schema();
    /// tool.trigger("nightly-reconcile").await?; // Err(SchemaTooNew) once a newer leasehold migrated
    /// # Ok(()) }
    /// ```
    pub fn checking_schema(mut self) -> Self {
        self.schema = Some(crate::migrate::SCHEMA_VERSION);
        self
    }

    /// Who this operator is, as the history records it.
    pub fn actor(&self) -> &str {
        &self.actor
    }

    /// [`Controls::trigger`](crate::store::Controls::trigger), recorded as [`OperatorAction::Trigger`].
    /// One statement, which makes the key due and writes the record:
    /// cancel-safe in the sense of [`LeaseStore`], both committed or
    /// neither.
    pub async fn trigger(&self, key: impl IntoKey) -> Result<Triggered> {
        self.trigger_checked(key.into_key()?).await
    }

    /// [`trigger`](Self::trigger) of a key checked where it entered.
    async fn trigger_checked(&self, key: Key) -> Result<Triggered> {
        let action = OperatorAction::Trigger;
        let record = self.record(action, Triggered::words());
        let done = self.store.controls().trigger_recorded(&key, Some(&record)).await;
        self.failed(&[Target::Key(key)], action, done).await
    }

    /// [`trigger`](Self::trigger) on every key of the job named `job`
    /// (each recorded on its key); how many keys it triggered. Keys the job
    /// registers later are not triggered.
    pub async fn trigger_job(&self, job: &str) -> Result<u64> {
        validate::existing_job_name(job)?;
        let mut filter = KeyFilter::new().job(job).limit(TRIGGER_PAGE);
        let mut triggered = 0;
        loop {
            let page = self.store.records().list_page(&filter).await?;
            for status in &page.keys {
                // A key read from its row: what a row holds is a key.
                if self.trigger_checked(Key::checked(status.lease.key.clone())).await? != Triggered::NotFound {
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
    /// to stop. One statement, cancel-safe as [`trigger`](Self::trigger).
    pub async fn pause(&self, target: &Target, cancel: bool) -> Result<Pause> {
        target.check()?;
        let action = if cancel {
            OperatorAction::PauseCancel
        } else {
            OperatorAction::Pause
        };
        let record = self.record(action, Pause::words());
        let done = self
            .store
            .controls()
            .pause_recorded(target, cancel, &self.actor, Some(&record))
            .await;
        self.failed(std::slice::from_ref(target), action, done).await
    }

    /// [`Controls::resume`](crate::store::Controls::resume), recorded as [`OperatorAction::Resume`].
    /// One statement, cancel-safe as [`trigger`](Self::trigger).
    pub async fn resume(&self, target: &Target) -> Result<Resumed> {
        target.check()?;
        let action = OperatorAction::Resume;
        let record = self.record(action, Resumed::words());
        let done = self.store.controls().resume_recorded(target, Some(&record)).await;
        self.failed(std::slice::from_ref(target), action, done).await
    }

    /// [`Controls::revoke`](crate::store::Controls::revoke), recorded as [`OperatorAction::Revoke`], or
    /// [`OperatorAction::ForceRevoke`] with [`Revoke::Force`], with the
    /// fence it gave the key. One statement, cancel-safe as
    /// [`trigger`](Self::trigger).
    pub async fn revoke(&self, key: impl IntoKey, revoke: Revoke, resources: &[&str]) -> Result<Revoked> {
        let key = key.into_key()?;
        let action = match revoke {
            Revoke::Force => OperatorAction::ForceRevoke,
            Revoke::IfFree => OperatorAction::Revoke,
        };
        let record = self.record(action, Revoked::words());
        let done = self
            .store
            .controls()
            .revoke_recorded(&key, revoke, resources, Some(&record))
            .await;
        self.failed(&[Target::Key(key)], action, done).await
    }

    /// [`Controls::forget`](crate::store::Controls::forget), recorded as [`OperatorAction::Forget`]: the
    /// record outlives the row it deleted. One statement, cancel-safe as
    /// [`trigger`](Self::trigger); but a forget that found the row free
    /// and still could not delete it (a claim committed while it ran) reads
    /// the new tenure after it, and records that refusal with a second
    /// statement, best effort.
    ///
    /// ```no_run
    /// # async fn demo(alice: leasehold::operator::Operator) -> leasehold::Result<()> {
    /// use leasehold::operator::Forgotten;
    /// if let Forgotten::Held(info) = alice.forget("reconcile:tenant-42").await? {
    ///     eprintln!("held by {}: stop its run first", info.holder);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn forget(&self, key: impl IntoKey) -> Result<Forgotten> {
        let key = key.into_key()?;
        let action = OperatorAction::Forget;
        let record = self.record(action, Forgotten::words());
        let done = self.store.controls().forget_recorded(&key, Some(&record)).await;
        let targets = [Target::Key(key)];
        let (forgotten, recorded) = self.failed(&targets, action, done).await?;
        if !recorded {
            self.record_apart(&targets, action, &forgotten.to_string()).await;
        }
        Ok(forgotten)
    }

    /// [`Controls::set_limit`](crate::store::Controls::set_limit), recorded on
    /// the job as [`OperatorAction::SetLimit`], with the limit it replaced,
    /// in the statement that sets it (after the set's wait for the claims
    /// in flight); cancel-safe: a dropped set rolls back.
    ///
    /// ```no_run
    /// # async fn demo(alice: leasehold::operator::Operator) -> leasehold::Result<()> {
    /// use leasehold::operator::LimitSet;
    /// if alice.set_limit("report", 4).await? == LimitSet::UnknownJob {
    ///     eprintln!("no key of a job named report");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn set_limit(&self, job: &str, limit: u32) -> Result<LimitSet> {
        validate::existing_job_name(job)?;
        self.set_limit_of(job, limit, false).await
    }

    /// [`set_limit`](Self::set_limit) for a limit a runtime's code declares
    /// (`RuntimeBuilder::fleet_limit`), with this operator as the runtime:
    /// `job` is registered with it, so the limit is set even before any of
    /// its keys exists. Recorded on the job as [`OperatorAction::SetLimit`].
    pub(crate) async fn declare_limit(&self, job: &str, limit: u32) -> Result<LimitSet> {
        self.set_limit_of(job, limit, true).await
    }

    /// The set of both, recorded; `registered` as
    /// `Controls::set_limit_recorded` takes it.
    async fn set_limit_of(&self, job: &str, limit: u32, registered: bool) -> Result<LimitSet> {
        let action = OperatorAction::SetLimit;
        let record = self.record(action, limit_set_words(limit));
        let done = self
            .store
            .controls()
            .set_limit_recorded(job, limit, &self.actor, Some(&record), registered)
            .await;
        self.failed(&[Target::job(job)], action, done).await
    }

    /// [`Controls::clear_limit`](crate::store::Controls::clear_limit),
    /// recorded on the job as [`OperatorAction::ClearLimit`]. One
    /// statement, cancel-safe as [`trigger`](Self::trigger).
    pub async fn clear_limit(&self, job: &str) -> Result<bool> {
        validate::existing_job_name(job)?;
        let action = OperatorAction::ClearLimit;
        let record = self.record(action, [LIMIT_LIFTED, NOT_LIMITED].map(str::to_owned).into());
        let done = self.store.controls().clear_limit_recorded(job, Some(&record)).await;
        self.failed(&[Target::job(job)], action, done).await
    }

    /// [`Keys::add`](crate::store::Keys::add), recorded on each key as
    /// [`OperatorAction::Add`], with its kind and arguments. One statement
    /// (and a read of the server clock) whatever the number of keys: the
    /// keys and their records commit together. Cancel-safe as
    /// [`trigger`](Self::trigger).
    pub async fn add_keys(&self, keys: &[NewKey]) -> Result<u64> {
        let action = OperatorAction::Add;
        let words = keys.iter().map(|key| added_words(key, keys.len())).collect();
        let record = self.record(action, words);
        let done = self.store.keys().add_recorded(keys, Some(&record)).await;
        if done.is_err() {
            let targets: Vec<Target> = keys.iter().map(|k| Target::from(k.key().clone())).collect();
            return self.failed(&targets, action, done).await;
        }
        done
    }

    /// [`Keys::update`](crate::store::Keys::update), recorded as [`OperatorAction::Update`],
    /// with the new version. One statement, cancel-safe as
    /// [`trigger`](Self::trigger).
    pub async fn update_key(&self, key: &NewKey) -> Result<Option<i64>> {
        let action = OperatorAction::Update;
        let record = self.record(action, updated_words(key));
        let done = self.store.keys().update_recorded(key, Some(&record)).await;
        self.failed(&[Target::from(key.key().clone())], action, done).await
    }

    /// [`Keys::remove`](crate::store::Keys::remove), recorded as [`OperatorAction::Remove`].
    /// One statement, cancel-safe as [`trigger`](Self::trigger).
    pub async fn remove_key(&self, kind: &str, key: impl IntoKey) -> Result<bool> {
        validate::job_name(kind)?;
        let key = key.into_key()?;
        let action = OperatorAction::Remove;
        let record = self.record(action, removed_words(kind));
        let done = self.store.keys().remove_recorded(kind, &key, Some(&record)).await;
        self.failed(&[Target::Key(key)], action, done).await
    }

    /// The record `action`'s statement writes, with the words of each of
    /// its answers.
    fn record(&self, action: OperatorAction, words: Vec<String>) -> Record<'_> {
        Record {
            action: action.as_str(),
            actor: &self.actor,
            words,
            schema: self.schema,
        }
    }

    /// `done`, after recording its error, if it is one, on each of
    /// `targets`: the action's statement, which records it, did not commit
    /// (or was never sent), so nothing else will. Best effort, in a second
    /// statement: a failure to record is logged, and the action's own
    /// error returned. An error of the schema ([`schema_error`]) is
    /// returned as such and recorded nowhere: there is no schema of this
    /// version to record it in.
    async fn failed<T>(&self, targets: &[Target], action: OperatorAction, done: Result<T>) -> Result<T> {
        let Err(err) = done else {
            return done;
        };
        let err = schema_error(&self.store, err).await;
        if !matches!(
            err,
            Error::SchemaMissing | Error::SchemaOutdated { .. } | Error::SchemaTooNew { .. }
        ) {
            self.record_apart(targets, action, &format!("error: {err}")).await;
        }
        Err(err)
    }

    /// Records `outcome` of `action` on `targets` in a statement of its
    /// own, logging a failure to.
    async fn record_apart(&self, targets: &[Target], action: OperatorAction, outcome: &str) {
        let recorded = self
            .store
            .records()
            .record_apart(targets, action.as_str(), &self.actor, outcome, self.schema)
            .await;
        if let Err(err) = recorded {
            let target = targets.first().map(Target::to_string).unwrap_or_default();
            tracing::warn!(%target, targets = targets.len(), %action, error = %err, "the action's outcome was not recorded");
        }
    }
}

/// An action's statement's error `err` as the schema tells it, when it is
/// one of the schema: the statement met a schema other than the one its
/// operator acts on (SQLSTATE `LH002`, [`Operator::checking_schema`]), or
/// none, or one without a table, column or function of this version
/// (`42P01`, `42703`, `42883`). Then it is [`Error::SchemaMissing`],
/// [`Error::SchemaOutdated`] or [`Error::SchemaTooNew`], from a read of the
/// version (a statement more, on this failure only); otherwise `err`.
async fn schema_error(store: &LeaseStore, err: Error) -> Error {
    let Error::Database(db) = &err else {
        return err;
    };
    let code = db.as_database_error().and_then(|e| e.code());
    if !matches!(code.as_deref(), Some("LH002" | "42P01" | "42703" | "42883")) {
        return err;
    }
    match crate::migrate::check_schema(store.pool()).await {
        Err(schema @ (Error::SchemaMissing | Error::SchemaOutdated { .. } | Error::SchemaTooNew { .. })) => schema,
        _ => err,
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
    /// Set a job's fleet-wide limit ([`Operator::set_limit`], CLI `limit set`).
    SetLimit,
    /// Lift a job's fleet-wide limit ([`Operator::clear_limit`], CLI `limit clear`).
    ClearLimit,
}

impl OperatorAction {
    /// Every action, in the order the CLI's help lists them.
    pub const ALL: [OperatorAction; 12] = [
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
        OperatorAction::SetLimit,
        OperatorAction::ClearLimit,
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
            OperatorAction::SetLimit => "limit",
            OperatorAction::ClearLimit => "limit-clear",
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
            OperatorAction::SetLimit => "Set limit",
            OperatorAction::ClearLimit => "Clear limit",
        }
    }
}

impl fmt::Display for OperatorAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// The words of the actions' answers, made here and nowhere else.
//
// Each is a template whose `%s` slots are filled, in order, with what the
// action did: by [`fill`] when Rust says an answer (its `Display`, which the
// CLI and the console print), and by PostgreSQL's `format` when the
// action's own statement writes its record (`lease::Record`), which reads
// the same template the same way. The statement cannot ask Rust for words
// once it knows what it did, and a second statement to write them would
// let an action commit without its record; storing a structured outcome
// instead and saying it on read would put words in the lease store's read
// path (below the operator's module) and leave the table's `outcome`
// column unreadable to SQL. So the words go down as bind parameters, one
// template per answer, and the statement picks with a `CASE` on what it
// did and fills the slots. What Rust knows before the statement (a kind,
// arguments) is written into the template, each `%` doubled ([`literal`]).

/// A trigger found the key: it is due.
const DUE: &str = "due: the first replica to claim it runs it";
/// A trigger found the key paused.
const DUE_PAUSED: &str = "due, but paused: it runs once resumed";
/// A trigger found no lease row.
const NOT_REGISTERED: &str = "not found: no runtime registered this key";
/// A pause: its keys ([`ONE_KEY`] or [`KEYS`]), how many running.
const PAUSED: &str = "paused: %s, %s running";
const ONE_KEY: &str = "1 key";
const KEYS: &str = "%s keys";
/// A resume: its overdue keys woken ([`ONE_OVERDUE_KEY`] or [`OVERDUE_KEYS`]).
const RESUMED: &str = "resumed: %s woken";
const ONE_OVERDUE_KEY: &str = "1 overdue key";
const OVERDUE_KEYS: &str = "%s overdue keys";
const NOT_PAUSED: &str = "not paused";
/// A revoke ended a tenure: its holder, its fence, [`WAS_HELD`] or
/// [`WAS_FREE`], the new fence.
const ENDED: &str = "ended the tenure of %s (fence %s, %s); new fence %s";
const WAS_HELD: &str = "held: its run is cancelled at its next heartbeat";
const WAS_FREE: &str = "already free";
/// A revoke or a forget refused: the holder, its fence.
const REFUSED_HELD: &str = "refused: held by %s (fence %s)";
const NO_LEASE_ROW: &str = "not found: no lease row";
const DELETED: &str = "deleted: the lease row and its run history are gone";
/// Adding keys: the words of one key (its kind, its arguments, how many keys the call added, of how many).
const ADDED: &str = "kind %s, args %s: %s of %s keys added (an existing key is kept)";
/// Updating a key: its new version, its arguments.
const UPDATED: &str = "updated to version %s: args %s";
/// Removing or updating a key that is no key of its kind.
const NO_KEY_OF_KIND: &str = "not found: no key of kind %s";
const REMOVED: &str = "removed: every replica stops it";
/// A fleet-wide limit set: the new limit is written in, the old one is a slot.
const LIMIT_WAS: &str = "at most {limit} runs at once across the fleet (was %s)";
const LIMIT_NEW: &str = "at most {limit} runs at once across the fleet (none before)";
const NOT_A_JOB: &str = "not found: no key of a job or kind of this name";
const LIMIT_LIFTED: &str = "limit lifted: its keys start as freely as any other's";
const NOT_LIMITED: &str = "not limited";

/// The words of a limit's setting, in the order its statement reads them:
/// replaced, new, unknown job; `limit` written in.
fn limit_set_words(limit: u32) -> Vec<String> {
    [LIMIT_WAS, LIMIT_NEW, NOT_A_JOB]
        .map(|w| w.replace("{limit}", &limit.to_string()))
        .into()
}

/// Most bytes of a key's arguments its words show: the rest is cut
/// (`…`), so the words of an add or an update always fit the history's
/// 2,000 bytes, with the count or version after the arguments.
const ARGS_SHOWN_BYTES: usize = 1500;

/// `template` with each `%s` replaced by the next of `values`, and `%%`
/// read as `%`: what PostgreSQL's `format` makes of the same template and
/// values (integers and text only), so the words an answer's `Display`
/// says are the words its statement records.
fn fill(template: &str, values: &[&dyn fmt::Display]) -> String {
    use fmt::Write;
    let mut out = String::with_capacity(template.len() + 16 * values.len());
    let mut values = values.iter();
    let mut rest = template;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        match rest[at + 1..].chars().next() {
            Some('s') => {
                if let Some(value) = values.next() {
                    let _ = write!(out, "{value}");
                }
                rest = &rest[at + 2..];
            }
            Some('%') => {
                out.push('%');
                rest = &rest[at + 2..];
            }
            _ => {
                out.push('%');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `text` written into a template as itself: each `%` doubled.
fn literal(text: &str) -> String {
    text.replace('%', "%%")
}

/// A key's arguments as its words show them: at most
/// [`ARGS_SHOWN_BYTES`], cut at a character with `…`.
fn shown_args(args: &str) -> std::borrow::Cow<'_, str> {
    if args.len() <= ARGS_SHOWN_BYTES {
        return args.into();
    }
    let mut end = ARGS_SHOWN_BYTES;
    while !args.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &args[..end]).into()
}

/// `1 key`, `3 keys`, as [`PAUSED`] says them (its statement: the same
/// choice, on `keys = 1`).
fn keys(n: u64) -> String {
    if n == 1 { fill(ONE_KEY, &[]) } else { fill(KEYS, &[&n]) }
}

/// The words of a trigger's answers, in the order its statement reads
/// them: due, paused, not found.
impl Triggered {
    fn words() -> Vec<String> {
        [DUE, DUE_PAUSED, NOT_REGISTERED].map(str::to_owned).into()
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
        f.write_str(&fill(
            match self {
                Triggered::Due => DUE,
                Triggered::Paused => DUE_PAUSED,
                Triggered::NotFound => NOT_REGISTERED,
            },
            &[],
        ))
    }
}

/// The words of a pause, in the order its statement reads them: the
/// pause, one key, several keys.
impl Pause {
    fn words() -> Vec<String> {
        [PAUSED, ONE_KEY, KEYS].map(str::to_owned).into()
    }
}

/// The words the history records for a pause, e.g. `paused: 3 keys, 1
/// running`.
impl fmt::Display for Pause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&fill(PAUSED, &[&keys(self.keys), &self.running]))
    }
}

/// The words of a resume's answers, in the order its statement reads
/// them: not paused, resumed, one overdue key, several.
impl Resumed {
    fn words() -> Vec<String> {
        [NOT_PAUSED, RESUMED, ONE_OVERDUE_KEY, OVERDUE_KEYS]
            .map(str::to_owned)
            .into()
    }
}

/// The words the history records for a resume, e.g. `resumed: 2 overdue
/// keys woken` or `not paused`.
///
/// ```
/// use leasehold::operator::Resumed;
/// assert_eq!(Resumed::NotPaused.to_string(), "not paused");
/// assert_eq!(Resumed::Yes { woken: 1 }.to_string(), "resumed: 1 overdue key woken");
/// ```
impl fmt::Display for Resumed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&match self {
            Resumed::Yes { woken: 1 } => fill(RESUMED, &[&fill(ONE_OVERDUE_KEY, &[])]),
            Resumed::Yes { woken } => fill(RESUMED, &[&fill(OVERDUE_KEYS, &[woken])]),
            Resumed::NotPaused => fill(NOT_PAUSED, &[]),
        })
    }
}

/// The words of a revoke's answers, in the order its statement reads
/// them: not found, refused, ended, and the ended tenure held or free.
impl Revoked {
    fn words() -> Vec<String> {
        [NO_LEASE_ROW, REFUSED_HELD, ENDED, WAS_HELD, WAS_FREE]
            .map(str::to_owned)
            .into()
    }
}

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
        f.write_str(&match self {
            Revoked::Ended { previous, fence } => {
                let was = if previous.is_held() { WAS_HELD } else { WAS_FREE };
                fill(ENDED, &[&previous.holder, &previous.fence, &fill(was, &[]), fence])
            }
            Revoked::Held(info) => fill(REFUSED_HELD, &[&info.holder, &info.fence]),
            Revoked::NotFound => fill(NO_LEASE_ROW, &[]),
        })
    }
}

/// The words of a forget's answers, in the order its statement reads
/// them: deleted, not found, refused.
impl Forgotten {
    fn words() -> Vec<String> {
        [DELETED, NO_LEASE_ROW, REFUSED_HELD].map(str::to_owned).into()
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
        f.write_str(&match self {
            Forgotten::Deleted => fill(DELETED, &[]),
            Forgotten::NotFound => fill(NO_LEASE_ROW, &[]),
            Forgotten::Held(info) => fill(REFUSED_HELD, &[&info.holder, &info.fence]),
        })
    }
}

/// The words of adding `key` in a call of `of` keys, with one slot left:
/// how many the call added.
fn added_words(key: &NewKey, of: usize) -> String {
    fill(
        ADDED,
        &[&literal(key.kind()), &literal(&shown_args(key.args_json())), &"%s", &of],
    )
}

/// The words the history records for adding `key` in an
/// [`Operator::add_keys`](crate::operator::Operator::add_keys) call that added
/// `added` of `of` keys (arguments past 1,500 bytes cut, `…`).
///
/// ```
/// use leasehold::operator::added;
/// use leasehold::{NewKey, Schedule};
/// let key = NewKey::new("sync", "sync:acme", &42, Schedule::Manual)?;
/// assert_eq!(added(&key, 1, 1), "kind sync, args 42: 1 of 1 keys added (an existing key is kept)");
/// # Ok::<(), leasehold::Error>(())
/// ```
pub fn added(key: &NewKey, added: u64, of: usize) -> String {
    fill(&added_words(key, of), &[&added])
}

/// The words of updating `key`, in the order its statement reads them:
/// updated (one slot: the new version), not found.
fn updated_words(key: &NewKey) -> Vec<String> {
    vec![
        fill(UPDATED, &[&"%s", &literal(&shown_args(key.args_json()))]),
        fill(NO_KEY_OF_KIND, &[&literal(key.kind())]),
    ]
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
    let words = updated_words(key);
    match version {
        Some(version) => fill(&words[0], &[&version]),
        None => fill(&words[1], &[]),
    }
}

/// The words of removing a key of `kind`, in the order its statement
/// reads them: removed, not found.
fn removed_words(kind: &str) -> Vec<String> {
    vec![REMOVED.to_owned(), fill(NO_KEY_OF_KIND, &[&literal(kind)])]
}

/// The words the history records for removing a key of `kind`
/// ([`Operator::remove_key`](crate::operator::Operator::remove_key)'s answer).
///
/// ```
/// assert_eq!(leasehold::operator::removed("sync", false), "not found: no key of kind sync");
/// ```
pub fn removed(kind: &str, removed: bool) -> String {
    let words = removed_words(kind);
    fill(&words[usize::from(!removed)], &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_fill_as_postgres_format_does() {
        assert_eq!(fill("a %s b %% c %s", &[&1, &"x%s"]), "a 1 b % c x%s");
        assert_eq!(fill(&literal("50% off: %s"), &[]), "50% off: %s");
        // Every template's `%` is a slot or a doubled `%`: `format` would
        // refuse any other.
        for template in [
            DUE,
            DUE_PAUSED,
            NOT_REGISTERED,
            PAUSED,
            ONE_KEY,
            KEYS,
            RESUMED,
            ONE_OVERDUE_KEY,
            OVERDUE_KEYS,
            NOT_PAUSED,
            ENDED,
            WAS_HELD,
            WAS_FREE,
            REFUSED_HELD,
            NO_LEASE_ROW,
            DELETED,
            ADDED,
            UPDATED,
            NO_KEY_OF_KIND,
            REMOVED,
        ] {
            assert!(
                !template.replace("%s", "").replace("%%", "").contains('%'),
                "{template}"
            );
        }
        assert_eq!(Resumed::Yes { woken: 3 }.to_string(), "resumed: 3 overdue keys woken");
        let long = "x".repeat(5000);
        let key = NewKey::new("k", "k:1", &long, crate::Schedule::Manual).expect("key");
        let words = added(&key, 1, 1);
        assert!(
            words.len() < 2000 && words.ends_with("x…: 1 of 1 keys added (an existing key is kept)"),
            "{words}"
        );
    }

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
