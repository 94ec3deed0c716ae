//! Priorities between jobs (`RuntimeBuilder::priority_of`): when more keys
//! are due than a replica has room for, a job of higher priority goes
//! first; a key of lower priority still runs once it has waited longer
//! than the difference of head starts, however many keys of higher
//! priority keep falling due.

use std::time::Duration;

use leasehold::{Error, Runtime, Schedule};
use tokio::time::Instant;

use crate::support::{self, Runs, job, quick};

/// One run at a time, `billing` at priority 5, each level worth 200 ms of
/// waiting (a head start of 1 s), runs of 150 ms.
async fn replica(db: &support::TestDb, keys: &[String], runs: &Runs) -> Runtime {
    let settings = quick(Schedule::Manual, Duration::from_secs(30));
    let mut builder = Runtime::builder(db.pool_with(3).await)
        .holder("r1")
        .poll_interval(Duration::from_millis(200))
        .max_concurrent_runs(1)
        .priority_of("billing", 5)
        .priority_aging(Duration::from_millis(200));
    for key in keys {
        builder = builder.register(job(key, settings.clone(), runs.body(Duration::from_millis(150))));
    }
    builder.start().await.expect("runtime starts")
}

/// Six reports fall due, then three billing keys: with room for one run,
/// the billing keys run before every report still waiting (they are 50 ms
/// younger, but worth a second more). Then billing keys are triggered
/// without pause for 6 s, always one due: the reports still all run, each
/// within its head-start difference (1 s) of waiting, plus the runs ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_priority_goes_first_and_a_lower_one_still_runs_under_a_flood() {
    let db = support::db().await;
    let runs = Runs::default();
    let reports: Vec<String> = (0..6).map(|k| format!("report:{k}")).collect();
    let billing: Vec<String> = (0..3).map(|k| format!("billing:{k}")).collect();
    let keys: Vec<String> = reports.iter().chain(&billing).cloned().collect();
    let rt = replica(&db, &keys, &runs).await;

    for key in &reports {
        rt.trigger(key).await.expect("trigger");
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    for key in &billing {
        rt.trigger(key).await.expect("trigger");
    }
    // Every billing key is due from here. A report that started before
    // (a slow trigger under load lets one end and the next begin) was due
    // alone.
    let billing_due = Instant::now();
    let mut first = support::eventually(Duration::from_secs(20), || {
        let all = runs.all();
        (all.iter().filter(|r| r.ended.is_some()).count() >= keys.len()).then_some(all)
    })
    .await;
    first.sort_by_key(|r| r.started);
    let order: Vec<&str> = first.iter().map(|r| r.key.as_str()).collect();
    let since_due: Vec<&str> = first
        .iter()
        .filter(|r| r.started >= billing_due)
        .map(|r| r.key.as_str())
        .collect();
    let last_billing = since_due
        .iter()
        .rposition(|k| k.starts_with("billing:"))
        .expect("billing ran");
    let reports_before = since_due[..last_billing]
        .iter()
        .filter(|k| k.starts_with("report:"))
        .count();
    assert!(
        reports_before <= 1,
        "billing waited behind reports (only one claimed before it fell due may come first): {order:?}"
    );

    // The flood: every billing key triggered every 20 ms for 6 s.
    let flood_from = runs.all().len();
    for key in &reports {
        rt.trigger(key).await.expect("trigger");
    }
    let reports_due = Instant::now();
    let until = reports_due + Duration::from_secs(6);
    while Instant::now() < until {
        for key in &billing {
            rt.trigger(key).await.expect("trigger");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let flood: Vec<_> = runs.all().split_off(flood_from);
    let report_starts: Vec<Instant> = flood
        .iter()
        .filter(|r| r.key.starts_with("report:"))
        .map(|r| r.started)
        .collect();
    let billing_runs = flood.iter().filter(|r| r.key.starts_with("billing:")).count();
    assert_eq!(
        report_starts.len(),
        reports.len(),
        "every report ran during the flood ({billing_runs} billing runs): {:?}",
        flood.iter().map(|r| r.key.as_str()).collect::<Vec<_>>()
    );
    assert!(billing_runs >= 6, "the flood kept billing busy: {billing_runs} runs");
    let last = report_starts.iter().max().expect("reports ran");
    eprintln!(
        "priority flood: {billing_runs} billing runs, the six reports started within {:?}",
        last.saturating_duration_since(reports_due)
    );
    rt.shutdown().await;
}

/// A priority above 100, on a name nothing registered, given twice, or an
/// aging of zero is refused at start, naming the value and what to do.
#[tokio::test]
async fn a_priority_out_of_range_unknown_or_given_twice_is_refused() {
    let db = support::db().await;
    let refused = |name: &'static str, priority: u8, twice: bool, aging: Duration| {
        let pool = db.pool.clone();
        async move {
            let mut builder = Runtime::builder(pool)
                .register(job(
                    "billing:0",
                    quick(Schedule::Manual, Duration::from_secs(30)),
                    |_| async { Ok(()) },
                ))
                .priority_of(name, priority)
                .priority_aging(aging);
            if twice {
                builder = builder.priority_of(name, priority);
            }
            let err = builder.start().await.expect_err("refused");
            assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
            err.to_string()
        }
    };
    let minute = Duration::from_secs(60);
    let absurd = refused("billing", 200, false, minute).await;
    assert!(
        absurd.contains("200") && absurd.contains("0 (the default, the lowest) to 100"),
        "{absurd}"
    );
    let unknown = refused("biling", 5, false, minute).await;
    assert!(
        unknown.contains("biling") && unknown.contains("registered: billing"),
        "{unknown}"
    );
    let twice = refused("billing", 5, true, minute).await;
    assert!(twice.contains("one priority"), "{twice}");
    let zero = refused("billing", 5, false, Duration::ZERO).await;
    assert!(zero.contains("priority_aging"), "{zero}");
}
