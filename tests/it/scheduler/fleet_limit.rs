//! Fleet-wide limits per job (`Controls::set_limit`): at most N runs of a
//! job at once across every replica, counted by tenure on the server
//! clock; waiting keys start, oldest due first, as soon as a place frees.

use std::time::Duration;

use chrono::{DateTime, Utc};
use leasehold::operator::LimitSet;
use leasehold::{Error, Runtime, Schedule};
use tokio::time::Instant;

use crate::support::{self, RunRecord, Runs, job, quick};

/// The largest number of intervals `[start, end)` open at one instant
/// (an end and a start at the same instant do not overlap).
fn most_at_once<T: Ord + Copy>(intervals: impl IntoIterator<Item = (T, T)>) -> usize {
    let mut edges: Vec<(T, i32)> = Vec::new();
    for (start, end) in intervals {
        edges.push((start, 1));
        edges.push((end, -1));
    }
    edges.sort_by_key(|&(at, delta)| (at, delta));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, delta) in edges {
        now += delta;
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

/// A replica registering `keys` (each job named by its prefix: `report`),
/// with room for 8 runs, polling every 5 s: a waiting key that starts
/// sooner than that was woken by a place freeing.
async fn replica(db: &support::TestDb, holder: &str, keys: &[String], runs: &Runs, work: Duration) -> Runtime {
    let settings = quick(Schedule::Manual, Duration::from_secs(30));
    let mut builder = Runtime::builder(db.pool_with(3).await)
        .holder(holder)
        .poll_interval(Duration::from_secs(5))
        .max_concurrent_runs(8);
    for key in keys {
        builder = builder.register(job(key, settings.clone(), runs.body(work)));
    }
    builder.start().await.expect("runtime starts")
}

/// Three replicas register the same 50 `report` keys; the fleet limit of
/// `report` is 4. All 50 are triggered at once (in key order): every key
/// runs once, never more than 4 at a time — by the jobs' own clock and by
/// the tenures the history records on the server's — the limit is used,
/// and the keys start in the order they fell due, give or take the keys
/// concurrent claims had locked. A waiting key starts as soon as a place
/// frees: well within the poll interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_reports_on_three_replicas_run_at_most_four_at_once_oldest_first() {
    let db = support::db().await;
    let runs = Runs::default();
    let keys: Vec<String> = (0..50).map(|k| format!("report:{k:02}")).collect();
    let work = Duration::from_millis(300);
    let mut fleet = Vec::new();
    for holder in ["r1", "r2", "r3"] {
        fleet.push(replica(&db, holder, &keys, &runs, work).await);
    }
    let store = fleet[0].store().clone();
    assert_eq!(
        store
            .controls()
            .set_limit("report", 4, "test@fleet")
            .await
            .expect("set"),
        LimitSet::Set { previous: None }
    );
    // Every replica learns the limit at once (the set tells them to poll):
    // from then on they wake its keys in the order they fall due.
    support::eventually(Duration::from_secs(4), || {
        fleet
            .iter()
            .all(|rt| rt.health().fleet_limits == [("report".to_owned(), 4)])
            .then_some(())
    })
    .await;
    let mut due_at = Vec::new();
    for key in &keys {
        due_at.push(Instant::now());
        fleet[0].trigger(key).await.expect("trigger");
    }
    let all: Vec<RunRecord> = support::eventually(Duration::from_secs(60), || {
        let all = runs.all();
        (all.len() >= keys.len() && all.iter().all(|r| r.ended.is_some())).then_some(all)
    })
    .await;

    let mut ran: Vec<&str> = all.iter().map(|r| r.key.as_str()).collect();
    ran.sort_unstable();
    assert_eq!(
        ran,
        keys.iter().map(String::as_str).collect::<Vec<_>>(),
        "each key ran once"
    );
    let on_jobs = most_at_once(all.iter().map(|r| (r.started, r.ended.expect("ended"))));
    assert_eq!(
        on_jobs, 4,
        "at most four at once by the jobs' clock, and the limit is used"
    );
    // Each run's history row is written by its release, just after its body returned.
    let tenures: Vec<(DateTime<Utc>, DateTime<Utc>)> = support::eventually_async(Duration::from_secs(10), || async {
        let rows: Vec<(DateTime<Utc>, DateTime<Utc>)> =
            sqlx::query_as("SELECT started_at, ended_at FROM leasehold_run WHERE job_name = 'report'")
                .fetch_all(&db.pool)
                .await
                .ok()?;
        (rows.len() == keys.len()).then_some(rows)
    })
    .await;
    let on_server = most_at_once(tenures.iter().copied());
    assert!(
        on_server <= 4,
        "{on_server} tenures of report overlapped on the server's clock"
    );
    let holders: std::collections::BTreeSet<&str> = all.iter().map(|r| r.holder.as_str()).collect();
    assert!(
        holders.len() >= 2,
        "the limit is the fleet's, not one replica's: {holders:?}"
    );

    // Due order: the k-th key to start is one of the first k + 16 to fall
    // due. Each replica claims its keys oldest first; a claim skips the
    // keys a concurrent claim has locked (at most its room, 8), so with
    // two other replicas a key may be passed by up to 16 younger ones.
    let mut by_start = all.clone();
    by_start.sort_by_key(|r| r.started);
    let rank = |key: &str| keys.iter().position(|k| k == key).expect("a key of ours");
    let mut worst = 0usize;
    for (k, run) in by_start.iter().enumerate() {
        worst = worst.max(rank(&run.key).saturating_sub(k));
    }
    // The waits, and the longest time a place stood free while a key waited.
    let mut waits: Vec<Duration> = all
        .iter()
        .map(|r| r.started.saturating_duration_since(due_at[rank(&r.key)]))
        .collect();
    waits.sort_unstable();
    let mut idle = Duration::ZERO;
    let mut ends: Vec<Instant> = all.iter().filter_map(|r| r.ended).collect();
    ends.sort_unstable();
    for (k, run) in by_start.iter().enumerate().skip(4) {
        // The k-th start needs the (k-4)-th end: how long after it did it come?
        idle = idle.max(run.started.saturating_duration_since(ends[k - 4]));
    }
    eprintln!(
        "fleet limit 4, 3 replicas, 50 keys: most at once {on_jobs} (jobs) {on_server} (server); \
         wait p50 {:?} p99 {:?}; out of due order by at most {worst}; a place free while a key waited at most {idle:?}",
        waits[waits.len() / 2],
        waits[waits.len() * 99 / 100]
    );
    assert!(
        worst <= 16,
        "a key started {worst} places ahead of its due order: {:?}",
        by_start
            .iter()
            .map(|r| (r.key.as_str(), r.holder.as_str()))
            .collect::<Vec<_>>()
    );
    assert!(
        idle < Duration::from_secs(4),
        "a place stood free {idle:?} while keys waited: woken by the release, not the 5 s poll"
    );
    assert!(
        store.controls().clear_limit("report").await.expect("clear"),
        "the limit was in force"
    );
    for rt in fleet {
        rt.shutdown().await;
    }
}

