//! leasehold inside an axum service: the runtime handle in the router's
//! state, a readiness probe that reports `Runtime::health`, an endpoint that
//! triggers a job fleet-wide, `/metrics` for Prometheus on the service's own
//! router (leasehold's buckets), and a graceful shutdown that hands the
//! leases over.
//!
//! ```sh
//! cargo run --example axum_service            # a throwaway PostgreSQL
//! DATABASE_URL=postgres://... cargo run --example axum_service
//! ```
//!
//! It serves on a loopback port, calls its own endpoints once (so it stops
//! by itself), and prints what it got.
//!
//! Its server is a bare `axum::serve`, which bounds neither the connections
//! open at once nor the time a client takes to send its headers (hyper's
//! header timeout needs a timer that `axum::serve` does not set): fine on
//! loopback for a demo, not on a port clients you do not control reach. A
//! service that does (and one that mounts `leasehold::console::router`)
//! serves with hyper's HTTP/1 builder given `hyper_util::rt::TokioTimer` and
//! a `header_read_timeout` (10 s), a semaphore permit per connection taken
//! before `accept` (256), and a timeout around each connection (2 min), as
//! `leasehold console` does (`cli/src/console.rs`), or sits behind a proxy
//! that enforces the same. Request bodies are capped here at 64 KiB
//! (`DefaultBodyLimit`; axum's default is 2 MiB).

use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use leasehold::sqlx::PgPool;
use leasehold::{FenceGuard, FencedJob, JobError, Runtime};

#[path = "support/http.rs"]
mod http;
use http::request;

/// A job the service runs every 5 s, and on demand through `/jobs/{key}/trigger`.
#[derive(FencedJob)]
#[job(key = "invoices", every = "5s", lease = "30s")]
struct Invoices {
    db: PgPool,
}

impl Invoices {
    async fn run(&self, guard: FenceGuard) -> Result<(), JobError> {
        let tx = guard.begin_fenced(&self.db).await?; // a stale fence writes nothing
        tx.commit().await?;
        println!("  invoices ran with fence {}", guard.fence());
        Ok(())
    }
}

/// Readiness: 200 while healthy, 503 with the reasons otherwise. Failing
/// heartbeats or claims count only after `degraded_after` of them in a row
/// (set in `main`), so one network blip does not take every replica out of
/// the load balancer at once.
async fn ready(State(runtime): State<Runtime>) -> (StatusCode, String) {
    let health = runtime.health();
    if health.healthy {
        (StatusCode::OK, "ok".into())
    } else {
        let reasons: Vec<String> = health.degraded.iter().map(ToString::to_string).collect();
        (StatusCode::SERVICE_UNAVAILABLE, reasons.join("; "))
    }
}

/// Makes a job due now, for the whole fleet (POST only: it changes state).
async fn trigger(State(runtime): State<Runtime>, Path(key): Path<String>) -> (StatusCode, String) {
    match runtime.trigger(&key).await {
        Ok(()) => (StatusCode::ACCEPTED, format!("{key} is due now\n")),
        Err(leasehold::Error::UnknownJob(_)) => (StatusCode::NOT_FOUND, format!("no job {key:?}\n")),
        Err(error) => (StatusCode::SERVICE_UNAVAILABLE, format!("{error}\n")),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let db = leasehold_testkit::test_db().await;
    let pool = db.pool.clone();
    // The process-wide recorder, with leasehold's histogram buckets; the
    // service's own `metrics` calls are rendered with leasehold's.
    let metrics = leasehold::metrics::prometheus_handle()?;

    let runtime = Runtime::builder(pool.clone())
        // Not ready after 3 failed heartbeats (or claims) in a row; one is a blip.
        .degraded_after(3)
        .register(Invoices { db: pool.clone() })
        .start()
        .await?;
    let app = Router::new()
        .route("/ready", get(ready))
        .route("/jobs/{key}/trigger", post(trigger))
        .with_state(runtime.clone())
        .route("/metrics", get(move || async move { metrics.render() }))
        // None of these endpoints reads a body: refuse big ones early.
        .layer(DefaultBodyLimit::max(64 * 1024));

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
    });
    println!("serving on http://{addr}");

    for (method, path) in [
        ("GET", "/ready"),
        ("POST", "/jobs/invoices/trigger"),
        ("POST", "/jobs/nope/trigger"),
    ] {
        println!("{method} {path} -> {}", request(addr, method, path).await?);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let scrape = request(addr, "GET", "/metrics").await?;
    let runs = scrape
        .lines()
        .find(|l| l.starts_with("leasehold_job_runs_total") && l.contains("succeeded"));
    println!("GET /metrics -> {}", runs.unwrap_or("(no runs yet)"));

    // On SIGTERM in a real service: stop serving, then hand the leases over.
    let _ = stop.send(());
    server.await??;
    let report = runtime.shutdown().await;
    println!("shutdown: {report:?}");
    Ok(())
}
