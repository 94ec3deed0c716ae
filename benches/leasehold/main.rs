//! leasehold's benchmarks (docs/design.md §9; the baselines are described in §8): every scenario side by side with its
//! baseline, interleaved (A B A B …), as Markdown tables.
//!
//! ```sh
//! cargo bench --bench leasehold               # full run
//! cargo bench --bench leasehold -- --smoke    # tiny sizes, for CI (about a minute)
//! cargo bench --bench leasehold -- renewal    # only the scenarios whose name contains "renewal"
//! cargo bench --bench leasehold -- idle --max-keys 10000   # skip idle fleets of more keys
//! ```
//!
//! One module per scenario; `setup` (the context, databases, jobs, runtimes),
//! `report` (tables, statistics) and `stats` (`pg_stat_statements`, CPU,
//! memory) are shared, and `fleet` runs the many-runtime scenarios
//! (contention, throughput).
//!
//! Unless `DATABASE_URL` is set, a throwaway *durable* PostgreSQL cluster is
//! started (fsync and synchronous commit on), so every committed write pays
//! for its WAL flush. Each scenario gets its own fresh database.
//!
//! The run exits non-zero only if a *safety* invariant is violated (two runs
//! of one key in one schedule slot, or a stalled holder still running when
//! another replica takes over). Performance targets are reported, never
//! enforced.

mod contention;
mod fleet;
mod handover;
mod idle;
mod kinds;
mod memory;
mod pool_pressure;
mod renewal;
mod report;
mod round_trip;
mod setup;
mod startup;
mod stats;
mod throughput;
mod wakeup;

use std::sync::atomic::{AtomicBool, Ordering};

use leasehold_testkit::PgCluster;
use sqlx::ConnectOptions;

use crate::report::{loadavg, progress, started_at};
use crate::setup::Bench;

const SCENARIOS: [&str; 11] = [
    "round-trip",
    "renewal",
    "pool-pressure",
    "contention",
    "handover",
    "throughput",
    "idle",
    "startup",
    "memory",
    "wakeup",
    "kinds",
];

#[tokio::main]
async fn main() {
    started_at();
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let (max_keys, filters) = parse_args(&args);
    let selected = |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()));
    if let Some(unknown) = filters
        .iter()
        .find(|f| !SCENARIOS.iter().any(|s| s.contains(f.as_str())))
    {
        eprintln!("no scenario matches {unknown:?}; scenarios: {}", SCENARIOS.join(", "));
        std::process::exit(2);
    }
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }

    let cluster = match std::env::var("DATABASE_URL") {
        Ok(_) => None,
        Err(_) => {
            progress("starting a throwaway durable PostgreSQL (fsync on)");
            let started = tokio::task::spawn_blocking(PgCluster::start_durable)
                .await
                .expect("start_durable task");
            Some(started.unwrap_or_else(|e| panic!("{e}")))
        }
    };
    let server = match &cluster {
        Some(c) => c.options(),
        None => leasehold_testkit::server_options(),
    };
    let bench = Bench {
        smoke,
        server,
        violated: AtomicBool::new(false),
        max_keys,
        alone: SCENARIOS.iter().filter(|s| selected(s)).count() == 1,
    };
    header(&bench, &args, cluster.is_some()).await;

    if selected("round-trip") {
        round_trip::round_trip(&bench).await;
    }
    if selected("renewal") {
        renewal::renewal(&bench).await;
    }
    if selected("pool-pressure") {
        pool_pressure::pool_pressure(&bench).await;
    }
    if selected("contention") {
        contention::contention(&bench).await;
    }
    if selected("handover") {
        handover::handover(&bench).await;
    }
    if selected("throughput") {
        throughput::throughput(&bench).await;
    }
    if selected("idle") {
        idle::idle(&bench).await;
    }
    if selected("startup") {
        startup::startup(&bench).await;
    }
    if selected("memory") {
        memory::memory(&bench).await;
    }
    if selected("wakeup") {
        wakeup::wakeup(&bench).await;
    }
    if selected("kinds") {
        kinds::kinds(&bench).await;
    }
    println!(
        "_Finished in {:.0} s; load average at the end: {}._",
        started_at().elapsed().as_secs_f64(),
        loadavg()
    );
    drop(cluster);
    if bench.violated.load(Ordering::SeqCst) {
        eprintln!("a safety invariant was violated (see above)");
        std::process::exit(1);
    }
}

/// `--max-keys N` (or `--max-keys=N`), and the scenario filters: every
/// argument that is not an option. Exits with status 2 on a bad value.
fn parse_args(args: &[String]) -> (Option<usize>, Vec<&String>) {
    let bad = |v: &str| -> ! {
        eprintln!("--max-keys needs a number of keys, got {v:?}");
        std::process::exit(2)
    };
    let number = |v: &str| v.replace(['_', ','], "").parse::<usize>().unwrap_or_else(|_| bad(v));
    let mut max_keys = None;
    let mut filters = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--max-keys" {
            max_keys = Some(number(it.next().map_or("", String::as_str)));
        } else if let Some(v) = arg.strip_prefix("--max-keys=") {
            max_keys = Some(number(v));
        } else if !arg.starts_with('-') {
            filters.push(arg);
        }
    }
    (max_keys, filters)
}

/// The exact command, the machine and the server.
async fn header(bench: &Bench, args: &[String], throwaway: bool) {
    let mut conn = bench.server.connect().await.expect("connect to PostgreSQL");
    let version: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(&mut conn)
        .await
        .expect("server_version");
    let mut settings = Vec::new();
    for name in [
        "fsync",
        "synchronous_commit",
        "wal_sync_method",
        "shared_buffers",
        "max_connections",
    ] {
        let value: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SHOW {name}")))
            .fetch_one(&mut conn)
            .await
            .unwrap_or_else(|_| "?".into());
        settings.push(format!("{name}={value}"));
    }
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "?".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "?".into());
    let nproc = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let command = if args.is_empty() {
        "cargo bench --bench leasehold".to_owned()
    } else {
        format!("cargo bench --bench leasehold -- {}", args.join(" "))
    };
    println!("# leasehold benchmarks{}\n", if bench.smoke { " (smoke)" } else { "" });
    println!("- command: `{command}`");
    println!(
        "- machine: {nproc} CPUs ({cpu}), Linux {kernel}, load average at start {}",
        loadavg()
    );
    println!(
        "- PostgreSQL {version} ({}), {}",
        if throwaway {
            "throwaway cluster from leasehold-testkit `PgCluster::start_durable()`, same machine, loopback TCP"
        } else {
            "DATABASE_URL"
        },
        settings.join(", ")
    );
    println!(
        "- client: sqlx pools with default options (each acquire of an idle connection sends a Sync ping first), \
         except where a section says otherwise (round trip: no pings on either side)"
    );
    println!("- percentiles are nearest-rank over all samples of all interleaved rounds\n");
}