/// A limit of 0, above the largest, or on a name no key has is refused,
/// naming the value and what to do; clearing one that is not set says so.
#[tokio::test]
async fn a_fleet_limit_of_zero_too_large_or_on_an_unknown_job_is_refused() {
    let db = support::db().await;
    let runs = Runs::default();
    let rt = replica(&db, "r1", &["report:1".to_owned()], &runs, Duration::ZERO).await;
    let controls = rt.store().controls();
    let zero = controls
        .set_limit("report", 0, "ops")
        .await
        .expect_err("0 is not a limit");
    assert!(matches!(zero, Error::InvalidInput { .. }), "{zero:?}");
    assert!(zero.to_string().contains("clear"), "says how to lift a limit: {zero}");
    let huge = controls
        .set_limit("report", 1_000_000, "ops")
        .await
        .expect_err("absurd");
    assert!(
        huge.to_string().contains("1000000") && huge.to_string().contains("10000"),
        "{huge}"
    );
    assert_eq!(
        controls.set_limit("reprot", 2, "ops").await.expect("answered"),
        LimitSet::UnknownJob
    );
    assert!(controls.limits().await.expect("limits").is_empty(), "nothing was set");
    assert!(!controls.clear_limit("report").await.expect("clear"));
    rt.shutdown().await;
}

