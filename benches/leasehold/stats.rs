//! What the bench reads from the server and the machine:
//! `pg_stat_statements` totals (through `leasehold_testkit::stats`), CPU time
//! (this process, the machine, the PostgreSQL server's processes) and this
//! process's resident memory.

use std::collections::HashMap;
use std::io::BufRead;
use std::time::{Duration, Instant};

use sqlx::PgPool;

// Resetting and reading `pg_stat_statements` is leasehold-testkit's, shared
// with the tests; the patterns and the CPU and memory sampling are the bench's.
pub(crate) use leasehold_testkit::stats::{reset_statement_stats, statement_totals};

/// `LIKE` patterns that identify leasehold's statements (texts from
/// src/lease/): the runtime's batch claim (`claim_due`), batch release
/// (`finish_many`, also behind `LeaseStore::release`) and heartbeat.
pub(crate) const CLAIM_SQL: &str = "%AS t(key, ttl, job, run_timeout, head_start)%";
pub(crate) const RELEASE_SQL: &str = "%GREATEST(clock_timestamp(), l.acquired_at%";
pub(crate) const RENEW_SQL: &str = "%AS t(key, fence, ttl)%";
pub(crate) const ANY_SQL: &str = "%";
pub(crate) const PROBE_SQL: &str = "SELECT $1";

/// CPU time (user + system) of this process, from /proc (Linux; zero elsewhere).
pub(crate) fn process_cpu() -> Duration {
    proc_stat("self").map_or(Duration::ZERO, |p| p.cpu)
}

/// What /proc/<pid>/stat says about one process.
struct ProcStat {
    /// The executable's name (`comm`, e.g. "postgres").
    comm: String,
    ppid: u32,
    /// utime + stime.
    cpu: Duration,
}

/// /proc/`pid`/stat (`pid` may be "self"), or `None` if it cannot be read.
fn proc_stat(pid: &str) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (before, after) = stat.rsplit_once(')')?;
    let comm = before.split_once('(')?.1.to_owned();
    let f: Vec<u64> = after.split_whitespace().map(|x| x.parse().unwrap_or(0)).collect();
    // Fields 14 and 15 (utime, stime) are indexes 11 and 12 after the ")"; USER_HZ is 100 on Linux.
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    Some(ProcStat {
        comm,
        ppid: u32::try_from(f.get(1).copied()?).ok()?,
        cpu: Duration::from_millis(ticks * 10),
    })
}

/// (busy, total) jiffies of the whole machine, from /proc/stat.
pub(crate) fn machine_cpu() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let line = stat.lines().next().unwrap_or("");
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let total: u64 = f.iter().take(8).sum();
    let idle = f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

/// CPU use over a window: this process in cores, the whole machine in %.
pub(crate) struct CpuWindow {
    proc0: Duration,
    mach0: (u64, u64),
    t0: Instant,
}

impl CpuWindow {
    pub(crate) fn start() -> Self {
        CpuWindow {
            proc0: process_cpu(),
            mach0: machine_cpu(),
            t0: Instant::now(),
        }
    }

    /// "bench process x.xx cores, machine yy% busy".
    pub(crate) fn end(&self) -> String {
        let cores = (process_cpu() - self.proc0).as_secs_f64() / self.t0.elapsed().as_secs_f64();
        let (b1, t1) = machine_cpu();
        let busy = (b1 - self.mach0.0) as f64 / (t1 - self.mach0.1).max(1) as f64 * 100.0;
        format!("{cores:.2} cores / {busy:.0}%")
    }
}

/// CPU use of the PostgreSQL server over a window: the postmaster and its
/// children (backends, WAL writer, checkpointer …), read from /proc. Only
/// when the server runs on this machine, in the same PID namespace.
/// Processes that exit during the window are missed and processes started
/// during it are counted from their start, so keep connections open across it.
pub(crate) struct ServerCpu {
    postmaster: u32,
    before: HashMap<u32, Duration>,
    t0: Instant,
}

impl ServerCpu {
    /// Finds the server through one of `pool`'s backends (its parent is the
    /// postmaster); `None` when /proc does not show a `postgres` process there.
    pub(crate) async fn start(pool: &PgPool) -> Option<ServerCpu> {
        let backend: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(pool)
            .await
            .ok()?;
        let backend = proc_stat(&backend.to_string()).filter(|p| p.comm == "postgres")?;
        proc_stat(&backend.ppid.to_string()).filter(|p| p.comm == "postgres")?;
        Some(ServerCpu {
            postmaster: backend.ppid,
            before: server_processes(backend.ppid),
            t0: Instant::now(),
        })
    }

    /// Cores the server used since [`ServerCpu::start`].
    pub(crate) fn cores(&self) -> f64 {
        self.used().as_secs_f64() / self.t0.elapsed().as_secs_f64()
    }

    /// CPU time the server used since [`ServerCpu::start`].
    pub(crate) fn used(&self) -> Duration {
        server_processes(self.postmaster)
            .into_iter()
            .map(|(pid, cpu)| cpu.saturating_sub(self.before.get(&pid).copied().unwrap_or_default()))
            .sum()
    }
}

/// CPU time of `postmaster` and of each of its children, by pid.
fn server_processes(postmaster: u32) -> HashMap<u32, Duration> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return HashMap::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let p = proc_stat(&pid.to_string())?;
            (pid == postmaster || p.ppid == postmaster).then_some((pid, p.cpu))
        })
        .collect()
}

/// This process's resident set size in bytes: /proc/self/statm's second
/// field (pages) times the page size (0 where /proc is missing).
pub(crate) fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * page_size()
}

/// The kernel's page size, from the first mapping in /proc/self/smaps
/// (4 KiB if it cannot be read).
fn page_size() -> u64 {
    std::fs::File::open("/proc/self/smaps")
        .ok()
        .and_then(|f| {
            std::io::BufReader::new(f).lines().map_while(Result::ok).find_map(|l| {
                l.strip_prefix("KernelPageSize:")
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
        })
        .map_or(4096, |kb| kb * 1024)
}

/// The server's WAL counters (`pg_stat_wal`, cumulative for the cluster).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wal {
    pub(crate) records: i64,
    /// Full-page images among the records.
    pub(crate) fpi: i64,
    pub(crate) bytes: i64,
}

impl Wal {
    /// What was written between `earlier` and this reading.
    pub(crate) fn since(&self, earlier: &Wal) -> Wal {
        Wal {
            records: self.records - earlier.records,
            fpi: self.fpi - earlier.fpi,
            bytes: self.bytes - earlier.bytes,
        }
    }
}

/// Reads `pg_stat_wal` (`None` if the server does not have it, before 14).
pub(crate) async fn wal(pool: &PgPool) -> Option<Wal> {
    let (records, fpi, bytes): (i64, i64, i64) =
        sqlx::query_as("SELECT wal_records, wal_fpi, wal_bytes::int8 FROM pg_stat_wal")
            .fetch_one(pool)
            .await
            .ok()?;
    Some(Wal { records, fpi, bytes })
}
