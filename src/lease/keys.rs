//! The keys of job kinds (`leasehold_key`, `leasehold_kind`): stored once
//! with their arguments and schedule, run by every replica that registers
//! their kind (docs/design.md §10).
//!
//! Invariants, and the clause of each statement that keeps it:
//!
//! - *A replica never misses a change*: every statement that adds, updates
//!   or removes a key moves its kind's `generation` in the same statement,
//!   and a replica reloads a kind whose generation differs from the one it
//!   loaded at (a change after the reload's read moves it again).
//! - *An update never changes a key of another kind*: update and removal
//!   name the kind and match it (`kind = $2`), so a typo cannot rewrite or
//!   delete another kind's key.
//! - *A report is about the version it read*: a replica's "these arguments
//!   do not deserialize" is written only on the version it read
//!   (`version = $2`); an update clears it.
//! - *Key counts stay true*: `leasehold_kind.keys` moves by exactly the
//!   rows inserted or deleted (the `RETURNING` of the same statement).
//! - *A removed key added again starts a new life* (schema v10): the
//!   removal records the key's life in `leasehold_key_life` in the
//!   statement that deletes it; the add starts the key's version after the
//!   last one it had (a key name's version never goes backwards), and
//!   moves its lease row, if it has one, to the new schedule's first slot
//!   after the add, so no slot owed by the old life, retry or trigger of it
//!   runs in the new one. A release of a run of the old life leaves that
//!   due time alone (`finish_many`'s `earlier_life` clause).

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{LeaseStore, Record};
use crate::connection;
use crate::error::{Error, Result};
use crate::key::{IntoKey, Key};
use crate::schedule::{CatchUp, Schedule, first_due};
use crate::validate;

/// The channel a change of a kind's keys is announced on (the kind's name
/// as payload): a listening replica syncs at once instead of at its next
/// poll.
pub(crate) const KIND_CHANNEL: &str = "leasehold_kinds";

/// Largest JSON text of a key's arguments, in bytes. Arguments are the
/// data a run needs to find its work (a tenant id, a region, options), read
/// at every run: large payloads belong in the service's own tables.
pub const MAX_ARGS_BYTES: usize = 64 * 1024;

/// A key of a job kind, to add or update: its kind, its lease key, its
/// arguments (the kind's `Args`, as JSON), its schedule and catch-up, and
/// optionally a time limit per run of its own (else its kind's).
///
/// ```
/// use std::time::Duration;
/// use leasehold::{CatchUp, NewKey, Schedule};
///
/// #[derive(serde::Serialize)]
/// struct Tenant { id: u64, plan: String }
///
/// let key = NewKey::new("invoice", "invoice:acme", &Tenant { id: 7, plan: "pro".into() },
///     Schedule::every(Duration::from_secs(3600)))?
///     .catch_up(CatchUp::Skip);
/// assert_eq!(key.args_json(), r#"{"id":7,"plan":"pro"}"#);
/// # Ok::<(), leasehold::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct NewKey {
    kind: String,
    key: Key,
    args: String,
    schedule: Schedule,
    catch_up: CatchUp,
    timeout: Option<Duration>,
}

impl NewKey {
    /// A key of `kind` named `key`, run with `args` on `schedule`
    /// (catch-up [`CatchUp::Once`] unless set). Checks the names, the
    /// schedule and the arguments' size
    /// ([`MAX_ARGS_BYTES`](crate::store::MAX_ARGS_BYTES) of JSON).
    pub fn new(kind: &str, key: &str, args: &impl Serialize, schedule: Schedule) -> Result<NewKey> {
        validate::job_name(kind)?;
        validate::key(key)?;
        schedule.validate()?;
        let args = serde_json::to_string(args)
            .map_err(|e| Error::invalid("job arguments", key, format!("they do not serialize as JSON: {e}")))?;
        refuse_nul_in_args(key, &args)?;
        if args.len() > MAX_ARGS_BYTES {
            return Err(Error::invalid(
                "job arguments",
                format!("{} bytes of JSON for key {key:?}", args.len()),
                format!(
                    "keep them under {MAX_ARGS_BYTES} bytes: store ids to find the data with, and keep the data \
                     in the service's own tables"
                ),
            ));
        }
        Ok(NewKey {
            kind: kind.to_owned(),
            key: Key::checked(key.to_owned()),
            args,
            schedule,
            catch_up: CatchUp::Once,
            timeout: None,
        })
    }

    /// What happens to slots missed while no replica ran the key.
    pub fn catch_up(mut self, policy: CatchUp) -> Self {
        self.catch_up = policy;
        self
    }

