//! The Rust client of the peer benchmark (`benches/peers/run.py` drives it):
//! leasehold or River for Rust working no-op or 1 ms jobs on one database,
//! answering the driver's commands on stdin, one per line:
//!
//! - `mark`: prints `mark <runs started so far> <seconds since start>`;
//! - `probe <n>`: triggers `n` probe runs one after the other (each once the
//!   previous started, 20–80 ms apart) and prints `probe <µs> <µs> …`, the
//!   trigger → start time of each (`-1` for one that did not start within 5 s;
//!   after three of those in a row it stops);
//! - `stop`: shuts down and prints `stopped`.
//!
//! Usage: `peers-client <leasehold|leasehold_full|leasehold_limited|river> <url> <body µs> <size> [feed]`:
//!
//! - leasehold: `size` keys per runtime ([`RUNTIMES`] runtimes all
//!   registering the same keys, every 100 ms, defaults, history on); `feed`
//!   is not used. `leasehold_full`: the same with every key's history ring
//!   filled first ([`prefill_ring`]).
//! - river: `size` jobs inserted (by SQL, one statement per 50,000, copying
//!   one job the client inserted) before the client starts: the backlog it
//!   drains; `feed` jobs inserted the same way every 100 ms while it runs.
//!
//! Runs are counted when their body starts. The driver reads the CPU time
//! of this process and of the server from /proc, and the WAL from the server.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leasehold::{FenceGuard, FencedJob, JobError, JobSettings, Runtime, Schedule};
use riverqueue::{BoxError, Job, JobArgs, QueueConfig, WorkContext, WorkOutcome, Workers};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::Mutex;

/// leasehold runtimes in the fleet (as the throughput scenario of
/// `benches/leasehold`).
const RUNTIMES: usize = 4;
/// Connections of each leasehold runtime's pool (as that scenario).
const LEASEHOLD_POOL: u32 = 4;
/// River's own benchmark (`riverqueue bench` of riverqueue-cli 0.5.0):
/// 2,000 workers, a pool of 50, a fetch cooldown of 2 ms and a fetch poll
/// interval of 20 ms.
const RIVER_WORKERS: usize = 2_000;
const RIVER_POOL: u32 = 50;
const RIVER_FETCH_COOLDOWN: Duration = Duration::from_millis(2);
const RIVER_FETCH_POLL: Duration = Duration::from_millis(20);
const PERIOD: Duration = Duration::from_millis(100);
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What every system's job shares: runs started, and the probe's starts.
#[derive(Default)]
struct Counters {
    runs: AtomicU64,
    probe_starts: Mutex<Vec<Instant>>,
}

fn now_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_micros() as i64
}

async fn body(work: Duration) {
    if !work.is_zero() {
        tokio::time::sleep(work).await;
    }
}

// ---------------------------------------------------------------- leasehold

struct LhJob {
    key: String,
    work: Duration,
    counters: Arc<Counters>,
}

impl FencedJob for LhJob {
    fn name(&self) -> &str {
        "peers"
    }
    fn key(&self) -> String {
        self.key.clone()
    }
    fn settings(&self) -> JobSettings {
        JobSettings::new(Schedule::every(PERIOD)).lease(Duration::from_secs(10))
    }
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        self.counters.runs.fetch_add(1, Ordering::Relaxed);
        body(self.work).await;
        Ok(())
    }
}

struct LhProbe {
    counters: Arc<Counters>,
}

impl FencedJob for LhProbe {
    fn name(&self) -> &str {
        "probe"
    }
    fn key(&self) -> String {
        "peers-probe".to_owned()
    }
    fn settings(&self) -> JobSettings {
        JobSettings::new(Schedule::Manual)
    }
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        self.counters.probe_starts.lock().await.push(Instant::now());
        Ok(())
    }
}

enum Jobs {
    Leasehold(LhJob),
    Probe(LhProbe),
}

impl FencedJob for Jobs {
    fn name(&self) -> &str {
        match self {
            Jobs::Leasehold(j) => j.name(),
            Jobs::Probe(j) => j.name(),
        }
    }
    fn key(&self) -> String {
        match self {
            Jobs::Leasehold(j) => j.key(),
            Jobs::Probe(j) => j.key(),
        }
    }
    fn settings(&self) -> JobSettings {
        match self {
            Jobs::Leasehold(j) => j.settings(),
            Jobs::Probe(j) => j.settings(),
        }
    }
    async fn run(&self, guard: FenceGuard) -> Result<(), JobError> {
        match self {
            Jobs::Leasehold(j) => j.run(guard).await,
            Jobs::Probe(j) => j.run(guard).await,
        }
    }
}

