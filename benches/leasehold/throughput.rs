//! Throughput (section 6 of the output): short runs per second on one
//! PostgreSQL, 4 runtimes: at demands the machine keeps up with, at a demand
//! far above what it can do (the ceiling), and at half the ceiling with the
//! trigger → start latency of a probe key.
//!
//! `LEASEHOLD_BENCH_HALF_KEYS=<keys per runtime>` sets the size of the last
//! fleet instead of deriving it from the measured ceiling: two builds
//! compared back to back then face the same demand.
//! `LEASEHOLD_BENCH_RUNTIMES=<n>` runs every fleet with `n` runtimes instead
//! of 4: whether a cost per run comes from the runtimes' contention shows in
//! one runtime's figures.

use std::time::Duration;

use crate::fleet::{Fleet, FleetOutcome, SLOT_CHECKS, fleet, per_run};
use crate::report::{loadavg, ms, p50_p99, progress, table};
use crate::setup::{Bench, drop_db, fresh_db};

/// Runtimes in every fleet of this scenario, unless `LEASEHOLD_BENCH_RUNTIMES` says otherwise.
const RUNTIMES: usize = 4;

/// A positive count from the environment variable `name`, if set; a value
/// that is not one stops the bench, naming it (a typo must not measure the
/// default under the name of the setting).
fn env_count(name: &str) -> Option<usize> {
    let value = std::env::var(name).ok()?;
    match value.parse::<usize>() {
        Ok(n) if n > 0 => Some(n),
        _ => panic!("{name}={value:?}: give a whole number of at least 1, or unset it"),
    }
}

pub(crate) async fn throughput(b: &Bench) {
    let runtimes = env_count("LEASEHOLD_BENCH_RUNTIMES").unwrap_or(RUNTIMES);
    progress("6. throughput");
    let (db, stats) = fresh_db(&b.server).await;
    let (sizes, ceiling, warmup, window): (&[usize], usize, Duration, Duration) = if b.smoke {
        (&[50], 400, Duration::from_millis(1500), Duration::from_secs(2))
    } else {
        (&[1_000, 2_000], 16_000, Duration::from_secs(3), Duration::from_secs(10))
    };
    let period = Duration::from_millis(100);
    let per_s = |keys: usize| keys as f64 / period.as_secs_f64();
    let mut rows = Vec::new();
    let mut measure = async |what: &str, tag: &str, keys: usize, probe: bool| -> FleetOutcome {
        progress(&format!("   {what}: {runtimes} × {keys} keys"));
        let load = loadavg();
        let spec = Fleet {
            tag,
            runtimes,
            keys,
            period,
            body_sleep: None,
            conns: 4,
            warmup,
            window,
            probe,
        };
        let o = fleet(&db, stats, &spec).await;
        o.check_doubles(b, &format!("throughput {keys} keys"));
        rows.push(row(what, keys, per_s(keys), &o, load));
        o
    };
    for &keys in sizes {
        measure("under capacity", &format!("tp{keys}"), keys, false).await;
    }
    let top = measure("ceiling", "tpmax", ceiling, false).await;
    let achieved = top.runs_in_window as f64 / top.window.as_secs_f64();
    // Half the ceiling: keys × 10 runs/s ≈ achieved ÷ 2, in hundreds of keys.
    // `LEASEHOLD_BENCH_HALF_KEYS` fixes it instead, so that two builds
    // compared back to back face the same demand.
    let half = env_count("LEASEHOLD_BENCH_HALF_KEYS")
        .unwrap_or_else(|| ((achieved / 2.0 / per_s(1) / 100.0).round() as usize * 100).max(100));
    let at_half = measure("half the ceiling, with a probe", "tphalf", half, true).await;
    println!("## 6. Throughput: short runs per second on one PostgreSQL, {runtimes} runtimes\n");
    println!(
        "{runtimes} runtimes (default settings, own pool of 4 each) all register the same keys, \
         `Schedule::every(100ms)`, lease 10 s, trivial body. Demand = keys × 10 runs/s; measured over {} s after \
         a {} s warm-up, with client and server sharing this machine's CPUs. The \"ceiling\" row demands far more \
         than the machine can do: its runs/s is the ceiling. The last row demands about half of it, and during its \
         window a `Schedule::Manual` probe key registered by every runtime is triggered (`Runtime::trigger`, \
         through each runtime in turn, the next trigger 20–80 ms after the run started): trigger → start is that \
         call until the probe's body starts. Due → start: each run's start (wall clock) minus the start of the \
         slot its claim consumed — every key falls due at the same instant, so this is the time to get through a \
         whole slot's keys. Claims, releases and renewals per run are `pg_stat_statements` calls ÷ runs; server \
         ms per run is the statements' total execution time ÷ runs. WAL per run is `pg_stat_wal` over the window ÷ \
         runs (records, of which full-page images, and bytes). CPU per run is this process's CPU time (every \
         runtime and the bench) and the PostgreSQL processes' CPU time over the window ÷ runs. {SLOT_CHECKS}\n",
        window.as_secs(),
        warmup.as_secs_f64()
    );
    table(
        &[
            "load",
            "runtimes × keys",
            "demand runs/s",
            "runs/s",
            "slots run",
            "claims per run",
            "releases per run",
            "renewals per run",
            "statements/s",
            "server ms per run: claim / release / all",
            "WAL per run: records / full pages / bytes",
            "CPU µs per run: client / server",
            "due → start p50 / p99",
            "max runs in one (key, slot)",
            "certain double runs",
            "shortest gap between two runs of a key",
            "CPU: bench process / machine",
            "load average before",
        ],
        &rows,
    );
    let (p50, p99) = p50_p99(&at_half.triggers);
    table(
        &[
            "trigger → start, at half the ceiling",
            "demand runs/s",
            "runs/s meanwhile",
            "triggers",
            &format!("no run within {} s", 5),
            "p50",
            "p99",
            "max",
        ],
        &[vec![
            format!("{runtimes} × {half} keys"),
            format!("{:.0}", per_s(half)),
            format!("{:.0}", at_half.runs_in_window as f64 / at_half.window.as_secs_f64()),
            at_half.triggers.len().to_string(),
            at_half.probe_missed.to_string(),
            ms(p50),
            ms(p99),
            ms(at_half.triggers.iter().copied().max().unwrap_or_default()),
        ]],
    );
    println!(
        "**Ceiling: {achieved:.0} short fenced runs/s** ({runtimes} × {ceiling} keys demanding {:.0}/s; certain \
         double runs {}); trigger → start at half of it: p50 {}, p99 {}.\n",
        per_s(ceiling),
        top.certain_doubles,
        ms(p50),
        ms(p99)
    );
    drop_db(db).await;
}

