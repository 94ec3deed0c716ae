//! Metrics: what the runtime records for losses, fence rejections, run
//! outcomes and held leases; the exporter's start-up errors; and that the
//! Grafana dashboard and alert rules only query metrics that exist.
//!
//! The `metrics` recorder is process-wide and tests run in parallel in this
//! one process, so one [`TestRecorder`] is installed once for all of them,
//! and every test uses job names of its own (`metrics_*`): a test reads only
//! its own jobs' series. (metrics-util's `DebuggingRecorder` does not fit:
//! its snapshots reset counters and gauges to zero, under the feet of the
//! other tests.)

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use leasehold::metrics::names;
use leasehold::{
    Error, FenceGuard, Schedule,
    store::{Claim, LeaseStore},
};
use metrics::{Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit};

use crate::support::{self, Runs, eventually, held_guard, job, quick, replica};

// ---------------------------------------------------------------------------
// The test recorder
// ---------------------------------------------------------------------------

#[derive(Clone)]
enum Cell {
    Counter(Arc<AtomicU64>),
    /// f64 bits, as `metrics` stores gauges in an `AtomicU64`.
    Gauge(Arc<AtomicU64>),
    Histogram(Arc<Samples>),
}

const COUNTER: u8 = 0;
const GAUGE: u8 = 1;
const HISTOGRAM: u8 = 2;

#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(value);
    }
}

/// A series: kind (0 counter, 1 gauge, 2 histogram), name, sorted labels.
type SeriesKey = (u8, String, Vec<(String, String)>);

/// Keeps every series for the life of the process; reading never resets
/// anything.
struct TestRecorder {
    series: Mutex<Option<HashMap<SeriesKey, Cell>>>,
}

static RECORDER: TestRecorder = TestRecorder {
    series: Mutex::new(None),
};

/// The process-wide test recorder, installed on first use.
fn recorder() -> &'static TestRecorder {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        metrics::set_global_recorder(&RECORDER)
            .unwrap_or_else(|_| panic!("another metrics recorder was installed before the metrics tests' one"));
    });
    &RECORDER
}

fn sorted(labels: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    let mut labels: Vec<(String, String)> = labels.collect();
    labels.sort();
    labels
}

fn series_key(kind: u8, name: &str, labels: &[(&str, &str)]) -> SeriesKey {
    let labels = sorted(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    (kind, name.to_owned(), labels)
}

impl TestRecorder {
    fn cell(&self, kind: u8, key: &Key, make: impl FnOnce() -> Cell) -> Cell {
        let labels = sorted(key.labels().map(|l| (l.key().to_owned(), l.value().to_owned())));
        let mut series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        series
            .get_or_insert_with(HashMap::new)
            .entry((kind, key.name().to_owned(), labels))
            .or_insert_with(make)
            .clone()
    }

    fn find(&self, kind: u8, name: &str, labels: &[(&str, &str)]) -> Option<Cell> {
        let series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        series.as_ref()?.get(&series_key(kind, name, labels)).cloned()
    }

    /// Whether the counter series exists (even at zero).
    fn has_counter(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.find(COUNTER, name, labels).is_some()
    }

    /// A counter's value; 0 if it was never incremented.
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        match self.find(COUNTER, name, labels) {
            Some(Cell::Counter(c)) => c.load(Ordering::SeqCst),
            _ => 0,
        }
    }

    /// A gauge's value, if it was ever set.
    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        match self.find(GAUGE, name, labels) {
            Some(Cell::Gauge(g)) => Some(f64::from_bits(g.load(Ordering::SeqCst))),
            _ => None,
        }
    }

    /// A histogram's samples.
    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        match self.find(HISTOGRAM, name, labels) {
            Some(Cell::Histogram(h)) => h.0.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            _ => Vec::new(),
        }
    }

    /// Sum of a counter over every series whose labels include `labels`.
    fn counter_sum(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let want = series_key(COUNTER, name, labels).2;
        let series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        series
            .iter()
            .flatten()
            .filter(|((kind, n, l), _)| *kind == COUNTER && n == name && want.iter().all(|w| l.contains(w)))
            .map(|(_, cell)| match cell {
                Cell::Counter(c) => c.load(Ordering::SeqCst),
                _ => 0,
            })
            .sum()
    }
}

