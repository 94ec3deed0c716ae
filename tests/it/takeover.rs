//! Crash takeover with the default lease (invariant 10): a replica that
//! dies mid-run hands its run over in about a second; one that is frozen,
//! or whose liveness session ended while it lives, does not lose its run
//! to anyone before it could have stopped it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::mpsc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use leasehold::{CancelReason, JobSettings, Schedule, runtime::RunOutcome, store::LeaseStore};
use sqlx::PgPool;
use sqlx::postgres::PgConnectOptions;

use crate::support::{self, Gate, job, quick, replica_on};

const KEY: &str = "reports";
const CHILD_DB: &str = "LEASEHOLD_TAKEOVER_CHILD_DB";
const CHILD_HOST: &str = "LEASEHOLD_TAKEOVER_CHILD_HOST";
const CHILD_PORT: &str = "LEASEHOLD_TAKEOVER_CHILD_PORT";
const CHILD_USER: &str = "LEASEHOLD_TAKEOVER_CHILD_USER";

/// The default settings of a job every 2 s: a 60 s lease.
fn defaults() -> JobSettings {
    JobSettings::new(Schedule::every(Duration::from_secs(2)))
}

/// The server's clock now.
async fn server_now(pool: &PgPool) -> DateTime<Utc> {
    sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(pool)
        .await
        .expect("read the server clock")
}

/// The key's current tenure: (holder, fence, acquired_at).
async fn tenure(pool: &PgPool) -> (String, i64, DateTime<Utc>) {
    sqlx::query_as("SELECT holder, fence, acquired_at FROM leasehold_lease WHERE key = $1")
        .bind(KEY)
        .fetch_one(pool)
        .await
        .expect("read the lease row")
}

/// Nudges every replica to claim the key now, as a wake-up would, every
/// 50 ms for `during`: a replica that may take it over does so at once.
async fn nudge(pool: &PgPool, during: Duration) {
    let until = tokio::time::Instant::now() + during;
    while tokio::time::Instant::now() < until {
        sqlx::query("SELECT pg_notify('leasehold', $1)")
            .bind(KEY)
            .execute(pool)
            .await
            .expect("notify");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `holder`'s liveness registration: (backend pid, confirmed_at).
async fn registration(pool: &PgPool, holder: &str) -> (i32, DateTime<Utc>) {
    sqlx::query_as("SELECT pid, confirmed_at FROM leasehold_replica WHERE holder = $1 ORDER BY id DESC LIMIT 1")
        .bind(holder)
        .fetch_one(pool)
        .await
        .expect("the replica registered its liveness session")
}

/// Waits until `holder` has registered its liveness session, so its next
/// claim stamps its run with it.
async fn registered(pool: &PgPool, holder: &str) {
    support::eventually_async(Duration::from_secs(10), || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM leasehold_replica WHERE holder = $1")
            .bind(holder)
            .fetch_one(pool)
            .await
            .is_ok_and(|n| n > 0)
            .then_some(())
    })
    .await;
}

/// Whether the key's lease row is stamped with a liveness registration.
async fn stamped(pool: &PgPool) -> bool {
    sqlx::query_scalar::<_, Option<i64>>("SELECT owner FROM leasehold_lease WHERE key = $1")
        .bind(KEY)
        .fetch_one(pool)
        .await
        .expect("read the stamp")
        .is_some()
}

/// A manual job of `KEY` with a 60 s lease, as every replica here runs it.
fn manual(gate: &Gate) -> support::ScriptedJob {
    job(KEY, quick(Schedule::Manual, Duration::from_secs(60)), gate.body())
}

/// The shared start of the scenarios below: replica `holder` registers its
/// liveness session and runs `KEY` once triggered, its run stamped with
/// the registration. Returns the replica and the run.
async fn a_stamped_run(db: &support::TestDb, gate: &Gate, holder: &str) -> (leasehold::Runtime, support::RunRecord) {
    let replica = support::replica(db, holder, 2, vec![manual(gate)]).await;
    registered(&db.pool, holder).await;
    replica.trigger(KEY).await.expect("trigger");
    let run = gate.runs().wait_started(1, Duration::from_secs(10)).await[0].clone();
    assert!(
        stamped(&db.pool).await,
        "the run is stamped with its replica's registration"
    );
    (replica, run)
}

/// A replica that comes up with its key overdue (a deploy after the slot
/// passed) claims it in its first pass — after its listener registered:
/// the run is stamped, so a crash of this replica (a bad release dies in
/// its first run) hands it over in about a second, not at its lease's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_claimed_as_its_replica_comes_up_is_stamped() {
    let db = support::db().await;
    let gate = Gate::default();
    // The key's row, then the replica gone, and the key due.
    let first = support::replica(&db, "before", 2, vec![manual(&gate)]).await;
    first.shutdown().await;
    support::free_and_due_now(&db.pool, KEY).await;

    let replica = support::replica(&db, "deployed", 2, vec![manual(&gate)]).await;
    gate.runs().wait_started(1, Duration::from_secs(10)).await;
    assert!(
        stamped(&db.pool).await,
        "the run claimed at start is stamped with its replica's registration"
    );
    gate.finish_one();
    replica.shutdown().await;
}

