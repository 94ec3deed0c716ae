//! Throwaway PostgreSQL for leasehold's tests, examples and benchmarks.
//!
//! - [`test_db`] gives a fresh, empty database per call: on the server named
//!   by `DATABASE_URL` if it is set, otherwise on a cluster this process
//!   starts once from the PostgreSQL binaries on the machine.
//! - [`PgCluster::start`] starts a private cluster, for tests that stop,
//!   restart or kill the server.
//!
//! Clusters live in a temporary directory and are removed when dropped; a
//! watchdog process also removes them when the owning process exits without
//! dropping them (a static, a panic, a killed test binary). When the process
//! runs as root, `initdb` and `postgres` run as the `postgres` user (or
//! `nobody`) through `runuser`, since PostgreSQL refuses to run as root.
//!
//! # Databases on a `DATABASE_URL` server are dropped
//!
//! A [`TestDb`] knows what to do with its database when it goes away, its
//! [`Cleanup`]: on a server that is not a live [`PgCluster`] of this process
//! (the `DATABASE_URL` one), [`create_db`] picks [`Cleanup::DropDatabase`],
//! and dropping the `TestDb` runs `DROP DATABASE … WITH (FORCE)` (ending
//! the connections still open to it, from any pool). `Drop` cannot await,
//! so it does that on a short-lived thread with its own single-threaded
//! tokio runtime and waits for it (at most [`DROP_TIMEOUT`]); a failure is
//! printed to stderr, never a panic. Code that can await calls
//! [`TestDb::drop_database`] instead, which closes the pool first and
//! reports errors. On this process's own clusters the databases are kept
//! ([`Cleanup::Keep`]): the cluster and its directory are deleted with it,
//! and the tests do not pay for a `DROP DATABASE` each.
//!
//! # Shared scaffolding for tests and benchmarks
//!
//! - [`hostile`]: every hidden Unicode character, by class (controls,
//!   format characters, separators, variation selectors, fillers).
//! - [`wait`]: poll a condition until it holds ([`eventually`],
//!   [`wait_for`]).
//! - [`child`]: a child process's stderr kept in a file, for the message
//!   when it does not start.
//! - [`stats`]: `pg_stat_statements` of one database (reset, calls and
//!   totals of the statements matching a pattern).
//! - [`mutation`]: the clause-removal script's mutations applied on the
//!   wire, without a build per mutation.
//! - [`standby`]: a primary with a streaming standby and the steps of a
//!   failover (cut replication, crash, promote, switch the clients).
//! - `jobs` (feature `jobs`, which adds a dependency on `leasehold`):
//!   a job whose body is a closure (`ScriptedJob`), a log of its runs
//!   (`Runs`), and starting runtimes ("replicas") on a test database.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub mod child;
pub mod hostile;
#[cfg(feature = "jobs")]
pub mod jobs;
pub mod mutation;
pub mod proxy;
pub mod standby;
pub mod stats;
pub mod wait;

pub use wait::{eventually, eventually_async, wait_for, wait_for_async};

use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};

/// How to fix a machine without PostgreSQL, printed with every failure to
/// find or start one.
pub const HOW_TO_FIX: &str = "install the PostgreSQL server binaries (Debian/Ubuntu: \
     `apt-get install postgresql`; they are looked up on PATH, then under \
     /usr/lib/postgresql/*/bin), or set DATABASE_URL to a PostgreSQL server where this \
     user may CREATE DATABASE";

/// A PostgreSQL cluster in a temporary directory, owned by this process.
#[derive(Debug)]
pub struct PgCluster {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    run_as: Option<String>,
}

/// A database created for one test (or one example run). What happens to
/// the database when this goes away is its [`Cleanup`] (see the
/// [crate docs](crate#databases-on-a-database_url-server-are-dropped)).
#[derive(Debug)]
pub struct TestDb {
    /// Connection options for the database; clone them to open more pools.
    pub options: PgConnectOptions,
    /// A pool of up to 10 connections to it.
    pub pool: PgPool,
    /// The database's name.
    pub name: String,
    /// The server it was created on (the options given to [`create_db`]).
    server: PgConnectOptions,
    cleanup: Cleanup,
}

/// What happens to a [`TestDb`]'s database when the `TestDb` is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cleanup {
    /// `DROP DATABASE … WITH (FORCE)`, from a short-lived thread of its own:
    /// for databases on a server that outlives the process (`DATABASE_URL`).
    DropDatabase,
    /// Nothing: the server is a throwaway cluster, deleted with its data.
    Keep,
}

/// How long dropping a [`TestDb`] with [`Cleanup::DropDatabase`] waits for
/// the server to drop the database before it gives up (and says so on stderr).
pub const DROP_TIMEOUT: Duration = Duration::from_secs(15);

