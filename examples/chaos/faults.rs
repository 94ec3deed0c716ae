//! The replica fleet (processes) and the fault scheduler, deterministic from
//! the seed: the sequence of gaps, kinds and random picks depends on the seed
//! alone; which replica a pick lands on depends on which are free (and
//! running something) at that moment.

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::store::{LeaseInfo, LeaseStore};
use sqlx::PgPool;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::replica::now_us;
use crate::servers::{Promotion, Servers};
use leasehold_testkit::proxy::{Mode, Proxy};

/// splitmix64: a tiny, good-enough PRNG, so a seed replays the same
/// fault schedule without a dependency.
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    pub fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        lo + (hi - lo).mul_f64(self.unit())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGSTOP a replica (preferably one running a job) for longer than the
    /// lease, then SIGCONT: a GC pause / frozen VM.
    Stop,
    /// SIGKILL a replica, then start it again (a new holder).
    Kill,
    /// SIGKILL the replica that holds a running run right now (the
    /// `holder` of a lease row with `run_open` and `expires_at > now`),
    /// then start it again like `kill`: a crash mid-run, whose key waits
    /// for its takeover (`--drill kill`, `drill.rs`).
    KillHolder,
    /// `pg_terminate_backend` on random replica connections.
    Terminate,
    /// PostgreSQL fast restart (clients disconnected, checkpoint).
    PgFast,
    /// PostgreSQL immediate restart (a crash: recovery from WAL).
    PgImmediate,
    /// Delay every packet of the proxied replica.
    ProxyDelay,
    /// Partition the proxied replica, then heal (resume or reset).
    ProxyBlackhole,
    /// Reset every connection of the proxied replica.
    ProxyReset,
    /// A running lease expires early on the server, as after an operator's
    /// `leasehold revoke --force` or a forward step of the server clock:
    /// another replica takes over while the holder still runs, and only
    /// learns at its next heartbeat.
    Expire,
    /// A running replica's proxy delays every packet by a fifth to half of
    /// the lease, so its runs are dropped at their local deadline (or, when
    /// its leases are also expired on the server, after their grace) while
    /// their fenced transactions' `BEGIN` is in flight (see `poison.rs`).
    BeginDrop,
    /// A running replica runs `BEGIN` on its shared pool with a plain
    /// statement: a connection goes back to the pool inside a transaction
    /// sqlx does not know about (see `poison.rs`).
    RawBegin,
    /// SIGSTOP a running replica while one of its runs is inside a fenced
    /// transaction (holding its key's `leasehold_fence` row lock), for
    /// less than, about, or several times the lease, then SIGCONT
    /// (`stop_in_fence.rs`).
    StopInFence,
    /// Restart a replica gracefully with its clock running at a rate off
    /// real time (libfaketime, monotonic clock included), for a few leases,
    /// then at the true rate again (`clock.rs`).
    ClockRate,
    /// Restart a replica gracefully under libfaketime and step its wall
    /// clock (only) forward or back mid-run, then back (`clock.rs`).
    ClockStep,
    /// With `--standby`, once per run: cut replication, crash the primary,
    /// promote the standby, point every proxy at it (`promote.rs`).
    Promote,
}

