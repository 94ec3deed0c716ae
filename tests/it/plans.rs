//! The plans of the statements of every run: settled on each connection,
//! so PostgreSQL runs their generic plans however small a batch is
//! (`src/plans.rs`). Not among clause removal's scenarios: its rewriter
//! changes the statements' texts on the wire, and a statement is settled
//! by its text.

use std::time::Duration;

use leasehold::store::{Claim, Lease, LeaseStore, Renewal};

use crate::support::{self, LONG};

/// The release planned on a connection while the history table held a
/// hundred runs — a new schema's first runs, when connections open and
/// settle their plans — still finds each history place through the primary
/// key once the table holds 20,000: PostgreSQL keeps that plan until the
/// table's next `ANALYZE`, and a hash join over a scan of the whole table
/// (the cheaper plan for a table a page or two long, chosen when the places
/// were matched with `=`) would read every page of it at every release.
#[tokio::test]
async fn the_release_planned_on_a_short_history_finds_places_by_key_once_it_is_long() {
    let db = support::db().await;
    // Detached: its session's setting and prepared statement never go back
    // to the pool.
    let mut conn = db.pool.acquire().await.expect("a connection").detach();
    let prepare = format!(
        "SET plan_cache_mode = force_generic_plan;
         PREPARE release(text[], text[], int8[], timestamptz[], float8[], text, text[], int8[],
                         timestamptz[], timestamptz[], text[], text[], text[], int4[]) AS {}",
        LeaseStore::FINISH_MANY_SQL
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(prepare))
        .execute(&mut conn)
        .await
        .expect("prepare the release");
    async fn plan(conn: &mut sqlx::PgConnection) -> String {
        let lines: Vec<String> = sqlx::query_scalar(
            "EXPLAIN EXECUTE release('{}', '{}', '{}', '{}', '{}', 'leasehold', '{}', '{}', \
                                     '{}', '{}', '{}', '{}', '{}', '{}')",
        )
        .fetch_all(conn)
        .await
        .expect("the release's plan");
        lines.join("\n")
    }
    // The first runs recorded: a history a page or two long.
    let record = |from: i64, to: i64| {
        sqlx::query(
            "INSERT INTO leasehold_run (key, slot, run_no, job_name, fence, holder, started_at, ended_at, outcome)
             SELECT 'tenant:' || (i / 100), i % 100, i, 'job', i, 'a', clock_timestamp(), clock_timestamp(), 'succeeded'
               FROM generate_series($1::int8, $2::int8) AS i",
        )
        .bind(from)
        .bind(to)
    };
    record(0, 99).execute(&mut conn).await.expect("100 runs recorded");
    // Planned now: the generic plan is made and cached.
    let early = plan(&mut conn).await;
    record(100, 19_999)
        .execute(&mut conn)
        .await
        .expect("20,000 runs recorded");
    let full = plan(&mut conn).await;
    for (when, plan) in [("100 runs long", &early), ("20,000 runs long", &full)] {
        let overwrite = plan
            .split("CTE overwritten")
            .nth(1)
            .and_then(|rest| rest.split("CTE recorded").next())
            .unwrap_or_else(|| panic!("the overwrite step in the plan:\n{plan}"));
        assert!(
            overwrite.contains("Index Scan using leasehold_run_pkey") && !overwrite.contains("Seq Scan"),
            "with the history table {when}, the overwrite looks places up by key:\n{plan}"
        );
    }
}

fn acquired(claim: Claim) -> Lease {
    match claim {
        Claim::Acquired(lease) => lease,
        other => panic!("expected the claim to acquire the lease, got {other:?}"),
    }
}

/// A connection of a store's own settles the plans of the statements of
/// every run as it opens: each has had PostgreSQL's five custom plans, and
/// its next execution runs the generic plan, however few keys it carries —
/// here a heartbeat of one lease, whose custom plan would be estimated
/// cheaper and so be planned again on every execution. Settling changes
/// no row.
#[tokio::test]
async fn an_owned_connection_runs_the_statements_of_every_run_on_their_generic_plans() {
    let db = support::db().await;
    let store = support::store_in(leasehold::runtime::Connections::default(), &db.pool).await;
    let lease = acquired(store.claim("k", "a", LONG).await.unwrap());
    let rows_before: i64 = sqlx::query_scalar("SELECT count(*) FROM leasehold_lease")
        .fetch_one(&db.pool)
        .await
        .expect("the lease rows count");
    for connection in support::prepared_statements(&store).await {
        for fragment in EVERY_RUN {
            let settled: Vec<_> = connection
                .iter()
                .filter(|(text, _, _)| text.contains(fragment))
                .collect();
            assert!(
                matches!(settled[..], [(_, 0, 5)]),
                "five custom plans of {fragment:?}, then nothing yet: {settled:#?}"
            );
        }
    }
    for _ in 0..3 {
        assert!(matches!(
            store.renew(&lease, LONG).await.expect("renew"),
            Renewal::Renewed(_)
        ));
    }
    let heartbeats: Vec<(i64, i64)> = support::prepared_statements(&store)
        .await
        .into_iter()
        .flatten()
        .filter(|(statement, _, _)| statement.contains("), renewed AS ("))
        .map(|(_, generic, custom)| (generic, custom))
        .collect();
    assert_eq!(
        heartbeats.iter().map(|(generic, _)| generic).sum::<i64>(),
        3,
        "each heartbeat of one lease ran the generic plan: {heartbeats:?}"
    );
    assert!(
        heartbeats.iter().all(|(_, custom)| *custom == 5),
        "no heartbeat was planned for its values: {heartbeats:?}"
    );
    let rows_after: i64 = sqlx::query_scalar("SELECT count(*) FROM leasehold_lease")
        .fetch_one(&db.pool)
        .await
        .expect("the lease rows count");
    assert_eq!(rows_after, rows_before, "settling the plans wrote no lease row");
}

