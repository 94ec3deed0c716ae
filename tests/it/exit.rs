//! A service's exit after `Runtime::shutdown`: its `main` awaits the
//! shutdown, drops its handles and returns, which drops the Tokio runtime
//! and ends the process. Dropping a Tokio runtime drops every task at once
//! but waits for each task still running on its blocking pool (a DNS lookup
//! of a connect, a blocking call), and the process exits right after. So
//! what could hold the exit is something of leasehold's still running when
//! shutdown returns: a task, a pool or a connection of its own, or work on
//! the blocking pool.
//!
//! Each scenario runs that `main` on a Tokio runtime of its own (its task
//! count is this runtime's alone), with the runtime idle — one run done
//! and released, nothing running, listening — and checks
//! what is left once `shutdown` returns: the runtime's own pool is closed,
//! none of its connections is left on the server, none of its tasks stays
//! alive, and dropping the handle and the Tokio runtime (the rest of the
//! exit) returns promptly.

use std::time::{Duration, Instant};

use leasehold::{Runtime, Schedule};
use leasehold_testkit::{wait_for, wait_for_async};
use sqlx::PgPool;

use crate::support::{self, Connections, LONG, Runs, TestDb, builder, eventually, job, quick};

/// How long anything of the runtime's may take to be gone after shutdown
/// returns, and the rest of the exit may take. Generous (a loaded 2-core
/// machine; the exit takes a few milliseconds here): it is a bound on a
/// holder, not a speed test.
const PROMPT: Duration = Duration::from_secs(1);
/// How often a condition is looked at while waiting for it.
const EVERY: Duration = Duration::from_millis(10);

#[test]
fn an_idle_runtime_on_connections_of_its_own_leaves_nothing_that_holds_the_exit() {
    exit_after_shutdown(Connections::default());
}

#[test]
fn an_idle_runtime_on_the_services_pool_leaves_nothing_that_holds_the_exit() {
    exit_after_shutdown(Connections::SharedWithService);
}

fn exit_after_shutdown(mode: Connections) {
    let service = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a Tokio runtime, as #[tokio::main] builds");
    let (runtime, db) = service.block_on(shut_down_when_idle(mode));

    // The rest of a service's exit: its handles go, then the Tokio runtime.
    let exit = Instant::now();
    drop(runtime);
    drop(service);
    let took = exit.elapsed();
    drop(db);
    assert!(
        took < PROMPT,
        "{mode:?}: dropping the handle and the Tokio runtime after shutdown took {took:?}: something \
         of the runtime's still runs on the blocking pool (or its drop blocks)"
    );
}

/// Starts a runtime, lets it run one job and go idle, shuts it down, and
/// checks that nothing of it is left; returns the (shut down) handle and
/// the database for the caller to drop as `main` would.
async fn shut_down_when_idle(mode: Connections) -> (Runtime, TestDb) {
    let db = support::db().await;
    let alive_before = settled_tasks(&db.pool).await;
    let runs = Runs::default();
    let runtime = builder(
        db.pool.clone(),
        "exit-a",
        Some(Duration::from_millis(100)),
        vec![job("exit", quick(Schedule::Manual, LONG), runs.body(Duration::ZERO))],
    )
    .connections(mode)
    .start()
    .await
    .expect("runtime starts");
    eventually(Duration::from_secs(10), || runtime.health().listening.then_some(())).await;
    runtime.trigger("exit").await.expect("trigger");
    runs.wait_started(1, Duration::from_secs(10)).await;
    eventually(Duration::from_secs(10), || {
        let ended = runs.all().iter().all(|r| r.ended.is_some());
        (ended && runtime.health().running == 0).then_some(())
    })
    .await;

    let report = runtime.shutdown().await;
    assert_eq!(report.runs_cancelled, 0, "{mode:?}: nothing was running: {report:?}");
    assert!(!runtime.health().listening, "{mode:?}: the listener stopped");
    if mode != Connections::SharedWithService {
        assert!(
            runtime.store().pool().is_closed(),
            "{mode:?}: the runtime's own pool is closed when shutdown returns"
        );
    }
    let gone = wait_for_async(PROMPT, EVERY, || async {
        (backends_besides(&db.pool).await == 0).then_some(())
    })
    .await;
    assert!(
        gone.is_some(),
        "{mode:?}: {} session(s) of the runtime still open on the server {PROMPT:?} after shutdown returned",
        backends_besides(&db.pool).await
    );
    let ended = wait_for(PROMPT, EVERY, || (alive_tasks() <= alive_before).then_some(())).await;
    assert!(
        ended.is_some(),
        "{mode:?}: {} task(s) of the runtime still alive {PROMPT:?} after shutdown returned",
        alive_tasks().saturating_sub(alive_before)
    );
    (runtime, db)
}

/// Tasks alive on the current Tokio runtime once `pool`'s connections are
/// back (sqlx returns each from a task of its own): the service's tasks.
async fn settled_tasks(pool: &PgPool) -> usize {
    support::assert_pool_idle(pool).await;
    let mut fewest = alive_tasks();
    for _ in 0..10 {
        tokio::time::sleep(EVERY).await;
        fewest = fewest.min(alive_tasks());
    }
    fewest
}

/// Tasks alive on the current Tokio runtime.
fn alive_tasks() -> usize {
    tokio::runtime::Handle::current().metrics().num_alive_tasks()
}

/// Client sessions on `pool`'s database that are not `pool`'s own: the
/// runtime's pool and its listener while they are open.
async fn backends_besides(pool: &PgPool) -> i64 {
    let sessions: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = current_database() AND backend_type = 'client backend'",
    )
    .fetch_one(pool)
    .await
    .expect("count sessions");
    sessions - i64::from(pool.size())
}