impl FaultKind {
    pub const ALL: [FaultKind; 16] = [
        FaultKind::Stop,
        FaultKind::Kill,
        FaultKind::KillHolder,
        FaultKind::Terminate,
        FaultKind::PgFast,
        FaultKind::PgImmediate,
        FaultKind::ProxyDelay,
        FaultKind::ProxyBlackhole,
        FaultKind::ProxyReset,
        FaultKind::Expire,
        FaultKind::BeginDrop,
        FaultKind::RawBegin,
        FaultKind::StopInFence,
        FaultKind::ClockRate,
        FaultKind::ClockStep,
        FaultKind::Promote,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Stop => "stop",
            FaultKind::Kill => "kill",
            FaultKind::KillHolder => "kill-holder",
            FaultKind::Terminate => "terminate",
            FaultKind::PgFast => "pg-fast",
            FaultKind::PgImmediate => "pg-immediate",
            FaultKind::ProxyDelay => "proxy-delay",
            FaultKind::ProxyBlackhole => "proxy-blackhole",
            FaultKind::ProxyReset => "proxy-reset",
            FaultKind::Expire => "expire",
            FaultKind::BeginDrop => "begin-drop",
            FaultKind::RawBegin => "raw-begin",
            FaultKind::StopInFence => "stop-in-fence",
            FaultKind::ClockRate => "clock-rate",
            FaultKind::ClockStep => "clock-step",
            FaultKind::Promote => "promote",
        }
    }

    pub fn parse(s: &str) -> Result<FaultKind, String> {
        FaultKind::ALL
            .into_iter()
            .find(|k| k.name() == s.trim())
            .ok_or_else(|| {
                let names: Vec<_> = FaultKind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown fault {s:?}; known: {}", names.join(","))
            })
    }

    /// Needs libfaketime (`clock.rs`).
    pub fn is_clock(self) -> bool {
        matches!(self, FaultKind::ClockRate | FaultKind::ClockStep)
    }

    /// Scheduled once per run with `--standby`, never drawn (`promote.rs`).
    pub fn is_promotion(self) -> bool {
        self == FaultKind::Promote
    }

    pub fn restarts_postgres(self) -> bool {
        matches!(self, FaultKind::PgFast | FaultKind::PgImmediate)
    }
}

/// One injected fault, in local time (µs since the epoch).
#[derive(Debug, Clone)]
pub struct FaultRecord {
    pub kind: FaultKind,
    pub target: String,
    pub start_us: i64,
    pub end_us: i64,
}

/// The replica processes.
pub struct Fleet {
    exe: PathBuf,
    flags: Vec<String>,
    dir: PathBuf,
    proxy_ports: Vec<u16>,
    replicas: Vec<(Option<Child>, u32)>,
}

