//! Lease store scenarios: one test per invariant of docs/design.md §4 (and per guard
//! clause of the claim, renew and release statements).

use std::sync::Arc;
use std::time::Duration;

use leasehold::{
    Error,
    store::{Claim, Due, Lease, LeaseStore, Renewal},
};
use tokio::sync::Barrier;

use crate::support::{self, LONG, expire_now, operator_delete};

fn acquired(claim: Claim) -> Lease {
    match claim {
        Claim::Acquired(lease) => lease,
        other => panic!("expected the claim to acquire the lease, got {other:?}"),
    }
}

/// Invariant 3: of 64 claimers on separate connections racing for one free
/// key, exactly one wins — 50 rounds, a new key each round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_of_64_concurrent_claimers_wins() {
    let db = support::db().await;
    const CLAIMERS: usize = 64;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .min_connections(CLAIMERS as u32)
        .max_connections(CLAIMERS as u32)
        .connect_with(db.options.clone())
        .await
        .expect("pool");
    let store = LeaseStore::new(pool.clone());
    // Hold all 64 connections once so each claimer below gets its own.
    let mut warm = Vec::new();
    for _ in 0..CLAIMERS {
        warm.push(pool.acquire().await.expect("connection"));
    }
    drop(warm);
    for round in 0..50 {
        let key = format!("race-{round}");
        let barrier = Arc::new(Barrier::new(CLAIMERS));
        let tasks: Vec<_> = (0..CLAIMERS)
            .map(|i| {
                let (store, barrier, key) = (store.clone(), barrier.clone(), key.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    store.claim(&key, &format!("replica-{i}"), LONG).await
                })
            })
            .collect();
        let mut winners = Vec::new();
        for task in tasks {
            match task.await.expect("task") {
                Ok(Claim::Acquired(lease)) => winners.push(lease),
                Ok(Claim::HeldElsewhere { .. }) => {}
                other => panic!("round {round}: unexpected claim answer {other:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        let row = store.get(&key).await.unwrap().expect("row");
        assert_eq!(
            (row.holder.as_str(), row.fence),
            (winners[0].holder.as_str(), winners[0].fence)
        );
    }
}

/// Invariant 3 (re-entrance) and 4: the holder re-claiming its live lease
/// keeps its tenure; another holder is refused while it is valid and takes
/// over with a greater fence once it expired.
#[tokio::test]
async fn reentrant_claim_keeps_fence_and_takeover_after_expiry_advances_it() {
    let (db, store) = support::store().await;
    let first = acquired(store.claim("k", "a", LONG).await.unwrap());
    let again = acquired(store.claim("k", "a", LONG).await.unwrap());
    assert_eq!(again.fence, first.fence, "re-entrant claim keeps the fence");
    assert_eq!(
        again.acquired_at, first.acquired_at,
        "re-entrant claim keeps the tenure"
    );
    assert!(again.expires_at >= first.expires_at);

    match store.claim("k", "b", LONG).await.unwrap() {
        Claim::HeldElsewhere { current: Some(current) } => {
            assert_eq!((current.holder.as_str(), current.fence), ("a", first.fence));
            assert!(current.is_held());
        }
        other => panic!("a valid lease must be held elsewhere, got {other:?}"),
    }

    expire_now(&db.pool, "k").await;
    let taken = acquired(store.claim("k", "b", LONG).await.unwrap());
    assert!(taken.fence > first.fence, "takeover must advance the fence");
    assert_eq!(taken.holder, "b");
    assert!(
        taken.remaining > Duration::from_secs(590) && taken.remaining <= LONG,
        "{:?}",
        taken.remaining
    );
}

/// The re-entrant claim of an *expired* lease by its own former holder is a
/// new tenure: the CASE must not keep the old fence after expiry.
#[tokio::test]
async fn reclaim_by_same_holder_after_expiry_is_a_new_tenure() {
    let (db, store) = support::store().await;
    let first = acquired(store.claim("k", "a", LONG).await.unwrap());
    expire_now(&db.pool, "k").await;
    let second = acquired(store.claim("k", "a", LONG).await.unwrap());
    assert!(second.fence > first.fence);
    assert!(second.acquired_at > first.acquired_at);
}

/// Invariant 5: a claim for a new run gets a fresh fence even from the
/// holder that still holds the lease.
#[tokio::test]
async fn every_run_claim_gets_a_fresh_fence() {
    let (db, store) = support::store().await;
    let run1 = acquired(store.claim_run("job", "a", LONG, Due::Scheduled).await.unwrap());
    // Not re-entrant: the same holder id (maybe another process with a
    // copied configuration) cannot start a run while the lease is live.
    assert!(matches!(
        store.claim_run("job", "a", LONG, Due::Now).await.unwrap(),
        Claim::HeldElsewhere { .. }
    ));
    support::expire_now(&db.pool, "job").await;
    let run2 = acquired(store.claim_run("job", "a", LONG, Due::Now).await.unwrap());
    assert!(run2.fence > run1.fence);
    // ... and the earlier run is now superseded: it can neither renew nor release.
    assert_eq!(store.renew(&run1, LONG).await.unwrap(), Renewal::Lost);
    assert!(!store.release("job", "a", run1.fence).await.unwrap());
    assert!(store.get("job").await.unwrap().unwrap().is_held());
    // Another holder still cannot start a run while the lease is valid.
    assert!(matches!(
        store.claim_run("job", "b", LONG, Due::Now).await.unwrap(),
        Claim::HeldElsewhere { .. }
    ));
}

/// The schedule clause of the run claim: a free lease whose next run is not
/// due yet (server clock) is not claimed by a scheduled claim, but is by a
/// manual one.
#[tokio::test]
async fn scheduled_claim_waits_for_the_due_time() {
    let (db, store) = support::store().await;
    acquired(store.claim_run("job", "a", LONG, Due::Scheduled).await.unwrap());
    let in_an_hour = store.server_now().await.unwrap() + chrono::Duration::hours(1);
    support::owe_slot(&db.pool, "job", in_an_hour).await;
    match store.claim_run("job", "b", LONG, Due::Scheduled).await.unwrap() {
        Claim::NotDue { current } => {
            assert!(!current.is_held());
            assert!(current.due_in() > Duration::from_secs(3500), "{:?}", current.due_in());
        }
        other => panic!("expected NotDue, got {other:?}"),
    }
    acquired(store.claim_run("job", "b", LONG, Due::Now).await.unwrap());
}

/// Invariant 4: over 1,000 mixed claim / release / expire / re-claim cycles
/// with operator DELETEs, a key's fence never repeats and never decreases,
/// and only changes when the tenure changes.
#[tokio::test]
async fn fence_never_repeats_or_decreases() {
    let (db, store) = support::store().await;
    let mut last: i64 = 0;
    let mut held: Option<Lease> = None;
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    for cycle in 0..1_000 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let holder = if rng.is_multiple_of(3) { "a" } else { "b" };
        match (rng >> 8) % 6 {
            0 => {
                if let Some(lease) = held.take() {
                    assert!(store.release("k", &lease.holder, lease.fence).await.unwrap());
                }
            }
            1 => {
                if held.take().is_some() {
                    expire_now(&db.pool, "k").await;
                }
            }
            2 => {
                operator_delete(&db.pool, "k").await;
                held = None;
            }
            3 => {
                if let Claim::Acquired(lease) = store.claim_run("k", holder, LONG, Due::Now).await.unwrap() {
                    assert!(
                        lease.fence > last,
                        "cycle {cycle}: run fence {} after {last}",
                        lease.fence
                    );
                    last = lease.fence;
                    held = Some(lease);
                }
            }
            _ => {
                if let Claim::Acquired(lease) = store.claim("k", holder, LONG).await.unwrap() {
                    let same_tenure = held.as_ref().is_some_and(|h| h.holder == lease.holder);
                    if same_tenure {
                        assert_eq!(lease.fence, last, "cycle {cycle}: re-entrant claim changed the fence");
                    } else {
                        assert!(lease.fence > last, "cycle {cycle}: fence {} after {last}", lease.fence);
                    }
                    last = lease.fence;
                    held = Some(lease);
                }
            }
        }
    }
    assert!(last > 0);
}