/// A replica registering `keys`, each run waiting for `gate`, polling
/// every `poll`.
async fn gated(db: &support::TestDb, holder: &str, keys: &[&str], gate: &support::Gate, poll: Duration) -> Runtime {
    let settings = quick(Schedule::Manual, Duration::from_secs(30));
    let mut builder = Runtime::builder(db.pool_with(3).await)
        .holder(holder)
        .poll_interval(poll)
        .max_concurrent_runs(8);
    for key in keys {
        builder = builder.register(job(key, settings.clone(), gate.body()));
    }
    builder.start().await.expect("runtime starts")
}

/// Sets the limit of `report` and waits until every replica of `fleet`
/// knows it (the set tells them to poll at once).
async fn limit_report(fleet: &[&Runtime], limit: u32) -> LimitSet {
    let set = fleet[0]
        .store()
        .controls()
        .set_limit("report", limit, "test@fleet")
        .await
        .expect("set the limit");
    support::eventually(Duration::from_secs(10), || {
        fleet
            .iter()
            .all(|rt| rt.health().fleet_limits == [("report".to_owned(), limit)])
            .then_some(())
    })
    .await;
    set
}

/// The keys of the runs started so far, in start order.
fn started(gate: &support::Gate) -> Vec<String> {
    gate.runs().all().into_iter().map(|r| r.key).collect()
}

/// Limit 1: a run's release frees its place at once, and the key another
/// replica holds back starts then — not when the released lease would
/// have expired (30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_place_freed_by_a_release_is_taken_at_once_on_another_replica() {
    let db = support::db().await;
    let gate = support::Gate::default();
    let r1 = gated(&db, "r1", &["report:a"], &gate, Duration::from_secs(5)).await;
    let r2 = gated(&db, "r2", &["report:b"], &gate, Duration::from_secs(5)).await;
    limit_report(&[&r1, &r2], 1).await;
    r1.trigger("report:a").await.expect("trigger");
    gate.runs().wait_started(1, Duration::from_secs(10)).await;
    r2.trigger("report:b").await.expect("trigger");
    support::wait_polls(&r2, 1).await;
    assert_eq!(started(&gate), ["report:a"], "report:b waits for the place");
    gate.finish_one();
    let ended = Instant::now();
    let runs = gate.runs().wait_started(2, Duration::from_secs(20)).await;
    let waited = runs[1].started.saturating_duration_since(ended);
    assert!(
        waited < Duration::from_secs(4),
        "report:b started {waited:?} after report:a's release: the place was not freed by it"
    );
    gate.finish_one();
    r1.shutdown().await;
    r2.shutdown().await;
}

/// Limit 3 lowered to 1 while three runs go on: none of them is stopped,
/// no new run starts until all three have ended, then one at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lowering_a_limit_stops_no_run_and_holds_new_starts_to_the_new_limit() {
    let db = support::db().await;
    let gate = support::Gate::default();
    let keys = ["report:0", "report:1", "report:2", "report:3", "report:4", "report:5"];
    let rt = gated(&db, "r1", &keys, &gate, Duration::from_millis(300)).await;
    limit_report(&[&rt], 3).await;
    for key in &keys[..3] {
        rt.trigger(key).await.expect("trigger");
    }
    gate.runs().wait_started(3, Duration::from_secs(10)).await;
    for key in &keys[3..] {
        rt.trigger(key).await.expect("trigger");
    }
    support::wait_polls(&rt, 2).await;
    assert_eq!(started(&gate).len(), 3, "the limit of 3 holds");

    assert_eq!(limit_report(&[&rt], 1).await, LimitSet::Set { previous: Some(3) });
    gate.finish_one();
    support::eventually(Duration::from_secs(10), || {
        (gate.runs().all().iter().filter(|r| r.ended.is_some()).count() == 1).then_some(())
    })
    .await;
    support::wait_polls(&rt, 2).await;
    assert_eq!(
        started(&gate).len(),
        3,
        "two of the three still run: no start under a limit of 1"
    );
    gate.finish_one();
    gate.finish_one();
    gate.runs().wait_started(4, Duration::from_secs(10)).await;
    support::wait_polls(&rt, 2).await;
    assert_eq!(started(&gate).len(), 4, "one at a time under the new limit");
    for n in 5..=6 {
        gate.finish_one();
        gate.runs().wait_started(n, Duration::from_secs(10)).await;
    }
    gate.finish_one();
    let all = support::eventually(Duration::from_secs(10), || {
        let all = gate.runs().all();
        all.iter().all(|r| r.ended.is_some()).then_some(all)
    })
    .await;
    assert!(
        all.iter().all(|r| r.cancelled.is_none()),
        "lowering the limit cancelled a run: {all:?}"
    );
    assert_eq!(
        most_at_once(all[3..].iter().map(|r| (r.started, r.ended.expect("ended")))),
        1
    );
    rt.shutdown().await;
}