impl Cleanup {
    /// The cleanup [`create_db`] picks for databases on `server`:
    /// [`Cleanup::Keep`] when `server` is a [`PgCluster`] of this process
    /// that is still running (loopback host, one of their ports), otherwise
    /// [`Cleanup::DropDatabase`].
    pub fn for_server(server: &PgConnectOptions) -> Cleanup {
        let loopback = matches!(server.get_host(), "127.0.0.1" | "localhost" | "::1");
        let own = loopback && live_clusters().contains(&server.get_port());
        if own { Cleanup::Keep } else { Cleanup::DropDatabase }
    }
}

impl TestDb {
    /// Another pool on the same database with at most `max` connections.
    pub async fn pool_with(&self, max: u32) -> PgPool {
        PgPoolOptions::new()
            .max_connections(max)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(self.options.clone())
            .await
            .unwrap_or_else(|e| panic!("connecting to test database {}: {e}", self.name))
    }

    /// What happens to the database when this is dropped.
    pub fn cleanup(&self) -> Cleanup {
        self.cleanup
    }

    /// Closes [`TestDb::pool`] and drops the database now, whatever its
    /// [`Cleanup`] (`WITH (FORCE)`: connections of other pools are ended).
    /// For callers that can await, instead of leaving it to `Drop`.
    pub async fn drop_database(mut self) -> Result<(), sqlx::Error> {
        self.cleanup = Cleanup::Keep;
        self.pool.close().await;
        drop_database(&self.server, &self.name).await
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if self.cleanup != Cleanup::DropDatabase {
            return;
        }
        // Marks the pool closed at once (the future only waits for its
        // connections to go); the FORCE below ends them anyway.
        drop(self.pool.close());
        let (server, name) = (self.server.clone(), self.name.clone());
        let worker = std::thread::Builder::new()
            .name("testkit-drop-db".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("starting a runtime: {e}"))?;
                runtime.block_on(async {
                    match tokio::time::timeout(DROP_TIMEOUT, drop_database(&server, &name)).await {
                        Ok(result) => result.map_err(|e| e.to_string()),
                        Err(_) => Err(format!("no answer within {DROP_TIMEOUT:?}")),
                    }
                })
            });
        let outcome = match worker {
            Ok(worker) => worker.join().unwrap_or_else(|_| Err("the thread panicked".into())),
            Err(e) => Err(format!("spawning a thread: {e}")),
        };
        if let Err(e) = outcome {
            eprintln!("leasehold-testkit: could not drop test database {}: {e}", self.name);
        }
    }
}

/// `DROP DATABASE IF EXISTS "name" WITH (FORCE)` on `server`.
async fn drop_database(server: &PgConnectOptions, name: &str) -> Result<(), sqlx::Error> {
    let mut admin = server.connect().await?;
    let dropped = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await;
    let _ = admin.close().await;
    dropped.map(drop)
}

/// Ports of the clusters this process started and has not dropped.
fn live_clusters() -> std::sync::MutexGuard<'static, Vec<u16>> {
    static PORTS: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    PORTS.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

static SHARED: OnceLock<Result<PgCluster, String>> = OnceLock::new();
static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A fresh database with its own pool: on `DATABASE_URL`'s server if set,
/// otherwise on this process's shared throwaway cluster (started on first
/// use). Panics with [`HOW_TO_FIX`] when no PostgreSQL can be found.
pub async fn test_db() -> TestDb {
    let server = server_options();
    create_db(&server).await
}

/// Options for the server tests should use: `DATABASE_URL`, or the shared
/// throwaway cluster.
pub fn server_options() -> PgConnectOptions {
    if let Ok(url) = std::env::var("DATABASE_URL") {
        return PgConnectOptions::from_str(&url)
            .unwrap_or_else(|e| panic!("DATABASE_URL={url:?} is not a valid URL: {e}"));
    }
    match SHARED.get_or_init(|| PgCluster::start().map_err(|e| e.to_string())) {
        Ok(cluster) => cluster.options(),
        Err(e) => panic!("{e}"),
    }
}

/// Creates a uniquely named database on `server` and connects a pool to it;
/// the database is dropped with the [`TestDb`] when
/// [`Cleanup::for_server`] says so (a `DATABASE_URL` server).
pub async fn create_db(server: &PgConnectOptions) -> TestDb {
    create_db_with(server, Cleanup::for_server(server)).await
}

