//! The drill with a real process: a replica stopped with `SIGSTOP` while
//! its run sits inside a fenced transaction, for much longer than its lease,
//! and a successor replica in this process.
//!
//! The stopped replica is this test binary run again as a child, with only
//! [`frozen_holder_child`] selected and the database named in its
//! environment.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::mpsc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use leasehold::{FenceGuard, Schedule};
use sqlx::PgPool;
use sqlx::postgres::PgConnectOptions;

use crate::support::{self, job, quick, replica_on};

const LEASE: Duration = Duration::from_secs(6);
/// How long the child's run keeps its fenced transaction open after its
/// write, before committing: the window the stop lands in.
const HOLD: Duration = Duration::from_secs(3);
const FREEZE: Duration = Duration::from_secs(20);
const KEY: &str = "billing";

const CHILD_DB: &str = "LEASEHOLD_FROZEN_CHILD_DB";
const CHILD_HOST: &str = "LEASEHOLD_FROZEN_CHILD_HOST";
const CHILD_PORT: &str = "LEASEHOLD_FROZEN_CHILD_PORT";
const CHILD_USER: &str = "LEASEHOLD_FROZEN_CHILD_USER";

/// The job both replicas run: one fenced write of its fence, then (in the
/// child) the transaction held open for `hold`, then COMMIT. It prints
/// `IN_TX <fence>` once the write is in, so the parent knows when to stop it,
/// and `ENDED <fence>` when the run is over, whether it returned or was
/// dropped at its deadline, so the parent knows when to look.
fn writer(pool: PgPool, hold: Duration) -> impl Fn(FenceGuard) -> support::BoxedRun + Send + Sync + 'static {
    move |guard: FenceGuard| {
        let pool = pool.clone();
        Box::pin(async move {
            let _ended = Ended(guard.fence());
            let mut tx = guard.begin_fenced(&pool).await?;
            sqlx::query("INSERT INTO frozen_write (fence, holder) VALUES ($1, $2)")
                .bind(guard.fence())
                .bind(guard.holder())
                .execute(&mut *tx)
                .await?;
            println!("IN_TX {}", guard.fence());
            tokio::time::sleep(hold).await;
            tx.commit().await?;
            println!("COMMITTED {}", guard.fence());
            Ok(())
        })
    }
}

/// Prints `ENDED <fence>` when dropped: the end of a run, however it ends.
struct Ended(i64);

impl Drop for Ended {
    fn drop(&mut self) {
        println!("ENDED {}", self.0);
    }
}

/// Not a test of its own: the stopped replica of
/// [`a_replica_stopped_inside_its_fenced_transaction_neither_stalls_its_successor_nor_commits_late`],
/// run as a child process. Does nothing unless that test started it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of frozen_holder::child_process; started by that scenario"]
async fn frozen_holder_child() {
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
    let settings = quick(Schedule::every(Duration::from_secs(1)), LEASE);
    let _rt = replica_on(
        pool.clone(),
        "frozen",
        Duration::from_millis(100),
        vec![job(KEY, settings, writer(pool, HOLD))],
    )
    .await;
    // Until the parent kills it.
    tokio::time::sleep(Duration::from_secs(300)).await;
}

/// The child replica, killed and reaped when dropped.
struct ChildReplica {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl ChildReplica {
    fn start(db: &support::TestDb) -> Self {
        let exe = std::env::current_exe().expect("test binary");
        let mut child = Command::new(exe)
            .args([
                "--exact",
                "frozen_holder::child_process::frozen_holder_child",
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
        ChildReplica { child, lines }
    }

    /// The fence of the first run that is inside its fenced transaction.
    fn in_transaction(&self, within: Duration) -> i64 {
        let deadline = std::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .expect("the child's run writes within its deadline");
            if let Some(fence) = line.strip_prefix("IN_TX ") {
                return fence.trim().parse().expect("a fence");
            }
        }
    }

    /// Waits until the child's run of `fence` is over (`ENDED <fence>`).
    fn ended(&self, fence: i64, within: Duration) {
        let deadline = std::time::Instant::now() + within;
        let ended = format!("ENDED {fence}");
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("the child's run of fence {fence} did not end within {within:?}"));
            if line.trim() == ended {
                return;
            }
        }
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} failed");
    }
}