/// A revoked run's place is free when the revoke commits: the waiting key
/// starts at once, not when the revoked lease would have expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_runs_place_is_free_at_once() {
    let db = support::db().await;
    let gate = support::Gate::default();
    let rt = gated(&db, "r1", &["report:a", "report:b"], &gate, Duration::from_secs(5)).await;
    limit_report(&[&rt], 1).await;
    rt.trigger("report:a").await.expect("trigger");
    gate.runs().wait_started(1, Duration::from_secs(10)).await;
    rt.trigger("report:b").await.expect("trigger");
    support::wait_polls(&rt, 1).await;
    assert_eq!(started(&gate), ["report:a"]);
    let revoked = Instant::now();
    rt.store()
        .controls()
        .revoke("report:a", leasehold::operator::Revoke::Force, &[])
        .await
        .expect("revoke");
    let runs = gate.runs().wait_started(2, Duration::from_secs(40)).await;
    let waited = runs[1].started.saturating_duration_since(revoked);
    assert!(
        waited < Duration::from_secs(4),
        "report:b started {waited:?} after the revoke: the revoked tenure kept its place"
    );
    gate.finish_one();
    rt.shutdown().await;
}

/// A kind of reports, no key yet: what a service registers before its
/// first tenant is added.
struct Reports;

impl leasehold::JobKind for Reports {
    type Args = u64;
    fn name(&self) -> &str {
        "report"
    }
    fn settings(&self) -> leasehold::JobSettings {
        leasehold::JobSettings::new(Schedule::Manual)
    }
    async fn run(&self, _tenant: u64, _guard: leasehold::FenceGuard) -> Result<(), leasehold::JobError> {
        Ok(())
    }
}

/// The limit in force and who set it.
async fn report_limit(db: &support::TestDb) -> Option<(u32, String)> {
    let store = leasehold::store::LeaseStore::new(db.pool.clone());
    let limits = store.controls().limits().await.expect("limits");
    limits
        .into_iter()
        .find(|l| l.job == "report")
        .map(|l| (l.limit, l.set_by))
}

/// A limit declared in code (`RuntimeBuilder::fleet_limit`) is set as its
/// runtime starts — for a kind with no key yet too — recorded as that
/// replica's; a replica declaring another value sets its own as it starts;
/// an operator's change stands until a declaring replica starts again; a
/// start whose limit is in force writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_declared_in_code_is_set_as_its_replica_starts() {
    let db = support::db().await;
    let start = |holder: &'static str, limit: u32| {
        let pool = db.pool.clone();
        async move {
            Runtime::builder(pool)
                .holder(holder)
                .register_kind(Reports)
                .fleet_limit("report", limit)
                .start()
                .await
                .expect("runtime starts")
        }
    };
    let first = start("r1", 4).await;
    assert_eq!(report_limit(&db).await, Some((4, "r1 (declared in code)".to_owned())));
    support::eventually(Duration::from_secs(10), || {
        (first.health().fleet_limits == [("report".to_owned(), 4)]).then_some(())
    })
    .await;

    // A replica of the next version declares 6: the fleet follows it.
    let second = start("r2", 6).await;
    assert_eq!(report_limit(&db).await, Some((6, "r2 (declared in code)".to_owned())));
    support::eventually(Duration::from_secs(10), || {
        (first.health().fleet_limits == [("report".to_owned(), 6)]).then_some(())
    })
    .await;

    // An operator lowers it; a restart declaring the value in force writes
    // nothing, one declaring another sets it again.
    let operator = leasehold::operator::Operator::new(first.store().clone(), "alice").expect("operator");
    let set = operator.set_limit("report", 2).await.expect("set");
    assert_eq!(
        set,
        LimitSet::Set { previous: Some(6) },
        "a limit set is known, keys or not"
    );
    second.shutdown().await;
    let again = start("r2", 2).await;
    assert_eq!(
        report_limit(&db).await,
        Some((2, "alice".to_owned())),
        "nothing written"
    );
    again.shutdown().await;
    let again = start("r2", 6).await;
    assert_eq!(report_limit(&db).await, Some((6, "r2 (declared in code)".to_owned())));

    // Each set is on the job's record, the declarations under their
    // replicas' names.
    let actions = leasehold::store::LeaseStore::new(db.pool.clone())
        .records()
        .job_actions("report", 10)
        .await
        .expect("the job's record");
    let by: Vec<&str> = actions.iter().rev().map(|a| a.actor.as_str()).collect();
    assert_eq!(
        by,
        [
            "r1 (declared in code)",
            "r2 (declared in code)",
            "alice",
            "r2 (declared in code)"
        ]
    );
    again.shutdown().await;
    first.shutdown().await;
}