/// Invariant 6: a renewal of a tenure that was taken over is lost, and the
/// new holder's lease is untouched.
#[tokio::test]
async fn renew_of_a_stolen_lease_is_lost() {
    let (db, store) = support::store().await;
    let old = acquired(store.claim("k", "a", LONG).await.unwrap());
    expire_now(&db.pool, "k").await;
    let new = acquired(store.claim("k", "b", LONG).await.unwrap());
    assert_eq!(store.renew(&old, LONG).await.unwrap(), Renewal::Lost);
    let row = store.get("k").await.unwrap().unwrap();
    assert_eq!(
        (row.holder.as_str(), row.fence, row.expires_at),
        ("b", new.fence, new.expires_at)
    );
}

/// Invariant 6: an expired lease that nobody took over is not resurrected
/// by its holder's late heartbeat.
#[tokio::test]
async fn renew_never_resurrects_an_expired_lease() {
    let (db, store) = support::store().await;
    let lease = acquired(store.claim("k", "a", LONG).await.unwrap());
    expire_now(&db.pool, "k").await;
    assert_eq!(store.renew(&lease, LONG).await.unwrap(), Renewal::Lost);
    assert!(
        !store.get("k").await.unwrap().unwrap().is_held(),
        "the lease must stay expired"
    );
}

