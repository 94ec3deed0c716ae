//! [`RuntimeBuilder::start`], step by step: check the settings and the
//! jobs, reach the database, register the keys, build the shared state,
//! start the services. Nothing is started until every check has passed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Connections, MAX_HISTORY, MAX_OWNED_CONNECTIONS, RuntimeBuilder};
use crate::error::{Error, Result};
use crate::health::Tracker;
use crate::job::JobSettings;
use crate::lease::MAX_FLEET_LIMIT;
use crate::lease::{DEFAULT_OWNED_CONNECTIONS, LeaseStore, Registered};
use crate::metrics;
use crate::operator::Operator;
use crate::runtime::fleet::KindEntry;
use crate::runtime::handle::{Runtime, Tasks};
use crate::runtime::state::{
    FinishRequest, JobEntry, MAX_PRIORITY, NameLimits, Priorities, Reading, RegistryBuild, ServerClock, Setup, Shared,
    duplicate_key,
};
use crate::runtime::{finish, heartbeat, listen, scheduler};
use crate::schedule::first_due;
use crate::validate;
use leasehold_rules as rules;

/// The heartbeat period when no job names one (no jobs registered yet).
const DEFAULT_TICK: Duration = Duration::from_secs(20);

/// The checked jobs, ready to register.
struct Checked {
    registry: RegistryBuild,
    jobs: Vec<Arc<JobEntry>>,
    /// Each job name once, to prime its metrics.
    names: HashSet<Arc<str>>,
}

/// What the shared state is built from, besides the builder's settings.
struct Parts {
    holder: String,
    store: LeaseStore,
    server_now: DateTime<Utc>,
    /// The first heartbeat period.
    tick: Duration,
    finishes: mpsc::UnboundedSender<FinishRequest>,
}

pub(super) async fn start(mut builder: RuntimeBuilder) -> Result<Runtime> {
    let began = Instant::now();
    // A holder id the builder generated is new with this process: no other
    // process uses it, and no lease can be held under it yet.
    let chosen = builder.holder.is_some();
    let holder = builder.check_settings()?;
    let checked = builder.check_jobs()?;
    let checked_at = Instant::now();
    builder.check_kinds()?;
    let limits = builder.check_limits(&checked.jobs)?;
    let priorities = builder.check_priorities(&checked.jobs)?;
    let declared = builder.check_fleet_limits(&checked.jobs)?;
    #[cfg(feature = "prometheus")]
    if let Some(addr) = &builder.prometheus {
        crate::metrics::exporter::install(addr)?;
    }
    let store = builder.open_store().await?;
    // Also the first connect of an owned pool: a server that takes the
    // service's pool but refuses more connections fails `start` here.
    let server_now = store.server_now().await?;
    let covered = covered_clock_rate(&checked.jobs);
    let registering = Instant::now();
    // The check reads the whole table (no index on holder): only for a
    // holder id the service chose, and alongside the registration, whose
    // rows are free and so never count as live. It reads on the service's
    // pool (like the schema check): a large registration uses every owned
    // connection at once.
    let (rows, ()) = tokio::try_join!(register(&store, &holder, &checked.jobs, server_now), async {
        if chosen {
            warn_live_leases(&LeaseStore::new(builder.pool.clone()), &holder).await?;
        }
        Ok(())
    })?;
    if !declared.is_empty() {
        declare_fleet_limits(&store, &holder, &declared).await?;
    }
    let registered = Instant::now();
    for name in &checked.names {
        metrics::prime(name);
    }
    let tick = checked
        .jobs
        .iter()
        .map(|j| j.settings.get_heartbeat())
        .chain(builder.kinds.iter().map(|k| k.settings.get_heartbeat()))
        .min()
        .unwrap_or(DEFAULT_TICK);
    let (finishes, requests) = mpsc::unbounded_channel();
    let parts = Parts {
        holder,
        store,
        server_now,
        tick,
        finishes,
    };
    let shared = Arc::new(builder.shared(parts, checked.registry, &checked.jobs, &rows, (limits, priorities)));
    drop(rows);
    metrics::concurrency_limit(shared.max_concurrent_runs);
    let kinds: Vec<Arc<KindEntry>> = builder.kinds.into_iter().map(Arc::new).collect();
    let tasks = start_services(&shared, builder.listen, server_now, kinds, requests);
    // Where a slow start went, for the operator who turns debug on.
    tracing::debug!(
        keys = shared.registry().len(),
        checked_ms = (checked_at - began).as_millis(),
        connected_ms = (registering - checked_at).as_millis(),
        registered_ms = (registered - registering).as_millis(),
        built_ms = registered.elapsed().as_millis(),
        "leasehold runtime start: jobs checked, schema and clock read, keys registered, state built"
    );
    tracing::info!(
        holder = %shared.holder,
        jobs = shared.registry().len(),
        clock_rate_bound = format!("{} %", rules::CLOCK_RATE_BOUND_PERCENT),
        clock_rate_covered = covered.map(|c| format!("{:.1} %", c * 100.0)).unwrap_or_default(),
        "leasehold runtime started: the deadline margins cover clocks whose rates are off by up to \
         clock_rate_covered (every job's covers at least clock_rate_bound)"
    );
    Ok(Runtime::started(shared, tasks))
}