/// One row of the table.
fn row(what: &str, keys: usize, demand: f64, o: &FleetOutcome, load: String) -> Vec<String> {
    let secs = o.window.as_secs_f64();
    let runs = o.runs_in_window.max(1) as f64;
    let per = |t: Option<f64>| t.map_or("n/a".into(), |t| format!("{:.3}", t / runs));
    let (late50, late99) = p50_p99(&o.late);
    vec![
        what.to_owned(),
        format!("{} × {keys}", o.per_runtime.len()),
        format!("{demand:.0}"),
        format!("{:.0}", o.runs_in_window as f64 / secs),
        format!(
            "{:.1}%",
            100.0 * o.slots_covered as f64 / o.slots_expected.max(1) as f64
        ),
        per_run(o.claims, o.runs_in_window),
        per_run(o.releases, o.runs_in_window),
        per_run(o.renewals, o.runs_in_window),
        o.statements.map_or("n/a".into(), |s| format!("{:.0}", s as f64 / secs)),
        format!("{} / {} / {}", per(o.claim_ms), per(o.release_ms), per(o.statement_ms)),
        o.wal.map_or("n/a".into(), |w| {
            format!(
                "{:.2} / {:.3} / {:.0}",
                w.records as f64 / runs,
                w.fpi as f64 / runs,
                w.bytes as f64 / runs
            )
        }),
        format!(
            "{:.1} / {}",
            o.client_cpu.as_secs_f64() * 1e6 / runs,
            o.server_cpu
                .map_or("n/a".into(), |s| format!("{:.1}", s.as_secs_f64() * 1e6 / runs))
        ),
        format!("{} / {}", ms(late50), ms(late99)),
        o.max_per_slot.to_string(),
        o.certain_doubles.to_string(),
        ms(o.min_gap),
        o.cpu.clone(),
        load,
    ]
}
