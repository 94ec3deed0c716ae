//! The keys of job kinds on this replica: the kinds it registers, and the
//! sync that turns the stored keys of those kinds into registered keys
//! (docs/design.md §10).
//!
//! The scheduler syncs at every poll, and at once when a change is
//! announced on the kinds' channel (`listen.rs`): the poll's statement
//! (`LeaseStore::due_since`) vouches for this replica's kinds and reads
//! their generations; only a kind whose generation moved is reloaded, and
//! the difference applied —
//!
//! - a new key is registered (its lease row created, first due at its
//!   next slot), like `Runtime::add`;
//! - a removed key is unregistered, a run in progress cancelled, like
//!   `Runtime::remove`;
//! - a key with a new schedule gets a new job entry, noting when (server
//!   time); its lease row, if it waits for a slot not due yet, is due at
//!   the new schedule's first slot after that instant instead — sooner or
//!   later —, and a due slot or trigger only ever sooner
//!   (`Keys::reschedule`); a run in progress files, at its release,
//!   the new schedule's first slot after the change (`supervise::next_due`),
//!   so no slot of the new schedule is skipped and none of the old one is
//!   kept;
//!   new arguments need nothing here: each claim reads its key's
//!   arguments (`LeaseStore::claim_due`), and the run starts with them;
//! - a key whose arguments do not deserialize, or whose schedule does not
//!   parse, is not registered (unregistered if it was), logged at ERROR
//!   once per version, counted in `leasehold_keys_bad_args` and reported
//!   on its row for `leasehold status`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use tokio::time::Instant;

use super::state::{Body, JobEntry, Shared};
use super::unregister;
use crate::error::Result;
use crate::guard::FenceGuard;
use crate::job::{JobError, JobSettings};
use crate::kind::JobKind;
use crate::lease::{KeyRow, KindGenerations};
use crate::metrics;
use crate::schedule::{CatchUp, Schedule, first_due};
use crate::validate;

/// A kind's body, type-erased: deserializes the arguments, then runs.
type KindRunFn = Arc<dyn Fn(String, FenceGuard) -> BoxFuture<'static, Result<(), JobError>> + Send + Sync>;

/// Whether a JSON text deserializes as the kind's arguments.
type CheckFn = Arc<dyn Fn(&str) -> std::result::Result<(), String> + Send + Sync>;

/// One registered kind.
pub(crate) struct KindEntry {
    pub(crate) name: Arc<str>,
    pub(crate) settings: JobSettings,
    check: CheckFn,
    run: KindRunFn,
}

impl KindEntry {
    /// Erases a kind's type; reads its name and settings once.
    pub(crate) fn new<K: JobKind>(kind: K) -> Self {
        let kind = Arc::new(kind);
        let name: Arc<str> = Arc::from(kind.name());
        let settings = kind.settings();
        let check: CheckFn = Arc::new(|json: &str| {
            serde_json::from_str::<K::Args>(json)
                .map(drop)
                .map_err(|e| e.to_string())
        });
        let kind_name = name.clone();
        let run: KindRunFn = Arc::new(move |json, guard| {
            let kind = kind.clone();
            let kind_name = kind_name.clone();
            Box::pin(async move {
                // Checked when the key was registered; the key may have been
                // updated to arguments that no longer read since: not run.
                let args = serde_json::from_str::<K::Args>(&json).map_err(|e| -> JobError {
                    format!(
                        "the arguments of version {:?} of key {:?} do not deserialize as the Args of kind \
                         {kind_name:?}: {e}; update the key (leasehold update) — not run",
                        guard.args_version(),
                        guard.key()
                    )
                    .into()
                })?;
                kind.run(args, guard).await
            })
        });
        KindEntry {
            name,
            settings,
            check,
            run,
        }
    }

    /// Checks the kind's name and settings.
    pub(crate) fn check(&self) -> Result<()> {
        validate::job_name(&self.name)?;
        self.settings.validate(&self.name)
    }

