//! [`RuntimeBuilder`]: settings, the checks run at `start`, and start-up.

use std::time::Duration;

use sqlx::PgPool;

use super::fleet::KindEntry;
use super::handle::Runtime;
use super::state::{DEFAULT_AGING, JobEntry};
use crate::error::Result;
use crate::job::FencedJob;
use crate::kind::JobKind;
use crate::lease::DEFAULT_OWNED_CONNECTIONS;

mod start;

/// Default of [`RuntimeBuilder::max_concurrent_runs`].
pub const DEFAULT_MAX_CONCURRENT_RUNS: usize = 100;

/// Default of [`RuntimeBuilder::history`]: runs kept per key.
pub const DEFAULT_HISTORY: u32 = 100;

/// How many claims, or heartbeats, in a row must fail before
/// [`Runtime::health`] reports them, unless set with
/// [`RuntimeBuilder::degraded_after`].
pub const DEFAULT_DEGRADED_AFTER: u32 = 3;

/// Most runs [`RuntimeBuilder::history`] keeps per key.
const MAX_HISTORY: u32 = 10_000;

/// Most connections [`Connections::Owned`] may ask for.
const MAX_OWNED_CONNECTIONS: u32 = 32;

/// Which connections the runtime's own statements — claims, heartbeats,
/// releases with their history rows, operator calls through [`Runtime`] —
/// run on. Set with [`RuntimeBuilder::connections`].
///
/// Connection budget per replica, on top of whatever the service's own
/// code uses of its pool:
///
/// | mode | connections to the server |
/// |---|---|
/// | `Owned(n)` (default `n` = 2) | `n` (one kept open while idle) + 1 listener, plus what fenced transactions borrow from the pool the job passes |
/// | `SharedWithService` | 1 listener, plus the claims, heartbeats and releases taken from the service's pool |
///
/// With [`RuntimeBuilder::listen(false)`](RuntimeBuilder::listen) there is
/// no listener connection. [`FenceGuard::begin_fenced`](crate::FenceGuard::begin_fenced)
/// always runs on the pool the job passes: its writes are the service's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Connections {
    /// A pool of its own of at most this many connections (1 to 32),
    /// opened from the service pool's connect options. Nothing else uses
    /// them, so the service's code can neither exhaust them (a job holding
    /// every connection of the service's pool does not stop its heartbeat)
    /// nor leave one inside a transaction — no statement needs the
    /// poisoned-connection check, each is one round trip. Idle connections
    /// are not pinged before use: one the server closed fails its
    /// statement and is discarded, and the runtime retries (a claim within
    /// a second, a heartbeat at its next tick). The default, with
    /// [`DEFAULT_OWNED_CONNECTIONS`](crate::runtime::DEFAULT_OWNED_CONNECTIONS).
    Owned(u32),
    /// The service's pool, the one passed to [`Runtime::builder`]: no
    /// connection of its own besides the listener, for servers short of
    /// connections (a managed server allowing 100, shared by 50 replicas).
    /// Every statement first checks that the pooled connection is not
    /// inside a transaction the service left open (one more round trip),
    /// and the service's code can delay the heartbeat by holding every
    /// connection of its pool. Behind PgBouncer, prefer `Owned`: client
    /// connections to PgBouncer are cheap, and it multiplexes them.
    SharedWithService,
}

impl Default for Connections {
    fn default() -> Self {
        Connections::Owned(DEFAULT_OWNED_CONNECTIONS)
    }
}

/// Builds a [`Runtime`]: register jobs, adjust settings, then
/// [`start`](RuntimeBuilder::start). Every setting is checked at `start`,
/// before anything runs.
#[must_use = "a builder does nothing until `.start()`"]
pub struct RuntimeBuilder {
    pool: PgPool,
    holder: Option<String>,
    migrate: bool,
    poll_interval: Duration,
    max_concurrent_runs: usize,
    /// `max_concurrent_runs_of`, in the order given (checked at start).
    limits_of: Vec<(String, usize)>,
    /// `priority_of`, in the order given (checked at start).
    priorities_of: Vec<(String, u8)>,
    /// `fleet_limit`, in the order given (checked and applied at start).
    fleet_limits: Vec<(String, u32)>,
    priority_aging: Duration,
    history: u32,
    degraded_after: u32,
    listen: bool,
    connections: Connections,
    jobs: Vec<JobEntry>,
    kinds: Vec<KindEntry>,
    #[cfg(feature = "prometheus")]
    prometheus: Option<String>,
}

impl std::fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("holder", &self.holder)
            .field("connections", &self.connections)
            .field("jobs", &self.jobs.len())
            .field("kinds", &self.kinds.len())
            .finish()
    }
}

