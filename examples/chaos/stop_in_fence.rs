//! The `stop-in-fence` fault: a replica frozen while one of its runs is
//! inside a fenced transaction — after `guard.begin_fenced(&pool)` and the
//! run's write, before `commit()` — so its backend sits idle in
//! transaction holding the key's `leasehold_fence` row lock.
//!
//! A plain `stop` lands there only by chance (a fenced transaction lasts
//! milliseconds). Here the harness arms the replica with SIGUSR2; the next
//! fenced transaction one of its runs opens is held open for half a lease
//! after its write, its `application_name` set to `chaos-r<n>-hold` for
//! the transaction (`replica.rs`). The harness waits until
//! `pg_stat_activity` shows that backend idle in transaction, then
//! SIGSTOPs the process, for a duration drawn among three classes: less
//! than the lease (0.3–0.7 ×), about the lease (0.9–1.1 ×), or several
//! leases (4–6 ×), and SIGCONTs it.
//!
//! What must hold (checks 15–16, `check/tenures.rs`): the successor that
//! claims the key after the frozen tenure expired is not stalled behind the
//! frozen transaction's lock for more than about two leases, and the
//! frozen run's COMMIT, on SIGCONT, does not land after its tenure ended.

use std::time::Duration;

use crate::faults::{Chaos, FaultKind, signal};
use crate::replica::{HOLD_SUFFIX, now_us};

/// How long the process stays stopped, as a multiple of the lease, and the
/// class's name for the fault record.
pub fn pause_factor(pick: u64, frac: f64) -> (f64, &'static str) {
    match (pick >> 16) % 3 {
        0 => (0.3 + 0.4 * frac, "<lease"),
        1 => (0.9 + 0.2 * frac, "~lease"),
        _ => (4.0 + 2.0 * frac, ">>lease"),
    }
}

impl Chaos {
    /// `stop-in-fence`: arm one running replica, wait for its held fenced
    /// transaction to show in `pg_stat_activity`, freeze it, thaw it. The
    /// fault is skipped when no replica is running a job, or when no held
    /// transaction shows within the arming window (a period and a lease;
    /// the replica drops the arming after it).
    pub(crate) async fn stop_in_fence(&self, pick: u64, frac: f64) {
        let kind = FaultKind::StopInFence;
        let Some(n) = self.claim_running_replica(pick, frac).await else {
            return self.skip(kind);
        };
        let start = now_us();
        let pid = self.fleet.lock().await.pid(n);
        let Some(pid) = pid else {
            self.release_replica(n);
            return self.skip(kind);
        };
        signal(pid, "-USR2");
        let held = self.wait_for_hold(n, self.period + self.lease).await;
        match held {
            Some(backend) => {
                signal(pid, "-STOP");
                let (factor, class) = pause_factor(pick, frac);
                let pause = self.lease.mul_f64(factor);
                tokio::time::sleep(pause).await;
                signal(pid, "-CONT");
                self.record(
                    kind,
                    format!("r{n} {class} {}ms backend {backend}", pause.as_millis()),
                    start,
                );
            }
            None => self.skip(kind),
        }
        self.release_replica(n);
    }

    /// Polls `pg_stat_activity` every 10 ms for replica `n`'s held fenced
    /// transaction (idle in transaction, `application_name`
    /// `chaos-r<n>-hold`); its backend pid, or `None` after `within`.
    async fn wait_for_hold(&self, n: usize, within: Duration) -> Option<i32> {
        let marked = format!("chaos-r{n}{HOLD_SUFFIX}");
        let deadline = tokio::time::Instant::now() + within;
        while tokio::time::Instant::now() < deadline {
            let found: Result<Option<i32>, _> = sqlx::query_scalar(
                "SELECT pid FROM pg_stat_activity
                  WHERE datname = current_database() AND application_name = $1
                    AND state = 'idle in transaction'
                  LIMIT 1",
            )
            .bind(&marked)
            .fetch_optional(&self.admin)
            .await;
            if let Ok(Some(pid)) = found {
                return Some(pid);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    }
}