/// Invariant 6: the same holder renewing its *previous* tenure (an earlier
/// run) is lost and leaves the current tenure as it was.
#[tokio::test]
async fn renew_of_a_previous_tenure_by_the_same_holder_is_lost() {
    let (db, store) = support::store().await;
    let run1 = acquired(
        store
            .claim_run("k", "a", Duration::from_secs(60), Due::Now)
            .await
            .unwrap(),
    );
    // run1 stalled past its lease; the same holder starts run2.
    support::expire_now(&db.pool, "k").await;
    let run2 = acquired(
        store
            .claim_run("k", "a", Duration::from_secs(60), Due::Now)
            .await
            .unwrap(),
    );
    assert_eq!(store.renew(&run1, LONG).await.unwrap(), Renewal::Lost);
    let row = store.get("k").await.unwrap().unwrap();
    assert_eq!(row.fence, run2.fence);
    assert_eq!(
        row.expires_at, run2.expires_at,
        "the current tenure must not be extended by the old one"
    );
}

/// Invariant 6 (holder clause): another replica that learned the current
/// fence cannot renew a lease it does not hold.
#[tokio::test]
async fn renew_by_another_holder_with_the_current_fence_is_lost() {
    let (_db, store) = support::store().await;
    let lease = acquired(store.claim("k", "a", Duration::from_secs(60)).await.unwrap());
    let mut impostor = lease.clone();
    impostor.holder = "b".to_owned();
    assert_eq!(store.renew(&impostor, LONG).await.unwrap(), Renewal::Lost);
    assert_eq!(store.get("k").await.unwrap().unwrap().expires_at, lease.expires_at);
}

/// A live renewal extends the lease by the server clock and reports the
/// server-measured time left.
#[tokio::test]
async fn renew_extends_a_live_lease() {
    let (_db, store) = support::store().await;
    let lease = acquired(store.claim("k", "a", Duration::from_secs(5)).await.unwrap());
    match store.renew(&lease, LONG).await.unwrap() {
        Renewal::Renewed(renewed) => {
            assert_eq!(renewed.fence, lease.fence);
            assert!(renewed.expires_at > lease.expires_at);
            assert!(renewed.remaining > Duration::from_secs(590), "{:?}", renewed.remaining);
        }
        other => panic!("a live lease must renew: {other:?}"),
    }
}