    /// The job entry of one stored key of this kind. Its run starts with
    /// the arguments its claim read: an update reaches the next run
    /// wherever it is claimed, and a key removed meanwhile is not run.
    /// `changed_at`: when its schedule replaced the key's registered one.
    /// The key's own time limit, if it has one, replaces the kind's.
    fn entry(self: &Arc<Self>, key: &Arc<str>, own: Own, changed_at: Option<DateTime<Utc>>) -> JobEntry {
        let mut settings = self.settings.clone().schedule(own.schedule).catch_up(own.catch_up);
        if let Some(limit) = own.timeout {
            settings = settings.timeout(limit);
        }
        JobEntry {
            name: self.name.clone(),
            key: key.clone(),
            settings: Arc::new(settings),
            body: Arc::new(StoredKey {
                kind: self.clone(),
                key: key.clone(),
            }),
            changed_at,
        }
    }
}

/// The body of one stored key: its kind; the arguments come with each
/// run's claim.
struct StoredKey {
    kind: Arc<KindEntry>,
    key: Arc<str>,
}

impl Body for StoredKey {
    fn run_owned(self: Arc<Self>, guard: FenceGuard) -> BoxFuture<'static, Result<(), JobError>> {
        Box::pin(async move {
            // No arguments, or another kind's: the key was removed (and
            // perhaps added again as another kind) before this run's claim.
            let json = match guard.stored_args() {
                Some(args) if *args.kind == *self.kind.name => args.json.clone(),
                _ => {
                    tracing::info!(key = %self.key, kind = %self.kind.name, "key removed before its run started: not run");
                    return Ok(());
                }
            };
            (self.kind.run)(json, guard).await
        })
    }
}

/// A stored key's own settings, as its row has them (parsed).
struct Own {
    schedule: Schedule,
    catch_up: CatchUp,
    /// Its own time limit per run (`None`: the kind's).
    timeout: Option<Duration>,
}

/// What this replica registered of a stored key: its version, and its own
/// settings as the row had them.
#[derive(Debug, Clone, PartialEq)]
struct Known {
    version: i64,
    schedule: String,
    catch_up: String,
    timeout: Option<Duration>,
}

impl Known {
    fn of(row: &KeyRow, timeout: Option<Duration>) -> Known {
        Known {
            version: row.version,
            schedule: row.schedule.clone(),
            catch_up: row.catch_up.clone(),
            timeout,
        }
    }
}

/// What this replica registered of one kind's stored keys.
struct Loaded {
    kind: Arc<KindEntry>,
    /// The generation the keys were loaded at; `None`: never loaded.
    generation: Option<i64>,
    /// Registered keys: their version and own settings.
    keys: HashMap<Arc<str>, Known>,
    /// Keys not run for a bad version, and that version (reported once).
    bad: HashMap<Arc<str>, i64>,
}

/// The scheduler's view of the kinds it syncs.
pub(crate) struct FleetSync {
    kinds: Vec<Loaded>,
}

impl FleetSync {
    pub(crate) fn new(kinds: &[Arc<KindEntry>]) -> Self {
        FleetSync {
            kinds: kinds
                .iter()
                .map(|kind| Loaded {
                    kind: kind.clone(),
                    generation: None,
                    keys: HashMap::new(),
                    bad: HashMap::new(),
                })
                .collect(),
        }
    }

    /// The kinds this replica registers, for the poll to vouch for.
    pub(crate) fn names(&self) -> Vec<&str> {
        self.kinds.iter().map(|k| &*k.kind.name).collect()
    }

