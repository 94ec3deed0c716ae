//! Batch claims: one statement claims many keys, each with its own fence,
//! never a live lease, never a key twice in one slot, never waiting for a
//! row another transaction holds.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{FenceGuard, JobSettings, Schedule, store::LeaseStore};
use tokio::time::Instant;

use crate::support::{self, Runs, job, quick};

const LEASE: Duration = Duration::from_secs(5);

/// (key, fence, slot of the tenure's start by the server clock).
type Slots = Arc<Mutex<Vec<(String, i64, i64)>>>;

type Body = dyn Fn(FenceGuard) -> futures::future::BoxFuture<'static, Result<(), leasehold::JobError>> + Send + Sync;

/// A body that records its run, the second its tenure began (server clock:
/// expiry at start − lease), and works 20 ms.
fn slot_body(runs: &Runs, slots: &Slots) -> Box<Body> {
    slot_body_ms(runs, slots, 1000, LEASE)
}

/// [`slot_body`] for slots of `period_ms` and a lease of `lease`; works
/// 20 ms only for slots of a second or more.
fn slot_body_ms(runs: &Runs, slots: &Slots, period_ms: i64, lease: Duration) -> Box<Body> {
    let (runs, slots) = (runs.clone(), slots.clone());
    Box::new(move |guard: FenceGuard| {
        let (runs, slots) = (runs.clone(), slots.clone());
        Box::pin(async move {
            let acquired_ms = guard.expires_at().timestamp_millis() - lease.as_millis() as i64;
            slots
                .lock()
                .unwrap()
                .push((guard.key().to_owned(), guard.fence(), acquired_ms.div_euclid(period_ms)));
            let i = runs.start(&guard);
            if period_ms >= 1000 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            runs.end(i);
            Ok(())
        })
    })
}

/// 16 replicas register the same 20 keys, each due every second, for 6 s:
/// every (key, slot) runs at most once, runs of a key never overlap, fences
/// of a key grow run after run, nearly every slot runs, and the claims are
/// batched (far fewer claim statements than runs × replicas).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_replicas_run_each_key_once_per_slot() {
    let db = support::db().await;
    support::reset_statement_stats(&db.pool).await;
    let runs = Runs::default();
    let slots: Slots = Default::default();
    let settings = quick(Schedule::every(Duration::from_secs(1)), LEASE);
    let mut replicas = Vec::new();
    for r in 0..16 {
        let jobs = (0..20)
            .map(|k| job(&format!("tick:{k}"), settings.clone(), slot_body(&runs, &slots)))
            .collect();
        replicas.push(support::replica(&db, &format!("r{r}"), 2, jobs).await);
    }
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let elapsed = started.elapsed().as_secs_f64();
    for r in &replicas {
        r.shutdown().await;
    }
    let all = runs.all();
    let mut slots = slots.lock().unwrap().clone();
    slots.sort_by_key(|(key, fence, _)| (key.clone(), *fence));
    for pair in slots.windows(2) {
        let ((ka, fa, sa), (kb, fb, sb)) = (&pair[0], &pair[1]);
        if ka == kb {
            assert!(fb > fa, "fences of {ka} must grow: {pair:?}");
            assert!(sb > sa, "{ka} ran twice in slot {sa} (fences {fa}, {fb})");
        }
    }
    for k in 0..20 {
        let key = format!("tick:{k}");
        let of_key: Vec<_> = all.iter().filter(|r| r.key == key).cloned().collect();
        let overlaps = support::overlapping_pairs(&of_key);
        assert!(overlaps.is_empty(), "{key}: overlapping runs {overlaps:?}");
        assert!(
            of_key.len() + 2 >= elapsed.floor() as usize,
            "{key}: {} runs in {elapsed:.1} s",
            of_key.len()
        );
    }
    let claims = support::statement_calls(&db.pool, "AS t(key, ttl, job, run_timeout, head_start)").await;
    let holders: std::collections::BTreeSet<&str> = all.iter().map(|r| r.holder.as_str()).collect();
    println!(
        "measured: {} runs of 20 keys in {elapsed:.1} s by {} of 16 replicas; {claims} claim statements ({:.2} per run)",
        all.len(),
        holders.len(),
        claims as f64 / all.len() as f64
    );
    assert!(
        (claims as usize) < all.len() * 16,
        "claims are batched: {claims} statements for {} runs",
        all.len()
    );
}

