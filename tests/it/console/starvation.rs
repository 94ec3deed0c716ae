//! The console shares the service's pool with the runtime: a flood of
//! page views must not take the connections the runtime's heartbeat needs,
//! and what it cannot serve at once it answers with the busy page.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use leasehold::console::{self, ConsoleOptions};
use leasehold::{Runtime, Schedule, runtime::Degraded, store::LeaseStore};
use sqlx::PgPool;
use tokio::time::Instant;

use super::http::{Page, get};
use crate::support::{self, Connections, Runs, ScriptedJob, job, quick};

/// Keys the service registers besides the long job.
const KEYS: usize = 10_000;

/// The long job's lease: its heartbeat renews every second and the run
/// stops at its deadline if three renewals in a row miss.
const LEASE: Duration = Duration::from_secs(3);

/// What a flood of page views saw.
struct Flood {
    /// Latency of each answer, sorted.
    latencies: Vec<Duration>,
    /// Answers that were the busy page.
    busy: usize,
    /// Answers that were neither a page nor the busy page (status, body).
    wrong: Vec<(StatusCode, String)>,
}

impl Flood {
    fn percentile(&self, p: f64) -> Duration {
        let at = ((self.latencies.len() as f64 * p).ceil() as usize).clamp(1, self.latencies.len());
        self.latencies[at - 1]
    }

    fn report(&self, what: &str) -> String {
        format!(
            "{what}: {} answers, {} busy, p50 {:?}, p99 {:?}, max {:?}",
            self.latencies.len(),
            self.busy,
            self.percentile(0.50),
            self.percentile(0.99),
            self.percentile(1.0)
        )
    }
}

/// True when `page` is the console's busy answer: 503 with `Retry-After`,
/// the console's frame and security headers, a sentence for the operator.
pub(super) fn is_busy_page(page: &Page) -> bool {
    page.status == StatusCode::SERVICE_UNAVAILABLE
        && page.headers.contains_key(header::RETRY_AFTER)
        && page.headers.contains_key(header::CONTENT_SECURITY_POLICY)
        && page.body.contains("id=\"busy\"")
        && page.body.contains("<a class=\"brand\"")
}

/// `clients` concurrent users each asking for `path` again and again until
/// `length` has passed.
async fn flood(app: &Router, path: &str, clients: usize, length: Duration) -> Flood {
    let until = Instant::now() + length;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let (app, path) = (app.clone(), path.to_owned());
        tasks.spawn(async move {
            let mut seen = Vec::new();
            while Instant::now() < until {
                let asked = Instant::now();
                let page = get(&app, &path, &[]).await;
                seen.push((asked.elapsed(), page));
            }
            seen
        });
    }
    let mut flood = Flood {
        latencies: Vec::new(),
        busy: 0,
        wrong: Vec::new(),
    };
    while let Some(seen) = tasks.join_next().await {
        for (latency, page) in seen.expect("a client task") {
            flood.latencies.push(latency);
            if is_busy_page(&page) {
                flood.busy += 1;
            } else if page.status != StatusCode::OK || !page.body.contains("<table id=\"leases\">") {
                flood.wrong.push((page.status, page.body));
            }
        }
    }
    flood.latencies.sort();
    flood
}

/// The service: a runtime sharing `pool` (`Connections::SharedWithService`) with [`KEYS`] manual jobs and the long
/// job `report` (lease [`LEASE`]), whose one run is started and works until
/// the test ends; and the console nested at `/ops/leasehold` on the same
/// pool.
async fn service(pool: &PgPool, options: ConsoleOptions, runs: &Runs) -> (Runtime, Router) {
    let mut jobs: Vec<ScriptedJob> = (0..KEYS)
        .map(|i| {
            job(
                &format!("tenant:{i:05}"),
                quick(Schedule::Manual, Duration::from_secs(30)),
                |_guard| async { Ok(()) },
            )
        })
        .collect();
    jobs.push(job(
        "report",
        quick(Schedule::Manual, LEASE),
        runs.body(Duration::from_secs(3600)),
    ));
    // The runtime's statements share the service's pool too: on a pool of
    // its own (the default) the flood could not reach them at all.
    let rt = support::replica_in(
        Connections::SharedWithService,
        pool.clone(),
        "web-1",
        Duration::from_millis(500),
        jobs,
    )
    .await;
    rt.trigger("report").await.expect("trigger");
    runs.wait_started(1, Duration::from_secs(10)).await;
    let app = Router::new().nest_service("/ops/leasehold", console::router(pool.clone(), options));
    (rt, app)
}

