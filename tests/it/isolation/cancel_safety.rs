//! Every leasehold future that touches the pool is
//! cancel-safe in fact. Each is dropped at every await point — the sweep
//! drops it after 0, 8, 16 … ms while a proxy delays every packet — and
//! afterwards no backend is left inside a transaction and the pool still
//! commits leasehold's statements. Lease statements are swept on the
//! service's pool and on connections of the store's own (through the same
//! proxy), and the runtime's in both connection modes.

use std::future::Future;
use std::time::Duration;

use leasehold::{
    NewKey, Runtime, Schedule,
    operator::{Operator, Revoke, Target},
    runtime::Connections,
    store::{KeyFilter, LeaseStore},
};
use leasehold_testkit::proxy::{Mode, Proxy};
use sqlx::PgPool;

use crate::support::{self, TestDb, job, proxied_pool, quick};

/// How far apart the sweep's cut points are; below the proxy's delay per
/// chunk, so every await gets cut.
const SWEEP_STEP: Duration = Duration::from_millis(7);

/// A proxy in front of `db` that delays every chunk by 10 ms, and a
/// 2-connection pool through it: the setup of every sweep below.
async fn delaying_proxy(db: &TestDb) -> (Proxy, PgPool) {
    let proxy = Proxy::start("127.0.0.1", db.options.get_port()).await.expect("proxy");
    proxy.set(Mode::Delay(Duration::from_millis(10)));
    let pool = proxied_pool(db, &proxy, 2).await;
    (proxy, pool)
}