impl Runtime {
    /// A builder over the service's `pool`. The runtime migrates with it
    /// and opens its own connections from its connect options (see
    /// [`RuntimeBuilder::connections`]); it holds none of the pool's
    /// connections while a job runs.
    pub fn builder(pool: PgPool) -> RuntimeBuilder {
        RuntimeBuilder::new(pool)
    }
}

impl RuntimeBuilder {
    fn new(pool: PgPool) -> Self {
        RuntimeBuilder {
            pool,
            holder: None,
            migrate: true,
            poll_interval: Duration::from_secs(5),
            max_concurrent_runs: DEFAULT_MAX_CONCURRENT_RUNS,
            limits_of: Vec::new(),
            priorities_of: Vec::new(),
            fleet_limits: Vec::new(),
            priority_aging: DEFAULT_AGING,
            history: DEFAULT_HISTORY,
            degraded_after: DEFAULT_DEGRADED_AFTER,
            listen: true,
            connections: Connections::default(),
            jobs: Vec::new(),
            kinds: Vec::new(),
            #[cfg(feature = "prometheus")]
            prometheus: None,
        }
    }

    /// Registers a job. Its key must be unique in this runtime; its settings
    /// are checked at [`start`](RuntimeBuilder::start).
    ///
    /// Any number of keys: the runtime's cost follows the runs, not the
    /// keys (one scheduler, batch claims). To add or remove jobs after
    /// start, see [`Runtime::add`] and [`Runtime::remove`].
    pub fn register<J: FencedJob>(mut self, job: J) -> Self {
        self.jobs.push(JobEntry::new(job));
        self
    }

    /// Registers a job kind: this replica runs every stored key of the
    /// kind ([`Keys::add`](crate::store::Keys::add)) — the
    /// keys there at start, and those added, updated or removed while it
    /// runs (seen at once by notification, or at the next poll). Its name
    /// must be unique among this runtime's kinds; its settings are checked
    /// at [`start`](RuntimeBuilder::start).
    ///
    /// ```no_run
    /// # use leasehold::{FenceGuard, JobError, JobKind};
    /// # struct Invoice;
    /// # impl JobKind for Invoice {
    /// #     type Args = i64;
    /// #     fn name(&self) -> &str { "invoice" }
    /// #     async fn run(&self, _tenant: i64, _guard: FenceGuard) -> Result<(), JobError> { Ok(()) }
    /// # }
    /// # async fn demo(pool: sqlx::PgPool) -> leasehold::Result<()> {
    /// let runtime = leasehold::Runtime::builder(pool).register_kind(Invoice).start().await?;
    /// # Ok(()) }
    /// ```
    pub fn register_kind<K: JobKind>(mut self, kind: K) -> Self {
        self.kinds.push(KindEntry::new(kind));
        self
    }