/// Invariant 7: a holder's late release after a takeover leaves the new
/// holder's lease intact.
#[tokio::test]
async fn late_release_after_takeover_leaves_the_new_holder() {
    let (db, store) = support::store().await;
    let old = acquired(store.claim("k", "a", LONG).await.unwrap());
    expire_now(&db.pool, "k").await;
    let new = acquired(store.claim("k", "b", LONG).await.unwrap());
    assert!(!store.release("k", "a", old.fence).await.unwrap());
    // The impostor variant: the old holder presenting the new fence.
    assert!(!store.release("k", "a", new.fence).await.unwrap());
    // The runtime's batched release statement obeys the same rule.
    assert!(!store.release_batched(&old).await.unwrap());
    let mut impostor = new.clone();
    impostor.holder = "a".into();
    assert!(!store.release_batched(&impostor).await.unwrap());
    let row = store.get("k").await.unwrap().unwrap();
    assert!(row.is_held());
    assert_eq!((row.holder.as_str(), row.fence), ("b", new.fence));
    assert!(matches!(
        store.claim("k", "c", LONG).await.unwrap(),
        Claim::HeldElsewhere { .. }
    ));
}

/// Invariant 7: the same holder's late release of an earlier run leaves the
/// current run's lease intact.
#[tokio::test]
async fn late_release_of_an_old_run_leaves_the_new_run() {
    let (db, store) = support::store().await;
    let run1 = acquired(store.claim_run("k", "a", LONG, Due::Now).await.unwrap());
    // run1 stalled past its lease; the same holder starts run2.
    support::expire_now(&db.pool, "k").await;
    let run2 = acquired(store.claim_run("k", "a", LONG, Due::Now).await.unwrap());
    assert!(!store.release("k", "a", run1.fence).await.unwrap());
    // The runtime's batched release statement obeys the same rule.
    assert!(!store.release_batched(&run1).await.unwrap());
    let row = store.get("k").await.unwrap().unwrap();
    assert!(row.is_held());
    assert_eq!(row.fence, run2.fence);
    assert!(matches!(
        store.claim("k", "b", LONG).await.unwrap(),
        Claim::HeldElsewhere { .. }
    ));
}

/// A release frees the lease at once for anyone, and the next tenure gets a
/// greater fence.
#[tokio::test]
async fn release_frees_the_lease_at_once() {
    let (_db, store) = support::store().await;
    let lease = acquired(store.claim("k", "a", LONG).await.unwrap());
    assert!(store.release("k", "a", lease.fence).await.unwrap());
    assert!(!store.get("k").await.unwrap().unwrap().is_held());
    let next = acquired(store.claim("k", "b", LONG).await.unwrap());
    assert!(next.fence > lease.fence);
}

/// A key not due until tomorrow is claimed for a run anyway (`Due::Now`)
/// and released: the release keeps its due time. A due time after the
/// claim is the key's schedule here, not a trigger that came during the run.
#[tokio::test]
async fn a_plain_release_keeps_a_due_time_not_reached_yet() {
    let (db, store) = support::store().await;
    acquired(store.claim_run("k", "a", LONG, Due::Now).await.unwrap());
    let tomorrow = chrono::Utc::now() + chrono::TimeDelta::days(1);
    let tomorrow = chrono::DateTime::from_timestamp_micros(tomorrow.timestamp_micros()).expect("in range");
    support::owe_slot(&db.pool, "k", tomorrow).await;

    let early = acquired(store.claim_run("k", "b", LONG, Due::Now).await.unwrap());
    assert!(store.release("k", "b", early.fence).await.unwrap());

    let row = store.get("k").await.unwrap().unwrap();
    assert_eq!(row.next_due_at, Some(tomorrow), "{row:?}");

    // The runtime's batched release of a run that names no due time (a
    // cancelled run) keeps it too.
    let again = acquired(store.claim_run("k", "c", LONG, Due::Now).await.unwrap());
    assert!(store.release_batched(&again).await.unwrap());
    let row = store.get("k").await.unwrap().unwrap();
    assert_eq!(row.next_due_at, Some(tomorrow), "{row:?}");
}