async fn start_leasehold(url: &str, keys: usize, work: Duration, counters: &Arc<Counters>) -> Vec<Runtime> {
    let mut runtimes = Vec::new();
    // PEERS_RUNTIMES: another fleet size, for a what-if run.
    let runtimes_n = std::env::var("PEERS_RUNTIMES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(RUNTIMES);
    for i in 0..runtimes_n {
        let pool = PgPoolOptions::new()
            .max_connections(LEASEHOLD_POOL)
            .connect(url)
            .await
            .expect("connect");
        let mut b = Runtime::builder(pool).holder(format!("peers-r{i}"));
        // PEERS_MAX_RUNS: another `max_concurrent_runs`, for a what-if run.
        if let Some(runs) = std::env::var("PEERS_MAX_RUNS").ok().and_then(|n| n.parse().ok()) {
            b = b.max_concurrent_runs(runs);
        }
        for k in 0..keys {
            b = b.register(Jobs::Leasehold(LhJob {
                key: format!("peers-{k}"),
                work,
                counters: counters.clone(),
            }));
        }
        b = b.register(Jobs::Probe(LhProbe {
            counters: counters.clone(),
        }));
        runtimes.push(b.start().await.expect("runtime starts"));
    }
    runtimes
}

/// `leasehold_limited`: the benchmark's job under a fleet-wide limit of one
/// place per key, so the limit never holds a run back: what the limit's
/// mechanism costs a run (a place taken by each claim, kept by each renewal
/// and freed by each release), with the same work as `leasehold`.
async fn limit_every_key(runtime: &Runtime, keys: usize) {
    let places = u32::try_from(keys).expect("keys").clamp(1, leasehold::operator::MAX_FLEET_LIMIT);
    let set = runtime
        .store()
        .controls()
        .set_limit("peers", places, "peers-client")
        .await
        .expect("set the limit");
    assert!(matches!(set, leasehold::operator::LimitSet::Set { .. }), "{set:?}");
}

/// `leasehold_full`: every key's history ring (the default 100 places)
/// already full before the runtimes start, as after a while in production:
/// each release then rewrites its place in place (an `UPDATE`) instead of
/// inserting it, which a fresh database only reaches after 100 runs of
/// every key (minutes at the ceiling, longer than a window).
async fn prefill_ring(url: &str, keys: usize) {
    let pool = PgPoolOptions::new().max_connections(1).connect(url).await.expect("connect");
    leasehold::migrate(&pool).await.expect("migrate");
    sqlx::query(
        "INSERT INTO leasehold_run (key, slot, run_no, job_name, fence, holder, scheduled_for, started_at, ended_at,
                                    outcome)
         SELECT 'peers-' || g, s, 0, 'peers', 0, 'prefill', now(), now(), now(), 'succeeded'
           FROM generate_series(0, $1 - 1) AS g, generate_series(0, 99) AS s",
    )
    .bind(keys as i32)
    .execute(&pool)
    .await
    .expect("prefill the history ring");
    sqlx::query("VACUUM ANALYZE leasehold_run").execute(&pool).await.expect("vacuum");
    pool.close().await;
}

// ---------------------------------------------------------------- River

#[derive(Clone, Debug, Deserialize, JobArgs, Serialize)]
#[river(kind = "peers_work")]
struct Work {
    n: i64,
}

#[derive(Clone, Debug, Deserialize, JobArgs, Serialize)]
#[river(kind = "peers_probe")]
struct Probe {
    inserted_us: i64,
}

/// The columns of `river_job` to copy (all but `id` and generated ones),
/// and what to copy into them: the template's value, except for the state
/// of an attempt, which starts afresh (the template may have been worked).
async fn copy_columns(pool: &PgPool) -> (String, String) {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT column_name::text FROM information_schema.columns
          WHERE table_name = 'river_job' AND column_name <> 'id' AND is_generated = 'NEVER'
          ORDER BY ordinal_position",
    )
    .fetch_all(pool)
    .await
    .expect("columns");
    let values = names
        .iter()
        .map(|c| match c.as_str() {
            "state" => "'available'".to_owned(),
            "attempt" => "0".to_owned(),
            "attempted_at" | "attempted_by" | "finalized_at" | "errors" => "NULL".to_owned(),
            "scheduled_at" | "created_at" => "now()".to_owned(),
            other => format!("\"{other}\""),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let columns = names.iter().map(|c| format!("\"{c}\"")).collect::<Vec<_>>().join(", ");
    (columns, values)
}

/// Inserts `n` copies of the `peers_work` job `template` by SQL, in
/// statements of at most 50,000 rows.
async fn copy_jobs(pool: &PgPool, (columns, values): &(String, String), template: i64, mut n: usize) {
    while n > 0 {
        let now = n.min(50_000);
        let sql = format!(
            "INSERT INTO river_job ({columns}) SELECT {values} FROM river_job, generate_series(1, $2) WHERE id = $1"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(template)
            .bind(now as i32)
            .execute(pool)
            .await
            .expect("insert jobs");
        n -= now;
    }
}

async fn start_river(
    url: &str,
    backlog: usize,
    feed: usize,
    work: Duration,
    counters: &Arc<Counters>,
) -> (riverqueue::Client, riverqueue::RunHandle, Option<tokio::task::JoinHandle<()>>) {
    let pool = PgPoolOptions::new()
        .max_connections(RIVER_POOL)
        .connect(url)
        .await
        .expect("connect");
    riverqueue::migrate::PostgresMigrator::new(pool.clone())
        .migrate_up()
        .await
        .expect("River's migrations");
    let mut workers = Workers::new();
    let c = counters.clone();
    workers
        .add_fn(move |_ctx: WorkContext, _job: Job<Work>| {
            let c = c.clone();
            async move {
                c.runs.fetch_add(1, Ordering::Relaxed);
                body(work).await;
                Ok::<_, BoxError>(WorkOutcome::Complete)
            }
        })
        .expect("worker");
    let c = counters.clone();
    workers
        .add_fn(move |_ctx: WorkContext, _job: Job<Probe>| {
            let c = c.clone();
            async move {
                c.probe_starts.lock().await.push(Instant::now());
                Ok::<_, BoxError>(WorkOutcome::Complete)
            }
        })
        .expect("worker");
    let client = riverqueue::Client::builder(pool.clone())
        .workers(workers)
        .queue(
            riverqueue::QUEUE_DEFAULT,
            QueueConfig::new(RIVER_WORKERS)
                .with_fetch_cooldown(RIVER_FETCH_COOLDOWN)
                .with_fetch_poll_interval(RIVER_FETCH_POLL),
        )
        .build()
        .expect("River client");
    // One job through River's own insert, copied by SQL (River's insert_many
    // would cost far more than the work measured, and it is not measured).
    let template = client.insert(Work { n: 0 }).await.expect("insert").id();
    let columns = copy_columns(&pool).await;
    copy_jobs(&pool, &columns, template, backlog.saturating_sub(1)).await;
    sqlx::query("VACUUM ANALYZE river_job").execute(&pool).await.expect("vacuum");
    let mut run = client.start().expect("River starts");
    run.wait_ready().await.expect("River ready");
    let feeder = (feed > 0).then(|| {
        let pool = pool.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(PERIOD);
            loop {
                tick.tick().await;
                copy_jobs(&pool, &columns, template, feed).await;
            }
        })
    });
    (client, run, feeder)
}

