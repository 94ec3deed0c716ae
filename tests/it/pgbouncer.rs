//! leasehold behind PgBouncer in transaction mode (docs/design.md §8).
//!
//! - The runtime keeps no session state, so claims, heartbeats, fenced
//!   transactions, fenced column writes and shutdown all work through a
//!   transaction-pooling PgBouncer — *provided* PgBouncer handles sqlx's
//!   protocol-level named prepared statements: PgBouncer ≥ 1.21 with
//!   `max_prepared_statements` > 0 (the default from 1.24 on).
//! - With an older PgBouncer (Debian 12 ships 1.18) there is no sqlx setting
//!   that makes transaction pooling safe: sqlx prepares every statement
//!   under a per-connection name (`sqlx_s_1`, …) in one protocol round trip
//!   (Parse/Describe/Sync) and binds it in the next (Bind/Execute/Sync);
//!   PgBouncer may hand the two to different server connections, where
//!   `sqlx_s_1` is another client's statement. The result is errors *and
//!   silently wrong results*. `statement_cache_capacity(0)` does not help
//!   (statements are still named, just never reused or closed), nor does
//!   `.persistent(false)` (the unnamed statement is also per server
//!   connection). [`sqlx_prepared_statements_need_pgbouncer_1_21`] shows it.
//! - Session advisory locks, the approach leasehold replaces, cannot work
//!   there at all: [`advisory_locks_do_not_survive_transaction_pooling`].
//!
//! The tests need the `pgbouncer` binary and FAIL without it:
//! `DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends pgbouncer`.
//! The runtime test needs PgBouncer ≥ 1.21: `bash scripts/chaos-ci.sh --pgbouncer-only`
//! builds 1.24 from Debian's source package into `target/pgbouncer/` when the
//! installed one is older. `PGBOUNCER=/path/to/pgbouncer` picks a binary.
//! PgBouncer is started by the test itself on a free loopback port, with a
//! temporary ini; no system service is used. Run as root, the test starts a
//! copy of the binary, in a scratch directory the `postgres` user owns, as
//! `postgres` (PgBouncer refuses root, and `postgres` may not reach the
//! original: a clone under root's home). A PgBouncer that exits or does
//! not listen fails the test with its stderr and its log.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{FenceGuard, Runtime, Schedule};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, Row};

use crate::support::{self, eventually, job, quick};

const INSTALL: &str = "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends pgbouncer";

/// A PgBouncer this test started; stopped (its whole process group) on drop.
struct Bouncer {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        // runuser forks: signal the process group so pgbouncer itself stops.
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn version_of(bin: &Path) -> Option<(u32, u32)> {
    let out = Command::new(bin).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v = text.lines().next()?.strip_prefix("PgBouncer ")?;
    let mut parts = v.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// `$PGBOUNCER` if set, else the newest pgbouncer among
/// `target/pgbouncer/bin`, `PATH` and `/usr/sbin`. Panics (the test fails)
/// when there is none.
fn pgbouncer() -> (PathBuf, (u32, u32)) {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("PGBOUNCER") {
        let p = PathBuf::from(p);
        let v = version_of(&p).unwrap_or_else(|| panic!("PGBOUNCER={} is not a working pgbouncer", p.display()));
        return (p, v);
    }
    candidates.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("target/pgbouncer/bin/pgbouncer"));
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("pgbouncer")));
    }
    candidates.push("/usr/sbin/pgbouncer".into());
    candidates
        .into_iter()
        .filter(|p| p.is_file())
        .filter_map(|p| version_of(&p).map(|v| (p, v)))
        .max_by_key(|(_, v)| *v)
        .unwrap_or_else(|| {
            panic!(
                "pgbouncer is not installed: these tests need it. Install it with\n    {INSTALL}\n\
                 (and for the runtime test PgBouncer >= 1.21: `bash scripts/chaos-ci.sh --pgbouncer-only`)"
            )
        })
}

/// The password in `DATABASE_URL`, if any, for PgBouncer's server login.
fn server_password() -> Option<String> {
    let url = std::env::var("DATABASE_URL").ok()?;
    let rest = url.split_once("://")?.1;
    let userinfo = rest.split_once('@')?.0;
    Some(userinfo.split_once(':')?.1.to_owned())
}

