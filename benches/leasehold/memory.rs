//! Memory (section 9 of the output): the client's resident memory per
//! registered key.
//!
//! RSS (/proc/self/statm) before the jobs and the runtimes are built, right
//! after `start()` with N [`TenantJob`] keys, and again after the runtimes
//! have run for a while; the growth divided by the keys registered. Once
//! with one runtime, once with three in the same process (each registering
//! the same N keys, as replicas do).

use std::time::Duration;

use crate::report::{bytes, ms, progress, table};
use crate::setup::{Bench, TenantJob, check_tenant_slot, drop_db, fresh_db, runtime_timed};
use crate::stats::rss_bytes;

pub(crate) async fn memory(b: &Bench) {
    progress("9. memory");
    let (n, settle) = if b.smoke {
        (2_000, Duration::from_secs(1))
    } else {
        (b.fleet_keys(100_000), Duration::from_secs(10))
    };
    let (db, _) = fresh_db(&b.server).await;
    println!("## 9. Memory: client memory per registered key\n");
    println!(
        "R runtimes in this process, each on a pool of 2 with default settings, each registering the same {n} keys \
         of a small job struct holding a tenant id (a `u32`; key `tenant-sync:<id>`, `Schedule::every(7 days)`, \
         never due here). Resident set size of the bench process (/proc/self/statm × the page size) before the \
         jobs are built, right after the last `start()` returns, and {} s later; growth ÷ (R × {n}) = bytes per \
         key and runtime. The growth includes the job structs, the runtime's state and tasks per key, and \
         whatever is in flight then (e.g. queued claims). The allocator keeps freed memory, so memory freed by \
         earlier scenarios (and by the one-runtime row, for the three-runtime row) is reused and lowers the \
         figure: run `-- memory` alone for a clean one-runtime figure.{}\n",
        settle.as_secs(),
        if b.alone {
            " This run had no other scenario."
        } else {
            " **Other scenarios ran in this process: the figures may be low.**"
        }
    );
    check_tenant_slot(Duration::from_secs(3600));
    let mut rows = Vec::new();
    for r in [1, 3] {
        progress(&format!("   {r} runtime(s) × {n} keys"));
        let before = rss_bytes();
        let mut runtimes = Vec::with_capacity(r);
        let mut starts = Vec::with_capacity(r);
        for i in 0..r {
            let pool = db.pool_with(2).await;
            let (rt, took) = runtime_timed(pool.clone(), &format!("memory-{r}-{i}"), None, TenantJob::many(n)).await;
            runtimes.push((rt, pool));
            starts.push(ms(took));
        }
        let started = rss_bytes();
        tokio::time::sleep(settle).await;
        let later = rss_bytes();
        for (rt, pool) in runtimes {
            rt.shutdown().await;
            pool.close().await;
        }
        let per_key = |after: u64| format!("{:.0}", (after as f64 - before as f64) / (r * n) as f64);
        rows.push(vec![
            r.to_string(),
            n.to_string(),
            bytes(before as f64),
            bytes(started as f64),
            per_key(started),
            bytes(later as f64),
            per_key(later),
            starts.join(", "),
        ]);
    }
    drop_db(db).await;
    table(
        &[
            "runtimes",
            "keys each",
            "RSS before",
            "RSS after `start()`",
            "bytes per key and runtime after `start()`",
            &format!("RSS {} s later", settle.as_secs()),
            &format!("bytes per key and runtime {} s later", settle.as_secs()),
            "`start()` took",
        ],
        &rows,
    );
}
