//! The fleet as the lease table shows it: which holders hold or held a
//! lease recently, and what each runs now.
//!
//! leasehold keeps no membership table: a replica is seen through the
//! leases it claims and renews. So a replica that runs nothing for a whole
//! window is not listed, and a holder is "seen" until its last tenure ended
//! (its release, or the expiry it let pass).

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::LeaseStore;
use crate::connection;
use crate::error::{Error, Result};

/// Longest window [`LeaseStore::fleet`] looks back over: a week.
const MAX_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);

/// The holders seen within a window, by the server clock.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Fleet {
    /// The server's clock when this was read.
    pub server_now: DateTime<Utc>,
    /// One entry per holder, by holder id.
    pub holders: Vec<HolderSeen>,
}

/// One holder (a replica's holder id) seen within the window.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HolderSeen {
    /// The holder id (`hostname-suffix` by default).
    pub holder: String,
    /// Keys it holds now: its runs in progress, by key.
    pub running: Vec<String>,
    /// When it was last seen holding a lease: now while it holds one,
    /// else the end of its latest tenure (release or expiry).
    pub last_seen: DateTime<Utc>,
    /// Keys whose latest tenure was this holder's, within the window.
    pub keys: u64,
}

#[derive(sqlx::FromRow)]
struct HolderRow {
    holder: String,
    running: Vec<String>,
    last_seen: DateTime<Utc>,
    keys: i64,
    server_now: DateTime<Utc>,
}

impl LeaseStore {
    /// The holders whose tenure of some key was live within `window` of the
    /// server's now (1 s to 7 days): what each runs now and when it was
    /// last seen. Registration rows that were never claimed do not count.
    /// Reads the lease table once (a sequential scan: about a millisecond
    /// per few thousand keys). Cancel-safe: one statement.
    ///
    /// ```no_run
    /// # async fn demo(store: leasehold::store::LeaseStore) -> leasehold::Result<()> {
    /// use std::time::Duration;
    /// let fleet = store.fleet(Duration::from_secs(900)).await?;
    /// for h in fleet.holders {
    ///     println!("{} runs {:?}, last seen {}", h.holder, h.running, h.last_seen);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn fleet(&self, window: Duration) -> Result<Fleet> {
        if window < Duration::from_secs(1) || window > MAX_WINDOW {
            return Err(Error::invalid(
                "fleet window",
                window,
                "look back between 1 s and 7 days",
            ));
        }
        // $1 window in seconds. The last clause is `never_claimed` (in
        // `lease/mod.rs`) in SQL: a registration row, not a tenure.
        const FLEET: &str = "
            SELECT l.holder,
                   COALESCE(array_agg(l.key ORDER BY l.key) FILTER (WHERE l.expires_at > c.now), '{}') AS running,
                   LEAST(max(l.expires_at), c.now) AS last_seen,
                   count(*) AS keys,
                   c.now AS server_now
              FROM leasehold_lease AS l, (SELECT clock_timestamp() AS now) AS c
             WHERE l.expires_at > c.now - make_interval(secs => $1)
               AND /* guard:fleet.claimed_only */ l.expires_at - l.acquired_at > interval '1 microsecond'
             GROUP BY l.holder, c.now
             ORDER BY l.holder";
        let rows: Vec<HolderRow> = connection::run!(&self.conns, |conn| sqlx::query_as(FLEET)
            .bind(window.as_secs_f64())
            .fetch_all(conn))?;
        let server_now = match rows.first() {
            Some(row) => row.server_now,
            None => self.server_now().await?,
        };
        Ok(Fleet {
            server_now,
            holders: rows
                .into_iter()
                .map(|row| HolderSeen {
                    holder: row.holder,
                    running: row.running,
                    last_seen: row.last_seen,
                    keys: u64::try_from(row.keys).unwrap_or(0),
                })
                .collect(),
        })
    }
}
