//! Keys of a job kind (section 11 of the output): N keys created through
//! the API in one statement, a runtime that registers the kind started on
//! them, and its idle cost.
//!
//! The same figures as sections 7 and 8 for static keys: `start()` until
//! every key is registered (the first sync reads them), and statements per
//! second while nothing is due.

use std::time::{Duration, Instant};

use leasehold::{FenceGuard, JobError, JobKind, NewKey, Runtime, Schedule, store::LeaseStore};

use crate::report::{ms, progress, table};
use crate::setup::{Bench, TENANT_PERIOD, drop_db, fresh_db};
use crate::stats::{ANY_SQL, reset_statement_stats, statement_totals};

/// A kind whose keys are never due here (weekly).
struct Tenants;

impl JobKind for Tenants {
    type Args = u64;

    fn name(&self) -> &str {
        "tenant"
    }

    async fn run(&self, _tenant: u64, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

/// How long the idle window is.
const IDLE: Duration = Duration::from_secs(20);

pub(crate) async fn kinds(b: &Bench) {
    progress("11. kinds");
    let n = if b.smoke { 1_000 } else { b.fleet_keys(100_000) };
    let (db, stats) = fresh_db(&b.server).await;
    println!("## 11. Keys of a job kind: {n} keys created through the API, start and idle\n");
    println!(
        "`Keys::add` creates {n} keys of one kind (`u64` arguments, `every 7 days`: never due here) \
         in one call; a runtime registering the kind (default settings, poll 5 s, own pool of 2) is then \
         started: `start()` and the time until all {n} keys are registered (its first poll's sync reads them \
         and creates their lease rows in one statement). Idle: statements/s over {} s after that, all \
         statements of the database (`pg_stat_statements`).\n",
        IDLE.as_secs()
    );
    let schedule = Schedule::every(TENANT_PERIOD);
    let keys: Vec<NewKey> = (0..n as u64)
        .map(|t| NewKey::new("tenant", &format!("tenant:{t}"), &t, schedule.clone()).expect("key"))
        .collect();
    let store = LeaseStore::new(db.pool.clone());
    if stats {
        reset_statement_stats(&db.pool).await;
    }
    let t = Instant::now();
    let added = store.keys().add(&keys).await.expect("add_keys");
    let add_took = t.elapsed();
    let add_statements = if stats {
        statement_totals(&db.pool, ANY_SQL).await.calls.to_string()
    } else {
        "–".into()
    };
    assert_eq!(added, n as u64);
    let pool = db.pool_with(2).await;
    let t = Instant::now();
    let rt = Runtime::builder(pool.clone())
        .holder("kinds-a")
        .register_kind(Tenants)
        .start()
        .await
        .expect("start");
    let start_took = t.elapsed();
    while rt.health().registered < n {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let registered_took = t.elapsed();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let idle = if stats {
        reset_statement_stats(&db.pool).await;
        tokio::time::sleep(IDLE).await;
        format!(
            "{:.2}",
            statement_totals(&db.pool, ANY_SQL).await.calls as f64 / IDLE.as_secs_f64()
        )
    } else {
        "–".into()
    };
    table(
        &["what", "time", "statements"],
        &[
            vec![format!("`add_keys` of {n} keys"), ms(add_took), add_statements],
            vec!["`start()`".into(), ms(start_took), "–".into()],
            vec![
                format!("`start()` until {n} keys registered"),
                ms(registered_took),
                "–".into(),
            ],
            vec![
                format!("idle, per second ({} s window)", IDLE.as_secs()),
                "–".into(),
                idle,
            ],
        ],
    );
    rt.shutdown().await;
    pool.close().await;
    drop_db(db).await;
}