impl Recorder for TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        match self.cell(COUNTER, key, || Cell::Counter(Arc::default())) {
            Cell::Counter(c) => Counter::from_arc(c),
            _ => Counter::noop(),
        }
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        match self.cell(GAUGE, key, || Cell::Gauge(Arc::default())) {
            Cell::Gauge(g) => Gauge::from_arc(g),
            _ => Gauge::noop(),
        }
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        match self.cell(HISTOGRAM, key, || Cell::Histogram(Arc::default())) {
            Cell::Histogram(h) => Histogram::from_arc(h),
            _ => Histogram::noop(),
        }
    }
}

const OUTCOMES: [&str; 5] = ["succeeded", "failed", "cancelled", "panicked", "lost"];
const REASONS: [&str; 3] = ["stolen", "expired", "deadline"];

/// Asserts the job's runs by outcome are exactly `expected` (outcomes not
/// listed: zero).
fn assert_runs(m: &TestRecorder, job: &str, expected: &[(&str, u64)]) {
    for outcome in OUTCOMES {
        let want = expected.iter().find(|(o, _)| *o == outcome).map_or(0, |(_, n)| *n);
        let got = m.counter(names::RUNS, &[("job_name", job), ("outcome", outcome)]);
        assert_eq!(got, want, "{} {{job={job}, outcome={outcome}}}", names::RUNS);
    }
}

/// Asserts the job's lease losses are exactly one, for `reason`.
fn assert_lost_once(m: &TestRecorder, job: &str, reason: &str) {
    for r in REASONS {
        let got = m.counter(names::LOST, &[("job_name", job), ("reason", r)]);
        assert_eq!(got, u64::from(r == reason), "{} {{job={job}, reason={r}}}", names::LOST);
    }
}

fn held(m: &TestRecorder, job: &str) -> Option<f64> {
    m.gauge(names::HELD, &[("job_name", job)])
}

// ---------------------------------------------------------------------------
// Runtime metrics
// ---------------------------------------------------------------------------

/// A run past its time limit counts once in `leasehold_run_timeouts_total`
/// (primed at zero when the job is registered, so `increase()` sees the
/// first one) and as a cancelled run; it is no lease loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_its_time_limit_is_counted_once_as_a_timeout() {
    let m = recorder();
    let db = support::db().await;
    let name = "metrics_timeout";
    let runs = Runs::default();
    let settings = quick(Schedule::Manual, Duration::from_secs(3))
        .timeout(Duration::from_millis(200))
        .grace(Duration::from_millis(200));
    let rt = replica(
        &db,
        "a",
        2,
        vec![job(name, settings, runs.body(Duration::from_secs(120)))],
    )
    .await;
    assert!(m.has_counter(names::TIMEOUTS, &[("job_name", name)]), "primed");
    assert_eq!(m.counter(names::TIMEOUTS, &[("job_name", name)]), 0);
    rt.trigger(name).await.unwrap();
    eventually(Duration::from_secs(10), || {
        (m.counter(names::RUNS, &[("job_name", name), ("outcome", "cancelled")]) == 1).then_some(())
    })
    .await;
    rt.shutdown().await;
    assert_eq!(m.counter(names::TIMEOUTS, &[("job_name", name)]), 1);
    assert_runs(m, name, &[("cancelled", 1)]);
    for reason in REASONS {
        assert_eq!(
            m.counter(names::LOST, &[("job_name", name), ("reason", reason)]),
            0,
            "{reason}"
        );
    }
}

