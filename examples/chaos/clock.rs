//! The clock faults: a replica process whose clock runs at the wrong rate,
//! or whose wall clock is stepped, through libfaketime (Debian packages
//! `faketime` and `libfaketime`, which `scripts/chaos-ci.sh` installs).
//!
//! - `clock-rate` restarts a replica (gracefully: SIGTERM, its runs end and
//!   its leases are released) under `FAKETIME="+0 x<rate>"` with
//!   `FAKETIME_DONT_FAKE_MONOTONIC=0`, for a few leases, then restarts it at
//!   the true rate. Faking the *monotonic* clock is what makes the fault
//!   real for the runtime: its deadlines, heartbeats and tokio's timers
//!   all read `CLOCK_MONOTONIC` (and libfaketime scales the timeouts of
//!   `epoll_wait`, which tokio sleeps in), exactly as NTP slewing or a
//!   drifting oscillator moves it. The rate is fixed for the process's
//!   life: changing it mid-run would make libfaketime jump the clock. The
//!   deadline argument (docs/design.md §5) covers rates within what the
//!   margin covers (lease/10: 5 % on both clocks, about 10 % on one):
//!   ×0.95 and ×1.05 must give no violation, and a slow rate beyond it
//!   (`--clock-rates 0.67`) lets a run outlive its lease when its renewals
//!   fail, which check 17 reports.
//! - `clock-step` restarts a replica under libfaketime reading its offset
//!   from a file, with `FAKETIME_DONT_FAKE_MONOTONIC=1`, and steps its wall
//!   clock forward or back (a lease's worth, or an hour) mid-run, then back:
//!   what `ntpdate` or an operator's `date -s` does. The kernel never steps
//!   the monotonic clock, so neither does the fault; the runtime uses no
//!   wall clock for its deadlines, so it must not matter.
//!
//! A clock-faulted replica is free for other faults while its clock is off
//! (a slow clock only matters when renewals fail: a partition, a restart of
//! the server), but not for another clock fault. The replicas' event logs
//! read the real clock whatever libfaketime does (`replica::now_us`), so the
//! checker's times stay true.

use std::path::PathBuf;
use std::time::Duration;

use crate::faults::{Chaos, FaultKind};
use crate::replica::now_us;

/// libfaketime's thread-safe build (the replicas are multi-threaded), from
/// `CHAOS_LIBFAKETIME` or where Debian installs it.
pub fn libfaketime() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CHAOS_LIBFAKETIME") {
        return Some(PathBuf::from(path));
    }
    ["x86_64-linux-gnu", "aarch64-linux-gnu", ""]
        .iter()
        .map(|arch| PathBuf::from(format!("/usr/lib/{arch}/faketime/libfaketimeMT.so.1")))
        .find(|p| p.exists())
}

/// How long a graceful restart may take before the replica is killed.
const RESTART_GRACE: Duration = Duration::from_secs(10);

impl Chaos {
    /// Restarts replica `n` with `env` (libfaketime's settings, or none);
    /// `false` if it could not be started.
    async fn restart(&self, n: usize, env: &[(&str, String)]) -> bool {
        let mut fleet = self.fleet.lock().await;
        fleet.stop(n, RESTART_GRACE).await;
        match fleet.spawn_with(n, env) {
            Ok(()) => true,
            Err(e) => {
                eprintln!("restarting replica {n} failed: {e}");
                false
            }
        }
    }

    /// A replica for a clock fault, not under one already: `None` (the
    /// fault skipped) otherwise, or without libfaketime.
    async fn claim_clock_replica(&self, kind: FaultKind, pick: u64, frac: f64) -> Option<(usize, PathBuf)> {
        let Some(lib) = libfaketime() else {
            self.skip(kind);
            return None;
        };
        let Some(n) = self.claim_replica(pick, frac).await else {
            self.skip(kind);
            return None;
        };
        let fresh = self.clocked.lock().unwrap_or_else(|p| p.into_inner()).insert(n);
        if !fresh {
            self.release_replica(n);
            self.skip(kind);
            return None;
        }
        Some((n, lib))
    }

    fn unclock(&self, n: usize) {
        self.clocked.lock().unwrap_or_else(|p| p.into_inner()).remove(&n);
    }

    pub(crate) async fn clock_rate(&self, pick: u64, frac: f64) {
        let kind = FaultKind::ClockRate;
        let Some((n, lib)) = self.claim_clock_replica(kind, pick, frac).await else {
            return;
        };
        let rate = self.clock_rates[((pick >> 20) % self.clock_rates.len().max(1) as u64) as usize];
        let start = now_us();
        let env = [
            ("LD_PRELOAD", lib.display().to_string()),
            ("FAKETIME", format!("+0 x{rate}")),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "0".to_owned()),
        ];
        let restarted = self.restart(n, &env).await;
        // Free for the other faults while its clock is off.
        self.release_replica(n);
        if restarted {
            tokio::time::sleep(self.lease.mul_f64(3.0 + 5.0 * frac)).await;
        }
        self.restart(n, &[]).await;
        self.record(kind, format!("r{n} x{rate}"), start);
        self.unclock(n);
    }

    pub(crate) async fn clock_step(&self, pick: u64, frac: f64) {
        let kind = FaultKind::ClockStep;
        let Some((n, lib)) = self.claim_clock_replica(kind, pick, frac).await else {
            return;
        };
        let file = self.fleet.lock().await.dir().join(format!("r{n}.faketime"));
        let set = |offset: &str| {
            if let Err(e) = std::fs::write(&file, format!("{offset}\n")) {
                eprintln!("writing {}: {e}", file.display());
            }
        };
        set("+0");
        let start = now_us();
        let env = [
            ("LD_PRELOAD", lib.display().to_string()),
            ("FAKETIME_TIMESTAMP_FILE", file.display().to_string()),
            // Read again at most once a second: the step lands within one.
            ("FAKETIME_CACHE_DURATION", "1".to_owned()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
        ];
        let restarted = self.restart(n, &env).await;
        self.release_replica(n);
        let lease = self.lease.as_secs().max(1);
        let step = match (pick >> 24) % 4 {
            0 => "+3600".to_owned(),
            1 => "-3600".to_owned(),
            2 => format!("+{}", 5 * lease),
            _ => format!("-{}", 5 * lease),
        };
        if restarted {
            tokio::time::sleep(self.lease * 2).await;
            set(&step);
            tokio::time::sleep(self.lease.mul_f64(2.0 + 3.0 * frac)).await;
            set("+0");
            tokio::time::sleep(self.lease).await;
        }
        self.restart(n, &[]).await;
        self.record(kind, format!("r{n} {step}s"), start);
        self.unclock(n);
    }
}
