//! Startup (section 8 of the output): how long `start()` takes with many
//! keys.
//!
//! One runtime registers N [`TenantJob`] keys on an empty table; a second
//! (another holder) then starts on the rows the first registered while the
//! first keeps running; a third starts on the same rows after both stopped.

use std::time::{Duration, Instant};

use crate::report::{ms, progress, table};
use crate::setup::{Bench, TenantJob, check_tenant_slot, drop_db, fresh_db, runtime_timed_cpu};
use crate::stats::{ANY_SQL, reset_statement_stats, statement_totals};

/// Connections in each runtime's pool.
const POOL: u32 = 2;

pub(crate) async fn startup(b: &Bench) {
    progress("8. startup");
    let n = if b.smoke { 1_000 } else { b.fleet_keys(100_000) };
    let (db, stats) = fresh_db(&b.server).await;
    println!("## 8. Startup: `start()` of a runtime with {n} keys\n");
    println!(
        "One runtime registers {n} keys (a small job struct holding a tenant id, `Schedule::every(7 days)`, \
         never due here) with default settings, on its own pool of {POOL}. `start()` is timed alone (building \
         the jobs and registering them with the builder are not included). Statements: `pg_stat_statements` \
         calls in the database from just before `start()` until read just after it returned, so they may include \
         the first scheduling statements the runtime sent before that read; not counted while another runtime \
         runs. Their server time is `pg_stat_statements`' execution time of those statements (load-robust: the \
         server's own clock, not the client's waits); the bench process CPU is this process's user + system time \
         during `start()` (every thread, the other runtimes' included). The first two runtimes are shut down, in that order, before the third starts.\n"
    );
    check_tenant_slot(Duration::from_secs(3600));
    let mut rows = Vec::new();
    let mut shutdowns = Vec::new();
    let mut start = async |holder: &str, case: &str, alone: bool| {
        progress(&format!("   {case}"));
        if stats {
            reset_statement_stats(&db.pool).await;
        }
        let pool = db.pool_with(POOL).await;
        let (rt, took, cpu) = runtime_timed_cpu(pool.clone(), holder, None, TenantJob::many(n)).await;
        let (statements, server) = if stats && alone {
            let totals = statement_totals(&db.pool, ANY_SQL).await;
            (totals.calls.to_string(), format!("{:.0} ms", totals.exec_ms))
        } else {
            ("–".into(), "–".into())
        };
        rows.push(vec![
            case.to_owned(),
            ms(took),
            format!("{:.0}", n as f64 / took.as_secs_f64()),
            ms(cpu),
            statements,
            server,
        ]);
        (rt, pool)
    };
    let first = start("startup-a", "first runtime, empty table", true).await;
    let second = start(
        "startup-b",
        "second runtime, rows already there, the first still running",
        false,
    )
    .await;
    let mut stop = async |(rt, pool): (leasehold::Runtime, sqlx::PgPool), which: &str| {
        let t = Instant::now();
        rt.shutdown().await;
        shutdowns.push(format!("{which} {}", ms(t.elapsed())));
        pool.close().await;
    };
    stop(first, "first").await;
    stop(second, "second").await;
    let third = start("startup-c", "third runtime, rows already there, no other runtime", true).await;
    stop(third, "third").await;
    table(
        &[
            "`start()`",
            "time",
            "keys/s",
            "bench process CPU during `start()`",
            "statements until just after `start()`",
            "their server time",
        ],
        &rows,
    );
    println!("`shutdown()` took: {}.\n", shutdowns.join(", "));
    drop_db(db).await;
}
