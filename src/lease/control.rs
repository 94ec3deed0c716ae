//! Operators' controls on the schedule, fleet-wide: pause, resume, trigger.
//!
//! A pause is a row of `leasehold_pause`, so it is durable and every replica
//! obeys it: the claims check it on the row they take (invariant 8 in
//! `lease/mod.rs`), not a replica's memory. Resuming and triggering write
//! the schedule in the same statement that wakes the listeners.

use std::fmt;

use chrono::{DateTime, Utc};

use super::{LeaseStore, Record, WAKE_CHANNEL};
use crate::connection;
use crate::error::Result;
use crate::key::{IntoKey, Key};
use crate::validate;

/// What an operator action targets: one key, or every key of a job (by
/// [`FencedJob::name`](crate::FencedJob::name)). The one type for it in
/// the library, the CLI and the console: pauses, resumes and triggers take
/// either; a revoke or a forget takes a key, and is recorded under
/// `Target::Key`. A pause of a job covers keys registered after it too.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Target {
    /// One lease key.
    Key(Key),
    /// Every key whose job has this name.
    Job(String),
}

impl Target {
    /// One lease key, checked as [`Key::new`] checks it (a [`Key`] is
    /// not checked again).
    pub fn key(key: impl IntoKey) -> Result<Self> {
        Ok(Target::Key(key.into_key()?))
    }

    /// Every key of the job named `name`.
    pub fn job(name: impl Into<String>) -> Self {
        Target::Job(name.into())
    }

    /// `"key"` or `"job"`: the `scope` column.
    pub fn scope(&self) -> &'static str {
        match self {
            Target::Key(_) => "key",
            Target::Job(_) => "job",
        }
    }

    /// The key or the job name.
    pub fn name(&self) -> &str {
        match self {
            Target::Key(key) => key.as_str(),
            Target::Job(name) => name,
        }
    }

    /// Whether this pause covers the key `key` whose job is `job`: it names
    /// the key, or the job. The claims apply the same rule in SQL
    /// (invariant 8); this is for showing which pauses hold a key back.
    ///
    /// ```
    /// use leasehold::operator::Target;
    /// assert!(Target::job("billing").covers("billing:acme", Some("billing")));
    /// assert!(Target::key("billing:acme")?.covers("billing:acme", None));
    /// assert!(!Target::job("billing").covers("reindex", Some("reindex")));
    /// # Ok::<(), leasehold::Error>(())
    /// ```
    pub fn covers(&self, key: &str, job: Option<&str>) -> bool {
        match self {
            Target::Key(name) => name.as_str() == key,
            Target::Job(name) => job == Some(name.as_str()),
        }
    }

    /// The one check of a target where it enters (the public calls that
    /// take one): a job's name, by what a row can hold (a row stored
    /// before hidden characters were refused can still be paused and
    /// resumed). A key was checked when it became a [`Key`].
    pub(crate) fn check(&self) -> Result<()> {
        match self {
            Target::Key(_) => Ok(()),
            Target::Job(name) => validate::existing_job_name(name),
        }
    }

    /// The target a row names by its `scope` and `name` (a pause, an
    /// action): what a row holds passed the rule when it was written.
    pub(super) fn from_row(scope: &str, name: String) -> Self {
        match scope {
            "job" => Target::Job(name),
            _ => Target::Key(Key::checked(name)),
        }
    }
}

impl From<Key> for Target {
    fn from(key: Key) -> Self {
        Target::Key(key)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}", self.scope(), self.name())
    }
}