/// A runtime's own connections claim and release runs of one key at a
/// time — batches of one — on the generic plans settled as they opened:
/// after three runs, no connection has planned either statement for its
/// values since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_claims_and_releases_one_key_at_a_time_on_generic_plans() {
    let db = support::db().await;
    let runs = support::Runs::default();
    let rt = support::replica(&db, "a", 2, vec![solo(&runs)]).await;
    let (claims, releases) = three_runs_on_generic_plans(&rt, &runs).await;
    for (statement, plans) in [("the claim of due keys", &claims), ("the release", &releases)] {
        assert!(
            plans.iter().all(|(_, custom)| *custom == 5),
            "{statement} was planned for its values after the connection opened: {plans:?}"
        );
    }
    rt.shutdown().await;
}

/// On the service's pool (`Connections::SharedWithService`) the claim and
/// the release are settled on each connection the first time they run
/// there: after three runs of one key, each has had 5 custom plans (the
/// settling) and runs its generic plan. The service's own prepared
/// statement on the same connections keeps its plans: it was planned for
/// its own execution only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_services_pool_the_statements_of_every_run_are_settled_at_first_use_and_no_other() {
    let db = support::db().await;
    let pool = db.pool_with(2).await;
    const SERVICE: &str = "SELECT 1 + $1::int4";
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(pool.acquire().await.expect("a connection of the service's pool"));
    }
    for conn in &mut held {
        let two: i32 = sqlx::query_scalar(SERVICE)
            .bind(1)
            .fetch_one(&mut **conn)
            .await
            .expect("the service's statement");
        assert_eq!(two, 2);
    }
    drop(held);
    let runs = support::Runs::default();
    let rt = support::replica_in(
        leasehold::runtime::Connections::SharedWithService,
        pool.clone(),
        "a",
        Duration::from_millis(100),
        vec![solo(&runs)],
    )
    .await;
    let (claims, releases) = three_runs_on_generic_plans(&rt, &runs).await;
    for (statement, plans) in [("the claim of due keys", &claims), ("the release", &releases)] {
        assert!(
            plans.iter().all(|(_, custom)| *custom == 5),
            "{statement} was not settled, or planned for its values since: {plans:?}"
        );
    }
    let service: Vec<(i64, i64)> = support::prepared_statements(rt.store())
        .await
        .into_iter()
        .flatten()
        .filter(|(text, _, _)| text == SERVICE)
        .map(|(_, generic, custom)| (generic, custom))
        .collect();
    assert!(!service.is_empty(), "the service's statement is still prepared");
    assert!(
        service.iter().all(|(generic, custom)| generic + custom == 1),
        "the service's statement was planned for its one execution only: {service:?}"
    );
    rt.shutdown().await;
}

/// The manual job `solo`, whose runs `runs` records.
fn solo(runs: &support::Runs) -> support::ScriptedJob {
    let settings = support::quick(leasehold::Schedule::Manual, Duration::from_secs(5));
    support::job("solo", settings, runs.body(Duration::from_millis(1)))
}

/// Triggers `solo` three times, one run after the other, and waits until
/// its claims and releases ran at least 3 times on generic plans, across
/// `rt`'s connections. Returns each connection's (generic, custom) plan
/// counts of the claim of due keys, then of the release.
async fn three_runs_on_generic_plans(
    rt: &leasehold::Runtime,
    runs: &support::Runs,
) -> (Vec<(i64, i64)>, Vec<(i64, i64)>) {
    for n in 1..=3 {
        rt.trigger("solo").await.expect("trigger");
        runs.wait_started(n, Duration::from_secs(10)).await;
    }
    let of = |fragment: &str, connections: &[Vec<(String, i64, i64)>]| -> Vec<(i64, i64)> {
        connections
            .iter()
            .flatten()
            .filter(|(text, _, _)| text.contains(fragment))
            .map(|(_, generic, custom)| (*generic, *custom))
            .collect()
    };
    let generic = |plans: &[(i64, i64)]| plans.iter().map(|(generic, _)| generic).sum::<i64>();
    support::eventually_async(Duration::from_secs(10), || async {
        let connections = support::prepared_statements(rt.store()).await;
        let (claims, releases) = (of(EVERY_RUN[0], &connections), of(EVERY_RUN[3], &connections));
        (generic(&claims) >= 3 && generic(&releases) >= 3).then_some((claims, releases))
    })
    .await
}

/// A fragment of each statement of every run's text: the claim of due keys
/// without and with the fleet-wide limits' steps, the heartbeat, the
/// release.
const EVERY_RUN: [&str; 4] = [
    "t.job NOT IN (SELECT m.job_name FROM leasehold_limit AS m)",
    ", full_jobs AS (",
    "), renewed AS (",
    "), overwritten AS (",
];