/// A replica cut off from the database stops its run at the local deadline:
/// one loss, reason `deadline`, in the metric and in health; the run counts
/// as cancelled; the lease is no longer held; the renewals before it set the
/// remaining-time gauge. The replica that takes the key over counts the run,
/// whose release never came, as `lost`, as the history records it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_loss_is_counted_once_with_its_reason() {
    let m = recorder();
    let db = support::db().await;
    let name = "metrics_deadline";
    let runs = Runs::default();
    let lease = Duration::from_secs(2);
    let rt = replica(
        &db,
        "a",
        2,
        vec![job(
            name,
            quick(Schedule::Manual, lease),
            runs.body(Duration::from_secs(120)),
        )],
    )
    .await;
    rt.trigger(name).await.unwrap();
    runs.wait_started(1, Duration::from_secs(10)).await;
    assert_eq!(held(m, name), Some(1.0));
    assert_eq!(
        m.counter(names::CLAIMS, &[("job_name", name), ("outcome", "acquired")]),
        1
    );
    // Every counter of the job exists at zero before its first event, so
    // that Prometheus's increase() counts that first event.
    for reason in REASONS {
        assert!(
            m.has_counter(names::LOST, &[("job_name", name), ("reason", reason)]),
            "{reason} not primed"
        );
    }
    for outcome in OUTCOMES {
        assert!(
            m.has_counter(names::RUNS, &[("job_name", name), ("outcome", outcome)]),
            "{outcome} not primed"
        );
    }
    assert!(m.has_counter(names::FENCE_REJECTIONS, &[("job_name", name)]));
    assert!(m.has_counter(names::HEARTBEATS, &[("outcome", "error")]));
    assert_eq!(
        m.gauge(names::LAST_SUCCESS, &[("job_name", name)]),
        None,
        "no success yet"
    );

    // A renewal (every lease/3) sets the server time left.
    let left = eventually(Duration::from_secs(5), || {
        m.gauge(names::REMAINING, &[("job_name", name)])
    })
    .await;
    assert!(left > 0.0 && left <= lease.as_secs_f64(), "remaining {left}");
    assert!(m.counter_sum(names::HEARTBEATS, &[("outcome", "renewed")]) >= 1);
    assert!(!m.samples(names::HEARTBEAT_DURATION, &[]).is_empty());

    rt.faults().partition(true);
    eventually(Duration::from_secs(10), || {
        (m.counter(names::LOST, &[("job_name", name), ("reason", "deadline")]) >= 1).then_some(())
    })
    .await;
    eventually(Duration::from_secs(5), || (held(m, name) == Some(0.0)).then_some(())).await;
    // Nothing else moves it afterwards (heartbeat, job loop, release).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_lost_once(m, name, "deadline");
    // Health counts the same loss once too.
    let in_health = rt.health().degraded.into_iter().find_map(|d| match d {
        leasehold::runtime::Degraded::RunsLostAtDeadline { count, .. } => Some(count),
        _ => None,
    });
    assert_eq!(in_health, Some(1), "runs stopped at their deadline, in health");
    assert_runs(m, name, &[("cancelled", 1)]);
    assert_eq!(
        runs.all()[0].cancelled.map(|c| c.1),
        Some(leasehold::CancelReason::Deadline)
    );

    // Its release could not be written: the replica that takes the key
    // over records the run as lost, and counts it once.
    let b = replica(
        &db,
        "b",
        2,
        vec![job(
            name,
            quick(Schedule::Manual, lease),
            runs.body(Duration::from_secs(120)),
        )],
    )
    .await;
    b.trigger(name).await.unwrap();
    runs.wait_started(2, Duration::from_secs(20)).await;
    assert_runs(m, name, &[("cancelled", 1), ("lost", 1)]);
    let store = leasehold::store::LeaseStore::new(db.pool.clone());
    let recorded = store.records().history(name, 10).await.unwrap();
    assert_eq!(
        recorded.iter().map(|r| r.outcome).collect::<Vec<_>>(),
        [leasehold::runtime::RunOutcome::Lost],
        "the history says what the metric counts"
    );

    b.shutdown().await;
    rt.shutdown().await;
    assert_lost_once(m, name, "deadline");
    assert_eq!(held(m, name), Some(0.0));
}

/// A lease taken over behind the holder's back (expired on the server, then
/// claimed by another holder) is found by the next heartbeat: one loss,
/// reason `stolen`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stolen_lease_is_counted_once_as_stolen() {
    let m = recorder();
    let db = support::db().await;
    let name = "metrics_stolen";
    let runs = Runs::default();
    let rt = replica(
        &db,
        "a",
        2,
        vec![job(
            name,
            quick(Schedule::Manual, Duration::from_secs(3)),
            runs.body(Duration::from_secs(120)),
        )],
    )
    .await;
    rt.trigger(name).await.unwrap();
    runs.wait_started(1, Duration::from_secs(10)).await;

    support::expire_now(&db.pool, name).await;
    let thief = LeaseStore::new(db.pool.clone());
    let claim = thief.claim(name, "thief", support::LONG).await.unwrap();
    assert!(matches!(claim, Claim::Acquired(_)), "{claim:?}");

    eventually(Duration::from_secs(10), || {
        (m.counter(names::LOST, &[("job_name", name), ("reason", "stolen")]) >= 1).then_some(())
    })
    .await;
    eventually(Duration::from_secs(5), || (held(m, name) == Some(0.0)).then_some(())).await;
    // Two more heartbeat ticks do not count the loss again.
    support::wait_heartbeats(&rt, 2).await;
    assert_lost_once(m, name, "stolen");
    assert_runs(m, name, &[("cancelled", 1)]);
    assert!(m.counter_sum(names::HEARTBEATS, &[("outcome", "lost")]) >= 1);

    rt.shutdown().await;
    assert_lost_once(m, name, "stolen");
    assert_eq!(held(m, name), Some(0.0));
}