/// `renew_many` renews 1,000 leases in one statement and names exactly the
/// ones that were stolen.
#[tokio::test]
async fn renew_many_is_one_statement_and_reports_the_lost_set() {
    let (db, store) = support::store().await;
    let mut tenures = Vec::new();
    for i in 0..1_000 {
        let lease = acquired(store.claim(&format!("k{i}"), "a", LONG).await.unwrap());
        tenures.push((lease.key, lease.fence));
    }
    // Steal every 7th lease.
    let mut stolen = Vec::new();
    for (key, fence) in tenures.iter().step_by(7) {
        expire_now(&db.pool, key).await;
        acquired(store.claim(key, "b", LONG).await.unwrap());
        stolen.push((key.clone(), *fence));
    }
    support::reset_statement_stats(&db.pool).await;
    let result = store.renew_many("a", &tenures, LONG).await.unwrap();
    assert_eq!(
        support::statement_calls(&db.pool, "leasehold_lease").await,
        1,
        "one statement per heartbeat"
    );
    let mut lost = result.lost.clone();
    lost.sort();
    stolen.sort();
    assert_eq!(lost, stolen);
    assert_eq!(result.renewed.len(), 1_000 - stolen.len());
    assert!(
        result
            .renewed
            .iter()
            .all(|l| l.holder == "a" && l.remaining > Duration::from_secs(590))
    );
}

/// Invariant 2: 500 leases held at once through a 2-connection pool; no
/// connection stays checked out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_leases_held_through_two_connections_pin_nothing() {
    let db = support::db().await;
    let pool = db.pool_with(2).await;
    let store = LeaseStore::new(pool.clone());
    let tasks: Vec<_> = (0..500)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move { store.claim(&format!("job-{i}"), "a", LONG).await })
        })
        .collect();
    let mut held = Vec::new();
    for task in tasks {
        held.push(acquired(task.await.unwrap().unwrap()));
    }
    assert_eq!(held.len(), 500);
    assert!(pool.size() <= 2);
    support::assert_pool_idle(&pool).await;
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM leasehold_lease WHERE expires_at > clock_timestamp()")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(count, 500);
}

/// The CHECK constraint turns a lease that would be expired at birth into an
/// error rather than a phantom lock.
#[tokio::test]
async fn a_lease_expired_at_birth_is_a_constraint_violation() {
    let db = support::db().await;
    let err = sqlx::query(
        "INSERT INTO leasehold_lease (key, holder, fence, acquired_at, expires_at)
         VALUES ('k', 'a', nextval('leasehold_fence_seq'), clock_timestamp(), clock_timestamp() - interval '1 second')",
    )
    .execute(&db.pool)
    .await
    .expect_err("an already-expired lease must be rejected");
    assert!(err.to_string().contains("leasehold_lease_validity"), "{err}");
}

/// Bad input is rejected before any SQL is sent (the pool here cannot reach
/// a server), with a message naming the value and the limit.
#[tokio::test]
async fn invalid_input_is_rejected_before_sql() {
    let store = LeaseStore::new(support::unreachable_pool());
    let long_key = "x".repeat(256);
    let cases: Vec<(&str, &str, Duration, &str)> = vec![
        ("", "a", LONG, "must not be empty"),
        (&long_key, "a", LONG, "256 bytes long, the limit is 255"),
        ("k\0", "a", LONG, "NUL"),
        ("k", "", LONG, "holder id"),
        ("k", "a", Duration::ZERO, "at least 10ms"),
        ("k", "a", Duration::from_secs(365 * 24 * 3600), "at most"),
    ];
    for (key, holder, ttl, expect) in cases {
        let err = store.claim(key, holder, ttl).await.expect_err("must be rejected");
        assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
        assert!(err.to_string().contains(expect), "{err} should mention {expect:?}");
    }
    let err = store.release("k", "a", 0).await.expect_err("fence 0");
    assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
}

/// A database failure is an error, never "held by someone else".
#[tokio::test]
async fn a_database_error_is_never_held_elsewhere() {
    let store = LeaseStore::new(support::unreachable_pool());
    let err = store.claim("k", "a", LONG).await.expect_err("unreachable");
    assert!(matches!(err, Error::Database(_)), "{err:?}");
    // Schema missing: also an error, not a refusal.
    let db = leasehold_testkit::test_db().await;
    let err = LeaseStore::new(db.pool.clone())
        .claim("k", "a", LONG)
        .await
        .expect_err("no schema");
    assert!(matches!(err, Error::Database(_)), "{err:?}");
    let lease_err = LeaseStore::new(db.pool.clone())
        .renew_many("a", &[("k", 1)], LONG)
        .await
        .expect_err("no schema");
    assert!(matches!(lease_err, Error::Database(_)), "{lease_err:?}");
}