impl Drop for ChildReplica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Server time of the write of `fence`, if it is committed.
async fn written_at(pool: &PgPool, fence: i64) -> Option<DateTime<Utc>> {
    sqlx::query_scalar("SELECT at FROM frozen_write WHERE fence = $1")
        .bind(fence)
        .fetch_optional(pool)
        .await
        .expect("read frozen_write")
}

/// A replica is stopped with `SIGSTOP` right after the write of its fenced
/// transaction, for 20 s with a 6 s lease, and resumed. A successor replica
/// takes the key once the lease expired, and its first fenced write commits
/// within one lease (+ 2 s) of that expiry — while the frozen one is still
/// stopped, so this holds for a process that never resumes, too. On resume,
/// the frozen transaction's commit fails: its write is never visible.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_stopped_inside_its_fenced_transaction_neither_stalls_its_successor_nor_commits_late() {
    let db = support::db().await;
    sqlx::raw_sql(
        "CREATE TABLE frozen_write (fence BIGINT PRIMARY KEY, holder TEXT NOT NULL,
                                    at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())",
    )
    .execute(&db.pool)
    .await
    .unwrap();

    let frozen_replica = ChildReplica::start(&db);
    let frozen = frozen_replica.in_transaction(Duration::from_secs(60));
    frozen_replica.signal("-STOP");
    let stopped = std::time::Instant::now();
    // A renewal already sent when the stop landed has committed by now.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (fence, expiry): (i64, DateTime<Utc>) =
        sqlx::query_as("SELECT fence, expires_at FROM leasehold_lease WHERE key = $1")
            .bind(KEY)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(fence, frozen, "the stopped replica still holds the key");

    let (first, mut firsts) = tokio::sync::mpsc::unbounded_channel();
    let pool = db.pool_with(4).await;
    let successor_body = {
        let write = writer(pool.clone(), Duration::ZERO);
        move |guard: FenceGuard| {
            let (first, fence, run) = (first.clone(), guard.fence(), write(guard));
            Box::pin(async move {
                run.await?;
                let _ = first.send(fence);
                Ok(())
            }) as support::BoxedRun
        }
    };
    let successor = replica_on(
        pool.clone(),
        "successor",
        Duration::from_millis(100),
        vec![job(
            KEY,
            quick(Schedule::every(Duration::from_secs(1)), LEASE),
            successor_body,
        )],
    )
    .await;
    let successor_fence = tokio::time::timeout(FREEZE, firsts.recv())
        .await
        .expect("the successor writes while the stopped replica is still stopped")
        .expect("a fence");
    assert!(
        stopped.elapsed() < FREEZE,
        "the successor wrote before the stopped replica resumed"
    );
    let wrote = written_at(&db.pool, successor_fence).await.expect("committed");
    let late = (wrote - expiry).to_std().unwrap_or(Duration::ZERO);
    println!(
        "frozen-holder drill: lease {LEASE:?}, stopped for {FREEZE:?}; successor's first fenced write committed \
         {late:?} after the stopped holder's lease expired ({:?} after the stop)",
        stopped.elapsed()
    );
    assert!(
        late <= LEASE + Duration::from_secs(2),
        "the successor's first write committed {late:?} after the stopped holder's lease expired (lease {LEASE:?})"
    );

    tokio::time::sleep(FREEZE.saturating_sub(stopped.elapsed())).await;
    frozen_replica.signal("-CONT");
    // The resumed run goes straight to its COMMIT (its sleep is over), or is
    // dropped at its deadline, maybe with its COMMIT sent: it ends, and then
    // no backend is still inside a COMMIT.
    frozen_replica.ended(frozen, Duration::from_secs(10));
    support::eventually_async(Duration::from_secs(10), || async {
        let committing: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
              WHERE datname = current_database() AND pid <> pg_backend_pid()
                AND state = 'active' AND query ILIKE 'COMMIT%'",
        )
        .fetch_one(&db.pool)
        .await
        .expect("read pg_stat_activity");
        (committing == 0).then_some(())
    })
    .await;
    assert_eq!(
        written_at(&db.pool, frozen).await,
        None,
        "the stopped replica's write became visible after its lease ended"
    );
    successor.shutdown().await;
}