/// A write with a stale fence is refused and counted once; it is not a
/// second lease loss (that run had already ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_fenced_write_is_counted_as_a_fence_rejection() {
    let m = recorder();
    let db = support::db().await;
    let name = "metrics_fence";
    support::accounts(&db.pool).await;
    let (old_rt, old) = held_guard(&db, "a", name).await;
    old_rt.shutdown().await;
    let (new_rt, new) = held_guard(&db, "b", name).await;
    let written = support::set_balance(&new, &db.pool, 1, 10_i64).await.unwrap();
    assert_eq!(written, 1);
    assert_eq!(m.counter(names::FENCE_REJECTIONS, &[("job_name", name)]), 0);

    let err = support::set_balance(&old, &db.pool, 1, -1_i64).await.unwrap_err();
    assert!(matches!(err, Error::StaleFence { .. }), "{err:?}");
    assert_eq!(m.counter(names::FENCE_REJECTIONS, &[("job_name", name)]), 1);
    for reason in REASONS {
        assert_eq!(m.counter(names::LOST, &[("job_name", name), ("reason", reason)]), 0);
    }

    new_rt.shutdown().await;
    assert_eq!(m.counter(names::FENCE_REJECTIONS, &[("job_name", name)]), 1);
    assert_eq!(held(m, name), Some(0.0));
}

/// Each outcome is counted once, under its job, with one duration sample;
/// only a success sets the last-success time; every lease is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_run_outcome_is_counted_once() {
    let m = recorder();
    let db = support::db().await;
    // A long backoff: a failed run is not retried while the test looks. A
    // lease long enough that a heartbeat delayed by a loaded machine never
    // loses the waiting run (a lost run is claimed again: a second claim).
    let settings =
        quick(Schedule::Manual, Duration::from_secs(10)).retry(Duration::from_secs(60), Duration::from_secs(60));
    let jobs = vec![
        job("metrics_ok", settings.clone(), |_: FenceGuard| async { Ok(()) }),
        job("metrics_fail", settings.clone(), |_: FenceGuard| async {
            Err("downstream refused".into())
        }),
        job("metrics_panic", settings.clone(), |_: FenceGuard| async {
            panic!("a bug in a job (expected by the metrics test)")
        }),
        job("metrics_cancel", settings, |guard: FenceGuard| async move {
            guard.cancelled().await;
            Err("stopped".into())
        }),
    ];
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let rt = replica(&db, "a", 3, jobs).await;
    for key in ["metrics_ok", "metrics_fail", "metrics_panic", "metrics_cancel"] {
        rt.trigger(key).await.unwrap();
    }
    eventually(Duration::from_secs(10), || {
        let done = m.counter(names::RUNS, &[("job_name", "metrics_ok"), ("outcome", "succeeded")])
            + m.counter(names::RUNS, &[("job_name", "metrics_fail"), ("outcome", "failed")])
            + m.counter(names::RUNS, &[("job_name", "metrics_panic"), ("outcome", "panicked")]);
        (done == 3 && held(m, "metrics_cancel") == Some(1.0)).then_some(())
    })
    .await;
    support::wait_polls(&rt, 2).await;
    assert_runs(m, "metrics_ok", &[("succeeded", 1)]);
    assert_runs(m, "metrics_fail", &[("failed", 1)]);
    assert_runs(m, "metrics_panic", &[("panicked", 1)]);
    assert_runs(m, "metrics_cancel", &[]);

    let last = m
        .gauge(names::LAST_SUCCESS, &[("job_name", "metrics_ok")])
        .expect("a success sets the last-success time");
    assert!(
        last >= before - 1.0 && last <= before + 60.0,
        "last success {last}, test began {before}"
    );
    assert_eq!(m.gauge(names::LAST_SUCCESS, &[("job_name", "metrics_fail")]), None);
    assert_eq!(m.gauge(names::LAST_SUCCESS, &[("job_name", "metrics_panic")]), None);

    // Shutdown cancels the run still in progress.
    rt.shutdown().await;
    assert_runs(m, "metrics_cancel", &[("cancelled", 1)]);
    for name in ["metrics_ok", "metrics_fail", "metrics_panic", "metrics_cancel"] {
        assert_eq!(
            m.samples(names::RUN_DURATION, &[("job_name", name)]).len(),
            1,
            "{name} durations"
        );
        assert_eq!(
            m.counter(names::CLAIMS, &[("job_name", name), ("outcome", "acquired")]),
            1,
            "{name}"
        );
        assert_eq!(held(m, name), Some(0.0), "{name} still held");
        for reason in REASONS {
            assert_eq!(
                m.counter(names::LOST, &[("job_name", name), ("reason", reason)]),
                0,
                "{name}"
            );
        }
    }
    assert_runs(m, "metrics_ok", &[("succeeded", 1)]);
    assert_runs(m, "metrics_fail", &[("failed", 1)]);
    assert_runs(m, "metrics_panic", &[("panicked", 1)]);
}

