//! Idle (section 7 of the output): what a fleet costs the database while
//! nothing is due.
//!
//! R runtimes, each on its own pool of 2, all register the same N
//! [`TenantJob`] keys (one slot a week, so never due here) with default
//! settings. After a warm-up, the bench counts every statement the database
//! runs for a window (`pg_stat_statements`, its own statistics queries
//! excluded) and the CPU used; it also times each runtime's `start()`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::report::{ms, progress, table};
use crate::setup::{Bench, TenantJob, check_tenant_slot, drop_db, fresh_db, runtime_timed};
use crate::stats::{ANY_SQL, CpuWindow, ServerCpu, reset_statement_stats, statement_totals};

/// Connections in each runtime's pool.
const POOL: u32 = 2;

/// Statements per second per key and runtime assumed for a size that is
/// not run when no smaller size of the same fleet was measured: today's
/// runtime sends one claim per key every default poll interval (5 s).
const NOMINAL_RATE: f64 = 0.2;

/// What one fleet did.
struct IdleOutcome {
    /// Statements per second in the window (`None` without `pg_stat_statements`).
    statements_per_s: Option<f64>,
    /// `start()` of each runtime, in start order (the first on an empty table).
    starts: Vec<Duration>,
    cpu: String,
    server_cores: Option<f64>,
}

pub(crate) async fn idle(b: &Bench) {
    progress("7. idle");
    let (sizes, fleets, warmup, window): (&[usize], &[usize], Duration, Duration) = if b.smoke {
        (&[10, 100], &[3], Duration::from_secs(1), Duration::from_secs(2))
    } else {
        (
            &[100, 1_000, 10_000, 100_000],
            &[3, 10],
            Duration::from_secs(5),
            Duration::from_secs(20),
        )
    };
    // `--max-keys` above the usual sizes: that size too, with one runtime and three (ten runtimes of a
    // million keys each would not fit one bench process).
    let largest = sizes.last().copied().unwrap_or(0);
    let mut runs: Vec<(usize, &[usize])> = sizes.iter().map(|&n| (n, fleets)).collect();
    if let Some(max) = b.max_keys.filter(|&max| max > largest) {
        runs.push((max, &[1, 3]));
    }
    println!("## 7. Idle: statements/s while nothing is due\n");
    println!(
        "R runtimes, each with its own pool of {POOL}, all register the same N keys (a small job struct holding a \
         tenant id, `Schedule::every(7 days)`, never due during the run) with default settings (poll interval \
         not set). The runtimes start one after another; `start()` is timed for each, the first on an empty \
         table, the others on the rows it registered while the runtimes before them run. After a {} s warm-up, \
         every statement the database runs during {} s is counted (`pg_stat_statements` calls, the bench's own \
         statistics queries excluded). Server CPU: the PostgreSQL processes (postmaster and children) over the \
         window, from /proc. A fresh database per row.{}\n",
        warmup.as_secs(),
        window.as_secs(),
        b.max_keys.map_or(String::new(), |m| format!(
            " Sizes above `--max-keys {m}` are not run; a `--max-keys` above {largest} is run with one runtime and three."
        )),
    );
    check_tenant_slot(Duration::from_secs(3600));
    // Statements/s per key and runtime at the smallest N measured, by R: the basis of a "not run" estimate.
    let mut basis: BTreeMap<usize, (usize, f64)> = BTreeMap::new();
    let mut rows = Vec::new();
    for (n, fleets) in runs {
        for &r in fleets {
            if b.max_keys.is_some_and(|max| n > max) {
                let (rate, from) = match basis.get(&r) {
                    Some(&(n0, rate)) => (
                        rate,
                        format!("the rate per key and runtime measured at {r} × {n0}, {rate:.3}/s, scaled"),
                    ),
                    None => (
                        NOMINAL_RATE,
                        format!(
                            "{NOMINAL_RATE}/s per key and runtime, one claim per key every default poll \
                             interval (5 s) as today's runtime sends"
                        ),
                    ),
                };
                let cost = rate * (r * n) as f64;
                rows.push(vec![
                    format!("{r} × {n}"),
                    format!("not run (cost would be ≈ {cost:.0} statements/s: {from})"),
                    "–".into(),
                    "–".into(),
                    "–".into(),
                    "–".into(),
                    "–".into(),
                    "–".into(),
                ]);
                continue;
            }
            progress(&format!("   {r} runtimes × {n} keys"));
            let o = idle_fleet(b, r, n, warmup, window).await;
            if let Some(s) = o.statements_per_s {
                basis.entry(r).or_insert((n, s / (r * n) as f64));
            }
            let mut others = o.starts.get(1..).unwrap_or_default().to_vec();
            others.sort();
            let others = match (others.get(others.len().saturating_sub(1) / 2), others.last()) {
                (Some(&median), Some(&max)) => format!("{} / {}", ms(median), ms(max)),
                _ => "–".into(),
            };
            rows.push(vec![
                format!("{r} × {n}"),
                o.statements_per_s.map_or("n/a".into(), |s| format!("{s:.1}")),
                o.statements_per_s
                    .map_or("n/a".into(), |s| format!("{:.2}", s / r as f64)),
                o.statements_per_s
                    .map_or("n/a".into(), |s| format!("{:.4}", s / (r * n) as f64)),
                o.server_cores.map_or("n/a".into(), |c| format!("{c:.2} cores")),
                o.cpu,
                o.starts.first().map_or("–".into(), |&d| ms(d)),
                others,
            ]);
        }
    }
    table(
        &[
            "runtimes × keys",
            "statements/s",
            "statements/s per runtime",
            "statements/s per key and runtime",
            "server CPU",
            "CPU: bench process / machine",
            "`start()` of the first runtime (empty table)",
            "`start()` of the others: median / max",
        ],
        &rows,
    );
}

/// Starts `r` runtimes with the same `n` keys one after another, waits
/// `warmup`, counts statements and CPU over `window`, shuts them down.
async fn idle_fleet(b: &Bench, r: usize, n: usize, warmup: Duration, window: Duration) -> IdleOutcome {
    let (db, stats) = fresh_db(&b.server).await;
    let mut runtimes = Vec::with_capacity(r);
    let mut pools = Vec::with_capacity(r);
    let mut starts = Vec::with_capacity(r);
    for i in 0..r {
        let pool = db.pool_with(POOL).await;
        let (rt, took) = runtime_timed(pool.clone(), &format!("idle-{r}x{n}-r{i}"), None, TenantJob::many(n)).await;
        if n >= 10_000 {
            progress(&format!("      runtime {i} started in {}", ms(took)));
        }
        starts.push(took);
        runtimes.push(rt);
        pools.push(pool);
    }
    tokio::time::sleep(warmup).await;
    let server = ServerCpu::start(&db.pool).await;
    if stats {
        reset_statement_stats(&db.pool).await;
    }
    let cpu = CpuWindow::start();
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let secs = t0.elapsed().as_secs_f64();
    let statements = if stats {
        Some(statement_totals(&db.pool, ANY_SQL).await.calls)
    } else {
        None
    };
    let cpu = cpu.end();
    let server_cores = server.map(|s| s.cores());
    for rt in runtimes {
        rt.shutdown().await;
    }
    for pool in pools {
        pool.close().await;
    }
    drop_db(db).await;
    IdleOutcome {
        statements_per_s: statements.map(|s| s as f64 / secs),
        starts,
        cpu,
        server_cores,
    }
}