    /// Reloads the kinds whose generation moved, as the poll that vouched
    /// for them read it, and applies the difference. Each statement is the
    /// caller's to bound.
    pub(crate) async fn sync(&mut self, shared: &Arc<Shared>, read: KindGenerations) -> Result<()> {
        if self.kinds.is_empty() {
            return Ok(());
        }
        metrics::keys_unknown_kind(read.unknown_keys);
        let generations: HashMap<String, i64> = read.generations.into_iter().collect();
        for loaded in &mut self.kinds {
            let generation = generations.get(&*loaded.kind.name).copied().unwrap_or(0);
            if loaded.generation == Some(generation) {
                continue;
            }
            let rows = shared.store.keys().of_kind(&loaded.kind.name).await?;
            loaded.apply(shared, rows).await?;
            loaded.generation = Some(generation);
        }
        Ok(())
    }
}

/// How long a replica vouches for its kinds: three poll intervals (at
/// least a minute), so a replica that missed a poll or two still counts
/// as live, and one that is gone stops counting soon after.
pub(crate) fn vouch(poll_interval: Duration) -> Duration {
    (poll_interval * 3).max(Duration::from_secs(60))
}

impl Loaded {
    /// Applies one reload of the kind's keys.
    async fn apply(&mut self, shared: &Arc<Shared>, rows: Vec<KeyRow>) -> Result<()> {
        let mut stored: HashMap<&str, &KeyRow> = HashMap::with_capacity(rows.len());
        for row in &rows {
            stored.insert(&row.key, row);
        }
        // Removed fleet-wide: stop here.
        let gone: Vec<Arc<str>> = self
            .keys
            .keys()
            .filter(|key| !stored.contains_key(&***key))
            .cloned()
            .collect();
        let removed = !gone.is_empty();
        for key in gone {
            self.keys.remove(&key);
            drop(unregister::begin(shared, &key));
        }
        self.bad.retain(|key, _| stored.contains_key(&**key));
        let mut new: Vec<JobEntry> = Vec::new();
        let mut pending: Vec<(Arc<str>, Known)> = Vec::new();
        for row in &rows {
            let known = self.keys.get(row.key.as_str());
            if known.is_some_and(|known| known.version == row.version) {
                continue;
            }
            if self.bad.get(row.key.as_str()) == Some(&row.version) {
                continue;
            }
            let key: Arc<str> = Arc::from(row.key.as_str());
            let parsed = parse(&self.kind, row);
            let own = match parsed {
                Ok(parsed) => parsed,
                Err(problem) => {
                    self.report(shared, &key, row.version, &problem).await;
                    if self.keys.remove(&key).is_some() {
                        drop(unregister::begin(shared, &key));
                    }
                    continue;
                }
            };
            let now_known = Known::of(row, own.timeout);
            match known {
                // Same schedule: the next run reads the new arguments (and
                // gets the new time limit, if only that changed; a run in
                // progress keeps the limit it started with).
                Some(known) if known.schedule == row.schedule && known.catch_up == row.catch_up => {
                    if known.timeout != own.timeout {
                        let changed_at = shared.registry().job(&key).and_then(|job| job.changed_at);
                        let job = self.kind.entry(&key, own, changed_at);
                        shared.registry().replace(Arc::new(job));
                    }
                }
                Some(_) => {
                    // From now on the new schedule applies: a run in
                    // progress files its next due time from it when it is
                    // released, and a waiting key's pending slot — unless
                    // it is due already — moves to the new first slot.
                    let changed_at = server_now(shared).await?;
                    let first = first_due(&own.schedule, changed_at);
                    let job = self.kind.entry(&key, own, Some(changed_at));
                    shared.registry().replace(Arc::new(job));
                    if shared.store.keys().reschedule(&key, first).await? {
                        shared.wake_key(&key);
                    }
                }
                None => {
                    if shared.registry().job(&key).is_some() {
                        // A static job of this replica has the key already.
                        self.report(
                            shared,
                            &key,
                            row.version,
                            "the key is registered as another job on this replica",
                        )
                        .await;
                        continue;
                    }
                    new.push(self.kind.entry(&key, own, None));
                    self.bad.remove(&key);
                    pending.push((key, now_known));
                    continue;
                }
            }
            self.bad.remove(&key);
            self.keys.insert(key, now_known);
        }
        metrics::keys_bad_args(&self.kind.name, self.bad.len());
        let added = !new.is_empty();
        if added {
            // Known only once registered: a failed registration is tried
            // again at the next sync (the generation is not noted either).
            register(shared, &self.kind, new).await?;
            self.keys.extend(pending);
        }
        if removed || added {
            // The paused gauge counts live keys: a removed key no more, a
            // key registered after the pauses were read already.
            shared.recount_paused(&self.kind.name);
        }
        Ok(())
    }

