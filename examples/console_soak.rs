//! A soak of `leasehold console` under a slowloris attack and a flood:
//! run by `scripts/console-soak.sh` (which builds the CLI in release and
//! passes its path), loopback only, stops by itself.
//!
//! It starts a throwaway PostgreSQL (leasehold-testkit) with a few
//! leases, then `leasehold console` on 127.0.0.1, and for `--secs`:
//!
//! - `--slow N` slowloris connections, each sending `GET / HTTP/1.1` and
//!   then one header byte every `--drip-ms`, never finishing; each one the
//!   console closes is opened again at the next tick (`--drip-ms` later),
//!   as the classic tool does, so N keep trying;
//! - `--flood N` clients sending normal page views back to back (a new
//!   connection each), counting answers by status;
//! - every second a normal client opens a connection, asks for `/` and
//!   measures the time to a full answer (1 s is the bound; a timeout at
//!   5 s counts as a miss);
//! - every second the console's open descriptors (`/proc/PID/fd`),
//!   its established TCP connections on the port (`/proc/net/tcp`) and
//!   its RSS (`/proc/PID/status`).
//!
//! It prints one line per 10 s and a summary (first and last minute's
//! figures, worst probe) and exits 1 when a probe took over 1 s or failed,
//! or when descriptors or RSS grew by more than half between the second
//! minute and the end (flat means bounded: the warm-up minute is left out).
//!
//! ```text
//! cargo run --release --example console_soak -- --cli target/release/leasehold --secs 600
//! ```

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

struct Args {
    cli: PathBuf,
    secs: u64,
    slow: usize,
    flood: usize,
    drip: Duration,
}

fn args() -> Args {
    let mut args = Args {
        cli: PathBuf::from("target/release/leasehold"),
        secs: 600,
        slow: 2000,
        flood: 8,
        drip: Duration::from_millis(1000),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        let number = || {
            value
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("{flag} {value}: a number"))
        };
        match flag.as_str() {
            "--cli" => args.cli = PathBuf::from(&value),
            "--secs" => args.secs = number(),
            "--slow" => args.slow = number() as usize,
            "--flood" => args.flood = number() as usize,
            "--drip-ms" => args.drip = Duration::from_millis(number()),
            other => panic!("unknown flag {other}: --cli PATH --secs N --slow N --flood N --drip-ms N"),
        }
    }
    args
}

#[derive(Default)]
struct Counts {
    slow_opened: AtomicU64,
    slow_closed: AtomicU64,
    flood_ok: AtomicU64,
    flood_busy: AtomicU64,
    flood_other: AtomicU64,
    flood_failed: AtomicU64,
}

/// One sample, taken every second.
#[derive(Clone, Copy, Default)]
struct Sample {
    at: u64,
    probe_ms: Option<u64>,
    fds: usize,
    conns: usize,
    rss_kib: u64,
}

