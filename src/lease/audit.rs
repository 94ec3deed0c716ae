//! Operators' actions, recorded in `leasehold_action` for each key's
//! history (who triggered, paused, resumed or released what, and when).
//!
//! The record is an audit trail, not a lock: nothing here decides whether a
//! run may start. Each action's own statement (pause, resume, trigger,
//! revoke, forget, and the keys' add, update and remove) writes its row,
//! outcome included, from a [`Record`] that `Operator` (in
//! `src/operator.rs`) hands it, so the record and the effect commit
//! together (docs/design.md §7). An action whose statement failed is
//! recorded here, best effort, with its error.

use chrono::{DateTime, Utc};

use super::{Records, Target};
use crate::connection;
use crate::error::{Error, Result};
use crate::key::IntoKey;
use crate::validate;

/// Most actions one [`Records::actions`](crate::store::Records::actions) call returns.
const MAX_ACTIONS: usize = 1000;

/// One operator action on a key, or on the job a key belongs to.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ActionRecord {
    /// What was acted on: the key itself, or its job (a pause or resume).
    pub target: Target,
    /// The action's [`OperatorAction`](crate::operator::OperatorAction) name as
    /// stored: `trigger`, `pause`, `pause-cancel` (a pause that cancels the
    /// run in progress), `resume`, `revoke`, `force-revoke`, or for a key
    /// of a job kind `add`, `update` or `remove`. Records written before
    /// revoke had one name say `release`/`force-release`;
    /// [`OperatorAction::parse`](crate::operator::OperatorAction::parse) reads both.
    pub action: String,
    /// Who: the console's authorised user, or the CLI's `user@host`.
    pub actor: String,
    /// Server time the action was asked for.
    pub at: DateTime<Utc>,
    /// What it did (`due`, `paused`, `not found`, `ended`, `held`, an
    /// error…), in the words of [`OperatorAction`](crate::operator::OperatorAction)'s
    /// module. `None` only on rows written before an action's record and
    /// effect were one statement (the tool stopped between the action and
    /// the record of its outcome).
    pub outcome: Option<String>,
    /// The fence a release gave the key: every earlier tenure is fenced out.
    pub fence: Option<i64>,
}

#[derive(sqlx::FromRow)]
struct ActionRow {
    scope: String,
    name: String,
    action: String,
    actor: String,
    at: DateTime<Utc>,
    outcome: Option<String>,
    fence: Option<i64>,
}

/// What an operator action's own statement writes of it in
/// `leasehold_action`: the action's name, who took it, and the words of
/// each answer it may give. The statement inserts the row with the words of
/// the answer it gives, in the same statement as its effect, so the two
/// commit together: an action that took effect always has its record, one
/// that did not leaves none (docs/design.md §7).
///
/// The words are made in Rust, in `src/operator.rs`, and nowhere else:
/// each is a template whose `%s` slots the statement fills with what it did
/// (counts, holders, fences) through PostgreSQL's `format`, which reads
/// `%%` as `%` — what `operator::fill` does for an answer's `Display`.
/// Each statement's comment lists which word is which answer's.
#[derive(Debug)]
pub(crate) struct Record<'a> {
    /// The action's `OperatorAction` name.
    pub(crate) action: &'static str,
    /// Who, checked by the actor rule where it entered (`Operator::new`).
    pub(crate) actor: &'a str,
    /// The words of each answer, in the order the statement reads them.
    pub(crate) words: Vec<String>,
    /// The schema version the operator acts only on
    /// (`Operator::checking_schema`), or `None`: the statement's
    /// `leasehold_schema_is(…)`, beside its record, fails with SQLSTATE
    /// `LH002` on another and writes nothing (schema 16).
    pub(crate) schema: Option<i32>,
}

/// A record's parameters: the action, the actor, the words, the schema
/// version asked for ([`Record::binds`]).
pub(crate) type RecordBinds<'r> = (Option<&'r str>, Option<&'r str>, Option<&'r [String]>, Option<i32>);

impl Record<'_> {
    /// The four parameters a statement takes for its record (the action,
    /// the actor, the words, the schema version asked for): NULLs when
    /// there is no record to write, and the statement's `WHERE <action> IS
    /// NOT NULL` writes none — the [`Controls`](crate::store::Controls)'
    /// and [`Keys`](crate::store::Keys)' own calls record nothing and check
    /// no version.
    pub(crate) fn binds<'r>(record: Option<&'r Record<'_>>) -> RecordBinds<'r> {
        match record {
            Some(r) => (Some(r.action), Some(r.actor), Some(&r.words), r.schema),
            None => (None, None, None, None),
        }
    }
}

