//! What a connection of leasehold's own does once, as it opens: the work
//! a session otherwise does inside its first claim.
//!
//! A session's first fence is dear: `leasehold_next_fence()` then checks
//! the server's WAL timeline (`leasehold_first_fence_of_session()`, two
//! PL/pgSQL functions compiled and planned in that backend, and the
//! `leasehold_timeline` row read), about 4 ms against 0.2 ms for every
//! later one (measured with `psql \timing` on PostgreSQL 15). On the
//! runtime's own connections that cost would land on the first claim a
//! new connection sends — the takeover in a graceful handover, or the
//! first run after a reconnect — so it is paid here instead, off the path
//! of any run.
//!
//! The same goes for the statements every run sends: the first execution
//! of a statement on a connection first parses it (a round trip of its own
//! through sqlx's statement cache, and over a millisecond of the server's
//! parse and analysis for statements of this size), so they are prepared
//! here, and a run's claim and release on a fresh connection pay only
//! their execution.
//!
//! And their plans: each is planned here for a large batch without being
//! executed (`plans::settle`), so that PostgreSQL runs its generic plan
//! from its first execution on, rather than planning every small batch
//! afresh.

use sqlx::{Connection, Executor, PgConnection};

use super::LeaseStore;
use crate::plans;

/// The statements on the path of every run: its claim (without, then
/// with, the fleet-wide limits' steps), its heartbeat, its release.
/// Prepared into the connection's statement cache, where the queries that
/// run them find them by their text, and their plans settled.
const EVERY_RUN: [&str; 4] = [
    LeaseStore::CLAIM_DUE_UNLIMITED,
    LeaseStore::RENEW_MANY,
    LeaseStore::FINISH_MANY,
    LeaseStore::CLAIM_DUE,
];

/// Prepares the statements of every run, settles their plans, and draws
/// one fence and drops it, so the session's timeline check is done.
///
/// The fence is wasted, which the lease invariants allow (fences must only
/// grow, and a sequence never repeats a value): one per connection opened,
/// and a connection lives for up to half an hour. Errors are ignored, and
/// leave the check to the session's first claim as before: a server in
/// recovery draws no fence (nor can a session there check its timeline: it
/// checks at its first fence once promoted), and `LeaseStore::connect` does
/// not check that the schema exists, so a store may open before it does.
pub(crate) async fn prepare(conn: &mut PgConnection) {
    const FIRST_FENCE: &str = "leasehold_next_fence()";
    let drawn = if prepare_every_run(conn).await {
        // The fence rides in the settling block: one round trip for both,
        // which counts on a slow link (`isolation::late_claim`).
        plans::settle(conn, &EVERY_RUN, Some(FIRST_FENCE)).await
    } else {
        conn.execute(sqlx::AssertSqlSafe(format!("SELECT {FIRST_FENCE}")))
            .await
            .map(drop)
    };
    if let Err(error) = drawn {
        tracing::debug!(%error, "a new connection left its timeline check to its first claim");
    }
}

/// Prepares the statements of every run into the connection's statement
/// cache; whether all were.
async fn prepare_every_run(conn: &mut PgConnection) -> bool {
    for statement in EVERY_RUN {
        let cached = conn.cached_statements_size();
        // Before the schema exists this fails, and the first execution
        // prepares the statement as it would have.
        if let Err(error) = conn.prepare(sqlx::SqlStr::from_static(statement)).await {
            tracing::debug!(%error, "a new connection left a statement to be prepared by its first use");
            return false;
        }
        // With the statement cache off (`statement_cache_capacity(0)`) a
        // query would not find it: nothing to gain, and what is prepared
        // stays on the server for the connection's life (sqlx offers no
        // way to close it), so stop after this first one.
        if conn.cached_statements_size() == cached {
            return false;
        }
    }
    true
}