    /// The time limit of each run of this key, in place of its kind's
    /// ([`JobSettings::timeout`](crate::JobSettings::timeout)): a run still
    /// going at it is cancelled (reason `timeout`), dropped after the
    /// kind's grace, and the key runs again at its next slot. Without it,
    /// the kind's limit applies (none by default). `100ms` to `168h`,
    /// checked by [`Keys::add`](crate::store::Keys::add) and
    /// [`Keys::update`](crate::store::Keys::update).
    ///
    /// ```
    /// use std::time::Duration;
    /// use leasehold::{NewKey, Schedule};
    ///
    /// // The biggest tenant's report may take an hour; the kind's others, 15 minutes.
    /// let key = NewKey::new("report", "report:acme", &7, Schedule::every(Duration::from_secs(86_400)))?
    ///     .timeout(Duration::from_secs(3600));
    /// assert_eq!(key.get_timeout(), Some(Duration::from_secs(3600)));
    /// # Ok::<(), leasehold::Error>(())
    /// ```
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }

    /// The key's own time limit per run, if it has one.
    pub fn get_timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// The key's own time limit in seconds, checked, for its row.
    fn timeout_secs(&self) -> Result<Option<f64>> {
        self.timeout
            .map(|limit| {
                leasehold_rules::run_timeout("run timeout", limit)
                    .map(|limit| limit.as_secs_f64())
                    .map_err(|e| match validate::rule(e) {
                        Error::InvalidInput { what, value, problem } => Error::InvalidInput {
                            what,
                            value,
                            problem: format!("{problem} (key {:?})", self.key),
                        },
                        other => other,
                    })
            })
            .transpose()
    }

    /// The kind.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The lease key.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The arguments, as the JSON text stored.
    pub fn args_json(&self) -> &str {
        &self.args
    }
}

/// Refuses arguments whose JSON holds a NUL character (`\u0000`) in a
/// string or a field name: PostgreSQL's `jsonb` cannot store one, and would
/// refuse the whole registration naming neither the key nor the field. The
/// error names both. The JSON text is only searched for the escape; the
/// field is looked up (one more parse) when it is there.
fn refuse_nul_in_args(key: &str, json: &str) -> Result<()> {
    if !json.contains("\\u0000") {
        return Ok(());
    }
    let Ok(value) = serde_json::from_str::<serde_json::Value>(json) else {
        return Ok(());
    };
    match nul_path(&value, &mut String::from("$")) {
        Some(path) => Err(Error::invalid(
            "job arguments",
            format!("key {key:?}, field {path}"),
            "a NUL character (U+0000) cannot be stored in PostgreSQL's jsonb: remove it, or encode the \
             value (e.g. base64) before it goes into the arguments",
        )),
        None => Ok(()),
    }
}

/// The JSON path (`$.tenant.names[2]`) of the first string or field name
/// that holds a NUL, if any.
fn nul_path(value: &serde_json::Value, path: &mut String) -> Option<String> {
    use serde_json::Value;
    match value {
        Value::String(s) if s.contains('\0') => Some(path.clone()),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
            let len = path.len();
            path.push_str(&format!("[{i}]"));
            let found = nul_path(item, path);
            path.truncate(len);
            found
        }),
        Value::Object(fields) => fields.iter().find_map(|(name, item)| {
            let len = path.len();
            path.push_str(&format!(".{name:?}"));
            if name.contains('\0') {
                return Some(path.clone());
            }
            let found = nul_path(item, path);
            path.truncate(len);
            found
        }),
        _ => None,
    }
}

/// A stored key of a job kind, as [`Keys::get`](crate::store::Keys::get) reads it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StoredKey {
    /// The lease key.
    pub key: String,
    /// The kind whose replicas run it.
    pub kind: String,
    /// The arguments, as JSON text.
    pub args: String,
    /// The schedule's text form (`every 5m`, `cron 0 3 * * * in Europe/Paris`, `manual`).
    pub schedule: String,
    /// The catch-up policy's text form (`once`, `skip`, `all(N)`).
    pub catch_up: String,
    /// The key's own time limit per run (`None`: its kind's).
    pub timeout: Option<Duration>,
    /// 1 when added, one more at every update.
    pub version: i64,
    /// What a replica running the kind found wrong with this version (its
    /// arguments do not deserialize): such a key is not run.
    pub args_error: Option<String>,
    /// Server time of the last add or update.
    pub updated_at: DateTime<Utc>,
    /// Whether a live replica registers the key's kind: `false` means the
    /// key runs nowhere (a kind removed from the code, a typo, a replica
    /// not deployed).
    pub kind_live: bool,
}