impl Records<'_> {
    /// Records `actor`'s `action` on each of `targets` with its `outcome`,
    /// in one statement of its own: for an action whose own statement,
    /// which would have recorded it, did not commit or was never sent
    /// (`error: …`), and for a forget's answer read after its statement.
    /// Best effort: the caller logs a failure. The targets and the actor
    /// were checked where they entered.
    /// With `schema`, written only on that schema version, as the action's
    /// own statement (`Record::schema`).
    pub(crate) async fn record_apart(
        self,
        targets: &[Target],
        action: &str,
        actor: &str,
        outcome: &str,
        schema: Option<i32>,
    ) -> Result<()> {
        let scopes: Vec<&str> = targets.iter().map(Target::scope).collect();
        let names: Vec<&str> = targets.iter().map(Target::name).collect();
        // The column's limit is the history's error limit.
        let outcome = super::storable_text(outcome.to_owned());
        // $1 scopes, $2 names, $3 action, $4 actor, $5 outcome, $6 the
        // schema version asked for. Rows are inserted in the targets'
        // order, so their ids rise in it.
        const RECORD_APART: &str = "
            INSERT INTO leasehold_action (scope, name, action, actor, outcome)
            SELECT scope, name, $3, $4, $5 FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(scope, name, n)
             WHERE leasehold_schema_is($6::int)
             ORDER BY n";
        connection::run!(&self.store.conns, |conn| sqlx::query(RECORD_APART)
            .bind(&scopes)
            .bind(&names)
            .bind(action)
            .bind(actor)
            .bind(&outcome)
            .bind(schema)
            .execute(conn))?;
        Ok(())
    }

    /// The operators' actions on `key` and on its job, newest first, at most
    /// `limit` (1 to 1,000). Cancel-safe: one statement.
    ///
    /// ```no_run
    /// # async fn demo(store: leasehold::store::LeaseStore) -> leasehold::Result<()> {
    /// for action in store.records().actions("nightly-reconcile", 20).await? {
    ///     println!("{} {} {} by {}: {}", action.at, action.action, action.target, action.actor,
    ///              action.outcome.as_deref().unwrap_or("(outcome not recorded)"));
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn actions(self, key: impl IntoKey, limit: usize) -> Result<Vec<ActionRecord>> {
        let key = key.into_key()?;
        if limit == 0 || limit > MAX_ACTIONS {
            return Err(Error::invalid(
                "actions limit",
                limit,
                format!("ask for 1 to {MAX_ACTIONS} actions"),
            ));
        }
        // $1 key, $2 limit. The job is the row's, as a job pause reads it.
        const ACTIONS: &str = "
            SELECT scope, name, action, actor, at, outcome, fence FROM leasehold_action
             WHERE (scope = 'key' AND name = $1)
                /* guard:actions.job_scope */ OR (scope = 'job' AND name = (SELECT job_name FROM leasehold_lease WHERE key = $1))
             ORDER BY id DESC LIMIT $2";
        let rows: Vec<ActionRow> = connection::run!(&self.store.conns, |conn| sqlx::query_as(ACTIONS)
            .bind(key.as_str())
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(conn))?;
        Ok(rows.into_iter().map(ActionRow::into_record).collect())
    }

    /// The operators' actions on the job named `job` and on each key it
    /// has now, newest first, at most `limit` (1 to 1,000): what a job's
    /// page shows of its history. Cancel-safe: one statement.
    ///
    /// ```no_run
    /// # async fn demo(store: leasehold::store::LeaseStore) -> leasehold::Result<()> {
    /// for action in store.records().job_actions("billing", 20).await? {
    ///     println!("{} {} {} by {}", action.at, action.action, action.target, action.actor);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn job_actions(self, job: &str, limit: usize) -> Result<Vec<ActionRecord>> {
        validate::job_name(job)?;
        if limit == 0 || limit > MAX_ACTIONS {
            return Err(Error::invalid(
                "actions limit",
                limit,
                format!("ask for 1 to {MAX_ACTIONS} actions"),
            ));
        }
        // $1 job, $2 limit. Its keys are the rows that name it now, as a
        // job pause reads them; another job's keys stay out.
        const JOB_ACTIONS: &str = "
            SELECT scope, name, action, actor, at, outcome, fence FROM leasehold_action
             WHERE (scope = 'job' AND /* guard:job_actions.job_name */ name = $1)
                /* guard:job_actions.key_scope */ OR (scope = 'key' AND name IN (SELECT key FROM leasehold_lease /* guard:job_actions.key_job */ WHERE job_name = $1))
             ORDER BY id DESC LIMIT $2";
        let rows: Vec<ActionRow> = connection::run!(&self.store.conns, |conn| sqlx::query_as(JOB_ACTIONS)
            .bind(job)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(conn))?;
        Ok(rows.into_iter().map(ActionRow::into_record).collect())
    }
}

impl ActionRow {
    fn into_record(self) -> ActionRecord {
        ActionRecord {
            target: Target::from_row(&self.scope, self.name),
            action: self.action,
            actor: self.actor,
            at: self.at,
            outcome: self.outcome,
            fence: self.fence,
        }
    }
}