/// Drops `operation()` after 0, `step`, 2·`step` … until one attempt
/// completes; after each drop, checks that no backend is left inside a
/// transaction and (if the schema exists) that a leasehold claim on the
/// same pool commits. Returns how many attempts were dropped.
async fn sweep<F, Fut, T>(db: &TestDb, pool: &PgPool, step: Duration, name: &str, mut operation: F) -> usize
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = leasehold::Result<T>>,
{
    let store = LeaseStore::new(pool.clone());
    let mut dropped = 0;
    for attempt in 0..200u32 {
        let cut = step * attempt;
        match tokio::time::timeout(cut, operation(attempt)).await {
            Ok(result) => {
                result.unwrap_or_else(|e| panic!("{name}: attempt {attempt} failed: {e}"));
                break;
            }
            Err(_) => dropped += 1,
        }
        support::assert_no_backend_in_transaction(&db.pool, &format!("{name} dropped after {cut:?}")).await;
        if leasehold::schema::check_schema(pool).await.is_err() {
            continue; // a dropped migrate left nothing behind: nothing to claim on yet
        }
        let key = format!("{name}-probe-{attempt}");
        store
            .claim(&key, "probe", support::LONG)
            .await
            .expect("claim after a drop");
        let row = LeaseStore::new(db.pool.clone()).get(&key).await.unwrap();
        assert!(
            row.is_some_and(|r| r.is_held()),
            "{name}: a claim after a drop at {cut:?} did not commit"
        );
    }
    assert!(
        dropped > 3,
        "{name}: the sweep must cut the operation at several awaits ({dropped})"
    );
    dropped
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_transactions_and_lease_statements_dropped_at_every_await_leave_no_open_transaction() {
    let db = support::db().await;
    support::accounts(&db.pool).await;
    let (rt, guard) = support::held_guard(&db, "holder", "swept").await;
    let (proxy, pool) = delaying_proxy(&db).await;
    let step = SWEEP_STEP;

    let begin = sweep(&db, &pool, step, "begin_fenced", |_| {
        let (guard, pool) = (guard.clone(), pool.clone());
        async move {
            let tx = guard.begin_fenced(&pool).await?;
            tx.commit().await?;
            Ok(())
        }
    })
    .await;
    let update = sweep(&db, &pool, step, "fenced_update", |n| {
        let (guard, pool) = (guard.clone(), pool.clone());
        async move { support::set_balance(&guard, &pool, 1, i64::from(n)).await }
    })
    .await;
    let store = LeaseStore::new(pool.clone());
    let claim = sweep(&db, &pool, step, "claim", |n| {
        let store = store.clone();
        async move { store.claim(&format!("swept-{n}"), "sweeper", support::LONG).await }
    })
    .await;
    let owned = support::store_in(Connections::default(), &pool).await;
    let owned_claim = sweep(&db, &pool, step, "claim (owned)", |n| {
        let store = owned.clone();
        async move { store.claim(&format!("swept-owned-{n}"), "sweeper", support::LONG).await }
    })
    .await;
    // migrate opens a transaction too: on a database without the schema,
    // through the same delaying proxy.
    let fresh = leasehold_testkit::test_db().await;
    let fresh_pool = proxied_pool(&fresh, &proxy, 2).await;
    let migrate = sweep(&fresh, &fresh_pool, step, "migrate", |_| {
        let pool = fresh_pool.clone();
        async move { leasehold::migrate(&pool).await }
    })
    .await;
    println!(
        "measured: dropped begin_fenced at {begin}, fenced update at {update}, claim at {claim}, claim on \
         owned connections at {owned_claim}, migrate at {migrate} cut points"
    );
    proxy.set(Mode::Normal);
    rt.shutdown().await;
}

/// The scheduler's calls, swept the same way: a batch release, forget,
/// `start` (one-statement registration, migrations) and `Runtime::add`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_calls_dropped_at_every_await_leave_no_open_transaction() {
    let db = support::db().await;
    let (proxy, pool) = delaying_proxy(&db).await;
    let step = SWEEP_STEP;
    let direct = LeaseStore::new(db.pool.clone());
    let store = LeaseStore::new(pool.clone());

    let release = sweep(&db, &pool, step, "release", |n| {
        let (direct, store) = (direct.clone(), store.clone());
        async move {
            let key = format!("released-{n}");
            let lease = direct
                .claim(&key, "sweeper", support::LONG)
                .await?
                .acquired()
                .expect("free key");
            store.release(&key, "sweeper", lease.fence).await
        }
    })
    .await;
    let owned = support::store_in(Connections::default(), &pool).await;
    let owned_release = sweep(&db, &pool, step, "release (owned)", |n| {
        let (direct, store) = (direct.clone(), owned.clone());
        async move {
            let key = format!("released-owned-{n}");
            let lease = direct
                .claim(&key, "sweeper", support::LONG)
                .await?
                .acquired()
                .expect("free key");
            store.release(&key, "sweeper", lease.fence).await
        }
    })
    .await;
    let forget = sweep(&db, &pool, step, "forget", |n| {
        let (direct, store) = (direct.clone(), store.clone());
        async move {
            let key = format!("forgotten-{n}");
            let lease = direct
                .claim(&key, "sweeper", support::LONG)
                .await?
                .acquired()
                .expect("free key");
            direct.release(&key, "sweeper", lease.fence).await?;
            store.controls().forget(&key).await
        }
    })
    .await;
    let manual = || quick(Schedule::Manual, Duration::from_secs(30));
    let start = sweep(&db, &pool, step, "start", |n| {
        let pool = pool.clone();
        let tenant = job(&format!("started-{n}"), manual(), |_| async { Ok(()) });
        async move {
            let rt = Runtime::builder(pool).listen(false).register(tenant).start().await?;
            rt.shutdown().await;
            Ok(())
        }
    })
    .await;
    let rt = Runtime::builder(pool.clone())
        .listen(false)
        .start()
        .await
        .expect("runtime starts");
    let add = sweep(&db, &pool, step, "add", |n| {
        let rt = rt.clone();
        let tenant = job(&format!("added-{n}"), manual(), |_| async { Ok(()) });
        async move { rt.add(tenant).await }
    })
    .await;
    println!(
        "measured: dropped release at {release}, release on owned connections at {owned_release}, forget at \
         {forget}, start at {start}, add at {add} cut points"
    );
    proxy.set(Mode::Normal);
    rt.shutdown().await;
}