impl StoredKey {
    /// Why the key does not run, in words, or `None` if nothing stops it:
    /// its arguments do not deserialize, or no live replica registers its
    /// kind.
    pub fn problem(&self) -> Option<String> {
        match (&self.args_error, self.kind_live) {
            (Some(error), _) => Some(format!("version {} is not run: {error}", self.version)),
            (None, false) => Some(format!(
                "no live replica registers the kind {:?}: the key runs nowhere",
                self.kind
            )),
            (None, true) => None,
        }
    }
}

/// One kind that keys or replicas named, as [`Keys::kinds`](crate::store::Keys::kinds) reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KindStatus {
    /// The kind's name.
    pub kind: String,
    /// Its stored keys.
    pub keys: i64,
    /// Whether a live replica registers it: `false` means its keys run
    /// nowhere (a kind removed from the code, a typo, a replica not deployed).
    pub live: bool,
    /// Keys whose arguments a replica found it cannot read.
    pub bad_args: i64,
}

/// A key of a kind, as a replica reloads it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct KeyRow {
    pub(crate) key: String,
    pub(crate) args: String,
    pub(crate) schedule: String,
    pub(crate) catch_up: String,
    /// The key's own time limit per run, in seconds (NULL: its kind's).
    pub(crate) timeout_secs: Option<f64>,
    pub(crate) version: i64,
}

/// The stored arguments a claimed run starts with, read by its claim's
/// own statement (`LeaseStore::claim_due`).
#[derive(Debug, Clone)]
pub(crate) struct StoredArgs {
    /// The key's kind when claimed: a key removed and added again under
    /// another kind is not run as the old one.
    pub(crate) kind: String,
    /// The arguments, as JSON text.
    pub(crate) json: String,
    /// Their version (1 when added, one more per update).
    pub(crate) version: i64,
}

/// The kinds' generations and the count of keys no live replica runs.
#[derive(Debug, Default)]
pub(crate) struct KindGenerations {
    pub(crate) generations: Vec<(String, i64)>,
    pub(crate) unknown_keys: i64,
}

#[derive(sqlx::FromRow)]
struct KeyStatusRow {
    key: String,
    kind: String,
    args: String,
    schedule: String,
    catch_up: String,
    timeout_secs: Option<f64>,
    version: i64,
    args_error: Option<String>,
    updated_at: DateTime<Utc>,
    kind_live: bool,
}

impl KeyStatusRow {
    fn into_stored(self) -> StoredKey {
        StoredKey {
            key: self.key,
            kind: self.kind,
            args: self.args,
            schedule: self.schedule,
            catch_up: self.catch_up,
            timeout: self
                .timeout_secs
                .and_then(|secs| Duration::try_from_secs_f64(secs).ok()),
            version: self.version,
            args_error: self.args_error,
            updated_at: self.updated_at,
            kind_live: self.kind_live,
        }
    }
}

/// The keys of job kinds and the kinds, in the database: add, update,
/// remove and read them. Every replica that registers a kind runs its keys;
/// a change reaches them at once (by notification) or at their next poll.
/// Got from [`LeaseStore::keys`]; each method is one statement, cancel-safe
/// as described on [`LeaseStore`].
///
/// These record nothing: [`Operator`](crate::operator::Operator)'s
/// `add_keys`, `update_key` and `remove_key` run the same statements with
/// the action's record written in each, so the record commits with the
/// change.
#[derive(Debug, Clone, Copy)]
pub struct Keys<'s> {
    pub(super) store: &'s LeaseStore,
}

/// Most keys one [`Keys::get_many`](crate::store::Keys::get_many) or
/// [`Keys::not_run`](crate::store::Keys::not_run) call reads.
const MAX_STORED_KEYS: usize = 1000;