impl RuntimeBuilder {
    /// Checks the runtime's own settings; returns the holder id to use.
    fn check_settings(&mut self) -> Result<String> {
        let holder = self.holder.take().unwrap_or_else(default_holder);
        validate::holder(&holder)?;
        if self.poll_interval < Duration::from_millis(10) {
            return Err(Error::invalid(
                "poll interval",
                self.poll_interval,
                "it must be at least 10ms",
            ));
        }
        if self.history > MAX_HISTORY {
            return Err(Error::invalid(
                "history length",
                self.history,
                format!("keep at most {MAX_HISTORY} runs per key (0 records none)"),
            ));
        }
        if self.degraded_after == 0 {
            return Err(Error::invalid(
                "degraded_after",
                self.degraded_after,
                "it must be at least 1 (failures in a row)",
            ));
        }
        if self.max_concurrent_runs == 0 {
            return Err(Error::invalid(
                "max_concurrent_runs",
                self.max_concurrent_runs,
                "it must be at least 1",
            ));
        }
        if let Connections::Owned(n) = self.connections
            && !(1..=MAX_OWNED_CONNECTIONS).contains(&n)
        {
            return Err(Error::invalid(
                "connections",
                self.connections,
                format!(
                    "own between 1 and {MAX_OWNED_CONNECTIONS} connections (default \
                     {DEFAULT_OWNED_CONNECTIONS}), or use Connections::SharedWithService to run on the \
                     service's pool"
                ),
            ));
        }
        Ok(holder)
    }

    /// The limits per job name ([`RuntimeBuilder::max_concurrent_runs_of`]):
    /// each at least 1, each name given once and registered here, as a job
    /// (`jobs`) or a kind.
    fn check_limits(&self, jobs: &[Arc<JobEntry>]) -> Result<NameLimits> {
        let limits = self.per_name(PerName::LIMIT, &self.limits_of, jobs, |name, runs| {
            (runs == 0).then(|| {
                format!(
                    "max_concurrent_runs_of({name:?}, 0) would never run it here: give at least 1, or do not \
                     register {name:?} on this replica"
                )
            })
        })?;
        Ok(NameLimits::new(limits))
    }

    /// The priorities per job name ([`RuntimeBuilder::priority_of`]): each
    /// at most [`MAX_PRIORITY`], each name given once and registered here;
    /// the aging ([`RuntimeBuilder::priority_aging`]) from 1 ms to a day.
    fn check_priorities(&self, jobs: &[Arc<JobEntry>]) -> Result<Priorities> {
        let aging = self.priority_aging;
        if aging < Duration::from_millis(1) || aging > Duration::from_secs(86_400) {
            return Err(Error::invalid(
                "priority_aging",
                aging,
                "one level of priority is worth 1ms to 24h of waiting (default 1 minute)",
            ));
        }
        let priorities = self.per_name(PerName::PRIORITY, &self.priorities_of, jobs, |_, priority| {
            (priority > MAX_PRIORITY).then(|| {
                format!(
                    "a priority is 0 (the default, the lowest) to {MAX_PRIORITY}; each level is worth {aging:?} of \
                     waiting (priority_aging)"
                )
            })
        })?;
        Ok(Priorities::new(priorities, aging))
    }

