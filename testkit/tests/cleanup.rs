//! A `TestDb` on a server that outlives the process (`DATABASE_URL`) drops
//! its database when it goes away; on the process's own throwaway cluster
//! it does not. A cluster started here plays the `DATABASE_URL` server.

use std::process::Command;

use leasehold_testkit::{Cleanup, PgCluster, TestDb, create_db, create_db_with, test_db};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};

/// Whether `name` is in `pg_database` on `server`.
async fn exists(server: &PgConnectOptions, name: &str) -> bool {
    let mut conn = server.connect().await.expect("connect to the server");
    let found: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(name)
        .fetch_one(&mut conn)
        .await
        .expect("read pg_database");
    let _ = conn.close().await;
    found
}

async fn cluster() -> PgCluster {
    tokio::task::spawn_blocking(PgCluster::start)
        .await
        .expect("start task")
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Opens a second pool and checks a connection out of it, so the drop has
/// to end connections that are still open.
async fn busy(db: &TestDb) -> sqlx::pool::PoolConnection<sqlx::Postgres> {
    let pool = db.pool_with(2).await;
    let mut conn = pool.acquire().await.expect("acquire");
    sqlx::query("SELECT 1").execute(&mut *conn).await.expect("SELECT 1");
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_cluster_keeps_any_other_server_drops() {
    let cluster = cluster().await;
    let server = cluster.options();
    assert_eq!(Cleanup::for_server(&server), Cleanup::Keep);
    assert_eq!(
        Cleanup::for_server(&server.clone().host("db.example.com")),
        Cleanup::DropDatabase
    );
    let port = cluster.port();
    drop(cluster);
    let gone = PgConnectOptions::new().host("127.0.0.1").port(port);
    assert_eq!(
        Cleanup::for_server(&gone),
        Cleanup::DropDatabase,
        "a dropped cluster is no longer own"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_test_db_drops_its_database_on_an_outside_server() {
    let cluster = cluster().await;
    let server = cluster.options();

    // As on a DATABASE_URL server: dropped with the TestDb, open connections and all.
    let db = create_db_with(&server, Cleanup::DropDatabase).await;
    let name = db.name.clone();
    assert!(exists(&server, &name).await);
    let conn = busy(&db).await;
    drop(db);
    assert!(!exists(&server, &name).await, "{name} is still in pg_database");
    drop(conn);

    // The explicit, awaited way.
    let db = create_db_with(&server, Cleanup::DropDatabase).await;
    let name = db.name.clone();
    db.drop_database().await.expect("drop_database");
    assert!(!exists(&server, &name).await, "{name} is still in pg_database");

    // On the process's own cluster: kept (the cluster goes away with its data).
    let db = create_db(&server).await;
    assert_eq!(db.cleanup(), Cleanup::Keep);
    let name = db.name.clone();
    drop(db);
    assert!(
        exists(&server, &name).await,
        "{name} was dropped from a throwaway cluster"
    );
    // drop_database drops it whatever the cleanup.
    let db = create_db(&server).await;
    let name = db.name.clone();
    db.drop_database().await.expect("drop_database");
    assert!(!exists(&server, &name).await);
}

/// Drop runs its own runtime on its own thread: it also works from a
/// current-thread runtime, which it blocks meanwhile.
#[tokio::test]
async fn drop_works_from_a_current_thread_runtime() {
    let cluster = cluster().await;
    let server = cluster.options();
    let db = create_db_with(&server, Cleanup::DropDatabase).await;
    let name = db.name.clone();
    let _conn = busy(&db).await;
    drop(db);
    assert!(!exists(&server, &name).await, "{name} is still in pg_database");
}

const CHILD: &str = "LEASEHOLD_TESTKIT_CLEANUP_CHILD";

/// The real path: this test binary runs [`child_creates_a_test_db`] again
/// in a process of its own with `DATABASE_URL` naming a cluster started
/// here; the child's `test_db()` database must be gone when it exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_db_on_database_url_is_dropped_when_the_test_ends() {
    let cluster = cluster().await;
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", cluster.port());
    let exe = std::env::current_exe().expect("current_exe");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(exe)
            .args([
                "--exact",
                "child_creates_a_test_db",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("DATABASE_URL", &url)
            .env(CHILD, "1")
            .output()
            .expect("run the child test")
    })
    .await
    .expect("child task");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let name = stdout
        .lines()
        .find_map(|l| l.split_once("created database ").map(|(_, name)| name.trim()))
        .unwrap_or_else(|| panic!("the child did not say which database it created: {stdout}"))
        .to_owned();
    assert!(name.starts_with("leasehold_test_"), "{name}");
    assert!(
        !exists(&cluster.options(), &name).await,
        "{name} is still in pg_database"
    );
}

/// Run by [`test_db_on_database_url_is_dropped_when_the_test_ends`] only.
#[tokio::test]
#[ignore = "run by test_db_on_database_url_is_dropped_when_the_test_ends"]
async fn child_creates_a_test_db() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let db = test_db().await;
    assert_eq!(db.cleanup(), Cleanup::DropDatabase);
    let server = leasehold_testkit::server_options();
    assert!(exists(&server, &db.name).await);
    println!("created database {}", db.name);
}