    /// Reports a key this replica cannot run, once per version.
    async fn report(&mut self, shared: &Shared, key: &Arc<str>, version: i64, problem: &str) {
        // A key stored before names were checked may hold hidden
        // characters: shown escaped.
        tracing::error!(key = %crate::validate::shown(key), kind = %self.kind.name, version,
            problem = %crate::validate::shown(problem),
            "stored key not run: fix it with `leasehold update` (or Keys::update)");
        self.bad.insert(key.clone(), version);
        if let Err(error) = shared.store.keys().report_args_error(key, version, problem).await {
            tracing::warn!(key = %key, %error, "could not record the key's problem on its row");
        }
    }
}

/// The schedule, catch-up and own time limit of a stored key, and whether
/// its arguments read as the kind's.
fn parse(kind: &KindEntry, row: &KeyRow) -> std::result::Result<Own, String> {
    // Where a stored key enters the runtime: checked once, here, as a job's
    // key is at `start` or `add`; the batch statements trust the registry's
    // keys. A row stored before names were checked may fail.
    validate::key(&row.key)
        .map_err(|e| format!("{e}; a key cannot be renamed: remove it and add it again under a name without it"))?;
    (kind.check)(&row.args).map_err(|e| format!("its arguments do not deserialize as the kind's Args: {e}"))?;
    let schedule: Schedule = row.schedule.parse().map_err(|e| format!("{e}"))?;
    let catch_up: CatchUp = row.catch_up.parse().map_err(|e| format!("{e}"))?;
    // A limit written by hand past the checks of `add_keys` is reported
    // like any other unreadable setting.
    let timeout = row
        .timeout_secs
        .map(|secs| {
            Duration::try_from_secs_f64(secs)
                .map_err(|e| format!("its time limit {secs}s is not a duration: {e}"))
                .and_then(|limit| leasehold_rules::run_timeout("run timeout", limit).map_err(|e| e.to_string()))
        })
        .transpose()?;
    Ok(Own {
        schedule,
        catch_up,
        timeout,
    })
}

/// The server's time: as last observed, or asked.
async fn server_now(shared: &Shared) -> Result<DateTime<Utc>> {
    match shared.clock.server_now() {
        Some(now) => Ok(now),
        None => shared.store.server_now().await,
    }
}

/// Registers new keys of `kind`: their lease rows in one statement, then
/// the registry, as `RuntimeBuilder::start` does.
async fn register(shared: &Arc<Shared>, kind: &KindEntry, jobs: Vec<JobEntry>) -> Result<()> {
    let server_now = server_now(shared).await?;
    let sent = shared.registry().mark();
    let keys: Vec<(&str, &str, DateTime<Utc>)> = jobs
        .iter()
        .map(|j| (&*j.key, &*j.name, first_due(&j.settings.schedule, server_now)))
        .collect();
    let seen = shared.store.register_many(&shared.holder, &keys).await?;
    drop(keys);
    metrics::prime(&kind.name);
    shared.lower_tick(kind.settings.get_heartbeat());
    let now = Instant::now();
    {
        let mut registry = shared.registry();
        for job in jobs {
            registry.insert(Arc::new(job), now);
        }
    }
    shared.file(&seen, sent);
    shared.wake_scheduler();
    Ok(())
}