    /// The fleet-wide limits this runtime's code declares
    /// ([`RuntimeBuilder::fleet_limit`]): each 1 to `MAX_FLEET_LIMIT`, each
    /// name given once and registered here.
    fn check_fleet_limits(&self, jobs: &[Arc<JobEntry>]) -> Result<Vec<(Arc<str>, u32)>> {
        self.per_name(PerName::FLEET_LIMIT, &self.fleet_limits, jobs, |_, limit| {
            (!(1..=MAX_FLEET_LIMIT).contains(&limit)).then(|| {
                format!(
                    "a fleet-wide limit is 1 to {MAX_FLEET_LIMIT} runs at once; to pause a job, use \
                     `leasehold pause --job`"
                )
            })
        })
    }

    /// The settings `given` per job or kind name, of the builder option
    /// `option`: each value passes `problem` (`None`: fine, else what is
    /// wrong and what to do), each name is given once and registered here.
    /// The first refusal names the option and the value.
    fn per_name<T: Copy + std::fmt::Debug>(
        &self,
        option: PerName,
        given: &[(String, T)],
        jobs: &[Arc<JobEntry>],
        problem: impl Fn(&str, T) -> Option<String>,
    ) -> Result<Vec<(Arc<str>, T)>> {
        let mut checked: Vec<(Arc<str>, T)> = Vec::with_capacity(given.len());
        for (name, value) in given {
            validate::job_name(name)?;
            let problem = problem(name, *value).or_else(|| {
                checked.iter().any(|(n, _)| **n == **name).then(|| {
                    format!(
                        "{name:?} has a {noun} already: give each name one {noun}",
                        noun = option.noun
                    )
                })
            });
            if let Some(problem) = problem {
                return Err(Error::invalid(option.option, value, problem));
            }
            let known = self.registered_name(option.name, name, jobs)?;
            checked.push((known, *value));
        }
        Ok(checked)
    }

    /// `name` as a job (`jobs`) or kind registered here; refused, naming
    /// what is registered, when none is.
    fn registered_name(&self, what: &'static str, name: &str, jobs: &[Arc<JobEntry>]) -> Result<Arc<str>> {
        let registered = jobs.iter().map(|j| &j.name).chain(self.kinds.iter().map(|k| &k.name));
        if let Some(known) = registered.clone().find(|n| ***n == *name) {
            return Ok(known.clone());
        }
        let mut names: Vec<&str> = registered.map(|n| &**n).collect();
        names.sort_unstable();
        names.dedup();
        names.truncate(20);
        Err(Error::invalid(
            what,
            name,
            format!(
                "no job or kind of that name is registered with this runtime (registered: {}); check the \
                 spelling, or register it first",
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            ),
        ))
    }

    /// Checks, deduplicates and adds the jobs in one pass, before anything
    /// starts: one hash per key.
    fn check_jobs(&mut self) -> Result<Checked> {
        let now = Instant::now();
        let mut registry = RegistryBuild::with_capacity(self.jobs.len());
        let mut shared_parts = SharedParts::default();
        let mut jobs = Vec::with_capacity(self.jobs.len());
        for mut job in std::mem::take(&mut self.jobs) {
            job.check()?;
            shared_parts.share(&mut job);
            let job = Arc::new(job);
            if !registry.add(job.clone(), now) {
                return Err(duplicate_key(&job.key));
            }
            jobs.push(job);
        }
        // In key order: the order the registration sends them in (so it
        // need not sort them) and the due queue's order among keys due at
        // one instant (so it is built presorted).
        jobs.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        Ok(Checked {
            registry,
            jobs,
            names: shared_parts.names,
        })
    }

    /// Checks each job kind, and that none is registered twice.
    fn check_kinds(&self) -> Result<()> {
        let mut kind_names = HashSet::with_capacity(self.kinds.len());
        for kind in &self.kinds {
            kind.check()?;
            if !kind_names.insert(kind.name.clone()) {
                return Err(Error::invalid(
                    "job kind",
                    &*kind.name,
                    "it is registered twice in this runtime; register each kind once",
                ));
            }
        }
        Ok(())
    }

