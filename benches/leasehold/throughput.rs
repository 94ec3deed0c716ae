//! Throughput (section 6 of the output): short runs per second on one
//! PostgreSQL, 4 runtimes.

use std::time::Duration;

use crate::fleet::{SLOT_CHECKS, fleet, per_run};
use crate::report::{ms, progress, table};
use crate::setup::{Bench, drop_db, fresh_db};

pub(crate) async fn throughput(b: &Bench) {
    progress("6. throughput");
    let (db, stats) = fresh_db(&b.server).await;
    let (sizes, warmup, window): (&[usize], Duration, Duration) = if b.smoke {
        (&[50], Duration::from_millis(1500), Duration::from_secs(2))
    } else {
        (&[100, 1_000, 2_000], Duration::from_secs(3), Duration::from_secs(10))
    };
    let period = Duration::from_millis(100);
    let r = 4;
    let mut rows = Vec::new();
    for &keys in sizes {
        progress(&format!("   {keys} keys"));
        let o = fleet(
            &db,
            stats,
            &format!("tp{keys}"),
            r,
            keys,
            period,
            None,
            4,
            warmup,
            window,
        )
        .await;
        o.check_doubles(b, &format!("throughput {keys} keys"));
        let secs = o.window.as_secs_f64();
        rows.push(vec![
            format!("{r} × {keys}"),
            format!("{:.0}", keys as f64 / period.as_secs_f64()),
            format!("{:.0}", o.runs_in_window as f64 / secs),
            format!(
                "{:.1}%",
                100.0 * o.slots_covered as f64 / o.slots_expected.max(1) as f64
            ),
            per_run(o.claims, o.runs_in_window),
            per_run(o.releases, o.runs_in_window),
            per_run(o.renewals, o.runs_in_window),
            o.statements.map_or("n/a".into(), |s| format!("{:.0}", s as f64 / secs)),
            o.max_per_slot.to_string(),
            o.certain_doubles.to_string(),
            ms(o.min_gap),
            o.cpu,
        ]);
    }
    println!("## 6. Throughput: short runs per second on one PostgreSQL, 4 runtimes\n");
    println!(
        "4 runtimes (own pool of 4 each) all register the same keys, `Schedule::every(100ms)`, lease 10 s, \
         trivial body. Demand = keys × 10 runs/s; measured over {} s after a {} s warm-up, with client and server \
         sharing this machine's CPUs. Claims, releases and renewals per run are `pg_stat_statements` calls ÷ runs. \
         {SLOT_CHECKS}\n",
        window.as_secs(),
        warmup.as_secs_f64()
    );
    table(
        &[
            "runtimes × keys",
            "demand runs/s",
            "runs/s",
            "slots run",
            "claims per run",
            "releases per run",
            "renewals per run",
            "statements/s",
            "max runs in one (key, slot)",
            "certain double runs",
            "shortest gap between two runs of a key",
            "CPU: bench process / machine",
        ],
        &rows,
    );
    drop_db(db).await;
}