/// A declared limit of 0, above the largest, given twice, or on a name not
/// registered is refused at start, naming the value and what to do.
#[tokio::test]
async fn a_declared_limit_of_zero_too_large_twice_or_on_an_unknown_name_is_refused() {
    let refused =
        |builder: leasehold::RuntimeBuilder| async move { builder.start().await.expect_err("refused").to_string() };
    let base = || Runtime::builder(support::unreachable_pool()).register_kind(Reports);
    let text = refused(base().fleet_limit("report", 0)).await;
    assert!(text.contains("fleet_limit") && text.contains("1 to 10000"), "{text}");
    let text = refused(base().fleet_limit("report", 10_001)).await;
    assert!(text.contains("10001") && text.contains("1 to 10000"), "{text}");
    let text = refused(base().fleet_limit("report", 2).fleet_limit("report", 3)).await;
    assert!(text.contains("give each name one fleet-wide limit"), "{text}");
    let text = refused(base().fleet_limit("reports", 2)).await;
    assert!(
        text.contains("\"reports\"") && text.contains("registered: report"),
        "{text}"
    );
}

/// A replica that has not read a new limit yet — it does not listen, and
/// its next poll is a minute away — claims without the limits' steps.
/// That claim refuses the limited job's key: `report:b` does not start
/// beside `report:a`, which holds the only place (given it when the limit
/// was set). The refusal makes the replica poll at once and learn the
/// limit; `report:b` starts when `report:a`'s release frees the place, not
/// a poll later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_has_not_read_a_new_limit_yet_starts_no_run_beyond_it() {
    let db = support::db().await;
    let gate = support::Gate::default();
    let settings = quick(Schedule::Manual, Duration::from_secs(30));
    let mut builder = Runtime::builder(db.pool_with(3).await)
        .holder("r1")
        .poll_interval(Duration::from_secs(60))
        .listen(false)
        .max_concurrent_runs(8);
    for key in ["report:a", "report:b"] {
        builder = builder.register(job(key, settings.clone(), gate.body()));
    }
    let rt = builder.start().await.expect("runtime starts");
    rt.trigger("report:a").await.expect("trigger");
    gate.runs().wait_started(1, Duration::from_secs(10)).await;
    rt.store()
        .controls()
        .set_limit("report", 1, "test@fleet")
        .await
        .expect("set the limit");
    assert!(
        rt.health().fleet_limits.is_empty(),
        "the replica has not read the limit yet"
    );
    rt.trigger("report:b").await.expect("trigger");
    support::eventually(Duration::from_secs(10), || {
        (rt.health().fleet_limits == [("report".to_owned(), 1)]).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        started(&gate),
        ["report:a"],
        "report:b started beside report:a, past the limit of 1"
    );
    let released = Instant::now();
    gate.finish_one();
    let runs = gate.runs().wait_started(2, Duration::from_secs(30)).await;
    let waited = runs[1].started.saturating_duration_since(released);
    assert!(
        waited < Duration::from_secs(5),
        "report:b started {waited:?} after report:a ended: it waited for a poll"
    );
    gate.finish_one();
    rt.shutdown().await;
}