fn free_port() -> u16 {
    leasehold_testkit::free_port().expect("a free loopback port")
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0\n"))
        .unwrap_or(false)
}

/// Starts `bin` in transaction mode in front of `server`, with
/// `default_pool_size` server connections per database/user and `extra`
/// ini lines.
fn start(bin: &Path, server: &PgConnectOptions, pool_size: u32, extra: &str) -> Bouncer {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("leasehold-pgbouncer-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let user = server.get_username();
    std::fs::write(dir.join("userlist.txt"), format!("\"{user}\" \"\"\n")).expect("auth file");
    let password = server_password().map(|p| format!(" password={p}")).unwrap_or_default();
    let ini = format!(
        "[databases]\n\
         * = host={host} port={server_port} user={user}{password}\n\
         \n[pgbouncer]\n\
         listen_addr = 127.0.0.1\n\
         listen_port = {port}\n\
         unix_socket_dir =\n\
         auth_type = trust\n\
         auth_file = {dir}/userlist.txt\n\
         pool_mode = transaction\n\
         default_pool_size = {pool_size}\n\
         max_client_conn = 100\n\
         ignore_startup_parameters = extra_float_digits\n\
         logfile = {dir}/pgbouncer.log\n\
         {extra}\n",
        host = server.get_host(),
        server_port = server.get_port(),
        dir = dir.display(),
    );
    std::fs::write(dir.join("pgbouncer.ini"), ini).expect("ini");
    let stderr = dir.join("stderr.log");
    let mut cmd = if is_root() {
        // PgBouncer refuses to run as root ("PgBouncer should not run as
        // root"), and `postgres`, whom it runs as, may be unable to reach
        // `bin`: target/pgbouncer/ of a clone under root's `drwx------` home.
        // So it runs a copy in its scratch directory, which `postgres` owns.
        let copy = dir.join("pgbouncer");
        std::fs::copy(bin, &copy).unwrap_or_else(|e| panic!("copying {} to {}: {e}", bin.display(), copy.display()));
        let chown = Command::new("chown").args(["-R", "postgres"]).arg(&dir).output();
        match chown {
            Ok(out) if out.status.success() => {}
            Ok(out) => panic!(
                "chown -R postgres {}: {}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => panic!("running chown: {e}"),
        }
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(copy).current_dir(&dir);
        c
    } else {
        Command::new(bin)
    };
    let child = cmd
        .arg(dir.join("pgbouncer.ini"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        // What it says before its logfile is open (a binary it cannot run, a
        // bad ini) goes to stderr only.
        .stderr(leasehold_testkit::child::stderr_file(&stderr))
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
    let mut bouncer = Bouncer { child, dir, port };
    let said = |bouncer: &Bouncer| {
        format!(
            "--- its stderr\n{}\n--- its log\n{}",
            leasehold_testkit::child::tail(&stderr, 30),
            leasehold_testkit::child::tail(&bouncer.dir.join("pgbouncer.log"), 30)
        )
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = bouncer.child.try_wait() {
            panic!(
                "pgbouncer exited ({status}) before listening on port {port}:\n{}",
                said(&bouncer)
            );
        }
        if std::time::Instant::now() > deadline {
            panic!(
                "pgbouncer did not listen on port {port} within 10 s:\n{}",
                said(&bouncer)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bouncer
}

/// `options` (a database on the test server) reached through `bouncer`.
fn via(bouncer: &Bouncer, options: &PgConnectOptions) -> PgConnectOptions {
    options.clone().host("127.0.0.1").port(bouncer.port)
}

async fn pid_of(conn: &mut PgConnection) -> i32 {
    sqlx::raw_sql("SELECT pg_backend_pid()")
        .fetch_one(&mut *conn)
        .await
        .expect("pg_backend_pid")
        .get(0)
}

/// Why session advisory locks cannot work behind transaction
/// pooling: the lock belongs to whichever server connection ran
/// `pg_try_advisory_lock`; the unlock, one call later, runs on another one
/// and fails, the lock stays with a server connection that now serves
/// other clients — and another replica landing there "acquires" it too.
///
/// (Simple-protocol queries only, so this runs on any PgBouncer version.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advisory_locks_do_not_survive_transaction_pooling() {
    let (bin, version) = pgbouncer();
    let db = support::db().await;
    let bouncer = start(&bin, &db.options, 2, "");
    let through = via(&bouncer, &db.options);
    let connect = || PgConnection::connect_with(&through);

    // Two transactions force PgBouncer to open both server connections.
    let (mut b1, mut b2) = (connect().await.unwrap(), connect().await.unwrap());
    sqlx::raw_sql("BEGIN").execute(&mut b1).await.unwrap();
    sqlx::raw_sql("BEGIN").execute(&mut b2).await.unwrap();
    let (s1, s2) = (pid_of(&mut b1).await, pid_of(&mut b2).await);
    assert_ne!(s1, s2);
    sqlx::raw_sql("COMMIT").execute(&mut b1).await.unwrap(); // S1 idle, S2 busy

    // "Replica A" locks: its call can only run on S1.
    let mut replica_a = connect().await.unwrap();
    let row = sqlx::raw_sql("SELECT pg_try_advisory_lock(4242), pg_backend_pid()")
        .fetch_one(&mut replica_a)
        .await
        .unwrap();
    let (locked, lock_pid): (bool, i32) = (row.get(0), row.get(1));
    assert!(locked);
    assert_eq!(lock_pid, s1);

    // Someone else's transaction takes S1; S2 is released.
    sqlx::raw_sql("BEGIN").execute(&mut b1).await.unwrap();
    assert_eq!(pid_of(&mut b1).await, s1);
    sqlx::raw_sql("COMMIT").execute(&mut b2).await.unwrap();

    // Replica A's next call — the unlock — runs on S2: it fails.
    let row = sqlx::raw_sql("SELECT pg_advisory_unlock(4242), pg_backend_pid()")
        .fetch_one(&mut replica_a)
        .await
        .unwrap();
    let (unlocked, unlock_pid): (bool, i32) = (row.get(0), row.get(1));
    assert_eq!(unlock_pid, s2, "the unlock ran on another server connection");
    assert!(
        !unlocked,
        "pg_advisory_unlock returns false there (and a WARNING nobody reads)"
    );

    // The lock is still held, by S1, which now serves other clients...
    let held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND pid = $1 AND granted",
    )
    .bind(s1)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(held, 1, "the lock stayed on server connection {s1}");
    // ... so "replica B", whose transaction landed on S1, takes the same
    // lock while replica A believes it still holds it (it never released it).
    let again: bool = sqlx::raw_sql("SELECT pg_try_advisory_lock(4242)")
        .fetch_one(&mut b1)
        .await
        .unwrap()
        .get(0);
    assert!(again, "a second client 'acquired' the lock A holds");
    sqlx::raw_sql("COMMIT").execute(&mut b1).await.unwrap();
    println!(
        "PgBouncer {}.{}: lock on server pid {s1}, unlock ran on {s2} and returned false; \
         another client then took the same lock",
        version.0, version.1
    );
    for conn in [b1, b2, replica_a] {
        let _ = conn.close().await;
    }
}

/// Runs two different parameterized statements from 6 concurrent clients
/// and counts errors and wrong answers.
async fn mixed_statements(options: PgConnectOptions) -> (usize, usize, Vec<String>) {
    let pool = PgPoolOptions::new()
        .max_connections(6)
        .connect_with(options)
        .await
        .expect("connect through pgbouncer");
    let mut tasks = Vec::new();
    for t in 0..6_i64 {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let (mut wrong, mut errors, mut examples) = (0, 0, Vec::new());
            for i in 0..150_i64 {
                let add = (i + t) % 2 == 0;
                let sql = if add {
                    "SELECT $1::int8 + 1 AS v"
                } else {
                    "SELECT $1::int8 * 2 AS v"
                };
                match sqlx::query_scalar::<_, i64>(sql).bind(i).fetch_one(&pool).await {
                    Ok(v) if v == if add { i + 1 } else { i * 2 } => {}
                    Ok(v) => {
                        wrong += 1;
                        if examples.len() < 2 {
                            examples.push(format!("{sql} with $1 = {i} returned {v}"));
                        }
                    }
                    Err(e) => {
                        errors += 1;
                        if examples.len() < 2 {
                            examples.push(e.to_string());
                        }
                    }
                }
            }
            (wrong, errors, examples)
        }));
    }
    let (mut wrong, mut errors, mut examples) = (0, 0, Vec::new());
    for task in tasks {
        let (w, e, x) = task.await.expect("task");
        wrong += w;
        errors += e;
        examples.extend(x);
    }
    pool.close().await;
    examples.truncate(3);
    (wrong, errors, examples)
}

/// sqlx's named prepared statements through transaction pooling: broken
/// (errors and silently wrong results) unless PgBouncer tracks them
/// (≥ 1.21 with `max_prepared_statements`); with it, every answer is right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlx_prepared_statements_need_pgbouncer_1_21() {
    let (bin, version) = pgbouncer();
    let db = support::db().await;
    let untracked = if version >= (1, 21) {
        "max_prepared_statements = 0"
    } else {
        ""
    };
    let bouncer = start(&bin, &db.options, 4, untracked);
    let through = via(&bouncer, &db.options);
    for (label, options) in [
        ("default statement cache", through.clone()),
        (
            "statement_cache_capacity(0)",
            through.clone().statement_cache_capacity(0),
        ),
    ] {
        let (wrong, errors, examples) = mixed_statements(options).await;
        println!(
            "PgBouncer {}.{} without prepared-statement tracking, {label}: \
             {wrong} wrong results, {errors} errors of 900 queries; e.g. {examples:?}",
            version.0, version.1
        );
        assert!(
            wrong + errors > 0,
            "expected sqlx's named statements to cross server connections ({label})"
        );
    }
    drop(bouncer);
    if version >= (1, 21) {
        let bouncer = start(&bin, &db.options, 4, "max_prepared_statements = 200");
        let (wrong, errors, examples) = mixed_statements(via(&bouncer, &db.options)).await;
        println!(
            "PgBouncer {}.{} with max_prepared_statements = 200: {wrong} wrong, {errors} errors",
            version.0, version.1
        );
        assert_eq!((wrong, errors), (0, 0), "{examples:?}");
    }
}

/// The runtime through PgBouncer ≥ 1.21 in transaction mode: claims by two
/// replicas, heartbeats that keep a lease past its length, a fenced
/// transaction and a fenced column write, and a shutdown that releases.
/// A PgBouncer that can serve sqlx in transaction mode (≥ 1.21), or the
/// test fails saying how to get one.
fn pgbouncer_for_sqlx() -> (PathBuf, (u32, u32)) {
    let (bin, version) = pgbouncer();
    assert!(
        version >= (1, 21),
        "PgBouncer {}.{} ({}) cannot serve sqlx in transaction mode: it does not track protocol-level \
         prepared statements, so sqlx's `sqlx_s_N` statements reach other clients' server connections \
         (wrong results; see sqlx_prepared_statements_need_pgbouncer_1_21). Use PgBouncer >= 1.21 with \
         max_prepared_statements > 0: `bash scripts/chaos-ci.sh --pgbouncer-only` builds 1.24 from \
         Debian's source package into target/pgbouncer/, or set PGBOUNCER=/path/to/pgbouncer.",
        version.0,
        version.1,
        bin.display()
    );
    (bin, version)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_works_through_pgbouncer_transaction_mode() {
    let (bin, version) = pgbouncer_for_sqlx();
    let db = support::db().await;
    support::accounts(&db.pool).await;
    sqlx::raw_sql("CREATE TABLE bounced (fence BIGINT NOT NULL, holder TEXT NOT NULL, step INT NOT NULL);")
        .execute(&db.pool)
        .await
        .unwrap();
    // Fewer server connections than clients: transaction pooling at work.
    let bouncer = start(&bin, &db.options, 3, "max_prepared_statements = 200");
    let through = via(&bouncer, &db.options);
    let pool_via = || {
        PgPoolOptions::new()
            .max_connections(3)
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy_with(through.clone())
    };

    // A long job: fenced writes before and after outliving its 1.5 s lease.
    let guards: Arc<Mutex<Vec<FenceGuard>>> = Default::default();
    let long_job = |pool: sqlx::PgPool| {
        let guards = guards.clone();
        job(
            "bounced:long",
            quick(Schedule::Manual, Duration::from_millis(1500)),
            move |guard: FenceGuard| {
                let (guards, pool) = (guards.clone(), pool.clone());
                async move {
                    guards.lock().unwrap().push(guard.clone());
                    for step in 1..=2_i32 {
                        let mut tx = guard.begin_fenced(&pool).await?;
                        sqlx::query("INSERT INTO bounced (fence, holder, step) VALUES ($1, $2, $3)")
                            .bind(guard.fence())
                            .bind(guard.holder())
                            .bind(step)
                            .execute(&mut *tx)
                            .await?;
                        tx.commit().await?;
                        support::set_balance(&guard, &pool, 1, i64::from(step) * 100).await?;
                        if step == 1 {
                            tokio::select! {
                                _ = tokio::time::sleep(Duration::from_millis(3500)) => {}
                                _ = guard.cancelled() => return Err("lease lost through pgbouncer".into()),
                            }
                        }
                    }
                    Ok(())
                }
            },
        )
    };
    // A short job every second that both replicas compete for.
    let ticks: Arc<Mutex<Vec<(String, i64)>>> = Default::default();
    let tick_job = |pool: sqlx::PgPool| {
        let ticks = ticks.clone();
        job(
            "bounced:tick",
            quick(Schedule::every(Duration::from_secs(1)), Duration::from_secs(2)),
            move |guard: FenceGuard| {
                let (ticks, pool) = (ticks.clone(), pool.clone());
                async move {
                    let tx = guard.begin_fenced(&pool).await?;
                    tx.commit().await?;
                    ticks.lock().unwrap().push((guard.holder().to_owned(), guard.fence()));
                    Ok(())
                }
            },
        )
    };
    let start_replica = |holder: &'static str| {
        let pool = pool_via();
        Runtime::builder(pool.clone())
            .holder(holder)
            .poll_interval(Duration::from_millis(200))
            .register(long_job(pool.clone()))
            .register(tick_job(pool))
            .start()
    };
    // Migrations run through PgBouncer too (pg_advisory_xact_lock is
    // transaction-scoped, so it is fine there).
    let a = start_replica("bounced-a")
        .await
        .expect("runtime starts through pgbouncer");
    let b = start_replica("bounced-b")
        .await
        .expect("runtime starts through pgbouncer");
    a.trigger("bounced:long").await.unwrap();

    let expected_rows = 2;
    eventually(Duration::from_secs(20), || {
        let guards = guards.lock().unwrap();
        (guards.len() == 1 && !guards[0].is_cancelled()).then_some(())
    })
    .await;
    let fence = guards.lock().unwrap()[0].fence();
    let pool = db.pool.clone();
    let mut rows = 0;
    for _ in 0..200 {
        rows = sqlx::query_scalar::<_, i64>("SELECT count(*) FROM bounced WHERE fence = $1")
            .bind(fence)
            .fetch_one(&pool)
            .await
            .unwrap();
        if rows == expected_rows {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(rows, expected_rows, "both fenced transactions committed");
    let guard = guards.lock().unwrap()[0].clone();
    assert!(
        !guard.is_cancelled() || guard.reason() == Some(leasehold::CancelReason::Shutdown),
        "the 1.5 s lease was kept for 3.5 s by heartbeats through pgbouncer: {:?}",
        guard.reason()
    );
    assert_eq!(guards.lock().unwrap().len(), 1, "one run only");
    // The run's column write follows its second transaction's commit: give
    // it the moment it needs before reading.
    let mut balance_now = support::balance(&pool, 1).await;
    for _ in 0..100 {
        if balance_now == (200, fence) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        balance_now = support::balance(&pool, 1).await;
    }
    let (balance, last_fence) = balance_now;
    assert_eq!(
        (balance, last_fence),
        (200, fence),
        "the fenced column write went through"
    );

    // The ticks: once per slot between the two replicas, fences growing.
    let ticks = ticks.lock().unwrap().clone();
    assert!(ticks.len() >= 2, "the tick job ran through pgbouncer: {ticks:?}");
    assert!(ticks.windows(2).all(|w| w[1].1 > w[0].1), "{ticks:?}");

    // LISTEN must never go through a transaction pooler: the server
    // connection would go back to PgBouncer's pool still listening, and the
    // next client given it — replica b's start, the runs' fenced writes —
    // would fail with "unexpected message: NotificationResponse" (which is
    // how this test failed before the listener checked for it). The
    // listeners saw they are not sessions of their own and the runtimes poll.
    assert!(!a.health().listening && !b.health().listening);
    assert!(
        a.faults().pooler_found() && b.faults().pooler_found(),
        "PgBouncer refused the listeners' session mark: they gave up listening for good"
    );

    let report_a = a.shutdown().await;
    let report_b = b.shutdown().await;
    println!(
        "PgBouncer {}.{}: long run fence {fence} kept its 1.5 s lease for 3.5 s; {} ticks by {:?}; \
         shutdown {report_a:?} {report_b:?}",
        version.0,
        version.1,
        ticks.len(),
        ticks
            .iter()
            .map(|t| t.0.as_str())
            .collect::<std::collections::BTreeSet<_>>()
    );
    // Shutdown released everything: no lease is held any more.
    let held: i64 = sqlx::query_scalar("SELECT count(*) FROM leasehold_lease WHERE expires_at > clock_timestamp()")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(held, 0, "every lease was released at shutdown");
}

/// F5 through PgBouncer in transaction mode: the idle bound is set with
/// `set_config(…, true)`, local to the fenced transaction, so it holds there
/// too. A replica behind PgBouncer writes in a fenced transaction and goes
/// silent; the server ends that transaction one lease after its write, so
/// a successor's fenced transaction goes through, and the silent one's
/// COMMIT fails. PgBouncer's other clients are unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_fenced_transaction_behind_pgbouncer_is_ended_within_a_lease() {
    let (bin, version) = pgbouncer();
    assert!(
        version >= (1, 21),
        "needs PgBouncer >= 1.21: see runtime_works_through_pgbouncer_transaction_mode"
    );
    let db = support::db().await;
    support::accounts(&db.pool).await;
    let bouncer = start(&bin, &db.options, 3, "max_prepared_statements = 200");
    let pool = PgPoolOptions::new()
        .max_connections(3)
        .acquire_timeout(Duration::from_secs(10))
        .connect_lazy_with(via(&bouncer, &db.options));
    let lease = Duration::from_secs(2);
    let (a, guard) = support::held_guard_on(pool.clone(), "a", "billing", lease).await;
    let mut silent = guard.begin_fenced(&pool).await.unwrap();
    sqlx::query("UPDATE account SET balance = 666 WHERE id = 1")
        .execute(&mut *silent)
        .await
        .unwrap();
    let wrote = tokio::time::Instant::now();
    a.faults().partition(true);

    // "a"'s lease ends; the successor runs straight on the server.
    support::expire_now(&db.pool, "billing").await;
    let (b_rt, b) = support::held_guard_for(&db, "b", "billing", lease).await;
    let mut tx = tokio::time::timeout(lease * 4, b.begin_fenced(&db.pool))
        .await
        .expect("the silent transaction behind PgBouncer was ended by the server")
        .unwrap();
    assert!(
        wrote.elapsed() < lease + Duration::from_secs(2),
        "{:?}",
        wrote.elapsed()
    );
    sqlx::query("UPDATE account SET balance = 7 WHERE id = 1")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(silent.commit().await.is_err());
    assert_eq!(support::balance(&db.pool, 1).await.0, 7);
    let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&pool).await.unwrap();
    assert_eq!(one, 1, "PgBouncer still serves its other clients");
    b_rt.shutdown().await;
    a.shutdown().await;
}

/// A listener behind PgBouncer never listens, even where PgBouncer lets its
/// session mark through silently (`options` in `ignore_startup_parameters`)
/// instead of refusing it: the server connection its statements land on
/// never started with the mark, so the session check says "pooled" however
/// PgBouncer happens to hand its server connections out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_behind_pgbouncer_that_ignores_its_mark_never_listens() {
    let (bin, _) = pgbouncer_for_sqlx();
    let db = support::db().await;
    let bouncer = start(
        &bin,
        &db.options,
        2,
        "max_prepared_statements = 200\n\
         ignore_startup_parameters = extra_float_digits,options",
    );
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(10))
        .connect_lazy_with(via(&bouncer, &db.options));
    let rt = Runtime::builder(pool)
        .holder("marked")
        .poll_interval(Duration::from_secs(60))
        .register(job(
            "marked:job",
            quick(Schedule::Manual, Duration::from_secs(5)),
            |_| async { Ok(()) },
        ))
        .start()
        .await
        .expect("runtime starts through pgbouncer");

    eventually(Duration::from_secs(20), || rt.faults().pooler_found().then_some(())).await;
    assert!(
        !rt.health().listening,
        "a listener behind a transaction pooler never listens"
    );
    rt.shutdown().await;
}
