//! A primary with a streaming standby on loopback, and the faults of a
//! failover: cut replication, crash the primary, promote the standby, point
//! the clients at it. Shared by the failover scenario test and the chaos
//! harness's `promote` fault.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use sqlx::{Connection, PgPool};

use crate::PgCluster;
use crate::proxy::Proxy;

/// A primary with a streaming standby (a `pg_basebackup` copy), both
/// throwaway clusters on loopback, and the two proxies a failover switches:
/// `replication` carries the standby's WAL stream (blackhole it to cut
/// replication), `front` is the address clients connect to (point it at the
/// standby once promoted). The database `app` is owned by the role `app`,
/// which is not a superuser, as a service's role would be; nothing is
/// migrated.
pub struct Replicated {
    /// The primary, until [`Replicated::crash_and_promote`].
    pub primary: PgCluster,
    /// The standby; a primary on a new timeline once promoted.
    pub standby: PgCluster,
    /// The proxy the standby streams WAL through.
    pub replication: Proxy,
    /// The proxy clients connect through.
    pub front: Proxy,
}

impl Replicated {
    /// Starts the pair and returns once the standby streams. With
    /// `synchronous`, the role `app`'s commits wait for the standby
    /// (`synchronous_commit = remote_write` for the role, any standby named
    /// synchronous), as docs/operations.md recommends.
    pub async fn start(synchronous: bool) -> Result<Replicated, String> {
        let primary = tokio::task::spawn_blocking(PgCluster::start)
            .await
            .map_err(|e| format!("starting the primary: {e}"))??;
        let mut admin = PgConnection::connect_with(&primary.options())
            .await
            .map_err(|e| format!("connecting to the primary: {e}"))?;
        for sql in ["CREATE ROLE app LOGIN", "CREATE DATABASE app OWNER app"] {
            sqlx::raw_sql(sql)
                .execute(&mut admin)
                .await
                .map_err(|e| format!("{sql}: {e}"))?;
        }
        let replication = Proxy::start("127.0.0.1", primary.port())
            .await
            .map_err(|e| format!("replication proxy: {e}"))?;
        let port = replication.port;
        let standby = tokio::task::spawn_blocking(move || PgCluster::start_standby(port))
            .await
            .map_err(|e| format!("starting the standby: {e}"))??;
        if synchronous {
            // After the base backup: the standby's copy of the settings must
            // not name a synchronous standby, or, once promoted, its own
            // commits would wait for one that does not exist.
            for sql in [
                "ALTER ROLE app SET synchronous_commit = remote_write",
                "ALTER SYSTEM SET synchronous_standby_names = '*'",
                "SELECT pg_reload_conf()",
            ] {
                sqlx::raw_sql(sql)
                    .execute(&mut admin)
                    .await
                    .map_err(|e| format!("{sql}: {e}"))?;
            }
        }
        const STREAMING: &str = "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'";
        let mut streaming = 0;
        for _ in 0..100 {
            streaming = sqlx::query_scalar::<_, i64>(STREAMING)
                .fetch_one(&mut admin)
                .await
                .map_err(|e| format!("reading pg_stat_replication: {e}"))?;
            if streaming > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if streaming != 1 {
            return Err(format!(
                "the standby does not stream ({streaming} streaming standbys after 10 s)"
            ));
        }
        let front = Proxy::start("127.0.0.1", primary.port())
            .await
            .map_err(|e| format!("front proxy: {e}"))?;
        Ok(Replicated {
            primary,
            standby,
            replication,
            front,
        })
    }

    /// The superuser's options for the `postgres` database through the
    /// front proxy.
    pub fn options(&self) -> PgConnectOptions {
        self.primary.options().port(self.front.port)
    }

    /// The role `app`'s options for database `app` through the front proxy.
    pub fn app_options(&self) -> PgConnectOptions {
        self.options().username("app").database("app")
    }

    /// A pool of `max` connections through the front proxy, as `app`.
    pub fn pool(&self, max: u32) -> PgPool {
        PgPoolOptions::new()
            .max_connections(max)
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy_with(self.app_options())
    }

    /// The standby's `app` database, directly, as the superuser.
    pub async fn standby_direct(&self) -> Result<PgConnection, sqlx::Error> {
        PgConnection::connect_with(&self.standby.options().database("app")).await
    }

    /// The failover, up to the point where nothing reaches the new primary
    /// yet: the primary crashes (`-m immediate`: whatever it had not shipped
    /// is gone), the standby is promoted, and the front proxy's connections
    /// are reset. Blocks the calling thread (from async code, call it
    /// through `spawn_blocking` or `block_in_place`). [`Replicated::switch_front`]
    /// then points the clients at it.
    pub fn crash_and_promote(&self) -> Result<(), String> {
        self.primary.stop(true)?;
        self.standby.promote()?;
        self.front.reset();
        Ok(())
    }

    /// Points the front proxy at the promoted standby.
    pub fn switch_front(&self) {
        self.front.set_upstream("127.0.0.1", self.standby.port());
    }
}