// ---------------------------------------------------------------------------
// The exporter's start-up errors (the real exporter is scraped by
// scripts/check-prometheus.sh: this process's recorder is the test one)
// ---------------------------------------------------------------------------

/// A bad address, a taken port and a second recorder all fail `start`
/// with an error that says so, before anything runs — and leave nothing
/// listening.
#[cfg(feature = "prometheus")]
#[tokio::test]
async fn the_exporter_refuses_bad_addresses_taken_ports_and_a_second_recorder() {
    recorder();
    let start = |addr: String| {
        leasehold::Runtime::builder(support::unreachable_pool())
            .prometheus(addr)
            .start()
    };
    for bad in ["not-an-address", "9464", "example.com:9464", "127.0.0.1:0"] {
        let err = start(bad.to_owned()).await.expect_err(bad);
        assert!(matches!(err, Error::InvalidInput { .. }), "{bad}: {err:?}");
        assert!(err.to_string().contains("Prometheus listen address"), "{err}");
    }

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let err = start(addr.to_string()).await.expect_err("port taken");
    assert!(matches!(err, Error::Metrics { .. }), "{err:?}");
    assert!(err.to_string().contains("already in use"), "{err}");
    drop(taken);

    // The test recorder is this process's recorder: a second one is refused.
    // A port below the ephemeral range: a bind(0) port can be taken by a
    // parallel test's client socket before the exporter binds it, which
    // would fail this step with "already in use" instead.
    let port = leasehold_testkit::free_port().expect("a free port");
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let err = start(addr.to_string()).await.expect_err("recorder already installed");
    assert!(matches!(err, Error::Metrics { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("another `metrics` recorder is already installed"),
        "{err}"
    );
    // The failed attempt closed its listener again.
    let probe = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500));
    assert!(probe.is_err(), "nothing is left listening on {addr}");
}

// ---------------------------------------------------------------------------
// The Grafana dashboard and alert rules
// ---------------------------------------------------------------------------

/// Every `leasehold_*` name in `grafana/` (dashboard JSON, alert rules,
/// provisioning) is a metric the runtime exports — histograms with their
/// `_bucket`/`_sum`/`_count` series — and the dashboard shows every metric.
/// (scripts/check-prometheus.sh also runs every query against a real
/// Prometheus.)
#[test]
fn grafana_queries_name_only_exported_metrics() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("grafana");
    let mut files = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path
                .extension()
                .is_some_and(|e| e == "json" || e == "yml" || e == "yaml")
            {
                files.push(path);
            }
        }
    }
    let dashboard = root.join("leasehold-dashboard.json");
    let alerts = root.join("alerts.yml");
    assert!(files.contains(&dashboard) && files.contains(&alerts), "{files:?}");

    let histograms = [
        names::HEARTBEAT_DURATION,
        names::RUN_DURATION,
        names::FENCE_WAIT,
        names::FLEET_LIMIT_WAIT,
    ];
    let exported = |token: &str| {
        names::ALL.contains(&token)
            || ["_bucket", "_sum", "_count"]
                .iter()
                .any(|s| token.strip_suffix(s).is_some_and(|base| histograms.contains(&base)))
    };
    let mut unknown = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for token in metric_tokens(&text) {
            if !exported(token) {
                unknown.push(format!("{}: {token}", file.display()));
            }
        }
    }
    assert!(unknown.is_empty(), "not metrics leasehold exports: {unknown:#?}");

    let text = std::fs::read_to_string(&dashboard).unwrap();
    let used: Vec<&str> = metric_tokens(&text).collect();
    for name in names::ALL {
        assert!(
            used.iter()
                .any(|t| t == name || t.strip_prefix(name).is_some_and(|s| s.starts_with('_'))),
            "the dashboard does not show {name}"
        );
    }

    // Every alert carries its runbook.
    let rules = std::fs::read_to_string(&alerts).unwrap();
    let count = |needle: &str| rules.lines().filter(|l| l.trim_start().starts_with(needle)).count();
    assert!(count("- alert:") >= 5, "{rules}");
    for annotation in ["summary:", "description:", "runbook:"] {
        assert_eq!(
            count(annotation),
            count("- alert:"),
            "every alert needs a {annotation} annotation"
        );
    }
}