    /// Migrates (or checks) the schema and opens the store on the
    /// connections the builder names.
    async fn open_store(&mut self) -> Result<LeaseStore> {
        if self.migrate {
            crate::migrate::migrate(&self.pool).await?;
        } else {
            crate::migrate::check_schema(&self.pool).await?;
        }
        Ok(match self.connections {
            Connections::Owned(n) => LeaseStore::owned((*self.pool.connect_options()).clone(), n),
            Connections::SharedWithService => LeaseStore::new(self.pool.clone()),
        })
    }

    /// The shared state: the registry filed at the times the registration's
    /// rows say (nothing listens yet, so no wake-up came in between); `rows`
    /// answers for `jobs`, in order.
    fn shared(
        &self,
        parts: Parts,
        mut registry: RegistryBuild,
        jobs: &[Arc<JobEntry>],
        rows: &Registered,
        (limits, priorities): (NameLimits, Priorities),
    ) -> Shared {
        let Parts {
            holder,
            store,
            server_now,
            tick,
            finishes,
        } = parts;
        let health = Tracker::new(
            3 * tick.max(self.poll_interval),
            self.degraded_after,
            store.poisoned().clone(),
        );
        let clock = ServerClock::default();
        clock.observed(rows.server_now().unwrap_or(server_now));
        let reading = Reading {
            now: Instant::now(),
            listening: false,
            poll_interval: self.poll_interval,
            clock: &clock,
        };
        registry.file(jobs, |i| rows.sighting(i).map(|row| reading.look_again(&row)));
        Shared::new(Setup {
            holder,
            store,
            health,
            registry: registry.finish(),
            poll_interval: self.poll_interval,
            max_concurrent_runs: self.max_concurrent_runs,
            limits,
            priorities,
            history: self.history,
            tick,
            clock,
            finishes,
        })
    }
}

/// Warns about live leases under this runtime's holder id: another process
/// uses the same id, or this one restarted before its leases expired.
async fn warn_live_leases(store: &LeaseStore, holder: &str) -> Result<()> {
    let live = store.live_keys_of(holder).await?;
    if !live.is_empty() {
        tracing::warn!(holder = %holder, keys = ?live,
            "live leases are held under this runtime's holder id: another running process uses the \
             same id (give each process its own, or leave the default), or this process restarted \
             before its old leases expired; they are not taken over, they are claimed once they expire");
    }
    Ok(())
}

/// The clock-rate error the deadline margins cover (docs/design.md §5):
/// every job's covers at least ρ, or `validate` refused it; the smallest is
/// what this replica can tolerate.
fn covered_clock_rate(jobs: &[Arc<JobEntry>]) -> Option<f64> {
    jobs.iter()
        .map(|j| rules::covered_clock_rate(j.settings.get_lease(), j.settings.get_margin()))
        .reduce(f64::min)
}

/// Registers every key ([`LeaseStore::register_all`]: one statement, or a
/// few at once for many keys); the rows as they now are, in the order of
/// `jobs`.
async fn register(
    store: &LeaseStore,
    holder: &str,
    jobs: &[Arc<JobEntry>],
    server_now: DateTime<Utc>,
) -> Result<Registered> {
    let keys: Vec<(&str, &str, DateTime<Utc>)> = jobs
        .iter()
        .map(|j| (&*j.key, &*j.name, first_due(&j.settings.schedule, server_now)))
        .collect();
    store.register_all(holder, &keys).await
}

/// Spawns the services, each with the token that stops it.
fn start_services(
    shared: &Arc<Shared>,
    listen: bool,
    server_now: DateTime<Utc>,
    kinds: Vec<Arc<KindEntry>>,
    requests: mpsc::UnboundedReceiver<FinishRequest>,
) -> Tasks {
    let stop_finisher = CancellationToken::new();
    let stop_heartbeat = CancellationToken::new();
    let stop_listener = CancellationToken::new();
    if !listen {
        // No liveness session to wait for: the scheduler claims at once.
        shared.liveness.settle();
    }
    Tasks {
        listener: listen.then(|| tokio::spawn(listen::run(shared.clone(), stop_listener.clone()))),
        stop_listener,
        finisher: tokio::spawn(finish::run(shared.clone(), requests, stop_finisher.clone())),
        stop_finisher,
        heartbeat: tokio::spawn(heartbeat::run(shared.clone(), stop_heartbeat.clone())),
        stop_heartbeat,
        scheduler: tokio::spawn(scheduler::run(shared.clone(), server_now, kinds)),
    }
}