/// A pool of 3 shared by the runtime and an embedded console (its
/// defaults), 10,000 keys, a run on a 3 s lease; 200 unauthenticated
/// users reload the leases page for three leases' time. The run is never
/// cancelled, the runtime never loses a renewal, and every answer is the
/// page or the busy page. Without the bound on the console's reads its
/// 200 queries queued on the pool ahead of the heartbeat, and the run was
/// stopped at its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_console_views_on_the_runtimes_pool_cancels_no_run() {
    let db = support::db().await;
    let pool = db.pool_with(3).await;
    let runs = Runs::default();
    let (rt, app) = service(&pool, ConsoleOptions::new(), &runs).await;

    // Health is sampled throughout: a lost renewal shows for a moment only.
    let stop = Arc::new(AtomicBool::new(false));
    let watch = {
        let (rt, stop) = (rt.clone(), stop.clone());
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                for reason in rt.health().degraded {
                    if matches!(
                        reason,
                        Degraded::RunsLostAtDeadline { .. } | Degraded::HeartbeatsFailing { .. }
                    ) {
                        seen.push(reason.to_string());
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            seen
        })
    };
    let flood = flood(&app, "/ops/leasehold/", 200, 3 * LEASE).await;
    println!("measured: {}", flood.report("200 concurrent views, pool of 3"));
    stop.store(true, Ordering::Relaxed);
    let degraded = watch.await.expect("the health watch");

    let all = runs.all();
    assert_eq!(all.len(), 1, "the one run, never restarted: {all:?}");
    assert!(
        all[0].cancelled.is_none(),
        "the run was cancelled: {:?}",
        all[0].cancelled
    );
    assert!(degraded.is_empty(), "the runtime lost renewals: {degraded:?}");
    let lease = LeaseStore::new(pool.clone())
        .get("report")
        .await
        .expect("read the lease")
        .expect("its row");
    assert_eq!(
        (lease.holder.as_str(), lease.fence),
        ("web-1", all[0].fence),
        "the tenure never changed"
    );
    assert!(
        flood.wrong.is_empty(),
        "{} answers were neither the page nor the busy page; first: {:?}",
        flood.wrong.len(),
        flood.wrong.first()
    );
    assert!(flood.latencies.len() > 200, "{}", flood.report("too few answers"));
    rt.shutdown().await;
}

/// A pool of 1 whose connection the service holds: the console's first
/// view takes its one turn and waits for the pool; a second view waits
/// its `read_wait` for a turn and gets the busy page, as does the first
/// once the pool gives up on it; when the service lets go, views are
/// served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_beyond_the_consoles_share_get_the_busy_page_not_the_pools_error() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    store.claim("tenant:1", "web-1", support::LONG).await.expect("claim");
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(3))
        .connect_with(db.options.clone())
        .await
        .expect("a pool of 1");
    let app = super::http::console(
        &pool,
        ConsoleOptions::new()
            .max_concurrent_reads(1)
            .read_wait(Duration::from_millis(200)),
    );
    let service = pool.acquire().await.expect("the service takes the only connection");

    let first = tokio::spawn({
        let app = app.clone();
        async move { get(&app, "/", &[]).await }
    });
    // Time for the first view to take the turn and queue on the pool.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let asked = Instant::now();
    let second = get(&app, "/", &[]).await;
    // Answered after its own wait, not after the pool's 3 s.
    assert!(asked.elapsed() < Duration::from_secs(2), "waited {:?}", asked.elapsed());
    assert!(is_busy_page(&second), "{} {}", second.status, second.body);
    assert_eq!(second.headers[header::RETRY_AFTER], "2");
    assert!(second.body.contains("The console is busy"), "{}", second.body);
    // The page retries by itself, as often as Retry-After says.
    assert!(second.body.contains("data-refresh=\"2\""), "{}", second.body);

    let first = first.await.expect("the first view");
    assert!(is_busy_page(&first), "{} {}", first.status, first.body);
    for page in [&first, &second] {
        let text = page.body.to_lowercase();
        assert!(
            !text.contains("timed out") && !text.contains("database error"),
            "{}",
            page.body
        );
    }

    drop(service);
    let served = get(&app, "/", &[]).await;
    assert_eq!(served.status, StatusCode::OK, "{}", served.body);
    assert!(served.body.contains("data-key=\"tenant:1\""), "{}", served.body);
}