/// [`create_db`] with an explicit [`Cleanup`].
pub async fn create_db_with(server: &PgConnectOptions, cleanup: Cleanup) -> TestDb {
    let name = format!(
        "leasehold_test_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let mut admin = server
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connecting to PostgreSQL at {server:?}: {e}; {HOW_TO_FIX}"));
    // template0: nobody is ever connected to it, so concurrent CREATE
    // DATABASE calls do not trip over each other.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE DATABASE \"{name}\" TEMPLATE template0"
    )))
    .execute(&mut admin)
    .await
    .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
    let _ = admin.close().await;
    let options = server.clone().database(&name);
    let pool = PgPoolOptions::new()
        .max_connections(10)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(options.clone())
        .await
        .unwrap_or_else(|e| panic!("connecting to test database {name}: {e}"));
    TestDb {
        options,
        pool,
        name,
        server: server.clone(),
        cleanup,
    }
}

impl PgCluster {
    /// Starts a new cluster on a free loopback port. Settings favour speed
    /// over durability (`fsync=off`); use [`PgCluster::start_durable`] for
    /// benchmarks that must pay for commits.
    pub fn start() -> Result<PgCluster, String> {
        Self::start_with(false)
    }

    /// Starts a new cluster with PostgreSQL's default durability settings.
    pub fn start_durable() -> Result<PgCluster, String> {
        Self::start_with(true)
    }

    fn start_with(durable: bool) -> Result<PgCluster, String> {
        let cluster = Self::new_dir()?;
        cluster.initdb(durable)?;
        cluster.start_on_free_port()
    }

