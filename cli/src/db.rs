//! Connecting, and the schema: `leasehold migrate` and the check every other
//! command runs first.

use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};

use crate::failure::{Failure, describe};
use crate::out;

/// Connections the CLI opens at most (its pool's size): a command runs one
/// statement at a time, the console at most this many.
pub(crate) const CONNECTIONS: u32 = 2;

/// Where the CLI connects: from the URL, or from the libpq variables.
pub(crate) struct Target {
    options: PgConnectOptions,
    /// `user@host:port/database`, never the password.
    pub(crate) name: String,
    /// Where the settings came from, for messages.
    from: &'static str,
}

/// The libpq variables the CLI reads (sqlx reads them as libpq does): all
/// the settings when no URL is given, the ones a URL leaves out otherwise.
pub(crate) const PG_VARS: [&str; 7] = [
    "PGHOST",
    "PGPORT",
    "PGUSER",
    "PGPASSWORD",
    "PGDATABASE",
    "PGSSLMODE",
    "PGSSLROOTCERT",
];

/// The variables that say which server: with none of them set and no URL,
/// no database was given.
const PG_SERVER_VARS: [&str; 5] = ["PGHOST", "PGHOSTADDR", "PGPORT", "PGUSER", "PGDATABASE"];

/// sqlx falls back to a default, silently, on a libpq variable it cannot
/// read (`PGSSLMODE=verify_full` would connect without checking the
/// certificate, `PGPORT=5433x` to port 5432): refuse those instead, naming
/// the variable and what it takes.
fn check_pg_vars() -> Result<(), Failure> {
    for var in PG_VARS.iter().chain(&PG_SERVER_VARS) {
        if let Err(std::env::VarError::NotUnicode(_)) = std::env::var(var) {
            return Err(Failure::usage(format!("{var} is not valid UTF-8: fix or unset it")));
        }
    }
    if let Ok(mode) = std::env::var("PGSSLMODE")
        && sqlx::postgres::PgSslMode::from_str(mode.trim()).is_err()
    {
        return Err(Failure::usage(format!(
            "PGSSLMODE={}: not an sslmode; set disable, allow, prefer, require, verify-ca or verify-full (or unset it)",
            crate::text::cell(&crate::text::cut(&mode, 100))
        )));
    }
    if let Ok(port) = std::env::var("PGPORT")
        && port.parse::<u16>().is_err()
    {
        return Err(Failure::usage(format!(
            "PGPORT={}: not a port number (1 to 65535); fix or unset it",
            crate::text::cell(&crate::text::cut(&port, 100))
        )));
    }
    Ok(())
}

/// Arguments of `leasehold migrate`.
#[derive(Debug, clap::Args)]
pub(crate) struct MigrateArgs {
    /// Print the outcome as JSON on standard output.
    #[arg(long)]
    json: bool,
}

/// `migrate --json`.
#[derive(Serialize)]
struct MigrateJson<'a> {
    /// `user@host:port/database`.
    database: &'a str,
    /// The schema version before (`null`: no leasehold schema).
    from: Option<i32>,
    /// The schema version now.
    to: i32,
    /// Whether a migration was applied.
    changed: bool,
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
        // A URL's missing parts come from the libpq variables.
        check_pg_vars()?;
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
        Ok(Target::new(options, "DATABASE_URL (or --database-url)"))
    }

    /// From the libpq variables (`PGHOST`, `PGPORT`, `PGUSER`,
    /// `PGPASSWORD`, `PGDATABASE`, `PGSSLMODE`, `PGSSLROOTCERT`; a password
    /// file as libpq reads it), for when no URL is given; `None` when none of
    /// them says which server.
    pub(crate) fn from_pg_vars() -> Result<Option<Target>, Failure> {
        if !PG_SERVER_VARS.iter().any(|var| std::env::var_os(var).is_some()) {
            return Ok(None);
        }
        check_pg_vars()?;
        let mut options = PgConnectOptions::new();
        // libpq takes a PGHOST that starts with `/` for a socket directory.
        if let Ok(host) = std::env::var("PGHOST")
            && host.starts_with('/')
            && std::env::var_os("PGHOSTADDR").is_none()
        {
            options = options.socket(host);
        }
        Ok(Some(Target::new(
            options,
            "the PG* variables (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE)",
        )))
    }

    fn new(options: PgConnectOptions, from: &'static str) -> Target {
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
        Target { options, name, from }
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
                "cannot connect to PostgreSQL at {}: {why}\n  check {}, that the server is running and that it \
                 accepts this user",
                self.name, self.from
            ))
        };
        match tokio::time::timeout(timeout, self.options.connect()).await {
            Ok(Ok(probe)) => {
                let _ = probe.close().await;
            }
            Ok(Err(e)) if tls_failed(&e) => {
                return Err(cannot(format!(
                    "{}\n  TLS failed: sslmode=verify-ca and verify-full check the server's certificate against \
                     sslrootcert=PATH in the URL (the CA that signed it) or else the system's trusted roots; \
                     verify-full also needs the URL's host in the certificate; sslmode=require needs a server with \
                     ssl = on",
                    describe(&e)
                )));
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

/// Whether a connection failed in the TLS handshake (an untrusted
/// certificate, a host name it does not name, a server without TLS)
/// rather than for another reason.
fn tls_failed(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Tls(_) => true,
        sqlx::Error::Io(io) => io.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()),
        _ => false,
    }
}

impl Db {
    /// Fails unless leasehold's schema is there and usable, naming the fix.
    pub(crate) async fn require_schema(&self) -> Result<(), Failure> {
        leasehold::schema::check_schema(&self.pool)
            .await
            .map_err(|e| self.failure(e))
    }

    /// Turns a library error into a message that names the database and,
    /// for the schema, the command that fixes it.
    pub(crate) fn failure(&self, e: leasehold::Error) -> Failure {
        match e {
            leasehold::Error::SchemaMissing => Failure::error(format!(
                "the leasehold schema is missing (or older than version {}) in {}: run `leasehold migrate` \
                 (or apply leasehold's migrations/*.sql with your own migration tool)",
                leasehold::schema::SCHEMA_VERSION,
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
        leasehold::store::LeaseStore::new(self.pool.clone())
            .server_now()
            .await
            .map_err(|e| self.failure(e))
    }

    /// The schema version applied (`None`: no leasehold schema).
    pub(crate) async fn schema_version(&self) -> Result<Option<i32>, Failure> {
        leasehold::schema::schema_version(&self.pool)
            .await
            .map_err(|e| self.failure(e))
    }

    /// `leasehold migrate`.
    pub(crate) async fn migrate(&self, args: &MigrateArgs) -> Result<(), Failure> {
        let before = self.schema_version().await?;
        leasehold::migrate(&self.pool).await.map_err(|e| self.failure(e))?;
        let Some(after) = self.schema_version().await? else {
            return Err(Failure::error(format!(
                "migration ran but {} records no schema version",
                self.name
            )));
        };
        if args.json {
            return out::json(&MigrateJson {
                database: &self.name,
                from: before,
                to: after,
                changed: before != Some(after),
            });
        }
        match before {
            Some(b) if b == after => out::line(format_args!(
                "leasehold schema in {} is already at version {after}; nothing to do",
                self.name
            )),
            b => out::line(format_args!(
                "migrated the leasehold schema in {} from {} to version {after}",
                self.name,
                b.map_or("nothing".to_owned(), |b| format!("version {b}"))
            )),
        }
    }
}
