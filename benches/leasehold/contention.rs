//! Contention (section 4 of the output): R runtimes × 100 jobs every second;
//! claims per run.

use std::time::Duration;

use crate::fleet::{Fleet, SLOT_CHECKS, fleet, per_run};
use crate::report::{median_f64, ms, progress, table};
use crate::setup::{Bench, drop_db, fresh_db};

pub(crate) async fn contention(b: &Bench) {
    progress("4. contention");
    let (db, stats) = fresh_db(&b.server).await;
    let (sizes, keys, warmup, window): (&[usize], usize, Duration, Duration) = if b.smoke {
        (&[1, 4], 10, Duration::from_millis(1500), Duration::from_secs(3))
    } else {
        (&[1, 4, 16], 100, Duration::from_secs(3), Duration::from_secs(10))
    };
    let period = Duration::from_secs(1);
    let mut rows = Vec::new();
    for &r in sizes {
        progress(&format!("   R = {r}"));
        let tag = format!("ct{r}");
        let spec = Fleet {
            tag: &tag,
            runtimes: r,
            keys,
            period,
            body_sleep: Some(Duration::from_millis(1)),
            conns: 4,
            warmup,
            window,
            probe: false,
        };
        let o = fleet(&db, stats, &spec).await;
        o.check_doubles(b, &format!("contention R={r}"));
        let secs = o.window.as_secs_f64();
        let lost = o.claims.map(|c| c - o.runs_in_window as i64);
        let mut shares: Vec<f64> = o
            .per_runtime
            .iter()
            .map(|&n| 100.0 * n as f64 / o.runs_in_window.max(1) as f64)
            .collect();
        shares.sort_by(f64::total_cmp);
        let active = o.per_runtime.iter().filter(|&&n| n > 0).count();
        rows.push(vec![
            format!("{r} × {keys}"),
            format!("{:.1}", o.runs_in_window as f64 / secs),
            format!("{:.0}", keys as f64 / period.as_secs_f64()),
            format!("{} / {}", o.slots_covered, o.slots_expected),
            o.claims.map_or("n/a".into(), |c| format!("{:.0}", c as f64 / secs)),
            lost.map_or("n/a".into(), |l| format!("{:.0}", l as f64 / secs)),
            per_run(o.claims, o.runs_in_window),
            format!(
                "{active}/{r} ran; share min {:.1}% / median {:.1}% / max {:.1}%",
                shares.first().copied().unwrap_or(0.0),
                median_f64(&shares),
                shares.last().copied().unwrap_or(0.0)
            ),
            o.max_per_slot.to_string(),
            o.certain_doubles.to_string(),
            ms(o.min_gap),
            o.cpu,
        ]);
    }
    println!("## 4. Contention: R runtimes × {keys} jobs, `Schedule::every(1s)`, body ≈ 1 ms\n");
    println!(
        "Every runtime registers the same {keys} keys (lease 10 s, default poll interval 5 s, own pool of 4). \
         Measured over a {} s window after a {} s warm-up. Runs and their slots come from the jobs' own records \
         (slot = the tenure's server `acquired_at` ÷ period); claims from `pg_stat_statements` calls of \
         the runtime's batch claim statement (one statement may claim many keys); \"lost\" = claims − successful runs (both `HeldElsewhere` and `NotDue`). Ideal: \
         one run per key per slot = {keys} runs/s. {SLOT_CHECKS}\n",
        window.as_secs(),
        warmup.as_secs_f64()
    );
    table(
        &[
            "runtimes × jobs",
            "runs/s",
            "ideal runs/s",
            "slots run / slots in window",
            "claims/s",
            "lost claims/s",
            "claims per run",
            "spread across runtimes",
            "max runs in one (key, slot)",
            "certain double runs",
            "shortest gap between two runs of a key",
            "CPU: bench process / machine",
        ],
        &rows,
    );
    drop_db(db).await;
}