/// A limit is set while a claim of one of the job's keys is in flight —
/// its statement ran before the limit existed, and commits after the set
/// began. The set waits for it, so the run it started takes the place:
/// a later claim of another key of the job finds none free, and two runs
/// never go on under a limit of 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_set_beside_a_claim_in_flight_counts_the_run_it_starts() {
    // Two keys of `report`, both due, no limit yet.
    let db = due_reports(&["report:a", "report:b"], None).await;

    let mut in_flight = db.pool.begin().await.expect("begin");
    let claimed = claim(
        &mut in_flight,
        leasehold::store::LeaseStore::CLAIM_DUE_UNLIMITED_SQL,
        "report:a",
    )
    .await;
    assert_eq!(claimed, [("report:a".to_owned(), true)]);
    let store = leasehold::store::LeaseStore::new(db.pool.clone());
    let set = tokio::spawn(async move { store.controls().set_limit("report", 1, "test@fleet").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    in_flight.commit().await.expect("commit");
    set.await.expect("the set").expect("set the limit");

    let mut conn = db.pool.acquire().await.expect("connection");
    let second = claim(&mut conn, leasehold::store::LeaseStore::CLAIM_DUE_SQL, "report:b").await;
    assert_eq!(
        second,
        [("report:b".to_owned(), false)],
        "report:b started beside report:a under a limit of 1"
    );
    let place: Option<String> =
        sqlx::query_scalar("SELECT key FROM leasehold_run_slot WHERE job_name = 'report' AND slot_no = 1")
            .fetch_one(&db.pool)
            .await
            .expect("the place");
    assert_eq!(place.as_deref(), Some("report:a"), "the run in flight holds the place");
}

/// Limit 1. `report:a`'s run, stamped with its replica's liveness
/// registration, opens a fenced transaction; the registration then dies —
/// its session seen gone a grace ago — while the process is frozen and
/// cannot stop the run. That ends the run's tenure (invariant 10): its
/// place is free, and `report:b` takes it. When the frozen process
/// resumes, its COMMIT is refused and nothing it wrote lands: only one run
/// of `report` writes at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_registration_died_commits_nothing_once_its_place_is_taken() {
    let db = due_reports(&["report:a", "report:b"], Some(1)).await;
    sqlx::query("CREATE TABLE warehouse_load (key TEXT NOT NULL)")
        .execute(&db.pool)
        .await
        .expect("the downstream table");
    // A live registration, as a runtime's listener writes it.
    let registration: i64 = sqlx::query_scalar(
        "INSERT INTO leasehold_replica (pid, holder, registered_at, confirmed_at, grace)
         VALUES (pg_backend_pid(), 'frozen', clock_timestamp(), clock_timestamp(), interval '1 second')
         RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .expect("register");
    let mut conn = db.pool.acquire().await.expect("connection");
    let claimed = claim_stamped(
        &mut conn,
        leasehold::store::LeaseStore::CLAIM_DUE_SQL,
        "report:a",
        Some(registration),
    )
    .await;
    assert_eq!(claimed, [("report:a".to_owned(), true)]);
    let (fence, owner): (i64, Option<i64>) =
        sqlx::query_as("SELECT fence, owner FROM leasehold_lease WHERE key = 'report:a'")
            .fetch_one(&db.pool)
            .await
            .expect("report:a's tenure");
    assert_eq!(owner, Some(registration), "the run is stamped");

    // The run's fenced transaction, as `FenceGuard::begin_fenced_on` opens
    // it, and its write downstream; then the process freezes.
    let mut frozen = db.pool.begin().await.expect("begin");
    sqlx::query("INSERT INTO leasehold_fence (resource, last_fence, lease_key) VALUES ('warehouse', $1, 'report:a')")
        .bind(fence)
        .execute(&mut *frozen)
        .await
        .expect("advance the fence");
    sqlx::query("INSERT INTO warehouse_load (key) VALUES ('report:a')")
        .execute(&mut *frozen)
        .await
        .expect("the write");

    // Its session is killed meanwhile: seen gone, a grace ago.
    sqlx::query("UPDATE leasehold_replica SET gone_seen_at = clock_timestamp() - interval '2 seconds' WHERE id = $1")
        .bind(registration)
        .execute(&db.pool)
        .await
        .expect("the registration dies");
    let second = claim(&mut conn, leasehold::store::LeaseStore::CLAIM_DUE_SQL, "report:b").await;
    assert_eq!(second, [("report:b".to_owned(), true)], "report:b took the freed place");

    let committed = frozen.commit().await;
    let refused = committed
        .as_ref()
        .err()
        .and_then(|e| e.as_database_error())
        .and_then(|e| e.code())
        .is_some_and(|code| code == "LH001");
    assert!(
        refused,
        "the frozen run committed after its place went to report:b: {committed:?}"
    );
    let landed: i64 = sqlx::query_scalar("SELECT count(*) FROM warehouse_load")
        .fetch_one(&db.pool)
        .await
        .expect("count");
    assert_eq!(landed, 0, "nothing the frozen run wrote landed");
}

/// A set frozen (or cut off) while it holds its lock on the lease table —
/// the lock every claim, renewal and release of the fleet waits on — does
/// not hold the fleet up for longer than a second: the server ends the
/// silent session, the lock goes with it, and a claim waiting on it goes
/// through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_frozen_holding_its_lock_holds_the_claims_up_for_at_most_a_second() {
    let db = due_reports(&["report:a"], None).await;

    // The set's first statements, then the client freezes inside them.
    let mut frozen = db.pool.begin().await.expect("begin");
    sqlx::raw_sql(leasehold::store::Controls::DRAIN_CLAIMS_SQL)
        .execute(&mut *frozen)
        .await
        .expect("take the lock");
    let waited = Instant::now();
    let mut conn = db.pool.acquire().await.expect("connection");
    let claimed = tokio::time::timeout(
        Duration::from_secs(10),
        claim(
            &mut conn,
            leasehold::store::LeaseStore::CLAIM_DUE_UNLIMITED_SQL,
            "report:a",
        ),
    )
    .await
    .expect("the claim went through once the frozen set's session ended");
    assert_eq!(claimed, [("report:a".to_owned(), true)]);
    let held_up = waited.elapsed();
    assert!(
        held_up >= Duration::from_millis(900) && held_up < Duration::from_secs(3),
        "the claim waited {held_up:?} on the frozen set's lock"
    );
    assert!(
        frozen.commit().await.is_err(),
        "the frozen set's session was ended: nothing it did commits"
    );
}

