//! The optional Prometheus exporter (feature `prometheus`).
//!
//! [`handle`] makes a `metrics-exporter-prometheus` recorder with
//! leasehold's buckets the process-wide `metrics` recorder and returns its
//! handle, for the service to render on a route of its own router
//! (`leasehold::metrics::prometheus_handle`).
//!
//! [`install`] makes such a recorder the
//! process-wide `metrics` recorder and serves it over HTTP on the address
//! given to `RuntimeBuilder::prometheus`. The listener runs on a thread of
//! its own (a one-thread tokio runtime named `leasehold-metrics`), so it
//! keeps serving whatever runtime the service uses, and it never competes
//! with the job loops for a worker.
//!
//! Everything that can go wrong is reported by `RuntimeBuilder::start`
//! before any job starts: a malformed address (`Error::InvalidInput`), a
//! port that is taken or cannot be bound, a second installation in the same
//! process, or another `metrics` recorder already installed
//! (`Error::Metrics`). A failed installation leaves nothing listening.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::sync::Mutex;
use std::sync::mpsc;

use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use super::catalog::{buckets, describe, names};
use crate::error::{Error, Result};

/// The recorder leasehold installed in this process, if any.
static INSTALLED: Mutex<Option<Installed>> = Mutex::new(None);

enum Installed {
    /// By `RuntimeBuilder::prometheus`, serving on this address.
    Listener(SocketAddr, PrometheusHandle),
    /// By `metrics::prometheus_handle`, served by the service itself.
    Handle(PrometheusHandle),
}

/// How often histograms are drained between scrapes when the service
/// renders the handle itself (the exporter's listener does its own).
const UPKEEP: Duration = Duration::from_secs(5);

/// The handle of the process-wide Prometheus recorder with leasehold's
/// buckets, installing it on the first call (later calls, and a recorder
/// installed by `RuntimeBuilder::prometheus`, give the same one).
pub(crate) fn handle() -> Result<PrometheusHandle> {
    let mut installed = INSTALLED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(Installed::Listener(_, handle) | Installed::Handle(handle)) = &*installed {
        return Ok(handle.clone());
    }
    let recorder = builder()?.build_recorder();
    let handle = recorder.handle();
    if metrics::set_global_recorder(recorder).is_err() {
        return Err(Error::metrics(ANOTHER_RECORDER, None));
    }
    // Histogram samples are kept until drained; a render drains them too,
    // so this only bounds memory when nothing scrapes for a while.
    let upkeep = handle.clone();
    let spawned = std::thread::Builder::new()
        .name("leasehold-metrics-upkeep".to_owned())
        .spawn(move || {
            loop {
                std::thread::sleep(UPKEEP);
                upkeep.run_upkeep();
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "could not start the metrics upkeep thread; histograms are drained at each scrape only");
    }
    *installed = Some(Installed::Handle(handle.clone()));
    describe();
    Ok(handle)
}

const ANOTHER_RECORDER: &str = "another `metrics` recorder is already installed in this process: leasehold's metrics \
     already go to it (call leasehold::metrics::describe() once for their help texts); \
     remove .prometheus(..) or serve that recorder instead";

/// The exporter's settings: true histograms (not summaries) for the four
/// histogram metrics, with leasehold's buckets.
pub(crate) fn builder() -> Result<PrometheusBuilder> {
    let bounds = |e: metrics_exporter_prometheus::BuildError| Error::metrics("histogram buckets", Some(Box::new(e)));
    PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(names::HEARTBEAT_DURATION.to_owned()),
            buckets::HEARTBEAT_DURATION,
        )
        .map_err(bounds)?
        .set_buckets_for_metric(Matcher::Full(names::RUN_DURATION.to_owned()), buckets::RUN_DURATION)
        .map_err(bounds)?
        .set_buckets_for_metric(Matcher::Full(names::FENCE_WAIT.to_owned()), buckets::FENCE_WAIT)
        .map_err(bounds)?
        .set_buckets_for_metric(
            Matcher::Full(names::FLEET_LIMIT_WAIT.to_owned()),
            buckets::FLEET_LIMIT_WAIT,
        )
        .map_err(bounds)
}