/// A lease held by someone else (a live tenure, and due) is never claimed
/// by a batch: the replica waits, and runs the key once it is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_claim_never_takes_a_live_lease() {
    let db = support::db().await;
    let runs = Runs::default();
    let settings = quick(Schedule::every(Duration::from_secs(1)), LEASE);
    let rt = support::replica(
        &db,
        "replica",
        2,
        vec![job("held", settings, runs.body(Duration::from_millis(10)))],
    )
    .await;
    // An outsider holds the lease for a minute; the key is due meanwhile.
    let outsider = LeaseStore::new(db.pool.clone());
    let taken = loop {
        if let Some(l) = outsider
            .claim_run("held", "outsider", Duration::from_secs(60), leasehold::store::Due::Now)
            .await
            .unwrap()
            .acquired()
        {
            break l;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let before = runs.all().len();
    // The key is due (by the server's clock) while the outsider holds it,
    // and two polls propose it.
    support::until_due(&outsider, "held").await;
    support::wait_polls(&rt, 2).await;
    assert_eq!(runs.all().len(), before, "no run while the outsider holds the lease");
    assert!(outsider.release("held", "outsider", taken.fence).await.unwrap());
    let after = runs.wait_started(before + 1, Duration::from_secs(5)).await;
    assert!(
        after.last().unwrap().fence > taken.fence,
        "the next run has a newer fence"
    );
    rt.shutdown().await;
}

/// A lease row locked by another transaction (a service's `SELECT … FOR
/// UPDATE`) is skipped, not waited for: the other keys of the same batch
/// run on their slots while the lock lasts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_row_does_not_hold_up_the_other_keys_of_a_batch() {
    let db = support::db().await;
    let runs = Runs::default();
    let settings = quick(Schedule::every(Duration::from_secs(1)), LEASE);
    let jobs = ["locked", "free:1", "free:2"]
        .iter()
        .map(|k| job(k, settings.clone(), runs.body(Duration::from_millis(10))))
        .collect();
    let rt = support::replica(&db, "replica", 3, jobs).await;
    // Lock the row while its lease is free (between two runs), so the next
    // batch claim meets the lock, not the release.
    support::eventually(Duration::from_secs(5), || {
        runs.all()
            .iter()
            .any(|r| r.key == "locked" && r.ended.is_some())
            .then_some(())
    })
    .await;
    let store = LeaseStore::new(db.pool.clone());
    while store.get("locked").await.unwrap().is_some_and(|row| row.is_held()) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let lock = support::lock_lease_row(&db.pool, "locked").await;
    let locked_at = Instant::now();
    let before = runs.all().len();
    // Within 3 s, the free keys run in two slots each (the locked key,
    // on the same schedule, is due in them too); then two more polls.
    let in_lock = || -> Vec<String> {
        runs.all()[before..]
            .iter()
            .filter(|r| r.started > locked_at)
            .map(|r| r.key.clone())
            .collect()
    };
    support::holds_within(Duration::from_secs(3), || {
        in_lock().iter().filter(|k| k.starts_with("free")).count() >= 4
    })
    .await;
    support::wait_polls(&rt, 2).await;
    let during = in_lock();
    drop(lock);
    rt.shutdown().await;
    let free_runs = during.iter().filter(|k| k.starts_with("free")).count();
    assert!(
        free_runs >= 4,
        "the free keys kept running while one row was locked: {during:?}"
    );
    assert!(
        !during.iter().any(|k| k == "locked"),
        "the locked key cannot run: {during:?}"
    );
}

/// The same for releases: the lease row of a key whose run is in progress
/// is locked by another transaction when the run ends. Its release is
/// skipped and retried, not waited for, so the other keys' releases — and so
/// their next runs — go on while the lock lasts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_meeting_a_locked_row_does_not_hold_up_the_others() {
    let db = support::db().await;
    let runs = Runs::default();
    let settings = quick(Schedule::every(Duration::from_secs(1)), LEASE);
    let jobs = vec![
        job("locked", settings.clone(), runs.body(Duration::from_millis(300))),
        job("free:1", settings.clone(), runs.body(Duration::from_millis(10))),
        job("free:2", settings.clone(), runs.body(Duration::from_millis(10))),
    ];
    let rt = support::replica(&db, "replica", 3, jobs).await;
    support::eventually(Duration::from_secs(5), || {
        runs.all()
            .iter()
            .any(|r| r.key == "locked" && r.ended.is_none())
            .then_some(())
    })
    .await;
    let lock = support::lock_lease_row(&db.pool, "locked").await;
    let locked_at = Instant::now();
    // Within 3 s of the lock, the free keys run four times.
    let free_runs = || {
        runs.all()
            .iter()
            .filter(|r| r.key.starts_with("free") && r.started > locked_at)
            .count()
    };
    support::holds_within(Duration::from_secs(3), || free_runs() >= 4).await;
    let free_runs = free_runs();
    drop(lock);
    rt.shutdown().await;
    assert!(
        free_runs >= 4,
        "the free keys kept running while a release waited for a lock: {free_runs} runs"
    );
}

/// One replica, 200 keys due every 100 ms, runs of ~0 ms, for 5 s: no key
/// ever stalls. A slot missed here and there under load is tolerated; a key
/// that stops running for a second or more is not. (A run that ended while
/// the scheduler was still reading its claim's answer once made its key
/// look "missing", and a stale answer then parked it until the next poll —
/// here 30 s away, past the end of the window.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_keys_run_in_every_slot_without_stalling() {
    let db = support::db().await;
    let slots: Slots = Default::default();
    let runs = Runs::default();
    let long = Duration::from_secs(30);
    let settings = JobSettings::new(Schedule::every(Duration::from_millis(100))).lease(long);
    let jobs = (0..200)
        .map(|k| {
            job(
                &format!("fast:{k}"),
                settings.clone(),
                slot_body_ms(&runs, &slots, 100, long),
            )
        })
        .collect();
    let rt = support::replica_on(db.pool_with(4).await, "replica", long, jobs).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let from = unix_ms() / 100 + 1;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let to = unix_ms() / 100; // slots [from, to)
    rt.shutdown().await;
    let slots = slots.lock().unwrap().clone();
    let mut worst = (String::new(), 0);
    for k in 0..200 {
        let key = format!("fast:{k}");
        let ran: std::collections::BTreeSet<i64> = slots
            .iter()
            .filter(|(kk, _, s)| *kk == key && (from..to).contains(s))
            .map(|(_, _, s)| *s)
            .collect();
        // The longest stretch of slots in the window without a run.
        let mut previous = from - 1;
        let mut longest = 0;
        for slot in ran.iter().copied().chain([to]) {
            longest = longest.max(slot - previous - 1);
            previous = slot;
        }
        if longest > worst.1 {
            worst = (key, longest);
        }
    }
    println!(
        "measured: longest stretch without a run: {} slots ({})",
        worst.1, worst.0
    );
    assert!(
        worst.1 <= 10,
        "{} went {} slots of 100 ms without a run (window {} slots)",
        worst.0,
        worst.1,
        to - from
    );
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}