/// Invariant 1: no decision reads this machine's wall clock. The library
/// source never calls it, except to stamp the last-success metric.
#[test]
fn no_application_wall_clock_enters_a_decision() {
    let mut dirs = vec![std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/src"))];
    let mut files = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path)
            } else {
                files.push(path)
            }
        }
    }
    let mut offenders = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            let wall_clock = ["Utc::now", "SystemTime::now", "Local::now"]
                .iter()
                .any(|c| line.contains(c));
            if wall_clock && !path.ends_with("metrics/mod.rs") && !line.trim_start().starts_with("//") {
                offenders.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "wall-clock reads in decision code: {offenders:#?}"
    );
}

/// A claim that had to wait for the row lock is dated *after* the wait:
/// its acquired_at is never earlier than the moment it actually won, so
/// the next slot computed from it cannot be the slot it just consumed
/// (which would run a key twice in one slot).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_waited_for_the_row_lock_is_dated_after_the_wait() {
    let (db, store) = support::store().await;
    acquired(store.claim_run("job", "a", LONG, Due::Now).await.unwrap());
    support::free_and_due_now(&db.pool, "job").await;
    // Another session holds the row lock for a while.
    let blocker = support::lock_lease_row(&db.pool, "job").await;
    let claimer = {
        let store = store.clone();
        tokio::spawn(async move { store.claim_run("job", "b", LONG, Due::Scheduled).await })
    };
    support::until_a_session_waits_for_a_lock(&db.pool).await;
    assert!(!claimer.is_finished(), "the claim waits for the row lock");
    // The server clock just before the lock is released.
    let unblocked = store.server_now().await.unwrap();
    blocker.commit().await.unwrap();
    let lease = acquired(claimer.await.unwrap().unwrap());
    assert!(
        lease.acquired_at >= unblocked,
        "acquired {} before the lock was free at {unblocked}",
        lease.acquired_at
    );
    assert!(
        lease.expires_at - lease.acquired_at >= chrono::TimeDelta::seconds(599),
        "the full lease from the win"
    );
}

/// A claim for a new run is not re-entrant, even after waiting for the row:
/// a run claim under holder id "b" that saw the lease free, then waited
/// while another process *with the same id* (a copied configuration) made
/// it live, gets `HeldElsewhere` — it does not take over that tenure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_claim_never_takes_a_live_lease_even_under_the_same_holder_id() {
    let (db, store) = support::store().await;
    acquired(store.claim_run("shared-id", "a", LONG, Due::Now).await.unwrap());
    support::free_and_due_now(&db.pool, "shared-id").await;
    let mut twin = support::lock_lease_row(&db.pool, "shared-id").await;
    let claimer = {
        let store = store.clone();
        tokio::spawn(async move { store.claim_run("shared-id", "b", LONG, Due::Now).await })
    };
    support::until_a_session_waits_for_a_lock(&db.pool).await;
    assert!(!claimer.is_finished(), "the claim waits for the row lock");
    let twin_fence = twin.take_over("b", LONG).await.unwrap();
    twin.commit().await.unwrap();
    let claim = claimer.await.unwrap().unwrap();
    assert!(
        matches!(claim, Claim::HeldElsewhere { .. }),
        "took its twin's live lease: {claim:?}"
    );
    assert_eq!(store.get("shared-id").await.unwrap().unwrap().fence, twin_fence);
}

