//! Memory (section 9 of the output): the client's resident memory per
//! registered key.
//!
//! RSS (/proc/self/statm) before the jobs and the runtime are built, right
//! after `start()` with N [`TenantJob`] keys, and again after the runtime
//! has run for a while; the growth divided by N.

use std::time::Duration;

use crate::report::{bytes, ms, progress, table};
use crate::setup::{Bench, TenantJob, check_tenant_slot, drop_db, fresh_db, runtime_timed};
use crate::stats::rss_bytes;

pub(crate) async fn memory(b: &Bench) {
    progress("9. memory");
    let (n, settle) = if b.smoke {
        (2_000, Duration::from_secs(1))
    } else {
        (100_000, Duration::from_secs(10))
    };
    let (db, _) = fresh_db(&b.server).await;
    let pool = db.pool_with(2).await;
    println!("## 9. Memory: client memory per registered key\n");
    println!(
        "One runtime on a pool of 2, default settings, {n} keys of a small job struct holding a tenant id (a \
         `u32`; key `tenant-sync:<id>`, `Schedule::every(7 days)`, never due here). Resident set size of the \
         bench process (/proc/self/statm × the page size) before the jobs are built, right after `start()` \
         returns, and {} s later; growth ÷ {n} = bytes per key. The growth includes the job structs, the \
         runtime's state and tasks per key, and whatever is in flight then (e.g. queued claims). The allocator \
         keeps freed memory, so memory freed by earlier scenarios in the same process is reused and lowers the \
         figure: run `-- memory` alone for a clean one.{}\n",
        settle.as_secs(),
        if b.alone {
            " This run had no other scenario."
        } else {
            " **Other scenarios ran in this process: the figure may be low.**"
        }
    );
    check_tenant_slot(Duration::from_secs(3600));
    let before = rss_bytes();
    let jobs = TenantJob::many(n);
    let (rt, took) = runtime_timed(pool.clone(), "memory", None, jobs).await;
    let started = rss_bytes();
    tokio::time::sleep(settle).await;
    let later = rss_bytes();
    rt.shutdown().await;
    pool.close().await;
    drop_db(db).await;
    let per_key = |after: u64| format!("{:.0}", (after as f64 - before as f64) / n as f64);
    table(
        &[
            "keys",
            "RSS before",
            "RSS after `start()`",
            "bytes per key after `start()`",
            &format!("RSS {} s later", settle.as_secs()),
            &format!("bytes per key {} s later", settle.as_secs()),
            "`start()` took",
        ],
        &[vec![
            n.to_string(),
            bytes(before as f64),
            bytes(started as f64),
            per_key(started),
            bytes(later as f64),
            per_key(later),
            ms(took),
        ]],
    );
}