/// What the keys of a fleet share: a few jobs register many keys each,
/// so each job name is allocated once, and each job's settings once as
/// long as its keys bring the same ones.
#[derive(Default)]
struct SharedParts {
    names: HashSet<Arc<str>>,
    /// The settings of the last key of each job name.
    settings: HashMap<Arc<str>, Arc<JobSettings>>,
    /// The last key's name, for the common case of keys of one job in a
    /// row: no lookup.
    last: Option<(Arc<str>, Arc<JobSettings>)>,
}

impl SharedParts {
    /// Points `job`'s name and settings at the shared copies, or makes its
    /// own the shared ones.
    fn share(&mut self, job: &mut JobEntry) {
        let known = match &self.last {
            Some((name, settings)) if **name == *job.name => Some((name.clone(), settings.clone())),
            _ => self.names.get(&job.name).map(|name| {
                let settings = self.settings.get(name).cloned().unwrap_or_else(|| job.settings.clone());
                (name.clone(), settings)
            }),
        };
        match known {
            Some((name, settings)) => {
                job.name = name;
                if settings.same_as(&job.settings) {
                    job.settings = settings;
                } else {
                    self.settings.insert(job.name.clone(), job.settings.clone());
                }
            }
            None => {
                self.names.insert(job.name.clone());
                self.settings.insert(job.name.clone(), job.settings.clone());
            }
        }
        self.last = Some((job.name.clone(), job.settings.clone()));
    }
}

/// `hostname-<random>`: the host for diagnosis, the suffix so that a
/// restart is a new holder.
fn default_holder() -> String {
    let host = hostname::get()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "replica".to_owned());
    let host: String = host.chars().take(200).collect();
    format!("{host}-{:08x}", rand::random::<u32>())
}

/// Sets each fleet-wide limit `declared` by the code
/// ([`RuntimeBuilder::fleet_limit`]) that is not in force as declared,
/// recorded as set by `<holder> (declared in code)`. One read of the
/// limits in force, and one set per limit that changes: a restart whose limits are
/// in force writes nothing (a set waits for the fleet's claims in flight).
async fn declare_fleet_limits(store: &LeaseStore, holder: &str, declared: &[(Arc<str>, u32)]) -> Result<()> {
    let in_force = store.controls().limits_in_force().await?;
    // A holder id near the actor's length limit is recorded alone.
    let actor = format!("{holder} (declared in code)");
    let actor = if rules::actor(&actor).is_ok() {
        actor
    } else {
        holder.to_owned()
    };
    let operator = Operator::new(store.clone(), actor)?;
    for (name, limit) in declared {
        let before = in_force
            .iter()
            .find(|(job, _)| **job == **name)
            .map(|(_, limit)| *limit);
        if before == Some(*limit) {
            continue;
        }
        operator.declare_limit(name, *limit).await?;
        tracing::info!(holder = %holder, job = %name, limit = *limit, before = ?before,
            "set the fleet-wide limit this runtime's code declares");
    }
    Ok(())
}

/// A builder option set per job or kind name, as its refusals name it.
#[derive(Clone, Copy)]
struct PerName {
    /// The option, as the builder spells it.
    option: &'static str,
    /// What its name argument is called.
    name: &'static str,
    /// What one value is.
    noun: &'static str,
}

impl PerName {
    const LIMIT: PerName = PerName {
        option: "max_concurrent_runs_of",
        name: "max_concurrent_runs_of name",
        noun: "limit",
    };
    const PRIORITY: PerName = PerName {
        option: "priority_of",
        name: "priority_of name",
        noun: "priority",
    };
    const FLEET_LIMIT: PerName = PerName {
        option: "fleet_limit",
        name: "fleet_limit name",
        noun: "fleet-wide limit",
    };
}