/// The `leasehold_[a-z0-9_]+` words of `text`.
fn metric_tokens(text: &str) -> impl Iterator<Item = &str> {
    text.match_indices("leasehold_").filter_map(move |(at, _)| {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            return None;
        }
        let len = text[at..]
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(text.len() - at);
        Some(&text[at..at + len])
    })
}

/// `leasehold_jobs_paused{job_name}` counts the replica's keys of a job
/// that are paused, as its polls see them: 0 (primed) before, the number of
/// keys covered while paused (by job, or one key), 0 again after resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_paused_gauge_follows_pauses_of_keys_and_jobs() {
    let m = recorder();
    let db = support::db().await;
    let store = leasehold::store::LeaseStore::new(db.pool.clone());
    let name = "metrics_paused";
    let paused = |m: &TestRecorder| m.gauge(names::JOBS_PAUSED, &[("job_name", name)]);
    let jobs = (0..3)
        .map(|k| {
            job(
                &format!("{name}:{k}"),
                quick(Schedule::Manual, Duration::from_secs(5)),
                |_| async { Ok(()) },
            )
        })
        .collect();
    let rt = replica(&db, "a", 2, jobs).await;
    assert_eq!(paused(m), Some(0.0), "primed at zero");
    store
        .controls()
        .pause(&leasehold::operator::Target::job(name), false, "test")
        .await
        .unwrap();
    eventually(Duration::from_secs(5), || (paused(m) == Some(3.0)).then_some(())).await;
    store
        .controls()
        .resume(&leasehold::operator::Target::job(name))
        .await
        .unwrap();
    store
        .controls()
        .pause(
            &leasehold::operator::Target::key(format!("{name}:1")).unwrap(),
            false,
            "test",
        )
        .await
        .unwrap();
    eventually(Duration::from_secs(5), || (paused(m) == Some(1.0)).then_some(())).await;
    store
        .controls()
        .resume(&leasehold::operator::Target::key(format!("{name}:1")).unwrap())
        .await
        .unwrap();
    eventually(Duration::from_secs(5), || (paused(m) == Some(0.0)).then_some(())).await;
    rt.shutdown().await;
}

/// A kind of its own for the paused gauge's removal scenario (the gauge is
/// per job name, process-wide).
struct RemovedKind;

impl leasehold::JobKind for RemovedKind {
    type Args = String;

    fn name(&self) -> &str {
        "metrics_removed"
    }

    fn settings(&self) -> leasehold::JobSettings {
        quick(Schedule::Manual, Duration::from_secs(5))
    }

    async fn run(&self, _args: String, _guard: FenceGuard) -> Result<(), leasehold::JobError> {
        Ok(())
    }
}

/// A paused key of a kind is removed (its pause stays): it is no live key,
/// so `leasehold_jobs_paused` stops counting it at once, though the pauses
/// did not change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_paused_key_is_no_longer_counted_paused() {
    let m = recorder();
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let name = "metrics_removed";
    let paused = |m: &TestRecorder| m.gauge(names::JOBS_PAUSED, &[("job_name", name)]);
    let keys: Vec<leasehold::NewKey> = (0..2)
        .map(|k| leasehold::NewKey::new(name, &format!("{name}:{k}"), &"x", Schedule::Manual).unwrap())
        .collect();
    store.keys().add(&keys).await.unwrap();
    let rt = leasehold::Runtime::builder(db.pool_with(2).await)
        .holder("a")
        .poll_interval(Duration::from_millis(100))
        .register_kind(RemovedKind)
        .start()
        .await
        .unwrap();
    let key = leasehold::operator::Target::key(format!("{name}:1")).unwrap();
    store.controls().pause(&key, false, "test").await.unwrap();
    eventually(Duration::from_secs(5), || (paused(m) == Some(1.0)).then_some(())).await;
    assert!(store.keys().remove(name, &format!("{name}:1")).await.unwrap());
    eventually(Duration::from_secs(5), || (paused(m) == Some(0.0)).then_some(())).await;
    rt.shutdown().await;
}