/// Ends `holder`'s liveness session from the server, as a pooler,
/// `pg_terminate_backend` or a reset would.
async fn terminate_session(pool: &PgPool, holder: &str) {
    let (pid, _) = registration(pool, holder).await;
    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(pool)
        .await
        .expect("terminate the liveness session");
    assert!(terminated, "{holder}'s liveness session was ended");
}

/// Not a test of its own: the replica that
/// [`a_killed_replicas_run_is_taken_over_within_two_seconds_with_the_default_lease`]
/// kills, run as a child process. Does nothing unless that test started it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of takeover; started by that scenario"]
async fn doomed_replica_child() {
    let Ok(name) = std::env::var(CHILD_DB) else {
        return;
    };
    let server = match std::env::var("DATABASE_URL") {
        Ok(url) => PgConnectOptions::from_str(&url).expect("DATABASE_URL"),
        Err(_) => PgConnectOptions::new()
            .host(&std::env::var(CHILD_HOST).expect("host"))
            .port(std::env::var(CHILD_PORT).expect("port").parse().expect("port number"))
            .username(&std::env::var(CHILD_USER).expect("user")),
    };
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect_with(server.database(&name))
        .await
        .expect("connect");
    let body = |guard: leasehold::FenceGuard| async move {
        println!("RUNNING {}", guard.fence());
        tokio::time::sleep(Duration::from_secs(300)).await;
        Ok(())
    };
    let _rt = replica_on(
        pool,
        "doomed",
        Duration::from_millis(100),
        vec![job(KEY, defaults(), body)],
    )
    .await;
    tokio::time::sleep(Duration::from_secs(300)).await;
}

/// The child replica, killed and reaped when dropped.
struct Doomed {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Doomed {
    fn start(db: &support::TestDb) -> Self {
        let exe = std::env::current_exe().expect("test binary");
        let mut child = Command::new(exe)
            .args([
                "--exact",
                "takeover::doomed_replica_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_DB, &db.name)
            .env(CHILD_HOST, db.options.get_host())
            .env(CHILD_PORT, db.options.get_port().to_string())
            .env(CHILD_USER, db.options.get_username())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the child replica");
        let stdout = child.stdout.take().expect("piped stdout");
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Doomed { child, lines }
    }

    /// The fence of the child's first run, once it runs.
    fn running(&self, within: Duration) -> i64 {
        let deadline = std::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = self.lines.recv_timeout(left).expect("the child runs the key");
            // The test harness may print its own words before ours.
            if let Some(at) = line.find("RUNNING ") {
                return line[at + "RUNNING ".len()..].trim().parse().expect("a fence");
            }
        }
    }
}

impl Drop for Doomed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The drill, once: a replica is `kill -9`ed in the middle of a run
/// of a job with the default 60 s lease. Another replica takes the key over
/// within 2 s of the kill (by the server clock), and the record shows the
/// killed run as `lost`, ended before its successor began.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replicas_run_is_taken_over_within_two_seconds_with_the_default_lease() {
    let db = support::db().await;
    let doomed = Doomed::start(&db);
    let fence = doomed.running(Duration::from_secs(30));
    let gate = Gate::default();
    let heir = support::replica(&db, "heir", 2, vec![job(KEY, defaults(), gate.body())]).await;
    // The heir has seen the key held for a minute.
    support::wait_polls(&heir, 2).await;
    assert_eq!(tenure(&db.pool).await.1, fence, "the child still runs the key");

