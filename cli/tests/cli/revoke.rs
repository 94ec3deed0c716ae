//! `leasehold revoke [--force]`: refused on a held lease without
//! `--force`; a forced revoke fences out the holder, whose next write and
//! heartbeat see it. `release`, the command's name before 0.1.0, is not
//! a command: 0.1.0 starts without aliases.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_of_a_held_lease_without_force_is_refused_and_changes_nothing() {
    let db = migrated_db().await;
    let store = LeaseStore::new(db.pool.clone());
    let lease = acquired(store.claim("nightly", "web-1", LONG).await.unwrap());
    let before = store.get("nightly").await.unwrap().unwrap();

    let out = leasehold(Some(&url(&db)), &["revoke", "nightly"]).await;
    assert_exit(&out, 3);
    assert_eq!(
        stderr(&out),
        format!(
            "leasehold: revoke key \"nightly\": refused: held by web-1 (fence {}); nothing changed. Pass --force to \
             end this tenure: the holder's run is cancelled at its next heartbeat and its fenced writes are rejected\n",
            lease.fence
        )
    );
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));

    let after = store.get("nightly").await.unwrap().unwrap();
    assert_eq!(
        (after.holder.as_str(), after.fence, after.acquired_at, after.expires_at),
        (
            before.holder.as_str(),
            before.fence,
            before.acquired_at,
            before.expires_at
        )
    );
    let fence_rows: i64 = sqlx::query_scalar("SELECT count(*) FROM leasehold_fence")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(fence_rows, 0, "a refused revoke raises no fence");
    assert!(matches!(store.renew(&lease, LONG).await.unwrap(), Renewal::Renewed(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_revoke_ends_the_tenure_and_the_next_claim_gets_a_higher_fence() {
    let db = migrated_db().await;
    let store = LeaseStore::new(db.pool.clone());
    let lease = acquired(store.claim("nightly", "web-1", LONG).await.unwrap());

    let out = leasehold(
        Some(&url(&db)),
        &["revoke", "nightly", "--force", "--resource", "ledger"],
    )
    .await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    let new_fence: i64 = store.get("nightly").await.unwrap().unwrap().fence;
    assert!(new_fence > lease.fence);
    assert_eq!(
        text,
        format!(
            "force-revoke key \"nightly\": ended the tenure of web-1 (fence {}, held: its run is cancelled at its \
             next heartbeat); new fence {new_fence}\n  begin_fenced on \"nightly\", \"ledger\" now rejects every fence \
             below {new_fence} (StaleFence)\n",
            lease.fence
        )
    );

    // The old holder's renewal and late release find nothing.
    assert_eq!(store.renew(&lease, LONG).await.unwrap(), Renewal::Lost);
    assert!(!store.release("nightly", "web-1", lease.fence).await.unwrap());
    let info = store.get("nightly").await.unwrap().unwrap();
    assert!(!info.is_held(), "revoked: free");
    // The key's resource and the named one are raised to the new fence.
    let fences: Vec<(String, i64)> =
        sqlx::query_as("SELECT resource, last_fence FROM leasehold_fence ORDER BY resource")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        fences,
        [("ledger".to_owned(), new_fence), ("nightly".to_owned(), new_fence)]
    );

    // Any holder, the old one included, now claims with a higher fence.
    let next = acquired(store.claim("nightly", "web-2", LONG).await.unwrap());
    assert!(next.fence > new_fence, "{} > {new_fence}", next.fence);
    assert_eq!(next.holder, "web-2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_of_a_free_lease_needs_no_force_and_still_fences_out_the_last_holder() {
    let db = migrated_db().await;
    let store = LeaseStore::new(db.pool.clone());
    let lease = acquired(store.claim("hourly", "web-1", LONG).await.unwrap());
    // The holder stalls past its lease: expired on the server, row intact.
    store.expire_for_test("hourly").await.unwrap();
    let expired_at = store.get("hourly").await.unwrap().unwrap().expires_at;

    // `release`, the command's name before 0.1.0, is a usage error that
    // changes nothing.
    let out = leasehold(Some(&url(&db)), &["release", "hourly"]).await;
    assert_exit(&out, 2);
    assert!(stderr(&out).contains("release"), "{}", stderr(&out));
    assert_eq!(
        store.get("hourly").await.unwrap().unwrap().fence,
        lease.fence,
        "no new tenure"
    );

    let out = leasehold(Some(&url(&db)), &["revoke", "hourly"]).await;
    assert_exit(&out, 0);
    let info = store.get("hourly").await.unwrap().unwrap();
    assert_eq!(
        stdout(&out),
        format!(
            "revoke key \"hourly\": ended the tenure of web-1 (fence {}, already free); new fence {}\n  begin_fenced \
             on \"hourly\" now rejects every fence below {} (StaleFence)\n",
            lease.fence, info.fence, info.fence
        )
    );
    let recorded = store.records().actions("hourly", 1).await.unwrap();
    assert_eq!(recorded[0].action, "revoke", "recorded under the one name");
    assert!(info.fence > lease.fence);
    assert_eq!(info.expires_at, expired_at, "a free lease keeps its expiry");
    let raised: i64 = sqlx::query_scalar("SELECT last_fence FROM leasehold_fence WHERE resource = 'hourly'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(raised, info.fence);
}

/// The key scenario: after `revoke --force`, the running job's next
/// fenced write is rejected at once, before any newer run has written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_jobs_next_fenced_write_fails_with_stale_fence_after_forced_revoke() {
    let db = migrated_db().await;
    let (rt, mut guards, guard) = running_job(&db).await;
    // The run can write before the revoke.
    guard
        .begin_fenced(&db.pool)
        .await
        .expect("fenced tx")
        .commit()
        .await
        .unwrap();

    let out = leasehold(Some(&url(&db)), &["revoke", "held-job"]).await;
    assert_exit(&out, 3);
    assert!(
        stderr(&out).starts_with(&format!(
            "leasehold: revoke key \"held-job\": refused: held by {} (fence {}); nothing changed.",
            guard.holder(),
            guard.fence()
        )),
        "{}",
        stderr(&out)
    );
    let out = leasehold(Some(&url(&db)), &["revoke", "held-job", "--force"]).await;
    assert_exit(&out, 0);

    let err = guard
        .begin_fenced(&db.pool)
        .await
        .expect_err("a stale run writes nothing");
    assert!(
        matches!(&err, Error::StaleFence { fence, newer, .. } if *fence == guard.fence() && *newer > guard.fence()),
        "{err:?}"
    );
    assert!(guard.is_cancelled(), "a stale fence cancels the run");

    // The job is still due, so a new run starts with a higher fence and
    // its fenced writes go through.
    let next = tokio::time::timeout(Duration::from_secs(10), guards.recv())
        .await
        .expect("a new run within 10s")
        .expect("a guard");
    assert!(next.fence() > guard.fence());
    next.begin_fenced(&db.pool)
        .await
        .expect("the new run writes")
        .commit()
        .await
        .unwrap();
    rt.shutdown().await;
}

/// Without any fenced write, the old holder learns of the revoke from its
/// own heartbeat: the renewal finds the lease gone and cancels the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_holders_heartbeat_reports_the_loss_after_forced_revoke() {
    let db = migrated_db().await;
    let (rt, _guards, guard) = running_job(&db).await;
    let out = leasehold(Some(&url(&db)), &["revoke", "held-job", "--force"]).await;
    assert_exit(&out, 0);
    // Heartbeat every lease/3 = 3.3s.
    tokio::time::timeout(Duration::from_secs(8), guard.cancelled())
        .await
        .expect("the heartbeat cancels the run");
    assert_eq!(guard.reason(), Some(leasehold::CancelReason::Stolen));
    assert!(matches!(guard.check(), Err(Error::LeaseLost { .. })));
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_of_an_unknown_key_exits_4() {
    let db = migrated_db().await;
    let out = leasehold(Some(&url(&db)), &["revoke", "no-such-job", "--force"]).await;
    assert_exit(&out, 4);
    let err = stderr(&out);
    assert!(
        err.starts_with("leasehold: force-revoke key \"no-such-job\": not found: no lease row in ")
            && err.ends_with(" (see `leasehold status`)\n"),
        "{err}"
    );
}
