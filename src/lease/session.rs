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

use sqlx::{Executor, PgConnection};

/// Draws one fence and drops it, so the session's timeline check is done.
///
/// The fence is wasted, which the lease invariants allow (fences must only
/// grow, and a sequence never repeats a value): one per connection opened,
/// and a connection lives for up to half an hour. Errors are ignored, and
/// leave the check to the session's first claim as before: a server in
/// recovery draws no fence (nor can a session there check its timeline: it
/// checks at its first fence once promoted), and `LeaseStore::connect` does
/// not check that the schema exists, so a store may open before it does.
pub(crate) async fn prepare(conn: &mut PgConnection) {
    const FIRST_FENCE: &str = "SELECT leasehold_next_fence()";
    if let Err(error) = conn.execute(FIRST_FENCE).await {
        tracing::debug!(%error, "a new connection left its timeline check to its first claim");
    }
}
