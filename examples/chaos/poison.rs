//! The faults that leave one of a replica's pooled connections inside a
//! transaction its pool does not know about.
//!
//! sqlx 0.9.0's `Pool::begin` is not cancel-safe (sqlx issue #4393): its
//! rollback guard only queues a `ROLLBACK` once the `BEGIN` has been
//! answered, so a future dropped while `BEGIN` is in flight returns the
//! connection to the pool with the server inside an open transaction. The
//! runtime drops a run at its next await once its local deadline passes (or
//! its grace after a lost lease runs out), which can be inside
//! `guard.begin_fenced(&pool)`. The replica's jobs write on the *same* pool
//! the runtime claims, renews and releases on (`replica.rs`), so every
//! statement that later lands on that connection — a claim, a heartbeat, a
//! release, a fenced column write — runs inside the foreign transaction and
//! is not committed until something commits or rolls it back.
//!
//! - `begin-drop` makes that happen through leasehold itself: a replica's
//!   proxy delays every packet by a fifth to half of the lease, so a round
//!   trip takes 40–100 % of it, renewals come back too late, and runs are
//!   dropped at their deadline while a round trip — often a `BEGIN` — is in
//!   flight. In half of the faults the replica's leases are also expired
//!   on the server half a lease in, so its runs are cancelled as *stolen*
//!   and dropped after their grace instead. Replicas log where each dropped
//!   run was (`dropped … in begin_fenced`).
//! - `raw-begin` is its deterministic form: the replica itself runs
//!   `sqlx::raw_sql("BEGIN").execute(&pool)` on the shared pool (on
//!   SIGUSR1), which returns a connection to the pool inside a transaction,
//!   exactly the state a dropped `begin` leaves.
//!
//! What must hold afterwards is checked after the quiet tail (`check.rs`):
//! every tail slot runs exactly once, and no replica backend is left idle
//! in transaction (`backends.rs`).

use std::time::Duration;

use leasehold::store::LeaseStore;

use crate::faults::{Chaos, FaultKind, signal};
use crate::replica::now_us;
use leasehold_testkit::proxy::Mode;

/// 16 bits of `pick` from bit `shift`, as a fraction in [0, 1).
fn fraction(pick: u64, shift: u32) -> f64 {
    ((pick >> shift) & 0xFFFF) as f64 / 65_536.0
}

impl Chaos {
    /// `begin-drop`: delay one running replica's traffic by 20–50 % of the
    /// lease for 2–3 leases; in half of the faults, expire that replica's
    /// leases on the server half a lease in. Returns once the proxy is back
    /// to normal, so the fault window covers every drop it caused.
    pub(crate) async fn begin_drop(&self, pick: u64, frac: f64) {
        let kind = FaultKind::BeginDrop;
        let Some((n, proxy)) = self.claim_proxied_replica(kind, pick, frac).await else {
            return;
        };
        let start = now_us();
        let delay = self.lease.mul_f64(0.2 + 0.3 * fraction(pick, 16));
        let hold = self.lease.mul_f64(2.0 + frac);
        let expire = (pick >> 40).is_multiple_of(2);
        proxy.set(Mode::Delay(delay));
        let mut target = format!("r{n} +{}ms", delay.as_millis());
        if expire {
            let before = self.lease / 2;
            tokio::time::sleep(before).await;
            let expired = self.expire_leases_of(n).await;
            target.push_str(&format!(" +expired {expired}"));
            tokio::time::sleep(hold.saturating_sub(before)).await;
        } else {
            tokio::time::sleep(hold).await;
        }
        proxy.set(Mode::Normal);
        // Let the delayed packets still in the proxy arrive before the
        // window closes: the replica's last drops happen until then.
        tokio::time::sleep(delay).await;
        self.record(kind, target, start);
        self.release_replica(n);
    }

    /// `raw-begin`: SIGUSR1 to one running replica, which then runs a plain
    /// `BEGIN` on its shared pool. Only a replica with a live lease is a
    /// target: its runtime, and so its SIGUSR1 handler, is up (the default
    /// action of SIGUSR1 would kill it).
    pub(crate) async fn raw_begin(&self, pick: u64, frac: f64) {
        let kind = FaultKind::RawBegin;
        let Some(n) = self.claim_running_replica(pick, frac).await else {
            return self.skip(kind);
        };
        let start = now_us();
        let pid = self.fleet.lock().await.pid(n);
        match pid {
            Some(pid) => {
                signal(pid, "-USR1");
                // The replica runs its BEGIN within milliseconds of the
                // signal; the window covers that, not what it poisons later
                // (the calm-slot margin and the quiet tail do).
                tokio::time::sleep(Duration::from_millis(100)).await;
                self.record(kind, format!("r{n}"), start);
            }
            None => self.skip(kind),
        }
        self.release_replica(n);
    }

    /// Expires every live lease of replica `n`'s current holder on the
    /// server, as if the holder had stalled past them (holder and fence stay), and
    /// returns how many. Errors count as none: the fault then only delays.
    async fn expire_leases_of(&self, n: usize) -> u64 {
        let store = LeaseStore::new(self.admin.clone());
        let mut expired = 0;
        for lease in self.live_leases().await {
            if lease.holder.starts_with(&format!("r{n}-"))
                && matches!(store.expire_for_test(&lease.key).await, Ok(Some(true)))
            {
                expired += 1;
            }
        }
        expired
    }
}