impl Fleet {
    /// `proxy_ports[n]`, if present, is the port replica `n` reaches the
    /// database through.
    pub fn new(exe: PathBuf, flags: Vec<String>, dir: PathBuf, proxy_ports: Vec<u16>, n: usize) -> Fleet {
        Fleet {
            exe,
            flags,
            dir,
            proxy_ports,
            replicas: (0..n).map(|_| (None, 0)).collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.replicas.len()
    }

    /// Starts replica `n` (a new generation: a new holder id).
    pub fn spawn(&mut self, n: usize) -> std::io::Result<()> {
        self.spawn_with(n, &[])
    }

    /// Starts replica `n` with `env` added to its environment (a clock
    /// fault's libfaketime settings, `clock.rs`).
    pub fn spawn_with(&mut self, n: usize, env: &[(&str, String)]) -> std::io::Result<()> {
        let generation = self.replicas[n].1 + 1;
        let stderr = std::fs::File::create(self.dir.join(format!("r{n}-g{generation}.stderr")))?;
        let mut cmd = Command::new(&self.exe);
        cmd.args(&self.flags)
            .args(["--replica", &n.to_string(), "--generation", &generation.to_string()])
            .arg("--log")
            .arg(self.dir.join(format!("r{n}.events")))
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "leasehold=warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(stderr.try_clone()?)
            .stderr(stderr)
            .kill_on_drop(true);
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        if let Some(port) = self.proxy_ports.get(n) {
            cmd.args(["--via-port", &port.to_string()]);
        }
        self.replicas[n] = (Some(cmd.spawn()?), generation);
        Ok(())
    }

    /// The holder id replica `n` runs as now (`r<n>-g<generation>`), if it
    /// runs.
    pub fn holder(&self, n: usize) -> Option<String> {
        let (child, generation) = self.replicas.get(n)?;
        child.as_ref()?;
        Some(format!("r{n}-g{generation}"))
    }

    pub fn pid(&self, n: usize) -> Option<u32> {
        self.replicas[n].0.as_ref().and_then(|c| c.id())
    }

    /// The directory of the run's logs.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Graceful: SIGTERM replica `n`, wait up to `grace`, then SIGKILL.
    pub async fn stop(&mut self, n: usize, grace: Duration) {
        if let Some(mut child) = self.replicas[n].0.take() {
            if let Some(pid) = child.id() {
                signal(pid, "-TERM");
            }
            if tokio::time::timeout(grace, child.wait()).await.is_err() {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
        }
    }

    pub async fn kill(&mut self, n: usize) {
        if let Some(mut child) = self.replicas[n].0.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }

    /// Graceful: SIGCONT (in case), SIGTERM, wait up to `grace`, then SIGKILL.
    /// Returns how many replicas exited on their own.
    pub async fn shutdown(&mut self, grace: Duration) -> usize {
        for n in 0..self.len() {
            if let Some(pid) = self.pid(n) {
                signal(pid, "-CONT");
                signal(pid, "-TERM");
            }
        }
        let deadline = Instant::now() + grace;
        let mut clean = 0;
        for (child, _) in &mut self.replicas {
            if let Some(mut c) = child.take() {
                match tokio::time::timeout_at(deadline, c.wait()).await {
                    Ok(Ok(status)) if status.success() => clean += 1,
                    _ => {
                        let _ = c.start_kill();
                        let _ = c.wait().await;
                    }
                }
            }
        }
        clean
    }
}

/// `kill -SIG pid`, as an operator would.
pub fn signal(pid: u32, sig: &str) {
    let _ = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Everything a fault needs.
pub struct Chaos {
    pub fleet: tokio::sync::Mutex<Fleet>,
    pub proxies: Vec<Proxy>,
    pub cluster: Option<Arc<Servers>>,
    pub admin: PgPool,
    pub lease: Duration,
    pub period: Duration,
    /// The rates a `clock-rate` fault picks from (`--clock-rates`).
    pub clock_rates: Vec<f64>,
    busy_replicas: Mutex<HashSet<usize>>,
    pub(crate) busy_pg: Mutex<bool>,
    /// The standby replicates synchronously (`--standby sync`).
    pub synchronous_standby: bool,
    /// The run's promotion, once it happened (`promote.rs`).
    pub promotion: Mutex<Option<Promotion>>,
    /// Replicas under a clock fault (`clock.rs`).
    pub(crate) clocked: Mutex<HashSet<usize>>,
    pub records: Mutex<Vec<FaultRecord>>,
    pub skipped: Mutex<Vec<FaultKind>>,
    /// Every `kill-holder`: whom it killed, holding which run, and when.
    pub holder_kills: Mutex<Vec<HolderKill>>,
}

/// One `kill-holder` fault: the holder id of the replica killed, the key
/// of the run it held, and the server's `clock_timestamp()` read just before
/// the SIGKILL (µs since the epoch), from which the drill measures the
/// key's takeover (`drill.rs`).
#[derive(Debug, Clone)]
pub struct HolderKill {
    pub holder: String,
    pub key: String,
    pub at: i64,
}

/// The runs in progress, with their holders (`kill-holder`):
/// - `run_open`: a run was claimed on this row and its release not yet
///   written (schema version 9);
/// - `expires_at > clock_timestamp()`: its lease is live on the server's
///   clock — a row whose holder already died and that waits for its
///   expiry (or its takeover) is not a run in progress, and its holder id
///   is no replica's any more.
const RUNS_IN_PROGRESS: &str = "SELECT key, holder FROM leasehold_lease
  WHERE run_open AND expires_at > clock_timestamp() ORDER BY key";

/// The server's clock, µs since the epoch: the instant of a kill.
const SERVER_NOW: &str = "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8";

impl Chaos {
    pub fn new(
        fleet: Fleet,
        proxies: Vec<Proxy>,
        cluster: Option<Arc<Servers>>,
        admin: PgPool,
        (lease, period): (Duration, Duration),
    ) -> Chaos {
        Chaos {
            fleet: tokio::sync::Mutex::new(fleet),
            proxies,
            cluster,
            admin,
            lease,
            period,
            clock_rates: Vec::new(),
            busy_replicas: Mutex::new(HashSet::new()),
            busy_pg: Mutex::new(false),
            synchronous_standby: false,
            promotion: Mutex::new(None),
            clocked: Mutex::new(HashSet::new()),
            records: Mutex::new(Vec::new()),
            skipped: Mutex::new(Vec::new()),
            holder_kills: Mutex::new(Vec::new()),
        }
    }

    /// Injects faults until `until`, one every `gap` (drawn from the seed),
    /// then waits for the faults in flight to heal. Returns when all have
    /// (with no kinds: at `until`).
    pub async fn run(self: &Arc<Self>, seed: u64, until: Instant, gap: (Duration, Duration), kinds: &[FaultKind]) {
        let mut rng = SplitMix64::new(seed);
        let mut tasks = tokio::task::JoinSet::new();
        if !kinds.is_empty() {
            loop {
                let wait = rng.between(gap.0, gap.1);
                let kind = kinds[rng.below(kinds.len())];
                let (pick, frac) = (rng.next_u64(), rng.unit());
                if Instant::now() + wait >= until {
                    break;
                }
                tokio::time::sleep(wait).await;
                let chaos = self.clone();
                tasks.spawn(async move { chaos.inject(kind, pick, frac).await });
            }
        } else {
            // `--faults none`: the same observation time, without faults.
            tokio::time::sleep_until(until).await;
        }
        while tasks.join_next().await.is_some() {}
    }

    pub(crate) fn skip(&self, kind: FaultKind) {
        self.skipped.lock().unwrap_or_else(|p| p.into_inner()).push(kind);
    }

    pub(crate) fn record(&self, kind: FaultKind, target: String, start_us: i64) {
        let rec = FaultRecord {
            kind,
            target,
            start_us,
            end_us: now_us(),
        };
        println!(
            "  fault {:<15} {:<14} {:>6} ms",
            kind.name(),
            rec.target,
            (rec.end_us - rec.start_us) / 1000
        );
        self.records.lock().unwrap_or_else(|p| p.into_inner()).push(rec);
    }

    /// The leases held right now, read through the library (errors and
    /// a slow server count as none: the fault is then skipped).
    pub(crate) async fn live_leases(&self) -> Vec<LeaseInfo> {
        let store = LeaseStore::new(self.admin.clone());
        let keys = tokio::time::timeout(Duration::from_secs(1), store.records().list(""))
            .await
            .ok()
            .and_then(|r| r.ok())
            .unwrap_or_default();
        keys.into_iter()
            .map(|status| status.lease)
            .filter(LeaseInfo::is_held)
            .collect()
    }

    /// Replicas whose holder currently has a live lease (running a job).
    async fn running_replicas(&self) -> HashSet<usize> {
        self.live_leases()
            .await
            .iter()
            .filter_map(|l| l.holder.strip_prefix('r')?.split('-').next()?.parse().ok())
            .collect()
    }

    /// A free replica, preferably one running a job; marked busy. Runs
    /// start just after each slot boundary (slots are aligned on the epoch),
    /// so this first waits until `frac` of the way through the first part
    /// of a slot, when runs are in progress: the fault lands mid-run.
    pub(crate) async fn claim_replica(&self, pick: u64, frac: f64) -> Option<usize> {
        self.claim(pick, frac, false).await
    }

    /// Like [`Chaos::claim_replica`], but only a replica whose holder has a
    /// live lease: its runtime has started (its signal handlers are set) and
    /// it is running a job. `None` when no free replica is.
    pub(crate) async fn claim_running_replica(&self, pick: u64, frac: f64) -> Option<usize> {
        self.claim(pick, frac, true).await
    }

    async fn claim(&self, pick: u64, frac: f64, only_running: bool) -> Option<usize> {
        let period = self.period.as_micros() as i64;
        let phase = now_us().rem_euclid(period.max(1));
        let target = (period as f64 * (0.1 + 0.35 * frac)) as i64;
        let wait = (target - phase).rem_euclid(period.max(1));
        tokio::time::sleep(Duration::from_micros(wait as u64)).await;
        let running = self.running_replicas().await;
        let n = self.fleet.lock().await.len();
        let mut busy = self.busy_replicas.lock().unwrap_or_else(|p| p.into_inner());
        // Never take the last free replica: someone must be left to run jobs.
        let free: Vec<usize> = (0..n).filter(|r| !busy.contains(r)).collect();
        if free.len() <= 1 {
            return None;
        }
        let preferred: Vec<usize> = free.iter().copied().filter(|r| running.contains(r)).collect();
        if only_running && preferred.is_empty() {
            return None;
        }
        let pool = if preferred.is_empty() { &free } else { &preferred };
        let chosen = pool[(pick % pool.len() as u64) as usize];
        busy.insert(chosen);
        Some(chosen)
    }

    /// The replica that holds a run in progress (read from the lease table,
    /// [`RUNS_IN_PROGRESS`]), with that run's key and the holder id; marked
    /// busy. Waits for the middle of a run first, as [`Chaos::claim`] does;
    /// the `pick`th such run when there are several. `None` when no run is
    /// in progress on a free replica (or its lease row names a holder that
    /// no longer runs: a replica killed earlier whose key still waits).
    async fn claim_holder(&self, pick: u64, frac: f64) -> Option<(usize, String, String)> {
        let period = self.period.as_micros() as i64;
        let phase = now_us().rem_euclid(period.max(1));
        let target = (period as f64 * (0.1 + 0.35 * frac)) as i64;
        let wait = (target - phase).rem_euclid(period.max(1));
        tokio::time::sleep(Duration::from_micros(wait as u64)).await;
        let runs: Vec<(String, String)> = tokio::time::timeout(
            Duration::from_secs(1),
            sqlx::query_as(RUNS_IN_PROGRESS).fetch_all(&self.admin),
        )
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or_default();
        let fleet = self.fleet.lock().await;
        let mut busy = self.busy_replicas.lock().unwrap_or_else(|p| p.into_inner());
        // Never take the last free replica: someone must be left to run jobs.
        if (0..fleet.len()).filter(|r| !busy.contains(r)).count() <= 1 {
            return None;
        }
        let first = (pick % runs.len().max(1) as u64) as usize;
        let (key, holder, n) = (0..runs.len())
            .map(|i| &runs[(first + i) % runs.len()])
            .find_map(|(key, holder)| {
                let n = crate::check::Window::replica_of(holder)?;
                let current = fleet.holder(n).is_some_and(|h| h == *holder);
                (current && !busy.contains(&n)).then(|| (key.clone(), holder.clone(), n))
            })?;
        busy.insert(n);
        Some((n, key, holder))
    }

    pub(crate) fn release_replica(&self, n: usize) {
        self.busy_replicas.lock().unwrap_or_else(|p| p.into_inner()).remove(&n);
    }

    /// A replica for a proxy fault, with its proxy; `None` (and the fault
    /// counted as skipped) if no replica is free or it has no proxy.
    pub(crate) async fn claim_proxied_replica(&self, kind: FaultKind, pick: u64, frac: f64) -> Option<(usize, Proxy)> {
        let Some(n) = self.claim_replica(pick, frac).await else {
            self.skip(kind);
            return None;
        };
        match self.proxies.get(n).cloned() {
            Some(proxy) => Some((n, proxy)),
            None => {
                self.release_replica(n);
                self.skip(kind);
                None
            }
        }
    }

    pub(crate) fn try_flag(flag: &Mutex<bool>) -> bool {
        let mut f = flag.lock().unwrap_or_else(|p| p.into_inner());
        !std::mem::replace(&mut *f, true)
    }

    pub(crate) fn clear_flag(flag: &Mutex<bool>) {
        *flag.lock().unwrap_or_else(|p| p.into_inner()) = false;
    }

    async fn inject(&self, kind: FaultKind, pick: u64, frac: f64) {
        let start = now_us();
        match kind {
            FaultKind::Stop => {
                let Some(n) = self.claim_replica(pick, frac).await else {
                    return self.skip(kind);
                };
                let start = now_us();
                let pid = self.fleet.lock().await.pid(n);
                if let Some(pid) = pid {
                    // Longer than the lease: others take over meanwhile.
                    let pause = self.lease.mul_f64(1.2 + 1.3 * frac);
                    signal(pid, "-STOP");
                    tokio::time::sleep(pause).await;
                    signal(pid, "-CONT");
                    self.record(kind, format!("r{n}"), start);
                } else {
                    self.skip(kind);
                }
                self.release_replica(n);
            }
            FaultKind::Kill => {
                let Some(n) = self.claim_replica(pick, frac).await else {
                    return self.skip(kind);
                };
                let start = now_us();
                self.fleet.lock().await.kill(n).await;
                tokio::time::sleep(Duration::from_millis(200).mul_f64(1.0 + 7.0 * frac)).await;
                if let Err(e) = self.fleet.lock().await.spawn(n) {
                    eprintln!("restarting replica {n} failed: {e}");
                }
                self.record(kind, format!("r{n}"), start);
                self.release_replica(n);
            }
            FaultKind::KillHolder => {
                let Some((n, key, holder)) = self.claim_holder(pick, frac).await else {
                    return self.skip(kind);
                };
                let start = now_us();
                // The kill's instant on the server's clock, just before it.
                let at = sqlx::query_scalar::<_, i64>(SERVER_NOW).fetch_one(&self.admin).await;
                self.fleet.lock().await.kill(n).await;
                match at {
                    Ok(at) => self
                        .holder_kills
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(HolderKill {
                            holder,
                            key: key.clone(),
                            at,
                        }),
                    Err(e) => eprintln!("kill-holder: reading the server's clock failed ({e}); takeover not measured"),
                }
                tokio::time::sleep(Duration::from_millis(200).mul_f64(1.0 + 7.0 * frac)).await;
                if let Err(e) = self.fleet.lock().await.spawn(n) {
                    eprintln!("restarting replica {n} failed: {e}");
                }
                self.record(kind, format!("r{n} {key}"), start);
                self.release_replica(n);
            }
            FaultKind::Terminate => {
                let backends = sqlx::query_as::<_, (i32, String)>(
                    "SELECT pid, application_name FROM pg_stat_activity
                      WHERE datname = current_database() AND application_name LIKE 'chaos-r%'
                        AND backend_type = 'client backend' ORDER BY pid",
                )
                .fetch_all(&self.admin)
                .await
                .unwrap_or_default();
                if backends.is_empty() {
                    return self.skip(kind);
                }
                let k = 1 + (pick % 4) as usize;
                let first = ((pick >> 8) % backends.len() as u64) as usize;
                let mut killed = 0;
                // Whose backends they were (`chaos-r3`, `chaos-r3-hold`),
                // for the checker (`check::Reach`); `None` once one is not
                // a replica's.
                let mut replicas = Some(std::collections::BTreeSet::new());
                for i in 0..k.min(backends.len()) {
                    let (pid, name) = &backends[(first + i * 7) % backends.len()];
                    let done = sqlx::query_scalar::<_, bool>("SELECT pg_terminate_backend($1)")
                        .bind(pid)
                        .fetch_one(&self.admin)
                        .await;
                    if matches!(done, Ok(true)) {
                        killed += 1;
                        let replica = name
                            .strip_prefix("chaos-r")
                            .and_then(|n| n.split('-').next()?.parse::<usize>().ok());
                        replicas = replicas.zip(replica).map(|(mut set, r)| {
                            set.insert(r);
                            set
                        });
                    }
                }
                let of = match replicas {
                    Some(set) if !set.is_empty() => {
                        let names: Vec<String> = set.iter().map(|r| format!("r{r}")).collect();
                        format!(" of {}", names.join(","))
                    }
                    _ => String::new(),
                };
                self.record(kind, format!("{killed} backends{of}"), start);
            }
            FaultKind::Expire => {
                // Mid-run, like the replica faults; any live lease will do.
                let period = self.period.as_micros() as i64;
                let phase = now_us().rem_euclid(period.max(1));
                let target = (period as f64 * (0.1 + 0.35 * frac)) as i64;
                tokio::time::sleep(Duration::from_micros((target - phase).rem_euclid(period.max(1)) as u64)).await;
                let start = now_us();
                let live = self.live_leases().await;
                if live.is_empty() {
                    return self.skip(kind);
                }
                let key = &live[(pick % live.len() as u64) as usize].key;
                let expired = LeaseStore::new(self.admin.clone()).expire_for_test(key).await;
                match expired {
                    Ok(Some(true)) => self.record(kind, key.clone(), start),
                    _ => self.skip(kind),
                }
            }
            FaultKind::BeginDrop => self.begin_drop(pick, frac).await,
            FaultKind::RawBegin => self.raw_begin(pick, frac).await,
            FaultKind::StopInFence => self.stop_in_fence(pick, frac).await,
            FaultKind::ClockRate => self.clock_rate(pick, frac).await,
            FaultKind::ClockStep => self.clock_step(pick, frac).await,
            FaultKind::Promote => self.promote(frac).await,
            FaultKind::PgFast | FaultKind::PgImmediate => {
                let Some(cluster) = self.cluster.clone() else {
                    return self.skip(kind);
                };
                if !Self::try_flag(&self.busy_pg) {
                    return self.skip(kind);
                }
                let immediate = kind == FaultKind::PgImmediate;
                let down = Duration::from_millis(200).mul_f64(1.0 + 4.0 * frac);
                let restarted = tokio::task::spawn_blocking(move || {
                    let cluster = cluster.current();
                    cluster.stop(immediate)?;
                    std::thread::sleep(down);
                    let mut last = Ok(());
                    for _ in 0..5 {
                        last = cluster.start_server();
                        if last.is_ok() {
                            break;
                        }
                        std::thread::sleep(Duration::from_secs(1));
                    }
                    last
                })
                .await;
                match restarted {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => eprintln!("PostgreSQL restart failed: {e}"),
                    Err(e) => eprintln!("PostgreSQL restart task failed: {e}"),
                }
                self.record(kind, "postgres".into(), start);
                Self::clear_flag(&self.busy_pg);
            }
            FaultKind::ProxyDelay | FaultKind::ProxyBlackhole | FaultKind::ProxyReset => {
                let Some((n, proxy)) = self.claim_proxied_replica(kind, pick, frac).await else {
                    return;
                };
                let start = now_us();
                let target = match kind {
                    FaultKind::ProxyDelay => {
                        let delay = Duration::from_millis(50 + (pick >> 16) % 550);
                        proxy.set(Mode::Delay(delay));
                        tokio::time::sleep(Duration::from_secs(2).mul_f64(1.0 + 2.0 * frac)).await;
                        proxy.set(Mode::Normal);
                        format!("r{n} +{}ms", delay.as_millis())
                    }
                    FaultKind::ProxyBlackhole => {
                        proxy.set(Mode::Blackhole);
                        tokio::time::sleep(self.lease.mul_f64(0.8 + 1.7 * frac)).await;
                        let reset = (pick >> 16).is_multiple_of(2);
                        if reset {
                            proxy.reset();
                        }
                        proxy.set(Mode::Normal);
                        format!("r{n} {}", if reset { "+reset" } else { "+resume" })
                    }
                    _ => {
                        proxy.reset();
                        format!("r{n}")
                    }
                };
                self.record(kind, target, start);
                self.release_replica(n);
            }
        }
    }
}
