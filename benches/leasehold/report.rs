//! Output and statistics: Markdown tables, durations, percentiles, progress
//! lines on stderr.

use std::time::{Duration, Instant};

/// Nearest-rank percentile of sorted samples.
pub(crate) fn pct(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// p50 and p99 of unsorted samples.
pub(crate) fn p50_p99(samples: &[Duration]) -> (Duration, Duration) {
    let mut s = samples.to_vec();
    s.sort();
    (pct(&s, 0.50), pct(&s, 0.99))
}

pub(crate) fn median_f64(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() { f64::NAN } else { v[(v.len() - 1) / 2] }
}

/// A duration in ms (µs below 0.1 ms would hide nothing useful here).
pub(crate) fn ms(d: Duration) -> String {
    let m = d.as_secs_f64() * 1000.0;
    if m < 10.0 {
        format!("{m:.3} ms")
    } else if m < 10_000.0 {
        format!("{m:.1} ms")
    } else {
        format!("{:.2} s", m / 1000.0)
    }
}

pub(crate) fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

pub(crate) fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-12)
}

/// Prints one Markdown table.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) {
    println!("| {} |", header.join(" | "));
    println!("|{}", header.iter().map(|_| "---|").collect::<String>());
    for row in rows {
        println!("| {} |", row.join(" | "));
    }
    println!();
}

pub(crate) fn progress(msg: &str) {
    eprintln!("[bench {:>7.1}s] {msg}", started_at().elapsed().as_secs_f64());
}

pub(crate) fn started_at() -> Instant {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *START.get_or_init(Instant::now)
}

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// A byte count in KiB or MiB.
pub(crate) fn bytes(b: f64) -> String {
    if b.abs() < 1024.0 * 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{:.1} MiB", b / (1024.0 * 1024.0))
    }
}
