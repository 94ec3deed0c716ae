//! The replicas' database backends as `pg_stat_activity` on the database
//! under test shows them: watched during the run for transactions nobody
//! owns, and scanned at the end for any left idle in transaction
//! (`poison.rs` says how one gets there).

use std::collections::BTreeMap;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::replica::now_us;

/// One backend of a replica's pool (`application_name` `chaos-r<n>`, set
/// by `replica.rs`, on the database the harness created).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Backend {
    pub pid: i32,
    pub application_name: String,
    pub state: String,
    /// The last statement the backend ran (for an idle one: the statement
    /// before it went idle).
    pub query: String,
    pub state_change: String,
    pub xact_start: String,
    /// The same, in µs since the epoch on the server clock (0 outside one).
    pub xact_start_us: i64,
    /// How long its transaction has been open, in ms (0 outside one).
    pub xact_ms: i64,
}

impl Backend {
    /// `idle in transaction` or `idle in transaction (aborted)`.
    pub fn idle_in_transaction(&self) -> bool {
        self.state.starts_with("idle in transaction")
    }

    /// One line for the verdict: pid, state, query, state_change.
    pub fn describe(&self) -> String {
        let query: String = self.query.split_whitespace().collect::<Vec<_>>().join(" ");
        let query: String = query.chars().take(120).collect();
        format!(
            "pid {} ({}) {:?} since {} (transaction open {:.1} s since {}), last query: {query}",
            self.pid,
            self.application_name,
            self.state,
            self.state_change,
            self.xact_ms as f64 / 1000.0,
            self.xact_start
        )
    }
}

/// What the final scan saw.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// Every replica backend on the database under test.
    pub backends: Vec<Backend>,
    /// The ones idle in transaction whose transaction has been open for at
    /// least the threshold given to [`scan`].
    pub stuck: Vec<Backend>,
}

/// Scans the replicas' backends. A backend counts as stuck when it is idle
/// in transaction (aborted or not) and its transaction has been open for at
/// least `older_than`: the jobs' own fenced transactions are three
/// statements on an idle pool and last milliseconds, so with `older_than`
/// of a lease, after a quiet tail, a stuck backend is a transaction that
/// nobody owns — not one caught between two of its statements.
pub async fn scan(pool: &PgPool, older_than: Duration) -> Result<Scan, sqlx::Error> {
    let backends: Vec<Backend> = sqlx::query_as(
        "SELECT pid, application_name, coalesce(state, '') AS state, coalesce(query, '') AS query,
                coalesce(state_change::text, '') AS state_change, coalesce(xact_start::text, '') AS xact_start,
                coalesce((extract(epoch FROM xact_start) * 1000000)::int8, 0) AS xact_start_us,
                coalesce((extract(epoch FROM clock_timestamp() - xact_start) * 1000)::int8, 0) AS xact_ms
           FROM pg_stat_activity
          WHERE datname = current_database() AND application_name LIKE 'chaos-r%'
            AND backend_type = 'client backend'
          ORDER BY pid",
    )
    .fetch_all(pool)
    .await?;
    let threshold = older_than.as_millis() as i64;
    let stuck = backends
        .iter()
        .filter(|b| b.idle_in_transaction() && b.xact_ms >= threshold)
        .cloned()
        .collect();
    Ok(Scan { backends, stuck })
}

/// Statements that leasehold and the jobs run on their own (autocommit),
/// never inside a transaction: a backend idle in transaction right after
/// one of them ran it inside a transaction that something else opened and
/// nobody owns. (The jobs' fenced transactions are `BEGIN`, the fence
/// statement on `leasehold_fence`, the ledger `INSERT`, `COMMIT`: a backend
/// between two of those is legitimately idle in transaction. The fence
/// statement reads `leasehold_lease` to check that its tenure is live, so
/// it is told apart by [`FENCE_ADVANCE`].)
const AUTOCOMMIT: [&str; 2] = ["leasehold_lease", "chaos_counter"];

/// The fence advance, the first statement of every fenced transaction.
const FENCE_ADVANCE: &str = "INSERT INTO leasehold_fence";

/// The backend's last statement was one of the [`AUTOCOMMIT`] ones.
fn autocommit(query: &str) -> bool {
    AUTOCOMMIT.iter().any(|table| query.contains(table)) && !query.contains(FENCE_ADVANCE)
}