#[tokio::main]
async fn main() {
    let args = args();
    let db = leasehold_testkit::test_db().await;
    let store = leasehold::store::LeaseStore::new(db.pool.clone());
    leasehold::migrate(&db.pool).await.expect("migrate");
    for i in 0..20 {
        store
            .claim(&format!("soak:key-{i}"), "soak-replica", Duration::from_secs(3600))
            .await
            .expect("claim");
    }
    let o = &db.options;
    let url = format!(
        "postgres://{}@{}:{}/{}",
        o.get_username(),
        o.get_host(),
        o.get_port(),
        o.get_database().unwrap_or("postgres")
    );
    let mut child = tokio::process::Command::new(&args.cli)
        .args(["console", "--listen", "127.0.0.1:0", "--refresh", "off"])
        .env("DATABASE_URL", &url)
        .env_remove("LEASEHOLD_CONSOLE_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", args.cli.display()));
    let pid = child.id().expect("a pid");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let authority = loop {
        let line = lines
            .next_line()
            .await
            .expect("read")
            .expect("the console printed its URL");
        if let Some(at) = line.find("http://") {
            break line[at + 7..].trim().trim_end_matches('/').to_owned();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let port: u16 = authority
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port");
    println!(
        "console pid {pid} at {authority}; {} s, {} slowloris connections (a byte every {:?}), {} flooding clients",
        args.secs, args.slow, args.drip, args.flood
    );

    let counts = Arc::new(Counts::default());
    let end = Instant::now() + Duration::from_secs(args.secs);
    let before = sample(0, pid, port, None);
    // A first probe before the attack: the figure "before".
    let idle_probe = probe(&authority).await;
    println!(
        "before: probe {:?} ms, {} fds, {} connections, {} KiB RSS",
        idle_probe, before.fds, before.conns, before.rss_kib
    );

    // The attack runs on its own runtime (and threads), so the probe below
    // measures the console, not a load generator starving its own timer.
    let attack = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("the attack's runtime");
    for i in 0..args.slow {
        let (authority, counts, drip) = (authority.clone(), counts.clone(), args.drip);
        attack.spawn(async move {
            // Spread the openings over the first seconds.
            tokio::time::sleep(Duration::from_millis((i as u64 * 3) % 5000)).await;
            // As the classic tool does: a connection the server closed is
            // opened again at the next tick.
            while Instant::now() < end {
                slowloris(&authority, drip, end, &counts).await;
                tokio::time::sleep(drip).await;
            }
        });
    }
    for _ in 0..args.flood {
        let (authority, counts) = (authority.clone(), counts.clone());
        attack.spawn(async move {
            let paths = ["/", "/fleet", "/kinds", "/key?key=soak%3Akey-1", "/job?name=soak"];
            let mut n = 0usize;
            while Instant::now() < end {
                n += 1;
                match get(&authority, paths[n % paths.len()], Duration::from_secs(10)).await {
                    Some(200) => counts.flood_ok.fetch_add(1, Ordering::Relaxed),
                    Some(503) => counts.flood_busy.fetch_add(1, Ordering::Relaxed),
                    Some(_) => counts.flood_other.fetch_add(1, Ordering::Relaxed),
                    None => counts.flood_failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        });
    }

    let started = Instant::now();
    let mut samples = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    while Instant::now() < end {
        tick.tick().await;
        let at = started.elapsed().as_secs();
        let probe_ms = probe(&authority).await;
        let s = sample(at, pid, port, probe_ms);
        if at.is_multiple_of(10) {
            println!(
                "t={at:>4}s probe {:>5} ms  fds {:>5}  conns {:>5}  rss {:>7} KiB  slowloris opened {} closed {}  \
                 flood 200 {} 503 {} other {} failed {}",
                probe_ms.map_or("miss".to_owned(), |ms| ms.to_string()),
                s.fds,
                s.conns,
                s.rss_kib,
                counts.slow_opened.load(Ordering::Relaxed),
                counts.slow_closed.load(Ordering::Relaxed),
                counts.flood_ok.load(Ordering::Relaxed),
                counts.flood_busy.load(Ordering::Relaxed),
                counts.flood_other.load(Ordering::Relaxed),
                counts.flood_failed.load(Ordering::Relaxed),
            );
        }
        samples.push(s);
    }
    attack.shutdown_background();
    let _ = child.kill().await;

    let minute = |from: u64, to: u64| {
        let w: Vec<&Sample> = samples.iter().filter(|s| s.at >= from && s.at < to).collect();
        let max = |f: fn(&Sample) -> u64| w.iter().map(|s| f(s)).max().unwrap_or(0);
        (max(|s| s.fds as u64), max(|s| s.conns as u64), max(|s| s.rss_kib))
    };
    let last = samples.last().map_or(0, |s| s.at);
    let warm = (last / 10).clamp(1, 60);
    let (fds_early, conns_early, rss_early) = minute(warm, warm * 2);
    let (fds_late, conns_late, rss_late) = minute(last.saturating_sub(warm), last + 1);
    let probes: Vec<u64> = samples.iter().filter_map(|s| s.probe_ms).collect();
    let misses = samples.len() - probes.len();
    let worst = probes.iter().max().copied().unwrap_or(0);
    let mut sorted = probes.clone();
    sorted.sort_unstable();
    let p50 = sorted.get(sorted.len() / 2).copied().unwrap_or(0);
    let p99 = sorted.get(sorted.len() * 99 / 100).copied().unwrap_or(0);
    let slow_probes = probes.iter().filter(|ms| **ms > 1000).count();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "summary over {last} s ({} probes; load average now {}):",
        samples.len(),
        load.trim()
    );
    println!(
        "  before the attack: probe {idle_probe:?} ms, {} fds, {} KiB RSS",
        before.fds, before.rss_kib
    );
    println!(
        "  time to answer: p50 {p50} ms, p99 {p99} ms, worst {worst} ms; over 1 s: {slow_probes}; missed: {misses}"
    );
    println!(
        "  seconds {warm}-{}: max fds {fds_early}, connections {conns_early}, RSS {rss_early} KiB",
        warm * 2
    );
    println!("  last {warm} s: max fds {fds_late}, connections {conns_late}, RSS {rss_late} KiB");
    println!(
        "  slowloris connections opened {}, closed by the console {}; flood answers 200 {}, 503 {}, other {}, failed {}",
        counts.slow_opened.load(Ordering::Relaxed),
        counts.slow_closed.load(Ordering::Relaxed),
        counts.flood_ok.load(Ordering::Relaxed),
        counts.flood_busy.load(Ordering::Relaxed),
        counts.flood_other.load(Ordering::Relaxed),
        counts.flood_failed.load(Ordering::Relaxed),
    );
    let grew = |early: u64, late: u64| late > early + early / 2 + 16;
    let ok = slow_probes == 0 && misses == 0 && !grew(fds_early, fds_late) && !grew(rss_early, rss_late);
    println!("  verdict: {}", if ok { "PASS" } else { "FAIL" });
    std::process::exit(if ok { 0 } else { 1 });
}

/// One slowloris connection: the request line, then a header byte every
/// `drip`, until the console closes it or the run ends.
async fn slowloris(authority: &str, drip: Duration, end: Instant, counts: &Counts) {
    let Ok(mut stream) = TcpStream::connect(authority).await else {
        tokio::time::sleep(Duration::from_millis(100)).await;
        return;
    };
    counts.slow_opened.fetch_add(1, Ordering::Relaxed);
    if stream.write_all(b"GET / HTTP/1.1\r\nHost: ").await.is_err() {
        counts.slow_closed.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let host = authority
        .as_bytes()
        .iter()
        .chain(b"\r\nX-Slow: ")
        .chain(std::iter::repeat(&b'a'));
    let mut buf = [0u8; 256];
    for byte in host {
        if Instant::now() >= end {
            return;
        }
        tokio::select! {
            _ = stream.read(&mut buf) => {
                // An answer (408), the end or an error: the console let go.
                counts.slow_closed.fetch_add(1, Ordering::Relaxed);
                return;
            }
            () = tokio::time::sleep(drip) => {
                if stream.write_all(&[*byte]).await.is_err() {
                    counts.slow_closed.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        }
    }
}

/// `GET path` on a new connection: the status, or `None` on failure or
/// after `within`.
async fn get(authority: &str, path: &str, within: Duration) -> Option<u16> {
    let exchange = async {
        let mut stream = TcpStream::connect(authority).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.ok()?;
        let head = String::from_utf8_lossy(&response[..response.len().min(64)]).into_owned();
        head.split(' ').nth(1)?.parse().ok()
    };
    tokio::time::timeout(within, exchange).await.ok().flatten()
}

/// Probes answered "busy, retry" (503) rather than with the page.
static PROBES_BUSY: AtomicU64 = AtomicU64::new(0);

/// Milliseconds a normal client waits for a full answer to `GET /` (the
/// page, or "busy, retry", counted in [`PROBES_BUSY`]); `None` if it
/// failed or took over 5 s.
async fn probe(authority: &str) -> Option<u64> {
    let start = Instant::now();
    match get(authority, "/", Duration::from_secs(5)).await {
        Some(200) => Some(start.elapsed().as_millis() as u64),
        Some(503) => {
            PROBES_BUSY.fetch_add(1, Ordering::Relaxed);
            Some(start.elapsed().as_millis() as u64)
        }
        _ => None,
    }
}

/// The console's descriptors, established connections on `port` and RSS.
fn sample(at: u64, pid: u32, port: u16, probe_ms: Option<u64>) -> Sample {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    let rss_kib = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kib| kib.parse().ok())
        })
        .unwrap_or(0);
    // Local port in hex, state 01 (ESTABLISHED), on the console's side.
    let local = format!(":{port:04X} ");
    let conns = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|t| {
            t.lines()
                .skip(1)
                .filter(|l| {
                    let cols: Vec<&str> = l.split_whitespace().collect();
                    cols.len() > 3 && format!("{} ", &cols[1][cols[1].len() - 5..]) == local && cols[3] == "01"
                })
                .count()
        })
        .sum();
    Sample {
        at,
        probe_ms,
        fds,
        conns,
        rss_kib,
    }
}
