//! Connecting, and the schema: `leasehold migrate` and the check every other
//! command runs first.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};

use crate::failure::{Failure, describe};

/// Connections the CLI opens at most (its pool's size): a command runs one
/// statement at a time, the console at most this many.
pub(crate) const CONNECTIONS: u32 = 2;

/// Where the CLI connects, parsed from the URL.
pub(crate) struct Target {
    options: PgConnectOptions,
    /// `user@host:port/database`, never the password.
    pub(crate) name: String,
}

/// A connected database.
pub(crate) struct Db {
    pub(crate) pool: PgPool,
    /// `user@host:port/database`, for messages.
    pub(crate) name: String,
}

impl Target {
    pub(crate) fn parse(url: &str) -> Result<Target, Failure> {
        let scheme = url.split_once("://").map(|(scheme, _)| scheme.to_ascii_lowercase());
        if !matches!(scheme.as_deref(), Some("postgres" | "postgresql")) {
            return Err(Failure::usage(
                "invalid database URL: expected postgres://user[:password]@host[:port]/database",
            ));
        }
        let options = PgConnectOptions::from_str(url).map_err(|e| {
            // The error may quote the URL, password included: do not repeat it.
            let why = match e {
                sqlx::Error::Configuration(e) => e.to_string().replace(url, "<url>"),
                other => other.to_string().replace(url, "<url>"),
            };
            Failure::usage(format!(
                "invalid database URL ({why}); expected postgres://user[:password]@host[:port]/database"
            ))
        })?;
        let options = options.application_name("leasehold-cli");
        let host = match options.get_socket() {
            Some(socket) => socket.display().to_string(),
            None => options.get_host().to_owned(),
        };
        let name = format!(
            "{}@{}:{}/{}",
            options.get_username(),
            host,
            options.get_port(),
            options.get_database().unwrap_or(options.get_username()),
        );
        Ok(Target { options, name })
    }

    /// Opens a small pool (the CLI needs at most two connections), failing
    /// with a message that names the server when it cannot be reached.
    ///
    /// One direct connection is tried first: a pool retries refused
    /// connections until its timeout and then reports only "timed out",
    /// while an operator wants the real reason, at once.
    pub(crate) async fn connect(self, timeout: Duration) -> Result<Db, Failure> {
        let cannot = |why: String| {
            Failure::error(format!(
                "cannot connect to PostgreSQL at {}: {why}\n  check DATABASE_URL (or --database-url), \
                 that the server is running and that it accepts this user",
                self.name
            ))
        };
        match tokio::time::timeout(timeout, self.options.connect()).await {
            Ok(Ok(probe)) => {
                let _ = probe.close().await;
            }
            Ok(Err(e)) => return Err(cannot(describe(&e))),
            Err(_) => return Err(cannot(format!("no answer within {timeout:?} (--connect-timeout)"))),
        }
        let pool = PgPoolOptions::new()
            .max_connections(CONNECTIONS)
            .acquire_timeout(timeout)
            .connect_with(self.options.clone())
            .await
            .map_err(|e| cannot(describe(&e)))?;
        Ok(Db { pool, name: self.name })
    }
}

impl Db {
    /// Fails unless leasehold's schema is there and usable, naming the fix.
    pub(crate) async fn require_schema(&self) -> Result<(), Failure> {
        leasehold::check_schema(&self.pool).await.map_err(|e| self.failure(e))
    }

    /// Turns a library error into a message that names the database and,
    /// for the schema, the command that fixes it.
    pub(crate) fn failure(&self, e: leasehold::Error) -> Failure {
        match e {
            leasehold::Error::SchemaMissing => Failure::error(format!(
                "the leasehold schema is missing (or older than version {}) in {}: run `leasehold migrate` \
                 (or apply leasehold's migrations/*.sql with your own migration tool)",
                leasehold::SCHEMA_VERSION,
                self.name
            )),
            leasehold::Error::SchemaTooNew { found, supported } => Failure::error(format!(
                "the leasehold schema in {} is version {found}, newer than this CLI knows ({supported}): \
                 upgrade leasehold-cli",
                self.name
            )),
            leasehold::Error::Database(e) => {
                Failure::error(format!("database error on {}: {}", self.name, describe(&e)))
            }
            other => Failure::error(other.to_string()),
        }
    }

    /// The server's clock, for commands whose library reads carry none
    /// (no lease row to read it with).
    pub(crate) async fn server_now(&self) -> Result<chrono::DateTime<chrono::Utc>, Failure> {
        leasehold::LeaseStore::new(self.pool.clone())
            .server_now()
            .await
            .map_err(|e| self.failure(e))
    }

    /// The schema version applied (`None`: no leasehold schema).
    pub(crate) async fn schema_version(&self) -> Result<Option<i32>, Failure> {
        leasehold::schema_version(&self.pool).await.map_err(|e| self.failure(e))
    }

    /// `leasehold migrate`.
    pub(crate) async fn migrate(&self) -> Result<(), Failure> {
        let before = self.schema_version().await?;
        leasehold::migrate(&self.pool).await.map_err(|e| self.failure(e))?;
        let after = self.schema_version().await?;
        match (before, after) {
            (Some(b), Some(a)) if b == a => {
                println!(
                    "leasehold schema in {} is already at version {a}; nothing to do",
                    self.name
                )
            }
            (b, Some(a)) => println!(
                "migrated the leasehold schema in {} from {} to version {a}",
                self.name,
                b.map_or("nothing".to_owned(), |b| format!("version {b}"))
            ),
            (_, None) => {
                return Err(Failure::error(format!(
                    "migration ran but {} records no schema version",
                    self.name
                )));
            }
        }
        Ok(())
    }
}
