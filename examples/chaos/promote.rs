//! The `promote` fault, with `--standby async|sync`: the database under test
//! runs on a primary with a streaming standby (`leasehold_testkit::standby`);
//! once per run, replication is cut for a lag window (the primary goes on
//! acknowledging commits the standby never gets, or, synchronous, stops
//! acknowledging them), the primary crashes (`-m immediate`), the standby is
//! promoted, and every replica's proxy (and the orchestrator's) is pointed
//! at it. The fleet carries on against the promoted server.
//!
//! Once per run: a second standby would need a new `pg_basebackup` of the
//! promoted server mid-run, which the machine's two cores pay for with
//! stalls unrelated to the fault; one promotion already crosses a timeline,
//! which is what the fence jump is for.
//!
//! After an asynchronous promotion the database under test has lost every
//! commit of the lag window: ledger rows, counter writes, claims and
//! renewals alike, a prefix-consistent cut (WAL replays in order). The
//! checker reports that loss and excuses exactly what it explains (see
//! docs/operations.md, "Running the chaos harness").

use std::sync::Arc;
use std::time::Duration;

use leasehold_testkit::proxy::Mode;

use crate::faults::{Chaos, FaultKind};
use crate::replica::now_us;
use crate::servers::Promotion;

/// How far behind the primary the standby may be when replication is cut
/// (WAL is sent once flushed; scheduling on a busy machine): commits this
/// long before the cut may be lost with the lag window.
pub const SHIPPING_LAG: Duration = Duration::from_secs(1);

impl Chaos {
    /// The `promote` fault (see the module docs). After the lag window,
    /// waits for a PostgreSQL restart in flight to end, and holds the others
    /// off until the proxies point at the promoted server.
    pub(crate) async fn promote(&self, frac: f64) {
        let kind = FaultKind::Promote;
        let Some(servers) = self.cluster.clone() else {
            return self.skip(kind);
        };
        if servers.unpromoted().is_none() {
            return self.skip(kind);
        }
        let Some(pair) = servers.unpromoted() else {
            return self.skip(kind);
        };
        // Long enough for more claims than the fence sequence logs ahead
        // in WAL (32 values): without the jump, some fences repeat. A
        // restart of the primary may happen meanwhile, as any time.
        let lag = self.period.mul_f64(4.0 + 2.0 * frac);
        pair.replication.set(Mode::Blackhole);
        let cut = now_us();
        tokio::time::sleep(lag).await;
        while !Self::try_flag(&self.busy_pg) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let crash = now_us();
        let promoting = servers.clone();
        let promoted = tokio::task::spawn_blocking(move || match promoting.unpromoted() {
            Some(pair) => pair.crash_and_promote(),
            None => Err("no standby to promote".to_owned()),
        })
        .await;
        match promoted {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("promotion failed: {e}"),
            Err(e) => eprintln!("promotion task failed: {e}"),
        }
        servers.mark_promoted();
        let port = pair.standby.port();
        for proxy in &self.proxies {
            proxy.set_upstream("127.0.0.1", port);
            proxy.reset();
        }
        pair.switch_front();
        let switched = now_us();
        let synchronous = self.synchronous_standby;
        *self.promotion.lock().unwrap_or_else(|p| p.into_inner()) = Some(Promotion {
            synchronous,
            cut,
            crash,
            switched,
        });
        let (mode, start) = if synchronous {
            ("sync", cut)
        } else {
            ("async", cut - SHIPPING_LAG.as_micros() as i64)
        };
        self.record(kind, format!("{mode} lag {:.1}s", lag.as_secs_f64()), start);
        Self::clear_flag(&self.busy_pg);
    }
}

/// Schedules the run's one promotion at `at` (see the module docs).
pub async fn promote_at(chaos: Arc<Chaos>, at: tokio::time::Instant, frac: f64) {
    tokio::time::sleep_until(at).await;
    chaos.promote(frac).await;
}