/// Parses the listen address: an IP address and a port (`127.0.0.1:9464`,
/// `[::1]:9464`), or `localhost:<port>` for the IPv4 loopback. Host names
/// are not resolved, and port 0 is refused (Prometheus could not be told
/// which port was picked).
pub(crate) fn parse_addr(addr: &str) -> Result<SocketAddr> {
    let trimmed = addr.trim();
    let parsed = match trimmed.strip_prefix("localhost:") {
        Some(port) => port
            .parse::<u16>()
            .ok()
            .map(|port| SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)),
        None => trimmed.parse::<SocketAddr>().ok(),
    };
    match parsed {
        Some(socket) if socket.port() == 0 => Err(Error::invalid(
            "Prometheus listen address",
            addr,
            "port 0 would pick a random port that Prometheus cannot be told about; give a fixed port, e.g. \"127.0.0.1:9464\"",
        )),
        Some(socket) => Ok(socket),
        None => Err(Error::invalid(
            "Prometheus listen address",
            addr,
            "it must be an IP address and a port, e.g. \"127.0.0.1:9464\" (loopback only) or \"0.0.0.0:9464\" \
             (every interface); host names other than localhost are not resolved",
        )),
    }
}

/// Installs the process-wide Prometheus recorder and its HTTP listener on
/// `addr`, then describes every metric to it.
pub(crate) fn install(addr: &str) -> Result<()> {
    // Held throughout, so two runtimes starting at once cannot both try.
    let mut installed = INSTALLED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(Installed::Handle(_)) = &*installed {
        return Err(Error::metrics(
            "the Prometheus recorder is already installed in this process by \
             leasehold::metrics::prometheus_handle(), whose render() the service serves on its own \
             router; remove .prometheus(..), or serve only on its port",
            None,
        ));
    }
    if let Some(Installed::Listener(serving, _)) = &*installed {
        return Err(Error::metrics(
            format!(
                "the Prometheus exporter is already installed in this process (serving on {serving}); \
                 the metrics recorder is process-wide, so call .prometheus(..) on one runtime only: \
                 every runtime's metrics are served there"
            ),
            None,
        ));
    }
    let socket = parse_addr(addr)?;
    // Bind once first, for an error that says what is wrong; the listener
    // is closed again at once, and the exporter binds the same address.
    if let Err(e) = TcpListener::bind(socket) {
        return Err(Error::metrics(bind_problem(socket, &e), Some(Box::new(e))));
    }
    let builder = builder()?.with_http_listener(socket);

    // The exporter's thread builds the recorder and the listener inside its
    // own runtime, installs the recorder, and reports back. Only once the
    // recorder is installed does it start serving; on any failure it drops
    // its runtime and listener *before* reporting: nothing is left behind.
    let (report, outcome) = mpsc::sync_channel::<Result<PrometheusHandle>>(1);
    let spawned = std::thread::Builder::new()
        .name("leasehold-metrics".to_owned())
        .spawn(move || match start_serving(builder, socket) {
            Ok((runtime, exporter, handle)) => {
                let _ = report.send(Ok(handle));
                // Serves until the process exits; it only returns on a
                // fatal listener error.
                if let Err(e) = runtime.block_on(exporter) {
                    tracing::error!(addr = %socket, error = ?e, "the Prometheus exporter stopped serving");
                }
            }
            Err(e) => {
                let _ = report.send(Err(e));
            }
        });
    if let Err(e) = spawned {
        return Err(Error::metrics(
            format!("could not start its thread: {e}"),
            Some(Box::new(e)),
        ));
    }
    let handle = match outcome.recv() {
        Ok(Ok(handle)) => handle,
        Ok(Err(e)) => return Err(e),
        Err(e) => return Err(Error::metrics("its thread stopped while starting", Some(Box::new(e)))),
    };
    *installed = Some(Installed::Listener(socket, handle));
    describe();
    tracing::info!(addr = %socket, "serving leasehold metrics for Prometheus");
    Ok(())
}