/// The rows of `report`'s `keys` in a fresh database, all due and free,
/// under a fleet-wide limit of `limit` (`None`: no limit), with no replica
/// running: the setup of the scenarios that send claims themselves.
async fn due_reports(keys: &[&str], limit: Option<u32>) -> support::TestDb {
    let db = support::db().await;
    let gate = support::Gate::default();
    let rt = gated(&db, "r0", keys, &gate, Duration::from_secs(5)).await;
    if let Some(limit) = limit {
        limit_report(&[&rt], limit).await;
    }
    rt.shutdown().await;
    sqlx::query("UPDATE leasehold_lease SET next_due_at = clock_timestamp() WHERE key LIKE 'report:%'")
        .execute(&db.pool)
        .await
        .expect("make them due");
    db
}

/// Runs the batch claim `statement` for `key` of job `report` on `conn`
/// (holder `claimer`, a 30 s lease, no liveness stamp): each candidate's
/// key and whether it was acquired.
async fn claim(conn: &mut sqlx::PgConnection, statement: &'static str, key: &str) -> Vec<(String, bool)> {
    claim_stamped(conn, statement, key, None).await
}

/// [`claim`], stamping the run with the liveness registration `owner`.
async fn claim_stamped(
    conn: &mut sqlx::PgConnection,
    statement: &'static str,
    key: &str,
    owner: Option<i64>,
) -> Vec<(String, bool)> {
    use sqlx::Row;
    let rows = sqlx::query(statement)
        .bind("claimer")
        .bind(vec![key])
        .bind(vec![30.0f64])
        .bind(8i64)
        .bind(vec!["report"])
        .bind(10i64)
        .bind(owner)
        .bind(60.0f64)
        .bind(vec![None::<f64>])
        .bind(vec![0.0f64])
        .fetch_all(&mut *conn)
        .await
        .expect("claim");
    rows.iter()
        .map(|r| (r.get::<String, _>("key"), r.get::<bool, _>("acquired")))
        .collect()
}