    /// Overrides the holder id (default `hostname-<random>`, new at every
    /// start).
    ///
    /// Keep it unique per process. If two live runtimes share one (a copied
    /// configuration), exclusion still holds — a claim for a new run never
    /// takes a live lease, whoever holds it, and renewals and releases are
    /// scoped to each run's own fence — but `start` logs a warning when it
    /// finds live leases under this id (it looks only for an id set here:
    /// the default one is new with the process). A process restarted with
    /// its old id claims its keys again once their old leases expire.
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = Some(holder.into());
        self
    }

    /// Whether to run [`crate::migrate`] at start (default `true`). When
    /// `false`, a missing or outdated schema fails `start` with an error
    /// naming the fix.
    pub fn migrate(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
        self
    }

    /// How often the scheduler asks the server which keys became due
    /// (default 5 s): one cheap statement per interval, whatever the number
    /// of keys. Due times themselves are waited for exactly, and wake-ups by
    /// `LISTEN`/`NOTIFY` start released and triggered keys within
    /// milliseconds; the poll is what bounds that delay when notifications
    /// cannot arrive (see [`RuntimeBuilder::listen`]).
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every;
        self
    }

    /// At most `runs` runs at once on this replica (default
    /// 100): job bodies running. The scheduler claims only as many keys as
    /// it has room for and leaves the rest to other replicas;
    /// `Runtime::health` and the `leasehold_runs_in_progress` /
    /// `leasehold_max_concurrent_runs` gauges show how full it is. A run's
    /// slot frees as its body ends, while its release goes out (the key is
    /// claimed again only once that release answered); as many releases
    /// again may await their answer before the replica stops claiming.
    /// Must be at least 1.
    pub fn max_concurrent_runs(mut self, runs: usize) -> Self {
        self.max_concurrent_runs = runs;
        self
    }

    /// At most `runs` runs at once on this replica of the keys of the job
    /// or job kind named `name` — for jobs heavy on the replica itself
    /// (memory, CPU, a local disk). Other replicas run the rest: a key held
    /// back here stays due and is claimed by whichever replica has room, or
    /// here as soon as a run of `name` ends. Meanwhile this replica's other
    /// run slots go to other keys, so a full name never stalls the rest.
    /// Within [`max_concurrent_runs`](Self::max_concurrent_runs), which
    /// still bounds all runs together.
    ///
    /// Per replica, not fleet-wide: with 3 replicas and `runs` 2, up to 6
    /// runs of `name` may overlap across the fleet. `runs` must be at least
    /// 1, `name` a job or kind registered with this builder, each name
    /// given once; [`start`](Self::start) refuses anything else, naming the
    /// value.
    ///
    /// ```no_run
    /// # async fn demo(pool: sqlx::PgPool, reports: impl leasehold::JobKind) -> leasehold::Result<()> {
    /// let runtime = leasehold::Runtime::builder(pool)
    ///     .register_kind(reports) // a kind named "report": each report takes 2 GB here
    ///     .max_concurrent_runs_of("report", 2)
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn max_concurrent_runs_of(mut self, name: &str, runs: usize) -> Self {
        self.limits_of.push((name.to_owned(), runs));
        self
    }

    /// Claims the keys of the job or kind `name` before those of lower
    /// priority when more keys are due than this replica has room for:
    /// `priority` from 0 (every job's default, the lowest) to 100.
    ///
    /// The rule: a key competes as if it had fallen due `priority ×`
    /// [`priority_aging`](Self::priority_aging) earlier (one minute per
    /// level by default), and the earliest goes first; within a priority,
    /// the oldest due first. So nothing starves: a key of priority 0
    /// that has waited longer than `p` minutes goes before any key of
    /// priority `p` that falls due after. Order only: a priority never
    /// cancels a run, and room that nothing of higher priority needs goes
    /// to the rest at once.
    ///
    /// Per replica, like its room: give every replica the same priorities.
    /// `name` must be a job or kind registered with this builder, each name
    /// given once; [`start`](Self::start) refuses anything else, and a
    /// priority above 100, naming the value.
    ///
    /// ```no_run
    /// # async fn demo(pool: sqlx::PgPool, billing: impl leasehold::JobKind, reports: impl leasehold::JobKind) -> leasehold::Result<()> {
    /// let runtime = leasehold::Runtime::builder(pool)
    ///     .register_kind(billing) // "billing": first when runs are short
    ///     .register_kind(reports) // "report": default priority 0
    ///     .priority_of("billing", 10)
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn priority_of(mut self, name: &str, priority: u8) -> Self {
        self.priorities_of.push((name.to_owned(), priority));
        self
    }

    /// Declares the fleet-wide limit of the job or kind `name`: at most
    /// `limit` runs of it at once across every replica (1 to
    /// [`MAX_FLEET_LIMIT`](crate::operator::MAX_FLEET_LIMIT)), counted by
    /// tenure on the server clock — the limit
    /// [`Controls::set_limit`](crate::store::Controls::set_limit) and
    /// `leasehold limit set` set, declared in code.
    ///
    /// Applied by [`start`](Self::start) when the limit in force is not
    /// `limit` (set, or changed), and recorded on the job's history as set
    /// by `<holder> (declared in code)`; every replica then holds to it
    /// from its next claim, without a restart. The limit is the fleet's,
    /// not this replica's: give every replica the same. During a rolling
    /// deploy that changes it, the last replica to start sets its own; an
    /// operator's `leasehold limit set` or `clear` stands until a replica
    /// declaring the limit starts again. Without a declaration, a runtime
    /// leaves the limit as it finds it.
    ///
    /// `name` must be a job or kind registered with this builder, each name
    /// given once; [`start`](Self::start) refuses anything else, and a
    /// limit of 0 or above the largest, naming the value.
    ///
    /// ```no_run
    /// # async fn demo(pool: sqlx::PgPool, reports: impl leasehold::JobKind) -> leasehold::Result<()> {
    /// let runtime = leasehold::Runtime::builder(pool)
    ///     .register_kind(reports) // "report": one key per tenant
    ///     .fleet_limit("report", 4) // at most 4 reports at once, fleet-wide
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn fleet_limit(mut self, name: &str, limit: u32) -> Self {
        self.fleet_limits.push((name.to_owned(), limit));
        self
    }

    /// How much waiting one level of [`priority_of`](Self::priority_of) is
    /// worth (default one minute; 1 ms to 24 h): the longest a key waits
    /// behind keys one level above it that fall due after it.
    pub fn priority_aging(mut self, per_level: Duration) -> Self {
        self.priority_aging = per_level;
        self
    }

    /// How many runs of each key the history keeps (default 100, at most
    /// 10,000; 0 records none). Each run's row is written by the statement
    /// that releases it, into a ring of this many rows per key, so the
    /// table never grows past keys × `runs` rows and never needs pruning.
    /// Read it with [`Records::history`](crate::store::Records::history) or
    /// `leasehold history KEY`.
    ///
    /// Give every replica the same value: a replica with a shorter ring
    /// overwrites only its first `runs` places, so rows beyond them stay
    /// until a longer ring reuses them (the table stays bounded by the
    /// longest ring in use).
    pub fn history(mut self, runs: u32) -> Self {
        self.history = runs;
        self
    }

    /// How many claims (scheduler statements), or heartbeats, must fail in
    /// a row before [`Runtime::health`] reports them as
    /// [`Degraded::ClaimsFailing`](crate::runtime::Degraded::ClaimsFailing) or
    /// [`Degraded::HeartbeatsFailing`](crate::runtime::Degraded::HeartbeatsFailing)
    /// (default [`DEFAULT_DEGRADED_AFTER`]; at least 1).
    ///
    /// Every replica shares one database, so a network blip fails one
    /// statement on all of them at once: a readiness probe that dropped a
    /// replica on the first failure would take the whole fleet out of the
    /// load balancer. A failed heartbeat is retried on the next tick and a
    /// failed claim within a second, while each run's local deadline keeps
    /// exclusion safe meanwhile; runs actually stopped at their deadline
    /// are reported at once whatever this is
    /// ([`Degraded::RunsLostAtDeadline`](crate::runtime::Degraded::RunsLostAtDeadline)),
    /// and so is a database silent for three heartbeat or poll intervals.
    pub fn degraded_after(mut self, failures: u32) -> Self {
        self.degraded_after = failures;
        self
    }

    /// Whether to listen for wake-ups with `LISTEN`/`NOTIFY` (default
    /// `true`). Listening costs **one extra connection per replica**, opened
    /// from the pool's connect options — never taken from the pool. It is
    /// checked at start with a probe notification; where it cannot work
    /// (PgBouncer in transaction or statement mode) the probe fails, a
    /// warning is logged, and the runtime polls. Set `false` to skip the
    /// extra connection and the check: released and triggered keys are then
    /// noticed by other replicas within one poll interval.
    pub fn listen(mut self, listen: bool) -> Self {
        self.listen = listen;
        self
    }

    /// Which connections the runtime's claims, heartbeats and releases run
    /// on (default [`Connections::Owned`] with 2): a small pool of its own,
    /// or the service's pool ([`Connections::SharedWithService`], for
    /// servers short of connections). See [`Connections`] for the
    /// connection budget of each. Checked at [`start`](RuntimeBuilder::start).
    ///
    /// ```no_run
    /// # async fn demo(pool: sqlx::PgPool) -> leasehold::Result<()> {
    /// use leasehold::Runtime;
    /// use leasehold::runtime::Connections;
    ///
    /// // 50 replicas on a server that allows 100 connections: no pool of its own.
    /// let runtime = Runtime::builder(pool)
    ///     .connections(Connections::SharedWithService)
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn connections(mut self, connections: Connections) -> Self {
        self.connections = connections;
        self
    }

    /// Serves every leasehold metric for Prometheus on `addr` (e.g.
    /// `"127.0.0.1:9464"`; keep it on loopback or a private interface),
    /// installing the process-wide `metrics` recorder. Skip this if your
    /// service installs its own recorder: leasehold's metrics go to it.
    /// Fails at [`start`](RuntimeBuilder::start) if the address is bad or
    /// the port is taken.
    #[cfg(feature = "prometheus")]
    pub fn prometheus(mut self, addr: impl Into<String>) -> Self {
        self.prometheus = Some(addr.into());
        self
    }

    /// Checks every setting, migrates (or checks the schema), registers
    /// every key in one statement, and starts the scheduler, the finisher,
    /// the heartbeat and (unless turned off) the listener.
    ///
    /// Nothing is started if anything is wrong: duplicate keys, a lease out
    /// of range, a heartbeat at or above half the lease, a margin that
    /// leaves no time to run, a bad schedule, a zero concurrency limit.
    ///
    /// Cancel-safe: dropped before it returns, it has started no service;
    /// what it may leave behind is harmless — key rows it registered (a
    /// later start registers them again), the schema it migrated, and the
    /// Prometheus exporter if it installed one.
    ///
    /// ```no_run
    /// # async fn demo(pool: sqlx::PgPool) -> leasehold::Result<()> {
    /// let runtime = leasehold::Runtime::builder(pool).start().await?;
    /// # Ok(()) }
    /// ```
    pub async fn start(self) -> Result<Runtime> {
        start::start(self).await
    }
}