    let killed_at = server_now(&db.pool).await;
    let status = Command::new("kill")
        .args(["-KILL", &doomed.child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
    let run = gate.runs().wait_started(1, Duration::from_secs(20)).await[0].clone();
    let (holder, new_fence, acquired_at) = tenure(&db.pool).await;
    assert_eq!((holder.as_str(), new_fence), ("heir", run.fence));
    let took = (acquired_at - killed_at).to_std().expect("taken over after the kill");
    println!("measured: taken over {took:?} after the kill");
    assert!(
        took < Duration::from_secs(2),
        "taken over {took:?} after the kill; the lease would have lasted 60 s"
    );
    let store = LeaseStore::new(db.pool.clone());
    let lost = store
        .records()
        .history(KEY, 10)
        .await
        .expect("history")
        .into_iter()
        .find(|r| r.fence == fence)
        .expect("the killed run is on the record");
    assert_eq!(
        (lost.outcome, lost.holder.as_str(), lost.reason.as_deref()),
        (RunOutcome::Lost, "doomed", Some("session_ended"))
    );
    assert!(
        lost.ended_at <= acquired_at,
        "the killed run's tenure ends before its successor's: {lost:?} {acquired_at}"
    );
    gate.finish_one();
    heir.shutdown().await;
}

/// A replica frozen mid-run (its liveness session open, as a stopped
/// process's stays, but unconfirmed) keeps its run well past the grace,
/// however hard another replica is woken to claim the key: only its lease
/// ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_replica_keeps_its_run_past_the_grace() {
    let db = support::db().await;
    let gate = Gate::default();
    let (frozen, run) = a_stamped_run(&db, &gate, "frozen").await;
    frozen.faults().freeze_liveness(true);
    let other = support::replica(&db, "other", 2, vec![manual(&gate)]).await;
    nudge(&db.pool, Duration::from_millis(2500)).await;
    assert_eq!(
        tenure(&db.pool).await.1,
        run.fence,
        "a frozen replica's run is not taken over before its lease ends"
    );
    assert_eq!(gate.runs().all().len(), 1);
    frozen.faults().freeze_liveness(false);
    gate.finish_one();
    other.shutdown().await;
    frozen.shutdown().await;
}

/// A replica whose liveness session is ended by the server while the
/// process lives, and which cannot register again (frozen meanwhile), is
/// not taken over before its grace ends, however hard another replica is
/// woken; its run stops itself before then (reason `deadline`), and the
/// key runs again seconds later, not a lease later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_session_ended_stops_its_run_before_another_may_take_it_over() {
    let db = support::db().await;
    let gate = Gate::default();
    let (cut, run) = a_stamped_run(&db, &gate, "cut").await;
    let other = support::replica(&db, "other", 2, vec![manual(&gate)]).await;
    support::wait_polls(&other, 2).await;

    cut.faults().freeze_liveness(true);
    terminate_session(&db.pool, "cut").await;
    let (_, confirmed_at) = registration(&db.pool, "cut").await;
    nudge(&db.pool, Duration::from_millis(2500)).await;
    // On a loaded machine the stop and the takeover may come later: nudge
    // on until both, for at most 7.5 s more. The outcome asserted below is
    // the same (the key ran again within 10 s of the session's last
    // confirmation, a sixth of its lease).
    let more = tokio::time::Instant::now() + Duration::from_millis(7500);
    while tokio::time::Instant::now() < more
        && !(gate.runs().all()[0].cancelled.is_some() && tenure(&db.pool).await.1 > run.fence)
    {
        nudge(&db.pool, Duration::from_millis(250)).await;
    }
    let runs = gate.runs().all();
    let first = &runs[0];
    assert_eq!(first.fence, run.fence);
    let (stopped, reason) = first
        .cancelled
        .expect("the cut replica stopped its run within the grace");
    assert_eq!(reason, CancelReason::Deadline);
    assert!(
        runs[1..].iter().all(|r| r.started >= stopped),
        "no run of the key starts before the cut run stopped: {runs:?}"
    );
    let (_, fence, acquired_at) = tenure(&db.pool).await;
    assert!(
        fence > run.fence && acquired_at < confirmed_at + chrono::Duration::seconds(10),
        "the key ran again seconds after its replica's session ended, not a lease later"
    );
    cut.faults().freeze_liveness(false);
    gate.finish_one();
    other.shutdown().await;
    cut.shutdown().await;
}

/// A replica silent for longer than the grace (stalled: its session open,
/// nothing sent, not even a release) whose session then ends is not taken
/// over at once: the grace counts from when another replica first saw the
/// session gone, so the takeover comes a grace after the end, by which time
/// the replica, which reads the error at once, has stopped its run (its own
/// deadline, counted from its last confirmation, has passed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_silent_for_a_grace_whose_session_then_ends_is_not_taken_over_at_once() {
    let db = support::db().await;
    let gate = Gate::default();
    let (stalled, run) = a_stamped_run(&db, &gate, "stalled").await;
    let other = support::replica(&db, "other", 2, vec![manual(&gate)]).await;
    support::wait_polls(&other, 2).await;

