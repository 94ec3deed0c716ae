//! Every freeze point of a fenced write against every resume time: a
//! replica's process stops (here: its runtime is cut off and the job's code
//! waits) before `begin_fenced`, inside it before the first write, between
//! two writes, or between the last write and `commit()`, and resumes while
//! its lease still holds, just after it expired, or after another replica
//! took the key. A write commits exactly when the lease still held.

use leasehold::{Error, store::LeaseStore};

use crate::support::{self, LONG, accounts, balance, held_guard};

#[derive(Debug, Clone, Copy, PartialEq)]
enum FrozenAt {
    BeforeBegin,
    BeforeFirstWrite,
    BetweenWrites,
    BeforeCommit,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum ResumedAt {
    BeforeExpiry,
    JustAfterExpiry,
    AfterAnotherReplicaTookTheKey,
}

/// Runs one drill on its own key; returns whether the writes committed.
async fn drill(db: &support::TestDb, at: FrozenAt, resumed: ResumedAt, n: usize) -> bool {
    let key = format!("drill-{n}");
    let (rt, guard) = held_guard(db, "a", &key).await;
    let freeze = || async {
        rt.faults().partition(true);
        match resumed {
            ResumedAt::BeforeExpiry => {}
            ResumedAt::JustAfterExpiry => support::expire_now(&db.pool, &key).await,
            ResumedAt::AfterAnotherReplicaTookTheKey => {
                support::expire_now(&db.pool, &key).await;
                let taken = LeaseStore::new(db.pool.clone()).claim(&key, "b", LONG).await.unwrap();
                assert!(taken.acquired().is_some());
            }
        }
    };
    let write = |amount: i64| {
        sqlx::query("UPDATE account SET balance = balance + $1 WHERE id = $2")
            .bind(amount)
            .bind(n as i32)
    };

    if at == FrozenAt::BeforeBegin {
        freeze().await;
    }
    let outcome: Result<(), Error> = async {
        let mut tx = guard.begin_fenced_on(&db.pool, &key).await?;
        if at == FrozenAt::BeforeFirstWrite {
            freeze().await;
        }
        write(1).execute(&mut *tx).await?;
        if at == FrozenAt::BetweenWrites {
            freeze().await;
        }
        write(10).execute(&mut *tx).await?;
        if at == FrozenAt::BeforeCommit {
            freeze().await;
        }
        tx.commit().await?;
        Ok(())
    }
    .await;
    let committed = balance(&db.pool, n as i32).await.0;
    match &outcome {
        Ok(()) => assert_eq!(committed, 11, "{at:?}/{resumed:?}"),
        Err(e) => {
            assert!(e.is_fencing(), "{at:?}/{resumed:?}: {e}");
            assert_eq!(
                committed, 0,
                "{at:?}/{resumed:?}: nothing of a refused transaction is there"
            );
        }
    }
    rt.shutdown().await;
    outcome.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_write_commits_exactly_when_its_lease_still_held_at_every_freeze_point() {
    let db = support::db().await;
    accounts(&db.pool).await;
    let cases: Vec<(FrozenAt, ResumedAt)> = [
        FrozenAt::BeforeBegin,
        FrozenAt::BeforeFirstWrite,
        FrozenAt::BetweenWrites,
        FrozenAt::BeforeCommit,
    ]
    .into_iter()
    .flat_map(|at| {
        [
            ResumedAt::BeforeExpiry,
            ResumedAt::JustAfterExpiry,
            ResumedAt::AfterAnotherReplicaTookTheKey,
        ]
        .map(|resumed| (at, resumed))
    })
    .collect();
    sqlx::query("INSERT INTO account (id, balance) SELECT g, 0 FROM generate_series(3, $1) AS g")
        .bind(cases.len() as i32 + 3)
        .execute(&db.pool)
        .await
        .unwrap();
    for (i, (at, resumed)) in cases.into_iter().enumerate() {
        let committed = drill(&db, at, resumed, i + 3).await;
        assert_eq!(
            committed,
            resumed == ResumedAt::BeforeExpiry,
            "frozen {at:?}, resumed {resumed:?}"
        );
    }
}
