//! Operators' actions, recorded in `leasehold_action` for each key's
//! history (who triggered, paused, resumed or released what, and when).
//!
//! The record is an audit trail, not a lock: nothing here decides whether a
//! run may start. `Operator` (in `src/operator.rs`) writes the row before
//! the action and its outcome after, so an action that took effect is never
//! missing from the trail (docs/design.md §7).

use chrono::{DateTime, Utc};

use super::{Records, Target};
use crate::connection;
use crate::error::{Error, Result};
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
    /// error…); `None` if the outcome was never recorded (the tool stopped
    /// between the action and its record).
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

impl Records<'_> {
    /// Records that `actor` asks for `action` on `target`, before it runs;
    /// returns the record's id for [`record_outcome`](Self::record_outcome).
    pub(crate) async fn record_action(self, target: &Target, action: &str, actor: &str) -> Result<i64> {
        let ids = self.record_actions(std::slice::from_ref(target), action, actor).await?;
        ids.first()
            .copied()
            .ok_or_else(|| Error::invalid("action record", action, "the record was not written"))
    }

    /// Records that `actor` asks for `action` on each of `targets`, in one
    /// statement whatever their number; returns the records' ids in the
    /// order of `targets`.
    pub(crate) async fn record_actions(self, targets: &[Target], action: &str, actor: &str) -> Result<Vec<i64>> {
        for target in targets {
            validate::existing_key(target.name())?;
        }
        validate::actor("actor", actor)?;
        let scopes: Vec<&str> = targets.iter().map(Target::scope).collect();
        let names: Vec<&str> = targets.iter().map(Target::name).collect();
        // $1 scopes, $2 names, $3 action, $4 actor. Rows are inserted in
        // the targets' order, so their ids (from one sequence) rise in it.
        const RECORD: &str = "
            INSERT INTO leasehold_action (scope, name, action, actor)
            SELECT scope, name, $3, $4 FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(scope, name, n)
             ORDER BY n
            RETURNING id";
        let mut ids: Vec<i64> = connection::run!(&self.store.conns, |conn| sqlx::query_scalar(RECORD)
            .bind(&scopes)
            .bind(&names)
            .bind(action)
            .bind(actor)
            .fetch_all(conn))?;
        ids.sort_unstable();
        Ok(ids)
    }

    /// Fills in what the action `id` did. Only a record without an outcome
    /// is written, so a late or repeated call never rewrites history.
    pub(crate) async fn record_outcome(self, id: i64, outcome: &str, fence: Option<i64>) -> Result<()> {
        self.record_outcomes(&[(id, outcome.to_owned(), fence)]).await
    }

    /// [`record_outcome`](Self::record_outcome) for each `(id, outcome,
    /// fence)`, in one statement whatever their number.
    pub(crate) async fn record_outcomes(self, outcomes: &[(i64, String, Option<i64>)]) -> Result<()> {
        let ids: Vec<i64> = outcomes.iter().map(|o| o.0).collect();
        // The column's limit is the history's error limit.
        let texts: Vec<String> = outcomes.iter().map(|o| super::storable_text(o.1.clone())).collect();
        let fences: Vec<Option<i64>> = outcomes.iter().map(|o| o.2).collect();
        // `outcome IS NULL`: a late or repeated call never rewrites history.
        const OUTCOME: &str = "
            UPDATE leasehold_action AS a SET outcome = t.outcome, fence = t.fence
              FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS t(id, outcome, fence)
             WHERE a.id = t.id AND a.outcome IS NULL";
        connection::run!(&self.store.conns, |conn| sqlx::query(OUTCOME)
            .bind(&ids)
            .bind(&texts)
            .bind(&fences)
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
    pub async fn actions(self, key: &str, limit: usize) -> Result<Vec<ActionRecord>> {
        validate::existing_key(key)?;
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
            .bind(key)
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