    /// Starts an asynchronous streaming standby of the server listening on
    /// loopback port `primary_port` (the primary itself, or a proxy in front
    /// of it): a `pg_basebackup -R` copy, which keeps following it.
    /// [`PgCluster::promote`] makes it a primary.
    pub fn start_standby(primary_port: u16) -> Result<PgCluster, String> {
        let cluster = Self::new_dir()?;
        let port = primary_port.to_string();
        let data = cluster.data_dir().display().to_string();
        let out = cluster
            .command("pg_basebackup")
            .args(["-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-D", &data])
            .args(["-R", "-X", "stream", "-c", "fast", "--no-sync"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running pg_basebackup: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "pg_basebackup failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        cluster.start_on_free_port()
    }

    /// Ends a standby's recovery: it becomes a primary on a new timeline.
    /// Returns once it accepts writes.
    pub fn promote(&self) -> Result<(), String> {
        self.pg_ctl(&["promote", "-w", "-t", "60"])
    }

    /// A new cluster directory owned by the user the server runs as, with
    /// its cleanup watchdog, and no data directory yet.
    fn new_dir() -> Result<PgCluster, String> {
        let bin = find_bin_dir().ok_or_else(|| format!("no PostgreSQL server binaries found: {HOW_TO_FIX}"))?;
        let run_as = if is_root() { Some(unprivileged_user()?) } else { None };
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("leasehold-pg-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let cluster = PgCluster {
            bin,
            dir,
            port: free_port()?,
            run_as,
        };
        cluster.spawn_watchdog()?;
        if let Some(user) = &cluster.run_as {
            chown_to(&cluster.dir, user)?;
        }
        Ok(cluster)
    }

    fn start_on_free_port(self) -> Result<PgCluster, String> {
        // Another process may still take the port between the check and the
        // server's bind: try a few others before giving up.
        let mut cluster = self;
        for attempt in 1.. {
            match cluster.start_server() {
                Ok(()) => break,
                Err(e) if attempt < 5 && e.contains("could not bind") => cluster.port = free_port()?,
                Err(e) => return Err(e),
            }
        }
        live_clusters().push(cluster.port);
        Ok(cluster)
    }

    /// Options to connect to the `postgres` database as the superuser.
    /// While clause removal runs a mutation ([`mutation`]), the port is
    /// that of a proxy rewriting the statements on their way.
    pub fn options(&self) -> PgConnectOptions {
        PgConnectOptions::new()
            .host("127.0.0.1")
            .port(mutation::front(self.port))
            .username("postgres")
            .database("postgres")
    }

    /// The loopback port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server. `immediate` skips the shutdown checkpoint (like a
    /// crash); otherwise it is a fast shutdown (clients are disconnected).
    pub fn stop(&self, immediate: bool) -> Result<(), String> {
        let mode = if immediate { "immediate" } else { "fast" };
        self.pg_ctl(&["stop", "-w", "-m", mode])
    }

    /// Starts the server again after [`PgCluster::stop`], on the same port.
    pub fn start_server(&self) -> Result<(), String> {
        let opts = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {}",
            self.port,
            self.dir.display()
        );
        self.pg_ctl(&[
            "start",
            "-w",
            "-t",
            "60",
            "-l",
            &self.dir.join("server.log").display().to_string(),
            "-o",
            &opts,
        ])
    }

    fn initdb(&self, durable: bool) -> Result<(), String> {
        let data = self.data_dir();
        let out = self
            .command("initdb")
            .args([
                "-D",
                &data.display().to_string(),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .output()
            .map_err(|e| format!("running initdb: {e}; {HOW_TO_FIX}"))?;
        if !out.status.success() {
            return Err(format!("initdb failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let mut conf = String::from("\nmax_connections = 400\nlog_min_messages = warning\n");
        if !durable {
            conf.push_str("fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n");
        }
        if self.bin.join("../lib/pg_stat_statements.so").exists() {
            conf.push_str("shared_preload_libraries = 'pg_stat_statements'\n");
        }
        let path = data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        text.push_str(&conf);
        std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
        let out = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("running pg_ctl: {e}"))?;
        if !out.status.success() {
            let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
            return Err(format!(
                "pg_ctl {args:?} failed: {}\n{log}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    }

    /// A command for one of the server binaries, as the unprivileged user
    /// when this process is root.
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        match &self.run_as {
            Some(user) => {
                let mut cmd = Command::new("runuser");
                cmd.args(["-u", user, "--"]).arg(path);
                cmd
            }
            None => Command::new(path),
        }
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// A detached shell that waits for this process to exit, then stops the
    /// server and removes the directory: statics are never dropped, and a
    /// test binary can be killed.
    fn spawn_watchdog(&self) -> Result<(), String> {
        let pg_ctl = self.command("pg_ctl");
        let mut stop = vec![pg_ctl.get_program().to_string_lossy().into_owned()];
        stop.extend(pg_ctl.get_args().map(|a| a.to_string_lossy().into_owned()));
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; {stop} -D '{data}' stop -m immediate >/dev/null 2>&1; rm -rf '{dir}'",
            pid = std::process::id(),
            stop = stop.iter().map(|a| format!("'{a}'")).collect::<Vec<_>>().join(" "),
            data = self.data_dir().display(),
            dir = self.dir.display(),
        );
        Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map(drop)
            .map_err(|e| format!("starting the cleanup watchdog: {e}"))
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        live_clusters().retain(|&port| port != self.port);
        let _ = self.stop(true);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The directory holding `initdb`, `pg_ctl` and `postgres`: PATH first
/// (following symlinks such as Debian's /usr/local/bin ones), then the
/// newest /usr/lib/postgresql/*/bin.
fn find_bin_dir() -> Option<PathBuf> {
    let complete = |dir: &Path| ["initdb", "pg_ctl", "postgres"].iter().all(|b| dir.join(b).exists());
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if let Ok(initdb) = std::fs::canonicalize(dir.join("initdb"))
                && let Some(real) = initdb.parent()
                && complete(real)
            {
                return Some(real.to_path_buf());
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin): &(u32, PathBuf)| complete(bin))
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}

fn unprivileged_user() -> Result<String, String> {
    for user in ["postgres", "nobody"] {
        let known = Command::new("id")
            .arg("-u")
            .arg(user)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if known {
            return Ok(user.to_owned());
        }
    }
    Err("running as root and neither a `postgres` nor a `nobody` user exists to run PostgreSQL as".to_owned())
}

fn chown_to(dir: &Path, user: &str) -> Result<(), String> {
    let status = Command::new("chown")
        .args(["-R", user])
        .arg(dir)
        .status()
        .map_err(|e| format!("chown: {e}"))?;
    status
        .success()
        .then_some(())
        .ok_or_else(|| format!("chown -R {user} {} failed", dir.display()))
}

/// A loopback port that is free now, chosen *outside* the kernel's
/// ephemeral range.
///
/// Why not `bind(0)`: that hands out a port from the ephemeral range, the
/// same range the kernel picks source ports of outgoing connections from.
/// Between choosing the port and PostgreSQL binding it (after `initdb`,
/// seconds later on a busy machine), or while a test has the server stopped
/// for a restart, any client connection of the test process (sqlx pools
/// open hundreds) can be given that very port as its source port, and the
/// server then fails to start with "Address already in use". Ports below the
/// ephemeral range are never handed out that way.
pub fn free_port() -> Result<u16, String> {
    let (ephemeral_low, _) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().filter_map(|n| n.parse::<u16>().ok());
            Some((it.next()?, it.next()?))
        })
        .unwrap_or((32768, 60999));
    const LOW: u16 = 15000;
    if ephemeral_low > LOW + 1000 {
        use std::hash::{BuildHasher, Hasher};
        for _ in 0..500 {
            let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
            hasher.write_u32(COUNTER.load(Ordering::Relaxed));
            let port = LOW + (hasher.finish() % u64::from(ephemeral_low - LOW)) as u16;
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return Ok(port);
            }
        }
    }
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("finding a free loopback port: {e}"))?;
    listener.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}
