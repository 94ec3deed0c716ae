//! Pause and resume, fleet-wide and durable: a paused key is claimed by no
//! replica, a run in progress finishes unless the pause cancels it, and a
//! resumed key runs again once per slot.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use leasehold::{
    CancelReason, Schedule,
    operator::{Resumed, Target, Triggered},
    runtime::RunOutcome,
    store::{Claim, Due, LeaseStore},
};

use crate::support::{self, Runs, job, quick};

/// Runs per epoch second (the slots of an every-second schedule).
fn per_slot(runs: &[crate::support::RunRecord]) -> BTreeMap<i64, usize> {
    let mut slots = BTreeMap::new();
    for run in runs {
        *slots.entry(run.started_unix.floor() as i64).or_default() += 1;
    }
    slots
}

/// Three replicas run one every-second key. Paused, it runs nowhere: its
/// next slot comes, and every replica polls twice after it, without a run;
/// resumed, it runs again, at most once per slot, in (nearly) every slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_key_runs_on_no_replica_until_resumed() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let runs = Runs::default();
    let settings = || quick(Schedule::every(Duration::from_secs(1)), Duration::from_secs(5));
    let mut fleet = Vec::new();
    for holder in ["r1", "r2", "r3"] {
        let key = job("nightly", settings(), runs.body(Duration::from_millis(50)));
        fleet.push(support::replica(&db, holder, 2, vec![key]).await);
    }
    runs.wait_started(2, Duration::from_secs(5)).await;

    let pause = store
        .controls()
        .pause(&Target::key("nightly").unwrap(), false, "test")
        .await
        .unwrap();
    assert_eq!((pause.keys, pause.cancel), (1, false));
    // A run claimed just before the pause committed may still start: one
    // whole pass of each replica begun after the pause, and that run's end.
    for rt in &fleet {
        support::wait_polls(rt, 1).await;
    }
    let before = support::eventually(Duration::from_secs(5), || {
        let all = runs.all();
        all.iter().all(|r| r.ended.is_some()).then_some(all.len())
    })
    .await;
    // The key's next slot comes while it is paused (by the server's clock),
    // and each replica polls twice after it.
    support::until_due(&store, "nightly").await;
    for rt in &fleet {
        support::wait_polls(rt, 2).await;
    }
    let during = runs.all().len() - before;
    assert_eq!(during, 0, "runs while paused: {:?}", &runs.all()[before..]);
    assert!(matches!(
        store
            .claim_run("nightly", "intruder", Duration::from_secs(5), Due::Now)
            .await
            .unwrap(),
        Claim::Paused { .. }
    ));
    assert_eq!(store.controls().trigger("nightly").await.unwrap(), Triggered::Paused);

    let resumed_at = Instant::now();
    assert!(matches!(
        store.controls().resume(&Target::key("nightly").unwrap()).await.unwrap(),
        Resumed::Yes { .. }
    ));
    support::eventually(Duration::from_secs(3), || {
        runs.all()
            .iter()
            .skip(before)
            .any(|r| r.started >= resumed_at)
            .then_some(())
    })
    .await;
    // Four slots with a run, within the 4 s after the first one.
    let after = support::eventually(Duration::from_secs(4), || {
        let after: Vec<_> = runs.all().into_iter().filter(|r| r.started >= resumed_at).collect();
        (per_slot(&after).len() >= 4).then_some(after)
    })
    .await;
    let slots = per_slot(&after);
    assert!(
        slots.values().all(|&n| n == 1),
        "more than one run in a slot: {slots:?}"
    );
    assert!(
        slots.len() >= 4,
        "runs in only {} slots after resume: {slots:?}",
        slots.len()
    );
    assert_eq!(
        store.controls().resume(&Target::key("nightly").unwrap()).await.unwrap(),
        Resumed::NotPaused
    );
    for rt in fleet {
        rt.shutdown().await;
    }
}