impl Keys<'_> {
    /// Adds the keys that do not exist yet, in **one** statement whatever
    /// their number; returns how many it added. An existing key keeps its
    /// arguments and schedule (use [`update_key`](Self::update)). Every
    /// replica that registers a kind of the added keys syncs at once (by
    /// notification) or at its next poll, and runs them.
    ///
    /// A key must not repeat within `keys`. Cancel-safe as described on
    /// [`LeaseStore`]: the statement committed or did not.
    ///
    /// ```no_run
    /// # async fn demo(store: leasehold::store::LeaseStore) -> leasehold::Result<()> {
    /// use leasehold::{NewKey, Schedule};
    /// let schedule: Schedule = "every 1h".parse()?;
    /// let keys = (0..10_000)
    ///     .map(|t| NewKey::new("invoice", &format!("invoice:{t}"), &t, schedule.clone()))
    ///     .collect::<leasehold::Result<Vec<_>>>()?;
    /// let added = store.keys().add(&keys).await?;
    /// # Ok(()) }
    /// ```
    pub async fn add(self, keys: &[NewKey]) -> Result<u64> {
        self.add_recorded(keys, None).await
    }

    /// [`add`](Self::add), writing `record` (if any) in the same statement:
    /// one action row per key, in the order of `keys`, its words
    /// `record.words[i]` for `keys[i]` (a template with one slot: how many
    /// keys the call added).
    pub(crate) async fn add_recorded(self, keys: &[NewKey], record: Option<&Record<'_>>) -> Result<u64> {
        let mut sorted: Vec<&NewKey> = keys.iter().collect();
        // One order for every writer: concurrent batches of overlapping
        // keys wait for each other instead of deadlocking.
        sorted.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        let mut seen = HashSet::with_capacity(sorted.len());
        for key in &sorted {
            if !seen.insert(&*key.key) {
                return Err(Error::invalid(
                    "job key",
                    &*key.key,
                    "it appears twice in one add_keys call; add each key once",
                ));
            }
        }
        if sorted.is_empty() {
            return Ok(0);
        }
        let names: Vec<&str> = sorted.iter().map(|k| &*k.key).collect();
        let kinds: Vec<&str> = sorted.iter().map(|k| &*k.kind).collect();
        let args: Vec<&str> = sorted.iter().map(|k| &*k.args).collect();
        let schedules: Vec<String> = sorted.iter().map(|k| k.schedule.to_string()).collect();
        let catch_ups: Vec<String> = sorted.iter().map(|k| k.catch_up.to_string()).collect();
        let timeouts: Vec<Option<f64>> = sorted.iter().map(|k| k.timeout_secs()).collect::<Result<_>>()?;
        // A key added again starts on its new schedule: its first slot
        // after now, by the server clock (as a replica's registration and a
        // schedule change compute it).
        let server_now = self.store.server_now().await?;
        let firsts: Vec<DateTime<Utc>> = sorted.iter().map(|k| first_due(&k.schedule, server_now)).collect();
        // $1..$5 the keys' columns, $6 the kinds' channel, $7 each key's
        // first slot, $8 each key's own time limit (seconds, NULL: none);
        // the record: $9 action, $10 actor, $11 each key's words, $12 the
        // keys in the caller's order (the words' order), $13 the schema version asked for (`leasehold_schema_is`, NULL: none).
        // - ON CONFLICT DO NOTHING: an existing key keeps its arguments.
        // - `version`: one more than the last version of the key's earlier
        //   life, if it had one (`leasehold_key_life`): a key name's
        //   arguments version never goes backwards, so a downstream that
        //   deduplicates on it is never fooled by a key added again.
        // - `new_life`: the lease row of a key inserted now (left by an
        //   earlier life: removal keeps it, its fences and run counters
        //   go on) is due at the new schedule's first slot — not at a slot
        //   the old life owed, its retry, or a trigger of it — held or not:
        //   a run of the old life still being released leaves it so
        //   (`finish_many`'s `earlier_life` clause).
        // - The kinds' rows move by what was inserted, in kind order (one
        //   lock order for concurrent batches); the generation moves so
        //   every replica reloads the kind (invariant "never misses").
        // - `recorded`: each key's action row, in the statement that adds
        //   the keys, so they commit together; in the caller's order, so
        //   the rows' ids rise in it.
        const ADD_KEYS: &str = "
            WITH t AS (
                SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $7::timestamptz[],
                                     $8::float8[])
                    AS t(key, kind, args, schedule, catch_up, first_due, timeout_secs)
            ), inserted AS (
                INSERT INTO leasehold_key (key, kind, args, schedule, catch_up, timeout_secs, version)
                SELECT t.key, t.kind, t.args::jsonb, t.schedule, t.catch_up, t.timeout_secs,
                       /* guard:add_keys.version_goes_on */ coalesce((SELECT d.last_version FROM leasehold_key_life AS d WHERE d.key = t.key), 0) + 1
                  FROM t
                ON CONFLICT (key) DO NOTHING
                RETURNING key, kind
            ), new_life AS (
                UPDATE leasehold_lease AS l SET /* guard:add_keys.new_life */ next_due_at = t.first_due, slot_at = t.first_due
                  FROM inserted AS i JOIN t ON t.key = i.key
                 WHERE l.key = i.key
                RETURNING l.key
            ), counted AS (
                SELECT kind, count(*) AS n FROM inserted GROUP BY kind ORDER BY kind
            ), bumped AS (
                INSERT INTO leasehold_kind AS k (kind, generation, keys)
                SELECT kind, 1, n FROM counted
                ON CONFLICT (kind) DO UPDATE SET /* guard:add_keys.generation */ generation = k.generation + 1, /* guard:add_keys.count */ keys = k.keys + excluded.keys
                RETURNING kind
            ), notified AS (
                SELECT count(*) AS n FROM (SELECT pg_notify($6, kind) FROM bumped) AS s
            ), recorded AS (
                INSERT INTO leasehold_action (scope, name, action, actor, outcome)
                SELECT 'key', r.key, $9, $10, format(r.words, coalesce((SELECT sum(n) FROM counted), 0))
                  FROM unnest($12::text[], $11::text[]) WITH ORDINALITY AS r(key, words, n)
                 WHERE /* guard:add_keys.recorded */ $9::text IS NOT NULL AND leasehold_schema_is($13::int)
                 ORDER BY r.n
            )
            SELECT coalesce((SELECT sum(n) FROM counted), 0)::bigint + 0 * (SELECT n FROM notified)
                   + 0 * (SELECT count(*) FROM new_life)";
        let (action, actor, words, schema) = Record::binds(record);
        let in_order: Vec<&str> = keys.iter().map(|k| &*k.key).collect();
        let added: i64 = connection::run!(&self.store.conns, |conn| sqlx::query_scalar(ADD_KEYS)
            .bind(&names)
            .bind(&kinds)
            .bind(&args)
            .bind(&schedules)
            .bind(&catch_ups)
            .bind(KIND_CHANNEL)
            .bind(&firsts)
            .bind(&timeouts)
            .bind(action)
            .bind(actor)
            .bind(words)
            .bind(&in_order)
            .bind(schema)
            .fetch_one(conn))?;
        Ok(u64::try_from(added).unwrap_or_default())
    }

    /// Replaces the arguments, schedule, catch-up and time limit (its own,
    /// or none: its kind's) of `key.key()`, a key
    /// of `key.kind()`; returns its new version, or `None` if there is no
    /// such key of that kind. Takes effect at the key's next claim on
    /// whichever replica claims it; a run in progress keeps the arguments it
    /// started with ([`FenceGuard::args_version`](crate::FenceGuard::args_version)
    /// tells which). Cancel-safe as described on [`LeaseStore`].
    pub async fn update(self, key: &NewKey) -> Result<Option<i64>> {
        self.update_recorded(key, None).await
    }

    /// [`update`](Self::update), writing `record` (if any) in the same
    /// statement.
    pub(crate) async fn update_recorded(self, key: &NewKey, record: Option<&Record<'_>>) -> Result<Option<i64>> {
        let timeout = key.timeout_secs()?;
        // $1 key, $2 kind, $3 args, $4 schedule, $5 catch-up, $6 channel,
        // $7 time limit (seconds, NULL: the kind's); the record: $8
        // action, $9 actor, $10 words ([1] `updated to version %s…`, [2]
        // not found), $11 the schema version asked for (`leasehold_schema_is`, NULL: none).
        // - `kind = $2`: never rewrites a key of another kind.
        // - `args_error = NULL`: a report was about the old version.
        // - the generation moves: every replica reloads the kind.
        // - `recorded`: the action's row, in the statement that updates, so
        //   the two commit together; one row, found or not.
        const UPDATE_KEY: &str = "
            WITH updated AS (
                UPDATE leasehold_key
                   SET args = $3::jsonb, schedule = $4, catch_up = $5, timeout_secs = $7, version = version + 1,
                       /* guard:update_key.clear_error */ args_error = NULL, updated_at = clock_timestamp()
                 WHERE key = $1 /* guard:update_key.kind */ AND kind = $2
                RETURNING kind, version
            ), bumped AS (
                UPDATE leasehold_kind AS k SET /* guard:update_key.generation */ generation = k.generation + 1
                  FROM updated AS u WHERE k.kind = u.kind
                RETURNING k.kind
            ), notified AS (
                SELECT count(*) AS n FROM (SELECT pg_notify($6, kind) FROM bumped) AS s
            ), recorded AS (
                INSERT INTO leasehold_action (scope, name, action, actor, outcome)
                SELECT 'key', $1, $8, $9,
                       CASE WHEN u.version IS NULL THEN format(($10::text[])[2])
                            ELSE format(($10::text[])[1], u.version) END
                  FROM (VALUES (1)) AS one(n) LEFT JOIN updated AS u ON true
                 WHERE /* guard:update_key.recorded */ $8::text IS NOT NULL AND leasehold_schema_is($11::int)
            )
            SELECT u.version FROM updated AS u, notified";
        let (action, actor, words, schema) = Record::binds(record);
        connection::run!(&self.store.conns, |conn| sqlx::query_scalar(UPDATE_KEY)
            .bind(key.key.as_str())
            .bind(&key.kind)
            .bind(&key.args)
            .bind(key.schedule.to_string())
            .bind(key.catch_up.to_string())
            .bind(KIND_CHANNEL)
            .bind(timeout)
            .bind(action)
            .bind(actor)
            .bind(words)
            .bind(schema)
            .fetch_optional(conn))
    }

    /// Removes `key`, a key of `kind`, fleet-wide; returns whether it
    /// existed. Every replica running the kind stops it at once (by
    /// notification) or within one poll interval: a run in progress is
    /// cancelled (reason *removed*), given its grace, and released. Its
    /// lease row and history stay until [`forget`](crate::store::Controls::forget).
    /// Cancel-safe as described on [`LeaseStore`].
    pub async fn remove(self, kind: &str, key: impl IntoKey) -> Result<bool> {
        validate::job_name(kind)?;
        self.remove_recorded(kind, &key.into_key()?, None).await
    }

    /// [`remove`](Self::remove) of a kind and key checked where they
    /// entered, writing `record` (if any) in the same statement.
    pub(crate) async fn remove_recorded(self, kind: &str, key: &Key, record: Option<&Record<'_>>) -> Result<bool> {
        // $1 key, $2 kind, $3 channel; the record: $4 action, $5 actor, $6
        // words ([1] removed, [2] not found), $7 the schema version asked for (`leasehold_schema_is`, NULL: none). `kind = $2`: never deletes a key of
        // another kind; the kind's count moves by the row deleted.
        // `recorded`: the action's row, in the statement that removes, so
        // the two commit together; one row, found or not.
        // `life`: the key's life ended, on the record in the same statement
        // (schema v10): a later add of the key goes on from its last
        // version, and status shows its lease row as removed. GREATEST: a
        // version-9 replica's add starts at 1 again; the record keeps the
        // highest version the name ever had.
        const REMOVE_KEY: &str = "
            WITH gone AS (
                DELETE FROM leasehold_key WHERE key = $1 /* guard:remove_key.kind */ AND kind = $2 RETURNING key, kind, version
            ), life AS (
                INSERT INTO leasehold_key_life AS d (key, lives, last_version, removed_at)
                SELECT g.key, 1, g.version, clock_timestamp() FROM gone AS g
                ON CONFLICT (key) DO UPDATE
                   SET lives = d.lives + 1, last_version = GREATEST(d.last_version, excluded.last_version),
                       removed_at = excluded.removed_at
                RETURNING d.key
            ), bumped AS (
                UPDATE leasehold_kind AS k SET /* guard:remove_key.generation */ generation = k.generation + 1, /* guard:remove_key.count */ keys = k.keys - 1
                  FROM gone AS g WHERE k.kind = g.kind
                RETURNING k.kind
            ), notified AS (
                SELECT count(*) AS n FROM (SELECT pg_notify($3, kind) FROM bumped) AS s
            ), recorded AS (
                INSERT INTO leasehold_action (scope, name, action, actor, outcome)
                SELECT 'key', $1, $4, $5, format(($6::text[])[CASE WHEN EXISTS (SELECT 1 FROM gone) THEN 1 ELSE 2 END])
                 WHERE /* guard:remove_key.recorded */ $4::text IS NOT NULL AND leasehold_schema_is($7::int)
            )
            SELECT g.kind FROM gone AS g, notified WHERE EXISTS (SELECT 1 FROM life)";
        let (action, actor, words, schema) = Record::binds(record);
        let gone: Option<String> = connection::run!(&self.store.conns, |conn| sqlx::query_scalar(REMOVE_KEY)
            .bind(key.as_str())
            .bind(kind)
            .bind(KIND_CHANNEL)
            .bind(action)
            .bind(actor)
            .bind(words)
            .bind(schema)
            .fetch_optional(conn))?;
        Ok(gone.is_some())
    }

    /// The stored key `key`, if it is a key of a job kind.
    /// Cancel-safe as described on [`LeaseStore`].
    pub async fn get(self, key: impl IntoKey) -> Result<Option<StoredKey>> {
        let key = key.into_key()?;
        Ok(self.stored(&[key.as_str()]).await?.pop())
    }

    /// Those of `keys` (at most 1,000) that are keys of job kinds, by key,
    /// each with whether a live replica registers its kind: what a page of
    /// the console's leases reads to say which do not run and why. One
    /// statement; cancel-safe as described on [`LeaseStore`].
    ///
    /// ```no_run
    /// # async fn demo(store: leasehold::store::LeaseStore) -> leasehold::Result<()> {
    /// for key in store.keys().get_many(&["invoice:acme", "invoice:globex"]).await? {
    ///     if let Some(problem) = key.problem() {
    ///         println!("{}: {problem}", key.key);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn get_many(self, keys: &[&str]) -> Result<Vec<StoredKey>> {
        if keys.len() > MAX_STORED_KEYS {
            return Err(Error::invalid(
                "stored keys asked for",
                keys.len(),
                format!("ask for at most {MAX_STORED_KEYS} keys at a time"),
            ));
        }
        for key in keys {
            validate::existing_key(key)?;
        }
        self.stored(keys).await
    }

    /// [`get_many`](Self::get_many) of keys checked where they entered.
    async fn stored(self, keys: &[&str]) -> Result<Vec<StoredKey>> {
        // A kind is live while the vouch of its latest replica lasts, as
        // `kinds` reads it; a kind with no row was never registered.
        const STORED_KEYS: &str = "
            SELECT k.key, k.kind, k.args::text AS args, k.schedule, k.catch_up, k.timeout_secs, k.version, k.args_error,
                   k.updated_at, coalesce(c.seen_until > clock_timestamp(), false) AS kind_live
              FROM leasehold_key AS k LEFT JOIN leasehold_kind AS c ON c.kind = k.kind
             WHERE k.key = ANY($1) ORDER BY k.key";
        let rows: Vec<KeyStatusRow> = connection::run!(&self.store.conns, |conn| sqlx::query_as(STORED_KEYS)
            .bind(keys)
            .fetch_all(conn))?;
        Ok(rows.into_iter().map(KeyStatusRow::into_stored).collect())
    }

    /// The stored keys that do not run, by key, at most `limit` (1 to
    /// 1,000): those whose arguments a replica found it cannot read, and
    /// those of a kind no live replica registers (such a key may have no
    /// lease row at all, so no list of leases shows it). Cancel-safe as
    /// described on [`LeaseStore`]: one statement.
    ///
    /// ```no_run
    /// # async fn demo(store: leasehold::store::LeaseStore) -> leasehold::Result<()> {
    /// for key in store.keys().not_run(100).await? {
    ///     println!("{} ({}): {}", key.key, key.kind, key.problem().unwrap_or_default());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn not_run(self, limit: usize) -> Result<Vec<StoredKey>> {
        if limit == 0 || limit > MAX_STORED_KEYS {
            return Err(Error::invalid(
                "keys_not_run limit",
                limit,
                format!("ask for 1 to {MAX_STORED_KEYS} keys"),
            ));
        }
        // $1 limit. Liveness as in `stored_keys`.
        const KEYS_NOT_RUN: &str = "
            SELECT * FROM (
                SELECT k.key, k.kind, k.args::text AS args, k.schedule, k.catch_up, k.timeout_secs, k.version,
                       k.args_error, k.updated_at, coalesce(c.seen_until > clock_timestamp(), false) AS kind_live
                  FROM leasehold_key AS k LEFT JOIN leasehold_kind AS c ON c.kind = k.kind
            ) AS s
             WHERE s.args_error IS NOT NULL OR NOT s.kind_live
             ORDER BY s.key LIMIT $1";
        let rows: Vec<KeyStatusRow> = connection::run!(&self.store.conns, |conn| sqlx::query_as(KEYS_NOT_RUN)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(conn))?;
        Ok(rows.into_iter().map(KeyStatusRow::into_stored).collect())
    }

    /// Every kind that keys or replicas named, by name: its keys, whether a
    /// live replica registers it, and its keys with unreadable arguments.
    /// Cancel-safe as described on [`LeaseStore`].
    pub async fn kinds(self) -> Result<Vec<KindStatus>> {
        // A kind is live while the vouch of its latest replica lasts.
        const KINDS: &str = "
            SELECT c.kind, c.keys, coalesce(c.seen_until > clock_timestamp(), false) AS live,
                   (SELECT count(*) FROM leasehold_key AS k
                     WHERE k.kind = c.kind AND k.args_error IS NOT NULL) AS bad_args
              FROM leasehold_kind AS c ORDER BY c.kind";
        let rows: Vec<(String, i64, bool, i64)> =
            connection::run!(&self.store.conns, |conn| sqlx::query_as(KINDS).fetch_all(conn))?;
        Ok(rows
            .into_iter()
            .map(|(kind, keys, live, bad_args)| KindStatus {
                kind,
                keys,
                live,
                bad_args,
            })
            .collect())
    }

    /// Every key of `kind`, as a replica reloads them.
    pub(crate) async fn of_kind(self, kind: &str) -> Result<Vec<KeyRow>> {
        const KEYS_OF_KIND: &str = "
            SELECT key, args::text AS args, schedule, catch_up, timeout_secs, version FROM leasehold_key WHERE kind = $1";
        connection::run!(&self.store.conns, |conn| sqlx::query_as(KEYS_OF_KIND)
            .bind(kind)
            .fetch_all(conn))
    }

    /// A stored key got a new schedule whose first slot after the change is
    /// `first`: its lease row is due then, if that is sooner than the due
    /// time it has, or if the row waits for a slot of the old schedule that
    /// is not due yet. Whether it moved.
    pub(crate) async fn reschedule(self, key: &str, first: DateTime<Utc>) -> Result<bool> {
        // Either arm moves the row:
        // - a row waiting for a scheduled slot not due yet (the slot its
        //   release or registration filed: `slot_at = next_due_at`, in the
        //   future) waits for an old-schedule slot the new schedule may not
        //   have, or one after the new schedule's first: moved there, later
        //   or sooner. Not a due row (a missed slot its catch-up policy
        //   runs, a trigger: `next_due_at <= now`), nor a retry's back-off
        //   (its `slot_at` is the slot still owed, before `next_due_at`).
        //   A run of the runtime holds a row it claimed due, so this arm
        //   leaves it alone; its release files the next due time from the
        //   new schedule (`supervise::next_due`);
        // - otherwise `next_due_at > $2`: only ever sooner. A later due
        //   time would postpone a slot the key owes or a trigger.
        const RESCHEDULE: &str = "
            UPDATE leasehold_lease SET next_due_at = $2, slot_at = $2
             WHERE key = $1
               AND ((/* guard:reschedule.not_due */ next_due_at > clock_timestamp()
                     /* guard:reschedule.not_retry */ AND slot_at = next_due_at)
                    /* guard:reschedule.due */ OR next_due_at IS NULL OR next_due_at > $2)";
        let done = connection::run!(&self.store.conns, |conn| sqlx::query(RESCHEDULE)
            .bind(key)
            .bind(first)
            .execute(conn))?;
        Ok(done.rows_affected() > 0)
    }

    /// Records that version `version` of `key` cannot be run (`problem`);
    /// a newer version is left alone. Whether it wrote.
    pub(crate) async fn report_args_error(self, key: &str, version: i64, problem: &str) -> Result<bool> {
        // `version = $2`: a report is about the version read (an update
        // meanwhile cleared the error and must stay clear).
        // The problem quotes what the job's deserializer read: it may hold a NUL.
        let problem = super::storable_text(problem.to_owned());
        const REPORT: &str = "
            UPDATE leasehold_key SET args_error = $3
             WHERE key = $1 /* guard:report_args.version */ AND version = $2 AND args_error IS DISTINCT FROM $3";
        let done = connection::run!(&self.store.conns, |conn| sqlx::query(REPORT)
            .bind(key)
            .bind(version)
            .bind(&problem)
            .execute(conn))?;
        Ok(done.rows_affected() > 0)
    }
}