/// A pause in force, as the server sees it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Pause {
    /// What is paused.
    pub target: Target,
    /// Whether runs in progress are asked to stop (at their next renewal,
    /// reason [`CancelReason::Paused`](crate::CancelReason::Paused)).
    pub cancel: bool,
    /// Who paused it (free text: the CLI writes `user@host`, a runtime its
    /// holder id).
    pub paused_by: String,
    /// Server time of the first pause.
    pub paused_at: DateTime<Utc>,
    /// Keys with a lease row that the pause covers, when read.
    pub keys: u64,
    /// Of those, how many had a live lease (a run in progress), when read.
    pub running: u64,
    /// In the answer of [`Controls::pause`](crate::store::Controls::pause):
    /// `Some(cancel)` when the target was paused already as the statement
    /// found it (`cancel`: whether that earlier pause cancelled runs), so
    /// this pause kept its author and time; `None` when it is new. Always
    /// `None` in [`Controls::pauses`](crate::store::Controls::pauses).
    pub already_paused: Option<bool>,
}

/// What [`Controls::resume`](crate::store::Controls::resume) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Resumed {
    /// The pause was lifted. `woken` keys were overdue and are claimable
    /// now (their catch-up policy decides what runs); the others run at
    /// their next slot.
    Yes {
        /// Overdue keys made claimable now.
        woken: u64,
    },
    /// There was no such pause.
    NotPaused,
}

/// What [`Controls::trigger`](crate::store::Controls::trigger) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Triggered {
    /// The key is due now; the first replica that claims it runs it.
    Due,
    /// The key is due now but paused: it runs once resumed.
    Paused,
    /// No lease row for this key: no runtime registered it (a runtime that
    /// does creates the row).
    NotFound,
}

#[derive(sqlx::FromRow)]
struct PauseRow {
    scope: String,
    name: String,
    cancel: bool,
    paused_by: String,
    paused_at: DateTime<Utc>,
    keys: i64,
    running: i64,
    already_paused: Option<bool>,
}

impl From<PauseRow> for Pause {
    fn from(row: PauseRow) -> Self {
        Pause {
            target: Target::from_row(&row.scope, row.name),
            cancel: row.cancel,
            paused_by: row.paused_by,
            paused_at: row.paused_at,
            keys: u64::try_from(row.keys).unwrap_or(0),
            running: u64::try_from(row.running).unwrap_or(0),
            already_paused: row.already_paused,
        }
    }
}

/// Operators' controls on the schedule and on leases, fleet-wide: pause,
/// resume, trigger, revoke and forget. Got from [`LeaseStore::controls`];
/// each method is one statement and cancel-safe.
///
/// These record nothing: [`Operator`](crate::operator::Operator) runs the
/// same statements with the action's record written in each (the CLI and
/// the console act through it), so the record commits with the effect.
#[derive(Debug, Clone, Copy)]
pub struct Controls<'s> {
    pub(super) store: &'s LeaseStore,
}