/// The expiry clause of both claims, re-checked after the row-lock wait: a
/// claim that saw a free lease in its snapshot, but waited while another
/// session made the lease live (a concurrent winner), does not take it.
/// For the re-entrant `claim` this is the one case its snapshot pre-check
/// cannot stop (the lease was free in its snapshot): only the `WHERE` of
/// its `DO UPDATE`, evaluated on the row the winner committed, does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_waited_does_not_take_a_lease_made_live_meanwhile() {
    let (db, store) = support::store().await;
    for run_claim in [false, true] {
        let key = if run_claim { "run-claim" } else { "claim" };
        acquired(store.claim_run(key, "a", LONG, Due::Now).await.unwrap());
        support::free_and_due_now(&db.pool, key).await;
        let mut winner = support::lock_lease_row(&db.pool, key).await;
        let claimer = {
            let store = store.clone();
            tokio::spawn(async move {
                if run_claim {
                    store.claim_run(key, "b", LONG, Due::Now).await
                } else {
                    store.claim(key, "b", LONG).await
                }
            })
        };
        support::until_a_session_waits_for_a_lock(&db.pool).await;
        assert!(!claimer.is_finished(), "{key}: the claim waits for the row lock");
        // The other session wins the lease before releasing the row lock.
        winner.take_over("c", LONG).await.unwrap();
        winner.commit().await.unwrap();
        let claim = claimer.await.unwrap().unwrap();
        assert!(
            matches!(claim, Claim::HeldElsewhere { .. }),
            "{key}: took a live lease: {claim:?}"
        );
        assert_eq!(store.get(key).await.unwrap().unwrap().holder, "c", "{key}");
    }
}

/// A claim that loses to a live lease draws no fence and writes nothing:
/// idle replicas polling a held or not-yet-due job cost no WAL and leave
/// no gaps in the fence sequence.
#[tokio::test]
async fn losing_claims_draw_no_fence() {
    let (db, store) = support::store().await;
    let held = acquired(store.claim("k", "a", LONG).await.unwrap());
    for _ in 0..10 {
        assert!(matches!(
            store.claim("k", "b", LONG).await.unwrap(),
            Claim::HeldElsewhere { .. }
        ));
        assert!(matches!(
            store.claim_run("k", "b", LONG, Due::Scheduled).await.unwrap(),
            Claim::HeldElsewhere { .. }
        ));
    }
    expire_now(&db.pool, "k").await;
    let next = acquired(store.claim("k", "c", LONG).await.unwrap());
    assert_eq!(next.fence, held.fence + 1, "the twenty losing claims drew no fence");
}

/// A connection of a store's own checks its session's WAL timeline as it
/// opens, so the first claim it sends is not the one that pays for the
/// check (`leasehold_first_fence_of_session()`: PL/pgSQL compiled and
/// planned in that backend). The check still guards that claim: its fence
/// is above the one the check drew. A store opened before the schema
/// exists still connects, and leaves the check to the first claim.
#[tokio::test]
async fn an_owned_connection_checks_its_timeline_as_it_opens() {
    let db = support::db().await;
    let store = support::store_in(leasehold::runtime::Connections::default(), &db.pool).await;
    const TIMELINE: &str = "SELECT current_setting('leasehold.fence_timeline', true)";
    let mut conn = store.pool().acquire().await.expect("a connection of the store");
    let checked: Option<String> = sqlx::query_scalar(TIMELINE)
        .fetch_one(&mut *conn)
        .await
        .expect("the setting reads");
    let drawn: i64 = sqlx::query_scalar("SELECT last_value FROM leasehold_fence_seq")
        .fetch_one(&mut *conn)
        .await
        .expect("the sequence reads");
    drop(conn);
    assert!(
        checked.as_deref().is_some_and(|tl| !tl.is_empty()),
        "no claim yet, but the session checked its timeline: {checked:?}"
    );
    let lease = acquired(store.claim("k", "a", LONG).await.unwrap());
    assert!(
        lease.fence > drawn,
        "fence {} after the check drew {drawn}",
        lease.fence
    );

    let bare = leasehold_testkit::test_db().await;
    let store = LeaseStore::connect((*bare.pool.connect_options()).clone())
        .await
        .expect("a store connects before the schema exists");
    let mut conn = store.pool().acquire().await.expect("a connection of the store");
    let unchecked: Option<String> = sqlx::query_scalar(TIMELINE)
        .fetch_one(&mut *conn)
        .await
        .expect("the setting reads");
    assert!(
        unchecked.as_deref().is_none_or(str::is_empty),
        "no schema, no check: {unchecked:?}"
    );
}