#[cfg(feature = "test-util")]
impl LeaseStore {
    /// `report_args_error`, for the scenario
    /// test of its version clause: a report about an old version.
    pub async fn report_args_error_for_test(&self, key: &str, version: i64, problem: &str) -> Result<bool> {
        self.keys().report_args_error(key, version, problem).await
    }

    /// The count of stored keys of kinds no live replica runs, as a
    /// replica registering `kinds` reads it at a poll (for the scenario
    /// test of its own kinds' clause).
    pub async fn unknown_kind_keys_for_test(&self, kinds: &[&str]) -> Result<i64> {
        let now = self.server_now().await?;
        Ok(self
            .due_since(now, 1, kinds, std::time::Duration::from_secs(60))
            .await?
            .kinds
            .unknown_keys)
    }

    /// Every statement a replica's sync and a kind's run send, in turn, for
    /// the cancel-safety sweep (they are not public on their own).
    pub async fn kind_statements_for_test(&self, kind: &str, key: &str) -> Result<()> {
        self.due_since(self.server_now().await?, 1, &[kind], std::time::Duration::from_secs(60))
            .await?;
        let keys = self.keys();
        keys.of_kind(kind).await?;
        let later = self.server_now().await? + chrono::TimeDelta::hours(1);
        keys.reschedule(key, later).await?;
        keys.report_args_error(key, 1, "swept").await.map(drop)
    }
}