impl Controls<'_> {
    /// Pauses `target` for the whole fleet until [`Controls::resume`](crate::store::Controls::resume):
    /// no replica claims a paused key, not even for a trigger. A run in
    /// progress finishes, unless `cancel`: then its next renewal reports it
    /// and the runtime cancels it (reason *paused*), gives it its grace
    /// period and releases it. Slots that pass while paused are missed
    /// slots: the job's catch-up policy decides what runs on resume.
    ///
    /// Pausing what is paused already keeps the first pause (its time and
    /// author) and adds `cancel` if asked. `by` says who, for `status`.
    /// Cancel-safe: one statement.
    ///
    /// ```no_run
    /// # async fn demo(store: leasehold::store::LeaseStore) -> leasehold::Result<()> {
    /// use leasehold::operator::Target;
    /// let pause = store.controls().pause(&Target::job("billing"), false, "alice@laptop").await?;
    /// println!("{} paused: {} keys, {} running (they finish)", pause.target, pause.keys, pause.running);
    /// # Ok(()) }
    /// ```
    pub async fn pause(self, target: &Target, cancel: bool, by: &str) -> Result<Pause> {
        target.check()?;
        validate::actor("paused by", by)?;
        self.pause_recorded(target, cancel, by, None).await
    }

    /// [`pause`](Self::pause) of a target and by a name checked where they
    /// entered, writing `record` (if any) in the same statement.
    pub(crate) async fn pause_recorded(
        self,
        target: &Target,
        cancel: bool,
        by: &str,
        record: Option<&Record<'_>>,
    ) -> Result<Pause> {
        // $1 scope, $2 name, $3 cancel, $4 by; the record: $5 action, $6
        // actor, $7 words ([1] `paused: %s, %s running`, of keys [2] one,
        // [3] `%s`, and runs in progress), $8 the schema version asked for (`leasehold_schema_is`, NULL: none). The pause takes effect when
        // this commits: every later claim checks it after its row lock.
        // `before` reads the statement's snapshot, taken before its insert:
        // the pause that was already there, if any, for the answer (a pause
        // committed concurrently, after the snapshot, reads as none).
        // - `recorded`: the action's row, in the statement that pauses, so
        //   the two commit together; its words are the answer's (`said`,
        //   the row this returns).
        const PAUSE: &str = concat!(
            "
            WITH before AS (
                SELECT b.cancel FROM leasehold_pause AS b WHERE b.scope = $1 AND b.name = $2
            ), p AS (
                INSERT INTO leasehold_pause AS p (scope, name, cancel, paused_by)
                VALUES ($1, $2, $3, $4)
                ON CONFLICT (scope, name) DO UPDATE SET cancel = /* guard:pause.cancel_kept */ p.cancel OR EXCLUDED.cancel
                RETURNING p.*
            ), said AS (
                SELECT p.scope, p.name, p.cancel, p.paused_by, p.paused_at, c.keys, c.running,
                       (SELECT b.cancel FROM before AS b) AS already_paused
                  FROM p, LATERAL (
                      SELECT count(*) AS keys, count(*) FILTER (WHERE l.expires_at > clock_timestamp()) AS running
                        FROM leasehold_lease AS l
                       WHERE ",
            pause_covers!(pause = "p", key = "l.key", jobs = "l.job_name"),
            ") AS c
            ), recorded AS (
                INSERT INTO leasehold_action (scope, name, action, actor, outcome)
                SELECT s.scope, s.name, $5, $6,
                       format(($7::text[])[1],
                              CASE WHEN s.keys = 1 THEN format(($7::text[])[2]) ELSE format(($7::text[])[3], s.keys) END,
                              s.running)
                  FROM said AS s
                 WHERE /* guard:pause.recorded */ $5::text IS NOT NULL AND leasehold_schema_is($8::int)
            )
            SELECT * FROM said"
        );
        let (action, actor, words, schema) = Record::binds(record);
        let row: PauseRow = connection::run!(&self.store.conns, |conn| sqlx::query_as(PAUSE)
            .bind(target.scope())
            .bind(target.name())
            .bind(cancel)
            .bind(by)
            .bind(action)
            .bind(actor)
            .bind(words)
            .bind(schema)
            .fetch_one(conn))?;
        Ok(row.into())
    }

    /// Lifts the pause of `target`. Keys it covered that are overdue and
    /// free become claimable at once (listeners are woken; polling replicas
    /// see them at their next poll); a key still running (paused without
    /// cancel) gets its next due time from that run's release. A key also
    /// paused another way (its own name and its job) stays paused until
    /// both are lifted. Cancel-safe.
    pub async fn resume(self, target: &Target) -> Result<Resumed> {
        target.check()?;
        self.resume_recorded(target, None).await
    }

    /// [`resume`](Self::resume) of a target checked where it entered,
    /// writing `record` (if any) in the same statement.
    pub(crate) async fn resume_recorded(self, target: &Target, record: Option<&Record<'_>>) -> Result<Resumed> {
        // $1 scope, $2 name, $3 the wake-up channel; the record: $4 action,
        // $5 actor, $6 words ([1] not paused, [2] `resumed: %s woken`, of
        // overdue keys [3] one, [4] `%s`), $7 the schema version asked for (`leasehold_schema_is`, NULL: none).
        // - `woken`: an overdue key's due time moves to now, so pollers'
        //   windows (`due_since`) see it; slot_at keeps the slot it owes, so
        //   catch-up still knows which slots were missed.
        // - Only a free key: a run in progress (paused without cancel) has
        //   consumed its due time, and its release writes the next one. A
        //   due time moved past the run's claim would read, to that
        //   release, as a trigger during the run: one run too many.
        // - `recorded`: the action's row, in the statement that resumes, so
        //   the two commit together; its words are the answer's (`said`).
        const RESUME: &str = concat!(
            "
            WITH gone AS (
                DELETE FROM leasehold_pause WHERE scope = $1 AND name = $2 RETURNING scope, name
            ), woken AS (
                UPDATE leasehold_lease AS l
                   SET slot_at = COALESCE(l.slot_at, l.next_due_at),
                       next_due_at = clock_timestamp()
                  FROM gone
                 WHERE ",
            /* guard:resume.target */ pause_covers!(pause = "gone", key = "l.key", jobs = "l.job_name"),
            "
                   AND /* guard:resume.due_only */ COALESCE(l.next_due_at, '-infinity') <= clock_timestamp()
                   AND /* guard:resume.not_running */ l.expires_at <= clock_timestamp()
                RETURNING l.key
            ), said AS (
                SELECT (SELECT count(*) FROM gone) AS resumed,
                       (SELECT count(*) FROM (SELECT pg_notify($3, w.key) FROM woken AS w) AS n) AS woken
            ), recorded AS (
                INSERT INTO leasehold_action (scope, name, action, actor, outcome)
                SELECT $1, $2, $4, $5,
                       CASE WHEN s.resumed = 0 THEN format(($6::text[])[1])
                            ELSE format(($6::text[])[2], CASE WHEN s.woken = 1 THEN format(($6::text[])[3])
                                                              ELSE format(($6::text[])[4], s.woken) END) END
                  FROM said AS s
                 WHERE /* guard:resume.recorded */ $4::text IS NOT NULL AND leasehold_schema_is($7::int)
            )
            SELECT resumed, woken FROM said"
        );
        let (action, actor, words, schema) = Record::binds(record);
        let (resumed, woken): (i64, i64) = connection::run!(&self.store.conns, |conn| sqlx::query_as(RESUME)
            .bind(target.scope())
            .bind(target.name())
            .bind(WAKE_CHANNEL)
            .bind(action)
            .bind(actor)
            .bind(words)
            .bind(schema)
            .fetch_one(conn))?;
        Ok(if resumed == 0 {
            Resumed::NotPaused
        } else {
            Resumed::Yes {
                woken: u64::try_from(woken).unwrap_or(0),
            }
        })
    }

    /// Every pause in force, keys first, then jobs, by name. Cancel-safe.
    pub async fn pauses(self) -> Result<Vec<Pause>> {
        const PAUSES: &str = concat!(
            "
            SELECT p.scope, p.name, p.cancel, p.paused_by, p.paused_at, c.keys, c.running,
                   NULL::bool AS already_paused
              FROM leasehold_pause AS p, LATERAL (
                  SELECT count(*) AS keys, count(*) FILTER (WHERE l.expires_at > clock_timestamp()) AS running
                    FROM leasehold_lease AS l
                   WHERE ",
            pause_covers!(pause = "p", key = "l.key", jobs = "l.job_name"),
            ") AS c
             ORDER BY p.scope DESC, p.name"
        );
        let rows: Vec<PauseRow> = connection::run!(&self.store.conns, |conn| sqlx::query_as(PAUSES).fetch_all(conn))?;
        Ok(rows.into_iter().map(Pause::from).collect())
    }

    /// Whether `key` is paused, by its own name or by its row's job.
    pub(crate) async fn pause_of_key(self, key: &str) -> Result<bool> {
        const PAUSED: &str = concat!(
            "
            SELECT ",
            paused!(key = "$1", jobs = "SELECT job_name FROM leasehold_lease WHERE key = $1")
        );
        connection::run!(&self.store.conns, |conn| sqlx::query_scalar(PAUSED)
            .bind(key)
            .fetch_one(conn))
    }

    /// Makes `key` due now, for the whole fleet: the first replica that
    /// claims it runs it, once, under its lease. A trigger that arrives
    /// while the key runs leads to one more run right after that run
    /// (several triggers during one run make one run): the release never
    /// overwrites a trigger that came after its claim. The slot the key
    /// owes (if any) is kept, so a trigger never erases a missed slot, and
    /// a scheduled key goes on with its schedule after the triggered run.
    /// Cancel-safe.
    ///
    /// ```no_run
    /// # async fn demo(store: leasehold::store::LeaseStore) -> leasehold::Result<()> {
    /// use leasehold::operator::Triggered;
    /// match store.controls().trigger("nightly-reconcile").await? {
    ///     Triggered::Due => println!("it runs now"),
    ///     Triggered::Paused => println!("due, but paused: it runs once resumed"),
    ///     _ => println!("no replica registered that key"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn trigger(self, key: impl IntoKey) -> Result<Triggered> {
        self.trigger_recorded(&key.into_key()?, None).await
    }

    /// [`trigger`](Self::trigger) of a key checked where it entered,
    /// writing `record` (if any) in the same statement.
    pub(crate) async fn trigger_recorded(self, key: &Key, record: Option<&Record<'_>>) -> Result<Triggered> {
        // $1 key, $2 the wake-up channel; the record: $3 action, $4 actor,
        // $5 words ([1] due, [2] due but paused, [3] not found), $6 the
        // schema version asked for (`leasehold_schema_is`). `recorded`:
        // the action's row, in the statement that makes the key due, so
        // the two commit together; its words are the answer's (`said`).
        // The notify rides in the same
        // transaction, so listeners are woken exactly when the new due time
        // is visible to their claims. The due time, read from the clock
        // after the row lock, is later than the `acquired_at` of a run in
        // progress: that run's release sees the trigger and leaves the key
        // due (`FINISH_MANY`). (If the server clock stepped back by more
        // than the run's age, that release would take the trigger for the
        // slot the run consumed.)
        const TRIGGER: &str = concat!(
            "
            WITH due AS (
                UPDATE leasehold_lease
                   SET slot_at = COALESCE(slot_at, next_due_at), next_due_at = clock_timestamp()
                 WHERE key = $1
                RETURNING key, job_name
            ), said AS (
                SELECT (SELECT count(*) FROM (SELECT pg_notify($2, d.key) FROM due AS d) AS n) AS found,
                       ",
            paused!(key = "$1", jobs = "SELECT job_name FROM due"),
            " AS paused
            ), recorded AS (
                INSERT INTO leasehold_action (scope, name, action, actor, outcome)
                SELECT 'key', $1, $3, $4,
                       format(($5::text[])[CASE WHEN s.found = 0 THEN 3 WHEN s.paused THEN 2 ELSE 1 END])
                  FROM said AS s
                 WHERE /* guard:trigger.recorded */ $3::text IS NOT NULL AND leasehold_schema_is($6::int)
            )
            SELECT found, paused FROM said"
        );
        let (action, actor, words, schema) = Record::binds(record);
        let (found, paused): (i64, bool) = connection::run!(&self.store.conns, |conn| sqlx::query_as(TRIGGER)
            .bind(key.as_str())
            .bind(WAKE_CHANNEL)
            .bind(action)
            .bind(actor)
            .bind(words)
            .bind(schema)
            .fetch_one(conn))?;
        Ok(match (found, paused) {
            (0, _) => Triggered::NotFound,
            (_, true) => Triggered::Paused,
            _ => Triggered::Due,
        })
    }
}