/// The operators' calls, swept the same way: pause, resume, trigger,
/// revoke, schema version (a checked transaction of two reads) and list
/// (two statements) on the store, the recorded actions of an `Operator`
/// and the console's reads (`list_page`, `actions`, `fleet`),
/// pause and resume on a runtime.
/// (`history`, `pauses` and `server_now` are one read statement each,
/// through the same `connection::run!` as `trigger`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_calls_dropped_at_every_await_leave_no_open_transaction() {
    let db = support::db().await;
    let (proxy, pool) = delaying_proxy(&db).await;
    let step = SWEEP_STEP;
    let direct = LeaseStore::new(db.pool.clone());
    let store = LeaseStore::new(pool.clone());
    let lease = direct
        .claim_run("op:k", "sweeper", support::LONG, leasehold::store::Due::Now)
        .await
        .unwrap()
        .acquired()
        .expect("free key");
    direct.release(&lease.key, "sweeper", lease.fence).await.unwrap();

    let pause = sweep(&db, &pool, step, "pause+resume", |n| {
        let store = store.clone();
        async move {
            let target = Target::key(format!("op:{n}")).unwrap();
            store.controls().pause(&target, n % 2 == 0, "sweeper").await?;
            store.controls().resume(&target).await.map(drop)
        }
    })
    .await;
    let trigger = sweep(&db, &pool, step, "trigger", |_| {
        let store = store.clone();
        async move { store.controls().trigger("op:k").await }
    })
    .await;
    let revoke = sweep(&db, &pool, step, "revoke", |n| {
        let store = store.clone();
        let revoke = if n % 2 == 0 { Revoke::Force } else { Revoke::IfFree };
        async move { store.controls().revoke("op:k", revoke, &["op:ledger"]).await.map(drop) }
    })
    .await;
    let version = sweep(&db, &pool, step, "schema_version", |_| {
        let pool = pool.clone();
        async move { leasehold::schema::schema_version(&pool).await }
    })
    .await;
    let read = sweep(&db, &pool, step, "list", |_| {
        let store = store.clone();
        async move { store.records().list("op:").await }
    })
    .await;
    // The console's calls: recorded actions (one statement each, the
    // record in it; two of them stand for the four) and
    // the reads of its pages (`status` is `list_page`).
    let operator = Operator::new(store.clone(), "sweeper").expect("operator");
    let recorded = sweep(&db, &pool, step, "operator actions", |_| {
        let op = operator.clone();
        async move {
            op.trigger("op:k").await?;
            op.revoke("op:k", Revoke::IfFree, &[]).await.map(drop)
        }
    })
    .await;
    let pages = sweep(&db, &pool, step, "console reads", |_| {
        let store = store.clone();
        async move {
            store.records().list_page(&KeyFilter::new().prefix("op:")).await?;
            store.records().actions("op:k", 10).await?;
            store.fleet(Duration::from_secs(60)).await.map(drop)
        }
    })
    .await;
    // A set takes a lock on the lease table in its transaction: a set
    // dropped holding it must not leave it held (every claim waits on it).
    let limits = sweep(&db, &pool, step, "set_limit+clear_limit", |_| {
        let store = store.clone();
        async move {
            store.controls().set_limit("op", 2, "sweeper").await?;
            store.controls().clear_limit("op").await.map(drop)
        }
    })
    .await;
    let mut runtime = Vec::new();
    for mode in [Connections::default(), Connections::SharedWithService] {
        let rt = Runtime::builder(pool.clone())
            .listen(false)
            .connections(mode)
            .start()
            .await
            .expect("runtime starts");
        runtime.push(
            sweep(&db, &pool, step, &format!("runtime pause+resume ({mode:?})"), |n| {
                let rt = rt.clone();
                async move {
                    let target = Target::job(format!("job-{n}"));
                    rt.pause(&target, true).await?;
                    rt.resume(&target).await.map(drop)
                }
            })
            .await,
        );
        rt.shutdown().await;
    }
    println!(
        "measured: dropped pause+resume at {pause}, trigger at {trigger}, revoke at {revoke}, schema_version at \
         {version}, list at {read}, operator actions at {recorded}, console reads at {pages}, set_limit+clear_limit \
         at {limits}, runtime pause+resume (owned, shared) at {runtime:?} cut points"
    );
    proxy.set(Mode::Normal);
}

/// The stored keys of job kinds, swept the same way: add, update, remove
/// and the reads (on the store, and recorded by an `Operator`), and every
/// statement of a replica's sync and of a kind's run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_key_calls_dropped_at_every_await_leave_no_open_transaction() {
    let db = support::db().await;
    let (proxy, pool) = delaying_proxy(&db).await;
    let step = SWEEP_STEP;
    let store = LeaseStore::new(pool.clone());
    let key = |n: u32| NewKey::new("swept", &format!("swept:{n}"), &n, Schedule::Manual).expect("key");
    let writes = sweep(&db, &pool, step, "add+update+remove", |n| {
        let store = store.clone();
        async move {
            store.keys().add(&[key(n)]).await?;
            store.keys().update(&key(n)).await?;
            store.keys().get(&format!("swept:{n}")).await?;
            store.keys().not_run(10).await?;
            store.keys().kinds().await?;
            store.keys().remove("swept", &format!("swept:{n}")).await.map(drop)
        }
    })
    .await;
    let operator = Operator::new(store.clone(), "sweeper").expect("operator");
    let recorded = sweep(&db, &pool, step, "operator add+update+remove", |n| {
        let op = operator.clone();
        async move {
            op.add_keys(&[key(n + 1000)]).await?;
            op.update_key(&key(n + 1000)).await?;
            op.remove_key("swept", &format!("swept:{}", n + 1000)).await.map(drop)
        }
    })
    .await;
    store.keys().add(&[key(0)]).await.expect("a key to read");
    let replica = sweep(&db, &pool, step, "sync and run statements", |_| {
        let store = store.clone();
        async move { store.kind_statements_for_test("swept", "swept:0").await }
    })
    .await;
    println!(
        "measured: dropped add+update+remove at {writes}, operator at {recorded}, sync and run at {replica} cut points"
    );
    proxy.set(Mode::Normal);
}