/// Two claims of a limit-1 job's keys at once, each in its own
/// transaction: the first takes the place and has not committed when the
/// second runs. The second skips the locked place and claims nothing — it
/// neither waits for the first nor, once that commits, takes the place
/// again (a place read free on the snapshot is re-checked once locked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_claims_never_take_one_place() {
    // Two keys of `report` under a limit of 1, both due.
    let db = due_reports(&["report:a", "report:b"], Some(1)).await;

    let mut first = db.pool.begin().await.expect("begin");
    assert_eq!(
        claim(&mut first, leasehold::store::LeaseStore::CLAIM_DUE_SQL, "report:a").await,
        [("report:a".to_owned(), true)]
    );
    let pool = db.pool.clone();
    let second = tokio::spawn(async move {
        let mut tx = pool.begin().await.expect("begin");
        let answer = claim(&mut tx, leasehold::store::LeaseStore::CLAIM_DUE_SQL, "report:b").await;
        tx.commit().await.expect("commit");
        answer
    });
    // Whatever the second claim does, the first commits a moment later.
    tokio::time::sleep(Duration::from_millis(500)).await;
    first.commit().await.expect("commit");
    let second = second.await.expect("the second claim");
    assert_eq!(
        second,
        [("report:b".to_owned(), false)],
        "the second claim took the place the first holds"
    );
    let taken: Vec<(String, i64)> =
        sqlx::query_as("SELECT key, fence FROM leasehold_run_slot WHERE job_name = 'report' AND expires_at > now()")
            .fetch_all(&db.pool)
            .await
            .expect("places");
    let (holder, fence): (String, i64) =
        sqlx::query_as("SELECT holder, fence FROM leasehold_lease WHERE key = 'report:a'")
            .fetch_one(&db.pool)
            .await
            .expect("report:a");
    assert_eq!(holder, "claimer");
    assert_eq!(
        taken,
        [("report:a".to_owned(), fence)],
        "one place, held by report:a's tenure"
    );
}

/// The liveness registration `holder` last made: (id, backend pid).
async fn registration(pool: &sqlx::PgPool, holder: &str) -> Option<(i64, i32)> {
    sqlx::query_as("SELECT id, pid FROM leasehold_replica WHERE holder = $1 ORDER BY id DESC LIMIT 1")
        .bind(holder)
        .fetch_optional(pool)
        .await
        .expect("read the registrations")
}

/// Limit 1. The replica running `report:a` loses its liveness session and
/// registers again while the run goes on: the run's stamp moves to the new
/// registration, and its place with it. Once the old registration is dead
/// (a grace after its session was seen gone), the place is still taken:
/// `report:b`, due on another replica, waits for `report:a`'s end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_stamp_moved_to_a_new_registration_keeps_its_place() {
    let db = support::db().await;
    let gate = support::Gate::default();
    let live = gated(&db, "live", &["report:a"], &gate, Duration::from_millis(300)).await;
    let other = gated(&db, "other", &["report:b"], &gate, Duration::from_millis(300)).await;
    limit_report(&[&live, &other], 1).await;
    let (old, pid) = support::eventually_async(Duration::from_secs(10), || registration(&db.pool, "live")).await;
    live.trigger("report:a").await.expect("trigger");
    gate.runs().wait_started(1, Duration::from_secs(10)).await;
    let owner: Option<i64> = sqlx::query_scalar("SELECT owner FROM leasehold_run_slot WHERE key = 'report:a'")
        .fetch_one(&db.pool)
        .await
        .expect("report:a's place");
    assert_eq!(owner, Some(old), "the place carries the run's stamp");

    let _: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(&db.pool)
        .await
        .expect("end the liveness session");
    // The run's stamp moves to the new registration…
    support::eventually_async(Duration::from_secs(10), || async {
        let owner: Option<i64> = sqlx::query_scalar("SELECT owner FROM leasehold_lease WHERE key = 'report:a'")
            .fetch_one(&db.pool)
            .await
            .ok()?;
        owner.filter(|o| *o != old).map(|_| ())
    })
    .await;
    // …and the old registration is dead: seen gone, a grace ago.
    support::eventually_async(Duration::from_secs(20), || async {
        sqlx::query_scalar::<_, bool>(
            "SELECT gone_seen_at + grace <= clock_timestamp() FROM leasehold_replica WHERE id = $1",
        )
        .bind(old)
        .fetch_optional(&db.pool)
        .await
        .ok()
        .flatten()
        .filter(|dead| *dead)
        .map(|_| ())
    })
    .await;
    other.trigger("report:b").await.expect("trigger");
    support::wait_polls(&other, 3).await;
    let runs = gate.runs().all();
    assert_eq!(
        runs.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
        ["report:a"],
        "report:b started while report:a, re-pointed, still held the only place"
    );
    assert!(runs[0].cancelled.is_none(), "report:a kept its run: {runs:?}");
    gate.finish_one();
    gate.runs().wait_started(2, Duration::from_secs(10)).await;
    gate.finish_one();
    live.shutdown().await;
    other.shutdown().await;
}