/// On the exporter's thread: builds the recorder and the listener in a
/// runtime of their own and installs the recorder. On failure, everything
/// built is dropped (the listener closed) before this returns.
fn start_serving(
    builder: PrometheusBuilder,
    socket: SocketAddr,
) -> Result<(
    tokio::runtime::Runtime,
    metrics_exporter_prometheus::ExporterFuture,
    PrometheusHandle,
)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::metrics(format!("could not start its runtime: {e}"), Some(Box::new(e))))?;
    let built = {
        let _entered = runtime.enter();
        builder.build()
    };
    let (recorder, exporter) = match built {
        Ok(built) => built,
        Err(e) => {
            drop(runtime);
            return Err(Error::metrics(
                format!("could not serve on {socket}: {e}"),
                Some(Box::new(e)),
            ));
        }
    };
    let handle = recorder.handle();
    if metrics::set_global_recorder(recorder).is_err() {
        drop(exporter);
        drop(runtime);
        return Err(Error::metrics(ANOTHER_RECORDER, None));
    }
    Ok((runtime, exporter, handle))
}

/// A bind failure, in words that name the fix.
fn bind_problem(socket: SocketAddr, e: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::AddrInUse => format!(
            "port {} is already in use on {}: another process (or another exporter in this one) listens \
             there; pick a free port in .prometheus(..)",
            socket.port(),
            socket.ip()
        ),
        ErrorKind::PermissionDenied => {
            format!("not allowed to listen on {socket} ({e}): ports below 1024 need privileges; pick a port above 1024")
        }
        ErrorKind::AddrNotAvailable => format!(
            "cannot listen on {socket}: {} is not an address of this machine ({e}); use 127.0.0.1, \
             a local interface address, or 0.0.0.0",
            socket.ip()
        ),
        _ => format!("cannot listen on {socket}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::cancel::CancelReason;
    use crate::metrics as m;
    use crate::outcome::RunOutcome;

    #[test]
    fn addresses_are_checked_before_anything_binds() {
        assert_eq!(
            parse_addr("127.0.0.1:9464").ok(),
            Some(SocketAddr::from(([127, 0, 0, 1], 9464)))
        );
        assert_eq!(
            parse_addr(" localhost:9464 ").ok(),
            Some(SocketAddr::from(([127, 0, 0, 1], 9464)))
        );
        assert!(parse_addr("[::1]:9464").is_ok());
        for bad in [
            "",
            "9464",
            "127.0.0.1",
            "example.com:9464",
            "127.0.0.1:99999",
            "localhost:x",
            "127.0.0.1:0",
        ] {
            let err = parse_addr(bad).expect_err(bad);
            assert!(matches!(err, Error::InvalidInput { .. }), "{bad}: {err:?}");
            assert!(err.to_string().contains("Prometheus listen address"), "{err}");
        }
    }

    /// A service serves the handle on a route of its own router, the way
    /// `examples/axum_service.rs` does: a scrape gets leasehold's metrics,
    /// histograms with leasehold's buckets. The recorder is process-wide,
    /// so this is the one test of this binary that installs it.
    #[cfg(feature = "console")]
    #[tokio::test]
    async fn the_handle_is_served_on_the_services_own_router() {
        use axum::Router;
        use axum::body::Body;
        use axum::http::{Request, StatusCode};
        use axum::routing::get;
        use tower::ServiceExt;

        let metrics = handle().expect("install the recorder");
        let app: Router = Router::new().route("/metrics", get(move || async move { metrics.render() }));
        m::run_finished("routed", RunOutcome::Succeeded, Duration::from_secs(2));

        let response = app
            .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert!(
            text.contains("# TYPE leasehold_job_duration_seconds histogram\n"),
            "{text}"
        );
        assert!(
            text.contains("leasehold_job_duration_seconds_bucket{job_name=\"routed\",le=\"2.5\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("# HELP leasehold_job_runs_total "), "described:\n{text}");

        // Once per process: the same recorder again, and no second exporter.
        m::run_finished("routed", RunOutcome::Failed, Duration::from_secs(2));
        let again = handle().expect("the same handle").render();
        assert!(
            again.contains("leasehold_job_duration_seconds_count{job_name=\"routed\"} 2\n"),
            "{again}"
        );
        let err = install("127.0.0.1:9").expect_err("already installed");
        assert!(err.to_string().contains("prometheus_handle()"), "{err}");
    }

    /// What a scrape shows, through the exporter's own settings: every
    /// name, help texts, and the histograms as histograms with their
    /// buckets (not summaries).
    #[test]
    fn render_shows_every_metric_with_its_type() {
        let recorder = builder().expect("builder").build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            describe();
            m::claim("nightly", m::ClaimOutcome::Acquired);
            m::lost("nightly", CancelReason::Deadline);
            m::heartbeat(m::HeartbeatOutcome::Renewed, Duration::from_millis(3));
            m::run_finished("nightly", RunOutcome::Succeeded, Duration::from_secs(2));
            m::held("nightly", 1.0);
            m::remaining("nightly", Duration::from_secs(59));
            m::fence_rejected("nightly");
            m::timed_out("nightly");
            m::fence_wait("nightly", Duration::from_millis(2));
            m::poisoned_connection("in_transaction");
            m::concurrency_limit(100);
            m::runs_in_progress(1.0);
            m::jobs_paused("nightly", 0);
            m::server_timeline(1);
            m::keys_bad_args("nightly", 0);
            m::keys_unknown_kind(0);
            m::fleet_limit("nightly", 4);
            m::fleet_limit_wait("nightly", Duration::from_millis(5));
            m::fleet_limit_overdue("nightly", 0);
        });
        let text = handle.render();
        for name in names::ALL {
            assert!(text.contains(&format!("# HELP {name} ")), "no help for {name}:\n{text}");
        }
        let types = [
            (names::CLAIMS, "counter"),
            (names::LOST, "counter"),
            (names::HEARTBEATS, "counter"),
            (names::HEARTBEAT_DURATION, "histogram"),
            (names::RUNS, "counter"),
            (names::TIMEOUTS, "counter"),
            (names::RUN_DURATION, "histogram"),
            (names::HELD, "gauge"),
            (names::RUNS_IN_PROGRESS, "gauge"),
            (names::MAX_CONCURRENT_RUNS, "gauge"),
            (names::KEYS_BAD_ARGS, "gauge"),
            (names::KEYS_UNKNOWN_KIND, "gauge"),
            (names::JOBS_PAUSED, "gauge"),
            (names::SERVER_TIMELINE, "gauge"),
            (names::REMAINING, "gauge"),
            (names::FENCE_REJECTIONS, "counter"),
            (names::FENCE_WAIT, "histogram"),
            (names::LAST_SUCCESS, "gauge"),
            (names::POISONED_CONNECTIONS, "counter"),
            (names::FLEET_LIMIT, "gauge"),
            (names::FLEET_LIMIT_WAIT, "histogram"),
            (names::FLEET_LIMIT_OVERDUE, "gauge"),
        ];
        assert_eq!(types.len(), names::ALL.len());
        for (name, kind) in types {
            assert!(
                text.contains(&format!("# TYPE {name} {kind}\n")),
                "{name} is not a {kind}:\n{text}"
            );
        }
        assert!(
            text.contains("leasehold_heartbeat_duration_seconds_bucket{le=\"0.001\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("leasehold_heartbeat_duration_seconds_bucket{le=\"0.005\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("leasehold_job_duration_seconds_bucket{job_name=\"nightly\",le=\"2.5\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("leasehold_job_duration_seconds_bucket{job_name=\"nightly\",le=\"+Inf\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("leasehold_job_duration_seconds_count{job_name=\"nightly\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("leasehold_lease_lost_total{job_name=\"nightly\",reason=\"deadline\"} 1\n"),
            "{text}"
        );
        assert!(!text.contains("quantile="), "no summaries:\n{text}");
    }
}