    stalled.faults().partition(true);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, confirmed_at) = registration(&db.pool, "stalled").await;
    let ended_at = server_now(&db.pool).await;
    assert!(
        ended_at - confirmed_at > chrono::Duration::seconds(1),
        "the registration is silent for longer than its grace before its session ends"
    );
    terminate_session(&db.pool, "stalled").await;
    nudge(&db.pool, Duration::from_millis(2500)).await;
    let (_, fence, acquired_at) = tenure(&db.pool).await;
    assert!(fence > run.fence, "the key was taken over after the grace");
    assert!(
        acquired_at >= ended_at + chrono::Duration::seconds(1),
        "taken over {} ms after the session ended, within the grace",
        (acquired_at - ended_at).num_milliseconds()
    );
    // The body records its stop as it sees it; on a loaded machine that can
    // come a moment after the takeover was read above.
    let runs = support::eventually(Duration::from_secs(5), || {
        let runs = gate.runs().all();
        runs[0].cancelled.is_some().then_some(runs)
    })
    .await;
    let (stopped, reason) = runs[0].cancelled.expect("the stalled replica stopped its run");
    assert_eq!(reason, CancelReason::Deadline);
    assert!(
        runs[1..].iter().all(|r| r.started >= stopped),
        "no run of the key starts before the stalled run stopped: {runs:?}"
    );
    stalled.faults().partition(false);
    gate.finish_one();
    other.shutdown().await;
    stalled.shutdown().await;
}

/// A clean restart of the server ends every liveness session and keeps the
/// registrations (an UNLOGGED table survives a clean shutdown), silent and
/// with their locks free: none of them is ever seen gone, since each is
/// older than the server's start. The run's replica is slow to register
/// again (its liveness held back for longer than a grace) while the other
/// one registers and confirms: the run keeps its lease, however hard the
/// other replica is woken, and its replica then registers and goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_takes_no_run_over_early() {
    let cluster = support::PgCluster::start_durable().expect("a cluster of its own");
    let db = leasehold_testkit::create_db(&cluster.options()).await;
    let gate = Gate::default();
    let (first, run) = a_stamped_run(&db, &gate, "first").await;
    let second = support::replica(&db, "second", 2, vec![manual(&gate)]).await;
    registered(&db.pool, "second").await;

    first.faults().freeze_liveness(true);
    cluster.stop(false).expect("stop the server");
    cluster.start_server().expect("start the server again");
    let pool = db.pool_with(2).await;
    let registrations = |at_least: i64| {
        let pool = pool.clone();
        async move {
            support::eventually_async(Duration::from_secs(60), || async {
                sqlx::query_scalar::<_, i64>("SELECT count(*) FROM leasehold_replica")
                    .fetch_one(&pool)
                    .await
                    .is_ok_and(|n| n >= at_least)
                    .then_some(())
            })
            .await;
        }
    };
    // The second registers again and confirms for more than a grace; the
    // old registrations are still there.
    registrations(3).await;
    nudge(&pool, Duration::from_millis(2500)).await;
    assert_eq!(
        tenure(&pool).await.1,
        run.fence,
        "the run keeps its lease while its replica has not registered again"
    );
    first.faults().freeze_liveness(false);
    registrations(4).await;
    nudge(&pool, Duration::from_millis(1000)).await;
    assert_eq!(
        tenure(&pool).await.1,
        run.fence,
        "the run keeps its lease over the restart"
    );
    assert_eq!(gate.runs().all().len(), 1, "no other run started");
    assert!(gate.runs().all()[0].cancelled.is_none(), "the run was not stopped");
    gate.finish_one();
    second.shutdown().await;
    first.shutdown().await;
}
