//! Traces: what a service exporting them with `tracing-opentelemetry`
//! receives from leasehold — one `leasehold.run` span per run, with its job,
//! key, holder and fence, and how the run ended — read back from the
//! OpenTelemetry SDK's in-memory exporter, as a collector would get them.

use std::time::Duration;

use leasehold::{
    FenceGuard, Schedule,
    store::{Claim, LeaseStore},
};
use opentelemetry::trace::{Status, TracerProvider as _};
use opentelemetry::{Key, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing_subscriber::layer::SubscriberExt;

use crate::support::{self, Runs, eventually, job, quick, replica};

/// The spans a service's OpenTelemetry pipeline exports: the
/// `tracing-opentelemetry` layer over the SDK, with the in-memory exporter
/// in place of OTLP.
struct Exported {
    exporter: InMemorySpanExporter,
    // Kept alive: dropping the provider shuts the pipeline down.
    _provider: SdkTracerProvider,
}

impl Exported {
    /// Exports, from now on and on this thread (a current-thread test runs
    /// the runtime's tasks on it), until the guard is dropped.
    fn capture() -> (Exported, tracing::subscriber::DefaultGuard) {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("leasehold-test"));
        let guard = support::scoped_subscriber(tracing_subscriber::registry().with(layer));
        let exported = Exported {
            exporter,
            _provider: provider,
        };
        (exported, guard)
    }

    /// The ended `leasehold.run` span of `key`, once exported.
    fn run_of(&self, key: &str) -> Option<SpanData> {
        let spans = self.exporter.get_finished_spans().expect("read the exporter");
        spans
            .into_iter()
            .find(|s| s.name == "leasehold.run" && attribute(s, "key") == Some(Value::from(key.to_owned())))
    }
}

fn attribute(span: &SpanData, name: &str) -> Option<Value> {
    let key = Key::from(name.to_owned());
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .map(|kv| kv.value.clone())
}

fn text(span: &SpanData, name: &str) -> Option<String> {
    attribute(span, name).map(|v| v.as_str().into_owned())
}

/// Asserts what identifies the run on its span — job, key, holder "replica-a"
/// and the fence its guard had — and its outcome.
fn assert_run(span: &SpanData, job: &str, key: &str, fence: i64, outcome: &str) {
    assert_eq!(text(span, "job").as_deref(), Some(job), "{span:?}");
    assert_eq!(text(span, "key").as_deref(), Some(key), "{span:?}");
    assert_eq!(text(span, "holder").as_deref(), Some("replica-a"), "{span:?}");
    assert_eq!(attribute(span, "fence"), Some(Value::I64(fence)), "{span:?}");
    assert_eq!(text(span, "outcome").as_deref(), Some(outcome), "{span:?}");
}

/// Four runs on one replica — one succeeds, one fails, one panics, one loses
/// its lease to another replica — each end as one span carrying its job,
/// key, holder, fence and outcome (the names of the metrics and the
/// history), with an error status for the failure and the panic (their
/// text) and for the loss.
#[tokio::test]
async fn each_run_exports_a_span_with_its_lease_and_outcome() {
    let db = support::db().await;
    let runs = Runs::default();
    let failing = {
        let runs = runs.clone();
        move |guard: FenceGuard| {
            let runs = runs.clone();
            async move {
                let i = runs.start(&guard);
                runs.end(i);
                Err(std::io::Error::other("ledger unreachable").into())
            }
        }
    };
    let panicking = {
        let runs = runs.clone();
        move |guard: FenceGuard| {
            let runs = runs.clone();
            async move {
                runs.start(&guard);
                panic!("ledger corrupt");
            }
        }
    };
    let jobs = vec![
        job(
            "report:acme",
            quick(Schedule::Manual, Duration::from_secs(10)),
            runs.body(Duration::ZERO),
        ),
        job(
            "invoice:acme",
            quick(Schedule::Manual, Duration::from_secs(10)),
            failing,
        ),
        job(
            "audit:acme",
            quick(Schedule::Manual, Duration::from_secs(10)),
            panicking,
        ),
        job(
            "billing:acme",
            quick(Schedule::Manual, Duration::from_secs(3)),
            runs.body(Duration::from_secs(60)),
        ),
    ];
    let rt = replica(&db, "replica-a", 4, jobs).await;
    let (exported, _capture) = Exported::capture();

    rt.trigger("report:acme").await.unwrap();
    rt.trigger("invoice:acme").await.unwrap();
    rt.trigger("audit:acme").await.unwrap();
    rt.trigger("billing:acme").await.unwrap();
    // Another replica takes billing over once its lease has expired.
    eventually(Duration::from_secs(10), || {
        runs.all().iter().any(|r| r.key == "billing:acme").then_some(())
    })
    .await;
    support::expire_now(&db.pool, "billing:acme").await;
    let claim = LeaseStore::new(db.pool.clone())
        .claim("billing:acme", "replica-b", Duration::from_secs(30))
        .await
        .unwrap();
    assert!(matches!(claim, Claim::Acquired(_)), "{claim:?}");

    let within = Duration::from_secs(10);
    let report = eventually(within, || exported.run_of("report:acme")).await;
    let invoice = eventually(within, || exported.run_of("invoice:acme")).await;
    let audit = eventually(within, || exported.run_of("audit:acme")).await;
    let billing = eventually(within, || exported.run_of("billing:acme")).await;
    rt.shutdown().await;
    let fence = |key: &str| runs.all().iter().find(|r| r.key == key).expect("the job ran").fence;

    assert_run(&report, "report", "report:acme", fence("report:acme"), "succeeded");
    assert_eq!(attribute(&report, "reason"), None);
    assert_eq!(report.status, Status::Unset);

    assert_run(&invoice, "invoice", "invoice:acme", fence("invoice:acme"), "failed");
    assert_eq!(invoice.status, Status::error("ledger unreachable"));

    assert_run(&audit, "audit", "audit:acme", fence("audit:acme"), "panicked");
    assert_eq!(audit.status, Status::error("ledger corrupt"));

    assert_run(&billing, "billing", "billing:acme", fence("billing:acme"), "cancelled");
    assert_eq!(text(&billing, "reason").as_deref(), Some("stolen"));
    assert_eq!(billing.status, Status::error("lease lost (stolen)"));
}