/// A run in progress when its key is paused finishes on its own; with
/// `cancel`, the next renewal cancels it (reason *paused*), it is released,
/// and its history row says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_lets_the_run_finish_unless_it_cancels_it() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let runs = Runs::default();
    let settings = quick(Schedule::Manual, Duration::from_secs(3));
    let rt = support::replica(
        &db,
        "r1",
        2,
        vec![
            job("short:a", settings.clone(), runs.body(Duration::from_millis(1500))),
            job("long:b", settings, runs.body(Duration::from_secs(600))),
        ],
    )
    .await;
    rt.trigger("short:a").await.unwrap();
    rt.trigger("long:b").await.unwrap();
    runs.wait_started(2, Duration::from_secs(5)).await;

    rt.pause(&Target::key("short:a").unwrap(), false).await.unwrap();
    let paused_at = Instant::now();
    let cancelling = rt.pause(&Target::job("long"), true).await.unwrap();
    assert_eq!((cancelling.keys, cancelling.running), (1, 1));

    let all = support::eventually(Duration::from_secs(5), || {
        let all = runs.all();
        all.iter().all(|r| r.ended.is_some()).then_some(all)
    })
    .await;
    let short = all.iter().find(|r| r.key == "short:a").unwrap();
    let long = all.iter().find(|r| r.key == "long:b").unwrap();
    assert_eq!(short.cancelled, None, "a pause without cancel lets the run finish");
    let (when, reason) = long.cancelled.expect("the cancelling pause stops the run");
    assert_eq!(reason, CancelReason::Paused);
    assert!(
        when - paused_at < Duration::from_secs(3),
        "cancelled after {:?}",
        when - paused_at
    );

    let released = support::eventually_async(Duration::from_secs(5), || async {
        let row = store.get("long:b").await.unwrap()?;
        (!row.is_held()).then_some(row)
    })
    .await;
    assert!(!released.is_held(), "the cancelled run released its lease");
    let history = support::eventually_async(Duration::from_secs(5), || async {
        let h = store.records().history("long:b", 10).await.unwrap();
        (!h.is_empty()).then_some(h)
    })
    .await;
    assert_eq!(history[0].outcome, RunOutcome::Cancelled);
    assert_eq!(history[0].reason.as_deref(), Some("paused"));
    let short_history = store.records().history("short:a", 10).await.unwrap();
    assert_eq!(short_history[0].outcome, RunOutcome::Succeeded);

    // Neither runs again while paused, trigger or not: the trigger wakes
    // the key here, and two passes of the scheduler propose it in vain.
    rt.trigger("short:a").await.unwrap();
    support::wait_polls(&rt, 2).await;
    assert_eq!(runs.all().len(), 2);
    rt.shutdown().await;
}

/// A pause says, from its own statement, whether it found its target
/// paused already (and whether that pause cancelled runs): new, then
/// already paused without cancel, then with; the first author and time are
/// kept, and a pause after a resume is new again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_says_whether_its_target_was_paused_already() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let controls = store.controls();
    let target = Target::job("billing");

    let first = controls.pause(&target, false, "alice@laptop").await.unwrap();
    assert_eq!(first.already_paused, None);
    let again = controls.pause(&target, true, "bob@laptop").await.unwrap();
    assert_eq!(again.already_paused, Some(false));
    assert_eq!(
        (again.paused_by.as_str(), again.paused_at, again.cancel),
        ("alice@laptop", first.paused_at, true)
    );
    let third = controls.pause(&target, false, "carol@laptop").await.unwrap();
    assert_eq!((third.already_paused, third.cancel), (Some(true), true));
    let listed = controls.pauses().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].already_paused, None, "a listed pause answers no pause");

    assert!(matches!(controls.resume(&target).await.unwrap(), Resumed::Yes { .. }));
    let after = controls.pause(&target, false, "dave@laptop").await.unwrap();
    assert_eq!((after.already_paused, after.paused_by.as_str()), (None, "dave@laptop"));
}