// ---------------------------------------------------------------- driver

enum System {
    Leasehold(Vec<Runtime>),
    River(riverqueue::Client, riverqueue::RunHandle, Option<tokio::task::JoinHandle<()>>),
}

impl System {
    async fn trigger(&self, i: usize) {
        match self {
            System::Leasehold(rts) => rts[i % rts.len()].trigger("peers-probe").await.expect("trigger"),
            System::River(client, _, _) => {
                client.insert(Probe { inserted_us: now_us() }).await.expect("insert probe");
            }
        }
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 5 {
        eprintln!("usage: peers-client <leasehold|leasehold_full|leasehold_limited|river> <url> <body µs> <size> [feed]");
        std::process::exit(2);
    }
    let url = &args[2];
    let work = Duration::from_micros(args[3].parse().expect("body µs"));
    let size: usize = args[4].parse().expect("size");
    let feed: usize = args.get(5).map_or(0, |f| f.parse().expect("feed"));
    let counters = Arc::new(Counters::default());
    let t0 = Instant::now();
    let system = match args[1].as_str() {
        "leasehold" => System::Leasehold(start_leasehold(url, size, work, &counters).await),
        "leasehold_full" => {
            prefill_ring(url, size).await;
            System::Leasehold(start_leasehold(url, size, work, &counters).await)
        }
        "leasehold_limited" => {
            let runtimes = start_leasehold(url, size, work, &counters).await;
            limit_every_key(&runtimes[0], size).await;
            System::Leasehold(runtimes)
        }
        "river" => {
            let (c, r, f) = start_river(url, size, feed, work, &counters).await;
            System::River(c, r, f)
        }
        other => panic!("unknown system {other}"),
    };
    println!("ready");
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["mark"] => println!(
                "mark {} {:.6}",
                counters.runs.load(Ordering::Relaxed),
                t0.elapsed().as_secs_f64()
            ),
            ["probe", n] => {
                let n: usize = n.parse().expect("probe count");
                let mut out = Vec::new();
                for i in 0..n {
                    let seen = counters.probe_starts.lock().await.len();
                    let t = Instant::now();
                    system.trigger(i).await;
                    let mut got = None;
                    while t.elapsed() < PROBE_TIMEOUT {
                        if let Some(s) = counters.probe_starts.lock().await.get(seen) {
                            got = Some(*s - t);
                            break;
                        }
                        tokio::time::sleep(Duration::from_micros(200)).await;
                    }
                    out.push(got.map_or(-1, |d| d.as_micros() as i64).to_string());
                    // Three misses in a row: the system is past its capacity, stop probing.
                    if out.len() >= 3 && out[out.len() - 3..].iter().all(|x| x == "-1") {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20 + (i as u64 * 37) % 60)).await;
                }
                println!("probe {}", out.join(" "));
            }
            ["stop"] => break,
            _ => eprintln!("unknown command {line:?}"),
        }
    }
    match system {
        System::Leasehold(rts) => {
            for rt in rts {
                rt.shutdown().await;
            }
        }
        System::River(_client, mut run, feeder) => {
            if let Some(f) = feeder {
                f.abort();
            }
            let _ = tokio::time::timeout(Duration::from_secs(10), run.stop()).await;
        }
    }
    println!("stopped");
}