/// A connection of a store's own prepares the statements of every run —
/// the claim of due keys, the heartbeat, the release — as it opens, and
/// the queries find them there: a heartbeat after a claim prepares
/// nothing more. A store opened before the schema exists still connects,
/// and leaves each statement to its first use; so does one whose options
/// turn sqlx's statement cache off, after the first.
#[tokio::test]
async fn an_owned_connection_prepares_the_statements_of_every_run_as_it_opens() {
    let db = support::db().await;
    let store = support::store_in(leasehold::runtime::Connections::default(), &db.pool).await;
    let opened = prepared(&store).await;
    assert!(!opened.is_empty(), "the store has a connection open");
    for statements in &opened {
        assert_eq!(
            statements.len(),
            4,
            "claim (without and with the limits' steps), heartbeat and release: {statements:#?}"
        );
        for (statement, fragment) in [
            (
                "the claim of due keys",
                "t.job NOT IN (SELECT m.job_name FROM leasehold_limit AS m)",
            ),
            ("the claim with the fleet-wide limits' steps", ", full_jobs AS ("),
            ("the heartbeat", "), renewed AS ("),
            ("the release", "), overwritten AS ("),
        ] {
            assert!(
                statements.iter().any(|s| s.contains(fragment)),
                "{statement} is not prepared: {statements:#?}"
            );
        }
    }
    let lease = acquired(store.claim("k", "a", LONG).await.unwrap());
    assert!(matches!(
        store.renew(&lease, LONG).await.expect("renew"),
        Renewal::Renewed(_)
    ));
    let after = prepared(&store).await;
    for statements in &after {
        let distinct: std::collections::HashSet<&String> = statements.iter().collect();
        assert_eq!(
            distinct.len(),
            statements.len(),
            "a statement prepared twice: {statements:#?}"
        );
    }
    // `claim` sends two statements of its own (take a row, else insert).
    let added = after.iter().map(Vec::len).sum::<usize>() - 4 * after.len();
    assert_eq!(
        added, 2,
        "the claim's statements are added, the heartbeat's found: {after:#?}"
    );

    let bare = leasehold_testkit::test_db().await;
    let store = LeaseStore::connect((*bare.pool.connect_options()).clone())
        .await
        .expect("a store connects before the schema exists");
    let bare_prepared = prepared(&store).await;
    assert!(
        bare_prepared.iter().all(Vec::is_empty),
        "no schema, nothing prepared: {bare_prepared:#?}"
    );

    let options = (*db.pool.connect_options()).clone().statement_cache_capacity(0);
    let store = LeaseStore::connect(options)
        .await
        .expect("a store without a statement cache connects");
    let uncached = prepared(&store).await;
    assert!(
        uncached.iter().all(|statements| statements.len() <= 1),
        "no cache for queries to find them in: the warm-up stops at the first: {uncached:#?}"
    );
}

/// The texts of the statements prepared on each open connection of
/// `store`, oldest first.
async fn prepared(store: &LeaseStore) -> Vec<Vec<String>> {
    support::prepared_statements(store)
        .await
        .into_iter()
        .map(|statements| statements.into_iter().map(|(text, _, _)| text).collect())
        .collect()
}

/// The due clause is re-checked on the latest row after the lock wait: a
/// replica that finished the slot and moved the due time while a scheduled
/// claim was waiting for the row must not see that claim succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_claim_rechecks_the_due_time_after_waiting_for_the_row() {
    let (db, store) = support::store().await;
    acquired(store.claim_run("job", "a", LONG, Due::Now).await.unwrap());
    support::free_and_due_now(&db.pool, "job").await;
    // A replica finishing the slot: it moves the due time an hour ahead, and
    // commits only after the claim below has started waiting for the row.
    let mut finisher = support::lock_lease_row(&db.pool, "job").await;
    finisher.postpone(Duration::from_secs(3600)).await.unwrap();
    let claimer = {
        let store = store.clone();
        tokio::spawn(async move { store.claim_run("job", "b", LONG, Due::Scheduled).await })
    };
    support::until_a_session_waits_for_a_lock(&db.pool).await;
    assert!(!claimer.is_finished(), "the claim waits for the row lock");
    finisher.commit().await.unwrap();
    let answer = claimer.await.unwrap().unwrap();
    assert!(
        !matches!(answer, Claim::Acquired(_)),
        "the slot was already done: {answer:?}"
    );
    assert!(!store.get("job").await.unwrap().unwrap().is_held());
}