/// Pausing a job pauses every key of it — on every replica, including a
/// key registered after the pause — and leaves other jobs alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_job_pauses_all_its_keys_and_nothing_else() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    store
        .controls()
        .pause(&Target::job("tenant"), false, "test")
        .await
        .unwrap();
    let runs = Runs::default();
    let settings = || quick(Schedule::every(Duration::from_secs(1)), Duration::from_secs(5));
    let rt = support::replica(
        &db,
        "r1",
        2,
        vec![
            job("tenant:a", settings(), runs.body(Duration::from_millis(10))),
            job("tenant:b", settings(), runs.body(Duration::from_millis(10))),
            job("other", settings(), runs.body(Duration::from_millis(10))),
        ],
    )
    .await;
    rt.add(job("tenant:c", settings(), runs.body(Duration::from_millis(10))))
        .await
        .unwrap();
    // The keys share one schedule: once "other" has run in two slots since
    // the last key was added, every tenant key was due in those slots too,
    // and a last poll after them proposes whatever is due.
    let added = Instant::now();
    support::eventually(Duration::from_secs(5), || {
        let others = runs
            .all()
            .iter()
            .filter(|r| r.key == "other" && r.started >= added)
            .count();
        (others >= 2).then_some(())
    })
    .await;
    support::wait_polls(&rt, 2).await;
    let keys: Vec<String> = runs.all().into_iter().map(|r| r.key).collect();
    assert!(keys.iter().any(|k| k == "other"), "the other job runs: {keys:?}");
    assert!(keys.iter().all(|k| k == "other"), "a paused job's key ran: {keys:?}");
    let pauses = store.controls().pauses().await.unwrap();
    assert_eq!(pauses.len(), 1);
    assert_eq!((pauses[0].target.clone(), pauses[0].keys), (Target::job("tenant"), 3));

    let before = runs.all().len();
    rt.resume(&Target::job("tenant")).await.unwrap();
    let all = support::eventually(Duration::from_secs(5), || {
        let all = runs.all();
        let tenants = all[before..].iter().filter(|r| r.key.starts_with("tenant:")).count();
        (tenants >= 3).then_some(all)
    })
    .await;
    for key in ["tenant:a", "tenant:b", "tenant:c"] {
        assert!(all[before..].iter().any(|r| r.key == key), "{key} runs after resume");
    }
    rt.shutdown().await;
}

/// Every claim refuses a paused key — the re-entrant `claim`, `claim_run`
/// (even a manual `Due::Now`), a key with no row yet (key pause), and a
/// key whose row names a paused job — and takes it again once resumed.
#[tokio::test]
async fn every_claim_refuses_a_paused_key() {
    let (db, store) = support::store().await;
    let ttl = Duration::from_secs(5);
    let paused = |claim: Claim| matches!(claim, Claim::Paused { .. });

    store
        .controls()
        .pause(&Target::key("k:new").unwrap(), false, "test")
        .await
        .unwrap();
    assert!(
        paused(store.claim("k:new", "h1", ttl).await.unwrap()),
        "insert path, claim"
    );
    assert!(
        paused(store.claim_run("k:new", "h1", ttl, Due::Now).await.unwrap()),
        "insert path, claim_run"
    );
    assert_eq!(store.get("k:new").await.unwrap(), None, "nothing was inserted");

    let lease = store
        .claim_run("k:old", "h1", ttl, Due::Now)
        .await
        .unwrap()
        .acquired()
        .unwrap();
    assert!(store.release(&lease.key, "h1", lease.fence).await.unwrap());
    store
        .controls()
        .pause(&Target::key("k:old").unwrap(), false, "test")
        .await
        .unwrap();
    assert!(
        paused(store.claim("k:old", "h2", ttl).await.unwrap()),
        "takeover path, claim"
    );
    assert!(
        paused(store.claim_run("k:old", "h2", ttl, Due::Now).await.unwrap()),
        "takeover path, claim_run"
    );

    store.controls().resume(&Target::key("k:old").unwrap()).await.unwrap();
    assert!(
        store
            .claim_run("k:old", "h2", ttl, Due::Now)
            .await
            .unwrap()
            .acquired()
            .is_some()
    );

    // A row a runtime registered carries its job's name: a job pause
    // covers it for every claim, the store's included.
    let rt = support::replica(
        &db,
        "r1",
        2,
        vec![job("reports:x", quick(Schedule::Manual, ttl), |_| async { Ok(()) })],
    )
    .await;
    rt.shutdown().await;
    store
        .controls()
        .pause(&Target::job("reports"), false, "test")
        .await
        .unwrap();
    assert!(
        paused(store.claim("reports:x", "h3", ttl).await.unwrap()),
        "job pause, claim"
    );
    assert!(
        paused(store.claim_run("reports:x", "h3", ttl, Due::Now).await.unwrap()),
        "job pause, claim_run"
    );
}