/// One transaction seen idle in transaction after an autocommit statement.
#[derive(Debug, Clone)]
pub struct Orphan {
    pub pid: i32,
    pub application_name: String,
    /// Server clock, µs since the epoch.
    pub xact_start: i64,
    /// Local clock, µs since the epoch (the orchestrator converts both to
    /// the server's).
    pub first_seen: i64,
    pub last_seen: i64,
    pub samples: usize,
    /// The autocommit statements seen as its last statement, in order.
    pub queries: Vec<String>,
}

impl Orphan {
    pub fn describe(&self, t: impl Fn(i64) -> String) -> String {
        format!(
            "pid {} ({}): transaction open since {}, seen idle in it after autocommit statements from {} to {} ({} samples): {}",
            self.pid,
            self.application_name,
            t(self.xact_start),
            t(self.first_seen),
            t(self.last_seen),
            self.samples,
            self.queries.join(" | ")
        )
    }
}

/// The watcher started by [`watch`].
pub struct Watcher {
    stop: watch::Sender<bool>,
    task: JoinHandle<(Vec<Orphan>, usize)>,
}

impl Watcher {
    /// Stops watching; returns the orphans seen (by pid and transaction
    /// start) and how many samples were taken.
    pub async fn finish(self) -> (Vec<Orphan>, usize) {
        self.stop.send_replace(true);
        self.task.await.unwrap_or_default()
    }
}

/// Samples the replicas' backends every `every` until [`Watcher::finish`],
/// and remembers each transaction seen idle in transaction after one of
/// the [`AUTOCOMMIT`] statements. A failed sample (PostgreSQL restarting)
/// is skipped.
pub fn watch(pool: PgPool, every: Duration) -> Watcher {
    let (stop, mut stopped) = watch::channel(false);
    let task = tokio::spawn(async move {
        let mut seen: BTreeMap<(i32, i64), Orphan> = BTreeMap::new();
        let mut samples = 0;
        loop {
            let sample = tokio::time::timeout(every.max(Duration::from_secs(1)), scan(&pool, Duration::ZERO)).await;
            if let Ok(Ok(found)) = sample {
                samples += 1;
                let now = now_us();
                for b in found.stuck {
                    let query: String = b.query.split_whitespace().collect::<Vec<_>>().join(" ");
                    if !autocommit(&query) {
                        continue;
                    }
                    let query: String = query.chars().take(60).collect();
                    let orphan = seen.entry((b.pid, b.xact_start_us)).or_insert_with(|| Orphan {
                        pid: b.pid,
                        application_name: b.application_name.clone(),
                        xact_start: b.xact_start_us,
                        first_seen: now,
                        last_seen: now,
                        samples: 0,
                        queries: Vec::new(),
                    });
                    orphan.last_seen = now;
                    orphan.samples += 1;
                    if orphan.queries.last() != Some(&query) {
                        orphan.queries.push(query);
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stopped.changed() => break,
            }
        }
        let mut orphans: Vec<Orphan> = seen.into_values().collect();
        orphans.sort_by_key(|o| o.first_seen);
        (orphans, samples)
    });
    Watcher { stop, task }
}

#[cfg(test)]
mod tests {
    use super::autocommit;

    /// A backend idle in transaction after the fence advance is inside a
    /// fenced transaction, as it should be, although the advance reads
    /// `leasehold_lease`; after a renewal, it is inside one nobody owns.
    #[test]
    fn the_fence_advance_is_not_an_autocommit_statement() {
        let advance = "WITH live AS ( SELECT set_config('idle_in_transaction_session_timeout', $4::text, true) \
                       FROM leasehold_lease AS l WHERE l.key = $3 ) INSERT INTO leasehold_fence AS f \
                       (resource, last_fence, lease_key) SELECT $1, $2, $3 FROM live";
        assert!(!autocommit(advance));
        assert!(autocommit(
            "UPDATE leasehold_lease AS l SET expires_at = clock_timestamp()"
        ));
        assert!(autocommit("UPDATE \"chaos_counter\" SET \"last_step\" = $2"));
        assert!(!autocommit("INSERT INTO chaos_ledger (key) VALUES ($1)"));
    }
}
